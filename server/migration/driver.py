"""The migration driver: the trio shell that runs a ZooKeeper -> KRaft migration
(KIP-866) on the active controller.

Owns: the ZooKeeper session of a controller started with
`kafka.metadata.migration.enable=true`, claiming ZooKeeper's controller leadership,
the precondition checks (MigrationCheck to every live ZooKeeper broker), the copy (one
metadata transaction), keeping ZooKeeper brokers informed (UpdateMetadata), watching
`/brokers/ids`, and the write-behind of every committed change to ZooKeeper.

The decisions are pure and tested apart: states and preconditions in `state.py`, the
copy's records in `copy.py`, what to write to ZooKeeper in `zk_sync.py`. This module
only sequences them and does the I/O.

Rules kept here:
- Work happens only while this node is the active controller; leadership ending
  cancels whatever was in flight (the next leader starts over from the log and from
  ZooKeeper, which is always safe: see below).
- Fencing: every write to ZooKeeper is a multi that includes a versioned update of
  `/migration`. A new leader's claim bumps that version first, so a deposed leader's
  next multi fails whole (`ZkVersionConflict`) and it stops writing. A claim is refused
  when `/migration` names a newer KRaft epoch than ours.
- The copy is one transaction; an open transaction found at activation is aborted
  first. Commands of other writers wait while it is open (the controller loop holds
  them), which is the KIP's controller downtime proportional to the metadata size.
- Write-behind: the driver keeps a mirror of what ZooKeeper holds for everything it
  writes (read whole when it takes over, then updated by its own successful multis:
  it is the only writer, and the fence proves it). Each committed batch becomes the
  difference between the image and the mirror, so nothing is lost and nothing is
  applied twice, even when a batch is retried or a new leader redoes it. Any ZooKeeper
  error whose outcome is unknown drops the mirror; the next round re-reads ZooKeeper.
- `/migration.lastOffset` is the last committed offset whose effects ZooKeeper holds.
  A new leader resumes after it when its log still holds the records after it;
  otherwise (snapshot, or a copy that never recorded its end) it reconciles
  everything once.
- The write-behind lag (committed offset - lastOffset) is a metric; above
  `migration.max.write.behind.lag.records`, or while ZooKeeper is unreachable, the
  controller refuses new operator writes (`writes_allowed()`), until it catches up.
"""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

import trio

from protocol.apis import migration_check, update_metadata
from protocol.errors import DecodeError, ErrorCode, error_name
from protocol.frames import decode_response, encode_request
from protocol.records import decode_metadata_record
from server.client import ClientError, KafkaClient
from server.collector import collector_paused
from server.controller.commands import ControllerResult
from server.controller.loop import NotControllerError
from server.controller.state import TopicImage
from server.migration import copy as mcopy
from server.migration.brokers import zk_broker_records
from server.migration.state import (
    BrokerCheck,
    MigrationState,
    PreconditionFailure,
    ZkMigrationState,
    check_preconditions,
    kip_state,
)
from server.migration.zk_sync import (
    TOPIC_RESOURCE,
    Scope,
    ZkWrite,
    desired_broker_configs,
    desired_client_quotas,
    desired_features,
    desired_topics,
    image_holds_scram,
    plan_writes,
    quota_entities_written,
    touched_scope,
)
from server.observability import Event, get_logger
from server.raft.driver import SnapshotLoaded
from server.zk import paths as zp
from server.zk.client import (
    Create,
    Delete,
    SetData,
    ZkConnectionError,
    ZkConnectionState,
    ZkError,
    ZkSession,
    ZkVersionConflict,
)
from server.zk.client import connect as zk_connect
from server.zk.seed import ZkWireError
from server.zk.seed import read_zookeeper as read_zookeeper_blocking

log = get_logger("migration")

# Copy commands in the controller loop at once (see `_copy`).
COPY_WINDOW_CHUNKS = 4


# Ops per ZooKeeper multi (ZooKeeper's default request limit is 1 MiB; our ops are small).
MAX_OPS_PER_MULTI = 500
PRECONDITION_RETRY_S = 2.0
ZK_RETRY_S = 1.0
MIGRATION_CHECK_TIMEOUT_S = 5.0
UPDATE_METADATA_TIMEOUT_S = 5.0
UPDATE_METADATA_VERSION = 8
MAX_RESPONSE_BYTES = 1 << 20
CLAIM_ATTEMPTS = 20
CONFIG_CHANGES_PATH = "/config/changes"
# Records after which ZooKeeper brokers get a new UpdateMetadata.
BROKER_VISIBLE_RECORDS = frozenset({
    "RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
    "BrokerRegistrationChangeRecord", "TopicRecord", "PartitionRecord", "PartitionChangeRecord",
    "RemoveTopicRecord"})


