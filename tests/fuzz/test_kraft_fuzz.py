"""The KRaft core under structure-aware fuzzed requests, responses and byte mutations.

Each example builds one node of a 3-voter quorum in a role (tests/fuzz/kraft_harness.py:
unattached, prospective, candidate, follower, leader with a log, leader with a snapshot,
resigned, observer, at the last epoch) and feeds it a sequence of steps drawn by
Hypothesis:
- a request of Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot or
  DescribeQuorum, drawn from the declarations (tests/fuzz/kraft_inputs.py: any declared
  version, values biased to int32/int64 bounds, -1, 0, the last epochs, voter and non-voter
  ids, huge and empty arrays, wrong cluster ids, topics and partitions), encoded and decoded
  as it would arrive;
- the encoding of such a request with bytes flipped, truncated, extended or given a lying
  length, then decoded (undecodable bytes never reach the driver);
- a fuzzed response to one of the node's own outstanding requests;
- a (possibly lying) leader answering the node's own Fetch or FetchSnapshot: records, a
  divergence or a snapshot at offsets near the fetch offset;
- time passing (ticks), a peer granting the outstanding votes, a well-behaved follower or
  observer fetching from a leader (long polls park and complete), a proposal.
Every request is driven as the driver does it: `validate.check_request`, then
`core.handle_request`, a `RaftProtocolError` answered as a refusal; then Ready/advance with
every outbound body encoded at the wire versions. Any other exception, an `EncodeError`
or a broken invariant (kraft_harness.py's module docstring) fails the example, and the
failure prints the node's trace.

The scripted tests at the end pin what the fuzzer found (and the edges it exists for).

Run: `.venv/bin/pytest -q tests/fuzz/test_kraft_fuzz.py`; `FUZZ_EXAMPLES=N` multiplies the
examples and explores with fresh randomness (tests/fuzz/budget.py).
"""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.record_batch import encode_batch
from protocol.registry import API_MESSAGES
from server.raft import messages as m
from server.raft.core import Role
from server.raft.messages import WIRE_VERSIONS, ApiKey
from server.raft.validate import MAX_EPOCH

from .budget import fuzz_settings
from .kraft_harness import (
    CLUSTER_ID,
    ELECTION_TIMEOUT_MS,
    FETCH_TIMEOUT_MS,
    ME,
    ROLES,
    START_MS,
    VOTERS,
    FuzzNode,
    InvariantViolation,
    build_node,
    encode_body,
    fetch_from,
)
from .kraft_inputs import Aim, Chooser, DrawChooser, chance, draw_body, mutate, pick_api

MAX_STEPS = 12
TICKS_MS = (0, 1, 10, ELECTION_TIMEOUT_MS, 2 * ELECTION_TIMEOUT_MS, FETCH_TIMEOUT_MS, 3 * FETCH_TIMEOUT_MS,
            10**9)
STEP_KINDS = ("request", "request", "request", "bytes", "bytes", "response", "tick", "grant", "propose", "fetch",
              "serve")
SERVE_KINDS = ("records", "records", "diverging", "snapshot")
FETCH_WAITS_MS = (0, 5, 50, 500)


def aim_at(node: FuzzNode) -> Aim:
    """Aimed at the node as it is now: its epoch and offsets, records that would extend its log."""
    core = node.core
    end = core.end_offset
    records = (encode_batch(end, core.epoch, (b"fetched",), START_MS),
               encode_batch(end, core.epoch, (b"a", b"b"), START_MS)
               + encode_batch(end + 2, core.epoch, (b"c",), START_MS),
               encode_batch(max(end - 1, 0), core.last_epoch, (b"overlap",), START_MS))
    snapshot = node.log.latest_snapshot_id()
    offsets = (end, core.high_watermark) + ((snapshot.end_offset,) if snapshot else ())
    epochs = (core.epoch,) + ((snapshot.epoch,) if snapshot else ())
    tags = [(m.PRE_VOTE_TAG, b"\x01"), (m.VOTER_TOKEN_TAG, bytes(8)), (m.VOTER_TOKEN_TAG, b"\x01")]
    # The real tokens weigh more: with one, a forged-looking Fetch reaches the leader's commit path.
    tags += [(m.VOTER_TOKEN_TAG, token.to_bytes(8, "big")) for token in node.voter_tokens.values()] * 3
    return Aim(cluster_id=CLUSTER_ID, voters=tuple(sorted(VOTERS)), target_id=node.node_id,
               epochs=epochs, end_offsets=offsets, records=records, known_tags=tuple(tags))


