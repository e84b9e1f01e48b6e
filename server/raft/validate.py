"""The boundary check of every KRaft message, before the Raft core sees it.

Owns: what a well-formed Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and
FetchSnapshot request (and their responses) may contain for this quorum, the
error code Kafka gives each kind of bad request, and `MAX_EPOCH`.

Rules kept here:
- Pure functions of (api key, decoded body, `PeerRules`): no clock, no state,
  no I/O. The trio driver and the simulator call them in the same place, so the
  fuzzer and the simulator test what production runs.
- Epochs are int32 on the wire and every epoch the core handles may be
  incremented once (a candidacy, a pre-vote's proposed epoch), so an epoch from
  a message must lie in [0, MAX_EPOCH] with MAX_EPOCH = 2**31 - 2: no epoch
  arithmetic can then overflow the encoder.
- Error codes as Kafka's KafkaRaftClient uses them: a non-null foreign cluster id
  is INCONSISTENT_CLUSTER_ID; a wrong topic or partition, a negative offset or
  epoch, or fields that contradict each other are INVALID_REQUEST; a leader or
  candidate that is not a configured voter is INCONSISTENT_VOTER_SET (Kafka's
  answer for non-voters before dynamic quorums); a request addressed to another
  voter is INVALID_VOTER_KEY.
- A refusal answers the request; it never changes state. Its `event` is a stable
  log event name and the metrics label.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from protocol.errors import ErrorCode
from server.observability import Event
from server.raft import messages as m
from server.raft.messages import ApiKey, Body

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The largest epoch a message may carry (see the module docstring).
MAX_EPOCH = INT32_MAX - 1

REQUEST_REFUSED = Event.RAFT_REQUEST_REFUSED
RESPONSE_REFUSED = Event.RAFT_RESPONSE_REFUSED


@dataclass(frozen=True, slots=True)
class PeerRules:
    """What this node knows that a message must agree with."""

    cluster_id: str
    node_id: int
    # The voters in effect (the driver renews the rules when the log changes them).
    voters: frozenset[int]
    # The voters live in the log (KIP-853): a leader a response names may be one this
    # node has not learnt of yet, so it need not be among `voters`.
    dynamic: bool = False


class Refusal(NamedTuple):
    api_key: int
    error: ErrorCode
    event: str
    reason: str


def refusal_response(refusal: Refusal) -> Body:
    """The refusal in the API's own response shape (a top-level error)."""
    return m.error_response(refusal.api_key, refusal.error)


def _refuse(api_key: int, error: ErrorCode, reason: str) -> Refusal:
    return Refusal(api_key, error, REQUEST_REFUSED, reason)


def _epoch_ok(value: Any) -> bool:
    return isinstance(value, int) and 0 <= value <= MAX_EPOCH


def _check_cluster(api_key: int, body: Body, rules: PeerRules) -> Refusal | None:
    cluster_id = body.get("cluster_id")
    if cluster_id is not None and cluster_id != rules.cluster_id:
        return _refuse(api_key, ErrorCode.INCONSISTENT_CLUSTER_ID, "cluster id is not ours")
    return None


def _check_addressee(api_key: int, body: Body, rules: PeerRules) -> Refusal | None:
    voter_id = body.get("voter_id", -1)
    if voter_id is not None and voter_id >= 0 and voter_id != rules.node_id:
        return _refuse(api_key, ErrorCode.INVALID_VOTER_KEY, f"addressed to voter {voter_id}, this is {rules.node_id}")
    return None


def check_request(api_key: int, body: Body, rules: PeerRules) -> Refusal | None:
    """None if the core may handle the request; otherwise the refusal to answer with."""
    refusal = _check_cluster(api_key, body, rules)
    if refusal is not None:
        return refusal
    if api_key == ApiKey.FETCH:
        return _check_fetch(body, rules)
    if api_key == ApiKey.VOTE:
        return _check_vote(body, rules)
    if api_key in (ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
        return _check_epoch_announcement(api_key, body, rules)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return _check_fetch_snapshot(body, rules)
    return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"api key {api_key} is not a KRaft RPC")


