"""Hostile KRaft frames against a live quorum of three controller processes on 127.0.0.1.

A KRaft peer is not authenticated: anyone who can reach a controller's port can
send it a Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch or FetchSnapshot. The
frames here are built by hand (tests/e2e/raft_frames.py), with the cluster id a
client learns from DescribeCluster, and each is sent to both followers and to
the leader. Each test is one `Round`; after it:

- every process is alive and every answer had the exact Kafka error code the
  test names (top-level for a refusal, in Kafka's error shape with no
  partitions; per partition for a well-formed frame the node answers);
- each refusal is in the receiving node's log (`raft.request_refused`, or
  `raft.conflicting_leader` for a second leader claimed for the current epoch)
  with its reason, and the node's `kraftwerk_raft_refused_messages` counter
  moved by exactly the frames that node refused;
- no node changed epoch or leader (each node's own `kraftwerk_raft_epoch`, no
  role-change event in any log, and DescribeQuorum). Epoch 2**31 - 1 is out of
  range; 2**31 - 2 is in range but more than MAX_EPOCH_JUMP above the node's
  epoch, so it is refused too; a well-formed higher epoch within that bound,
  from a voter that does not lead, is answered and ignored while the leader is
  live (the disruptive-server rule);
- the quorum still commits: a metadata.version write is acknowledged and every
  voter holds it, and no voter's log end offset reported by the leader is
  beyond the leader's own (a huge fetch offset was not believed).

Then two long polls in one replica's name must both be answered, and the last
test stops every node, starts them all again, and needs a leader whose epoch is
close to the old one and a committed write.

The module shares one quorum (as a real one would take every frame in a row).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest

from protocol.errors import ErrorCode
from server.raft.core import MAX_EPOCH_JUMP
from server.raft.messages import ApiKey

from . import raft_frames as frames
from .quorum_helpers import MV, UPGRADE, LocalQuorum, poll_until, read_events

pytestmark = pytest.mark.e2e

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# The largest epoch a message may carry: every epoch must survive one increment in int32.
MAX_EPOCH = INT32_MAX - 1
NON_VOTER = 99
# A long poll the leader may park (it caps the wait at its own fetch.max.wait, 500 ms).
PARKED_FETCH_WAIT_MS = 500
MV_LEVEL = 20  # 3.8-IV0, the level LocalQuorum formats at: rewriting it commits a record
# A cluster id of the right shape that is not this cluster's.
FOREIGN_CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAA"
OTHER_TOPIC = "__consumer_offsets"

LEADER_TIMEOUT_S = 15.0
WRITE_TIMEOUT_S = 15.0
LOG_TIMEOUT_S = 5.0
# A restart elects in the persisted epoch plus a few at most (pre-vote keeps
# failed rounds from bumping it); anything near this bound is an epoch jump.
RESTART_EPOCH_SLACK = 100

REFUSED = "raft.request_refused"
CONFLICTING = "raft.conflicting_leader"
REFUSAL_EVENTS = (REFUSED, CONFLICTING)
ROLE_EVENTS = ("raft.became_leader", "raft.became_follower", "raft.became_unattached", "raft.resigned",
               "raft.election_started", "raft.pre_vote_started", "raft.epoch_exhausted")
REFUSED_COUNTER = "kraftwerk_raft_refused_messages_total"
EPOCH_GAUGE = "kraftwerk_raft_epoch"
LEADER_GAUGE = "kraftwerk_raft_leader_id"

VOTE = ApiKey.VOTE
BEGIN = ApiKey.BEGIN_QUORUM_EPOCH
END = ApiKey.END_QUORUM_EPOCH
FETCH = ApiKey.FETCH
SNAPSHOT = ApiKey.FETCH_SNAPSHOT


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    quorum = LocalQuorum(tmp_path_factory.mktemp("hostile-raft"), extra={"kraftwerk.metrics.port": "0"})
    try:
        quorum.start_all()
        quorum.wait_for_leader(LEADER_TIMEOUT_S)
        yield quorum
    finally:
        quorum.stop_all()


@pytest.fixture(scope="module")
def cluster_id(quorum) -> str:
    return frames.cluster_id_of(quorum.address(min(quorum.specs)))


def refusal_counters(quorum: LocalQuorum, node_id: int) -> Counter:
    """Node `node_id`'s request-refusal counter, by (event, error name)."""
    samples = frames.scrape(quorum.specs[node_id].log_path)
    counts: Counter = Counter()
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if name == REFUSED_COUNTER and labels["event"] in REFUSAL_EVENTS:
            counts[(labels["event"], labels["error"])] = int(value)
    return counts


