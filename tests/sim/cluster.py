"""A seeded, deterministic simulation of a KRaft quorum running the real `RaftCore`.

Owns: simulated time (an event heap), an in-memory network (drop, delay,
duplication, reordering, partitions), node lifecycles (graceful shutdown,
kill -9 losing unflushed writes, restart, disk loss), client proposals, and
the invariant checks of FACTS §12, run after every event.

Rules kept here:
- Everything random comes from one `random.Random(seed)` (and per-node
  generators derived from it), so a seed replays exactly.
- The driver does what the core's Ready says in order: persist the quorum
  state, apply log operations, flush if asked, send, then advance. Leaders and
  observers flush later (a separate event), so kill -9 can lose their tail.
- Bounded: every run has a simulated-time limit and an event-count limit.
"""

from __future__ import annotations

import heapq
import random
import struct
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
    Role,
    TruncateTo,
)
from server.raft.log import MemoryRaftLog, PassThroughRecordsCodec, SnapshotId, WireRecordsCodec
from server.raft.messages import WIRE_VERSIONS, ApiKey
from server.raft.quorum_state import MemoryQuorumStateStore

CLUSTER_ID = "sim-cluster-AAAAAAAAAA"


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True)
class SimConfig:
    voters: int = 3
    observers: int = 0
    fault_duration_ms: int = 2000
    # After faults heal: a leader must commit a new value within this bound.
    liveness_bound_ms: int = 4000
    election_timeout_ms: int = 100
    fetch_timeout_ms: int = 200
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
    max_events: int = 400_000


def random_sim_config(rng: random.Random) -> SimConfig:
    voters = rng.choice((3, 3, 5))
    all_faults = ("partition", "isolate_leader", "back_to_back", "kill", "kill_leader", "shutdown",
                  "wipe", "kill_all", "snapshot", "snapshot")
    return SimConfig(
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
    )


# -- snapshots in the sim: the committed entries themselves, length-prefixed ------

_ENTRY = struct.Struct(">qih")


def encode_snapshot(entries: list[tuple[int, int, bytes, int | None]]) -> bytes:
    out = bytearray()
    for offset, epoch, value, control in entries:
        out += _ENTRY.pack(offset, epoch, -1 if control is None else control)
        out += struct.pack(">I", len(value)) + value
    return bytes(out)


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
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
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


