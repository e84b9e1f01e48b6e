"""Hostile and malformed KRaft messages against the real sans-I/O core, one case per rule.

Each test drives one `RaftCore` by hand (an in-memory log and quorum store) into a
role, then hands it what an attacker on a PLAINTEXT controller listener could send.
Requests go through `validate.check_request` first, exactly as the trio driver and the
simulator do; what the core itself refuses raises `RaftProtocolError`.
"""

from __future__ import annotations

import random

import pytest

from protocol.errors import ErrorCode
from server.observability import Event
from server.raft import messages as m
from server.raft.core import (
    DEFERRED,
    MAX_EPOCH_JUMP,
    MAX_OBSERVERS,
    Append,
    RaftConfig,
    RaftCore,
    RaftProtocolError,
    Role,
    TruncateTo,
)
from server.raft.log import Batch, MemoryRaftLog, WireRecordsCodec
from server.raft.messages import ApiKey, WIRE_VERSIONS
from server.raft.quorum_state import MemoryQuorumStateStore, QuorumState
from server.raft.validate import MAX_EPOCH, PeerRules, check_request, check_response
from protocol.registry import API_MESSAGES

CLUSTER = "hostile-cluster-AAAAAAAAAA"
VOTERS = frozenset({1, 2, 3})
RULES = PeerRules(CLUSTER, 1, VOTERS)


class Node:
    """One core with the driver's duties done inline: persist, apply, flush, collect outputs."""

    def __init__(self, node_id: int = 1, voters: frozenset[int] = VOTERS, state: QuorumState | None = None,
                 **config) -> None:
        self.now = 1_000
        self.log = MemoryRaftLog()
        self.store = MemoryQuorumStateStore(state or QuorumState())
        defaults = dict(election_timeout_ms=100, fetch_timeout_ms=200, pre_vote=False)
        self.config = RaftConfig(node_id=node_id, voters=voters, cluster_id=CLUSTER, **{**defaults, **config})
        self.rules = PeerRules(CLUSTER, node_id, voters)
        self.core = RaftCore(self.config, self.log, self.store.read(), random.Random(7), self.now,
                             WireRecordsCodec())
        self.requests: list = []
        self.responses: list = []
        self.drain()

    def drain(self) -> None:
        core = self.core
        while core.has_ready():
            ready = core.ready()
            if ready.quorum_state is not None:
                self.store.write(ready.quorum_state)
            for op in ready.log_ops:
                if isinstance(op, Append):
                    self.log.append(op.batch)
                elif isinstance(op, TruncateTo):
                    self.log.truncate_to(op.offset)
            self.log.flush()
            # What the driver would encode: an unencodable body is how int32 overflow crashed nodes.
            for request in ready.requests:
                API_MESSAGES[request.api_key][0].encode(WIRE_VERSIONS[ApiKey(request.api_key)], request.body)
            self.requests.extend(ready.requests)
            self.responses.extend(ready.responses)
            core.advance(ready, self.log.flushed_end_offset, self.now)

    def request(self, api_key: int, body: dict, sender: int = 2):
        """Validate, then the core; returns the answer body (or DEFERRED)."""
        refusal = check_request(api_key, body, self.rules)
        if refusal is not None:
            return refusal
        answer = self.core.handle_request(sender, api_key, body, self.now)
        self.drain()
        if answer is not DEFERRED:
            API_MESSAGES[api_key][1].encode(WIRE_VERSIONS[ApiKey(api_key)], answer)
        return answer

    def tick_to(self, now_ms: int) -> None:
        self.now = now_ms
        self.core.tick(now_ms)
        self.drain()

    def take_requests(self, api_key: int) -> list:
        taken = [request for request in self.requests if request.api_key == api_key]
        self.requests = [request for request in self.requests if request.api_key != api_key]
        return taken


LEADER_TOKEN = 4242


def follower_hearing_leader(leader: int = 2, epoch: int = 1) -> Node:
    """Node 1, following `leader` in `epoch`, with a successful Fetch just answered."""
    node = Node()
    answer = node.request(ApiKey.BEGIN_QUORUM_EPOCH,
                          m.begin_quorum_epoch_request(CLUSTER, 1, leader, epoch, token=LEADER_TOKEN), sender=leader)
    assert answer["error_code"] == 0 and node.core.role is Role.FOLLOWER
    (fetch,) = node.take_requests(ApiKey.FETCH)
    node.core.handle_response(leader, ApiKey.FETCH, fetch.body,
                              m.fetch_response(ErrorCode.NONE, leader_id=leader, epoch=epoch, high_watermark=0),
                              node.now)
    node.drain()
    return node


