"""A seeded, deterministic simulation of a KRaft quorum running the real `RaftCore`.

Owns: simulated time (an event heap), an in-memory network (drop, delay,
duplication, reordering, partitions), node lifecycles (graceful shutdown,
kill -9 losing unflushed writes, restart, disk loss), client proposals, an
optional hostile participant (tests/sim/hostile.py), and the invariant checks
of FACTS §12, run after every event.

Rules kept here:
- Everything random comes from one `random.Random(seed)` (and generators
  derived from it: per node, and one for the hostile node), so a seed replays
  exactly.
- The driver does what the core's Ready says in order: persist the quorum
  state, apply log operations, flush if asked, send, then advance. Leaders and
  observers flush later (a separate event), so kill -9 can lose their tail.
- Messages reach the core the way server/raft/driver.py hands them over:
  `validate.check_request` first (its refusal is the answer), then
  `handle_request`, a `RaftProtocolError` answered as a refusal; responses go
  through `validate.check_response` (a refused one counts as failed).
- Invariants are checked incrementally but never less: after an event only the
  nodes it touched can have changed, a node's quorum state is re-checked only
  when its object changed (states are immutable), and committed data is compared
  once per offset per node (from where that node was last verified).
  Every violation names its invariant (`InvariantViolation.invariant`).
- Bounded: every run has a simulated-time limit and an event-count limit.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import random
import struct
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.registry import API_MESSAGES
from server.raft.core import (
    DEFERRED,
    Append,
    InstallSnapshot,
    NotLeader,
    RaftConfig,
    RaftCore,
    RaftProtocolError,
    Role,
    TruncateTo,
)
from protocol.record_batch import ControlRecordType
from server.raft.log import PassThroughRecordsCodec, WireRecordsCodec
from server.raft.messages import WIRE_VERSIONS, ApiKey
from server.raft.quorum_state import MemoryQuorumStateStore, QuorumStateError
from server.raft.validate import INT32_MAX, PeerRules, Refusal, check_request, check_response, refusal_response
from server.voters import (KRAFT_VERSION_MAX, KRAFT_VERSION_MIN, Voter, VoterSet, decode_voters_record,
                                encode_kraft_version_record, encode_voters_record)
from server.raft.log import Batch
from server.values import SnapshotId

from .hostile import HostileNode
from .simlog import SimLog

CLUSTER_ID = "sim-cluster-AAAAAAAAAA"

# The invariants, by the names Kafka's RaftEventSimulationTest uses where it has one.
SINGLE_LEADER = "SingleLeader"
MONOTONIC_EPOCH = "MonotonicEpoch"
EPOCH_IN_RANGE = "EpochInRange"
QUORUM_STATE_TRANSITION = "QuorumStateTransition"
MONOTONIC_HIGH_WATERMARK = "MonotonicHighWatermark"
MAJORITY_REACHED_HIGH_WATERMARK = "MajorityReachedHighWatermark"
# KIP-853: committed voter sets differ by at most one voter, so their majorities intersect.
ONE_VOTER_CHANGE_AT_A_TIME = "OneVoterChangeAtATime"
CONSISTENT_COMMITTED_DATA = "ConsistentCommittedData"
SNAPSHOT_AT_LOG_START = "SnapshotAtLogStart"
NO_CRASH = "NoCrash"
LIVENESS = "Liveness"
EVENT_BUDGET = "EventBudget"


class InvariantViolation(AssertionError):
    def __init__(self, message: str, invariant: str) -> None:
        super().__init__(message)
        self.invariant = invariant


@dataclass(frozen=True)
class SimConfig:
    voters: int = 3
    observers: int = 0
    fault_duration_ms: int = 2000
    # After faults heal (and a hostile node stops): a leader must commit a new
    # value within this bound, 40 election timeouts.
    liveness_bound_ms: int = 4000
    election_timeout_ms: int = 100
    fetch_timeout_ms: int = 200
    # Observers' own fetch timeout (None: the voters'); brokers may set theirs apart.
    observer_fetch_timeout_ms: int | None = None
    request_timeout_ms: int = 100
    fetch_max_wait_ms: int = 50
    high_watermark_linger_ms: int = 5
    retry_backoff_ms: int = 10
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    jitter_rate: float = 0.0
    propose_interval_ms: int = 20
    faults: tuple[str, ...] = ()
    wire_codec: bool = False
    pre_vote: bool = True
    # A request to a node whose process is down fails at once (its host refuses the
    # connection, as after kill -9) instead of vanishing (a machine gone, a partition).
    refuse_when_down: bool = False
    # None, or who the hostile node claims to be: "own" (an id of its own),
    # "voter" (it impersonates a voter) or "observer" (an observer's id).
    hostile: str | None = None
    # KIP-853: kraft.version 1, the voters in the log (every node's log starts with the
    # initial set, as a formatted bootstrap would), and voter changes among the faults.
    dynamic: bool = False
    max_events: int = 400_000


HOSTILE_IDENTITIES = ("own", "voter", "observer")
# The share of sweep seeds with a hostile node.
HOSTILE_SHARE = 0.25


# The share of sweep seeds with a dynamic quorum, and the voter changes they add to their faults.
DYNAMIC_SHARE = 0.3
VOTER_FAULTS = ("add_voter", "add_voter", "remove_voter", "remove_leader")


def random_sim_config(rng: random.Random) -> SimConfig:
    voters = rng.choice((3, 3, 5))
    all_faults = ("partition", "isolate_leader", "back_to_back", "kill", "kill_leader", "shutdown",
                  "wipe", "kill_all", "snapshot", "snapshot")
    config = SimConfig(
        voters=voters,
        observers=rng.choice((0, 0, 1, 2)),
        fault_duration_ms=rng.randrange(500, 1500),
        drop_rate=rng.choice((0.0, 0.0, 0.02, 0.1)),
        duplicate_rate=rng.choice((0.0, 0.02, 0.05)),
        jitter_rate=rng.choice((0.0, 0.05, 0.2)),
        propose_interval_ms=rng.choice((10, 25, 50)),
        faults=tuple(rng.choice(all_faults) for _ in range(rng.randrange(1, 6))),
        wire_codec=rng.random() < 0.1,
        pre_vote=rng.random() < 0.8,
        high_watermark_linger_ms=rng.choice((0, 5, 30)),
        # Drawn last, so the rest of a seed's configuration does not depend on them.
        hostile=rng.choice(HOSTILE_IDENTITIES) if rng.random() < HOSTILE_SHARE else None,
        refuse_when_down=rng.random() < 0.5,
    )
    if rng.random() < DYNAMIC_SHARE:
        # Drawn after everything else, so the static seeds keep their configurations.
        voter_faults = tuple(rng.choice(VOTER_FAULTS) for _ in range(rng.randrange(1, 5)))
        # Pre-vote too, as Kafka 4 always has it: without it a voter that was removed and does not
        # know it raises its epoch at every timeout, above the quorum's, and can never come back.
        config = dataclasses.replace(config, dynamic=True, observers=max(config.observers, 1),
                                     faults=config.faults + voter_faults, pre_vote=True)
    return config


# -- snapshots in the sim: the committed entries themselves, length-prefixed ------

_ENTRY = struct.Struct(">qih")


def encode_snapshot(entries: list[tuple[int, int, bytes, int | None]]) -> bytes:
    out = bytearray()
    for offset, epoch, value, control in entries:
        out += _ENTRY.pack(offset, epoch, -1 if control is None else control)
        out += struct.pack(">I", len(value)) + value
    return bytes(out)


def snapshot_voter_records(read, size: int) -> list[tuple[int, bytes]]:
    """The core's view of a sim snapshot's control records: every voter record it holds, in order."""
    return [(control, value) for _, _, value, control in decode_snapshot(read(0, size) or b"")
            if control in (ControlRecordType.KRAFT_VERSION, ControlRecordType.VOTERS)]


class SimPassThroughCodec(PassThroughRecordsCodec):
    def snapshot_control_records(self, read, size: int) -> list[tuple[int, bytes]]:
        return snapshot_voter_records(read, size)


class SimWireCodec(WireRecordsCodec):
    def snapshot_control_records(self, read, size: int) -> list[tuple[int, bytes]]:
        return snapshot_voter_records(read, size)


def decode_snapshot(data: bytes) -> list[tuple[int, int, bytes, int | None]]:
    entries = []
    position = 0
    while position < len(data):
        offset, epoch, control = _ENTRY.unpack_from(data, position)
        position += _ENTRY.size
        (length,) = struct.unpack_from(">I", data, position)
        position += 4
        entries.append((offset, epoch, data[position:position + length], None if control < 0 else control))
        position += length
    return entries


@dataclass(eq=False)
class Node:
    node_id: int
    is_voter: bool
    rules: PeerRules
    log: SimLog = field(default_factory=SimLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    core: RaftCore | None = None
    incarnation: int = 0
    tick_at: int | None = None
    flush_at: int | None = None
    # Committed offsets of this node already compared with the global record.
    verified_to: int = 0
    max_persisted_epoch: int = 0
    last_leader_check: tuple[int, int] = (-1, -1)
    last_high_watermark: int = 0
    # The (in-memory, persisted) quorum-state objects last checked: both are
    # immutable, so the same pair passes the same checks again.
    checked_state: Any = None
    checked_stored: Any = None
    # Requests this node's core deferred (long-polled fetches) and has not answered:
    # (requester, requester's incarnation, api key, request body).
    held: list[tuple[int, int, int, Any]] = field(default_factory=list)


class Simulation:
    # What every node runs; tests/sim/test_invariants.py substitutes deliberately broken cores.
    core_class: type[RaftCore] = RaftCore

    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config or random_sim_config(random.Random(seed ^ 0x5EED))
        cfg = self.config
        self.now = 0
        # Heap entries: (time, sequence, handler, args); the sequence keeps
        # same-time events in scheduling order and is never equal, so handlers
        # are never compared.
        self.events: list[tuple[int, int, Callable[..., None], tuple]] = []
        self.sequence = 0
        self.event_count = 0
        voter_ids = list(range(1, cfg.voters + 1))
        observer_ids = list(range(cfg.voters + 1, cfg.voters + cfg.observers + 1))
        self.voter_ids = frozenset(voter_ids)
        dynamic = cfg.dynamic
        self.nodes = {i: Node(i, True, PeerRules(CLUSTER_ID, i, self.voter_ids, dynamic)) for i in voter_ids}
        self.nodes.update({i: Node(i, False, PeerRules(CLUSTER_ID, i, self.voter_ids, dynamic)) for i in observer_ids})
        self.directory_ids = {i: uuid.UUID(int=random.Random(f"{seed}/directory/{i}").getrandbits(128))
                              for i in self.nodes}
        self.initial_voters = VoterSet(tuple(self.voter_of(i) for i in voter_ids))
        if dynamic:
            for node in self.nodes.values():
                self.write_bootstrap(node)
        self.blocked: set[tuple[int, int]] = set()
        self.drop_rate = cfg.drop_rate
        self.duplicate_rate = cfg.duplicate_rate
        # Invariant state.
        self.epoch_leaders: dict[int, int] = {}
        self.max_leader_hw_by_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes, int | None]] = {}
        self.committed_end = 0
        self.committed_voter_offsets: list[int] = []
        # The largest high watermark any leader reported, and whether the
        # majority check must run again (a log lost data or the watermark moved).
        self.committed_hw = 0
        self.majority_dirty = False
        self.acked: dict[int, bytes] = {}
        self.proposals: list[tuple[int, int, bytes]] = []
        self.value_counter = 0
        self.proposing = True
        self.codec = SimWireCodec() if cfg.wire_codec else SimPassThroughCodec()
        self.trace: list[str] = []
        self.stats: dict[str, int] = {}
        # Nodes that handled something since the last invariant check, in the
        # order they did (a dict: checks run in a replayable order).
        self.touched: dict[Node, None] = {}
        span = cfg.max_delay_ms - cfg.min_delay_ms + 1
        self._delay_span = (span, span.bit_length())
        # Bound once: the hot paths schedule these for every message.
        self._deliver_request = self.on_request
        self._deliver_response = self.on_response
        self._tick = self.on_tick
        self._flush = self.on_flush
        self.hostile: HostileNode | None = None
        if cfg.hostile is not None:
            self.hostile = HostileNode(self, cfg.hostile, CLUSTER_ID)
        for node in self.nodes.values():
            self.start_node(node)

    # -- plumbing ---------------------------------------------------------------

    def schedule(self, at_ms: int, handler: Callable[..., None], *args: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at_ms, self.sequence, handler, args))

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    def voter_of(self, node_id: int) -> Voter:
        return Voter(node_id, self.directory_ids[node_id], (), KRAFT_VERSION_MIN, KRAFT_VERSION_MAX)

    def write_bootstrap(self, node: Node) -> None:
        """What a dynamic quorum's format gives every node: kraft.version 1 and the first voters,
        as the first (committed, epoch 0) entries of the log."""
        node.log.append(Batch(0, 0, (encode_kraft_version_record(1),), int(ControlRecordType.KRAFT_VERSION)))
        node.log.append(Batch(1, 0, (encode_voters_record(self.initial_voters),), int(ControlRecordType.VOTERS)))
        node.log.flush()

    def raft_config(self, node: Node) -> RaftConfig:
        cfg = self.config
        return RaftConfig(
            # A dynamic quorum's nodes have no static voters: only their logs name them.
            node_id=node.node_id, voters=frozenset() if cfg.dynamic else self.voter_ids, cluster_id=CLUSTER_ID,
            directory_id=self.directory_ids[node.node_id] if cfg.dynamic else None,
            bootstrap_ids=tuple(sorted(self.voter_ids)) if cfg.dynamic else (),
            election_timeout_ms=cfg.election_timeout_ms,
            fetch_timeout_ms=cfg.fetch_timeout_ms if node.node_id in self.voter_ids or cfg.observer_fetch_timeout_ms
            is None else cfg.observer_fetch_timeout_ms,
            request_timeout_ms=cfg.request_timeout_ms, fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            retry_backoff_ms=cfg.retry_backoff_ms, fetch_max_bytes=4096, snapshot_chunk_bytes=512,
            pre_vote=cfg.pre_vote, high_watermark_linger_ms=cfg.high_watermark_linger_ms,
        )

    def start_node(self, node: Node) -> None:
        assert node.core is None
        node.incarnation += 1
        node.tick_at = None
        node.flush_at = None
        node.verified_to = node.log.start_offset
        node.last_high_watermark = 0
        node.checked_state = node.checked_stored = None
        rng = random.Random(f"{self.seed}/{node.node_id}/{node.incarnation}")
        node.core = self.core_class(self.raft_config(node), node.log, node.store.read(), rng, self.now, self.codec)
        if self.config.dynamic:
            node.rules = PeerRules(CLUSTER_ID, node.node_id, node.core.voters.ids, dynamic=True)
            node.is_voter = node.core.is_voter
        self.drain(node)

    def stop_node(self, node: Node, graceful: bool) -> None:
        if node.core is None:
            return
        if graceful:
            node.core.resign(self.now)
            self.drain(node)
            node.log.flush()
        else:
            node.log.crash()
        if self.config.refuse_when_down:
            # The process's connections close: what it held fails at the requesters.
            for requester, incarnation, api_key, request_body in node.held:
                if (node.node_id, requester) not in self.blocked:
                    self.schedule(self.now + self.network_delay(), self._deliver_response, node.node_id, requester,
                                  incarnation, api_key, request_body, None)
        node.held.clear()
        self.majority_dirty = True
        node.core = None

    # -- the driver ---------------------------------------------------------------

    def drain(self, node: Node) -> None:
        core = node.core
        assert core is not None
        self.touched[node] = None
        log = node.log
        rounds = 0
        while core.has_ready():
            rounds += 1
            assert rounds < 1000, "ready loop does not settle"
            ready = core.ready()
            if ready.role_change is not None:
                change = ready.role_change
                self.note(f"node {node.node_id} -> {change.role.value} epoch {change.epoch} leader {change.leader_id}")
            if ready.voter_set is not None:
                node.rules = PeerRules(CLUSTER_ID, node.node_id, ready.voter_set.ids, dynamic=True)
                node.is_voter = core.is_voter
                self.note(f"node {node.node_id} voters {sorted(ready.voter_set.ids)}")
            state = ready.quorum_state
            if state is not None:
                # Checked before the store sees it: the store refuses these too,
                # but the checker must name what broke.
                if state.epoch < node.max_persisted_epoch:
                    self.fail(f"node {node.node_id}: persisted epoch went back from {node.max_persisted_epoch} "
                              f"to {state.epoch}", MONOTONIC_EPOCH)
                if state.epoch > INT32_MAX:
                    self.fail(f"node {node.node_id}: epoch {state.epoch} overflows int32", EPOCH_IN_RANGE)
                try:
                    node.store.write(state)
                except QuorumStateError as exc:
                    self.fail(f"node {node.node_id}: {exc}", QUORUM_STATE_TRANSITION)
                node.max_persisted_epoch = state.epoch
            for op in ready.log_ops:
                if type(op) is Append:
                    log.append(op.batch)
                elif type(op) is TruncateTo:
                    self.count("truncate")
                    self.majority_dirty = True
                    log.truncate_to(op.offset)
                    node.verified_to = min(node.verified_to, log.end_offset)
                elif type(op) is InstallSnapshot:
                    self.count("install_snapshot")
                    self.majority_dirty = True
                    self.check_snapshot(node, op.snapshot_id, op.data)
                    log.install_snapshot(op.snapshot_id, op.data)
                    node.verified_to = log.start_offset
                else:
                    raise TypeError(f"unknown log operation {op!r}")
            if ready.flush_before_send:
                log.flush()
            elif node.flush_at is None and ready.log_ops and ready.appends:
                # Leaders and observers flush later: a kill -9 before then loses the tail.
                node.flush_at = self.now + self.rng.randrange(0, 6)
                self.schedule(node.flush_at, self._flush, node.node_id, node.incarnation)
            for request in ready.requests:
                self.send_request(node.node_id, request.destination, request.api_key, request.body)
            for response in ready.responses:
                requester_incarnation, request_body = response.token
                if requester_incarnation is None:
                    # A deferred answer to the hostile node: it goes back on its connection.
                    self.hostile.receive(response.api_key, request_body, response.body)
                else:
                    node.held[:] = [h for h in node.held if h[3] is not request_body]
                    self.send_response(node.node_id, response.destination, response.api_key, request_body,
                                       response.body, requester_incarnation)
            core.advance(ready, log.flushed_end_offset, self.now)
        deadline = core.next_deadline_ms()
        if deadline is not None:
            now = self.now
            if deadline <= now:
                deadline = now + 1
            tick_at = node.tick_at
            if tick_at is None or deadline < tick_at or tick_at <= now:
                node.tick_at = deadline
                self.schedule(deadline, self._tick, node.node_id, node.incarnation)

    def send_request(self, source: int, destination: int, api_key: int, body: Any) -> None:
        if self.hostile is not None:
            self.hostile.overhear(source, destination, api_key, body)
        rng = self.rng
        if (source, destination) in self.blocked or rng.random() < self.drop_rate:
            return
        copies = 2 if rng.random() < self.duplicate_rate else 1
        sender_incarnation = self.nodes[source].incarnation
        cfg = self.config
        for _ in range(copies):
            delay = self.network_delay()
            payload = self.wire(api_key, "request", body) if cfg.wire_codec else body
            self.schedule(self.now + delay, self._deliver_request, source, destination, sender_incarnation,
                          api_key, body, payload)

    def send_response(self, source: int, destination: int, api_key: int, request_body: Any, response_body: Any,
                      incarnation: int) -> None:
        rng = self.rng
        if (source, destination) in self.blocked or rng.random() < self.drop_rate:
            return
        copies = 2 if rng.random() < self.duplicate_rate else 1
        cfg = self.config
        for _ in range(copies):
            delay = self.network_delay()
            payload = self.wire(api_key, "response", response_body) if cfg.wire_codec else response_body
            self.schedule(self.now + delay, self._deliver_response, source, destination, incarnation, api_key,
                          request_body, payload)

    def network_delay(self) -> int:
        """One message's delay: uniform in [min, max] ms, plus up to 40 ms of jitter that reorders messages.

        Draws exactly what `randint(min, max)` and `randrange(0, 40)` draw (CPython's
        rejection sampling on `getrandbits`), without their argument checks: this
        runs for every message."""
        rng = self.rng
        getrandbits = rng.getrandbits
        span, bits = self._delay_span
        draw = getrandbits(bits)
        while draw >= span:
            draw = getrandbits(bits)
        delay = self.config.min_delay_ms + draw
        if rng.random() < self.config.jitter_rate:
            draw = getrandbits(6)
            while draw >= 40:
                draw = getrandbits(6)
            delay += draw
        return delay

    def wire(self, api_key: int, kind: str, body: Any) -> Any:
        """In codec seeds, every body goes through the real encoder and decoder."""
        if not self.config.wire_codec:
            return body
        request_message, response_message = API_MESSAGES[int(api_key)]
        message = request_message if kind == "request" else response_message
        version = WIRE_VERSIONS[ApiKey(api_key)]
        decoded = message.decode(version, message.encode(version, body))
        if api_key == ApiKey.VOTE and kind == "request":
            # PreVote needs VoteRequest v2 (KIP-996); our declarations stop at v1.
            decoded["pre_vote"] = body.get("pre_vote", False)
        return decoded

    # -- the event loop -------------------------------------------------------------

    def step(self) -> bool:
        if not self.events:
            return False
        at_ms, _, handler, args = heapq.heappop(self.events)
        assert at_ms >= self.now
        self.now = at_ms
        self.event_count += 1
        if self.event_count > self.config.max_events:
            self.fail("event budget exhausted (livelock?)", EVENT_BUDGET)
        try:
            handler(*args)
        except InvariantViolation:
            raise
        except Exception as exc:  # noqa: BLE001 - any exception out of the core is a crash
            frames = "".join(traceback.format_exception(exc, limit=-6))
            self.fail(f"crash: {type(exc).__name__}: {exc}\n{frames}", NO_CRASH)
        # Only nodes that handled something can have changed (faults touch several).
        touched = self.touched
        if touched:
            for node in touched:
                self.check_node(node)
            touched.clear()
        if self.majority_dirty:
            self.check_majority()
        return True

    def run_until(self, end_ms: int) -> None:
        events = self.events
        while events and events[0][0] <= end_ms:
            self.step()
        self.now = max(self.now, end_ms)

    def on_tick(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation or node.tick_at != self.now:
            return
        node.tick_at = None
        node.core.tick(self.now)
        self.drain(node)

    def on_flush(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation:
            return
        node.flush_at = None
        node.core.note_flushed(node.log.flush(), self.now)
        self.drain(node)

    def on_request(self, source: int, destination: int, incarnation: int, api_key: int, request_body: Any,
                   payload: Any) -> None:
        node = self.nodes[destination]
        if (source, destination) in self.blocked:
            return
        if node.core is None:
            if self.config.refuse_when_down:
                self.schedule(self.now + self.network_delay(), self._deliver_response, destination, source,
                              incarnation, api_key, request_body, None)
            return
        answer = self.deliver_request(node, source, api_key, payload, (incarnation, request_body))
        if answer is DEFERRED:
            node.held.append((source, incarnation, api_key, request_body))
        else:
            self.send_response(destination, source, api_key, request_body, answer, incarnation)
        self.drain(node)

    def deliver_request(self, node: Node, sender_id: int, api_key: int, body: Any, token: Any) -> Any:
        """What server/raft/driver.py does with an inbound request: validate, then the core."""
        refusal = check_request(api_key, body, node.rules)
        if refusal is not None:
            self.count(f"refused.{refusal.error.name}")
            return refusal_response(refusal)
        try:
            return node.core.handle_request(sender_id, api_key, body, self.now, token=token)
        except RaftProtocolError as exc:
            self.count(f"refused.{exc.event}")
            return refusal_response(Refusal(api_key, exc.error, exc.event, exc.reason))

    def on_response(self, source: int, destination: int, incarnation: int, api_key: int, request_body: Any,
                    payload: Any) -> None:
        node = self.nodes[destination]
        if node.core is None or node.incarnation != incarnation or (source, destination) in self.blocked:
            return
        if check_response(api_key, payload, node.rules) is not None:
            self.count("response_refused")
            payload = None
        try:
            node.core.handle_response(source, api_key, request_body, payload, self.now)
        except RaftProtocolError as exc:
            self.count(f"response_refused.{exc.event}")
        self.drain(node)

    def on_propose(self) -> None:
        if not self.proposing:
            return
        leader = self.current_leader()
        if leader is not None:
            self.propose(leader)
        self.schedule(self.now + self.config.propose_interval_ms, self.on_propose)

    def propose(self, node: Node) -> tuple[int, int] | None:
        assert node.core is not None
        self.value_counter += 1
        value = f"v{self.value_counter}".encode()
        result = node.core.propose([value], self.now)
        self.drain(node)
        if not isinstance(result, NotLeader):
            self.proposals.append((result[0], result[1], value))
            return result
        return None

    def on_call(self, function: Callable[[], None]) -> None:
        function()

    # -- queries --------------------------------------------------------------

    def up(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.core is not None]

    def current_leader(self) -> Node | None:
        leaders = [node for node in self.up() if node.core.role is Role.LEADER]
        return max(leaders, key=lambda node: node.core.epoch) if leaders else None

    def stranded(self, node: Node, leader: Node) -> bool:
        """A node the leader does not count as a voter that a hostile node left above the
        quorum's epoch (it voted there while a voter, then a truncation or a removal it may
        not know of took it out). Its epoch may not go back (it voted in it), and only the
        voters' elections raise the quorum's, which a node outside the voters must not
        force: it waits for the next election. Only with a hostile node and a dynamic quorum."""
        stuck = (self.hostile is not None and self.config.dynamic and node.node_id not in leader.core.voters.ids
                 and node.core.epoch > leader.core.epoch)
        if stuck:
            self.stats["stranded_observer"] = 1
        return stuck

    def describe_laggards(self) -> str:
        leader = self.current_leader()
        if leader is None or leader.core.leader_high_watermark is None:
            return "no leader has committed in its epoch"
        target = leader.core.leader_high_watermark
        laggards = [
            f"{'voter' if node.is_voter else 'observer'} {node.node_id} ({node.core.role.value}, epoch "
            f"{node.core.epoch}, high watermark {node.core.high_watermark})"
            for node in self.up() if node.core.high_watermark < target and not self.stranded(node, leader)
        ]
        return (f"leader {leader.node_id} (epoch {leader.core.epoch}, high watermark {target}); behind: "
                + ", ".join(laggards))

    def note(self, text: str) -> None:
        self.trace.append(f"{self.now:>7} {text}")
        if len(self.trace) > 60:
            del self.trace[:20]

    def fail(self, message: str, invariant: str) -> None:
        trace = "\n".join("    " + line for line in self.trace[-40:])
        raise InvariantViolation(
            f"seed {self.seed} at t={self.now} ms: [{invariant}] {message}\n"
            f"  last role changes:\n{trace}\n"
            f"  config: {self.config}\n"
            f"  replay: .venv/bin/python -m tests.sim.run --seed {self.seed}",
            invariant,
        )

    # -- invariants (FACTS §12) ---------------------------------------------------

    def check_invariants(self, nodes: set[Node] | None = None) -> None:
        """Every per-node invariant for `nodes` (all by default), then the majority check."""
        for node in self.nodes.values() if nodes is None else nodes:
            self.check_node(node)
        if self.majority_dirty:
            self.check_majority()

    def check_node(self, node: Node) -> None:
        core = node.core
        if core is None:
            return
        state = core.quorum_state
        stored = node.store.current
        if state is not node.checked_state or stored is not node.checked_stored:
            # MonotonicEpoch: the in-memory epoch is the persisted one (which only goes up, see drain).
            if state.epoch != stored.epoch:
                self.fail(f"node {node.node_id}: in-memory epoch {state.epoch} != persisted {stored.epoch}",
                          MONOTONIC_EPOCH)
            if not 0 <= state.epoch <= INT32_MAX:
                self.fail(f"node {node.node_id}: epoch {state.epoch} is not an int32 epoch", EPOCH_IN_RANGE)
            # SingleLeader: one leader per epoch. Without a hostile node every
            # node's belief counts; a hostile node can make a node believe a forged
            # BeginQuorumEpoch (no unauthenticated peer can tell), so then only the
            # nodes that actually lead count.
            leader = state.leader_id
            if leader is not None and (self.hostile is None or leader == node.node_id):
                known = self.epoch_leaders.setdefault(state.epoch, leader)
                if known != leader:
                    self.fail(f"two leaders in epoch {state.epoch}: {known} and {leader} (seen by {node.node_id})",
                              SINGLE_LEADER)
            node.checked_state = state
            node.checked_stored = stored
        # MonotonicHighWatermark, per leader and across epochs.
        leader_hw = core.leader_high_watermark
        if leader_hw is not None and (state.epoch, leader_hw) != node.last_leader_check:
            self.check_leader_high_watermark(node, state.epoch, leader_hw)
        high_watermark = core.high_watermark
        if high_watermark < node.last_high_watermark:
            self.fail(f"node {node.node_id}: high watermark went back from {node.last_high_watermark} "
                      f"to {high_watermark}", MONOTONIC_HIGH_WATERMARK)
        node.last_high_watermark = high_watermark
        # SnapshotAtLogStart.
        snapshot = node.log.snapshot_id
        if snapshot is not None and node.log.start_offset != snapshot.end_offset:
            self.fail(f"node {node.node_id}: log start {node.log.start_offset} is not the snapshot end",
                      SNAPSHOT_AT_LOG_START)
        # ConsistentCommittedData, for what this node learnt is committed since its last check.
        if node.verified_to < high_watermark:
            self.verify_committed(node)

    def check_leader_high_watermark(self, node: Node, epoch: int, leader_hw: int) -> None:
        node.last_leader_check = (epoch, leader_hw)
        previous = self.max_leader_hw_by_epoch.get(epoch, 0)
        if leader_hw < previous:
            self.fail(f"leader {node.node_id} high watermark went back from {previous} to {leader_hw}",
                      MONOTONIC_HIGH_WATERMARK)
        earlier = max((hw for other, hw in self.max_leader_hw_by_epoch.items() if other < epoch), default=0)
        if leader_hw < earlier:
            self.fail(f"leader {node.node_id} of epoch {epoch} has high watermark {leader_hw} "
                      f"below {earlier}, committed in an earlier epoch", MONOTONIC_HIGH_WATERMARK)
        self.max_leader_hw_by_epoch[epoch] = leader_hw
        if leader_hw > self.committed_hw:
            self.committed_hw = leader_hw
            self.majority_dirty = True

    def check_majority(self) -> None:
        """MajorityReachedHighWatermark: what any leader committed is durable on a majority of voters."""
        self.majority_dirty = False
        committed = self.committed_hw
        if not committed:
            return
        if not self.config.dynamic:
            holders = sum(1 for voter in self.voter_ids if self.holds(self.nodes[voter], committed))
            if holders < len(self.voter_ids) // 2 + 1:
                self.fail(f"high watermark {committed} is durable on only {holders} voters",
                          MAJORITY_REACHED_HIGH_WATERMARK)
            return
        # The commit was counted by the set in effect at the leader then: the one at the
        # committed offset, or one change later (a change needs the previous one committed).
        sets = {self.committed_voters_at(committed - 1)} | {node.core.voters for node in self.up()}
        counts = {voter_set: sum(1 for voter in voter_set.ids if self.holds(self.nodes[voter], committed))
                  for voter_set in sets}
        if not any(count >= voter_set.majority for voter_set, count in counts.items()):
            self.fail(f"high watermark {committed} is durable on no majority of the voter sets "
                      f"{[(sorted(v.ids), n) for v, n in counts.items()]}", MAJORITY_REACHED_HIGH_WATERMARK)

    def committed_voters_at(self, offset: int) -> VoterSet:
        index = bisect.bisect_right(self.committed_voter_offsets, offset) - 1
        if index < 0:
            return self.initial_voters
        return decode_voters_record(self.committed[self.committed_voter_offsets[index]][1])

    def holds(self, node: Node, offset: int) -> bool:
        """The node's durable log holds the committed prefix [0, offset) (log matching: the last epoch agrees)."""
        log = node.log
        if log.flushed_end_offset < offset:
            return False
        if offset <= log.start_offset:
            return True
        entry = self.committed.get(offset - 1)
        return entry is not None and log.epoch_before(offset) == entry[0]

    def verify_committed(self, node: Node) -> None:
        core = node.core
        assert core is not None
        limit = min(core.high_watermark, node.log.end_offset)
        if node.verified_to >= limit:
            return
        start = max(node.verified_to, node.log.start_offset)
        for batch in node.log.read(start, 1 << 30):
            base = batch.base_offset
            if base >= limit:
                break
            epoch, control = batch.epoch, batch.control_type
            for index, value in enumerate(batch.values):
                offset = base + index
                if offset < start:
                    continue
                if offset >= limit:
                    break
                self.record_committed(node.node_id, offset, (epoch, value, control))
        node.verified_to = limit

    def record_committed(self, node_id: int, offset: int, entry: tuple[int, bytes, int | None]) -> None:
        known = self.committed.get(offset)
        if known is None:
            self.committed[offset] = entry
            if entry[2] == ControlRecordType.VOTERS:
                bisect.insort(self.committed_voter_offsets, offset)
            if offset >= self.committed_end:
                self.committed_end = offset + 1
        elif known != entry:
            self.fail(f"node {node_id}: committed offset {offset} is {entry}, elsewhere {known}",
                      CONSISTENT_COMMITTED_DATA)

    def check_snapshot(self, node: Node, snapshot_id: SnapshotId, data: bytes) -> None:
        entries = decode_snapshot(data)
        if [entry[0] for entry in entries] != list(range(snapshot_id.end_offset)):
            self.fail(f"node {node.node_id}: snapshot {snapshot_id} does not cover [0, {snapshot_id.end_offset})",
                      CONSISTENT_COMMITTED_DATA)
        for offset, epoch, value, control in entries:
            self.record_committed(node.node_id, offset, (epoch, value, control))

    # -- faults ---------------------------------------------------------------

    def on_heal_links(self, links: frozenset) -> None:
        self.blocked -= links

    def block(self, group_a: list[int], group_b: list[int], duration_ms: int) -> None:
        links = frozenset({(a, b) for a in group_a for b in group_b} | {(b, a) for a in group_a for b in group_b})
        self.blocked |= links
        self.schedule(self.now + duration_ms, self.on_heal_links, links)

    def isolate(self, node_id: int, duration_ms: int) -> None:
        others = [other for other in self.nodes if other != node_id]
        self.block([node_id], others, duration_ms)

    def on_restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.core is None:
            self.start_node(node)

    def on_fault(self, name: str) -> None:
        self.note(f"fault {name}")
        rng = self.rng
        duration = rng.randrange(100, 600)
        leader = self.current_leader()
        ids = sorted(self.nodes)
        if name == "partition":
            voters = sorted(self.voter_ids)
            rng.shuffle(voters)
            cut = len(voters) // 2
            self.block(voters[:cut], voters[cut:] + [i for i in ids if i not in self.voter_ids], duration)
        elif name == "isolate_leader" and leader is not None:
            self.isolate(leader.node_id, duration)
        elif name == "back_to_back" and leader is not None:
            self.isolate(leader.node_id, duration)
            self.schedule(self.now + duration // 2, self.on_fault, "isolate_leader")
        elif name in ("kill", "kill_leader", "shutdown"):
            target = leader if name == "kill_leader" and leader is not None else self.nodes[rng.choice(ids)]
            self.stop_node(target, graceful=name == "shutdown")
            self.schedule(self.now + duration, self.on_restart, target.node_id)
        elif name == "kill_all":
            for node in self.nodes.values():
                self.stop_node(node, graceful=False)
            voters = sorted(self.voter_ids)
            rng.shuffle(voters)
            majority = len(voters) // 2 + 1
            for node_id in voters[:majority]:
                self.schedule(self.now + rng.randrange(1, 50), self.on_restart, node_id)
            for node_id in voters[majority:] + [i for i in ids if i not in self.voter_ids]:
                self.schedule(self.now + duration, self.on_restart, node_id)
        elif name == "wipe":
            self.try_wipe(duration)
        elif name == "snapshot":
            self.take_snapshot(self.nodes[rng.choice(ids)])
        elif name in ("add_voter", "remove_voter", "remove_leader") and leader is not None:
            self.change_voters(leader, name)

    def change_voters(self, leader: Node, name: str) -> None:
        """A voter change as an operator asks for it: the leader may refuse (one at a time,
        not caught up, ...); the invariants must hold either way."""
        core = leader.core
        voters = core.voters
        if name == "add_voter":
            candidates = sorted(i for i in self.nodes if i not in voters.ids)
            if not candidates:
                return
            result = core.add_voter(self.voter_of(self.rng.choice(candidates)), self.now)
        else:
            target = leader.node_id if name == "remove_leader" else self.rng.choice(sorted(voters.ids))
            voter = voters.get(target)
            result = core.remove_voter(target, voter.directory_id if voter else self.directory_ids[target], self.now)
        self.count(f"{name}_{'appended' if isinstance(result, int) else 'refused'}")
        self.note(f"{name}: {result}")
        self.drain(leader)
    def try_wipe(self, duration_ms: int) -> None:
        """Disk loss, only where Raft without KIP-853 survives it (see the module README in run.py)."""
        target = self.nodes[self.rng.choice(sorted(self.nodes))]
        if self.config.dynamic:
            # KIP-853 keeps a wiped voter from voting (its new directory id is not the voter's),
            # but the quorum cannot replace it without an operator: wipe only non-voters, which
            # come back as new observers an operator may add.
            if any(target.node_id in node.core.voters.ids for node in self.up()) or target.core is None:
                return
            self.directory_ids[target.node_id] = uuid.UUID(int=self.rng.getrandbits(128))
        elif target.is_voter:
            leader = self.current_leader()
            if leader is None or leader.core.leader_high_watermark is None:
                return
            epoch = leader.core.epoch
            # Every voter is up, in the leader's epoch and following it: no
            # vote the wiped node forgets can be in flight.
            for voter in self.voter_ids:
                core = self.nodes[voter].core
                if core is None or core.epoch != epoch or core.leader_id != leader.node_id:
                    return
            # The leader may still count what the target acknowledged before
            # it lost its disk, so everything the target holds (and all that is
            # committed) must be on a majority of the other voters.
            committed = self.committed_hw
            acknowledged = target.log.flushed_end_offset
            acknowledged_epoch = target.log.epoch_before(acknowledged)
            others = [self.nodes[voter].log for voter in self.voter_ids if voter != target.node_id]
            holders = sum(1 for log in others
                          if log.flushed_end_offset >= max(acknowledged, committed)
                          and log.start_offset <= acknowledged
                          and log.epoch_before(acknowledged) == acknowledged_epoch)
            if holders < len(self.voter_ids) // 2 + 1 or not all(
                    self.holds(self.nodes[voter], committed) for voter in self.voter_ids if voter != target.node_id):
                return
        self.stats["wipe"] = self.stats.get("wipe", 0) + 1
        self.stop_node(target, graceful=False)
        target.log = SimLog()
        target.store = MemoryQuorumStateStore()
        target.max_persisted_epoch = 0
        self.schedule(self.now + duration_ms, self.on_restart, target.node_id)

    def take_snapshot(self, node: Node) -> None:
        core = node.core
        if core is None:
            return
        end = min(core.high_watermark, node.log.flushed_end_offset)
        if end <= node.log.start_offset + 5:
            return
        # Snapshot at a batch boundary at or below `end`.
        boundary = node.log.start_offset
        for batch in node.log.batches:
            if batch.next_offset > end:
                break
            boundary = batch.next_offset
        if boundary <= node.log.start_offset:
            return
        previous = decode_snapshot(node.log.snapshot_data) if node.log.snapshot_id else []
        entries = previous + [entry for entry in node.log.entries() if entry[0] < boundary]
        snapshot_id = SnapshotId(boundary, node.log.epoch_before(boundary))
        data = encode_snapshot(entries)
        self.check_snapshot(node, snapshot_id, data)
        node.log.create_snapshot(snapshot_id, data)
        self.stats["snapshot"] = self.stats.get("snapshot", 0) + 1

    # -- the whole run ----------------------------------------------------------

    def run(self) -> None:
        cfg = self.config
        self.schedule(self.rng.randrange(0, cfg.propose_interval_ms), self.on_propose)
        fault_times = sorted(self.rng.randrange(100, cfg.fault_duration_ms) for _ in cfg.faults)
        for at_ms, name in zip(fault_times, cfg.faults):
            self.schedule(at_ms, self.on_fault, name)
        if self.hostile is not None:
            self.hostile.start()
        self.run_until(cfg.fault_duration_ms)
        self.heal()
        self.check_liveness()
        self.check_final()

    def heal(self) -> None:
        # Let pending restarts and link heals fire, then clear the network.
        self.run_until(self.now + 200)
        self.blocked.clear()
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        for node in self.nodes.values():
            if node.core is None:
                self.start_node(node)

    def check_liveness(self) -> None:
        healed_at = self.now
        deadline = healed_at + self.config.liveness_bound_ms
        marker: tuple[int, int] | None = None
        while self.now < deadline:
            self.run_until(self.now + 20)
            leader = self.current_leader()
            if marker is not None:
                offset, epoch = marker
                entry = self.committed.get(offset)
                if entry is not None:
                    if entry[0] == epoch:
                        return
                    marker = None
            if marker is None and leader is not None:
                marker = self.propose(leader)
        self.fail(f"no value committed within {self.config.liveness_bound_ms} ms after the faults healed", LIVENESS)

    def check_final(self) -> None:
        # Clients stop; every node must catch up with the leader, then compare everything.
        self.proposing = False
        deadline = self.now + 3000
        while self.now < deadline:
            self.run_until(self.now + 50)
            leader = self.current_leader()
            if leader is None or leader.core.leader_high_watermark is None:
                continue
            target = leader.core.leader_high_watermark
            if all(node.core.high_watermark >= target for node in self.up() if not self.stranded(node, leader)):
                break
        else:
            self.fail(f"nodes did not catch up with the leader after healing: {self.describe_laggards()}", LIVENESS)
        for node in self.up():
            self.verify_committed(node)
        # ConsistentCommittedData: no committed entry is missing anywhere.
        leader = self.current_leader()
        assert leader is not None
        have: dict[int, tuple[int, bytes, int | None]] = {}
        if leader.log.snapshot_id:
            for offset, epoch, value, control in decode_snapshot(leader.log.snapshot_data):
                have[offset] = (epoch, value, control)
        for offset, epoch, value, control in leader.log.entries():
            have[offset] = (epoch, value, control)
        for offset in range(self.committed_end):
            if offset not in self.committed:
                self.fail(f"committed offset {offset} was never seen by the checker", CONSISTENT_COMMITTED_DATA)
            if have.get(offset) != self.committed[offset]:
                self.fail(f"committed offset {offset} lost: leader has {have.get(offset)}, "
                          f"committed {self.committed[offset]}", CONSISTENT_COMMITTED_DATA)
        if self.config.dynamic:
            self.check_voter_changes()
        # Every proposal acknowledged (committed at its offset and epoch) is present.
        committed_values = {entry[1] for entry in self.committed.values()}
        for offset, epoch, value in self.proposals:
            entry = self.committed.get(offset)
            if entry is not None and entry[0] == epoch and entry[1] != value:
                self.fail(f"proposal {value!r} at {offset} epoch {epoch} was replaced by {entry}",
                          CONSISTENT_COMMITTED_DATA)
            if entry is not None and entry[0] == epoch:
                assert value in committed_values


    def check_voter_changes(self) -> None:
        previous, previous_offset = self.initial_voters, -1
        for offset in range(self.committed_end):
            entry = self.committed[offset]
            if entry[2] != ControlRecordType.VOTERS:
                continue
            voter_set = decode_voters_record(entry[1])
            if not voter_set.overlaps_majority_of(previous):
                self.fail(f"committed voter set {sorted(voter_set.ids)} at {offset} changes more than one voter "
                          f"of {sorted(previous.ids)} at {previous_offset}", ONE_VOTER_CHANGE_AT_A_TIME)
            previous, previous_offset = voter_set, offset


def run_seed(seed: int, config: SimConfig | None = None) -> Simulation:
    simulation = Simulation(seed, config)
    simulation.run()
    return simulation