@dataclass
class Expected:
    """The refusals one node must have logged: (event, api key, error name) -> count,
    and a fragment of each refusal's reason."""

    counts: Counter = field(default_factory=Counter)
    reasons: list[tuple[tuple[str, int, str], str]] = field(default_factory=list)


class Round:
    """One group of hostile frames against every node: the quorum before, each answer
    as it arrives, and the checks of the module docstring after."""

    def __init__(self, quorum: LocalQuorum) -> None:
        self.quorum = quorum
        view = quorum.wait_for_leader(LEADER_TIMEOUT_S)
        self.leader: int = view.leader_id
        self.epoch: int = view.leader_epoch
        self.high_watermark: int = view.high_watermark
        self.voters = sorted(quorum.specs)
        self.followers = [node for node in self.voters if node != self.leader]
        self.log_marks = {node: quorum.specs[node].log_path.stat().st_size for node in self.voters}
        self.counters_before = {node: refusal_counters(quorum, node) for node in self.voters}
        self.expected = {node: Expected() for node in self.voters}

    @property
    def targets(self) -> list[int]:
        """The followers, then the leader."""
        return [*self.followers, self.leader]

    def other_voter(self, target: int) -> int:
        """A voter that is neither `target` nor the leader (a follower, for every target)."""
        return next(node for node in self.followers if node != target)

    def others(self, target: int) -> tuple[int, int]:
        """The two voters other than `target`."""
        first, second = (node for node in self.voters if node != target)
        return first, second

    def _send(self, target: int, api_key: ApiKey, body: frames.Body):
        return frames.send(self.quorum.address(target), api_key, body)

    def refused(self, target: int, api_key: ApiKey, body: frames.Body, error: ErrorCode,
                reason: str = "", event: str = REFUSED) -> None:
        """The frame is refused with top-level `error`, in the API's error shape."""
        response = self._send(target, api_key, body)
        topics = response.responses if api_key == FETCH else response.topics
        assert (response.error_code, len(topics)) == (error, 0), \
            f"{api_key.name} to node {target}: expected {error.name}, got {response}\nframe: {body}"
        key = (event, int(api_key), error.name)
        self.expected[target].counts[key] += 1
        if reason:
            self.expected[target].reasons.append((key, reason))

    def answered(self, target: int, api_key: ApiKey, body: frames.Body, partition_error: ErrorCode):
        """The frame is answered without a top-level error, with `partition_error` and
        the leader and epoch of before; the partition is returned for more checks."""
        response = self._send(target, api_key, body)
        context = f"{api_key.name} to node {target}: {response}\nframe: {body}"
        assert response.error_code == ErrorCode.NONE, context
        partition = frames.only_partition(api_key, response)
        assert partition.error_code == partition_error, f"expected {partition_error.name}; {context}"
        if api_key in (FETCH, SNAPSHOT):
            leader = (partition.current_leader.leader_id, partition.current_leader.leader_epoch)
        else:
            leader = (partition.leader_id, partition.leader_epoch)
        assert leader == (self.leader, self.epoch), context
        return partition

    def ignored(self, target: int, api_key: ApiKey, body: frames.Body) -> None:
        """A well-formed frame the node must answer and not act on: no vote, the old leader."""
        partition = self.answered(target, api_key, body, ErrorCode.NONE)
        if api_key == VOTE:
            assert partition.vote_granted is False, f"node {target} granted a vote: {body}"

    # -- after the frames -----------------------------------------------------------

    def _logged(self, node: int) -> list[dict]:
        path = self.quorum.specs[node].log_path
        return [entry for name in REFUSAL_EVENTS for entry in read_events(path, name, self.log_marks[node])]

    def check_after(self) -> None:
        quorum = self.quorum
        quorum.assert_alive()
        for node in self.voters:
            self._check_refusals_recorded(node)
        self._check_no_epoch_change()
        view = quorum.wait_for_leader(LEADER_TIMEOUT_S)
        assert (view.leader_id, view.leader_epoch) == (self.leader, self.epoch), view
        check_committed_write(quorum, self.high_watermark, (self.leader, self.epoch))
        # The write itself changed no epoch either.
        self._check_no_epoch_change()

    def _check_refusals_recorded(self, node: int) -> None:
        expected = self.expected[node]
        total = sum(expected.counts.values())

        def probe():
            logged = self._logged(node)
            return logged if len(logged) >= total else None

        # Each refusal is logged before it is answered; the poll covers the file write.
        logged = poll_until(f"{total} refusals in controller {node}'s log", probe, LOG_TIMEOUT_S)
        seen = Counter((entry["event"], entry["api_key"], entry["error"]) for entry in logged)
        assert seen == expected.counts, f"controller {node} logged {seen}, expected {expected.counts}"
        for key, fragment in expected.reasons:
            reasons = [entry["reason"] for entry in logged
                       if (entry["event"], entry["api_key"], entry["error"]) == key]
            assert any(fragment in reason for reason in reasons), f"{fragment!r} not in {reasons}"
        moved = refusal_counters(self.quorum, node)
        moved.subtract(self.counters_before[node])
        by_label: Counter = Counter()
        for (event, _api_key, error), count in expected.counts.items():
            by_label[(event, error)] += count
        assert +moved == by_label, f"controller {node}'s {REFUSED_COUNTER} moved by {+moved}, expected {by_label}"

    def _check_no_epoch_change(self) -> None:
        for node in self.voters:
            path = self.quorum.specs[node].log_path
            changes = [entry for name in ROLE_EVENTS for entry in read_events(path, name, self.log_marks[node])]
            assert not changes, f"controller {node} changed role or epoch: {changes}"
            samples = frames.scrape(path)
            own = (samples[(EPOCH_GAUGE, ())], samples[(LEADER_GAUGE, ())])
            assert own == (self.epoch, self.leader), \
                f"controller {node} is at (epoch, leader) {own}, was {(self.epoch, self.leader)}"


