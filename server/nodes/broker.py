"""The broker agent: a light KRaft broker that stores no topic data.

Owns: what a broker adds to the shared start-up steps (server/nodes/
startup.py: meta.properties, the broker's own copy of the metadata log): its
directory id, an id outside the voters, its own connections to the
controllers; the tasks of a running broker — the Raft *observer* that fetches
the metadata log from the quorum (Fetch, FetchSnapshot), the `Replayer`
(server/controller/replayer.py, the controllers' too) that keeps the metadata
image (features, brokers, controller) with the same `ControllerState.replay`
as the controllers, the lifecycle task
(server/broker/lifecycle.py) and the client listener — and what happens when
the finalized metadata.version changes (KIP-778): renegotiate ApiVersions with
the controllers, close (once idle, every request read answered) the client
connections whose ApiVersions answer went stale so those clients ask again
(server/nodes/serving.py), or stop when the new level cannot be run; and its Prometheus
endpoint when `kraftwerk.metrics.port` is set (MetadataType 3, the finalized
features, Kafka's BrokerState, registered/fenced, the observer's Raft view).

Rules kept here:
- `--release` decides the supported feature ranges (server/releases.py); the
  ApiVersions a broker advertises are its served table gated by the finalized
  metadata.version (server/gating.py), like a controller's.
- Clients are served once the broker's image has caught up with the leader's
  high watermark (bounded wait), so they never see a stale or ungated view.
- Clients may bootstrap from a broker: Metadata and DescribeCluster list the
  unfenced brokers (and this one), name this broker as the controller (as
  Kafka's brokers name a broker, KIP-590) and UpdateFeatures/DescribeQuorum
  are forwarded to the active controller.
- KIP-778 stop rule: a broker that was a member of the cluster (it had a
  metadata log when it started, or it registered) and meets a finalized level
  its release cannot run unregisters and stops non-zero. A new broker that
  meets one is simply refused at registration, stays fenced and retries.
"""

from __future__ import annotations

import random
from pathlib import Path

import trio
from prometheus_client import Gauge

from protocol.registry import API_MESSAGES
from server.api.catalog import NodeRole, served_table
from server.broker.lifecycle import BrokerLifecycle, BrokerState
from server.config import ServerConfig, VoterAddress
from server.controller.features import METADATA_VERSION, find_metadata_version, unsupported_finalized_levels
from server.controller.replayer import Replayer
from server.controller.state import SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN
from server.dispatch import Dispatcher
from server.gating import GATES
from server.net.peer import PeerAddress, PeerConnection
from server.observability import Event, Metrics, get_logger
from server.raft.driver import RaftDriver
from server.releases import supported_features as release_supported_features
from server.security.client_config import ClientSecurity
from server.api.context import BrokerServices
from server.nodes.forwarding import ControllerConnections, Forwarder, leader_wait_s
from server.nodes.serving import Endpoint, ServingNode
from server.nodes import startup
from server.nodes.startup import StartupError
from server.storage.log import MetadataLog
from server.storage.meta_properties import parse_uuid_string

log = get_logger("broker")

RENEGOTIATE_TIMEOUT_S = 5.0
# A controller that answered ApiVersions before replaying a change is asked again this
# often, at most this many times (within RENEGOTIATE_TIMEOUT_S in all).
RENEGOTIATE_RETRY_S = 0.05
RENEGOTIATE_ATTEMPTS = 100
METADATA_WAIT_S = 30.0


# Kafka's BrokerState numbers (kafka.server:type=KafkaServer,name=BrokerState).
BROKER_STATE_NUMBERS = {
    BrokerState.STARTING: 1,
    BrokerState.RECOVERY: 2,
    BrokerState.RUNNING: 3,
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: 6,
    BrokerState.SHUTTING_DOWN: 7,
}
METADATA_TYPE_KRAFT = 3  # KIP-866's MetadataType: ZooKeeper 1, Dual 2, KRaft 3


def _mv_text(level: int) -> str:
    """`3.7-IV2` for a known metadata.version level, the number otherwise (for logs)."""
    return str(find_metadata_version(level) or level)


