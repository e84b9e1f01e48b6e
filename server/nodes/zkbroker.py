"""The ZooKeeper-mode broker agent: a broker as Kafka ran before KRaft, without topic data.

Owns: `ZkBrokerNode` — its ZooKeeper session, its registration, its watches and
its client listener — and `ZkBrokerFatalError` (the KIP-584 stop).

What it does, in Kafka's order:
1. connects to ZooKeeper and reads `/cluster/id` (generating one if the cluster has
   none yet, as Kafka's first broker does; it writes nothing else but its own
   registration);
2. refuses to start when `/features` holds a finalized level outside the ranges its
   software supports (KIP-584 broker protection; ranges from server/releases.py
   for `--release`, else kraftwerk's own);
3. opens its listener, then registers the ephemeral `/brokers/ids/<id>` (broker
   registration JSON v5 with endpoints and its supported `features`); the
   registration's czxid is its broker epoch;
4. watches `/features` (a level it cannot run: log why, close the session so the
   registration goes, exit non-zero), `/controller` (logged and kept) and its
   session (after an expiry it registers again);
5. serves ApiVersions (ZkMigrationReady = kafka.metadata.migration.enable),
   Metadata and DescribeCluster from what UpdateMetadata told it, UpdateMetadata
   and MigrationCheck;
6. with `kraftwerk.metrics.port` set, serves Prometheus metrics: KIP-866's
   MetadataType (1 ZooKeeper; 2 Dual while a KRaft controller sends it
   UpdateMetadata during a migration), the finalized features of `/features`,
   its registration and what it knows of the controller.
Stopping (cancel, `request_stop()`, SIGTERM in the CLI) closes the ZooKeeper session
first, so the ephemeral registration disappears at once.

Rules kept here: the metadata cache changes only through `apply_update_metadata`
(server/zkbroker/cache.py, sans-I/O); every ZooKeeper call goes through
`ZkSession` (never blocks the trio thread); every wait is bounded.
"""

from __future__ import annotations

import time
import uuid
from enum import IntEnum, StrEnum

import trio
from prometheus_client import Gauge

from server.client import ClientError, KafkaClient
from server.config import ServerConfig
from server.controller.features import unsupported_finalized_levels
from server.dispatch import Dispatcher
from server.net.listener import ConnectionRegistry, serve_listener
from server.observability import Metrics, get_logger
from server.releases import supported_features as release_supported_features
from server.security.client_config import ClientSecurity
from server.api.context import ZkBrokerServices
from server.nodes.serving import ApiVersionsCache, Endpoint
from server.nodes.startup import start_metrics_endpoint
from server.storage.meta_properties import random_uuid_string
from server.zk import paths
from server.zk.client import (
    ZkConnectionError,
    ZkConnectionState,
    ZkNodeExists,
    ZkSession,
    ZkWatch,
    connect,
)
from server.zk.paths import (
    BrokerRegistrationZnode,
    ClusterIdZnode,
    ControllerZnode,
    FeaturesZnode,
    SupportedFeatureRange,
    ZnodeDecodeError,
)
from server.api.catalog import NodeRole, served_table
from server.zkbroker.cache import UpdateOutcome, ZkMetadataCache, apply_update_metadata

log = get_logger("zkbroker")

ZK_CONNECT_TIMEOUT_S = 30.0
# A ZooKeeper that stays away longer than this while we register is a failed start.
REGISTER_TIMEOUT_S = 30.0


class MetadataType(IntEnum):
    """KIP-866's `kafka.server:type=KafkaServer,name=MetadataType`."""

    ZOOKEEPER = 1
    DUAL = 2
    KRAFT = 3


# The handshake with the KRaft quorum (see `_register_with_kraft`).
KRAFT_REGISTRATION_TIMEOUT_S = 5.0
KRAFT_REGISTRATION_BACKOFF_S = 0.5
KRAFT_REGISTRATION_MAX_BACKOFF_S = 5.0


