"""A fake fleet of kraftwerk controller directories, written by the real controller code.

Owns: `FleetSpec` (what to write), `write_fleet` (writes it and returns a `FleetSummary`
of what every cluster ended up as), the per-cluster story that drives the pure
controller commands, `upgrade_readiness` (the answer the pipeline should reach for a
replayed image) and `fake_fleet_command` (what `kraftwerk pipeline fake-fleet` runs).

Layout, one directory per controller node, as `kraftwerk storage format` and a running
controller leave it:

    <out>/<cluster>/<node>/meta.properties        cluster.id, node.id, directory.id
    <out>/<cluster>/<node>/node.properties        node.id, process.roles, kraftwerk.release, ...
                                                  (no metadata.log.dir: it is the directory
                                                  the file is in, wherever the fleet is moved)
    <out>/<cluster>/<node>/__cluster_metadata-0/  segments (<20 digits>.log) and snapshots
                                                  (<end offset>-<epoch>.checkpoint); the
                                                  bootstrap snapshot 0-0 holds the format-time
                                                  records (server/storage/bootstrap.py)

Rules kept here:
- Every metadata record comes from a real command (`register_broker`, `broker_heartbeat`,
  `update_features`, `unregister_broker`, `fence_expired_brokers`, `bootstrap_records`)
  run against a `ControllerState` that only `replay` changes, exactly as the controller
  loop does it; rejected commands write nothing, so the story asks and takes the answer.
- The log is laid out like the Raft layer lays it: a LeaderChange control batch opens
  each leader epoch, then one batch per group commit (the commands of one tick).
- The three controllers of a cluster hold byte-identical copies of the committed log
  (the log is written once through `MetadataLog` and its files copied), each with its
  own meta.properties / node.properties. Telling the copies apart is the pipeline's job.
- Deterministic: everything random comes from one `random.Random` per cluster, seeded
  from (`FleetSpec.seed`, cluster index); the clock is a fake wall clock. The same spec
  gives the same bytes, whatever `workers` is.
- Bounded: a cluster stops at the first command whose records would pass
  `records_per_cluster` (all records of the log, control records included), and its
  story gives up after `MAX_EVENTS_PER_RECORD` events per record.

Speed: UpdateFeatures and UnregisterBroker requests go through a real encode/decode
round trip; BrokerRegistration and BrokerHeartbeat requests, which make up almost all
the traffic, are built directly as the mappings a decoded request is (same keys, same
value types). The commands read both the same way; tests check that both give the same
records.
"""

from __future__ import annotations

import os
import heapq
import random
import shutil
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from protocol.apis import unregister_broker as unregister_api
from protocol.apis import update_features as update_features_api
from protocol.errors import ErrorCode
from protocol.raft_records import LEADER_CHANGE_MESSAGE
from protocol.record_batch import ControlRecordType, encode_batch
from protocol.records import MetadataRecord, encode_metadata_record
from server.controller import commands as cmd
from server.controller import features as ft
from server.controller.features import GROUP_VERSION, METADATA_VERSION, TRANSACTION_VERSION, NodeFeatures
from server.controller.snapshot import write_controller_snapshot
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.releases import RELEASES
from server.storage.bootstrap import METADATA_LOG_DIR_NAME, write_bootstrap_snapshot
from server.storage.log import LOCK_FILE_NAME, LogConfig, MetadataLog
from server.storage.meta_properties import (
    MetaProperties,
    is_reserved_uuid,
    uuid_to_string,
    write_meta_properties,
)
from server.storage.snapshot import list_snapshots

# Smallest record budget a cluster can have: the first LeaderChange, the bootstrap
# records and a few registrations.
MIN_RECORDS_PER_CLUSTER = 20
# The story's loop bound: events without a record are cheap but must not go on forever.
MAX_EVENTS_PER_RECORD = 200
# Broker heartbeats that change nothing leave no trace in the log; they only keep the
# session alive. Brokers here send one every 4.5 s (Kafka's default is 2 s) with the
# 9 s session: the log is the same, for half the work.
HEARTBEAT_INTERVAL_MS = 4500
# How long a broker runs before its next life event (shutdown, crash, pause, re-registration).
ACTION_DELAY_MS = (2000, 25_000)
# Commands within this long of a batch's first one join its group commit.
GROUP_COMMIT_LINGER_MS = 20
CONTROLLER_BASE_NODE_ID = 3000
FIRST_TIMESTAMP_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
FENCE_CHECK_INTERVAL_MS = 1000
NODE_PROPERTIES_FILE_NAME = "node.properties"
# Controller releases and how often a cluster runs each (the rest of the catalog is
# too old to run 3.7-IV4, the highest bootstrap version the story uses).
CONTROLLER_RELEASE_WEIGHTS = (("4.0", 50), ("3.9", 20), ("3.8", 15), ("3.7", 15))
FIRST_BOOTSTRAP_LEVEL = ft.metadata_version_from_name("3.4-IV0").level
LAST_BOOTSTRAP_LEVEL = ft.metadata_version_from_name("3.7-IV4").level
# BrokerRegistration / BrokerHeartbeat versions each release's brokers send.
REGISTRATION_VERSION = {"3.3": 0, "3.4": 1, "3.5": 1, "3.6": 1, "3.7": 2, "3.8": 3, "3.9": 4, "4.0": 4}
UPDATE_FEATURES_VERSION = 1