def check_committed_write(quorum: LocalQuorum, high_watermark_before: int, leadership: tuple[int, int]) -> None:
    """A metadata.version write is acknowledged by the leader and held by every voter."""
    quorum.update_on_leader(MV, MV_LEVEL, UPGRADE, WRITE_TIMEOUT_S)
    view = quorum.wait_until_replicated(WRITE_TIMEOUT_S)
    assert (view.leader_id, view.leader_epoch) == leadership, view
    assert view.high_watermark > high_watermark_before, (view.high_watermark, high_watermark_before)
    ends = {replica.replica_id: replica.log_end_offset for replica in view.current_voters}
    # A voter's end offset as the leader tracks it never exceeds the leader's own.
    assert max(ends.values()) == ends[view.leader_id], ends


# ---------------------------------------------------------------------------
# Epochs at and past the int32 boundary
# ---------------------------------------------------------------------------

def test_vote_past_the_maximum_epoch_is_refused_and_a_disruptive_one_ignored(quorum, cluster_id):
    r = Round(quorum)
    for target in r.targets:
        candidate = r.other_voter(target)
        r.refused(target, VOTE, frames.vote(cluster_id, target, candidate, INT32_MAX, r.epoch, 0),
                  ErrorCode.INVALID_REQUEST, reason=f"candidate epoch {INT32_MAX} out of range")
        # Well-formed, from a voter, with the longest log there could be.
        r.refused(target, VOTE, frames.vote(cluster_id, target, candidate, MAX_EPOCH, r.epoch, INT64_MAX),
                  ErrorCode.INVALID_REQUEST, reason=f"epoch {MAX_EPOCH} is more than {MAX_EPOCH_JUMP} above")
        for epoch in (r.epoch + 1, r.epoch + MAX_EPOCH_JUMP):
            # A voter that hears a live leader neither grants it nor moves to its epoch.
            r.ignored(target, VOTE, frames.vote(cluster_id, target, candidate, epoch, r.epoch, INT64_MAX))
    r.check_after()