class Fenced(Exception):
    """Another KRaft controller owns ZooKeeper now: this one must not write."""


@dataclass
class ZkMirror:
    """What ZooKeeper holds for everything the driver writes (see the module's rules)."""

    topics: dict[str, zp.ZkTopicImage] = field(default_factory=dict)
    topic_configs: dict[str, zp.ConfigZnode] = field(default_factory=dict)
    broker_configs: dict[str, zp.ConfigZnode] = field(default_factory=dict)
    features: zp.FeaturesZnode | None = None
    quota_configs: dict[str, zp.ConfigZnode] = field(default_factory=dict)
    user_client_parents: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, image: zp.ZkClusterImage) -> "ZkMirror":
        return cls(dict(image.topics), dict(image.topic_configs), dict(image.broker_configs), image.features,
                   dict(image.quota_configs), set(image.user_client_parents))

    def apply_quotas(self, scope: Scope, quotas, keep_zk_scram: bool) -> None:
        """After a successful multi for `scope`: the quota znodes hold the desired configs."""
        names = set(quotas) | set(self.quota_configs) if scope.everything else scope.quota_entities
        written = quota_entities_written(names, quotas, self.quota_configs, keep_zk_scram)
        self.quota_configs.update(written)
        for entity_path in written:
            parts = entity_path.split("/")
            if len(parts) == 4:
                self.user_client_parents.add(parts[1])

    def apply(self, scope: Scope, topics, broker_configs, features) -> None:
        """After a successful multi for `scope`: ZooKeeper now holds the desired state."""
        names = set(topics) | set(self.topics) | set(self.topic_configs) if scope.everything else scope.topics
        for name in names:
            want = topics.get(name)
            if want is None:
                self.topics.pop(name, None)
                self.topic_configs.pop(name, None)
            else:
                self.topics[name] = zp.ZkTopicImage(name, want.assignment, dict(want.states))
                self.topic_configs[name] = zp.ConfigZnode(dict(want.config))
        broker_names = (set(broker_configs) | set(self.broker_configs) if scope.everything
                        else scope.broker_configs)
        for name in broker_names:
            want_config = broker_configs.get(name)
            if want_config is None:
                self.broker_configs.pop(name, None)
            else:
                self.broker_configs[name] = zp.ConfigZnode(dict(want_config))
        if scope.features and features is not None:
            self.features = features