# --------------------------------------------------------------------------
# Spec and summary
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSpec:
    """What to write. `records_per_cluster` bounds every cluster's log (control records
    included); `segment_bytes` is the segment size the log rolls at;
    `snapshots_per_cluster` snapshots are taken at spread-out batch boundaries."""

    clusters: int
    records_per_cluster: int
    seed: int = 1
    segment_bytes: int = 1 << 20
    snapshots_per_cluster: int = 3
    controllers_per_cluster: int = 3
    session_timeout_ms: int = 9000

    def __post_init__(self) -> None:
        if self.clusters < 1:
            raise ValueError("FleetSpec.clusters must be at least 1")
        if self.records_per_cluster < MIN_RECORDS_PER_CLUSTER:
            raise ValueError(f"FleetSpec.records_per_cluster must be at least {MIN_RECORDS_PER_CLUSTER}")
        if self.segment_bytes < 4096:
            raise ValueError("FleetSpec.segment_bytes must be at least 4096")
        if self.snapshots_per_cluster < 0 or self.controllers_per_cluster < 1:
            raise ValueError("FleetSpec.snapshots_per_cluster must be >= 0, controllers_per_cluster >= 1")


@dataclass(frozen=True)
class BrokerSummary:
    """A broker registered at the end of the log: its id, the Kafka release it runs
    (which fixes its supported ranges), its broker epoch and whether it is fenced."""

    broker_id: int
    release: str
    epoch: int
    fenced: bool


@dataclass(frozen=True)
class UpgradeReadiness:
    """How far metadata.version could go now.

    - current_level: the finalized metadata.version level.
    - controller_max_level: the highest level the controllers' release supports.
    - max_level / max_version: the highest catalogued level that the controllers and
      every registered broker (fenced or not, as UpdateFeatures checks them) support.
    - blockers: registered brokers whose supported maximum is below
      controller_max_level, by id: they keep the cluster from the controllers' maximum.
    """

    current_level: int
    controller_max_level: int
    max_level: int
    max_version: str
    blockers: tuple[int, ...]


@dataclass(frozen=True)
class FeatureChange:
    """An accepted UpdateFeatures change: the offset of its FeatureLevelRecord, the
    feature, the levels before and after, and kind ("upgrade", "safe_downgrade" or
    "unsafe_downgrade"; the last only for lossy metadata.version downgrades)."""

    offset: int
    feature: str
    from_level: int
    to_level: int
    kind: str


@dataclass(frozen=True)
class ClusterSummary:
    """One cluster as written.

    - name: the directory name under the fleet root; cluster_id: meta.properties' cluster.id.
    - node_ids: the controller node ids (one directory each, named by the id).
    - controller_release: the release every controller runs (node.properties).
    - bootstrap_level: the metadata.version the cluster was formatted at.
    - finalized_levels: the finalized features after replaying the whole log (what
      `ControllerState.finalized_levels` holds: level-0 features absent).
    - brokers: the registered brokers at the end, by id.
    - readiness: `upgrade_readiness` of the final image.
    - upgrades / safe_downgrades / unsafe_downgrades: accepted feature changes of each
      kind (all features); refused_feature_updates: UpdateFeatures requests the
      controller refused (they write nothing); refused_registrations likewise.
    - feature_changes: every accepted change, in log order.
    - records: records in the log (= its end offset), control records included;
      control_records: the LeaderChange records among them; batches: batches in the log.
    - leader_epochs: epochs the log went through (the last epoch, as epochs start at 1).
    - snapshots: (end offset, epoch) of every snapshot file.
    - segments: segment files per node.
    """

    name: str
    cluster_id: str
    node_ids: tuple[int, ...]
    controller_release: str
    bootstrap_level: int
    finalized_levels: dict[str, int]
    brokers: tuple[BrokerSummary, ...]
    readiness: UpgradeReadiness
    upgrades: int
    safe_downgrades: int
    unsafe_downgrades: int
    refused_feature_updates: int
    refused_registrations: int
    feature_changes: tuple[FeatureChange, ...]
    records: int
    control_records: int
    batches: int
    leader_epochs: int
    snapshots: tuple[tuple[int, int], ...]
    segments: int

    def one_line(self) -> str:
        levels = ", ".join(f"{name}={level}" for name, level in sorted(self.finalized_levels.items()))
        mv = ft.metadata_version_from_level(self.finalized_levels[METADATA_VERSION])
        blockers = ",".join(map(str, self.readiness.blockers)) or "none"
        return (f"{self.name} {self.cluster_id} release={self.controller_release} mv={mv} [{levels}] "
                f"brokers={len(self.brokers)} records={self.records} upgrades={self.upgrades} "
                f"safe_downgrades={self.safe_downgrades} unsafe_downgrades={self.unsafe_downgrades} "
                f"readiness={self.readiness.max_version} blockers={blockers}")