def leader_node() -> Node:
    """Node 1, leader of epoch 1 (voted for by node 2), with both followers fetching."""
    node = Node()
    node.tick_to(node.now + 1_000)
    assert node.core.role is Role.CANDIDATE
    (vote, *_) = node.take_requests(ApiKey.VOTE)
    node.core.handle_response(vote.destination, ApiKey.VOTE, vote.body,
                              m.vote_response(ErrorCode.NONE, leader_id=None, epoch=1, granted=True), node.now)
    node.drain()
    assert node.core.role is Role.LEADER and node.core.epoch == 1
    node.tokens = {begin.destination: m.voter_token(begin.body) for begin in node.take_requests(ApiKey.BEGIN_QUORUM_EPOCH)}
    assert sorted(node.tokens) == [2, 3] and None not in node.tokens.values()
    for follower in (2, 3):
        answer = node.request(ApiKey.FETCH, voter_fetch(node, follower, 0, 0, 0), sender=follower)
        assert answer["error_code"] == 0
    return node


def voter_fetch(node: Node, voter: int, offset: int, last_epoch: int, max_wait_ms: int) -> dict:
    """A Fetch from a real follower: it carries the token the leader sent that voter."""
    return m.fetch_request(CLUSTER, voter, node.core.epoch, offset, last_epoch, max_wait_ms, 1 << 20,
                           token=node.tokens[voter])


def partition_error(answer) -> int:
    return answer["topics"][0]["partitions"][0]["error_code"]


# -- the boundary --------------------------------------------------------------------

@pytest.mark.parametrize("epoch", [MAX_EPOCH + 1, 2**31 - 1, -1, -(2**31)])
def test_epochs_outside_the_safe_range_are_refused_before_the_core(epoch):
    node = follower_hearing_leader()
    before = node.store.read()
    for api_key, body in [
        (ApiKey.VOTE, m.vote_request(CLUSTER, 1, epoch, 3, 0, 0, False)),
        (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 3, epoch)),
        (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 3, epoch, [1])),
        (ApiKey.FETCH, m.fetch_request(CLUSTER, 3, epoch, 0, 0, 0, 1024)),
        (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, 3, epoch, (1, 0), 0, 1024)),
    ]:
        refusal = node.request(api_key, body, sender=3)
        assert refusal.error is ErrorCode.INVALID_REQUEST, (api_key, refusal)
        assert refusal.event == Event.RAFT_REQUEST_REFUSED
        assert m.error_response(api_key, refusal.error)["error_code"] == ErrorCode.INVALID_REQUEST
    assert node.store.read() == before and node.core.role is Role.FOLLOWER


@pytest.mark.parametrize("api_key, body, error", [
    (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 5, 99, 0, 0, False), ErrorCode.INCONSISTENT_VOTER_SET),
    (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 5, -1, 0, 0, False), ErrorCode.INCONSISTENT_VOTER_SET),
    (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 5, 1, 0, 0, False), ErrorCode.INVALID_REQUEST),
    (ApiKey.VOTE, m.vote_request(CLUSTER, 2, 5, 3, 0, 0, False), ErrorCode.INVALID_VOTER_KEY),
    (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 5, 3, 5, 0, False), ErrorCode.INVALID_REQUEST),
    (ApiKey.VOTE, m.vote_request(CLUSTER, 1, 5, 3, 0, -1, False), ErrorCode.INVALID_REQUEST),
    (ApiKey.VOTE, m.vote_request("someone-else", 1, 5, 3, 0, 0, False), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 99, 5), ErrorCode.INCONSISTENT_VOTER_SET),
    (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 1, 5), ErrorCode.INVALID_REQUEST),
    (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 3, 5, [1, 99]), ErrorCode.INCONSISTENT_VOTER_SET),
    (ApiKey.FETCH, m.fetch_request(CLUSTER, -5, 1, 0, 0, 0, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH, m.fetch_request(CLUSTER, 1, 1, 0, 0, 0, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH, m.fetch_request(CLUSTER, 3, 1, -1, 0, 0, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH, m.fetch_request(CLUSTER, 3, 1, 0, 2, 0, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH, m.fetch_request(CLUSTER, 3, 1, 0, 0, 0, -1), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, 3, 1, (5, 1), -1, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, 3, 1, (-2, 1), 0, 1024), ErrorCode.INVALID_REQUEST),
    (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, -1, 1, (5, 1), 0, 1024), ErrorCode.INVALID_REQUEST),
])
def test_bad_ids_offsets_and_addresses_get_kafkas_error_codes(api_key, body, error):
    refusal = check_request(api_key, body, RULES)
    assert refusal is not None and refusal.error is error, refusal