def _voter_partition(api_key: int, body: Body, rules: PeerRules, addressed: bool) -> Body | Refusal:
    """The partition of a request only voters receive (Vote, BeginQuorumEpoch, EndQuorumEpoch)."""
    if rules.node_id not in rules.voters and not rules.dynamic:
        # Candidates and leaders address voters only; an observer learns the leader by fetching.
        # In a dynamic quorum this node may be a voter its log does not name yet (or no longer):
        # the core answers (no vote; the leader it knows), which is how a removed voter learns.
        return _refuse(api_key, ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a voter")
    if addressed:
        refusal = _check_addressee(api_key, body, rules)
        if refusal is not None:
            return refusal
    partition = m.single_partition(body)
    if partition is None:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "not exactly __cluster_metadata-0")
    return partition


def _check_vote(body: Body, rules: PeerRules) -> Refusal | None:
    api_key = ApiKey.VOTE
    partition = _voter_partition(api_key, body, rules, addressed=True)
    if isinstance(partition, Refusal):
        return partition
    candidate_epoch = partition["candidate_epoch"]
    if not _epoch_ok(candidate_epoch):
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"candidate epoch {candidate_epoch} out of range")
    last_epoch, last_offset = partition["last_offset_epoch"], partition["last_offset"]
    # A candidate has written nothing in the epoch it campaigns for.
    if last_offset < 0 or last_epoch < 0 or last_epoch >= candidate_epoch:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST,
                       f"last offset {last_offset} in epoch {last_epoch} for candidate epoch {candidate_epoch}")
    candidate = partition["candidate_id"]
    if candidate not in rules.voters and not rules.dynamic:
        return _refuse(api_key, ErrorCode.INCONSISTENT_VOTER_SET, f"candidate {candidate} is not a voter")
    if candidate == rules.node_id:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "a vote request in this node's own name")
    return None


def _check_epoch_announcement(api_key: int, body: Body, rules: PeerRules) -> Refusal | None:
    """BeginQuorumEpoch and EndQuorumEpoch: a voter announcing its leadership's start or end."""
    # EndQuorumEpoch names no addressee.
    partition = _voter_partition(api_key, body, rules, addressed=api_key == ApiKey.BEGIN_QUORUM_EPOCH)
    if isinstance(partition, Refusal):
        return partition
    epoch, leader = partition["leader_epoch"], partition["leader_id"]
    if not _epoch_ok(epoch):
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"leader epoch {epoch} out of range")
    # Also in a dynamic quorum: a node behind on the voters ignores a leader it does not know
    # yet (it finds it by fetching and pre-voting), so no stranger can make it follow. A
    # leader that removed itself still says it is gone (the core heeds it only with the
    # token that leader gave this voter).
    if leader not in rules.voters and not (rules.dynamic and api_key == ApiKey.END_QUORUM_EPOCH and leader >= 0):
        return _refuse(api_key, ErrorCode.INCONSISTENT_VOTER_SET, f"leader {leader} is not a voter")
    if leader == rules.node_id:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "an epoch announcement in this node's own name")
    if api_key == ApiKey.END_QUORUM_EPOCH:
        successors = list(partition.get("preferred_successors") or [])
        successors += [c["candidate_id"] for c in partition.get("preferred_candidates") or []]
        strangers = sorted({node for node in successors if node not in rules.voters})
        if strangers and not rules.dynamic:
            return _refuse(api_key, ErrorCode.INCONSISTENT_VOTER_SET, f"successors {strangers} are not voters")
    return None