@dataclass(frozen=True)
class FleetSummary:
    """Every cluster, in index order, plus the total record count. `write_seconds` is
    how long writing took (not compared: it is the only non-deterministic field)."""

    spec: FleetSpec
    clusters: tuple[ClusterSummary, ...]
    total_records: int
    write_seconds: float = field(default=0.0, compare=False)


# --------------------------------------------------------------------------
# Readiness (pure)
# --------------------------------------------------------------------------


def upgrade_readiness(state: ControllerState, controller_features: NodeFeatures) -> UpgradeReadiness:
    """See `UpgradeReadiness`. Pure: a replayed image plus the controllers' ranges."""
    current = state.metadata_version
    if current is None:
        raise ValueError("the image has no metadata.version")
    controller_range = controller_features[METADATA_VERSION]
    ranges = [controller_range] + [state.brokers[b].supported(METADATA_VERSION) for b in sorted(state.brokers)]
    best = None
    for version in ft.METADATA_VERSIONS:
        if all(r.contains(version.level) for r in ranges):
            best = version
    if best is None:
        raise ValueError("no metadata.version is supported by every node")
    blockers = tuple(
        broker_id for broker_id in sorted(state.brokers)
        if state.brokers[broker_id].supported(METADATA_VERSION).max_level < controller_range.max_level
    )
    return UpgradeReadiness(current, controller_range.max_level, best.level, best.name, blockers)


# --------------------------------------------------------------------------
# Requests as the commands see them
# --------------------------------------------------------------------------


def decoded_request(message, version: int, fields: Mapping[str, Any]):
    """A request as a handler gets it: encoded, then decoded."""
    return message.decode(version, message.encode(version, dict(fields)))


def registration_fields(broker_id: int, cluster_id: str, incarnation_id: uuid.UUID, release_name: str,
                        log_dirs: list[uuid.UUID], rack: str | None, host: str) -> tuple[int, dict[str, Any]]:
    """(api version, request fields) of a BrokerRegistration a broker of `release_name`
    sends, as a decoded request has them. Brokers before v4 leave out features whose
    minimum is 0 (KAFKA-17011 is the client's side of that)."""
    version = REGISTRATION_VERSION[release_name]
    features = [
        {"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
        for name, r in RELEASES[release_name].features.items()
        if version >= 4 or r.min_level > 0
    ]
    fields: dict[str, Any] = {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": incarnation_id,
        "listeners": [{"name": "PLAINTEXT", "host": host, "port": 9092, "security_protocol": 0}],
        "features": features,
        "rack": rack,
        "is_migrating_zk_broker": False,
        "log_dirs": list(log_dirs) if version >= 2 else [],
        "previous_broker_epoch": -1,
    }
    return version, fields


def heartbeat_fields(broker_id: int, broker_epoch: int, offset: int, want_shut_down: bool = False) -> dict[str, Any]:
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "current_metadata_offset": offset,
        "want_fence": False,
        "want_shut_down": want_shut_down,
        "offline_log_dirs": [],
    }


def _rng_uuid(rng: random.Random) -> uuid.UUID:
    # Bounded: a draw is reserved with probability ~2**-121.
    for _ in range(100):
        value = uuid.UUID(int=rng.getrandbits(128))
        if not is_reserved_uuid(value) and not uuid_to_string(value).startswith("-"):
            return value
    raise RuntimeError("could not draw a usable uuid")


def rng_uuid_string(rng: random.Random) -> str:
    """A Kafka uuid string (like `random_uuid_string`) drawn from `rng`, so it repeats with the seed."""
    return uuid_to_string(_rng_uuid(rng))


# --------------------------------------------------------------------------
# One cluster
# --------------------------------------------------------------------------

OFFLINE, RUNNING, PAUSED, CRASHED, RETIRING, GONE = "offline", "running", "paused", "crashed", "retiring", "gone"


@dataclass
class _Broker:
    broker_id: int
    release: str
    permanent_blocker: bool
    log_dirs: list[uuid.UUID]
    rack: str | None
    status: str = OFFLINE
    incarnation_id: uuid.UUID | None = None
    epoch: int = -1
    registered_release: str | None = None  # the release of its registration in the log
    generation: int = 0  # bumped on every status change; queued events of older ones are dropped


class _BudgetReached(Exception):
    """The next command's records would pass records_per_cluster."""


