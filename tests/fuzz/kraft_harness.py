"""One real `RaftCore` of a 3-voter quorum, driven as the trio driver drives it, with invariants.

Owns: `FuzzNode` (a core on a `MemoryRaftLog` and a `MemoryQuorumStateStore`
with the wire records codec), the ways to put it in a role (`build_node`:
unattached, prospective, candidate, follower, leader with a log, leader with
a snapshot, resigned, an observer, a follower at the last epoch), the driver's
request path (`deliver`: `validate.check_request`, then `core.handle_request`,
a `RaftProtocolError` answered as a refusal), its response path
(`deliver_response`: `check_response`, then `handle_response`), ticks, peers
that grant votes (`grant_votes`), fetch from a leader with their token
(`fetch_from`) or answer a follower's fetch as a possibly lying leader
(`serve_fetch`), and the checks made after every step.

Rules kept here:
- The driver's order: persist the quorum state, apply log operations, flush,
  send (every outbound request and deferred answer is encoded with the wire
  codec at `messages.WIRE_VERSIONS`, an immediate answer at the version it
  answers), advance. An `EncodeError` anywhere is a failure: it is how an
  int32 epoch overflow crashed nodes.
- Invariants after every step (`InvariantViolation` names the broken one):
  the epoch never decreases and stays an int32, above `MAX_EPOCH` only by the
  node's own election; the persisted quorum state equals the core's; the high
  watermark never decreases and never passes the log end; an entry below the
  high watermark, once seen, never changes or disappears (unless a snapshot
  replaced it); the Ready loop settles.
- `trace` records every step in a form a reproduction can be written from.
- Bounded: the Ready loop by `MAX_READY_ROUNDS`, the peers' answers by what is
  outstanding.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import DecodeError, EncodeError, ErrorCode
from protocol.record_batch import encode_batch
from protocol.registry import API_MESSAGES
from server.raft import messages as m
from server.raft.core import (
    DEFERRED,
    Append,
    InstallSnapshot,
    RaftConfig,
    RaftCore,
    RaftProtocolError,
    Role,
    TruncateTo,
)
from server.raft.log import Batch, MemoryRaftLog, WireRecordsCodec
from server.raft.messages import WIRE_VERSIONS, ApiKey
from server.raft.quorum_state import MemoryQuorumStateStore, QuorumState
from server.raft.rpc import sender_of
from server.raft.validate import MAX_EPOCH, PeerRules, check_request, check_response, refusal_response
from server.values import SnapshotId

CLUSTER_ID = "kraft-fuzz-AAAAAAAAAAA"
VOTERS = frozenset({1, 2, 3})
ME = 1
OBSERVER_ID = 4
INT32_MAX = 2**31 - 1
DESCRIBE_QUORUM = 55
START_MS = 1_000_000
ELECTION_TIMEOUT_MS = 100
FETCH_TIMEOUT_MS = 200
MAX_READY_ROUNDS = 1000

ROLES = ("unattached", "unattached_epoch", "prospective", "candidate", "follower", "leader",
         "leader_snapshot", "resigned", "observer", "follower_at_max_epoch", "candidate_at_max_epoch")


class InvariantViolation(AssertionError):
    pass


@dataclass
class Outcome:
    """How one inbound message ended: answered (`error` is the top-level code), refused, or
    (bytes only) undecodable."""

    kind: str  # "answered", "deferred", "refused", "core_refused", "undecodable", "described"
    error: int = 0
    event: str = ""


@dataclass(eq=False)
class FuzzNode:
    node_id: int = ME
    voters: frozenset[int] = VOTERS
    initial_state: QuorumState = field(default_factory=QuorumState)
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    seed: int = 0
    now_ms: int = START_MS
    pre_vote: bool = True

    def __post_init__(self) -> None:
        self.store = MemoryQuorumStateStore(self.initial_state)
        self.config = RaftConfig(
            node_id=self.node_id, voters=self.voters, cluster_id=CLUSTER_ID,
            election_timeout_ms=ELECTION_TIMEOUT_MS, fetch_timeout_ms=FETCH_TIMEOUT_MS, request_timeout_ms=100,
            fetch_max_wait_ms=50, retry_backoff_ms=10, fetch_max_bytes=4096, snapshot_chunk_bytes=512,
            pre_vote=self.pre_vote,
        )
        self.rules = PeerRules(CLUSTER_ID, self.node_id, self.voters)
        self.trace: list[str] = []
        self.outstanding: list[tuple[int, int, dict]] = []  # (destination, api key, request body)
        self.outcomes: dict[str, int] = {}
        # The token this node (as leader) last sent each voter in BeginQuorumEpoch.
        self.voter_tokens: dict[int, int] = {}
        # Invariant state.
        self.max_epoch_seen = self.initial_state.epoch
        self.max_high_watermark = 0
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.core = RaftCore(self.config, self.log, self.store.read(), random.Random(self.seed), self.now_ms,
                             WireRecordsCodec())
        self.drain()
        self.check()

    # -- the driver ---------------------------------------------------------------

    def drain(self) -> None:
        core = self.core
        rounds = 0
        while core.has_ready():
            rounds += 1
            if rounds > MAX_READY_ROUNDS:
                raise InvariantViolation("the Ready loop does not settle")
            ready = core.ready()
            if ready.quorum_state is not None:
                self.store.write(ready.quorum_state)  # raises QuorumStateError on an illegal transition
            for op in ready.log_ops:
                if isinstance(op, Append):
                    self.log.append(op.batch)
                elif isinstance(op, TruncateTo):
                    self.log.truncate_to(op.offset)
                elif isinstance(op, InstallSnapshot):
                    self.log.install_snapshot(op.snapshot_id, op.data)
            self.log.flush()
            for request in ready.requests:
                encode_body(request.api_key, "request", WIRE_VERSIONS[ApiKey(request.api_key)], request.body)
                self.outstanding.append((request.destination, int(request.api_key), request.body))
                if request.api_key == ApiKey.BEGIN_QUORUM_EPOCH and m.voter_token(request.body) is not None:
                    self.voter_tokens[request.destination] = m.voter_token(request.body)
            for response in ready.responses:
                version = response.token if isinstance(response.token, int) else WIRE_VERSIONS[response.api_key]
                encode_body(response.api_key, "response", version, response.body)
            if ready.high_watermark is not None and ready.high_watermark < self.max_high_watermark:
                raise InvariantViolation(f"Ready high watermark {ready.high_watermark} went back "
                                         f"from {self.max_high_watermark}")
            core.advance(ready, self.log.flushed_end_offset, self.now_ms)
        del self.outstanding[:-64]  # only recent requests are answered by the peers

    def _count(self, outcome: Outcome) -> Outcome:
        self.outcomes[outcome.kind] = self.outcomes.get(outcome.kind, 0) + 1
        return outcome

    def deliver(self, api_key: int, version: int, body: dict) -> Outcome:
        """A decoded request, as server/raft/rpc.py and the driver handle it."""
        self.trace.append(f"request api={api_key} v{version} body={_short(body)}")
        if api_key == DESCRIBE_QUORUM:
            return self._count(self._describe(version))
        refusal = check_request(api_key, body, self.rules)
        if refusal is not None:
            encode_body(api_key, "response", version, refusal_response(refusal))
            self.check()
            return self._count(Outcome("refused", int(refusal.error), refusal.event))
        sender = sender_of(api_key, body)
        try:
            answer = self.core.handle_request(sender, api_key, body, self.now_ms, token=version)
        except RaftProtocolError as exc:
            encode_body(api_key, "response", version, m.error_response(api_key, exc.error))
            outcome = Outcome("core_refused", int(exc.error), exc.event)
        else:
            if answer is DEFERRED:
                outcome = Outcome("deferred")
            else:
                encode_body(api_key, "response", version, answer)
                outcome = Outcome("answered", int(answer.get("error_code", 0)))
        self.drain()
        self.check()
        return self._count(outcome)

    def deliver_bytes(self, api_key: int, version: int, data: bytes) -> Outcome:
        """Request body bytes: undecodable ones never reach the driver (the dispatcher answers)."""
        try:
            body = API_MESSAGES[api_key][0].decode(version, data)
        except DecodeError:
            self.trace.append(f"bytes api={api_key} v{version} {data.hex()} (undecodable)")
            return self._count(Outcome("undecodable"))
        self.trace.append(f"bytes api={api_key} v{version} {data.hex()}")
        return self.deliver(api_key, version, body)

    def deliver_response(self, index: int, body: dict | None) -> str:
        """A response to the outstanding request `index`, as the driver's `_Response` branch reads it."""
        if not self.outstanding:
            return "none outstanding"
        destination, api_key, request_body = self.outstanding.pop(index % len(self.outstanding))
        version = WIRE_VERSIONS[ApiKey(api_key)]
        if body is not None:
            body = API_MESSAGES[api_key][1].decode(version, encode_body(api_key, "response", version, body))
        self.trace.append(f"response from={destination} api={api_key} body={_short(body)}")
        refusal = check_response(api_key, body, self.rules)
        if refusal is not None:
            body = None
        result = "refused" if refusal is not None else "read"
        try:
            self.core.handle_response(destination, api_key, request_body, body, self.now_ms)
        except RaftProtocolError:
            result = "core_refused"
        self.drain()
        self.check()
        return result

    def grant_votes(self) -> None:
        """Every outstanding Vote request answered with a grant by its voter (a cooperative peer)."""
        votes = [(i, item) for i, item in enumerate(self.outstanding) if item[1] == ApiKey.VOTE]
        self.trace.append(f"grant {len(votes)} votes")
        for destination, _, request_body in [item for _, item in votes]:
            self.outstanding.remove((destination, ApiKey.VOTE, request_body))
            partition = m.single_partition(request_body)
            pre_vote = m.is_pre_vote(request_body)
            epoch = self.core.epoch if pre_vote else partition["candidate_epoch"]
            body = m.vote_response(ErrorCode.NONE, ErrorCode.NONE, None, epoch, granted=True)
            if check_response(ApiKey.VOTE, body, self.rules) is not None:
                continue
            self.core.handle_response(destination, ApiKey.VOTE, request_body, body, self.now_ms)
            self.drain()
        self.check()

    def serve_fetch(self, kind: str, offset_delta: int, epoch_delta: int, snapshot_bytes: int) -> str:
        """The leader's answer to this follower's outstanding Fetch or FetchSnapshot, as a
        (possibly lying) leader would give it: `kind` "records" (a batch at the fetch offset
        + `offset_delta`, high watermark past it), "diverging" (at the fetch offset +
        `offset_delta` in the epoch + `epoch_delta`) or "snapshot" (a snapshot id there);
        a FetchSnapshot gets the next chunk of a `snapshot_bytes` snapshot."""
        core = self.core
        index = next((i for i in range(len(self.outstanding) - 1, -1, -1)
                      if self.outstanding[i][1] in (ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT)), None)
        if index is None or core.leader_id is None:
            return "nothing to serve"
        _, api_key, request = self.outstanding[index]
        leader = dict(leader_id=core.leader_id, epoch=core.epoch)
        if api_key == ApiKey.FETCH_SNAPSHOT:
            partition = m.single_partition(request, topic_key="name")
            wanted = partition["snapshot_id"]
            position = partition["position"]
            data = b"s" * max(0, min(512, snapshot_bytes - position))
            body = m.fetch_snapshot_response(ErrorCode.NONE, snapshot_id=(wanted["end_offset"], wanted["epoch"]),
                                             size=snapshot_bytes, position=position, data=data, **leader)
        else:
            partition = m.fetch_partition(request)
            offset = max(0, partition["fetch_offset"] + offset_delta)
            epoch = max(0, min(core.epoch, partition["last_fetched_epoch"] + epoch_delta))
            if kind == "records":
                records = encode_batch(offset, core.epoch, (b"served",), START_MS)
                body = m.fetch_response(ErrorCode.NONE, records=records, high_watermark=offset + 1, **leader)
            elif kind == "diverging":
                body = m.fetch_response(ErrorCode.NONE, diverging=(epoch, offset), high_watermark=offset, **leader)
            else:
                body = m.fetch_response(ErrorCode.NONE, snapshot_id=(offset, epoch), high_watermark=offset, **leader)
        return self.deliver_response(index, body)

    def tick(self, delta_ms: int) -> None:
        self.trace.append(f"tick +{delta_ms} ms")
        self.now_ms += delta_ms
        self.core.tick(self.now_ms)
        self.drain()
        self.check()

    def propose(self, value: bytes) -> None:
        self.trace.append(f"propose {value!r}")
        self.core.propose([value], self.now_ms)
        self.drain()
        self.check()

    def _describe(self, version: int) -> Outcome:
        """DescribeQuorum is answered outside the core, from `core.describe()` (the
        driver's describe_partition shape); the answer must encode whatever replica
        ids and offsets fuzzed Fetches left in the leader's view."""
        core = self.core
        if core.role is Role.LEADER:
            info = core.describe()

            def replica(node_id: int, state) -> dict:
                return {"replica_id": node_id, "log_end_offset": state.end_offset,
                        "last_fetch_timestamp": state.last_fetch_ms,
                        "last_caught_up_timestamp": state.last_caught_up_ms}

            partition = {"partition_index": 0, "error_code": 0, "leader_id": self.node_id, "leader_epoch": info.epoch,
                         "high_watermark": info.high_watermark,
                         "current_voters": [replica(n, s) for n, s in sorted(info.voters.items())],
                         "observers": [replica(n, s) for n, s in sorted(info.observers.items())]}
        else:
            partition = {"partition_index": 0, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                         "leader_id": -1 if core.leader_id is None else core.leader_id, "leader_epoch": core.epoch,
                         "high_watermark": core.high_watermark, "current_voters": [], "observers": []}
        body = {"error_code": 0, "topics": [{"topic_name": m.METADATA_TOPIC, "partitions": [partition]}], "nodes": []}
        encode_body(DESCRIBE_QUORUM, "response", version, body)
        return Outcome("described")

    # -- invariants -----------------------------------------------------------------

    def check(self) -> None:
        core = self.core
        state = core.quorum_state
        if self.store.read() != state:
            raise InvariantViolation(f"persisted {self.store.read()} != in-memory {state}")
        if core.epoch < self.max_epoch_seen:
            raise InvariantViolation(f"epoch went back from {self.max_epoch_seen} to {core.epoch}")
        self.max_epoch_seen = core.epoch
        if core.epoch > INT32_MAX:
            raise InvariantViolation(f"epoch {core.epoch} overflows int32")
        if core.epoch > MAX_EPOCH and self.node_id not in (state.voted_id, state.leader_id):
            raise InvariantViolation(f"epoch {core.epoch} > MAX_EPOCH reached without this node's own election "
                                     f"({state})")
        if core.high_watermark < self.max_high_watermark:
            raise InvariantViolation(f"high watermark went back from {self.max_high_watermark} "
                                     f"to {core.high_watermark}")
        self.max_high_watermark = core.high_watermark
        if core.high_watermark > self.log.end_offset:
            raise InvariantViolation(f"high watermark {core.high_watermark} past the log end {self.log.end_offset}")
        entries = {offset: (epoch, value) for offset, epoch, value, _ in self.log.entries()}
        start = self.log.start_offset
        for offset in range(start, core.high_watermark):
            entry = entries.get(offset)
            if entry is None:
                raise InvariantViolation(f"committed offset {offset} is missing (log {start}..{self.log.end_offset})")
            known = self.committed.setdefault(offset, entry)
            if known != entry:
                raise InvariantViolation(f"committed offset {offset} changed from {known} to {entry}")