def _check_fetch(body: Body, rules: PeerRules) -> Refusal | None:
    api_key = ApiKey.FETCH
    partition = m.fetch_partition(body)
    if partition is None:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "not exactly __cluster_metadata-0")
    replica = m.fetch_replica_id(body)
    if replica < 0 or replica == rules.node_id:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"replica id {replica}")
    epoch = partition["current_leader_epoch"]
    if not _epoch_ok(epoch):
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"current leader epoch {epoch} out of range")
    last_fetched_epoch = partition["last_fetched_epoch"]
    if partition["fetch_offset"] < 0 or not 0 <= last_fetched_epoch <= epoch:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST,
                       f"fetch offset {partition['fetch_offset']} in epoch {last_fetched_epoch} at epoch {epoch}")
    if body.get("max_bytes", 0) < 0 or body.get("max_wait_ms", 0) < 0:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "negative max_bytes or max_wait_ms")
    return None


def _check_fetch_snapshot(body: Body, rules: PeerRules) -> Refusal | None:
    api_key = ApiKey.FETCH_SNAPSHOT
    partition = m.single_partition(body, topic_key="name")
    if partition is None:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "not exactly __cluster_metadata-0")
    replica = body.get("replica_id", -1)
    if replica < 0 or replica == rules.node_id:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"replica id {replica}")
    epoch = partition["current_leader_epoch"]
    snapshot = partition["snapshot_id"]
    if not _epoch_ok(epoch) or not _epoch_ok(snapshot["epoch"]) or snapshot["epoch"] > epoch:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, f"epochs {epoch}/{snapshot['epoch']} out of range")
    if snapshot["end_offset"] < 0 or partition["position"] < 0 or body.get("max_bytes", 0) < 0:
        return _refuse(api_key, ErrorCode.INVALID_REQUEST, "negative snapshot offset, position or max_bytes")
    return None


# -- responses ------------------------------------------------------------------

def _leader_ok(leader: Any, epoch: Any, rules: PeerRules) -> bool:
    """A (leader id, epoch) a responder reports: -1/None for unknown, else a voter; epoch -1 or in range."""
    if leader is not None and leader != -1 and (leader < 0 if rules.dynamic else leader not in rules.voters):
        return False
    return epoch == -1 or _epoch_ok(epoch)


def check_response(api_key: int, body: Body | None, rules: PeerRules) -> Refusal | None:
    """None if the core may read the response; a refusal makes the driver treat it as failed."""
    if body is None or body.get("error_code"):
        return None
    if api_key == ApiKey.FETCH:
        partition = m.fetch_partition(body)
        if partition is None:
            return None  # the core treats it as a failed fetch
        current = partition.get("current_leader") or {}
        if not _leader_ok(current.get("leader_id", -1), current.get("leader_epoch", -1), rules):
            return _refuse_response(api_key, "current leader out of range")
        diverging = partition.get("diverging_epoch") or {}
        snapshot = partition.get("snapshot_id") or {}
        for name, tag in (("diverging epoch", diverging), ("snapshot id", snapshot)):
            if tag.get("epoch", -1) != -1 and not _epoch_ok(tag.get("epoch")):
                return _refuse_response(api_key, f"{name} epoch out of range")
        return None
    topic_key = "name" if api_key == ApiKey.FETCH_SNAPSHOT else "topic_name"
    partition = m.single_partition(body, topic_key=topic_key)
    if partition is None:
        return None
    if api_key == ApiKey.FETCH_SNAPSHOT:
        current = partition.get("current_leader") or {}
        leader, epoch = current.get("leader_id", -1), current.get("leader_epoch", -1)
    else:
        leader, epoch = partition.get("leader_id", -1), partition.get("leader_epoch", -1)
    if not _leader_ok(leader, epoch, rules):
        return _refuse_response(api_key, f"leader {leader} in epoch {epoch} out of range")
    return None


def _refuse_response(api_key: int, reason: str) -> Refusal:
    return Refusal(api_key, ErrorCode.INVALID_REQUEST, RESPONSE_REFUSED, reason)