class _ClusterStory:
    """Drives one cluster's controller from bootstrap until the record budget is used."""

    def __init__(self, root: Path, index: int, spec: FleetSpec) -> None:
        self.spec = spec
        self.index = index
        self.rng = random.Random(f"kraftwerk-fake-fleet:{spec.seed}:{index}")
        rng = self.rng
        self.name = f"cluster-{index:04d}"
        self.directory = root / self.name
        self.cluster_id = rng_uuid_string(rng)
        self.node_ids = tuple(CONTROLLER_BASE_NODE_ID + i for i in range(spec.controllers_per_cluster))
        names = [name for name, _ in CONTROLLER_RELEASE_WEIGHTS]
        self.release = rng.choices(names, weights=[w for _, w in CONTROLLER_RELEASE_WEIGHTS])[0]
        self.controller_features = RELEASES[self.release].features
        controller_max = self.controller_features[METADATA_VERSION].max_level
        # Brokers: most run the controllers' release; some clusters keep one or two old
        # brokers that block upgrades for good, others have old ones that roll forward.
        has_blockers = index % 3 == 0 or rng.random() < 0.15
        self.plans_unsafe_downgrade = index % 3 == 1 or rng.random() < 0.1
        highest_start = min(LAST_BOOTSTRAP_LEVEL, controller_max)
        if has_blockers:
            # Start low enough that an older release can still join: its maximum is
            # what holds the cluster back.
            older = sorted({rel.features[METADATA_VERSION].max_level for rel in RELEASES.values()
                            if FIRST_BOOTSTRAP_LEVEL <= rel.features[METADATA_VERSION].max_level < controller_max})
            highest_start = min(highest_start, rng.choice(older))
        self.bootstrap_level = rng.randint(FIRST_BOOTSTRAP_LEVEL, highest_start)
        self.budget = spec.records_per_cluster
        self.now_ms = FIRST_TIMESTAMP_MS + index * 3_600_000 + rng.randrange(3_600_000)
        old_releases = [
            name for name, rel in RELEASES.items()
            if self.bootstrap_level <= rel.features[METADATA_VERSION].max_level < controller_max
        ]
        self.clock_origin_ms = self.now_ms
        self.events: list[tuple[int, int, str, int, int]] = []
        self.event_seq = 0
        self.next_broker_id = 1
        self.brokers: dict[int, _Broker] = {}
        count = rng.randint(3, 30)
        old_count = rng.randint(1, 2) if old_releases and (has_blockers or rng.random() < 0.3) else 0
        for position in range(count):
            old = position >= count - old_count
            release = rng.choice(old_releases) if old else self.release
            self._add_broker(release, permanent_blocker=old and has_blockers,
                             start_ms=self.now_ms + 500 + rng.randrange(5000))

        self.leader_index = rng.randrange(len(self.node_ids))
        self.epoch = 0
        self.state = ControllerState(self.cluster_id)
        self.tracker = BrokerHeartbeatTracker(spec.session_timeout_ms)
        self.config = self._controller_config()
        self.next_offset = 0
        self.committed_end = 0
        self.pending: list[MetadataRecord] = []
        self.buffer = bytearray()
        self.flush_bytes = min(max(spec.segment_bytes // 2, 64 * 1024), 4 << 20)
        self.batches = 0
        self.control_records = 0
        self.last_batch_epoch = 0
        self.last_batch_ms = 0
        self.snapshots: list[tuple[int, int]] = []
        self.snapshot_at = sorted(
            int(self.budget * (k + 0.5) / (spec.snapshots_per_cluster + 0.5)) + rng.randrange(max(1, self.budget // 20))
            for k in range(spec.snapshots_per_cluster)
        )
        # Operator actions at record positions, so every cluster gets its feature story
        # however big it is.
        plan: list[tuple[int, str]] = []
        for _ in range(rng.randint(3, 8)):
            plan.append((int(self.budget * rng.uniform(0.05, 0.95)), "upgrade"))
        for _ in range(rng.randint(1, 2)):
            plan.append((int(self.budget * rng.uniform(0.3, 0.95)), "safe_downgrade"))
        if self.plans_unsafe_downgrade:
            plan.append((int(self.budget * rng.uniform(0.45, 0.8)), "unsafe_downgrade"))
        for _ in range(rng.randint(0, 3)):
            plan.append((int(self.budget * rng.uniform(0.1, 0.95)), "failover"))
        self.plan = sorted(plan)

        self.upgrades = self.safe_downgrades = self.unsafe_downgrades = 0
        self.refused_feature_updates = self.refused_registrations = 0
        self.feature_changes: list[FeatureChange] = []
        self.log: MetadataLog | None = None

    # ---- setup --------------------------------------------------------------

    def _controller_config(self) -> cmd.ControllerConfig:
        leader = self.node_ids[self.leader_index]
        return cmd.ControllerConfig(
            node_id=leader, cluster_id=self.cluster_id, supported_features=self.controller_features,
            session_timeout_ms=self.spec.session_timeout_ms,
            quorum_node_ids=tuple(n for n in self.node_ids if n != leader),
        )

    def _quorum_features(self) -> dict[int, NodeFeatures]:
        # Every controller runs the same release; the leader's own ranges are in config.
        return {n: self.controller_features for n in self.config.quorum_node_ids}

    def _add_broker(self, release: str, permanent_blocker: bool, start_ms: int) -> _Broker:
        broker_id = self.next_broker_id
        self.next_broker_id += 1
        rng = self.rng
        broker = _Broker(
            broker_id=broker_id, release=release, permanent_blocker=permanent_blocker,
            log_dirs=[_rng_uuid(rng) for _ in range(rng.randint(1, 3))],
            rack=f"rack-{broker_id % 3}" if self.index % 2 == 0 else None,
        )
        self.brokers[broker_id] = broker
        self._schedule(start_ms, "start", broker)
        return broker

    def node_dir(self, node_id: int) -> Path:
        return self.directory / str(node_id)

    # ---- the log --------------------------------------------------------------

    def _take(self, result: cmd.ControllerResult) -> cmd.ControllerResult:
        """Apply a command's result the loop's way: replay its records at the offsets
        they get (joining the open group commit), then record the heartbeat."""
        records = result.records
        if records:
            if self.next_offset + len(records) > self.budget:
                raise _BudgetReached
            offset = self.next_offset
            for item in records:
                self.state.replay(item, offset)
                offset += 1
            self.next_offset = offset
            self.pending.extend(records)
        if result.heartbeat is not None:
            result.heartbeat.apply(self.tracker)
        return result

    def _commit(self) -> None:
        """Close the open group commit: its records become one batch."""
        if not self.pending:
            return
        base = self.committed_end
        values = [encode_metadata_record(item) for item in self.pending]
        self._append_batch(encode_batch(base, self.epoch, values, self.now_ms), len(values))
        self.pending = []
        if self.snapshot_at and self.committed_end >= self.snapshot_at[0]:
            while self.snapshot_at and self.committed_end >= self.snapshot_at[0]:
                self.snapshot_at.pop(0)
            self._flush()
            assert self.log is not None
            snapshot_id = write_controller_snapshot(
                self.state, self.log.directory, self.committed_end, self.epoch, self.now_ms)
            self.snapshots.append((snapshot_id.end_offset, snapshot_id.epoch))

    def _append_batch(self, data: bytes, count: int) -> None:
        self.buffer += data
        self.committed_end += count
        self.batches += 1
        if len(self.buffer) >= self.flush_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.buffer:
            assert self.log is not None
            self.log.append_raw(bytes(self.buffer))
            self.buffer = bytearray()

    def _begin_epoch(self) -> None:
        """A new leader: KRaft opens the epoch with a LeaderChange control batch, and
        the new active controller starts a session for every unfenced broker."""
        if self.committed_end + 1 > self.budget:
            raise _BudgetReached
        self.epoch += 1
        leader = self.node_ids[self.leader_index]
        others = [n for n in self.node_ids if n != leader]
        granting = sorted([leader] + others[: len(self.node_ids) // 2])
        value = LEADER_CHANGE_MESSAGE.encode(0, {
            "version": 0, "leader_id": leader,
            "voters": [{"voter_id": n} for n in self.node_ids],
            "granting_voters": [{"voter_id": n} for n in granting],
        })
        self._append_batch(
            encode_batch(self.committed_end, self.epoch, [value], self.now_ms, int(ControlRecordType.LEADER_CHANGE)), 1)
        self.next_offset = self.committed_end
        self.control_records += 1
        self.config = self._controller_config()
        self.tracker = BrokerHeartbeatTracker(self.spec.session_timeout_ms)
        self.tracker.activate(self.state, self.now_ms)

    def _failover(self) -> None:
        self._commit()
        self.now_ms += self.rng.randint(500, 3000)  # election
        self.leader_index = (self.leader_index + self.rng.randint(1, len(self.node_ids) - 1)) % len(self.node_ids) \
            if len(self.node_ids) > 1 else 0
        self._begin_epoch()

    # ---- brokers --------------------------------------------------------------

    def _schedule(self, at_ms: int, kind: str, broker: _Broker | None = None) -> None:
        """Queue an event; a broker's events carry its generation, so a status change
        (which bumps it) cancels whatever it had queued."""
        self.event_seq += 1
        if broker is None:
            heapq.heappush(self.events, (at_ms, self.event_seq, kind, -1, 0))
        else:
            heapq.heappush(self.events, (at_ms, self.event_seq, kind, broker.broker_id, broker.generation))

    def _become(self, broker: _Broker, status: str) -> None:
        broker.status = status
        broker.generation += 1

    def _schedule_fence_check(self, broker: _Broker) -> None:
        """The controller checks sessions every FENCE_CHECK_INTERVAL_MS; only the check
        after a silent broker's session ran out can write anything, so that is the one run."""
        contact = self.tracker.contact_ms(broker.broker_id, broker.epoch)
        if contact is None:
            return
        expiry = contact + self.spec.session_timeout_ms + 1
        grid = self.clock_origin_ms + -(-(expiry - self.clock_origin_ms) // FENCE_CHECK_INTERVAL_MS) * FENCE_CHECK_INTERVAL_MS
        self._schedule(grid, "fence_check")

    def _register(self, broker: _Broker, same_incarnation: bool = False) -> None:
        rng = self.rng
        if not same_incarnation:
            broker.incarnation_id = _rng_uuid(rng)
        assert broker.incarnation_id is not None
        version, fields = registration_fields(
            broker.broker_id, self.cluster_id, broker.incarnation_id, broker.release, broker.log_dirs, broker.rack,
            f"broker-{broker.broker_id}.{self.name}.kraftwerk.test")
        result = self._take(cmd.register_broker(
            self.state, self.tracker, fields, version, self.now_ms, self.next_offset, self.config))
        if result.response["error_code"] != ErrorCode.NONE:
            self.refused_registrations += 1
            if result.response["error_code"] == ErrorCode.UNSUPPORTED_VERSION and not broker.permanent_blocker:
                broker.release = self.release  # the operator upgrades the broker and retries
            self._become(broker, OFFLINE)
            self._schedule(self.now_ms + rng.randint(1000, 5000), "start", broker)
            return
        broker.epoch = result.response["broker_epoch"]
        broker.registered_release = broker.release
        if not same_incarnation:
            self._become(broker, RUNNING)
            self._schedule(self.now_ms + rng.randint(50, 500), "heartbeat", broker)
        self._schedule(self.now_ms + rng.randint(*ACTION_DELAY_MS), "action", broker)

    def _heartbeat(self, broker: _Broker, want_shut_down: bool = False) -> cmd.ControllerResult:
        fields = heartbeat_fields(broker.broker_id, broker.epoch, self.committed_end - 1, want_shut_down)
        version = 1 if REGISTRATION_VERSION[broker.release] >= 2 else 0
        return self._take(cmd.broker_heartbeat(self.state, self.tracker, fields, version, self.now_ms, self.config,
                                               next_offset=self.next_offset))

    def _on_heartbeat(self, broker: _Broker) -> None:
        if self._heartbeat(broker).response["error_code"] != ErrorCode.NONE:
            self._become(broker, OFFLINE)  # a stale epoch: the broker registers again
            self._schedule(self.now_ms + self.rng.randint(1000, 5000), "start", broker)
            return
        self._schedule(self.now_ms + HEARTBEAT_INTERVAL_MS + self.rng.randint(-300, 300), "heartbeat", broker)

    def _broker_action(self, broker: _Broker) -> None:
        """A running broker's next life event."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.08:
            # It re-sends its registration (same incarnation): same epoch, state kept.
            self._register(broker, same_incarnation=True)
            return
        if roll < 0.35:
            # A long pause (GC, network): its session runs out and it is fenced; when it
            # comes back its next heartbeat unfences it, with no new registration.
            self._become(broker, PAUSED)
            self._schedule_fence_check(broker)
            self._schedule(self.now_ms + self.spec.session_timeout_ms + rng.randint(1500, 8000), "resume", broker)
            return
        if roll < 0.55:
            # Crash: it stops heartbeating and the session timeout fences it.
            self._become(broker, CRASHED)
            self._schedule_fence_check(broker)
            self._schedule(self.now_ms + rng.randint(8000, 40_000), "start", broker)
        else:
            result = self._heartbeat(broker, want_shut_down=True)
            if (result.response["error_code"] == ErrorCode.NONE and roll < 0.6
                    and not broker.permanent_blocker and broker.release == self.release):
                self._become(broker, RETIRING)  # decommissioned: the operator unregisters it
                self._schedule(self.now_ms + rng.randint(500, 10_000), "unregister", broker)
                return
            self._become(broker, OFFLINE)
            # A restart takes a while; the session of the old incarnation has mostly run
            # out by then (else the controller refuses the new one for a few seconds).
            self._schedule(self.now_ms + rng.randint(8000, 30_000), "start", broker)
        # A restart is when an old, non-blocking broker gets rolled to the new release.
        if not broker.permanent_blocker and broker.release != self.release and rng.random() < 0.5:
            broker.release = self.release

    def _resume(self, broker: _Broker) -> None:
        self._become(broker, RUNNING)
        self._on_heartbeat(broker)
        if broker.status == RUNNING:
            self._schedule(self.now_ms + self.rng.randint(*ACTION_DELAY_MS), "action", broker)

    def _unregister(self, broker: _Broker) -> None:
        request = decoded_request(unregister_api.REQUEST, 0, {"broker_id": broker.broker_id})
        self._take(cmd.unregister_broker(self.state, request, 0, self.config))
        self._become(broker, GONE)
        del self.brokers[broker.broker_id]
        # A replacement joins a while later, on the current release.
        self._add_broker(self.release, permanent_blocker=False, start_ms=self.now_ms + self.rng.randint(2000, 30_000))


    # ---- features -------------------------------------------------------------

    def _update(self, feature: str, level: int, upgrade_type: int, kind: str) -> bool:
        request = decoded_request(update_features_api.REQUEST, UPDATE_FEATURES_VERSION, {
            "timeout_ms": 60_000,
            "feature_updates": [{"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}],
            "validate_only": False,
        })
        before = self.state.finalized_level(feature)
        result = cmd.update_features(self.state, request, UPDATE_FEATURES_VERSION, self.config,
                                     self._quorum_features())
        offset = self.next_offset
        self._take(result)
        if result.response["error_code"] != ErrorCode.NONE:
            self.refused_feature_updates += 1
            return False
        if result.records:
            self.feature_changes.append(FeatureChange(offset, feature, before, level, kind))
            if kind == "upgrade":
                self.upgrades += 1
            elif kind == "safe_downgrade":
                self.safe_downgrades += 1
            else:
                self.unsafe_downgrades += 1
        return True

    def _operator(self, action: str) -> None:
        rng = self.rng
        current = self.state.metadata_version
        assert current is not None
        controller_max = self.controller_features[METADATA_VERSION].max_level
        if action == "failover":
            self._failover()
        elif action == "upgrade":
            if current < controller_max:
                target = min(current + rng.choice((1, 1, 1, 2, 3)), controller_max)
                if not self._update(METADATA_VERSION, target, cmd.UPGRADE, "upgrade") and target > current + 1:
                    self._update(METADATA_VERSION, current + 1, cmd.UPGRADE, "upgrade")
                return
            for feature in (GROUP_VERSION, TRANSACTION_VERSION):
                supported = self.controller_features.get(feature)
                level = self.state.finalized_level(feature)
                if supported is not None and level < supported.max_level:
                    self._update(feature, level + 1, cmd.UPGRADE, "upgrade")
                    return
        elif action == "safe_downgrade":
            lossless = [lvl for lvl in range(ft.MINIMUM_BOOTSTRAP_VERSION.level, current)
                        if ft.is_lossless_downgrade(current, lvl)]
            if lossless:
                self._update(METADATA_VERSION, rng.choice(lossless), cmd.SAFE_DOWNGRADE, "safe_downgrade")
            elif current > ft.MINIMUM_BOOTSTRAP_VERSION.level:
                # The operator asks anyway and is refused: it would lose metadata.
                self._update(METADATA_VERSION, current - 1, cmd.SAFE_DOWNGRADE, "safe_downgrade")
        elif action == "unsafe_downgrade":
            changed = [v.level for v in ft.METADATA_VERSIONS
                       if v.did_metadata_change and v.level <= current]
            target = changed[-1] - 1 if changed else 0
            if target >= ft.MINIMUM_BOOTSTRAP_VERSION.level:
                self._update(METADATA_VERSION, target, cmd.UNSAFE_DOWNGRADE, "unsafe_downgrade")

    # ---- the story ------------------------------------------------------------

    def _handle(self, kind: str, broker: _Broker) -> None:
        if kind == "heartbeat":
            self._on_heartbeat(broker)
        elif kind == "action":
            self._broker_action(broker)
        elif kind == "start":
            self._register(broker)
        elif kind == "resume":
            self._resume(broker)
        elif kind == "unregister":
            self._unregister(broker)

    def _run_events(self) -> None:
        """Events in time order. Records of events within GROUP_COMMIT_LINGER_MS of the
        first one of a batch join that batch (the loop's group commit)."""
        max_events = MAX_EVENTS_PER_RECORD * self.budget
        batch_start_ms = self.now_ms
        for _ in range(max_events):
            at_ms, _, kind, broker_id, generation = heapq.heappop(self.events)
            if self.pending and at_ms > batch_start_ms + GROUP_COMMIT_LINGER_MS:
                self._commit()
            self.now_ms = max(self.now_ms, at_ms)
            if not self.pending:
                batch_start_ms = self.now_ms
            if kind == "fence_check":
                self._take(cmd.fence_expired_brokers(self.state, self.tracker, self.now_ms, self.config))
            else:
                broker = self.brokers.get(broker_id)
                if broker is not None and broker.generation == generation:
                    self._handle(kind, broker)
            while self.plan and self.next_offset >= self.plan[0][0]:
                self._operator(self.plan.pop(0)[1])
        raise RuntimeError(f"{self.name}: the story did not fill {self.budget} records in {max_events} events")


    def write(self) -> ClusterSummary:
        spec = self.spec
        for node_id in self.node_ids:
            directory = self.node_dir(node_id)
            directory.mkdir(parents=True, exist_ok=False)
        bootstrap = cmd.bootstrap_records(self.bootstrap_level)
        first = self.node_dir(self.node_ids[0])
        self.log = MetadataLog.open(first / METADATA_LOG_DIR_NAME, LogConfig(segment_bytes=spec.segment_bytes))
        try:
            self._begin_epoch()
            # The first leader writes the format-time records as one batch.
            self._take(cmd.ControllerResult(list(bootstrap), {}))
            self._commit()
            try:
                self._run_events()
            except _BudgetReached:
                pass
            # The command that did not fit wrote nothing; what the tick took so far stands.
            self._commit()
            self._flush()
            segments = sum(1 for name in os.listdir(self.log.directory) if name.endswith(".log"))
        finally:
            self.log.close()
        # The lock file only matters while a process has the log open; leaving it out
        # keeps every copy the same set of files.
        (first / METADATA_LOG_DIR_NAME / LOCK_FILE_NAME).unlink(missing_ok=True)
        self._write_node_files(bootstrap)
        return self._summary(segments)

    def _write_node_files(self, bootstrap: list[MetadataRecord]) -> None:
        rng = self.rng
        source = self.node_dir(self.node_ids[0]) / METADATA_LOG_DIR_NAME
        names = sorted(name for name in os.listdir(source) if name != LOCK_FILE_NAME)
        voters = ",".join(f"{n}@controller-{n}.{self.name}.kraftwerk.test:9093" for n in self.node_ids)
        for node_id in self.node_ids:
            directory = self.node_dir(node_id)
            if node_id != self.node_ids[0]:
                target = directory / METADATA_LOG_DIR_NAME
                target.mkdir()
                for name in names:
                    shutil.copyfile(source / name, target / name)
            write_meta_properties(directory, MetaProperties(
                cluster_id=self.cluster_id, node_id=node_id, directory_id=rng_uuid_string(rng)))
            if not list_snapshots(directory / METADATA_LOG_DIR_NAME):
                # A static quorum (kraft.version 0). A running controller deletes it with
                # its first snapshot, so only a fleet without snapshots still has it.
                # Timestamp 0: a fleet is a function of its seed.
                write_bootstrap_snapshot(directory, bootstrap, timestamp_ms=0)
            properties = {
                "node.id": str(node_id),
                "process.roles": "controller",
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://controller-{node_id}.{self.name}.kraftwerk.test:9093",
                "controller.listener.names": "CONTROLLER",
                "log.segment.bytes": str(self.spec.segment_bytes),
                "broker.session.timeout.ms": str(self.spec.session_timeout_ms),
                "kraftwerk.release": self.release,
            }
            text = "# kraftwerk controller (written by pipeline/fake_fleet.py)\n" + "".join(
                f"{key}={value}\n" for key, value in properties.items())
            (directory / NODE_PROPERTIES_FILE_NAME).write_text(text, encoding="latin-1")

    def _summary(self, segments: int) -> ClusterSummary:
        # Brokers the story tracks but that never got registered have no summary entry.
        registered = tuple(
            BrokerSummary(b.broker_id, str(self.brokers[b.broker_id].registered_release), b.epoch, b.fenced)
            for b in (self.state.brokers[i] for i in sorted(self.state.brokers))
        )
        return ClusterSummary(
            name=self.name,
            cluster_id=self.cluster_id,
            node_ids=self.node_ids,
            controller_release=self.release,
            bootstrap_level=self.bootstrap_level,
            finalized_levels=dict(self.state.finalized_levels),
            brokers=registered,
            readiness=upgrade_readiness(self.state, self.controller_features),
            upgrades=self.upgrades,
            safe_downgrades=self.safe_downgrades,
            unsafe_downgrades=self.unsafe_downgrades,
            refused_feature_updates=self.refused_feature_updates,
            refused_registrations=self.refused_registrations,
            feature_changes=tuple(self.feature_changes),
            records=self.committed_end,
            control_records=self.control_records,
            batches=self.batches,
            leader_epochs=self.epoch,
            snapshots=tuple(self.snapshots),
            segments=segments,
        )


# --------------------------------------------------------------------------
# The fleet
# --------------------------------------------------------------------------


def write_cluster(out: Path, spec: FleetSpec, index: int) -> ClusterSummary:
    """Writes cluster number `index` of the fleet (a fresh `<out>/cluster-NNNN`)."""
    return _ClusterStory(Path(out), index, spec).write()


def write_fleet(out: Path, spec: FleetSpec, progress: Callable[[str], None] | None = None,
                workers: int = 1) -> FleetSummary:
    """Writes every cluster of `spec` under `out` (which must not hold them yet) and
    returns what was written. `workers` > 1 writes clusters in that many processes;
    the bytes are the same either way."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    summaries: list[ClusterSummary] = []
    indexes = range(spec.clusters)

    def report(summary: ClusterSummary) -> None:
        summaries.append(summary)
        if progress is not None:
            progress(f"[{len(summaries)}/{spec.clusters}] {summary.one_line()}")

    if workers > 1 and spec.clusters > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for summary in pool.map(write_cluster, [out] * spec.clusters, [spec] * spec.clusters, indexes):
                report(summary)
    else:
        for index in indexes:
            report(write_cluster(out, spec, index))
    return FleetSummary(spec, tuple(summaries), sum(s.records for s in summaries),
                        write_seconds=time.monotonic() - started)


def fake_fleet_command(clusters: int, records: int, out: str | os.PathLike[str], seed: int = 1,
                       progress: Callable[[str], None] | None = print, workers: int | None = None,
                       segment_bytes: int = 1 << 20) -> int:
    """`kraftwerk pipeline fake-fleet --clusters N --records M --out DIR`: `records` is
    the whole fleet's record count, split evenly over the clusters. Prints one line per
    cluster and a total; returns the exit status (0; bad arguments raise ValueError)."""
    emit = progress or (lambda line: None)
    per_cluster = max(records // max(clusters, 1), 0)
    spec = FleetSpec(clusters=clusters, records_per_cluster=per_cluster, seed=seed, segment_bytes=segment_bytes)
    if workers is None:
        workers = min(os.cpu_count() or 1, clusters)
    emit(f"writing {clusters} clusters x {per_cluster} records (seed {seed}) to {out} with {workers} workers")
    summary = write_fleet(Path(out), spec, emit, workers=workers)
    rate = summary.total_records / summary.write_seconds if summary.write_seconds > 0 else 0.0
    emit(f"wrote {summary.total_records} records in {len(summary.clusters)} clusters "
         f"in {summary.write_seconds:.1f}s ({rate:,.0f} records/s)")
    return 0