def encode_body(api_key: int, kind: str, version: int, body: Any) -> bytes:
    """The wire codec's encoding; an EncodeError is an invariant failure (a node would crash)."""
    request_message, response_message = API_MESSAGES[int(api_key)]
    message = request_message if kind == "request" else response_message
    try:
        return message.encode(version, body)
    except EncodeError as exc:
        raise InvariantViolation(f"{kind} of api {int(api_key)} v{version} does not encode: {exc}: {_short(body)}")


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


# -- roles ---------------------------------------------------------------------------

def _history(epochs: tuple[int, ...] = (1, 2, 3, 4), per_epoch: int = 3) -> MemoryRaftLog:
    """A log with `per_epoch` single-record batches in each epoch (already flushed)."""
    log = MemoryRaftLog()
    offset = 0
    for epoch in epochs:
        for index in range(per_epoch):
            log.append(Batch(offset, epoch, (f"e{epoch}-{index}".encode(),), None, START_MS))
            offset += 1
    log.flush()
    return log


def fetch_from(node: FuzzNode, replica: int, offset: int | None = None, max_wait_ms: int = 0) -> Outcome:
    """A well-behaved follower's (or observer's) Fetch, with its token, at `offset` (default:
    the leader's end, which commits the leader's entries)."""
    core = node.core
    offset = core.end_offset if offset is None else offset
    last_epoch = node.log.epoch_before(offset) if node.log.start_offset <= offset <= node.log.end_offset \
        else core.last_epoch
    body = m.fetch_request(CLUSTER_ID, replica, core.epoch, offset, last_epoch, max_wait_ms, 4096,
                           node.voter_tokens.get(replica))
    return node.deliver(ApiKey.FETCH, WIRE_VERSIONS[ApiKey.FETCH], body)