class ZkBrokerEvent(StrEnum):
    STARTED = "zkbroker.started"
    REGISTERED = "zkbroker.registered"
    SESSION_STATE = "zkbroker.zookeeper_state"
    CLUSTER_ID_CREATED = "zkbroker.cluster_id_created"
    FEATURES_CHANGED = "zkbroker.features_changed"
    UNSUPPORTED_FINALIZED_LEVEL = "zkbroker.unsupported_finalized_level"
    REGISTRATION_REFUSED = "zkbroker.registration_refused"
    CONTROLLER_CHANGED = "zkbroker.controller_changed"
    BAD_ZNODE = "zkbroker.bad_znode"
    STOPPED = "zkbroker.stopped"
    KRAFT_REGISTERED = "zkbroker.kraft_registered"
    KRAFT_REGISTRATION_RETRY = "zkbroker.kraft_registration_retry"


class ZkBrokerFatalError(Exception):
    """The broker must not run (KIP-584: a finalized level it cannot support; or its
    id is registered by another live broker). The message says why."""


class ZkBrokerNode(ZkBrokerServices):
    """One ZooKeeper-mode broker. `run()` serves until stopped or fatal."""

    # ZooKeeper-mode brokers authorize nothing (the migration source, not an API surface).
    authorizer = None

    is_broker = True

    def __init__(self, config: ServerConfig, zookeeper_connect: str | None = None) -> None:
        hosts = zookeeper_connect or config.zookeeper_connect
        if not hosts:
            raise ValueError("a ZooKeeper-mode broker needs zookeeper.connect (or --zookeeper HOST:PORT)")
        self.config = config
        self.zookeeper_connect = hosts
        self.broker_id = config.node_id
        self.migration_enabled = config.migration_enabled
        self.metrics = Metrics()
        self._init_zk_broker_metrics()
        self.metrics_port: int | None = None
        self.served_apis = served_table(NodeRole.ZK_BROKER)
        self.supported_node_features = release_supported_features(
            config.release, config.unstable_feature_versions_enable)
        self._supported = {name: (r.min_level, r.max_level) for name, r in self.supported_node_features.items()}
        self._advertised = {api.api_key: (api.min_version, api.max_version) for api in self.served_apis.values()}
        self._api_versions_cache = ApiVersionsCache(self.served_apis, self._migration_ready_field)
        self.metadata_cache = ZkMetadataCache()
        self.connections = ConnectionRegistry()
        self.cluster_id = ""
        self.broker_epoch = -1
        self.port = config.listener.port
        self.features: FeaturesZnode | None = None
        self.features_version = -1
        self.zk_controller: ControllerZnode | None = None
        self.registrations = 0
        # The KRaft broker epoch the migrating quorum answered our registration with.
        self.kraft_broker_epoch: int | None = None
        self.fatal_reason: str | None = None
        self.zk: ZkSession | None = None
        self._stop_requested = False
        self._cancel_scope: trio.CancelScope | None = None
        # Set (and replaced) whenever /features or /controller news was taken in, or
        # the broker (re-)registered.
        self._changed = trio.Event()

    # ------------------------------------------------------------------ views

    @property
    def metadata_type(self) -> MetadataType:
        """KIP-866's MetadataType: Dual while the controller of the moment (the sender of
        the latest accepted UpdateMetadata) is a KRaft controller, i.e. during a
        migration; ZooKeeper otherwise (before it, and again after a rollback hands the
        controller role back to a ZooKeeper broker)."""
        return MetadataType.DUAL if self.metadata_cache.is_kraft_controller else MetadataType.ZOOKEEPER

    @property
    def node_id(self) -> int:
        return self.broker_id

    def metadata_type_value(self) -> int:
        return int(self.metadata_type)

    def supported_features(self) -> dict[str, tuple[int, int]]:
        return self._supported

    def finalized_levels(self) -> dict[str, int]:
        return self.features.finalized_levels() if self.features is not None else {}

    def finalized_features_epoch(self) -> int:
        # Kafka's ZooKeeper-mode brokers use the /features znode's version as the epoch.
        return self.features_version

    def advertised_ranges(self) -> dict[int, tuple[int, int]]:
        return self._advertised

    def api_versions_body(self, version: int) -> bytes:
        return self._api_versions_cache.body(version, self.features_version, self)

    def _migration_ready_field(self, version: int) -> dict:
        """KIP-866: a ZooKeeper-mode broker says whether it is ready to migrate (v3+)."""
        return {"zk_migration_ready": bool(self.migration_enabled)} if version >= 3 else {}

    def own_endpoint(self) -> Endpoint:
        advertised = self.config.advertised_listener
        if advertised is not None:
            return Endpoint(self.broker_id, advertised.host, advertised.port or self.port, self.config.broker_rack)
        return Endpoint(self.broker_id, self.config.listener.host, self.port, self.config.broker_rack)

    def client_endpoints(self, listener_name: str | None = None) -> list[Endpoint]:
        """This broker, then the other live brokers of the latest UpdateMetadata, each
        with its endpoint on this broker's listener."""
        endpoints = [self.own_endpoint()]
        listener = self.config.listener.name
        for broker_id, broker in sorted(self.metadata_cache.live_brokers.items()):
            if broker_id == self.broker_id:
                continue
            endpoint = broker.endpoint_for(listener)
            if endpoint is not None:
                endpoints.append(Endpoint(broker_id, endpoint.host, endpoint.port, broker.rack))
        return endpoints

    def registered_broker_endpoints(self, include_fenced: bool, listener_name: str | None = None) -> list[Endpoint]:
        return self.client_endpoints()

    def registered_controller_endpoints(self, listener_name: str | None) -> list[Endpoint]:
        return []  # a ZooKeeper-mode broker knows no controller registrations

    def active_controller_id(self) -> int:
        cache = self.metadata_cache
        if cache.knows_controller and not cache.is_kraft_controller:
            return cache.controller_id
        # KIP-866: with a KRaft controller (or none known yet) clients get a live broker.
        return self.broker_id

    def registration_znode(self, timestamp_ms: int) -> BrokerRegistrationZnode:
        own = self.own_endpoint()
        listener = self.config.advertised_listener or self.config.listener
        protocol = listener.security_protocol
        endpoint = paths.Endpoint(listener.name, own.host, own.port)
        plaintext = protocol == "PLAINTEXT"
        return BrokerRegistrationZnode(
            host=own.host if plaintext else None,
            port=own.port if plaintext else -1,
            endpoints=(endpoint,),
            listener_security_protocol_map={listener.name: protocol},
            rack=self.config.broker_rack,
            jmx_port=-1,
            timestamp_ms=timestamp_ms,
            features={
                name: SupportedFeatureRange(rng.min_level, rng.max_level)
                for name, rng in sorted(self.supported_node_features.items())
            },
        )

    # ------------------------------------------------------------------ metrics

    def _init_zk_broker_metrics(self) -> None:
        """The shared gauges a ZooKeeper-mode broker can fill (no Raft, no metadata log,
        nothing only an active controller reports), plus its own."""
        metrics = self.metrics
        registry = metrics.registry
        for not_ours in (metrics.migration_state, metrics.zookeeper_write_behind_lag, metrics.active_controller,
                         metrics.raft_epoch, metrics.raft_leader, metrics.raft_high_watermark,
                         metrics.raft_log_end_offset, metrics.metadata_offset, metrics.registered_brokers):
            registry.unregister(not_ours)
        self.registered_gauge = Gauge(
            "kraftwerk_zkbroker_registered", "1 while /brokers/ids/<id> is this broker's (a broker epoch)",
            registry=registry)
        self.broker_epoch_gauge = Gauge(
            "kraftwerk_broker_epoch", "This broker's epoch: its registration's czxid (-1: unregistered)",
            registry=registry)
        self.controller_id_gauge = Gauge(
            "kraftwerk_zkbroker_controller_id", "The controller of the latest accepted UpdateMetadata (-1: none)",
            registry=registry)
        self.kraft_controller_gauge = Gauge(
            "kraftwerk_zkbroker_kraft_controller", "1 when that controller is a KRaft controller (KIP-866)",
            registry=registry)
        self.live_brokers_gauge = Gauge(
            "kraftwerk_zkbroker_live_brokers", "Live brokers in the latest accepted UpdateMetadata",
            registry=registry)
        self.update_metadata_gauge = Gauge(
            "kraftwerk_zkbroker_update_metadata_applied", "UpdateMetadata requests applied since start",
            registry=registry)

    def refresh_metrics(self) -> None:
        """Sets the gauges derived from the broker's state (called on every scrape)."""
        metrics = self.metrics
        cache = self.metadata_cache
        metrics.metadata_type.set(self.metadata_type_value())
        metrics.features.clear()
        levels = self.finalized_levels()
        for feature, level in sorted(levels.items()):
            metrics.features.labels(feature=feature, level=str(level)).set(1)
        if "metadata.version" in levels:
            metrics.finalized_metadata_version.set(levels["metadata.version"])
        self.registered_gauge.set(1 if self.broker_epoch >= 0 else 0)
        self.broker_epoch_gauge.set(self.broker_epoch)
        self.controller_id_gauge.set(cache.controller_id)
        self.kraft_controller_gauge.set(1 if cache.is_kraft_controller else 0)
        self.live_brokers_gauge.set(len(cache.live_brokers))
        self.update_metadata_gauge.set(cache.updates_applied)

    # ------------------------------------------------------------------ UpdateMetadata

    def apply_update_metadata(self, request) -> UpdateOutcome:
        return apply_update_metadata(self.metadata_cache, request, self.broker_epoch)

    # ------------------------------------------------------------------ features

    def _unsupported_reasons(self, features: FeaturesZnode | None) -> list[str]:
        levels = features.finalized_levels() if features is not None else {}
        return unsupported_finalized_levels(levels, self.supported_node_features)

    def _take_features(self, data: bytes | None, version: int | None) -> list[str]:
        """Adopts /features' content; returns why this broker cannot run it (empty: it can)."""
        if data is None:
            features, version = None, -1
        else:
            try:
                features = FeaturesZnode.decode(data)
            except ZnodeDecodeError as exc:
                # Without readable finalized levels the broker cannot know it is safe.
                return [f"{paths.FEATURES_PATH} is unreadable: {exc}"]
        reasons = self._unsupported_reasons(features)
        if not reasons:
            self.features = features
            self.features_version = version if version is not None else -1
        return reasons

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        """Returns after the next change was taken in: /features, /controller, or a
        (re-)registration (for tests and tools; callers bound it with their own timeout)."""
        await self._changed.wait()

    # ------------------------------------------------------------------ running

    def request_stop(self) -> None:
        """Stops `run()` (closing the ZooKeeper session first)."""
        self._stop_requested = True
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Starts, reports the bound port through `task_status` once registered, and
        serves until stopped (returns) or fatal (raises ZkBrokerFatalError)."""
        zk = await connect(
            self.zookeeper_connect,
            timeout_s=ZK_CONNECT_TIMEOUT_S,
            session_timeout_s=self.config.zookeeper_session_timeout_ms / 1000,
        )
        self.zk = zk
        states = zk.connection_events()
        try:
            try:
                with trio.fail_after(REGISTER_TIMEOUT_S):
                    self.cluster_id = await self._read_cluster_id(zk)
                    current = await zk.get(paths.FEATURES_PATH)
                    reasons = self._take_features(*(current if current is not None else (None, None)))
            except (trio.TooSlowError, ZkConnectionError) as exc:
                self.fatal_reason = f"broker {self.broker_id} cannot start: ZooKeeper did not answer ({exc!r})"
                raise ZkBrokerFatalError(self.fatal_reason) from None
            if reasons:
                self._fatal(reasons, starting=True)
                raise ZkBrokerFatalError(self.fatal_reason)
            async with trio.open_nursery() as nursery:
                self._cancel_scope = nursery.cancel_scope
                if self._stop_requested:
                    nursery.cancel_scope.cancel()
                dispatcher = Dispatcher(self, self.served_apis)
                listeners = await nursery.start(
                    lambda task_status: serve_listener(dispatcher, self.config.listener.host,
                                                       self.config.listener.port, registry=self.connections,
                                                       task_status=task_status))
                self.port = listeners[0].socket.getsockname()[1]
                await start_metrics_endpoint(nursery, self)
                try:
                    with trio.fail_after(REGISTER_TIMEOUT_S):
                        await self._register(zk)
                except (ZkBrokerFatalError, ZkConnectionError, trio.TooSlowError) as exc:
                    # Raised plain below, after the session is closed, like every fatal stop.
                    self.fatal_reason = str(exc) if isinstance(exc, ZkBrokerFatalError) else (
                        f"broker {self.broker_id} could not register: ZooKeeper did not answer ({exc!r})")
                    log.error(ZkBrokerEvent.REGISTRATION_REFUSED, broker_id=self.broker_id, reason=str(exc))
                    nursery.cancel_scope.cancel()
                else:
                    await self._follow(zk, states, nursery)
                    task_status.started(self.port)
        finally:
            self._cancel_scope = None
            # Shielded inside aclose: the registration must go even when we are cancelled.
            await zk.aclose()
            log.info(ZkBrokerEvent.STOPPED, broker_id=self.broker_id, fatal=self.fatal_reason)
        if self.fatal_reason is not None:
            raise ZkBrokerFatalError(self.fatal_reason)

    async def _follow(self, zk: ZkSession, states: ZkWatch, nursery: trio.Nursery) -> None:
        """Registered: follow /features, /controller and the session from now on."""
        features_watch = await zk.watch_data(paths.FEATURES_PATH)
        controller_watch = await zk.watch_data(paths.CONTROLLER_PATH)
        nursery.start_soon(self._follow_features, features_watch, nursery.cancel_scope)
        nursery.start_soon(self._follow_controller, controller_watch)
        nursery.start_soon(self._follow_session, zk, states, nursery.cancel_scope)
        if self.migration_enabled and self.config.quorum_voters:
            nursery.start_soon(self._register_with_kraft)
        log.info(ZkBrokerEvent.STARTED, broker_id=self.broker_id, host=self.own_endpoint().host,
                 port=self.port, cluster_id=self.cluster_id, zookeeper=self.zookeeper_connect,
                 migration_enabled=self.migration_enabled, release=self.config.release or "kraftwerk",
                 broker_epoch=self.broker_epoch)

    async def _register_with_kraft(self) -> None:
        """Kafka's later signal (3.4+): a ZooKeeper broker ready to migrate registers with
        the KRaft quorum (`controller.quorum.voters`) with IsMigratingZkBroker. The
        controller registers ZooKeeper brokers from ZooKeeper itself, so this is a
        handshake: the broker learns its KRaft broker epoch. Retried with backoff until the
        active controller knows it (after the copy), then done."""
        incarnation = uuid.uuid4()
        endpoint = self.own_endpoint()
        request = {
            "broker_id": self.broker_id, "cluster_id": self.cluster_id, "incarnation_id": incarnation,
            "listeners": [{"name": self.config.listener.name, "host": endpoint.host, "port": endpoint.port,
                           "security_protocol": 0}],
            "features": [{"name": name, "min_supported_version": lo, "max_supported_version": hi}
                         for name, (lo, hi) in sorted(self._supported.items())],
            "rack": self.config.broker_rack, "is_migrating_zk_broker": True,
        }
        backoff_s = KRAFT_REGISTRATION_BACKOFF_S
        while True:
            for voter in self.config.quorum_voters:
                try:
                    with trio.fail_after(KRAFT_REGISTRATION_TIMEOUT_S):
                        async with await KafkaClient.connect(voter.host, voter.port,
                                                             client_id=f"zkbroker-{self.broker_id}",
                                                             security=ClientSecurity.for_node(self.config)) as client:
                            await client.negotiate()
                            response = await client.call(62, request, min_version=1)
                except (ClientError, OSError, trio.TooSlowError) as exc:
                    log.debug(ZkBrokerEvent.KRAFT_REGISTRATION_RETRY, controller=voter.node_id, error=str(exc))
                    continue
                if response.error_code == 0:
                    self.kraft_broker_epoch = response.broker_epoch
                    log.info(ZkBrokerEvent.KRAFT_REGISTERED, broker_id=self.broker_id, controller=voter.node_id,
                             broker_epoch=response.broker_epoch)
                    return
                log.debug(ZkBrokerEvent.KRAFT_REGISTRATION_RETRY, controller=voter.node_id,
                          error_code=response.error_code)
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, KRAFT_REGISTRATION_MAX_BACKOFF_S)

    def _fatal(self, reasons: list[str], *, starting: bool) -> None:
        self.fatal_reason = (
            f"broker {self.broker_id} {'refuses to start' if starting else 'stops'}: " + "; ".join(reasons)
        )
        log.error(ZkBrokerEvent.UNSUPPORTED_FINALIZED_LEVEL, broker_id=self.broker_id, reasons=reasons,
                  starting=starting, supported={k: list(v) for k, v in sorted(self._supported.items())})

    async def _read_cluster_id(self, zk: ZkSession) -> str:
        current = await zk.get(paths.CLUSTER_ID_PATH)
        if current is None:
            # Kafka's first broker generates the cluster id; a lost race reads the winner's.
            generated = random_uuid_string()
            try:
                await zk.create(paths.CLUSTER_ID_PATH, ClusterIdZnode(generated).encode())
                log.info(ZkBrokerEvent.CLUSTER_ID_CREATED, broker_id=self.broker_id, cluster_id=generated)
                return generated
            except ZkNodeExists:
                current = await zk.get(paths.CLUSTER_ID_PATH)
                if current is None:
                    raise ZkBrokerFatalError(f"{paths.CLUSTER_ID_PATH} appeared and vanished") from None
        try:
            return ClusterIdZnode.decode(current[0]).cluster_id
        except ZnodeDecodeError as exc:
            raise ZkBrokerFatalError(f"{paths.CLUSTER_ID_PATH} is unreadable: {exc}") from None

    async def _register(self, zk: ZkSession) -> None:
        path = paths.broker_path(self.broker_id)
        data = self.registration_znode(int(time.time() * 1000)).encode()
        # Bounded: one retry covers a registration of our own expired session that
        # ZooKeeper removes between our create and our stat.
        for _ in range(3):
            try:
                await zk.create(path, data, ephemeral=True, makepath=True)
            except ZkNodeExists:
                stat = await zk.stat(path)
                if stat is None:
                    continue
                if stat.ephemeral_owner != zk.session_id:
                    raise ZkBrokerFatalError(
                        f"broker id {self.broker_id} is already registered in ZooKeeper by another live "
                        f"broker (session 0x{stat.ephemeral_owner:x})") from None
                await zk.set(path, data)  # ours already (a retried create): refresh it
            stat = await zk.stat(path)
            if stat is None:
                continue
            self.broker_epoch = stat.czxid
            self.registrations += 1
            log.info(ZkBrokerEvent.REGISTERED, broker_id=self.broker_id, path=path, broker_epoch=stat.czxid,
                     session_id=f"0x{zk.session_id or 0:x}", registrations=self.registrations)
            self._notify_changed()
            return
        raise ZkBrokerFatalError(f"could not register {path}")

    async def _follow_features(self, watch: ZkWatch, scope: trio.CancelScope) -> None:
        async with watch:
            async for change in watch:
                reasons = self._take_features(change.data, change.version)
                if reasons:
                    self._fatal(reasons, starting=False)
                    scope.cancel()
                    return
                log.info(ZkBrokerEvent.FEATURES_CHANGED, broker_id=self.broker_id, epoch=self.features_version,
                         finalized=self.finalized_levels())
                self._notify_changed()

    async def _follow_controller(self, watch: ZkWatch) -> None:
        async with watch:
            async for change in watch:
                controller = None
                if change.data is not None:
                    try:
                        controller = ControllerZnode.decode(change.data)
                    except ZnodeDecodeError as exc:
                        log.warning(ZkBrokerEvent.BAD_ZNODE, broker_id=self.broker_id, path=paths.CONTROLLER_PATH,
                                    error=str(exc))
                self.zk_controller = controller
                log.info(ZkBrokerEvent.CONTROLLER_CHANGED, broker_id=self.broker_id,
                         controller_id=controller.broker_id if controller else None,
                         kraft_controller_epoch=controller.kraft_controller_epoch if controller else None)
                self._notify_changed()

    async def _follow_session(self, zk: ZkSession, states: ZkWatch, scope: trio.CancelScope) -> None:
        expired = False
        async with states:
            async for state in states:
                log.info(ZkBrokerEvent.SESSION_STATE, broker_id=self.broker_id, state=state.value)
                if state is ZkConnectionState.LOST:
                    # The session expired: the registration is gone with it.
                    expired = True
                    self.broker_epoch = -1
                elif state is ZkConnectionState.CONNECTED and expired:
                    try:
                        with trio.fail_after(REGISTER_TIMEOUT_S):
                            await self._register(zk)
                        expired = False
                    except (ZkConnectionError, trio.TooSlowError):
                        continue  # the next CONNECTED tries again
                    except ZkBrokerFatalError as exc:
                        self.fatal_reason = str(exc)
                        scope.cancel()
                        return
