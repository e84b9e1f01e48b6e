"""A controller node: storage, state, the controller loop and the listener, wired.

Owns: start-up (read meta.properties, open and recover the metadata log,
load the latest snapshot and replay the log after it, write the bootstrap
records on the very first start), the read-only views the handlers use,
snapshot scheduling, and the trio tasks of a running node (listener,
controller loop, broker-session timer).

Rules kept here:
- Start-up replays through the same `ControllerState.replay` as live
  commits, so a restart rebuilds exactly the state that was acknowledged.
- A node refuses to start on an unformatted directory, a cluster/node id
  mismatch, a locked log, a missing or corrupt bootstrap checkpoint, or
  finalized feature levels its software cannot run (KIP-778), with a message
  that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trio

from protocol.errors import DecodeError
from protocol.record_batch import decode_batches, encode_batch
from protocol.records import decode_metadata_record, encode_metadata_record
from server.apis import controller_apis
from server.config import ServerConfig
from server.controller import commands
from server.controller.commands import ControllerConfig
from server.controller.features import local_supported_features, unsupported_finalized_levels
from server.controller.loop import ControllerLoop, monotonic_ms, wall_clock_ms
from server.controller.snapshot import SnapshotRecoveryError, recover_state, take_snapshot
from server.controller.state import BrokerHeartbeatTracker
from server.dispatch import Dispatcher
from server.handlers import api_versions
from server.net.listener import serve_listener
from server.observability import Event, Metrics, get_logger
from server.storage.log import LogConfig, MetadataLog
from server.storage.durable import write_file_atomically
from server.storage.meta_properties import read_meta_properties
from server.storage.snapshot import latest_snapshot

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
# One controller, no elections yet: the degenerate quorum's leader epoch.
SINGLE_NODE_LEADER_EPOCH = 1

log = get_logger("controller")


class StartupError(Exception):
    """The node cannot start; the message says what the operator should do."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def write_bootstrap_checkpoint(directory: Path, records) -> Path:
    """Writes the format-time records as one record batch, atomically."""
    data = encode_batch(0, 0, [encode_metadata_record(r) for r in records], 0)
    path = directory / BOOTSTRAP_CHECKPOINT
    write_file_atomically(path, data)
    return path


def read_bootstrap_checkpoint(directory: Path):
    path = directory / BOOTSTRAP_CHECKPOINT
    if not path.exists():
        return None
    try:
        batches = decode_batches(path.read_bytes())
        return [decode_metadata_record(r.value) for batch in batches for r in batch.records]
    except DecodeError as exc:
        raise StartupError(f"{path} is corrupt ({exc}); re-run `kraftwerk storage format`") from None