def test_a_wrong_topic_or_partition_is_an_invalid_request():
    body = m.vote_request(CLUSTER, 1, 5, 3, 0, 0, False)
    body["topics"][0]["topic_name"] = "__consumer_offsets"
    assert check_request(ApiKey.VOTE, body, RULES).error is ErrorCode.INVALID_REQUEST
    body = m.fetch_request(CLUSTER, 3, 1, 0, 0, 0, 1024)
    body["topics"][0]["partitions"][0]["partition"] = 1
    assert check_request(ApiKey.FETCH, body, RULES).error is ErrorCode.INVALID_REQUEST
    body = m.begin_quorum_epoch_request(CLUSTER, 1, 2, 5)
    body["topics"][0]["partitions"].append(dict(body["topics"][0]["partitions"][0]))
    assert check_request(ApiKey.BEGIN_QUORUM_EPOCH, body, RULES).error is ErrorCode.INVALID_REQUEST


def test_well_formed_requests_pass_the_boundary():
    for api_key, body in [
        (ApiKey.VOTE, m.vote_request(CLUSTER, 1, MAX_EPOCH, 3, MAX_EPOCH - 1, 10**15, False)),
        (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 2, MAX_EPOCH)),
        (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 2, 0, [3, 1])),
        (ApiKey.FETCH, m.fetch_request(CLUSTER, 2, 4, 2**62, 4, 500, 1024)),
        (ApiKey.FETCH, m.fetch_request(CLUSTER, 101, 0, 0, 0, 500, 1024)),  # an observer
        (ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(CLUSTER, 101, 4, (2**62, 3), 2**62, 1024)),
    ]:
        assert check_request(api_key, body, RULES) is None, api_key


# -- the core --------------------------------------------------------------------------

def test_a_second_leader_claimed_for_the_current_epoch_is_refused_not_fatal():
    node = follower_hearing_leader(leader=2, epoch=1)
    for api_key, body in [
        (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 3, 1)),
        (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 3, 1, [1])),
    ]:
        with pytest.raises(RaftProtocolError) as caught:
            node.request(api_key, body, sender=3)
        assert caught.value.event == Event.RAFT_CONFLICTING_LEADER
        assert caught.value.error is ErrorCode.INVALID_REQUEST
    assert (node.core.role, node.core.leader_id, node.core.epoch) == (Role.FOLLOWER, 2, 1)


def test_the_leader_refuses_another_leader_for_its_own_epoch():
    node = leader_node()
    with pytest.raises(RaftProtocolError):
        node.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 2, 1), sender=2)
    assert node.core.role is Role.LEADER


def test_a_follower_hearing_its_leader_ignores_higher_epochs():
    node = follower_hearing_leader(leader=2, epoch=1)
    high = 1 + MAX_EPOCH_JUMP
    vote = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, high, 3, 0, 10**9, False), sender=3)
    assert vote["error_code"] == 0 and vote["topics"][0]["partitions"][0]["vote_granted"] is False
    begin = node.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 3, high), sender=3)
    assert begin["topics"][0]["partitions"][0]["leader_epoch"] == 1
    end = node.request(ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 3, high, [1]), sender=3)
    assert partition_error(end) == 0
    assert node.store.read() == QuorumState(epoch=1, leader_id=2)
    assert (node.core.role, node.core.epoch) == (Role.FOLLOWER, 1)