def run_steps(node: FuzzNode, chooser: Chooser, steps: int) -> None:
    for _ in range(steps):
        kind = chooser.pick(STEP_KINDS)
        if kind in ("request", "bytes"):
            api_key, version = pick_api(chooser)
            body = draw_body(chooser, API_MESSAGES[api_key][0], version, aim_at(node))
            encoded = encode_body(api_key, "request", version, body)
            if kind == "request":
                node.deliver(api_key, version, API_MESSAGES[api_key][0].decode(version, encoded))
            else:
                node.deliver_bytes(api_key, version, mutate(chooser, encoded))
        elif kind == "response":
            if not node.outstanding:
                continue
            index = chooser.integer(0, len(node.outstanding) - 1)
            api_key = node.outstanding[index][1]
            version = WIRE_VERSIONS[ApiKey(api_key)]
            body = None if chance(chooser, 10) else draw_body(
                chooser, API_MESSAGES[api_key][1], version, aim_at(node))
            node.deliver_response(index, body)
        elif kind == "tick":
            node.tick(chooser.pick(TICKS_MS))
        elif kind == "grant":
            node.grant_votes()
        elif kind == "serve":
            # The leader (possibly lying) answers this node's own Fetch or FetchSnapshot.
            node.serve_fetch(chooser.pick(SERVE_KINDS), chooser.pick((0, 0, 1, -1, -5, 3)),
                             chooser.pick((0, 0, -1, 1)), chooser.pick((0, 100, 700, 1500)))
        elif kind == "fetch":
            # A well-behaved follower or observer fetching (parks, completes, commits).
            if node.core.role is Role.LEADER:
                offset = chooser.pick((node.core.end_offset, node.core.high_watermark, node.log.start_offset))
                fetch_from(node, chooser.pick((2, 3, 4, 100)), offset, chooser.pick(FETCH_WAITS_MS))
        elif node.core.role is Role.LEADER:
            node.propose(b"fuzz-%d" % chooser.integer(0, 999))


@fuzz_settings(ci_examples=300)
@given(data=st.data())
def test_every_fuzzed_step_ends_in_an_answer_or_a_refusal(data):
    chooser = DrawChooser(data.draw)
    role = chooser.pick(ROLES)
    node = build_node(role, seed=chooser.integer(0, 3))
    try:
        run_steps(node, chooser, chooser.integer(1, MAX_STEPS))
    except BaseException:
        note("trace:\n  " + "\n  ".join(node.trace))
        raise


@fuzz_settings(ci_examples=100)
@given(data=st.data())
def test_well_aimed_requests_on_a_leader_keep_its_committed_log(data):
    """Only requests, all on a leader: the role whose committed entries a forged Fetch,
    Vote or BeginQuorumEpoch would most like to change."""
    chooser = DrawChooser(data.draw)
    node = build_node(chooser.pick(("leader", "leader_snapshot")))
    committed_before = node.core.high_watermark
    try:
        for _ in range(chooser.integer(1, MAX_STEPS)):
            api_key, version = pick_api(chooser)
            body = draw_body(chooser, API_MESSAGES[api_key][0], version, aim_at(node))
            node.deliver(api_key, version, API_MESSAGES[api_key][0].decode(
                version, encode_body(api_key, "request", version, body)))
            if chance(chooser, 30) and node.core.role is Role.LEADER:
                node.propose(b"x")
    except BaseException:
        note("trace:\n  " + "\n  ".join(node.trace))
        raise
    assert node.core.high_watermark >= committed_before


# -- scripted cases: the edges the fuzzer is there to find, pinned -----------------------

def vote(candidate_epoch: int, candidate: int = 2, last_epoch: int = 4, last_offset: int = 12) -> dict:
    body = m.vote_request(CLUSTER_ID, ME, candidate_epoch, candidate, last_epoch, last_offset, False)
    body.pop("pre_vote")
    return body