class ControllerNode:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.served_apis = controller_apis()
        self.cluster_id = ""
        self.port = config.listener.port
        self.state = None  # ControllerState once open() has recovered it
        self.controller: ControllerLoop | None = None
        self.metadata_log: MetadataLog | None = None
        supported = local_supported_features(config.unstable_feature_versions_enable)
        self._supported = {name: (r.min_level, r.max_level) for name, r in supported.items()}
        self.controller_config: ControllerConfig | None = None
        self._api_versions_cache: dict[tuple[int, int], bytes] = {}

    # -- start-up -------------------------------------------------------------
    def open(self) -> None:
        directory = Path(self.config.metadata_log_dir)
        meta = read_meta_properties(directory) if directory.exists() else None
        if meta is None:
            raise StartupError(
                f"{directory} is not formatted; run `kraftwerk storage format --cluster-id ID "
                f"--config FILE` (get an ID with `kraftwerk storage random-uuid`)"
            )
        if meta.node_id != self.config.node_id:
            raise StartupError(f"{directory} belongs to node {meta.node_id}, but node.id is "
                               f"{self.config.node_id}")
        self.cluster_id = meta.cluster_id
        self.controller_config = ControllerConfig(
            node_id=self.config.node_id,
            cluster_id=meta.cluster_id,
            supported_features=local_supported_features(self.config.unstable_feature_versions_enable),
            session_timeout_ms=self.config.broker_session_timeout_ms,
        )
        log_dir = directory / METADATA_LOG_DIR_NAME
        try:
            self.metadata_log = MetadataLog.open(log_dir, LogConfig(segment_bytes=self.config.log_segment_bytes))
        except RuntimeError as exc:  # the log's exclusive lock is held
            raise StartupError(f"{exc}; is another controller running on {directory}? Stop it, or "
                               "give this one its own --log-dir") from None
        try:
            # The latest valid snapshot, then the log after it: the same replay path as live commits.
            self.state = recover_state(log_dir, self.metadata_log, meta.cluster_id)
        except SnapshotRecoveryError as exc:
            self.metadata_log.close()
            raise StartupError(str(exc)) from None
        replayed = self.state.last_applied_offset + 1
        latest = latest_snapshot(log_dir)
        self._snapshot_end_offset = latest.end_offset if latest is not None else 0
        self._snapshot_bytes_mark = 0
        self._bootstrap_records = None
        if self.metadata_log.end_offset == 0:
            # Checked here, not at the first append, so that a missing or
            # corrupt checkpoint is a clean start-up error for the operator.
            try:
                self._bootstrap_records = read_bootstrap_checkpoint(directory)
            except StartupError:
                self.metadata_log.close()
                raise
            if self._bootstrap_records is None:
                self.metadata_log.close()
                raise StartupError(f"{directory} has no {BOOTSTRAP_CHECKPOINT} and an empty log; "
                                   "re-run `kraftwerk storage format`")
        finalized = self.state.all_finalized_levels()
        for item in self._bootstrap_records or ():
            if item.name == "FeatureLevelRecord":
                finalized[item.data["name"]] = item.data["feature_level"]
        reasons = unsupported_finalized_levels(finalized, self.controller_config.supported_features)
        if reasons:
            # KIP-778: software that cannot read the finalized metadata must not serve it.
            self.metadata_log.close()
            raise StartupError(
                f"controller {self.config.node_id} cannot run this cluster's finalized features: "
                + "; ".join(reasons)
                + ". Run a release that supports them (or, for unstable levels, set "
                "unstable.feature.versions.enable=true)."
            )
        self.tracker = BrokerHeartbeatTracker(self.config.broker_session_timeout_ms)
        self.controller = ControllerLoop(
            self.metadata_log, self.state, self.tracker, SINGLE_NODE_LEADER_EPOCH,
            self.config.controller_queue_max_commands, on_commit=self._on_commit,
            group_commit=self.config.controller_group_commit,
        )
        log.info(Event.CONTROLLER_RECOVERED, records=replayed, end_offset=self.metadata_log.end_offset,
                 metadata_version=self.state.metadata_version, cluster_id=self.cluster_id)

    async def bootstrap_if_empty(self) -> None:
        if self.metadata_log.end_offset > 0 or self._bootstrap_records is None:
            return
        records, self._bootstrap_records = self._bootstrap_records, None
        await self.controller.submit(lambda state, tracker, next_offset, now_ms: commands.ControllerResult(records, {}))
        log.info(Event.BOOTSTRAPPED, metadata_version=self.state.metadata_version,
                 features=dict(self.state.finalized_levels))

    def _on_commit(self, result, base_offset: int) -> None:
        self._api_versions_cache.clear()
        self.metrics.metadata_offset.set(self.state.last_applied_offset)
        if self.state.metadata_version is not None:
            self.metrics.finalized_metadata_version.set(self.state.metadata_version)
        for offset, item in enumerate(result.records, start=base_offset):
            if item.name == "FeatureLevelRecord":
                log.info(Event.FEATURE_FINALIZED, feature=item.data["name"], feature_level=item.data["feature_level"],
                         offset=offset)
            elif item.name == "RegisterBrokerRecord":
                log.info(Event.BROKER_REGISTERED, broker_id=item.data["broker_id"], broker_epoch=offset)
            elif item.name == "FenceBrokerRecord":
                log.info(Event.BROKER_FENCED, broker_id=item.data["id"], offset=offset)
            elif item.name == "UnfenceBrokerRecord":
                log.info(Event.BROKER_UNFENCED, broker_id=item.data["id"], offset=offset)
            elif item.name == "UnregisterBrokerRecord":
                log.info(Event.BROKER_UNREGISTERED, broker_id=item.data["broker_id"], offset=offset)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Snapshots the state once enough record bytes were appended since the last one.

        Runs in the controller loop task (it reads the state, which only that task
        changes); with one controller every appended record is committed."""
        appended = self.controller.appended_bytes - self._snapshot_bytes_mark
        if appended < self.config.metadata_snapshot_max_record_bytes:
            return
        snapshot_id = take_snapshot(self.state, self.metadata_log)
        self._snapshot_bytes_mark = self.controller.appended_bytes
        if snapshot_id is not None:
            self._snapshot_end_offset = snapshot_id.end_offset

    # -- running ----------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.state is None:
            self.open()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.controller.run)
                await self.bootstrap_if_empty()
                self.tracker.activate(self.state, monotonic_ms())
                nursery.start_soon(self._fence_expired_brokers)
                dispatcher = Dispatcher(self, self.served_apis)
                listeners = await nursery.start(serve_listener, dispatcher, self.config.listener.host,
                                                self.config.listener.port)
                self.port = listeners[0].socket.getsockname()[1]
                log.info(Event.SERVER_STARTED, node_id=self.config.node_id, host=self.config.listener.host,
                         port=self.port, cluster_id=self.cluster_id,
                         metadata_version=self.state.metadata_version)
                task_status.started(self.port)
        finally:
            self.metadata_log.close()

    async def _fence_expired_brokers(self) -> None:
        interval_seconds = self.config.fence_check_interval_ms / 1000
        controller_config = self.controller_config
        while True:
            await trio.sleep(interval_seconds)
            await self.controller.submit(
                lambda state, tracker, next_offset, now_ms: commands.fence_expired_brokers(
                    state, tracker, now_ms, controller_config)
            )

    # -- views for handlers ---------------------------------------------------
    def supported_features(self) -> dict[str, tuple[int, int]]:
        return self._supported

    def finalized_levels(self) -> dict[str, int]:
        return self.state.all_finalized_levels()

    def finalized_features_epoch(self) -> int:
        return self.state.finalized_features_epoch

    def api_versions_body(self, version: int):
        key = (version, self.state.finalized_features_epoch)
        body = self._api_versions_cache.get(key)
        if body is None:
            api = self.served_apis[18]
            body = api.response.encode(version, api_versions.build_body(self, version))
            self._api_versions_cache[key] = body
        return body

    def active_controller_id(self) -> int:
        return self.config.node_id

    def controller_endpoints(self) -> list[Endpoint]:
        advertised = self.config.advertised_listener
        if advertised is not None:
            return [Endpoint(self.config.node_id, advertised.host, advertised.port or self.port)]
        return [Endpoint(self.config.node_id, self.config.listener.host, self.port)]

    def registered_broker_endpoints(self, include_fenced: bool) -> list[Endpoint]:
        endpoints = []
        for registration in commands.registered_brokers(self.state, include_fenced=include_fenced):
            if registration.endpoints:
                first = registration.endpoints[0]
                endpoints.append(Endpoint(registration.broker_id, first.host, first.port, registration.rack))
        return endpoints

    def quorum_partition_state(self) -> dict:
        end_offset = self.metadata_log.end_offset
        now_ms = wall_clock_ms()
        observers = [
            {"replica_id": b.broker_id, "log_end_offset": -1, "last_fetch_timestamp": -1,
             "last_caught_up_timestamp": -1}
            for b in commands.registered_brokers(self.state, include_fenced=True)
        ]
        return {
            "partition_index": 0,
            "error_code": 0,
            "error_message": None,
            "leader_id": self.config.node_id,
            "leader_epoch": self.controller.leader_epoch,
            "high_watermark": end_offset,
            "current_voters": [{"replica_id": self.config.node_id, "log_end_offset": end_offset,
                                "last_fetch_timestamp": now_ms, "last_caught_up_timestamp": now_ms}],
            "observers": observers,
        }

    def quorum_nodes(self) -> list[dict]:
        endpoint = self.controller_endpoints()[0]
        return [{"node_id": self.config.node_id,
                 "listeners": [{"name": self.config.listener.name, "host": endpoint.host,
                                "port": endpoint.port}]}]

    # -- write paths used by handlers -----------------------------------------
    async def submit(self, command):
        return await self.controller.submit(command)