def test_begin_quorum_epoch_past_the_maximum_is_refused_and_a_non_leader_ignored(quorum, cluster_id):
    r = Round(quorum)
    for target in r.targets:
        claimant = r.other_voter(target)
        claimants = (claimant,) if target == r.leader else (claimant, r.leader)
        for leader in claimants:  # a follower, and for a follower the real leader too
            r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, leader, INT32_MAX),
                      ErrorCode.INVALID_REQUEST, reason=f"leader epoch {INT32_MAX} out of range")
            r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, leader, MAX_EPOCH),
                      ErrorCode.INVALID_REQUEST, reason=f"epoch {MAX_EPOCH} is more than {MAX_EPOCH_JUMP} above")
        for epoch in (r.epoch + 1, r.epoch + MAX_EPOCH_JUMP):
            r.ignored(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, claimant, epoch))
    r.check_after()


def test_end_quorum_epoch_past_the_maximum_is_refused_and_a_non_leader_ignored(quorum, cluster_id):
    r = Round(quorum)
    for target in r.targets:
        claimant = r.other_voter(target)
        claimants = (claimant,) if target == r.leader else (claimant, r.leader)
        for leader in claimants:
            r.refused(target, END, frames.end_quorum_epoch(cluster_id, leader, INT32_MAX, (target,)),
                      ErrorCode.INVALID_REQUEST, reason=f"leader epoch {INT32_MAX} out of range")
            r.refused(target, END, frames.end_quorum_epoch(cluster_id, leader, MAX_EPOCH, (target,)),
                      ErrorCode.INVALID_REQUEST, reason=f"epoch {MAX_EPOCH} is more than {MAX_EPOCH_JUMP} above")
        for epoch in (r.epoch + 1, r.epoch + MAX_EPOCH_JUMP):
            r.ignored(target, END, frames.end_quorum_epoch(cluster_id, claimant, epoch, (target,)))
    r.check_after()


# ---------------------------------------------------------------------------
# Two leaders in one epoch
# ---------------------------------------------------------------------------

def test_a_second_leader_for_the_current_epoch_is_refused(quorum, cluster_id):
    r = Round(quorum)
    for target in r.targets:
        claimant = r.other_voter(target)
        reason = f"node {claimant} claims epoch {r.epoch}, which node {r.leader} leads"
        r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, claimant, r.epoch),
                  ErrorCode.INVALID_REQUEST, reason=reason, event=CONFLICTING)
        r.refused(target, END, frames.end_quorum_epoch(cluster_id, claimant, r.epoch),
                  ErrorCode.INVALID_REQUEST, reason=reason, event=CONFLICTING)
    r.check_after()


# ---------------------------------------------------------------------------
# Ids, offsets, cluster, topic and partition
# ---------------------------------------------------------------------------

