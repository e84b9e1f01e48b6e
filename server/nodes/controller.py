"""A controller node: storage, state, the controller loop and the listener, wired.

Owns: what a controller adds to the shared start-up steps (server/nodes/
startup.py): it must be one of `controller.quorum.voters` (this node alone
when none are configured), a brand-new node needs its bootstrap checkpoint,
and the controller loop runs on top of the replayer; the read-only views the
handlers use, and the trio tasks of a running node (listener, Raft driver,
controller loop, broker-session timer, the migration). The log after the
snapshot is replayed by the replayer as the quorum commits it; the replayer
also takes the interval snapshots (`metadata.log.max.record.bytes.between.snapshots`).

Rules kept here:
- Start-up replays through the same `ControllerState.replay` as live
  commits, so a restart rebuilds exactly the state that was acknowledged.
- A node refuses to start on an unformatted directory, a cluster/node id
  mismatch, a locked log, a missing or corrupt bootstrap checkpoint, or
  finalized feature levels its software cannot run (KIP-778), with a message
  that says what to do.
"""

from __future__ import annotations

import random
from pathlib import Path

import trio

from protocol.errors import ErrorCode
from server.api.catalog import NodeRole, served_table
from server.config import ServerConfig, VoterAddress
from server.controller import commands
from server.controller.commands import ControllerConfig
from server.controller.features import METADATA_VERSION, SupportedRange, unsupported_finalized_levels
from server.controller.loop import ControllerLoop, NotControllerError, WritesBlockedError, wall_clock_ms
from server.controller.replayer import Replayer
from server.controller.state import BrokerHeartbeatTracker
from server.dispatch import Dispatcher
from server.migration.copy import migration_state_record
from server.migration.driver import MigrationDriver
from server.migration.state import ZkMigrationState, kip_state
from server.net.peer import PeerAddress
from server.observability import Event, Metrics, get_logger
from server.raft.driver import RaftDriver
from server.raft.validate import Refusal
from server.releases import supported_features as release_supported_features
from server.security.exposure import warn_exposed_listeners
from server.api.context import ControllerServices, RaftEndpoint
from server.nodes.controller_registration import run_controller_registration
from server.nodes.forwarding import ControllerConnections, Forwarder, leader_wait_s
from server.nodes.serving import Endpoint, ServingNode
from server.nodes import startup
from server.nodes.startup import RecoveredLog, StartupError
from server.storage.bootstrap import BOOTSTRAP_CHECKPOINT, BootstrapError, read_bootstrap
from server.storage.meta_properties import parse_uuid_string
from server.voters import Endpoint as VoterEndpoint
from server.storage.log import FileOps, MetadataLog

# Hosts a listener binds to that name no address another node could connect to.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
# How long an operator write waits for a migration's ZooKeeper write-behind to catch up
# before it is refused with a retriable error.
WRITES_BLOCKED_WAIT_S = 5.0
# How long a command on a newly elected leader waits for its controller to activate
# (replay up to its first commit) before it is refused NOT_CONTROLLER.
ACTIVATION_WAIT_S = 1.0

log = get_logger("controller")


def read_bootstrap_checkpoint(directory: Path):
    """The bootstrap metadata records `storage format` left in `directory` (the
    bootstrap snapshot, or an older kraftwerk's bootstrap.checkpoint), or None."""
    try:
        found = read_bootstrap(directory)
    except BootstrapError as exc:
        raise StartupError(f"{exc}; re-run `kraftwerk storage format`") from None
    return None if found is None else list(found.records)


