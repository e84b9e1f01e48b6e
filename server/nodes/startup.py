"""The start-up steps every node kind shares, as functions the node kinds call.

Owns: `StartupError` and the steps of opening a node that keeps the metadata log (controller or KRaft broker):
1. `read_formatted_meta`: the log directory is formatted and belongs to this
   node (meta.properties);
2. `open_recovered_log`: open and recover the metadata log under its
   exclusive lock and load the newest valid snapshot (the log after it is
   replayed as the quorum commits it: it may hold entries never committed);
3. `node_client_security` and `build_raft_driver`: the Raft driver over that
   log, its peer connections speaking the controller listener's security
   protocol;
and, for a running node of any kind (ZooKeeper-mode brokers too),
`start_metrics_endpoint` and `start_node_listeners`.

Each node kind composes these in its own `open()`/`run()` and keeps only
what differs: the role checks (voter or not), the controller's bootstrap
records and feature check, the broker's own controller connections.

Rules kept here:
- A node refuses to start with a `StartupError` whose message says what the
  operator should do; the metadata log is closed again (its lock released)
  whenever start-up fails after opening it (`closed_on_failure`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from server.config import ServerConfig
from server.controller.snapshot import SnapshotRecoveryError, recover_snapshot
from server.controller.state import ControllerState
from server.metrics_http import serve_metrics
from server.net.listener import ConnectionRegistry, serve_node_listeners
from server.net.peer import PeerAddress
from server.raft.core import RaftConfig, RaftCore
from server.raft.driver import RaftDriver
from server.raft.quorum_state import FileQuorumStateStore
from server.raft.storage import MetadataRaftLog, StoredRecordsCodec
from server.raft.validate import Refusal
from server.security.client_config import ClientSecurity, ClientSecurityError
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.storage.log import FileOps, LogConfig, MetadataLog
from server.storage.meta_properties import MetaProperties, read_meta_properties


class StartupError(Exception):
    """The node cannot start; the message says what the operator should do."""


def read_formatted_meta(config: ServerConfig, *, format_hint: str) -> MetaProperties:
    """meta.properties of `metadata.log.dir`, which must be formatted for this node.
    `format_hint` ends the "not formatted" message (how to format for this role)."""
    directory = Path(config.metadata_log_dir)
    meta = read_meta_properties(directory) if directory.exists() else None
    if meta is None:
        raise StartupError(f"{directory} is not formatted; run `kraftwerk storage format --cluster-id ID "
                           f"--config FILE`{format_hint}")
    if meta.node_id != config.node_id:
        raise StartupError(f"{directory} belongs to node {meta.node_id}, but node.id is {config.node_id}")
    return meta


@dataclass(frozen=True, slots=True)
class RecoveredLog:
    """The opened metadata log and the image its newest snapshot holds."""

    directory: Path  # metadata.log.dir
    log_dir: Path  # the partition directory inside it
    metadata_log: MetadataLog
    state: ControllerState
    replay_from: int  # the log is replayed from here (the snapshot's end offset)


def open_recovered_log(config: ServerConfig, cluster_id: str, *, busy_hint: str,
                       file_ops: FileOps | None = None) -> RecoveredLog:
    """Opens and recovers the metadata log and loads its newest valid snapshot.
    `busy_hint` follows the lock error: what to do when another process holds it."""
    directory = Path(config.metadata_log_dir)
    log_dir = directory / METADATA_LOG_DIR_NAME
    try:
        metadata_log = MetadataLog.open(log_dir, LogConfig(segment_bytes=config.log_segment_bytes),
                                        file_ops=file_ops)
    except RuntimeError as exc:  # the log's exclusive lock is held
        raise StartupError(f"{exc}; {busy_hint}") from None
    with closed_on_failure(metadata_log):
        try:
            state, replay_from, _ = recover_snapshot(log_dir, metadata_log, cluster_id)
        except SnapshotRecoveryError as exc:
            raise StartupError(str(exc)) from None
    return RecoveredLog(directory, log_dir, metadata_log, state, replay_from)


@contextmanager
def closed_on_failure(metadata_log: MetadataLog) -> Iterator[None]:
    """Closes the log (releasing its lock) if the steps inside fail, so that a refused
    start leaves nothing held."""
    try:
        yield
    except BaseException:
        metadata_log.close()
        raise


def node_client_security(config: ServerConfig, whom: str) -> ClientSecurity:
    """The credentials this node's connections to `whom` use (the controller listener's
    security protocol)."""
    try:
        return ClientSecurity.for_node(config)
    except ClientSecurityError as exc:
        raise StartupError(f"cannot reach {whom}: {exc}") from None


def build_raft_driver(
    config: ServerConfig,
    recovered: RecoveredLog,
    cluster_id: str,
    voter_ids: frozenset[int],
    peers: dict[int, PeerAddress],
    rng: random.Random,
    *,
    client_id: str,
    security: ClientSecurity | None,
    on_refusal: Callable[[Refusal], None] | None = None,
    on_storage_change: Callable[[bool], None] | None = None,
    directory_id: uuid.UUID | None = None,
) -> RaftDriver:
    """The Raft driver over the recovered log: a voter when `config.node_id` is in
    `voter_ids` (or, at kraft.version 1, in the log's voter set), an observer otherwise.
    Empty `voter_ids`: a dynamic quorum (KIP-853), whose controllers the driver learns
    from the log and reaches first through controller.quorum.bootstrap.servers. Its peer
    connections (which it creates itself) get `security`."""
    peers = dict(peers)
    bootstrap_ids = []
    if not voter_ids:
        # Kafka's ids for bootstrap servers: negative, so they never name a node.
        own = {(listener.host, listener.port)
               for listener in (config.listener, *config.listeners, *config.advertised_listeners)}
        for index, (host, port) in enumerate(config.quorum_bootstrap_servers):
            if (host, port) in own:
                continue  # this node itself: it cannot tell itself who leads
            node_id = -2 - index
            peers[node_id] = PeerAddress(node_id, host, port)
            bootstrap_ids.append(node_id)
    raft_config = RaftConfig(
        node_id=config.node_id, voters=voter_ids, cluster_id=cluster_id, directory_id=directory_id,
        bootstrap_ids=tuple(bootstrap_ids),
        election_timeout_ms=config.quorum_election_timeout_ms, fetch_timeout_ms=config.quorum_fetch_timeout_ms,
        high_watermark_linger_ms=config.quorum_high_watermark_linger_ms,
    )
    raft_log = MetadataRaftLog(recovered.metadata_log)
    history = RaftCore.load_voter_history(raft_config, raft_log, StoredRecordsCodec())
    # The quorum-state file's ids are checked against the static voters only while they are
    # the voters (kraft.version 0); once the log names them, any of its voters may lead.
    store = FileQuorumStateStore(recovered.log_dir, cluster_id,
                                 voter_ids if voter_ids and history.kraft_version < 1 else None)
    driver = RaftDriver(raft_config, raft_log, store, peers, rng,
                        client_id=client_id, on_refusal=on_refusal, on_storage_change=on_storage_change,
                        listener_name=config.controller_listener_name, peer_security=security,
                        voter_history=history)
    if security is not None:
        for node_id in peers:
            peer = driver.peer(node_id)
            if peer is not None:
                peer.security = security
    return driver


async def start_metrics_endpoint(nursery: trio.Nursery, node) -> None:
    """Serves `node.metrics` on `kraftwerk.metrics.port` when set; `node.metrics_port`
    is the bound port. `node.refresh_metrics` runs at every scrape."""
    config = node.config
    if config.metrics_port is not None:
        node.metrics_port = await nursery.start(
            serve_metrics, node.metrics.registry, config.listener.host, config.metrics_port, node.refresh_metrics)


async def start_node_listeners(nursery: trio.Nursery, node, dispatcher,
                               registry: ConnectionRegistry | None = None) -> None:
    """Serves every configured listener with `dispatcher`; sets `node.bound_ports`
    (port by listener name) and `node.port` (the primary listener's)."""
    node.bound_ports = await nursery.start(
        lambda task_status: serve_node_listeners(dispatcher, registry=registry, task_status=task_status))
    node.port = node.bound_ports[node.config.listener.name]