class Simulation:
    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config or random_sim_config(random.Random(seed ^ 0x5EED))
        cfg = self.config
        self.now = 0
        self.events: list[tuple[int, int, str, tuple]] = []
        self.sequence = 0
        self.event_count = 0
        voter_ids = list(range(1, cfg.voters + 1))
        observer_ids = list(range(cfg.voters + 1, cfg.voters + cfg.observers + 1))
        self.voter_ids = frozenset(voter_ids)
        self.nodes = {i: Node(i, True) for i in voter_ids}
        self.nodes.update({i: Node(i, False) for i in observer_ids})
        self.blocked: set[tuple[int, int]] = set()
        self.drop_rate = cfg.drop_rate
        self.duplicate_rate = cfg.duplicate_rate
        # Invariant state.
        self.epoch_leaders: dict[int, int] = {}
        self.max_leader_hw_by_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes, int | None]] = {}
        self.committed_end = 0
        # The largest high watermark any leader reported, and whether the
        # majority check must run again (a log lost data or the watermark moved).
        self.committed_hw = 0
        self.majority_dirty = False
        self.acked: dict[int, bytes] = {}
        self.proposals: list[tuple[int, int, bytes]] = []
        self.value_counter = 0
        self.proposing = True
        self.codec = WireRecordsCodec() if cfg.wire_codec else PassThroughRecordsCodec()
        self.trace: list[str] = []
        self.stats: dict[str, int] = {}
        self.touched: set[Node] = set()
        for node in self.nodes.values():
            self.start_node(node)

    # -- plumbing ---------------------------------------------------------------

    def schedule(self, at_ms: int, kind: str, *args: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at_ms, self.sequence, kind, args))

    def raft_config(self, node: Node) -> RaftConfig:
        cfg = self.config
        return RaftConfig(
            node_id=node.node_id, voters=self.voter_ids, cluster_id=CLUSTER_ID,
            election_timeout_ms=cfg.election_timeout_ms, fetch_timeout_ms=cfg.fetch_timeout_ms,
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
        rng = random.Random(f"{self.seed}/{node.node_id}/{node.incarnation}")
        node.core = RaftCore(self.raft_config(node), node.log, node.store.read(), rng, self.now, self.codec)
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
        self.majority_dirty = True
        node.core = None

    # -- the driver ---------------------------------------------------------------

    def drain(self, node: Node) -> None:
        core = node.core
        assert core is not None
        self.touched.add(node)
        rounds = 0
        while core.has_ready():
            rounds += 1
            assert rounds < 1000, "ready loop does not settle"
            ready = core.ready()
            if ready.role_change is not None:
                change = ready.role_change
                self.note(f"node {node.node_id} -> {change.role.value} epoch {change.epoch} leader {change.leader_id}")
            if ready.quorum_state is not None:
                node.store.write(ready.quorum_state)
                if ready.quorum_state.epoch < node.max_persisted_epoch:
                    self.fail(f"node {node.node_id}: persisted epoch went back to {ready.quorum_state.epoch}")
                node.max_persisted_epoch = ready.quorum_state.epoch
            for op in ready.log_ops:
                if isinstance(op, Append):
                    node.log.append(op.batch)
                elif isinstance(op, TruncateTo):
                    self.stats["truncate"] = self.stats.get("truncate", 0) + 1
                    self.majority_dirty = True
                    node.log.truncate_to(op.offset)
                    node.verified_to = min(node.verified_to, node.log.end_offset)
                elif isinstance(op, InstallSnapshot):
                    self.stats["install_snapshot"] = self.stats.get("install_snapshot", 0) + 1
                    self.majority_dirty = True
                    self.check_snapshot(node, op.snapshot_id, op.data)
                    node.log.install_snapshot(op.snapshot_id, op.data)
                    node.verified_to = node.log.start_offset
            if ready.flush_before_send:
                node.log.flush()
            elif ready.appends and node.flush_at is None:
                # Leaders and observers flush later: a kill -9 before then loses the tail.
                node.flush_at = self.now + self.rng.randrange(0, 6)
                self.schedule(node.flush_at, "flush", node.node_id, node.incarnation)
            for request in ready.requests:
                self.send(node.node_id, request.destination, "request", request.api_key, request.body, None)
            for response in ready.responses:
                requester_incarnation, request_body = response.token
                self.send(node.node_id, response.destination, "response", response.api_key, request_body,
                          response.body, incarnation=requester_incarnation)
            core.advance(ready, node.log.flushed_end_offset, self.now)
        deadline = core.next_deadline_ms()
        if deadline is not None:
            deadline = max(deadline, self.now + 1)
            if node.tick_at is None or deadline < node.tick_at or node.tick_at <= self.now:
                node.tick_at = deadline
                self.schedule(deadline, "tick", node.node_id, node.incarnation)

    def send(self, source: int, destination: int, kind: str, api_key: int, request_body: Any,
             response_body: Any = None, incarnation: int | None = None) -> None:
        if (source, destination) in self.blocked or self.rng.random() < self.drop_rate:
            return
        copies = 2 if self.rng.random() < self.duplicate_rate else 1
        sender_incarnation = self.nodes[source].incarnation
        for _ in range(copies):
            delay = self.rng.randint(self.config.min_delay_ms, self.config.max_delay_ms)
            if self.rng.random() < self.config.jitter_rate:
                delay += self.rng.randrange(0, 40)  # reorders messages
            if kind == "request":
                payload = self.wire(api_key, "request", request_body)
                self.schedule(self.now + delay, "request", source, destination, sender_incarnation, api_key,
                              request_body, payload)
            else:
                payload = self.wire(api_key, "response", response_body)
                self.schedule(self.now + delay, "response", source, destination, incarnation, api_key,
                              request_body, payload)

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
        at_ms, _, kind, args = heapq.heappop(self.events)
        assert at_ms >= self.now
        self.now = at_ms
        self.event_count += 1
        if self.event_count > self.config.max_events:
            self.fail("event budget exhausted (livelock?)")
        self.touched: set[Node] = set()
        getattr(self, "on_" + kind)(*args)
        # Only nodes that handled something can have changed (faults touch several).
        self.check_invariants(self.touched)
        return True

    def run_until(self, end_ms: int) -> None:
        while self.events and self.events[0][0] <= end_ms:
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
        if node.core is None or (source, destination) in self.blocked:
            return
        answer = node.core.handle_request(source, api_key, payload, self.now, token=(incarnation, request_body))
        if answer is not DEFERRED:
            self.send(destination, source, "response", api_key, request_body, answer, incarnation=incarnation)
        self.drain(node)

    def on_response(self, source: int, destination: int, incarnation: int, api_key: int, request_body: Any,
                    payload: Any) -> None:
        node = self.nodes[destination]
        if node.core is None or node.incarnation != incarnation or (source, destination) in self.blocked:
            return
        node.core.handle_response(source, api_key, request_body, payload, self.now)
        self.drain(node)

    def on_propose(self) -> None:
        if not self.proposing:
            return
        leader = self.current_leader()
        if leader is not None:
            self.propose(leader)
        self.schedule(self.now + self.config.propose_interval_ms, "propose")

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

    def on_call(self, function: Any) -> None:
        function()

    # -- queries --------------------------------------------------------------

    def up(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.core is not None]

    def current_leader(self) -> Node | None:
        leaders = [node for node in self.up() if node.core.role is Role.LEADER]
        return max(leaders, key=lambda node: node.core.epoch) if leaders else None

    def note(self, text: str) -> None:
        self.trace.append(f"{self.now:>7} {text}")
        if len(self.trace) > 60:
            del self.trace[:20]

    def fail(self, message: str) -> None:
        trace = "\n".join("    " + line for line in self.trace[-40:])
        raise InvariantViolation(
            f"seed {self.seed} at t={self.now} ms: {message}\n"
            f"  last role changes:\n{trace}\n"
            f"  config: {self.config}\n"
            f"  replay: .venv/bin/python -m tests.sim.run --seed {self.seed}"
        )

    # -- invariants (FACTS §12) ---------------------------------------------------

    def check_invariants(self, nodes: set[Node] | None = None) -> None:
        majority = len(self.voter_ids) // 2 + 1
        for node in self.nodes.values() if nodes is None else nodes:
            core = node.core
            if core is None:
                continue
            # MonotonicEpoch: the in-memory epoch is the persisted one.
            if core.epoch != node.store.current.epoch:
                self.fail(f"node {node.node_id}: in-memory epoch {core.epoch} != persisted {node.store.current.epoch}")
            # SingleLeader: one leader per epoch, whoever reports it.
            leader = core.leader_id
            if leader is not None:
                known = self.epoch_leaders.setdefault(core.epoch, leader)
                if known != leader:
                    self.fail(f"two leaders in epoch {core.epoch}: {known} and {leader} (seen by {node.node_id})")
            # MonotonicHighWatermark, per leader and across epochs.
            leader_hw = core.leader_high_watermark
            if leader_hw is not None and (core.epoch, leader_hw) != node.last_leader_check:
                node.last_leader_check = (core.epoch, leader_hw)
                previous = self.max_leader_hw_by_epoch.get(core.epoch, 0)
                if leader_hw < previous:
                    self.fail(f"leader {node.node_id} high watermark went back from {previous} to {leader_hw}")
                earlier = max((hw for epoch, hw in self.max_leader_hw_by_epoch.items() if epoch < core.epoch),
                              default=0)
                if leader_hw < earlier:
                    self.fail(f"leader {node.node_id} of epoch {core.epoch} has high watermark {leader_hw} "
                              f"below {earlier}, committed in an earlier epoch")
                self.max_leader_hw_by_epoch[core.epoch] = leader_hw
                if leader_hw > self.committed_hw:
                    self.committed_hw = leader_hw
                    self.majority_dirty = True
            if core.high_watermark < node.last_high_watermark:
                self.fail(f"node {node.node_id}: high watermark went back")
            node.last_high_watermark = core.high_watermark
            # SnapshotAtLogStart.
            snapshot = node.log.snapshot_id
            if snapshot is not None and node.log.start_offset != snapshot.end_offset:
                self.fail(f"node {node.node_id}: log start {node.log.start_offset} is not the snapshot end")
            self.verify_committed(node)
        # MajorityReachedHighWatermark: what any leader committed is durable on a majority of voters.
        committed = self.committed_hw
        if committed and self.majority_dirty:
            self.majority_dirty = False
            holders = sum(1 for voter in self.voter_ids if self.holds(self.nodes[voter], committed))
            if holders < majority:
                self.fail(f"high watermark {committed} is durable on only {holders} voters")

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
            for index, value in enumerate(batch.values):
                offset = batch.base_offset + index
                if offset < start:
                    continue
                if offset >= limit:
                    break
                self.record_committed(node.node_id, offset, (batch.epoch, value, batch.control_type))
        node.verified_to = limit

    def record_committed(self, node_id: int, offset: int, entry: tuple[int, bytes, int | None]) -> None:
        known = self.committed.get(offset)
        if known is None:
            self.committed[offset] = entry
            self.committed_end = max(self.committed_end, offset + 1)
        elif known != entry:
            self.fail(f"node {node_id}: committed offset {offset} is {entry}, elsewhere {known}")

    def check_snapshot(self, node: Node, snapshot_id: SnapshotId, data: bytes) -> None:
        entries = decode_snapshot(data)
        if [entry[0] for entry in entries] != list(range(snapshot_id.end_offset)):
            self.fail(f"node {node.node_id}: snapshot {snapshot_id} does not cover [0, {snapshot_id.end_offset})")
        for offset, epoch, value, control in entries:
            self.record_committed(node.node_id, offset, (epoch, value, control))

    # -- faults ---------------------------------------------------------------

    def on_heal_links(self, links: frozenset) -> None:
        self.blocked -= links

    def block(self, group_a: list[int], group_b: list[int], duration_ms: int) -> None:
        links = frozenset({(a, b) for a in group_a for b in group_b} | {(b, a) for a in group_a for b in group_b})
        self.blocked |= links
        self.schedule(self.now + duration_ms, "heal_links", links)

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
            self.schedule(self.now + duration // 2, "fault", "isolate_leader")
        elif name in ("kill", "kill_leader", "shutdown"):
            target = leader if name == "kill_leader" and leader is not None else self.nodes[rng.choice(ids)]
            self.stop_node(target, graceful=name == "shutdown")
            self.schedule(self.now + duration, "restart", target.node_id)
        elif name == "kill_all":
            for node in self.nodes.values():
                self.stop_node(node, graceful=False)
            voters = sorted(self.voter_ids)
            rng.shuffle(voters)
            majority = len(voters) // 2 + 1
            for node_id in voters[:majority]:
                self.schedule(self.now + rng.randrange(1, 50), "restart", node_id)
            for node_id in voters[majority:] + [i for i in ids if i not in self.voter_ids]:
                self.schedule(self.now + duration, "restart", node_id)
        elif name == "wipe":
            self.try_wipe(duration)
        elif name == "snapshot":
            self.take_snapshot(self.nodes[rng.choice(ids)])

    def try_wipe(self, duration_ms: int) -> None:
        """Disk loss, only where Raft without KIP-853 survives it (see the module README in run.py)."""
        target = self.nodes[self.rng.choice(sorted(self.nodes))]
        if target.is_voter:
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
        target.log = MemoryRaftLog()
        target.store = MemoryQuorumStateStore()
        target.max_persisted_epoch = 0
        self.schedule(self.now + duration_ms, "restart", target.node_id)

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
        self.schedule(self.rng.randrange(0, cfg.propose_interval_ms), "propose")
        fault_times = sorted(self.rng.randrange(100, cfg.fault_duration_ms) for _ in cfg.faults)
        for at_ms, name in zip(fault_times, cfg.faults):
            self.schedule(at_ms, "fault", name)
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
        self.fail(f"no value committed within {self.config.liveness_bound_ms} ms after the faults healed")

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
            if all(node.core.high_watermark >= target for node in self.up()):
                break
        else:
            self.fail("nodes did not catch up with the leader after healing")
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
                self.fail(f"committed offset {offset} was never seen by the checker")
            if have.get(offset) != self.committed[offset]:
                self.fail(f"committed offset {offset} lost: leader has {have.get(offset)}, "
                          f"committed {self.committed[offset]}")
        # Every proposal acknowledged (committed at its offset and epoch) is present.
        committed_values = {entry[1] for entry in self.committed.values()}
        for offset, epoch, value in self.proposals:
            entry = self.committed.get(offset)
            if entry is not None and entry[0] == epoch and entry[1] != value:
                self.fail(f"proposal {value!r} at {offset} epoch {epoch} was replaced by {entry}")
            if entry is not None and entry[0] == epoch:
                assert value in committed_values


def run_seed(seed: int, config: SimConfig | None = None) -> Simulation:
    simulation = Simulation(seed, config)
    simulation.run()
    return simulation