def test_ids_that_are_not_voters_or_name_the_wrong_node_are_refused(quorum, cluster_id):
    r = Round(quorum)
    # Epoch + 1: each frame would move the epoch if it were believed.
    epoch = r.epoch + 1
    for target in r.targets:
        voter = r.other_voter(target)
        for stranger in (NON_VOTER, -1, INT32_MIN):
            r.refused(target, VOTE, frames.vote(cluster_id, target, stranger, epoch, r.epoch, 0),
                      ErrorCode.INCONSISTENT_VOTER_SET, reason=f"candidate {stranger} is not a voter")
            r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, stranger, epoch),
                      ErrorCode.INCONSISTENT_VOTER_SET, reason=f"leader {stranger} is not a voter")
            r.refused(target, END, frames.end_quorum_epoch(cluster_id, stranger, epoch),
                      ErrorCode.INCONSISTENT_VOTER_SET, reason=f"leader {stranger} is not a voter")
        r.refused(target, END, frames.end_quorum_epoch(cluster_id, voter, epoch, (NON_VOTER, target)),
                  ErrorCode.INCONSISTENT_VOTER_SET, reason=f"successors [{NON_VOTER}] are not voters")
        # In the receiving node's own name.
        r.refused(target, VOTE, frames.vote(cluster_id, target, target, epoch, r.epoch, 0),
                  ErrorCode.INVALID_REQUEST, reason="own name")
        r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, target, epoch),
                  ErrorCode.INVALID_REQUEST, reason="own name")
        r.refused(target, END, frames.end_quorum_epoch(cluster_id, target, epoch),
                  ErrorCode.INVALID_REQUEST, reason="own name")
        # Addressed to another voter (VoterId), or to a node that is none.
        addressee, candidate = r.others(target)
        for wrong_voter in (addressee, NON_VOTER):
            r.refused(target, VOTE, frames.vote(cluster_id, wrong_voter, candidate, epoch, r.epoch, 0),
                      ErrorCode.INVALID_VOTER_KEY, reason=f"addressed to voter {wrong_voter}, this is {target}")
            r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, wrong_voter, candidate, epoch),
                      ErrorCode.INVALID_VOTER_KEY, reason=f"addressed to voter {wrong_voter}, this is {target}")
        # A candidate's last epoch must be older than the epoch it campaigns for, its offset not negative.
        r.refused(target, VOTE, frames.vote(cluster_id, target, voter, epoch, epoch, 0),
                  ErrorCode.INVALID_REQUEST, reason=f"for candidate epoch {epoch}")
        r.refused(target, VOTE, frames.vote(cluster_id, target, voter, epoch, r.epoch, -1),
                  ErrorCode.INVALID_REQUEST, reason="last offset -1")
        r.refused(target, VOTE, frames.vote(cluster_id, target, voter, epoch, -1, 0),
                  ErrorCode.INVALID_REQUEST, reason=f"in epoch -1 for candidate epoch {epoch}")
        # Negative epochs.
        r.refused(target, VOTE, frames.vote(cluster_id, target, voter, -1, 0, 0),
                  ErrorCode.INVALID_REQUEST, reason="candidate epoch -1 out of range")
        r.refused(target, BEGIN, frames.begin_quorum_epoch(cluster_id, target, voter, INT32_MIN),
                  ErrorCode.INVALID_REQUEST, reason=f"leader epoch {INT32_MIN} out of range")
        r.refused(target, END, frames.end_quorum_epoch(cluster_id, voter, -1),
                  ErrorCode.INVALID_REQUEST, reason="leader epoch -1 out of range")
    r.check_after()