def test_without_a_live_leader_a_higher_epoch_vote_is_granted():
    node = follower_hearing_leader(leader=2, epoch=1)
    node.now += node.config.fetch_timeout_ms  # the leader went quiet (no tick: the timer has not fired yet)
    vote = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, 2, 3, 0, 0, False), sender=3)
    assert vote["topics"][0]["partitions"][0]["vote_granted"] is True
    assert node.store.read() == QuorumState(epoch=2, voted_id=3)


def test_the_leaders_end_quorum_epoch_lets_its_successor_be_elected_at_once():
    node = follower_hearing_leader(leader=2, epoch=1)
    node.request(ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 2, 1, [3, 1], token=LEADER_TOKEN),
                 sender=2)
    vote = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, 2, 3, 0, 0, False), sender=3)
    assert vote["topics"][0]["partitions"][0]["vote_granted"] is True


def test_an_end_quorum_epoch_without_the_leaders_token_hurries_nothing():
    """Anyone can send EndQuorumEpoch in the leader's name; only the leader has the token it
    gave this voter, so a forged one neither starts an election early nor lifts the
    disruptive-server rule."""
    node = follower_hearing_leader(leader=2, epoch=1)
    deadline = node.core.next_deadline_ms()
    for token in (None, LEADER_TOKEN + 1):
        node.request(ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 2, 1, [1, 3], token=token),
                     sender=2)
    vote = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, 2, 3, 0, 0, False), sender=3)
    assert vote["topics"][0]["partitions"][0]["vote_granted"] is False
    assert node.core.next_deadline_ms() == deadline and node.core.role is Role.FOLLOWER


def test_a_leader_with_its_majority_ignores_votes_but_not_from_a_stranded_voter():
    node = leader_node()
    vote = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, 9, 3, 0, 0, False), sender=3)
    assert vote["topics"][0]["partitions"][0]["vote_granted"] is False
    assert (node.core.role, node.core.epoch) == (Role.LEADER, 1)
    # Node 3 stops fetching (it is stranded at a higher epoch); node 2 keeps the majority.
    node.now += node.config.fetch_timeout_ms
    node.request(ApiKey.FETCH, voter_fetch(node, 2, node.log.end_offset, 1, 0), sender=2)
    node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, 9, 3, 0, 0, False), sender=3)
    assert node.core.role is not Role.LEADER and node.core.epoch == 9


def test_a_node_at_the_last_epoch_waits_instead_of_campaigning():
    node = Node(state=QuorumState(epoch=MAX_EPOCH))
    node.tick_to(node.now + 10_000)
    assert node.core.epoch == MAX_EPOCH and node.core.role is Role.UNATTACHED
    assert node.core.epoch_exhausted and not node.take_requests(ApiKey.VOTE)
    # A leader announcing itself at that epoch is still followed.
    node.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 2, MAX_EPOCH), sender=2)
    assert (node.core.role, node.core.leader_id) == (Role.FOLLOWER, 2)


def test_pre_votes_never_encode_an_epoch_past_int32():
    node = Node(state=QuorumState(epoch=MAX_EPOCH - 1), pre_vote=True)
    node.tick_to(node.now + 10_000)  # Node.drain encodes every request it sends
    votes = node.take_requests(ApiKey.VOTE)
    assert votes and all(v.body["topics"][0]["partitions"][0]["candidate_epoch"] == MAX_EPOCH for v in votes)


def test_observers_are_capped_and_the_oldest_is_forgotten_with_its_parked_fetch_answered():
    node = leader_node()
    end = node.log.end_offset
    first = node.core.handle_request(200, ApiKey.FETCH, m.fetch_request(CLUSTER, 200, 1, end, 1, 500, 1024),
                                     node.now, token="parked")
    assert first is DEFERRED
    for observer in range(201, 201 + MAX_OBSERVERS):
        node.now += 1
        node.request(ApiKey.FETCH, m.fetch_request(CLUSTER, observer, 1, 0, 0, 0, 1024), sender=observer)
    info = node.core.describe()
    assert len(info.observers) == MAX_OBSERVERS and 200 not in info.observers
    assert [response.token for response in node.responses] == ["parked"]