def test_epochs_past_max_epoch_are_refused_not_adopted():
    node = build_node("unattached_epoch")
    for epoch in (MAX_EPOCH + 1, 2**31 - 1, -1, -(2**31)):
        outcome = node.deliver(ApiKey.VOTE, 1, vote(epoch, last_epoch=0, last_offset=0))
        assert (outcome.kind, outcome.error) == ("refused", ErrorCode.INVALID_REQUEST), epoch
        begin = m.begin_quorum_epoch_request(CLUSTER_ID, ME, 2, epoch)
        outcome = node.deliver(ApiKey.BEGIN_QUORUM_EPOCH, 1, begin)
        assert (outcome.kind, outcome.error) == ("refused", ErrorCode.INVALID_REQUEST), epoch
    assert node.core.epoch == 5


def test_a_node_at_max_epoch_never_campaigns_into_an_overflow():
    node = build_node("follower_at_max_epoch")
    for _ in range(5):
        node.tick(3 * FETCH_TIMEOUT_MS)
        node.grant_votes()
    assert node.core.epoch == MAX_EPOCH
    assert node.core.role is not Role.LEADER


def test_a_second_leader_in_the_same_epoch_is_a_typed_refusal():
    node = build_node("follower")
    begin = m.begin_quorum_epoch_request(CLUSTER_ID, ME, 3, node.core.epoch)
    outcome = node.deliver(ApiKey.BEGIN_QUORUM_EPOCH, 1, begin)
    assert (outcome.kind, outcome.event) == ("core_refused", "raft.conflicting_leader")
    assert node.core.leader_id == 2


def test_a_response_naming_another_leader_of_a_known_epoch_is_not_adopted():
    # Found by this fuzzer, and by bench/bench_kraft_fuzz.py on a live quorum (a node died
    # with this QuorumStateError). A follower of 2 in epoch 5 whose fetch timeout made it
    # prospective still knows 2 led epoch 5; a Vote response naming 3 as that epoch's leader
    # must be refused (Raft elects one leader per epoch), not persisted: the quorum-state
    # store rejects the change and the driver dies.
    node = build_node("follower")
    node.tick(FETCH_TIMEOUT_MS)
    assert node.core.role is Role.PROSPECTIVE and node.core.leader_id == 2
    index = next(i for i, (destination, api_key, _) in enumerate(node.outstanding)
                 if api_key == ApiKey.VOTE and destination == 3)
    result = node.deliver_response(index, m.vote_response(ErrorCode.NONE, ErrorCode.NONE, 3, 5, granted=False))
    assert result in ("core_refused", "refused", "read")
    assert node.core.epoch == 5 and node.core.leader_id in (2, None)


def test_a_snapshot_ending_below_the_high_watermark_is_not_installed():
    # Found by this fuzzer: a leader's Fetch answer names a snapshot that ends below what
    # this follower already knows is committed; loading it would drop committed entries
    # (the same rule as a divergence below the high watermark, which is refused).
    node = build_node("follower")
    node.serve_fetch("records", 0, 0, 0)  # one batch at 12, high watermark 13
    assert node.core.high_watermark == 13
    node.serve_fetch("snapshot", -2, 0, 0)  # "load snapshot (11, 5)"
    node.serve_fetch("records", 0, 0, 100)  # its 100 bytes, in one chunk
    assert node.log.end_offset >= 13 and node.core.high_watermark == 13


def test_huge_observer_ids_and_offsets_still_encode_in_describe_quorum():
    node = build_node("leader")
    for replica in (4, 2**31 - 1, 3000):
        body = m.fetch_request(CLUSTER_ID, replica, node.core.epoch, node.core.end_offset, node.core.last_epoch,
                               0, 2**31 - 1)
        node.deliver(ApiKey.FETCH, 17, body)
    request = {"topics": [{"topic_name": m.METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}
    outcome = node.deliver(55, 2, request)
    assert outcome.kind == "described"


def test_the_harness_catches_a_broken_invariant():
    # Guards the harness itself: an epoch going back must be seen.
    node = build_node("follower")
    node.max_epoch_seen = node.core.epoch + 1
    try:
        node.check()
    except InvariantViolation:
        return
    raise AssertionError("the harness did not notice the epoch going back")