def _elect(node: FuzzNode) -> None:
    node.tick(2 * ELECTION_TIMEOUT_MS)  # prospective (pre-vote)
    node.grant_votes()  # candidate
    node.grant_votes()  # leader
    if node.core.role is not Role.LEADER:
        raise InvariantViolation(f"the scripted election failed: {node.core.role}")
    for replica in (2, 3):
        fetch_from(node, replica)
    for index in range(3):
        node.propose(f"v{index}".encode())
    for replica in (2, 3):
        fetch_from(node, replica)


def build_node(role: str, seed: int = 0) -> FuzzNode:
    """A node of the 3-voter quorum in `role` (see ROLES), through real transitions where it matters."""
    if role == "unattached":
        node = FuzzNode(seed=seed)
    elif role == "unattached_epoch":
        node = FuzzNode(initial_state=QuorumState(epoch=5), log=_history(), seed=seed)
    elif role == "prospective":
        node = FuzzNode(initial_state=QuorumState(epoch=5), log=_history(), seed=seed)
        node.tick(2 * ELECTION_TIMEOUT_MS)
    elif role == "candidate":
        node = FuzzNode(initial_state=QuorumState(epoch=5, voted_id=ME), log=_history(), seed=seed)
    elif role == "follower":
        node = FuzzNode(initial_state=QuorumState(epoch=5, leader_id=2), log=_history(), seed=seed)
    elif role in ("leader", "leader_snapshot", "resigned"):
        node = FuzzNode(initial_state=QuorumState(epoch=4), log=_history(), seed=seed)
        _elect(node)
        if role == "leader_snapshot":
            end = node.core.high_watermark - 1
            node.log.create_snapshot(SnapshotId(end, node.log.epoch_before(end)), b"snapshot-bytes" * 100)
        elif role == "resigned":
            node.core.resign(node.now_ms)
            node.drain()
    elif role == "observer":
        node = FuzzNode(node_id=OBSERVER_ID, initial_state=QuorumState(epoch=5, leader_id=2), log=_history(),
                        seed=seed)
    elif role == "follower_at_max_epoch":
        node = FuzzNode(initial_state=QuorumState(epoch=MAX_EPOCH, leader_id=2), log=_history(), seed=seed)
    elif role == "candidate_at_max_epoch":
        # No pre-vote: the fetch timeout makes it a candidate of MAX_EPOCH + 1 at once.
        node = FuzzNode(initial_state=QuorumState(epoch=MAX_EPOCH, leader_id=2), log=_history(), seed=seed,
                        pre_vote=False)
        node.tick(3 * FETCH_TIMEOUT_MS)
    else:
        raise ValueError(f"unknown role {role}")
    node.trace.append(f"--- built {role}: {node.core.role.value} epoch {node.core.epoch} "
                      f"leader {node.core.leader_id} end {node.core.end_offset} hw {node.core.high_watermark}")
    return node