def test_undecodable_records_from_the_leader_are_refused_and_do_not_count_as_contact():
    node = follower_hearing_leader(leader=2, epoch=1)
    contact = node.core._last_leader_contact_ms
    node.now += 50
    (fetch,) = node.take_requests(ApiKey.FETCH)
    garbage = m.fetch_response(ErrorCode.NONE, leader_id=2, epoch=1, high_watermark=0, records=b"\x00" * 70)
    with pytest.raises(RaftProtocolError):
        node.core.handle_response(2, ApiKey.FETCH, fetch.body, garbage, node.now)
    node.drain()
    assert node.core._last_leader_contact_ms == contact and node.log.end_offset == 0
    node.tick_to(node.now + node.config.retry_backoff_ms)
    assert node.take_requests(ApiKey.FETCH), "the follower fetches again"


def test_a_divergence_below_the_high_watermark_is_refused_not_applied():
    node = follower_hearing_leader(leader=2, epoch=1)
    (fetch,) = node.take_requests(ApiKey.FETCH)
    batch = Batch(0, 1, (b"a",), None, 0)
    node.core.handle_response(2, ApiKey.FETCH, fetch.body,
                              m.fetch_response(ErrorCode.NONE, leader_id=2, epoch=1, high_watermark=1,
                                               records=WireRecordsCodec().encode([batch])), node.now)
    node.drain()
    assert node.core.high_watermark == 1
    (fetch,) = node.take_requests(ApiKey.FETCH)
    with pytest.raises(RaftProtocolError):
        node.core.handle_response(2, ApiKey.FETCH, fetch.body,
                                  m.fetch_response(ErrorCode.NONE, leader_id=2, epoch=1, diverging=(0, 0)), node.now)
    node.drain()
    assert node.log.end_offset == 1


def test_responses_naming_strangers_or_huge_epochs_are_refused():
    body = m.vote_response(ErrorCode.NONE, leader_id=99, epoch=3, granted=True)
    assert check_response(ApiKey.VOTE, body, RULES) is not None
    body = m.epoch_response(ErrorCode.NONE, leader_id=2, epoch=2**31 - 1)
    assert check_response(ApiKey.BEGIN_QUORUM_EPOCH, body, RULES) is not None
    body = m.fetch_response(ErrorCode.NONE, leader_id=2, epoch=3, diverging=(2**31 - 1, 5))
    assert check_response(ApiKey.FETCH, body, RULES) is not None
    assert check_response(ApiKey.FETCH, m.fetch_response(ErrorCode.NONE, leader_id=2, epoch=3), RULES) is None


def test_a_request_moves_the_epoch_by_at_most_the_jump_bound_but_a_response_may_move_it_further():
    node = Node()  # unattached at epoch 0: no live leader, so only the bound protects it
    far = MAX_EPOCH_JUMP + 1
    for api_key, body in [
        (ApiKey.VOTE, m.vote_request(CLUSTER, 1, far, 3, 0, 0, False)),
        (ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 3, far)),
        (ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(CLUSTER, 3, far, [1])),
    ]:
        with pytest.raises(RaftProtocolError):
            node.request(api_key, body, sender=3)
    assert node.store.read() == QuorumState()
    # A pre-vote changes nothing, so it is answered from any height: a stranded voter
    # learns from the answer that the quorum is below it.
    answer = node.request(ApiKey.VOTE, m.vote_request(CLUSTER, 1, far, 3, 0, 0, True), sender=3)
    assert answer["error_code"] == 0 and answer["topics"][0]["partitions"][0]["leader_epoch"] == 0
    assert node.store.read() == QuorumState()
    node.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 3, MAX_EPOCH_JUMP), sender=3)
    assert (node.core.role, node.core.epoch) == (Role.FOLLOWER, MAX_EPOCH_JUMP)
    # The answer to this node's own Fetch names the quorum's real epoch, however far.
    (fetch,) = node.take_requests(ApiKey.FETCH)
    node.core.handle_response(3, ApiKey.FETCH, fetch.body,
                              m.fetch_response(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH, leader_id=2,
                                               epoch=5 * MAX_EPOCH_JUMP), node.now)
    node.drain()
    assert (node.core.role, node.core.epoch, node.core.leader_id) == (Role.FOLLOWER, 5 * MAX_EPOCH_JUMP, 2)