class ControllerNode(ServingNode, ControllerServices, RaftEndpoint):
    def __init__(self, config: ServerConfig, *, file_ops: FileOps | None = None) -> None:
        self.config = config
        # The metadata log's write-path system calls (tests inject disk failures here).
        self._file_ops = file_ops
        self.metrics = Metrics()
        # What this node's software supports: kraftwerk's own, or a Kafka release's (--release).
        self._init_serving(served_table(NodeRole.CONTROLLER), release_supported_features(
            config.release, config.unstable_feature_versions_enable))
        self.cluster_id = ""
        self.port = config.listener.port
        # Every listener's bound port by listener name (one node may serve several listeners).
        self.bound_ports: dict[str, int] = {}
        self.controller: ControllerLoop | None = None
        self.replayer: Replayer | None = None
        self.raft_driver: RaftDriver | None = None
        self.metadata_log: MetadataLog | None = None
        self.controller_config: ControllerConfig | None = None
        self._bootstrap_records = None
        # KIP-853: formatted for a dynamic quorum (no static voters), and the voters its
        # bootstrap snapshot names (until the Raft driver reads them from the log).
        self._dynamic = False
        self._bootstrap_voters = None
        # KIP-866: the migration driver, when kafka.metadata.migration.enable is set.
        self.migration = None
        self.metrics_port: int | None = None
        # Set (and renewed) when a committed batch changes metadata.version or registers a
        # controller: what a registered controller's registration depends on.
        self._registration_news = trio.Event()

    @property
    def state(self):
        """The committed controller state (ControllerState), None before open()."""
        return self.replayer.state if self.replayer is not None else None

    @property
    def voters(self) -> tuple[VoterAddress, ...]:
        """The voters as this node knows them: the log's set at kraft.version 1 (KIP-853),
        else controller.quorum.voters (none given and not formatted for a dynamic quorum:
        this node alone, the degenerate quorum)."""
        driver = self.raft_driver
        voter_set = driver.dynamic_voters if driver is not None else self._bootstrap_voters
        if voter_set is not None:
            name = self.config.controller_listener_name
            addresses = []
            for voter in voter_set:
                endpoint = next((e for e in voter.endpoints if e.name == name),
                                voter.endpoints[0] if voter.endpoints else None)
                if endpoint is not None:
                    addresses.append(VoterAddress(voter.node_id, endpoint.host, endpoint.port))
            return tuple(addresses)
        if self.config.quorum_voters or self._dynamic:
            return self.config.quorum_voters
        return (VoterAddress(self.config.node_id, self.config.listener.host, self.config.listener.port),)

    # -- start-up -------------------------------------------------------------
    def open(self) -> None:
        config = self.config
        meta = startup.read_formatted_meta(config, format_hint=" (get an ID with `kraftwerk storage random-uuid`)")
        self._learn_quorum_kind()
        voter_ids = [voter.node_id for voter in self.voters]
        if not self._dynamic and config.node_id not in voter_ids:
            raise StartupError(f"node.id {config.node_id} is not in controller.quorum.voters "
                               f"({', '.join(map(str, voter_ids))})")
        # Every listener of a controller serves the KRaft RPCs: say so when one lets
        # anyone reach the quorum (security.plaintext_controller_listener).
        warn_exposed_listeners(config)
        self.cluster_id = meta.cluster_id
        supported = self.supported_node_features
        self.controller_config = ControllerConfig(
            node_id=config.node_id,
            cluster_id=meta.cluster_id,
            supported_features=supported,
            session_timeout_ms=config.broker_session_timeout_ms,
            migration_enabled=config.migration_enabled,
        )
        recovered = startup.open_recovered_log(
            config, meta.cluster_id, file_ops=self._file_ops,
            busy_hint=f"is another controller running on {Path(config.metadata_log_dir)}? Stop it, or give this one "
                      "its own --log-dir")
        self.log_dir, self.metadata_log, state = recovered.log_dir, recovered.metadata_log, recovered.state
        with startup.closed_on_failure(self.metadata_log):
            self._check_startable(recovered)
            static = () if self._dynamic else self.voters
            peers = {v.node_id: PeerAddress(v.node_id, v.host, v.port) for v in static if v.node_id != config.node_id}
            # A lone controller has no peers and needs no client credentials of its own.
            security = (startup.node_client_security(config, "the other controllers")
                        if peers or self._dynamic else None)
            self.raft_driver = startup.build_raft_driver(
                config, recovered, meta.cluster_id, frozenset(v.node_id for v in static), peers, random.Random(),
                client_id=f"kraftwerk-controller-{config.node_id}", security=security,
                on_refusal=self._count_refusal, on_storage_change=self.metrics.note_storage_offline,
                directory_id=parse_uuid_string(meta.directory_id) if meta.directory_id else None)
            self.replayer = Replayer(
                self.raft_driver, state, recovered.replay_from, supported, node_id=config.node_id,
                log_dir=self.log_dir, on_commit=self._on_commit,
                snapshot_interval_bytes=config.metadata_snapshot_max_record_bytes)
            self.tracker = BrokerHeartbeatTracker(config.broker_session_timeout_ms)
            self.controller = ControllerLoop(
                self.raft_driver, self.replayer, self.tracker, config.controller_queue_max_commands,
                bootstrap_records=lambda: self._bootstrap_records,
                group_commit=config.controller_group_commit,
            )
            # The quorum's own records (voter changes) wait for the controller's in line.
            self.raft_driver.append_gate = self.controller.raft_append
            # A standby relays the writes clients send it to the active controller, and
            # reads after it, over connections of its own (server/nodes/forwarding.py).
            self._forward_peers = ControllerConnections(
                peers, f"kraftwerk-controller-{config.node_id}-forward", security, random.Random(),
                lookup=self.raft_driver.peer_address if self._dynamic else None)
            self.raft_driver.on_peer_moved = self._forward_peers.moved
            self.forwarder = Forwarder(config.node_id, self.raft_driver, self._forward_peers, self.replayer,
                                       leader_wait_s(config.quorum_fetch_timeout_ms, config.quorum_election_timeout_ms))
            if config.migration_enabled:
                if not config.zookeeper_connect:
                    raise StartupError("kafka.metadata.migration.enable=true needs zookeeper.connect (the "
                                       "ZooKeeper of the cluster to migrate)")
                self.migration = MigrationDriver(
                    self, config.zookeeper_connect,
                    max_lag_records=config.migration_max_write_behind_lag_records,
                    session_timeout_s=config.zookeeper_session_timeout_ms / 1000,
                    copy_chunk_records=config.migration_copy_chunk_records,
                    copy_pause_s=config.migration_copy_pause_ms / 1000)
        log.info(Event.CONTROLLER_RECOVERED, records=state.last_applied_offset + 1, replay_from=recovered.replay_from,
                 log_end_offset=self.metadata_log.end_offset, voters=voter_ids,
                 metadata_version=state.metadata_version, cluster_id=self.cluster_id)

    def _learn_quorum_kind(self) -> None:
        """Static voters, or a dynamic quorum (KIP-853): no controller.quorum.voters and either
        controller.quorum.bootstrap.servers or a bootstrap snapshot at kraft.version 1."""
        config = self.config
        if config.quorum_voters:
            return
        try:
            bootstrap = read_bootstrap(Path(config.metadata_log_dir))
        except BootstrapError:
            bootstrap = None  # reported, with the remedy, by _check_startable
        dynamic_bootstrap = bootstrap is not None and bootstrap.kraft_version >= 1
        self._dynamic = dynamic_bootstrap or bool(config.quorum_bootstrap_servers)
        if dynamic_bootstrap:
            self._bootstrap_voters = bootstrap.voters

    def _own_controller_endpoints(self) -> tuple[VoterEndpoint, ...]:
        """Where the other controllers reach this one (KIP-853's voter endpoints): the
        controller listener, advertised if it is, with its bound port."""
        name = self.config.controller_listener_name
        own = self.own_listener_endpoint(name)
        if own is None or own[0] in WILDCARD_HOSTS:
            return ()  # bound to every address and not advertised: no address others could use
        return (VoterEndpoint(name, own[0], own[1]),)

    def _check_startable(self, recovered: RecoveredLog) -> None:
        """A brand-new node needs its bootstrap records (the records it writes if it
        becomes the first leader), and no node may serve finalized levels its software
        cannot run (KIP-778). Checked at start-up, so the operator gets a clean error."""
        if recovered.metadata_log.end_offset == 0:
            self._bootstrap_records = read_bootstrap_checkpoint(recovered.directory)
            if self._bootstrap_records is None:
                raise StartupError(f"{recovered.directory} has no {BOOTSTRAP_CHECKPOINT} and an empty log; "
                                   "re-run `kraftwerk storage format`")
        finalized = recovered.state.all_finalized_levels()
        for item in self._bootstrap_records or ():
            if item.name == "FeatureLevelRecord":
                finalized[item.data["name"]] = item.data["feature_level"]
        reasons = unsupported_finalized_levels(finalized, self.supported_node_features)
        if reasons:
            raise StartupError(
                f"controller {self.config.node_id} cannot run this cluster's finalized features: "
                + "; ".join(reasons)
                + ". Run a release that supports them (or, for unstable levels, set "
                "unstable.feature.versions.enable=true)."
            )

    def _on_commit(self, records, base_offset: int) -> None:
        self._api_versions_cache.clear()
        # A controller keeps its client connections open across a metadata.version
        # change, as Kafka's do: a version a connection was told and the new level
        # gates away is answered UNSUPPORTED_VERSION (server/dispatch.py). Closing an
        # idle connection races with the client's next request, which real admin
        # clients (kafka-python) then see as a lost connection.
        state = self.state
        self.metrics.metadata_offset.set(state.last_applied_offset)
        if state.metadata_version is not None:
            self.metrics.finalized_metadata_version.set(state.metadata_version)
        news = False
        for offset, item in enumerate(records, start=base_offset):
            if item.name == "FeatureLevelRecord":
                news = news or item.data["name"] == METADATA_VERSION
                log.info(Event.FEATURE_FINALIZED, feature=item.data["name"], feature_level=item.data["feature_level"],
                         offset=offset)
            elif item.name == "RegisterControllerRecord":
                news = True
            elif item.name == "RegisterBrokerRecord":
                log.info(Event.BROKER_REGISTERED, broker_id=item.data["broker_id"], broker_epoch=offset)
            elif item.name == "FenceBrokerRecord":
                log.info(Event.BROKER_FENCED, broker_id=item.data["id"], offset=offset)
            elif item.name == "UnfenceBrokerRecord":
                log.info(Event.BROKER_UNFENCED, broker_id=item.data["id"], offset=offset)
            elif item.name == "UnregisterBrokerRecord":
                log.info(Event.BROKER_UNREGISTERED, broker_id=item.data["broker_id"], offset=offset)
            elif item.name == "PartitionChangeRecord":
                log.info(Event.PARTITION_CHANGED, topic_id=str(item.data["topic_id"]),
                         partition=item.data["partition_id"], leader=item.data.get("leader"),
                         isr=item.data.get("isr"), offset=offset)
        if news:
            self._registration_news.set()
            self._registration_news = trio.Event()

    async def wait_registration_news(self) -> None:
        """Until a committed batch changes metadata.version or registers a controller."""
        await self._registration_news.wait()

    # -- running ----------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.controller is None:
            self.open()
        try:
            async with trio.open_nursery() as nursery:
                self._forward_peers.attach(nursery)
                await startup.start_node_listeners(nursery, self, Dispatcher(self, self.served_apis),
                                                   registry=self.connections)
                self.raft_driver.own_endpoints = self._own_controller_endpoints()
                await nursery.start(self.raft_driver.run)
                await nursery.start(self.controller.run)
                await self._forward_peers.start(nursery)
                nursery.start_soon(self._fence_expired_brokers)
                if self.migration is not None:
                    await nursery.start(self.migration.run)
                else:
                    nursery.start_soon(self._finalize_migration)
                await startup.start_metrics_endpoint(nursery, self)
                if [voter.node_id for voter in self.voters] == [self.config.node_id]:
                    # The only voter elects itself at once: report "started" only when it
                    # serves writes, so scripts never see a NOT_CONTROLLER from a lone node.
                    # (An observer of a one-voter quorum does not wait for itself.)
                    await self.controller.wait_active()
                # KIP-919: register with the active controller (again whenever the registration
                # is gone); a lone voter reports "started" once it is registered.
                await nursery.start(run_controller_registration, self)
                log.info(Event.SERVER_STARTED, node_id=self.config.node_id, host=self.config.listener.host,
                         port=self.port, cluster_id=self.cluster_id,
                         metadata_version=self.state.metadata_version)
                task_status.started(self.port)
        finally:
            self._forward_peers.detach()
            self.metadata_log.close()

    async def _fence_expired_brokers(self) -> None:
        interval_seconds = self.config.fence_check_interval_ms / 1000
        controller_config = self.controller_config
        while True:
            await trio.sleep(interval_seconds)
            try:
                await self.controller.submit(
                    lambda state, tracker, next_offset, now_ms: commands.fence_expired_brokers(
                        state, tracker, now_ms, controller_config)
                )
            except NotControllerError:
                pass  # only the active controller tracks broker sessions

    # -- views for handlers ---------------------------------------------------
    def active_controller_id(self) -> int:
        """The Raft leader, which is the active controller; while an election runs, the
        last one this node knew (-1 only if it never knew one). A client sent to a dead
        leader is refused a connection and asks again, while one told "unknown" may keep
        that answer for minutes (Kafka's Java Admin with bootstrap.controllers). Reads
        wait for a live leader first (`read_barrier`), so few answers name a dead one."""
        driver = self.raft_driver
        leader = driver.last_leader_id if driver is not None else None
        return -1 if leader is None else leader

    def client_endpoints(self, listener_name: str | None = None) -> list[Endpoint]:
        """The nodes a client bootstrapped here is told about (Metadata): the controllers."""
        return self.controller_endpoints(listener_name)

    def controller_endpoints(self, listener_name: str | None = None) -> list[Endpoint]:
        """Every controller of the quorum, so clients can follow the active one. This node
        is given on the listener the client came in on; the others at their voter address
        (the only one of theirs this node knows)."""
        endpoints = []
        for voter in self.voters:
            own = self.own_listener_endpoint(listener_name) if voter.node_id == self.config.node_id else None
            if own is not None:
                endpoints.append(Endpoint(voter.node_id, own[0], own[1]))
            elif voter.node_id == self.config.node_id:
                advertised = self.config.advertised_listener
                if advertised is not None:
                    endpoints.append(Endpoint(voter.node_id, advertised.host, advertised.port or self.port))
                else:
                    endpoints.append(Endpoint(voter.node_id, self.config.listener.host, self.port))
            else:
                endpoints.append(Endpoint(voter.node_id, voter.host, voter.port))
        return endpoints

    def is_quorum_leader(self) -> bool:
        return self.raft_driver is not None and self.raft_driver.is_leader

    def is_active_controller(self) -> bool:
        return self.controller is not None and self.controller.active

    def quorum_partition_state(self) -> dict:
        partition = self.raft_driver.describe_partition(wall_clock_ms())
        if partition.get("error_code", 0) == 0:
            # Registered brokers are the quorum's observers once they fetch;
            # until then they are listed with unknown offsets, as Kafka lists idle observers.
            known = {r["replica_id"] for r in partition.get("observers", [])}
            observers = list(partition.get("observers", []))
            for broker in commands.registered_brokers(self.state, include_fenced=True):
                if broker.broker_id not in known:
                    observers.append({"replica_id": broker.broker_id, "log_end_offset": -1,
                                      "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1})
            partition["observers"] = observers
        return partition

    def quorum_nodes(self) -> list[dict]:
        return [{"node_id": e.node_id, "listeners": [{"name": self.config.listener.name, "host": e.host,
                                                       "port": e.port}]}
                for e in self.controller_endpoints()]

    async def learn_quorum_features(self, timeout_s: float) -> None:
        """Waits (bounded) until every other controller's feature ranges are known.

        Right after start-up the connections to the other controllers may still be
        negotiating; a feature change checked then would be refused for "controller N
        has not registered" although N is up. Unreachable controllers stay unknown."""
        if self.raft_driver is None:
            return
        with trio.move_on_after(timeout_s):
            for voter in self.voters:
                peer = self.raft_driver.peer(voter.node_id) if voter.node_id != self.config.node_id else None
                if peer is not None and peer.supported_features is None:
                    await peer.wait_connected()

    def quorum_supported_features(self) -> dict:
        """The other controllers' supported feature ranges, None where not known yet."""
        known = {}
        for voter in self.voters:
            if voter.node_id == self.config.node_id:
                continue
            peer = self.raft_driver.peer(voter.node_id) if self.raft_driver is not None else None
            ranges = peer.supported_features if peer is not None else None
            known[voter.node_id] = (None if ranges is None else
                                    {name: SupportedRange(lo, hi) for name, (lo, hi) in ranges.items()})
        return known

    def kraft_version(self) -> int | None:
        """The Raft layer's kraft.version (None before the driver runs)."""
        return self.raft_driver.kraft_version if self.raft_driver is not None else None

    async def upgrade_kraft_version(self, level: int, validate_only: bool) -> tuple[int, str | None]:
        """UpdateFeatures' kraft.version: the Raft leader writes it (KIP-853)."""
        if self.raft_driver is None:
            return ErrorCode.NOT_CONTROLLER, None
        return await self.raft_driver.upgrade_kraft_version(level, validate_only)

    # -- a standby's relay to the active controller (server/nodes/forwarding.py) ---------
    async def forward_to_controller(self, api_key: int, version: int, request, ctx=None) -> dict | None:
        """The active controller's answer to a request a client sent this standby (None
        if none answered in time, or this node leads now: it answers itself)."""
        return await self.forwarder.forward(api_key, version, request, ctx)

    def read_barrier_needed(self) -> bool:
        """Reads wait for the leader's image on every controller but the leader (and for
        a live leader on one that knows none)."""
        driver = self.raft_driver
        if driver is None:
            return False
        return driver.leader_id != self.config.node_id or driver.leader_unreachable

    async def read_barrier(self) -> None:
        await self.forwarder.read_barrier()

    # -- write paths used by handlers -----------------------------------------
    async def submit(self, command, *, gated: bool = False):
        """Runs a controller command. `gated`: an operator's metadata write, which waits
        (bounded) while a migration's ZooKeeper write-behind is too far behind and then
        fails with WritesBlockedError (KIP-866)."""
        if gated and self.migration is not None and self.controller.active:
            if not await self.migration.wait_writes_allowed(WRITES_BLOCKED_WAIT_S):
                raise WritesBlockedError(
                    f"ZooKeeper is {self.migration.write_lag()} records behind the metadata log "
                    f"(bound {self.migration.max_lag_records}) or unreachable; retry later")
        if not self.controller.active and self.is_quorum_leader():
            # Elected and replaying up to its first commit: active within a commit round
            # trip. Waiting here saves the client a NOT_CONTROLLER and a retry.
            with trio.move_on_after(ACTIVATION_WAIT_S):
                await self.controller.wait_active()
        return await self.controller.submit(command)

    # -- KIP-866 finalization and metrics ---------------------------------------
    async def _finalize_migration(self) -> None:
        """A controller restarted with the migration switched off finalizes a migration
        whose brokers all run in KRaft mode (ZkMigrationStateRecord POST_MIGRATION)."""
        while True:
            await self.controller.wait_active()
            if ZkMigrationState(self.state.zk_migration_state) == ZkMigrationState.MIGRATION:
                zk_brokers = sorted(b.broker_id for b in self.state.brokers.values()
                                    if b.is_migrating_zk_broker and not b.fenced)
                if zk_brokers:
                    log.error(Event.MIGRATION_STATE, state="MigrationActive",
                              error=f"cannot finalize: brokers {zk_brokers} still run in ZooKeeper mode; restart "
                                    "them as KRaft brokers, or re-enable kafka.metadata.migration.enable")
                else:
                    def finalize(state, tracker, next_offset, now_ms):
                        if ZkMigrationState(state.zk_migration_state) != ZkMigrationState.MIGRATION:
                            return commands.ControllerResult([], {})
                        return commands.ControllerResult([migration_state_record(ZkMigrationState.POST_MIGRATION)], {})
                    try:
                        await self.controller.submit(finalize)
                        log.info(Event.MIGRATION_STATE, state="KRaft", note="migration finalized")
                    except NotControllerError:
                        pass
            await self.controller.wait_inactive()

    def migration_status(self):
        """The migration driver's live status (MigrationStatus), None without a migration."""
        return self.migration.status if self.migration is not None else None

    def migration_write_lag(self) -> int:
        return self.migration.write_lag() if self.migration is not None else -1

    def migration_kip_state(self) -> int:
        if self.migration is not None:
            return int(self.migration.kip_state())
        return int(kip_state(ZkMigrationState(self.state.zk_migration_state), False, 0))

    def _count_refusal(self, refusal: Refusal) -> None:
        self.metrics.raft_refused_messages.labels(event=str(refusal.event), error=refusal.error.name).inc()

    def refresh_metrics(self) -> None:
        """Sets the gauges derived from state (called on every scrape)."""
        metrics = self.metrics
        state = self.state
        active = self.controller is not None and self.controller.active
        metrics.active_controller.set(1 if active else 0)
        self._refresh_raft_gauges()
        if state is None:
            return
        self._refresh_image_gauges(state)
        metrics.metadata_type.set(3)  # a controller's metadata is the KRaft log
        if active:
            metrics.migration_state.set(self.migration_kip_state())
            lag = self.migration.write_lag() if self.migration is not None else -1
            metrics.zookeeper_write_behind_lag.set(max(lag, 0))
        else:
            # KIP-866: only the active controller reports these; a standby says 0 (no
            # state), not the values it had when it last led.
            metrics.migration_state.set(0)
            metrics.zookeeper_write_behind_lag.set(0)