class BrokerNode(ServingNode, BrokerServices):
    is_broker = True

    def __init__(self, config: ServerConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self._init_broker_metrics()
        self.metrics_port: int | None = None
        self._init_serving(served_table(NodeRole.BROKER), release_supported_features(
            config.release, config.unstable_feature_versions_enable))
        self._rng = rng or random.Random()
        self.cluster_id = ""
        self.directory_id = None
        self.port = config.listener.port
        # Every listener's bound port by listener name (one node may serve several listeners).
        self.bound_ports: dict[str, int] = {}
        self.raft_driver: RaftDriver | None = None
        self.replayer: Replayer | None = None
        self.metadata_log: MetadataLog | None = None
        self.lifecycle = BrokerLifecycle(self, random.Random(self._rng.random()))
        self.was_member = False
        self._nursery: trio.Nursery | None = None
        self._metadata_version: int | None = None
        # Counters and marks for tests, benchmarks and logs.
        self.metadata_version_changes = 0
        self.renegotiations = 0
        self.renegotiated_metadata_version: int | None = None
        self.controller_api_versions: dict[int, tuple[int, int]] = {}
        self._renegotiated = trio.Event()

    @property
    def state(self):
        """The metadata image (a ControllerState), None before open()."""
        return self.replayer.state if self.replayer is not None else None

    @property
    def voters(self):
        """The controllers of the quorum: the log's voters at kraft.version 1 (KIP-853),
        else controller.quorum.voters."""
        driver = self.raft_driver
        voter_set = driver.dynamic_voters if driver is not None else None
        if voter_set is None:
            return self.config.quorum_voters
        addresses = []
        for voter in voter_set:
            address = driver.peer_address(voter.node_id)
            if address is not None:
                addresses.append(VoterAddress(voter.node_id, address.host, address.port))
        return tuple(addresses)

    # -- start-up -----------------------------------------------------------------
    def open(self) -> None:
        config = self.config
        meta = startup.read_formatted_meta(config, format_hint=" with this broker's config (process.roles=broker)")
        if not config.quorum_voters and not config.quorum_bootstrap_servers:
            raise StartupError("a broker needs controller.quorum.voters (id@host:port,...) or "
                               "controller.quorum.bootstrap.servers (host:port,...) to find the controllers")
        voter_ids = frozenset(voter.node_id for voter in config.quorum_voters)
        if config.node_id in voter_ids:
            raise StartupError(f"node.id {config.node_id} is a controller in controller.quorum.voters; brokers "
                               "need their own ids")
        self.cluster_id = meta.cluster_id
        self.directory_id = parse_uuid_string(meta.directory_id) if meta.directory_id else None
        if self.directory_id is None:
            raise StartupError(f"{Path(config.metadata_log_dir)}/meta.properties has no directory.id; re-run "
                               "`kraftwerk storage format`")
        recovered = startup.open_recovered_log(config, meta.cluster_id,
                                       busy_hint=f"is another node running on {Path(config.metadata_log_dir)}?")
        self.log_dir, self.metadata_log, state = recovered.log_dir, recovered.metadata_log, recovered.state
        with startup.closed_on_failure(self.metadata_log):
            self.was_member = self.metadata_log.end_offset > 0 or recovered.replay_from > 0
            security = startup.node_client_security(config, "the controllers")
            peers = {v.node_id: PeerAddress(v.node_id, v.host, v.port) for v in config.quorum_voters}
            # Not a voter: the driver is a Raft observer that fetches the metadata log.
            self.raft_driver = startup.build_raft_driver(
                config, recovered, meta.cluster_id, voter_ids, peers, random.Random(self._rng.random()),
                client_id=f"kraftwerk-broker-{config.node_id}", security=security, directory_id=self.directory_id)
            # The broker's requests to the controllers (registration, heartbeats, ApiVersions,
            # forwarded requests) go over connections of their own: the observer's connection
            # to the leader carries a long-polled Fetch that the leader answers in order, which
            # would hold any request queued behind it for up to fetch_max_wait_ms.
            self._controller_peers = self._controller_connections(peers, "", security)
            # Clients' forwarded requests get connections of their own too: a heartbeat sent
            # at a version a metadata.version change has just gated closes its connection
            # (KIP-778 renegotiation race), and a forwarded write in flight on it would be
            # lost and resent — applied twice.
            self._forward_peers = self._controller_connections(peers, "-forward", security)
            # The replayer is the only writer of the image, as on a controller. A broker's
            # lifecycle decides what a level it cannot run means (it may not be a member).
            self.replayer = Replayer(
                self.raft_driver, state, recovered.replay_from, self.supported_node_features,
                node_id=config.node_id, log_dir=self.log_dir, on_commit=self._on_commit,
                stop_on_unsupported_level=False)
            self.raft_driver.on_peer_moved = self._controller_moved
            self.forwarder = Forwarder(config.node_id, self.raft_driver, self._forward_peers, self.replayer,
                                       leader_wait_s(config.quorum_fetch_timeout_ms, config.quorum_election_timeout_ms))
        self._metadata_version = state.metadata_version

    def _controller_moved(self, address: PeerAddress) -> None:
        """A controller's listener moved (UpdateRaftVoter): this broker's connections follow."""
        self._controller_peers.moved(address)
        self._forward_peers.moved(address)

    def _controller_connections(self, peers: dict[int, PeerAddress], client_suffix: str,
                                security: ClientSecurity) -> ControllerConnections:
        # A dynamic quorum's controllers are the ones the log names (KIP-853).
        return ControllerConnections(peers, f"kraftwerk-broker-{self.config.node_id}{client_suffix}", security,
                                     self._rng, lookup=self.raft_driver.peer_address)

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serves until the lifecycle ends (controlled shutdown) or is cancelled.
        Raises BrokerFatalError after a KIP-778 stop."""
        if self.replayer is None:
            self.open()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._controller_peers.start(nursery)
                await self._forward_peers.start(nursery)
                await nursery.start(self.raft_driver.run)
                await nursery.start(self.replayer.run)
                # Before the catch-up wait: a broker that is slow to catch up is exactly
                # the one an operator wants to scrape.
                await startup.start_metrics_endpoint(nursery, self)
                # Clients are served once the image is current (bounded): before that the
                # broker could only tell them stale features and ungated API versions.
                await self.wait_metadata_known()
                await startup.start_node_listeners(nursery, self, Dispatcher(self, self.served_apis),
                                           registry=self.connections)
                log.info(Event.BROKER_STARTED, node_id=self.config.node_id, host=self.config.listener.host,
                         port=self.port, cluster_id=self.cluster_id, release=self.config.release or "kraftwerk",
                         supported_metadata_version=str(self.supported_node_features[METADATA_VERSION]))
                task_status.started(self.port)
                await self.lifecycle.run()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self._controller_peers.detach()
            self._forward_peers.detach()
            self.metadata_log.close()

    async def shutdown(self, timeout_s: float) -> None:
        """Controlled shutdown: returns when the controller agreed or `timeout_s` passed."""
        self.lifecycle.request_shutdown()
        with trio.move_on_after(timeout_s):
            await self.lifecycle.wait_state(BrokerState.SHUTTING_DOWN)

    def controller_peer(self, node_id: int | None) -> PeerConnection | None:
        """The connection for broker-to-controller requests to controller `node_id`."""
        if node_id is None:
            return None
        return self._controller_peers.connection(node_id)

    async def wait_metadata_known(self) -> None:
        """Until the image holds a metadata.version and has replayed what the leader had
        committed when we first heard from it (bounded: registering late is better than
        never)."""
        driver = self.raft_driver
        with trio.move_on_after(METADATA_WAIT_S):
            # Bounded by the scope; every round waits for news from the leader.
            while driver.leader_id is None or driver.high_watermark == 0:
                await driver.wait_changed()
            await self.replayer.wait_replayed(driver.high_watermark)

    # -- the image's consequences -----------------------------------------------------
    def last_applied_offset(self) -> int:
        return self.replayer.replayed_end_offset - 1

    def unsupported_reasons(self) -> list[str]:
        return unsupported_finalized_levels(self.state.all_finalized_levels(), self.supported_node_features)

    def _on_commit(self, records, base_offset: int) -> None:
        # Runs in the replay task right after the records were replayed.
        self.metrics.metadata_offset.set(self.state.last_applied_offset)
        if any(r.name == "BrokerRegistrationChangeRecord" and r.data["broker_id"] != self.config.node_id
               and r.data["in_controlled_shutdown"] == SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN for r in records):
            # Another broker is let go once every active broker reports having replayed
            # its leadership moves: report it now rather than at the next interval.
            self.lifecycle.heartbeat_soon()
        level = self.state.metadata_version
        previous, self._metadata_version = self._metadata_version, level
        if level is None or previous is None or level == previous:
            return
        self.metadata_version_changes += 1
        self.metrics.finalized_metadata_version.set(level)
        log.info(Event.BROKER_METADATA_VERSION_CHANGED, broker_id=self.config.node_id,
                 old=_mv_text(previous), new=_mv_text(level),
                 offset=self.state.last_applied_offset)
        reasons = self.unsupported_reasons()
        if reasons and (self.was_member or self.lifecycle.broker_epoch >= 0):
            self.lifecycle.fail("; ".join(reasons))
            return
        if self._nursery is not None:
            self._nursery.start_soon(self._renegotiate, level, self.state.last_applied_offset)
        closed = self.close_stale_connections()
        if closed is not None:
            log.info(Event.BROKER_CLIENT_CONNECTIONS_CLOSED, broker_id=self.config.node_id, connections=closed,
                     metadata_version=_mv_text(level))

    async def _renegotiate(self, level: int, replayed_offset: int) -> None:
        """KIP-778: learn the controllers' new API versions without reconnecting.

        `replayed_offset` is the last record of this broker's image when it saw the change.
        Each controller replays the committed log in a task of its own, so it may answer
        ApiVersions before it has replayed the change this broker already has — with the old
        gated ranges. An answer counts only once its FinalizedFeaturesEpoch (the answering
        controller's last replayed offset) reaches `replayed_offset`; until then the
        controller is asked again (bounded in count and time)."""
        driver = self.raft_driver
        with trio.move_on_after(RENEGOTIATE_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for voter in self.voters:
                    peers = [peer for peer in (self.controller_peer(voter.node_id),
                                               self._forward_peers.existing(voter.node_id)) if peer is not None]
                    if peers:
                        nursery.start_soon(self._renegotiate_voter, peers, level, replayed_offset)
        if self.state.metadata_version != level:
            return  # a newer change is on its way; it renegotiates again
        # The leader now, not when the change was seen: every voter was asked, and a new
        # leader elected meanwhile is the one the lifecycle talks to.
        leader = driver.leader_id
        peer = self.controller_peer(leader)
        # Current also when the answer came from a reconnect rather than from us.
        ok = peer is not None and bool(peer.api_versions) and peer.finalized_features_epoch >= replayed_offset
        if ok:
            self.controller_api_versions = dict(peer.api_versions)
        self.renegotiations += 1
        self.renegotiated_metadata_version = level
        chosen = {GATES[key].api_name: self.lifecycle.negotiated_version(peer, key) for key in (62, 63)
                  if peer is not None and peer.api_versions}
        own = self.state.broker(self.config.node_id)
        if own is not None and not own.log_dirs and (chosen.get("BrokerRegistration") or 0) >= 2:
            # The registration can carry this broker's log directory now (3.7-IV2+).
            self.lifecycle.request_reregistration()
        log.info(Event.BROKER_RENEGOTIATED, broker_id=self.config.node_id,
                 metadata_version=_mv_text(level), controller_id=leader,
                 with_leader=ok, versions=chosen)
        self._renegotiated.set()
        self._renegotiated = trio.Event()

    async def _renegotiate_voter(self, peers: list[PeerConnection], level: int, replayed_offset: int) -> None:
        """One controller, asked once: its other connection (the forwarding one) takes the
        answer the first got once it covers `replayed_offset`, unless it cannot (another
        address, or down); otherwise it is asked itself."""
        first, others = peers[0], peers[1:]
        await self._renegotiate_peer(first, level, replayed_offset)
        current = first.finalized_features_epoch >= replayed_offset
        for peer in others:
            if not (current and peer.adopt_negotiation(first)):
                await self._renegotiate_peer(peer, level, replayed_offset)

    async def _renegotiate_peer(self, peer: PeerConnection, level: int, replayed_offset: int) -> None:
        """Asks `peer` for its ApiVersions until the answer reflects the image up to
        `replayed_offset`. A peer that is not connected learns the versions when it
        reconnects (that negotiation is a fresh answer)."""
        for _ in range(RENEGOTIATE_ATTEMPTS):
            if not await peer.renegotiate(RENEGOTIATE_TIMEOUT_S):
                return
            if peer.finalized_features_epoch >= replayed_offset:
                return
            if self.state.metadata_version != level:
                return  # superseded: the next change renegotiates again
            # The controller has not replayed the change yet: it will within a replay
            # round; there is no event to wait on in another process.
            await trio.sleep(RENEGOTIATE_RETRY_S)

    async def wait_renegotiated(self, level: int) -> None:
        while self.renegotiated_metadata_version != level:
            await self._renegotiated.wait()

    def software_range(self, api_key: int) -> tuple[int, int]:
        """The versions of a broker-to-controller API this software speaks."""
        return API_MESSAGES[api_key][0].version_range

    # -- metrics ------------------------------------------------------------------------------
    def _init_broker_metrics(self) -> None:
        """A broker's gauges: the shared ones minus what only an active controller
        reports (KIP-866: MigrationState and ZooKeeperWriteBehindLag come from the active
        controller alone), plus its own lifecycle state."""
        registry = self.metrics.registry
        for controller_only in (self.metrics.migration_state, self.metrics.zookeeper_write_behind_lag,
                                self.metrics.active_controller):
            registry.unregister(controller_only)
        self.broker_state_gauge = Gauge(
            "kafka_server_broker_state", "Kafka's BrokerState (1 STARTING, 2 RECOVERY: registered and fenced, "
            "3 RUNNING: unfenced, 6 PENDING_CONTROLLED_SHUTDOWN, 7 SHUTTING_DOWN)", registry=registry)
        self.broker_registered_gauge = Gauge(
            "kraftwerk_broker_registered", "1 while this broker holds a registration (a broker epoch)",
            registry=registry)
        self.broker_fenced_gauge = Gauge(
            "kraftwerk_broker_fenced", "1 unless the active controller's latest heartbeat answer unfenced this "
            "broker", registry=registry)
        self.broker_epoch_gauge = Gauge("kraftwerk_broker_epoch", "This broker's epoch (-1: unregistered)",
                                        registry=registry)

    def refresh_metrics(self) -> None:
        """Sets the gauges derived from the image and the lifecycle (called on every scrape)."""
        metrics = self.metrics
        metrics.metadata_type.set(METADATA_TYPE_KRAFT)
        lifecycle = self.lifecycle
        self.broker_state_gauge.set(BROKER_STATE_NUMBERS.get(lifecycle.state, 0))
        self.broker_registered_gauge.set(1 if lifecycle.broker_epoch >= 0 else 0)
        self.broker_epoch_gauge.set(lifecycle.broker_epoch)
        self._refresh_raft_gauges()
        # What the broker itself was told (its own image may replay the UnfenceBrokerRecord
        # a little later than the heartbeat answer arrives).
        unfenced = lifecycle.state in (BrokerState.RUNNING, BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        self.broker_fenced_gauge.set(0 if unfenced and lifecycle.broker_epoch >= 0 else 1)
        state = self.state
        if state is None:
            return
        metrics.metadata_offset.set(state.last_applied_offset)
        if state.metadata_version is not None:
            metrics.finalized_metadata_version.set(state.metadata_version)
        self._refresh_image_gauges(state)

    # -- views for handlers -------------------------------------------------------------
    def own_endpoint(self, listener_name: str | None = None) -> Endpoint:
        found = self.own_listener_endpoint(listener_name)
        if found is not None:
            return Endpoint(self.config.node_id, found[0], found[1], self.config.broker_rack)
        listener = self.config.advertised_listener or self.config.listener
        return Endpoint(self.config.node_id, listener.host, listener.port or self.port, self.config.broker_rack)

    def client_endpoints(self, listener_name: str | None = None) -> list[Endpoint]:
        """This broker and every registered, unfenced broker, on the listener the client
        came in on."""
        endpoints = {e.node_id: e for e in self.registered_broker_endpoints(False, listener_name)}
        endpoints[self.config.node_id] = self.own_endpoint(listener_name)
        return [endpoints[node_id] for node_id in sorted(endpoints)]

    def active_controller_id(self) -> int:
        # KIP-590: clients cannot reach the controllers through a broker, so a broker
        # names itself and forwards the controller APIs.
        return self.config.node_id

    # -- forwarding and reading (server/nodes/forwarding.py) --------------------------
    async def forward_to_controller(self, api_key: int, version: int, request, ctx=None) -> dict | None:
        """The active controller's answer to a client's request (None if none answered
        in time); answered once this broker's image holds what it had replayed."""
        return await self.forwarder.forward(api_key, version, request, ctx)

    def read_barrier_needed(self) -> bool:
        return True  # a broker never leads: every read waits for the leader's image

    async def read_barrier(self) -> None:
        await self.forwarder.read_barrier()