def test_fetch_and_fetch_snapshot_with_bad_offsets_epochs_or_replica_ids(quorum, cluster_id):
    r = Round(quorum)
    for target in r.targets:
        on_leader = target == r.leader
        voter = r.other_voter(target)
        # A broker fetches as an observer with its own (non-voter) id.
        for offset in (-1, INT64_MIN):
            r.refused(target, FETCH, frames.fetch(cluster_id, NON_VOTER, r.epoch, offset, r.epoch),
                      ErrorCode.INVALID_REQUEST, reason=f"fetch offset {offset}")
        for replica in (-1, -7, INT32_MIN):
            # Any negative ReplicaState id reads as "none" (-1), which is no replica.
            r.refused(target, FETCH, frames.fetch(cluster_id, replica, r.epoch, 0, 0),
                      ErrorCode.INVALID_REQUEST, reason="replica id -1")
        r.refused(target, FETCH, frames.fetch(cluster_id, target, r.epoch, 0, 0),
                  ErrorCode.INVALID_REQUEST, reason=f"replica id {target}")
        for epoch in (INT32_MAX, -5):
            r.refused(target, FETCH, frames.fetch(cluster_id, NON_VOTER, epoch, 0, 0),
                      ErrorCode.INVALID_REQUEST, reason=f"current leader epoch {epoch} out of range")
        r.refused(target, FETCH, frames.fetch(cluster_id, NON_VOTER, r.epoch, 0, r.epoch + 1),
                  ErrorCode.INVALID_REQUEST, reason=f"in epoch {r.epoch + 1} at epoch {r.epoch}")
        r.refused(target, FETCH, frames.fetch(cluster_id, NON_VOTER, r.epoch, 0, 0, max_bytes=-1),
                  ErrorCode.INVALID_REQUEST, reason="negative max_bytes")
        # Far past the log end, as an observer and in a voter's name: the leader answers
        # with its own end of that epoch (divergence), and counts nothing toward the
        # high watermark (checked after the round); a follower does not serve fetches.
        for replica in (NON_VOTER, voter):
            partition = r.answered(target, FETCH, frames.fetch(cluster_id, replica, r.epoch, INT64_MAX, r.epoch),
                                   ErrorCode.NONE if on_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            if on_leader:
                diverging = partition.diverging_epoch
                assert diverging.epoch == r.epoch and 0 < diverging.end_offset < INT64_MAX, partition
                assert partition.records is None, partition
        # A leader epoch from the future, still in range: nobody leads it yet.
        r.answered(target, FETCH, frames.fetch(cluster_id, NON_VOTER, MAX_EPOCH, 0, 0),
                   ErrorCode.UNKNOWN_LEADER_EPOCH)

        for position in (-1, INT64_MIN):
            r.refused(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, NON_VOTER, r.epoch, 10, r.epoch, position),
                      ErrorCode.INVALID_REQUEST, reason="negative snapshot offset, position")
        r.refused(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, NON_VOTER, r.epoch, -1, r.epoch, 0),
                  ErrorCode.INVALID_REQUEST, reason="negative snapshot offset, position")
        for replica in (-1, INT32_MIN):
            r.refused(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, replica, r.epoch, 10, r.epoch, 0),
                      ErrorCode.INVALID_REQUEST, reason=f"replica id {replica}")
        r.refused(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, NON_VOTER, INT32_MAX, 10, 0, 0),
                  ErrorCode.INVALID_REQUEST, reason="out of range")
        r.refused(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, NON_VOTER, r.epoch, 10, r.epoch + 1, 0),
                  ErrorCode.INVALID_REQUEST, reason="out of range")
        # A snapshot far past anything written, read from far inside it.
        r.answered(target, SNAPSHOT, frames.fetch_snapshot(cluster_id, voter, r.epoch, INT64_MAX, r.epoch, INT64_MAX),
                   ErrorCode.SNAPSHOT_NOT_FOUND if on_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER)
    r.check_after()