@dataclass
class MigrationStatus:
    """What the driver knows, for DescribeMigration, metrics and logs."""

    failures: list[PreconditionFailure] = field(default_factory=list)
    zk_last_offset: int = -1
    zk_controller_epoch: int = -1
    dual_writing: bool = False
    zk_connected: bool = False
    writes_blocked: bool = False
    zk_broker_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class _TopicsView:
    """The topics of the image and their configs as values (what `desired_topics`
    reads), taken on the event loop so a worker thread can read them while the
    replayer goes on changing the image."""

    topic_images: Mapping[str, TopicImage]
    topic_configs: dict[str, Mapping[str, str]]

    @classmethod
    def of(cls, state) -> "_TopicsView":
        topics = state.topics()  # immutable: later replays do not change it
        return cls(topics, {name: state.configs(TOPIC_RESOURCE, name) for name in topics})

    def topics(self) -> Mapping[str, TopicImage]:
        return self.topic_images

    def configs(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.topic_configs.get(name, {}) if resource_type == TOPIC_RESOURCE else {}


def _to_op(write: ZkWrite):
    if write.kind == "create":
        return Create(write.path, write.data, sequential=write.sequential)
    if write.kind == "set":
        return SetData(write.path, write.data)
    if write.kind == "delete":
        return Delete(write.path)
    raise ValueError(f"unknown write kind {write.kind!r}")


def assigned_broker_ids(image: zp.ZkClusterImage) -> set[int]:
    """Every broker id some partition's replica assignment names."""
    assigned: set[int] = set()
    for topic in image.topics.values():
        for replicas in topic.assignment.partitions.values():
            assigned.update(replicas)
    return assigned


def now_ms() -> int:
    return int(time.time() * 1000)


class MigrationDriver:
    def __init__(self, node, zk_hosts: str, *, max_lag_records: int, session_timeout_s: float = 18.0,
                 copy_chunk_records: int = mcopy.DEFAULT_CHUNK_RECORDS, copy_pause_s: float = 0.0,
                 read_zookeeper: Callable[[str], zp.ZkClusterImage] | None = None) -> None:
        self.node = node
        self.zk_hosts = zk_hosts
        self.max_lag_records = max_lag_records
        self.copy_chunk_records = copy_chunk_records
        self.copy_pause_s = copy_pause_s
        self.session_timeout_s = session_timeout_s
        if read_zookeeper is None:
            read_zookeeper = read_zookeeper_blocking
        self._read_zookeeper = read_zookeeper
        self.status = MigrationStatus()
        self._zk: ZkSession | None = None
        self._migration_version: int | None = None
        self._mirror: ZkMirror | None = None
        self._progress = trio.Event()  # set whenever the lag may have fallen
        self._draining = False  # a clean shutdown: no new operator writes
        self._brokers_changed = trio.Event()  # ZooKeeper brokers must hear from us

    # ---- views -------------------------------------------------------------

    @property
    def loop(self):
        return self.node.controller

    def recorded_state(self) -> ZkMigrationState:
        return ZkMigrationState(self.node.state.zk_migration_state)

    def zk_broker_count(self) -> int:
        registered = sum(1 for b in self.node.state.brokers.values() if b.is_migrating_zk_broker and not b.fenced)
        return max(registered, len(self.status.zk_broker_ids))

    def kip_state(self) -> MigrationState:
        return kip_state(self.recorded_state(), True, self.zk_broker_count())

    def write_lag(self) -> int:
        """Committed records not yet in ZooKeeper; -1 when not dual-writing."""
        if not self.status.dual_writing:
            return -1
        return max(0, self.loop.replayed_end_offset - 1 - self.status.zk_last_offset)

    def writes_allowed(self) -> bool:
        if self._draining:
            return False
        if not self.status.dual_writing:
            return True
        blocked = (not self.status.zk_connected) or self.write_lag() > self.max_lag_records
        if blocked != self.status.writes_blocked:
            self.status.writes_blocked = blocked
            log.warning(Event.MIGRATION_WRITES_BLOCKED if blocked else Event.MIGRATION_WRITES_UNBLOCKED,
                        lag=self.write_lag(), zk_connected=self.status.zk_connected,
                        max_lag_records=self.max_lag_records)
        return not blocked

    async def wait_writes_allowed(self, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while not self.writes_allowed():
                await self._progress.wait()
            return True
        return False

    async def drain(self, timeout_s: float) -> bool:
        """Until ZooKeeper holds every committed record (bounded); True when it does. Used
        by a clean shutdown: operator writes are refused meanwhile, nothing new arrives."""
        self._draining = True
        self.status.writes_blocked = True
        with trio.move_on_after(timeout_s):
            while self.status.dual_writing and self.write_lag() > 0:
                await self._progress.wait()
            return True
        log.warning(Event.MIGRATION_WRITES_BLOCKED, note="shutdown before ZooKeeper caught up", lag=self.write_lag())
        return False

    def _signal_progress(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    # ---- the task ----------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_connection)
            while True:
                await self.loop.wait_active()
                epoch = self.loop.active_epoch
                async with trio.open_nursery() as leading:
                    async def stop_when_inactive():
                        await self.loop.wait_inactive()
                        leading.cancel_scope.cancel()
                    leading.start_soon(stop_when_inactive)
                    try:
                        await self._lead(epoch)
                    except Fenced as exc:
                        log.error(Event.MIGRATION_FENCED, reason=str(exc), epoch=epoch)
                        # Wait for the quorum to move on; if it does not within a session, try again.
                        with trio.move_on_after(self.session_timeout_s):
                            await self.loop.wait_inactive()
                    except NotControllerError:
                        pass  # leadership ended under a submit; the next activation starts over
                    except Exception as exc:  # the migration must never take the controller down
                        log.exception(Event.MIGRATION_FAILED, error=repr(exc), epoch=epoch)
                        await trio.sleep(ZK_RETRY_S)
                    leading.cancel_scope.cancel()
                self.status.dual_writing = False
                self._mirror = None
                self._signal_progress()

    async def _session(self) -> ZkSession:
        while self._zk is None or self._zk.closed:
            try:
                self._zk = await zk_connect(self.zk_hosts, session_timeout_s=self.session_timeout_s)
                self.status.zk_connected = True
            except ZkError as exc:
                self.status.zk_connected = False
                log.warning(Event.MIGRATION_ZK_UNAVAILABLE, hosts=self.zk_hosts, error=str(exc))
                await trio.sleep(ZK_RETRY_S)
        return self._zk

    async def _watch_connection(self) -> None:
        zk = await self._session()
        # kazoo reconnects and renews an expired session by itself; we only track the state.
        async with zk.connection_events() as events:
            async for state in events:
                self.status.zk_connected = state == ZkConnectionState.CONNECTED
                if not self.status.zk_connected:
                    log.warning(Event.MIGRATION_ZK_UNAVAILABLE, hosts=self.zk_hosts, state=state.value)
                self._signal_progress()

    async def _retrying(self, what: str, call):
        """Runs `call()` until ZooKeeper answers (it may be down for a while)."""
        while True:
            try:
                return await call()
            except (ZkConnectionError, ZkWireError, OSError) as exc:
                self._mirror = None
                log.warning(Event.MIGRATION_ZK_UNAVAILABLE, hosts=self.zk_hosts, during=what, error=str(exc))
                await trio.sleep(ZK_RETRY_S)

    # ---- leading -----------------------------------------------------------

    async def _lead(self, epoch: int) -> None:
        recorded = self.recorded_state()
        if recorded == ZkMigrationState.POST_MIGRATION:
            log.info(Event.MIGRATION_STATE, state=MigrationState.KRAFT.name,
                     note="the migration is finalized; turn kafka.metadata.migration.enable off")
            await trio.sleep_forever()
        if recorded == ZkMigrationState.NONE:
            await self._submit(self._enter_pre_migration)
            recorded = self.recorded_state()
        log.info(Event.MIGRATION_STATE, state=self.kip_state().name, zk_migration_state=recorded.name, epoch=epoch)
        zk = await self._session()
        await self._retrying("claim", lambda: self._claim(zk, epoch, reset_offset=recorded != ZkMigrationState.MIGRATION))
        await self._retrying("create roots", lambda: self._ensure_roots(zk))
        # A transaction left open by a leader that died (the copy): abort it first. The
        # command sees the speculative state and writes nothing when none is open.
        await self._submit(self._abort_transaction, transactional=True)
        if self.recorded_state() == ZkMigrationState.PRE_MIGRATION:
            image, plan = await self._wait_for_preconditions(zk)
            # The copy builds the whole image twice here (the speculative and the committed
            # state) while the ZooKeeper image and the plan are alive: with the collector on,
            # its young generations ran over and over and a full collection walked millions
            # of objects (a fifth of the leader's copy time at 100k partitions). The image
            # lives as long as the process, so it is frozen afterwards.
            with collector_paused(freeze_after=True):
                await self._copy(epoch, image, plan)
            del image, plan
        await self._dual_write(zk, epoch)

    @staticmethod
    async def _ensure_roots(zk: ZkSession) -> None:
        """The parents every dual write creates under (a ZooKeeper-mode cluster has them;
        a multi cannot create parents)."""
        for root in (zp.TOPICS_PATH, zp.config_entity_type_path(zp.CONFIG_TOPICS),
                     zp.config_entity_type_path(zp.CONFIG_BROKERS), zp.config_entity_type_path(zp.CONFIG_USERS),
                     zp.config_entity_type_path(zp.CONFIG_CLIENTS), zp.config_entity_type_path(zp.CONFIG_IPS),
                     CONFIG_CHANGES_PATH):
            await zk.ensure_path(root)

    async def _submit(self, command, *, transactional: bool = False) -> ControllerResult:
        return await self.loop.submit(command, transactional=transactional)

    # -- commands (pure functions of the speculative state) --

    @staticmethod
    def _enter_pre_migration(state, tracker, next_offset, now) -> ControllerResult:
        if ZkMigrationState(state.zk_migration_state) != ZkMigrationState.NONE:
            return ControllerResult([], {})
        if any(not b.is_migrating_zk_broker for b in state.brokers.values()):
            # A cluster that already has KRaft brokers was not created for a migration.
            raise RuntimeError("kafka.metadata.migration.enable is set on a cluster that already runs KRaft "
                               "brokers; a migration must start from a freshly formatted quorum")
        return ControllerResult([mcopy.migration_state_record(ZkMigrationState.PRE_MIGRATION)], {})

    @staticmethod
    def _abort_transaction(state, tracker, next_offset, now) -> ControllerResult:
        if not state.in_transaction:
            return ControllerResult([], {})
        log.warning(Event.MIGRATION_TRANSACTION_ABORTED, transaction_start=state.transaction_start_offset)
        return ControllerResult([mcopy.abort_record("the controller that began it lost its leadership")], {})

    # -- claiming ZooKeeper --

    async def _claim(self, zk: ZkSession, epoch: int, reset_offset: bool) -> None:
        node_id = self.node.config.node_id
        for _attempt in range(CLAIM_ATTEMPTS):
            epoch_node = await zk.get(zp.CONTROLLER_EPOCH_PATH)
            controller_node = await zk.get(zp.CONTROLLER_PATH)
            migration_node = await zk.get(zp.MIGRATION_PATH)
            migration = zp.MigrationZnode.decode(migration_node[0]) if migration_node is not None else None
            if migration is not None and migration.kraft_controller_epoch > epoch:
                raise Fenced(f"/migration names KRaft controller {migration.kraft_controller_id} at epoch "
                             f"{migration.kraft_controller_epoch}, newer than ours ({epoch})")
            zk_epoch = zp.ControllerEpochZnode.decode(epoch_node[0]).epoch + 1 if epoch_node is not None else 1
            last_offset = -1 if (reset_offset or migration is None) else migration.last_offset
            ops = []
            if epoch_node is None:
                ops.append(Create(zp.CONTROLLER_EPOCH_PATH, zp.ControllerEpochZnode(zk_epoch).encode()))
            else:
                ops.append(SetData(zp.CONTROLLER_EPOCH_PATH, zp.ControllerEpochZnode(zk_epoch).encode(), epoch_node[1]))
            if controller_node is not None:
                ops.append(Delete(zp.CONTROLLER_PATH, controller_node[1]))
            # Persistent, not ephemeral: no ZooKeeper broker can become controller (KIP-866).
            ops.append(Create(zp.CONTROLLER_PATH, zp.ControllerZnode(node_id, now_ms(), epoch).encode()))
            new_migration = zp.MigrationZnode(last_offset, now_ms(), node_id, epoch).encode()
            if migration_node is None:
                ops.append(Create(zp.MIGRATION_PATH, new_migration))
            else:
                ops.append(SetData(zp.MIGRATION_PATH, new_migration, migration_node[1]))
            try:
                result = await zk.multi(ops)
            except (ZkVersionConflict, ZkError) as exc:
                if isinstance(exc, ZkConnectionError):
                    raise
                log.info(Event.MIGRATION_ZK_LEADERSHIP_CLAIMED, outcome="raced", error=str(exc))
                await trio.sleep(0.05)
                continue
            self._migration_version = result.results[-1] if migration_node is not None else 0
            self.status.zk_controller_epoch = zk_epoch
            self.status.zk_last_offset = last_offset
            log.info(Event.MIGRATION_ZK_LEADERSHIP_CLAIMED, node_id=node_id, kraft_epoch=epoch,
                     zk_controller_epoch=zk_epoch, migration_last_offset=last_offset)
            return
        raise Fenced(f"could not claim ZooKeeper's controller leadership in {CLAIM_ATTEMPTS} attempts")

    # -- preconditions --

    async def _zk_brokers(self, zk: ZkSession) -> dict[int, zp.BrokerRegistrationZnode]:
        brokers: dict[int, zp.BrokerRegistrationZnode] = {}
        for child in await zk.children(zp.BROKER_IDS_PATH) or []:
            if not child.isdigit():
                continue
            found = await zk.get(zp.broker_path(int(child)))
            if found is not None:
                try:
                    brokers[int(child)] = zp.BrokerRegistrationZnode.decode(found[0])
                except zp.ZnodeDecodeError as exc:
                    log.warning(Event.MIGRATION_PRECONDITIONS_FAILED, broker_id=int(child), error=str(exc))
        self.status.zk_broker_ids = tuple(sorted(brokers))
        return brokers

    async def _migration_check(self, broker_id: int, znode: zp.BrokerRegistrationZnode) -> BrokerCheck:
        mv = znode.features.get("metadata.version")
        max_mv = mv.max_version if mv is not None else None
        if not znode.endpoints:
            return BrokerCheck(broker_id, None, False, max_mv, "no endpoint in its registration")
        endpoint = znode.endpoints[0]
        try:
            with trio.fail_after(MIGRATION_CHECK_TIMEOUT_S):
                async with await KafkaClient.connect(endpoint.host, endpoint.port,
                                                     client_id=f"kraftwerk-controller-{self.node.config.node_id}") as client:
                    await client.negotiate()
                    response = await client.call(migration_check.API_KEY, {})
        except (ClientError, OSError, trio.TooSlowError) as exc:
            return BrokerCheck(broker_id, None, False, max_mv, str(exc) or type(exc).__name__)
        if response.error_code != ErrorCode.NONE:
            return BrokerCheck(broker_id, None, False, max_mv, f"error {error_name(response.error_code)}")
        return BrokerCheck(broker_id, zp.kafka_uuid_string(response.cluster_id), bool(response.config_enabled), max_mv)

    async def _wait_for_preconditions(self, zk: ZkSession) -> tuple[zp.ZkClusterImage, mcopy.CopyPlan]:
        """Until KIP-866's preconditions hold; returns the ZooKeeper image they were checked
        on and the copy planned from it (the copy starts right after, from that image)."""
        cluster_id = self.node.cluster_id
        while True:
            brokers = await self._retrying("read brokers", lambda: self._zk_brokers(zk))
            checks = [await self._migration_check(broker_id, znode) for broker_id, znode in sorted(brokers.items())]
            image, plan = await self._retrying("read ZooKeeper", self._read_and_plan)
            assigned = assigned_broker_ids(image)
            failures = check_preconditions(cluster_id=cluster_id, metadata_version=self.node.state.metadata_version,
                                           live_brokers=checks, assigned_broker_ids=assigned)
            self.status.failures = failures
            if not failures:
                return image, plan
            log.warning(Event.MIGRATION_PRECONDITIONS_FAILED, failures=[str(f) for f in failures])
            await trio.sleep(PRECONDITION_RETRY_S)

    async def _read_and_plan(self) -> tuple[zp.ZkClusterImage, mcopy.CopyPlan]:
        """Reads ZooKeeper whole (pipelined reads) and plans the copy (its records and
        their bytes), in a worker thread: at 100k partitions that is seconds of work, and
        on the event loop it would stall this controller's Raft traffic long enough for the
        quorum to elect someone else; and what is encoded here is not encoded during the
        copy, while the transaction holds every other write."""
        known = set(self.node.supported_node_features)
        metadata_version = self.node.state.metadata_version
        read = self._read_zookeeper
        hosts = self.zk_hosts

        def read_and_plan() -> tuple[zp.ZkClusterImage, mcopy.CopyPlan]:
            image = read(hosts)
            return image, mcopy.plan_copy(image, known, metadata_version)
        return await trio.to_thread.run_sync(read_and_plan)

    # -- the copy --

    async def _copy(self, epoch: int, image: zp.ZkClusterImage, plan: mcopy.CopyPlan) -> None:
        """The copy as one metadata transaction, in commands of `copy_chunk_records`
        (`copy.chunk_commands`). Up to COPY_WINDOW_CHUNKS commands are in the controller
        loop at once, so the next chunk is replayed and encoded while the one before is
        replicated (the loop group-commits them); each command checks that every chunk
        before it is in the transaction, so a chunk that failed is never skipped."""
        log.info(Event.MIGRATION_COPY_STARTED, brokers=len(plan.brokers), topics=len(image.topics),
                 partitions=image.partition_count(), records=plan.total_records)
        started = trio.current_time()
        commands = mcopy.chunk_commands(plan, self.copy_chunk_records, self.node.state.metadata_version)
        window = trio.Semaphore(1 if self.copy_pause_s > 0 else COPY_WINDOW_CHUNKS)
        failures: list[tuple[int, Exception]] = []

        async def submit_chunk(index: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                # `started` before the submit: the submit enqueues before its first await,
                # so chunks enter the loop's queue in order.
                task_status.started()
                await self._submit(commands[index], transactional=True)
                log.info(Event.MIGRATION_COPY_PROGRESS, chunk=index + 1, chunks=len(commands),
                         transaction_start=self.node.state.transaction_start_offset)
            except Exception as exc:  # re-raised below, the first chunk's first
                failures.append((index, exc))
            finally:
                window.release()

        async with trio.open_nursery() as nursery:
            for index in range(len(commands)):
                await window.acquire()
                if failures:
                    window.release()
                    break
                await nursery.start(submit_chunk, index)
                if self.copy_pause_s > 0 and index < len(commands) - 1:
                    async with window:  # the fault drill's pause follows the chunk's commit
                        pass
                    await trio.sleep(self.copy_pause_s)
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]
        end_offset = self.loop.replayed_end_offset - 1
        log.info(Event.MIGRATION_COPY_FINISHED, records=plan.total_records, end_offset=end_offset,
                 seconds=round(trio.current_time() - started, 3))
        self._mirror = ZkMirror.of(image)

    # -- write-behind --

    async def _write(self, zk: ZkSession, epoch: int, writes: list[ZkWrite], last_offset: int) -> None:
        """Applies `writes` in multis, each fenced by /migration; the last records `last_offset`."""
        node_id = self.node.config.node_id
        chunks = [writes[i:i + MAX_OPS_PER_MULTI] for i in range(0, len(writes), MAX_OPS_PER_MULTI)] or [[]]
        for index, chunk in enumerate(chunks):
            recorded = last_offset if index == len(chunks) - 1 else self.status.zk_last_offset
            migration = SetData(zp.MIGRATION_PATH, zp.MigrationZnode(recorded, now_ms(), node_id, epoch).encode(),
                                self._migration_version)
            try:
                result = await zk.multi([migration] + [_to_op(w) for w in chunk])
            except ZkVersionConflict as exc:
                if exc.op_index == 0:
                    raise Fenced(f"/migration changed under us: {exc}") from None
                # Our mirror was wrong (someone else wrote one of these paths): re-read.
                self._mirror = None
                raise
            self._migration_version = result.results[0]
            self.status.zk_last_offset = recorded

    async def _load_mirror(self) -> ZkMirror:
        image = await self._retrying("read ZooKeeper", lambda: trio.to_thread.run_sync(self._read_zookeeper, self.zk_hosts))
        return ZkMirror.of(image)

    async def _dual_write(self, zk: ZkSession, epoch: int) -> None:
        if self._mirror is None:
            self._mirror = await self._load_mirror()
        state = self.node.state
        topic_names: dict[uuid.UUID, str] = {t.topic_id: name for name, t in state.topics().items()}
        driver = self.node.raft_driver
        resume = self.status.zk_last_offset
        committed_end = self.loop.replayed_end_offset
        if 0 <= resume < committed_end and resume + 1 >= driver.storage.start_offset:
            position = resume + 1
            log.info(Event.MIGRATION_RECONCILED, mode="resume", from_offset=position)
        else:
            await self._round(zk, epoch, Scope.all(), committed_end - 1)
            position = self.status.zk_last_offset + 1
            log.info(Event.MIGRATION_RECONCILED, mode="full", last_offset=self.status.zk_last_offset)
        self.status.dual_writing = True
        self._signal_progress()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_brokers_informed, zk, epoch)
            reader = driver.committed_reader(position)
            while True:
                items = await reader.next()
                await self.loop.wait_replayed(reader.position)
                if any(isinstance(item, SnapshotLoaded) for item in items):
                    scope = Scope.all()
                    topic_names = {t.topic_id: name for name, t in self.node.state.topics().items()}
                else:
                    records = [decode_metadata_record(v) for item in items if item.control_type is None
                               for v in item.values]
                    scope = touched_scope(records, topic_names)
                    if any(r.name in BROKER_VISIBLE_RECORDS for r in records):
                        self._brokers_changed.set()
                last = reader.position - 1
                await self._round(zk, epoch, scope, last)

    async def _round(self, zk: ZkSession, epoch: int, scope: Scope, last_offset: int) -> None:
        while True:
            try:
                if self._mirror is None:
                    self._mirror = await self._load_mirror()
                    scope = Scope.all()
                state = self.node.state
                mirror = self._mirror
                controller_epoch = self.status.zk_controller_epoch
                # Only what the batch touched (everything for a full reconciliation).
                broker_configs = desired_broker_configs(state, None if scope.everything else scope.broker_configs)
                features = desired_features(state)
                quotas = desired_client_quotas(state, None if scope.everything else scope.quota_entities)
                keep_zk_scram = not image_holds_scram(state)

                def plan(topics) -> list[ZkWrite]:
                    return plan_writes(scope, desired_topics=topics, desired_broker_configs=broker_configs,
                                       desired_features=features, actual_topics=mirror.topics,
                                       actual_topic_configs=mirror.topic_configs,
                                       actual_broker_configs=mirror.broker_configs,
                                       actual_features=mirror.features, desired_quotas=quotas,
                                       actual_quotas=mirror.quota_configs,
                                       actual_user_client_parents=frozenset(mirror.user_client_parents),
                                       keep_zk_scram=keep_zk_scram)
                if scope.everything:
                    # A full reconciliation (after the copy, or a new leader's) covers every
                    # partition: seconds at 100k. It runs in a worker thread on immutable
                    # views of the image taken here, so the event loop keeps serving the
                    # quorum; the image may move on meanwhile, which the next rounds cover
                    # (they diff against the mirror, so nothing is lost or written twice).
                    view = _TopicsView.of(state)

                    def plan_everything():
                        topics = desired_topics(view, controller_epoch)
                        return topics, plan(topics)
                    topics, writes = await trio.to_thread.run_sync(plan_everything)
                else:
                    topics = desired_topics(state, controller_epoch, scope.topics)
                    writes = plan(topics)
                await self._write(zk, epoch, writes, last_offset)
                if scope.everything:
                    await trio.to_thread.run_sync(mirror.apply, scope, topics, broker_configs, features)
                else:
                    mirror.apply(scope, topics, broker_configs, features)
                mirror.apply_quotas(scope, quotas, keep_zk_scram)
                if writes:
                    log.debug(Event.MIGRATION_DUAL_WRITE, writes=len(writes), last_offset=last_offset)
                self._signal_progress()
                return
            except ZkConnectionError as exc:
                self._mirror = None
                log.warning(Event.MIGRATION_ZK_UNAVAILABLE, hosts=self.zk_hosts, during="dual write", error=str(exc))
                await trio.sleep(ZK_RETRY_S)
            except ZkVersionConflict:
                self._mirror = None  # _write raised Fenced for the fence itself

    # -- ZooKeeper brokers --

    async def _keep_brokers_informed(self, zk: ZkSession, epoch: int) -> None:
        """Keeps the image's ZooKeeper brokers in step with /brokers/ids and sends every
        live ZooKeeper broker UpdateMetadata (the KRaft controller, the live brokers, the
        partitions) now and whenever brokers or topics change."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_broker_ids, zk)
            while True:
                await self._brokers_changed.wait()
                self._brokers_changed = trio.Event()
                brokers = await self._retrying("read brokers", lambda: self._zk_brokers(zk))
                await self._submit(lambda state, tracker, next_offset, now: ControllerResult(
                    zk_broker_records(state, brokers, next_offset), {}))
                await self._send_update_metadata(brokers)

    async def _watch_broker_ids(self, zk: ZkSession) -> None:
        while True:
            try:
                async with await zk.watch_children(zp.BROKER_IDS_PATH) as changes:
                    async for _change in changes:
                        self._brokers_changed.set()
            except ZkError as exc:
                log.warning(Event.MIGRATION_ZK_UNAVAILABLE, hosts=self.zk_hosts, during="broker watch", error=str(exc))
            await trio.sleep(ZK_RETRY_S)

    async def _send_update_metadata(self, zk_brokers: dict[int, zp.BrokerRegistrationZnode]) -> None:
        """UpdateMetadata to every live ZooKeeper broker. At 100k partitions the request
        takes seconds to build and encode: that happens once, in a worker thread, from
        immutable views of the image taken here (the event loop keeps serving the
        quorum meanwhile), and the same bytes go to every broker."""
        topics = self.node.state.topics()  # immutable: later replays do not change it
        kraft_brokers = dict(self.node.state.brokers)
        controller_id = self.node.config.node_id
        zk_controller_epoch = self.status.zk_controller_epoch
        targets = [(broker_id, znode.endpoints[0].host, znode.endpoints[0].port)
                   for broker_id, znode in sorted(zk_brokers.items()) if znode.endpoints]

        def build_and_send() -> list[tuple[int, str]]:
            request = update_metadata_request(controller_id, zk_controller_epoch, zk_brokers, kraft_brokers, topics)
            frame = encode_request(update_metadata.REQUEST.api_key, UPDATE_METADATA_VERSION, 1,
                                   f"kraftwerk-controller-{controller_id}", request)
            return [(broker_id, _send_frame_blocking(host, port, frame)) for broker_id, host, port in targets]
        for broker_id, outcome in await trio.to_thread.run_sync(build_and_send, abandon_on_cancel=True):
            log.info(Event.MIGRATION_UPDATE_METADATA_SENT, broker_id=broker_id, outcome=outcome,
                     zk_controller_epoch=zk_controller_epoch)


def update_metadata_request(controller_id: int, zk_controller_epoch: int,
                            zk_brokers: dict[int, zp.BrokerRegistrationZnode],
                            kraft_brokers: dict, topics) -> dict:
    """The UpdateMetadata a KRaft controller sends ZooKeeper brokers during a migration:
    the live brokers (ZooKeeper's, then KRaft's unfenced ones) and every partition."""
    live = []
    for broker_id, znode in sorted(zk_brokers.items()):
        live.append({"id": broker_id, "endpoints": [
            {"port": e.port, "host": e.host, "listener": e.listener, "security_protocol": 0}
            for e in znode.endpoints], "rack": znode.rack})
    for broker_id, registration in sorted(kraft_brokers.items()):
        if broker_id in zk_brokers or registration.fenced or registration.is_migrating_zk_broker:
            continue
        live.append({"id": broker_id, "endpoints": [
            {"port": e.port, "host": e.host, "listener": e.name, "security_protocol": e.security_protocol}
            for e in registration.endpoints], "rack": registration.rack})
    topic_states = []
    for name, topic in sorted(topics.items()):
        topic_states.append({"topic_name": name, "topic_id": topic.topic_id, "partition_states": [
            {"partition_index": index, "controller_epoch": zk_controller_epoch,
             "leader": p.leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr), "zk_version": 0,
             "replicas": list(p.replicas), "offline_replicas": []}
            for index, p in sorted(topic.partitions.items())]})
    return {"controller_id": controller_id, "is_kraft_controller": True, "type": 2,
            "controller_epoch": zk_controller_epoch, "broker_epoch": -1,
            "topic_states": topic_states, "live_brokers": live}


def _send_frame_blocking(host: str, port: int, frame: bytes) -> str:
    """Sends one encoded UpdateMetadata request and reads its answer (blocking, for a
    worker thread): the answer's error name, or why it failed."""
    try:
        with socket.create_connection((host, port), timeout=UPDATE_METADATA_TIMEOUT_S) as sock:
            sock.settimeout(UPDATE_METADATA_TIMEOUT_S)
            sock.sendall(frame)
            size = int.from_bytes(_receive_exactly(sock, 4), "big", signed=True)
            if size < 0 or size > MAX_RESPONSE_BYTES:
                return f"failed: bad response size {size}"
            _, response = decode_response(update_metadata.REQUEST.api_key, UPDATE_METADATA_VERSION,
                                          _receive_exactly(sock, size))
    except (OSError, DecodeError) as exc:
        return f"failed: {exc or type(exc).__name__}"
    return error_name(response.error_code)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(65536, size - len(data)))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)
