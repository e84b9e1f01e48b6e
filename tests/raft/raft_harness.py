"""An in-process quorum of `RaftDriver`s over real storage and real sockets.

(tests/raft/ has no __init__.py, like tests/server/: this module is imported by plain name.)

Owns: `RaftCluster`, which binds one 127.0.0.1:0 listener per node *before*
building the voter addresses, serves KRaft RPCs through the real listener and
dispatcher (server/net/listener.py, server/dispatch.py) with a minimal
stand-in node, runs each node's driver, and a replay task per node that
consumes the committed entries like a controller would (a list of values,
reset by snapshots). Nodes can be stopped (their tasks cancelled, log closed)
and restarted on the same directory and port.

Rules kept here:
- No sleeps: tests wait with `wait_until(predicate)`, which wakes on any
  driver change or replay progress, under the caller's `fail_after`.
"""

from __future__ import annotations

import random
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

from protocol.errors import ErrorCode
from server.api.catalog import NodeRole, served_table
from server.dispatch import Dispatcher
from server.net.listener import Connection, serve_connection
from server.net.peer import BackoffPolicy, PeerAddress
from server.observability import Metrics
from server.raft import rpc
from server.raft.core import RaftConfig, Role
from server.raft.driver import CommittedBatch, RaftDriver, SnapshotLoaded
from server.raft.quorum_state import FileQuorumStateStore
from server.raft.storage import MetadataRaftLog, decode_stored
from server.storage.log import LogConfig, MetadataLog
from server.storage.snapshot import read_snapshot

CLUSTER_ID = "raft-harness-cluster-AAAA"

# Small timeouts so elections and failovers take well under a second.
TEST_RAFT_SETTINGS = dict(
    election_timeout_ms=200,
    fetch_timeout_ms=400,
    request_timeout_ms=200,
    fetch_max_wait_ms=100,
    retry_backoff_ms=20,
)


def _api_versions(ctx, request):
    apis = ctx.services.served_apis
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [{"api_key": api.api_key, "min_version": api.min_version, "max_version": api.max_version}
                     for api in sorted(apis.values(), key=lambda api: api.api_key)],
    }


def harness_apis() -> dict:
    """The controller's KRaft RPCs, and an ApiVersions that needs no feature views."""
    controller = served_table(NodeRole.CONTROLLER)
    table = {key: controller[key] for key in (1, 52, 53, 54, 59)}
    assert all(api.handler is rpc.offer and api.answers_later for api in table.values())
    table[18] = replace(controller[18], handler=_api_versions)
    return table


@dataclass(eq=False)
class HarnessNode:
    """Stands in for ControllerNode where the dispatcher needs one (config, metrics, served_apis,
    advertised_ranges)."""

    node_id: int
    directory: Path
    port: int
    config: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(
        socket_request_max_bytes=100 * 1024 * 1024, connections_max_idle_ms=600_000,
        connection_max_in_flight_requests=64, log_level="info"))
    metrics: Metrics = field(default_factory=Metrics)
    served_apis: dict = field(default_factory=harness_apis)
    raft_driver: RaftDriver | None = None
    metadata_log: MetadataLog | None = None
    storage: MetadataRaftLog | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event | None = None
    incarnation: int = 0
    # The metadata log's write-path system calls (None: os); tests inject disk failures here.
    file_ops: Any = None
    # The replayed "controller state": data values in commit order.
    values: list[bytes] = field(default_factory=list)
    applied_offset: int = 0
    snapshots_loaded: list = field(default_factory=list)

    def advertised_ranges(self) -> dict[int, tuple[int, int]]:
        # Ungated: these nodes have no metadata image (no finalized metadata.version).
        return {key: (api.min_version, api.max_version) for key, api in self.served_apis.items()}

    def read_barrier_needed(self) -> bool:
        return False  # no metadata image to catch up with the leader's

    @property
    def driver(self) -> RaftDriver:
        assert self.raft_driver is not None, f"node {self.node_id} is not running"
        return self.raft_driver

    @property
    def up(self) -> bool:
        return self.stopped is not None and not self.stopped.is_set()

    def committed_batches(self, end_offset: int | None = None) -> list[tuple]:
        """(base offset, epoch, values, control type) of every batch in this node's log
        wholly below `end_offset` (default: its high watermark)."""
        log = self.metadata_log
        assert log is not None
        end = self.driver.high_watermark if end_offset is None else end_offset
        out = []
        for batch in decode_stored(log.read_raw(log.start_offset, 1 << 30)):
            if batch.next_offset > end:
                break
            out.append((batch.base_offset, batch.epoch, batch.values, batch.control_type))
        return out