def test_a_pre_vote_travels_as_a_tagged_field_of_vote_v1():
    from protocol.apis.vote import REQUEST
    wire = REQUEST.encode(WIRE_VERSIONS[ApiKey.VOTE], m.vote_request(CLUSTER, 1, 4, 3, 1, 7, True))
    decoded = REQUEST.decode(WIRE_VERSIONS[ApiKey.VOTE], wire)
    assert "pre_vote" not in decoded and m.is_pre_vote(decoded)
    wire = REQUEST.encode(WIRE_VERSIONS[ApiKey.VOTE], m.vote_request(CLUSTER, 1, 4, 3, 1, 7, False))
    assert not m.is_pre_vote(REQUEST.decode(WIRE_VERSIONS[ApiKey.VOTE], wire))
    # A pre-vote changes nothing durable on the voter.
    node = Node(pre_vote=True)
    answer = node.request(ApiKey.VOTE, decoded, sender=3)
    assert answer["topics"][0]["partitions"][0]["vote_granted"] is True
    assert node.store.read() == QuorumState() and node.store.writes == 0


def test_a_second_parked_fetch_in_one_replicas_name_answers_the_first():
    node = leader_node()
    end, epoch = node.log.end_offset, node.core.epoch
    body = voter_fetch(node, 2, end, epoch, 500)
    assert node.core.handle_request(2, ApiKey.FETCH, body, node.now, token="first") is DEFERRED
    assert node.core.handle_request(2, ApiKey.FETCH, body, node.now, token="second") is DEFERRED
    node.drain()
    assert [response.token for response in node.responses] == ["first"]
    node.tick_to(node.now + 500)
    assert [response.token for response in node.responses] == ["first", "second"]


def test_a_fetch_in_a_voters_name_without_its_token_counts_for_nothing():
    """Anyone on a PLAINTEXT listener can fetch as voter 2; only the real node 2 has the
    token the leader sent to its address, so only its position commits anything."""
    node = leader_node()
    batch_offset, _ = node.core.propose([b"x"], node.now)
    node.drain()
    end = node.log.end_offset
    committed = node.core.high_watermark
    sent_before = len(node.requests)
    node.now += node.config.retry_backoff_ms
    for token in (None, node.tokens[2] ^ 1):
        spoof = m.fetch_request(CLUSTER, 2, 1, end, 1, 0, 1 << 20, token=token)
        answer = node.request(ApiKey.FETCH, spoof, sender=2)
        assert answer["error_code"] == 0
    assert node.core.high_watermark == committed < end
    assert node.core.describe().voters[2].end_offset < end
    # The leader sends voter 2 its token again (it may have restarted), to its own address.
    resent = [r for r in node.requests[sent_before:] if r.api_key == ApiKey.BEGIN_QUORUM_EPOCH]
    assert resent and all(r.destination == 2 and m.voter_token(r.body) == node.tokens[2] for r in resent)
    node.request(ApiKey.FETCH, voter_fetch(node, 2, end, 1, 0), sender=2)
    assert node.core.high_watermark == end


def test_fetches_without_the_token_do_not_keep_a_lonely_leader_in_office():
    node = leader_node()
    for step in range(1, 8):
        node.now += node.config.fetch_timeout_ms // 2
        for voter in (2, 3):
            node.request(ApiKey.FETCH, m.fetch_request(CLUSTER, voter, 1, node.log.end_offset, 1, 0, 1024),
                         sender=voter)
        node.tick_to(node.now)
    assert node.core.role is not Role.LEADER


def test_a_follower_fetches_with_the_token_of_its_leaders_begin_quorum_epoch():
    node = Node()
    node.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(CLUSTER, 1, 2, 1, token=12345), sender=2)
    (fetch,) = node.take_requests(ApiKey.FETCH)
    assert m.voter_token(fetch.body) == 12345


def test_a_leaders_resignation_carries_each_voters_token():
    """What the leader sends when it resigns, and what the driver sends for a core it
    discards after a disk failure: each voter's EndQuorumEpoch with that voter's token,
    so followers act on it at once."""
    node = leader_node()
    requests = node.core.resignation_requests()
    assert {r.destination: m.voter_token(r.body) for r in requests} == node.tokens
    assert all(r.api_key == ApiKey.END_QUORUM_EPOCH for r in requests)