def test_a_foreign_cluster_id_wrong_topic_or_partition_is_refused(quorum, cluster_id):
    r = Round(quorum)
    epoch = r.epoch + 1

    def bodies(target: int, cluster: str, **where) -> list[tuple[ApiKey, frames.Body]]:
        """One frame of each API that would matter if believed, placed as `where` says."""
        voter = r.other_voter(target)
        topic = where.pop("topic", frames.METADATA_TOPIC)
        partition = where.pop("partition", 0)
        topic_id = where.pop("topic_id", frames.METADATA_TOPIC_ID)
        assert not where
        return [
            (VOTE, frames.vote(cluster, target, voter, epoch, r.epoch, INT64_MAX, topic=topic, partition=partition)),
            (BEGIN, frames.begin_quorum_epoch(cluster, target, voter, epoch, topic=topic, partition=partition)),
            (END, frames.end_quorum_epoch(cluster, voter, epoch, (target,), topic=topic, partition=partition)),
            (FETCH, frames.fetch(cluster, NON_VOTER, r.epoch, 0, 0, topic_id=topic_id, partition=partition)),
            (SNAPSHOT, frames.fetch_snapshot(cluster, NON_VOTER, r.epoch, 10, r.epoch, 0, topic=topic,
                                             partition=partition)),
        ]

    for target in r.targets:
        for api_key, body in bodies(target, FOREIGN_CLUSTER_ID):
            r.refused(target, api_key, body, ErrorCode.INCONSISTENT_CLUSTER_ID, reason="cluster id is not ours")
        wrong_places = [{"topic": OTHER_TOPIC, "topic_id": uuid.UUID(int=2)}, {"partition": 1},
                        {"partition": -1}]
        for where in wrong_places:
            for api_key, body in bodies(target, cluster_id, **where):
                r.refused(target, api_key, body, ErrorCode.INVALID_REQUEST, reason="not exactly __cluster_metadata-0")
        # No topic at all, and the partition twice.
        empty = frames.vote(cluster_id, target, r.other_voter(target), epoch, r.epoch, 0)
        empty["topics"] = []
        r.refused(target, VOTE, empty, ErrorCode.INVALID_REQUEST, reason="not exactly __cluster_metadata-0")
        twice = frames.begin_quorum_epoch(cluster_id, target, r.other_voter(target), epoch)
        twice["topics"][0]["partitions"] *= 2
        r.refused(target, BEGIN, twice, ErrorCode.INVALID_REQUEST, reason="not exactly __cluster_metadata-0")
    r.check_after()


# ---------------------------------------------------------------------------
# Long polls
# ---------------------------------------------------------------------------

def test_a_second_parked_fetch_in_one_replicas_name_does_not_swallow_the_first(quorum, cluster_id):
    r = Round(quorum)
    view = quorum.wait_until_replicated(WRITE_TIMEOUT_S)
    end = {replica.replica_id: replica.log_end_offset for replica in view.current_voters}[r.leader]
    # At the log end with nothing new: the leader parks each (KRaft's long poll), up to
    # its fetch.max.wait; both must then be answered, in any order.
    body = frames.fetch(cluster_id, NON_VOTER, r.epoch, end, r.epoch, max_wait_ms=PARKED_FETCH_WAIT_MS)
    address = quorum.address(r.leader)
    with frames.open_request(address, FETCH, body) as first, frames.open_request(address, FETCH, body) as second:
        for name, sock in (("first", first), ("second", second)):
            try:
                response = frames.read_answer(sock, FETCH)
            except TimeoutError:
                pytest.fail(f"the {name} parked Fetch from replica {NON_VOTER} was never answered")
            partition = frames.only_partition(FETCH, response)
            assert (response.error_code, partition.error_code) == (ErrorCode.NONE, ErrorCode.NONE), response
    r.check_after()


# ---------------------------------------------------------------------------
# Afterwards
# ---------------------------------------------------------------------------

def test_every_node_restarts_cleanly_after_the_hostile_frames(quorum, cluster_id):
    before = quorum.wait_for_leader(LEADER_TIMEOUT_S)
    processes = dict(quorum.processes)
    quorum.stop_all()
    for node, process in processes.items():
        assert process.process.returncode == 0, f"controller {node} exited with {process.process.returncode}:\n" \
                                                + quorum.log_tail(node)
    quorum.start_all()
    after = quorum.wait_for_leader(LEADER_TIMEOUT_S, min_epoch=before.leader_epoch)
    assert after.leader_epoch < before.leader_epoch + RESTART_EPOCH_SLACK, (before, after)
    check_committed_write(quorum, after.high_watermark, (after.leader_id, after.leader_epoch))
    for node in quorum.specs:
        samples = frames.scrape(quorum.specs[node].log_path)
        assert samples[(EPOCH_GAUGE, ())] == after.leader_epoch, node
        # Real peers' frames are never refused, and no epoch ran out.
        for name in (*REFUSAL_EVENTS, "raft.epoch_exhausted"):
            assert not quorum.events(node, name), (node, quorum.events(node, name))