class RaftCluster:
    def __init__(self, tmp_path: Path, nursery: trio.Nursery, size: int, *, file_ops: dict | None = None,
                 storage_retry: BackoffPolicy | None = None, **raft_settings) -> None:
        self.tmp_path = tmp_path
        self.nursery = nursery
        self.size = size
        # node id -> FileOps for that node's metadata log (see tests/raft/faulty_disk.py).
        self.file_ops = dict(file_ops or {})
        self.storage_retry = storage_retry
        self.settings = {**TEST_RAFT_SETTINGS, **raft_settings}
        self.voters = frozenset(range(1, size + 1))
        self.nodes: dict[int, HarnessNode] = {}
        self.addresses: dict[int, PeerAddress] = {}
        self._changed = trio.Event()

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        bound = {}
        for node_id in sorted(self.voters):
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            bound[node_id] = listeners
            self.addresses[node_id] = PeerAddress(node_id, "127.0.0.1", port)
            self.nodes[node_id] = HarnessNode(node_id, self.tmp_path / f"node-{node_id}", port,
                                              file_ops=self.file_ops.get(node_id))
        for node_id in sorted(self.voters):
            await self.start_node(node_id, bound[node_id])

    def raft_config(self, node_id: int) -> RaftConfig:
        return RaftConfig(node_id=node_id, voters=self.voters, cluster_id=CLUSTER_ID, **self.settings)

    async def start_node(self, node_id: int, listeners=None) -> HarnessNode:
        node = self.nodes[node_id]
        assert not node.up
        if listeners is None:
            # The same port as before (trio sets SO_REUSEADDR), so the peers' addresses still hold.
            listeners = await trio.open_tcp_listeners(node.port, host="127.0.0.1")
        node.incarnation += 1
        node.metadata_log = MetadataLog.open(node.directory, LogConfig(segment_bytes=4096), file_ops=node.file_ops)
        node.storage = MetadataRaftLog(node.metadata_log)
        store = FileQuorumStateStore(node.directory, CLUSTER_ID, self.voters)
        node.raft_driver = RaftDriver(
            self.raft_config(node_id), node.storage, store, self.addresses,
            random.Random(f"{node_id}/{node.incarnation}"),
            peer_backoff=BackoffPolicy(initial_ms=10, max_ms=100),
            on_storage_change=node.metrics.note_storage_offline,
            **({"storage_retry": self.storage_retry} if self.storage_retry is not None else {}),
        )
        node.values = []
        node.applied_offset = 0
        node.snapshots_loaded = []
        node.scope = trio.CancelScope()
        node.stopped = trio.Event()
        await self.nursery.start(self._run_node, node, listeners)
        return node

    async def _run_node(self, node: HarnessNode, listeners, task_status=trio.TASK_STATUS_IGNORED) -> None:
        dispatcher = Dispatcher(node, node.served_apis)
        connection_ids = iter(range(1, 1 << 62))

        async def serve(stream: trio.SocketStream) -> None:
            connection = Connection(next(connection_ids), "peer", stream)
            try:
                await serve_connection(connection, dispatcher)
            finally:
                with trio.move_on_after(1):
                    await stream.aclose()

        try:
            with node.scope:
                async with trio.open_nursery() as tasks:
                    await tasks.start(node.driver.run)
                    tasks.start_soon(trio.serve_listeners, serve, listeners)
                    tasks.start_soon(self._replay, node)
                    tasks.start_soon(self._watch, node)
                    task_status.started()
        finally:
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            node.metadata_log.close()
            node.stopped.set()
            self.notify()

    async def stop_node(self, node_id: int) -> None:
        """Cancels the node's tasks (like a process kill, but appends already returned are durable)."""
        node = self.nodes[node_id]
        node.scope.cancel()
        await node.stopped.wait()

    # -- the replay side (what a controller would do) ----------------------------

    async def _replay(self, node: HarnessNode) -> None:
        async for item in node.driver.committed_reader(0):
            if isinstance(item, SnapshotLoaded):
                contents = read_snapshot(item.path)
                node.values = list(contents.values)
                node.applied_offset = item.snapshot_id.end_offset
                node.snapshots_loaded.append(item.snapshot_id)
            else:
                assert isinstance(item, CommittedBatch)
                assert item.base_offset == node.applied_offset, (item.base_offset, node.applied_offset)
                if item.control_type is None:
                    node.values.extend(item.values)
                node.applied_offset = item.next_offset
            self.notify()

    async def _watch(self, node: HarnessNode) -> None:
        while True:
            await node.driver.wait_changed()
            self.notify()

    # -- waiting ------------------------------------------------------------------------

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, predicate) -> None:
        # Bounded by the caller's fail_after; wakes on every change of any node.
        while not predicate():
            await self._changed.wait()

    def running(self) -> list[HarnessNode]:
        return [node for node in self.nodes.values() if node.up]

    def agreed_leader(self, min_epoch: int = 0) -> HarnessNode | None:
        """The leader, once every running node is in its epoch and names it."""
        running = self.running()
        leaders = [node for node in running if node.driver.role is Role.LEADER]
        if len(leaders) != 1:
            return None
        leader = leaders[0]
        epoch = leader.driver.epoch
        if epoch < min_epoch:
            return None
        for node in running:
            if node.driver.epoch != epoch or node.driver.leader_id != leader.node_id:
                return None
        return leader

    async def wait_for_leader(self, min_epoch: int = 0) -> HarnessNode:
        await self.wait_until(lambda: self.agreed_leader(min_epoch) is not None)
        leader = self.agreed_leader(min_epoch)
        assert leader is not None
        return leader

    async def commit(self, leader: HarnessNode, values: list[bytes]) -> list[tuple[int, int]]:
        """Proposes each value as its own batch, concurrently; returns (offset, epoch) once all committed."""
        results: dict[int, tuple[int, int]] = {}

        async def one(index: int, value: bytes) -> None:
            base, epoch = await leader.driver.propose([value])
            await leader.driver.wait_committed(base, epoch)
            results[index] = (base, epoch)

        async with trio.open_nursery() as proposers:
            for index, value in enumerate(values):
                proposers.start_soon(one, index, value)
        return [results[index] for index in range(len(values))]


@asynccontextmanager
async def raft_cluster(tmp_path: Path, size: int = 3, **settings):
    """`settings`: RaftConfig fields, plus `file_ops` and `storage_retry` (see RaftCluster)."""
    async with trio.open_nursery() as nursery:
        cluster = RaftCluster(tmp_path, nursery, size, **settings)
        await cluster.start()
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()
