"""Pure controller commands: (image, decoded request) -> records + response.

Owns: `ControllerConfig`, `ControllerResult`, `HeartbeatUpdate` and one function
per controller operation (UpdateFeatures, BrokerRegistration, BrokerHeartbeat,
UnregisterBroker, session expiry, bootstrap), plus read-only views of the image
(`registered_brokers`, `finalized_features_for_api_versions`). Topic, ACL and
SCRAM commands live in `topics`, `acl_commands` and `scram_commands`.

Rules kept here:
- Commands never mutate `ControllerState` or `BrokerHeartbeatTracker`. The
  single-writer loop appends `result.records`, replays them at the offsets they
  got, then applies `result.heartbeat` to the tracker.
- Validation is all-or-nothing: a rejected command returns no records.
- Error codes and message texts are Kafka's (FACTS.md §8-9); where Kafka's order
  is a HashMap's, we use the request's order, which is deterministic.
- Requests are decoded Containers (snake_case keys); responses are plain dicts
  with the response schema's snake_case keys, ready for `RESPONSE.encode`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import MetadataRecord, record
from server.controller import downgrade
from server.controller import features as ft
from server.controller import partitions
from server.controller.features import (
    DISABLED,
    KRAFT_VERSION,
    METADATA_VERSION,
    MINIMUM_BOOTSTRAP_VERSION,
    MINIMUM_KRAFT_VERSION,
    NodeFeatures,
    SupportedRange,
)
from server.controller.state import (
    FENCING_CHANGE_FENCE,
    FENCING_CHANGE_UNFENCE,
    SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN,
    SCRAM_IN_METADATA_LEVEL,
    BrokerHeartbeatTracker,
    BrokerRegistration,
    ControllerState,
)
from server.values import BrokerEpoch, NodeId, Offset

# UpdateFeatures UpgradeType values (Kafka's FeatureUpdate.UpgradeType).
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3

UPDATE_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    node_id: NodeId
    cluster_id: str
    supported_features: NodeFeatures = field(default_factory=lambda: ft.local_supported_features(False))
    session_timeout_ms: int = 9000
    # Voters other than this node. The commands do not read it: `update_features` checks
    # the other controllers through its `quorum_features` argument, which the caller
    # builds for these ids (pipeline/fake_fleet.py does so from this field).
    quorum_node_ids: tuple[NodeId, ...] = ()
    # KIP-866: this controller runs a ZooKeeper migration (kafka.metadata.migration.enable).
    migration_enabled: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatUpdate:
    """Tell the loop to record a broker's contact in the `BrokerHeartbeatTracker`."""

    broker_id: NodeId
    broker_epoch: BrokerEpoch
    contact_ms: int
    metadata_offset: int = -1  # what the heartbeat reported replayed
    # Set while the broker is in controlled shutdown: the offset its leaderships moved by.
    controlled_shutdown_offset: int | None = None

    def apply(self, tracker: BrokerHeartbeatTracker) -> None:
        tracker.update_contact(self.broker_id, self.broker_epoch, self.contact_ms)
        tracker.update_metadata_offset(self.broker_id, self.broker_epoch, self.metadata_offset)
        if self.controlled_shutdown_offset is not None:
            tracker.note_controlled_shutdown(self.broker_id, self.broker_epoch, self.controlled_shutdown_offset)


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """What a command decided. `atomic` asks the loop to append `records` as one batch
    (all or none visible); `error_message` carries the reason for responses whose
    schema has no message field, for logs."""

    records: list[MetadataRecord]
    response: dict[str, Any]
    heartbeat: HeartbeatUpdate | None = None
    atomic: bool = False
    error_message: str | None = None
    # UpdateFeatures: the kraft.version level to upgrade to, which the Raft layer writes
    # (KRaftVersionRecord and the voters, KIP-853) once this result's records commit.
    kraft_version_upgrade: int | None = None
    # The records replay exactly as their encoding decodes (every field a replay reads is
    # given at its version, as the decoder would give it): the active controller may
    # replay these objects once their batch commits instead of decoding its own batch
    # again (server/controller/replayer.py, `expect_own_batch`). Set only where a test
    # proves it (the migration's copy: tests/migration/test_copy_commands.py).
    records_as_decoded: bool = False
    # `encode_metadata_record` of each record, when the command has them already (the
    # migration's copy encodes its records in a worker thread while it plans them, before
    # its transaction holds other writes): the loop proposes these bytes as they are.
    values: list[bytes] | None = None


# _check_feature_update's answer for a kraft.version upgrade: no metadata record, the Raft
# layer's records instead (a sentinel, never written).
KRAFT_VERSION_UPGRADE: Any = object()


class NotBootstrappedError(RuntimeError):
    """A command ran before metadata.version was finalized: a loop bug, since the
    controller must write its bootstrap records before it serves requests."""


def _require_metadata_version(state: ControllerState) -> int:
    level = state.metadata_version
    if level is None:
        raise NotBootstrappedError("metadata.version is not finalized yet")
    return level


def _field(data: Any, key: str, default: Any = None) -> Any:
    value = data.get(key, default) if hasattr(data, "get") else getattr(data, key, default)
    return default if value is None else value


def feature_level_record(name: str, level: int) -> MetadataRecord:
    return record(mr.FEATURE_LEVEL_RECORD, {"name": name, "feature_level": level}, version=0)


# ---------------------------------------------------------------------------
# UpdateFeatures (API 57, v0-2)
# ---------------------------------------------------------------------------


def _support_error(level: int, who: str, supported: SupportedRange) -> str | None:
    """Kafka's QuorumFeatures.reasonNotSupported."""
    if supported.contains(level):
        return None
    if supported.max_level == 0:
        return f"{who} does not support this feature."
    return f"{who} only supports versions {supported}"


def _invalid_update_version(feature: str, level: int, reason: str) -> str:
    return f"Invalid update version {level} for feature {feature}. {reason}"


def _invalid_metadata_version(level: int, reason: str) -> str:
    return f"Invalid metadata.version {level}. {reason}"


def _unsupported_metadata_downgrade(current: int, level: int, reason: str) -> str:
    # Kafka 4.x names both levels when it refuses a downgrade it knows (a lossy one).
    return f"Unsupported metadata.version downgrade from {current} to {level}. {reason}"


def _check_feature_update(
    state: ControllerState,
    config: ControllerConfig,
    feature: str,
    level: int,
    upgrade_type: int,
    proposed: Mapping[str, int],
    quorum_features: Mapping[NodeId, NodeFeatures | None] | None = None,
    kraft_version: int | None = None,
) -> tuple[str | None, MetadataRecord | None]:
    """(error message, record to write) for one update, in Kafka's check order."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _invalid_update_version(feature, level, "The controller does not support the given upgrade type."), None
    if feature == METADATA_VERSION:
        current = _require_metadata_version(state)
    elif feature == KRAFT_VERSION and kraft_version is not None:
        current = kraft_version  # the Raft layer's level, ahead of any image (Kafka asks the raft client too)
    else:
        current = state.finalized_level(feature)
    if level < 0:
        return _invalid_update_version(feature, level, "A feature version cannot be less than 0."), None

    reason = _support_error(
        level, f"Local controller {config.node_id}", config.supported_features.get(feature, DISABLED)
    )
    if reason is None:
        for broker_id in sorted(state.brokers):
            reason = _support_error(level, f"Broker {broker_id}", state.brokers[broker_id].supported(feature))
            if reason is not None:
                break
    if reason is None and quorum_features:
        # KIP-778: every controller of the quorum must support the level too. Their
        # ranges come from their ApiVersions (kraftwerk has no controller registration
        # records yet); from 3.7-IV0 on, Kafka also refuses when a controller's ranges
        # are unknown, and so do we.
        require_known = ft.controller_registration_supported(_require_metadata_version(state))
        for controller_id in sorted(quorum_features):
            supported = quorum_features[controller_id]
            if supported is None:
                if require_known:
                    reason = f"controller {controller_id} has not registered, and may not support this feature"
                    break
                continue
            reason = _support_error(level, f"Controller {controller_id}", supported.get(feature, DISABLED))
            if reason is not None:
                break
    if reason is not None:
        return _invalid_update_version(feature, level, reason), None

    if level < current and upgrade_type == UPGRADE:
        return _invalid_update_version(
            feature,
            level,
            "Can't downgrade the version of this feature without setting the "
            "upgrade type to either safe or unsafe downgrade.",
        ), None
    if level > current and upgrade_type != UPGRADE:
        return _invalid_update_version(feature, level, "Can't downgrade to a newer version."), None

    if feature == METADATA_VERSION:
        return _check_metadata_version_update(current, level, upgrade_type, proposed)

    if feature != KRAFT_VERSION:
        # Kafka's Feature.featureFromName / fromFeatureLevel(level, true): reached by a
        # feature every node supports only at 0 ("disable" of a name Kafka does not know).
        if feature not in ft.FEATURES:
            return _invalid_update_version(feature, level, f"Feature {feature} not found."), None
        unknown_level = ft.feature_level_error(feature, level, unstable_enabled=True)
        if unknown_level is not None:
            return _invalid_update_version(feature, level, unknown_level), None
    dependency = ft.dependency_error(feature, level, proposed)
    if dependency is None and level < current:
        dependency = _dependents_reason(feature, proposed)
    if dependency is not None:
        return _invalid_update_version(feature, level, dependency), None

    if feature == KRAFT_VERSION:
        # The Raft layer writes kraft.version (server/raft/driver.py upgrade_kraft_version);
        # the same level is a no-op and a downgrade is refused, as Kafka refuses it.
        if level == current:
            return None, None
        if level < current:
            return _invalid_update_version(feature, level, "Can't downgrade the version of this feature."), None
        return None, KRAFT_VERSION_UPGRADE
    return None, feature_level_record(feature, level)


def _dependents_reason(feature: str, proposed: Mapping[str, int]) -> str | None:
    """Why lowering `feature` to its level in `proposed` would leave another feature
    without what it depends on (kraftwerk's check: Kafka 4.4 refuses every downgrade
    that could get here as lossy, or unsafe ones outright)."""
    blocked = ft.blocked_dependent(feature, proposed)
    if blocked is None:
        return None
    dependent, dependent_level, needed = blocked
    return (f"{dependent}={dependent_level} depends on {feature} level {needed}; "
            f"lower or disable {dependent} in the same request.")


def _check_metadata_version_update(
    current: int, level: int, upgrade_type: int, proposed: Mapping[str, int]
) -> tuple[str | None, MetadataRecord | None]:
    if ft.find_metadata_version(level) is None:
        return _invalid_metadata_version(level, "Unknown metadata.version."), None
    if level < MINIMUM_BOOTSTRAP_VERSION.level:
        return _invalid_metadata_version(
            level, f"Unable to set a metadata.version less than {MINIMUM_BOOTSTRAP_VERSION}"
        ), None
    if level < current and not ft.is_lossless_downgrade(current, level) and upgrade_type != UNSAFE_DOWNGRADE:
        return _unsupported_metadata_downgrade(
            current, level, "Refusing to perform the requested downgrade because it might delete metadata information."
        ), None
    if level < current:
        # A finalized feature level that needs a higher metadata.version (ELR 1 needs
        # 4.0-IV1) must go down with it, or the image would hold a level its own
        # metadata.version cannot carry.
        reason = _dependents_reason(METADATA_VERSION, proposed)
        if reason is not None:
            return _unsupported_metadata_downgrade(current, level, reason), None
    # An UNSAFE lossy downgrade is KIP-778's, which Kafka never shipped: the image is
    # projected to the lower level when the record is replayed (server/controller/downgrade.py).
    return None, feature_level_record(METADATA_VERSION, level)


def _update_features_response(
    api_version: int, error_code: int, error_message: str | None, features: list[str]
) -> dict[str, Any]:
    response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": error_code, "error_message": error_message}
    if api_version <= 1:
        # Per-feature results exist only in v0-1, and only on success. Kafka fills the
        # message from Errors.NONE.message(), which reads "NONE".
        response["results"] = (
            [{"feature": name, "error_code": 0, "error_message": "NONE"} for name in features]
            if error_code == ErrorCode.NONE
            else []
        )
    return response


def update_features_refusal(api_version: int, error_code: int, error: str | None) -> dict[str, Any]:
    """An UpdateFeatures response refusing the whole request for `error` (one feature's)."""
    return _update_features_response(api_version, error_code, UPDATE_FAILED_PREFIX + (error or ""), [])


def update_features(
    state: ControllerState,
    request: Any,
    api_version: int,
    config: ControllerConfig,
    quorum_features: Mapping[NodeId, NodeFeatures | None] | None = None,
    kraft_version: int | None = None,
) -> ControllerResult:
    """UpdateFeatures v0-2, Kafka's QuorumController/FeatureControlManager semantics.
    `kraft_version`: the level the Raft layer has (KIP-853), when known.

    v0 has AllowDowngrade instead of UpgradeType; Kafka's controller reads
    UpgradeType, which in v0 is always its default (1, upgrade), so AllowDowngrade
    is ignored here too (FACTS §8; KIP-584 meant it to allow downgrades).
    Updates are checked in request order (Kafka: HashMap order); the first error
    aborts all of them.
    """
    _require_metadata_version(state)
    updates = list(_field(request, "feature_updates", []))
    validate_only = bool(_field(request, "validate_only", False)) if api_version >= 1 else False
    names = [_field(update, "feature") for update in updates]

    seen: set[str] = set()
    for name in names:
        if name in seen:
            # Kafka's controller keeps the last of duplicate entries in a HashMap; we
            # refuse the request instead, because two levels for one feature leave the
            # operator's intent ambiguous (a deliberate difference from Kafka).
            message = f"Duplicate feature update for {name}."
            return ControllerResult([], _update_features_response(api_version, ErrorCode.INVALID_REQUEST, message, []), error_message=message)
        seen.add(name)

    proposed = dict(state.all_finalized_levels())
    for update in updates:
        proposed[_field(update, "feature")] = _field(update, "max_version_level")

    records: list[MetadataRecord] = []
    kraft_version_upgrade = None
    for update in updates:
        upgrade_type = UPGRADE if api_version == 0 else _field(update, "upgrade_type", UPGRADE)
        error, new_record = _check_feature_update(
            state, config, _field(update, "feature"), _field(update, "max_version_level"), upgrade_type, proposed,
            quorum_features, kraft_version,
        )
        if error is not None:
            message = UPDATE_FAILED_PREFIX + error
            return ControllerResult(
                [],
                _update_features_response(api_version, ErrorCode.INVALID_UPDATE_VERSION, message, []),
                error_message=message,
            )
        if new_record is KRAFT_VERSION_UPGRADE:
            kraft_version_upgrade = _field(update, "max_version_level")
        elif new_record is not None:
            records.append(new_record)

    # KIP-778: an UNSAFE downgrade says what it drops (kraftwerk's message; Kafka never
    # shipped lossy downgrades). A dry run says what it would drop.
    note = unsafe_downgrade_note(state, records)
    if validate_only:
        records = []
    return ControllerResult(records, _update_features_response(api_version, ErrorCode.NONE, note, names),
                            atomic=True, kraft_version_upgrade=kraft_version_upgrade)


def _image_losses(state: ControllerState, from_level: int, to_level: int) -> list[str]:
    """What the projection in `ControllerState._project_image` drops besides registrations:
    partition log directories below 3.7-IV2, the ZK migration state below 3.4-IV0, SCRAM
    credentials below 3.5-IV2."""
    lines = []
    if ft.directory_assignment_supported(from_level) and not ft.directory_assignment_supported(to_level):
        count = sum(1 for topic in state.topics().values() for p in topic.partitions.values() if p.directories)
        if count:
            lines.append(f"{count} partition(s): PartitionRecord.Directories "
                         f"(since {ft.metadata_version_from_level(ft.IBP_3_7_IV2)})")
    if from_level >= ft.IBP_3_4_IV0 > to_level and state.zk_migration_state != 0:
        lines.append(f"ZkMigrationStateRecord = {state.zk_migration_state} "
                     f"(since {ft.metadata_version_from_level(ft.IBP_3_4_IV0)})")
    if from_level >= SCRAM_IN_METADATA_LEVEL > to_level and state.scram_credentials():
        users = sorted({user for user, _ in state.scram_credentials()})
        lines.append(f"{len(users)} SCRAM user(s): UserScramCredentialRecord "
                     f"(since {ft.metadata_version_from_level(SCRAM_IN_METADATA_LEVEL)}): {', '.join(users)}")
    return lines


def unsafe_downgrade_note(state: ControllerState, records: list[MetadataRecord]) -> str | None:
    """What a lossy metadata.version downgrade among `records` drops from `state`, or None."""
    current = state.metadata_version
    for item in records:
        if item.data["name"] != METADATA_VERSION or current is None:
            continue
        level = item.data["feature_level"]
        if level >= current or ft.is_lossless_downgrade(current, level):
            continue
        lost = downgrade.losses(state.brokers.values(), current, level)
        lost.extend(_image_losses(state, current, level))
        types = downgrade.dropped_record_types(current, level)
        note = (f"UNSAFE downgrade of metadata.version from {ft.metadata_version_from_level(current)} to "
                f"{ft.metadata_version_from_level(level)} drops: "
                + ("; ".join(lost) if lost else "no metadata this cluster holds"))
        if types:
            note += f". No longer written below it: {', '.join(types)}"
        return note + "."
    return None


# ---------------------------------------------------------------------------
# BrokerRegistration (API 62, v0-4)
# ---------------------------------------------------------------------------


def _is_reserved_directory(directory: uuid.UUID) -> bool:
    """Kafka's DirectoryId.reserved: the first 100 ids with a zero high half."""
    value = directory.int
    return (value >> 64) == 0 and (value & ((1 << 64) - 1)) < 100


def _registration_error(code: ErrorCode, message: str) -> ControllerResult:
    return ControllerResult(
        [], {"throttle_time_ms": 0, "error_code": code, "broker_epoch": -1}, error_message=message
    )


def register_broker(
    state: ControllerState,
    tracker: BrokerHeartbeatTracker,
    request: Any,
    api_version: int,
    now_ms: int,
    next_offset: Offset,
    config: ControllerConfig,
) -> ControllerResult:
    """BrokerRegistration v0-4 (Kafka's ClusterControlManager.registerBroker).

    `next_offset` is the offset the RegisterBrokerRecord will get: a new
    incarnation's broker epoch. The same incarnation re-registering keeps its epoch
    and its fenced / controlled-shutdown state (KAFKA-16952).
    Features a v0-3 request lists with min 0 are taken as sent: dropping them is
    the client's job (KAFKA-17011), Kafka's controller does not.
    """
    mv = _require_metadata_version(state)
    cluster_id = _field(request, "cluster_id")
    if cluster_id != config.cluster_id:
        return _registration_error(
            ErrorCode.INCONSISTENT_CLUSTER_ID, f"Expected cluster ID {config.cluster_id}, but got cluster ID {cluster_id}"
        )
    broker_id = _field(request, "broker_id")
    incarnation_id = _field(request, "incarnation_id")
    existing = state.broker(broker_id)
    if api_version >= 1 and _field(request, "is_migrating_zk_broker", False):
        if not config.migration_enabled:
            return _registration_error(
                ErrorCode.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers."
            )
        # KIP-866 as kraftwerk runs it: the controller registers ZooKeeper brokers from
        # ZooKeeper (their liveness is their session), so a ZooKeeper broker's own
        # registration is a handshake: it learns its KRaft broker epoch, nothing is written.
        if existing is not None and existing.is_migrating_zk_broker and not existing.fenced:
            return ControllerResult([], {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                                         "broker_epoch": existing.epoch})
        return _registration_error(
            ErrorCode.REQUEST_TIMED_OUT,
            f"Broker {broker_id} is not yet registered from ZooKeeper (the migration copies the brokers); retry.")
    if (
        existing is not None
        and existing.incarnation_id != incarnation_id
        and tracker.has_valid_session(broker_id, existing.epoch, now_ms)
    ):
        return _registration_error(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id."
        )
    if existing is not None and existing.is_migrating_zk_broker and not existing.fenced:
        # KIP-866: a ZooKeeper-mode broker with this id is alive (its ZooKeeper session);
        # it is fenced once that session ends, and this broker's retry then succeeds.
        return _registration_error(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"Broker {broker_id} is still registered in ZooKeeper mode; it must stop first.")
    log_dirs = list(_field(request, "log_dirs", [])) if api_version >= 2 else []
    if ft.directory_assignment_supported(mv):
        if not log_dirs:
            return _registration_error(ErrorCode.INVALID_REGISTRATION, "No directories specified in request")
        if any(_is_reserved_directory(d) for d in log_dirs):
            return _registration_error(ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            return _registration_error(ErrorCode.INVALID_REGISTRATION, "Duplicate directory ID in request")
        for directory in log_dirs:
            owner = state.directory_owner(directory)
            if owner is not None and owner != broker_id:
                return _registration_error(
                    ErrorCode.INVALID_REGISTRATION,
                    f"Broker {owner} is already registered with directory {directory}",
                )

    finalized = state.all_finalized_levels()
    requested: list[tuple[str, SupportedRange]] = [
        (
            _field(f, "name"),
            SupportedRange(_field(f, "min_supported_version"), _field(f, "max_supported_version")),
        )
        for f in _field(request, "features", [])
    ]
    if not any(name == METADATA_VERSION for name, _ in requested):
        # A broker that sends no metadata.version range only runs the first one.
        requested.append((METADATA_VERSION, SupportedRange(MINIMUM_KRAFT_VERSION.level, MINIMUM_KRAFT_VERSION.level)))
    checks = list(requested)
    listed = {name for name, _ in requested}
    checks += [(name, DISABLED) for name, level in finalized.items() if level != 0 and name not in listed]
    for name, supported in checks:
        level = finalized.get(name, 0)
        if not supported.contains(level):
            return _registration_error(
                ErrorCode.UNSUPPORTED_VERSION,
                f"Unable to register because the broker does not support finalized version {level} of {name}. "
                f"The broker wants a version between {supported.min_level} and {supported.max_level}, inclusive.",
            )

    same_incarnation = existing is not None and existing.incarnation_id == incarnation_id
    epoch = existing.epoch if same_incarnation else next_offset
    fenced = existing.fenced if same_incarnation else True
    in_controlled_shutdown = existing.in_controlled_shutdown if same_incarnation else False
    version = ft.register_broker_record_version(mv)
    data: dict[str, Any] = {
        "broker_id": broker_id,
        "incarnation_id": incarnation_id,
        "broker_epoch": epoch,
        "end_points": [
            {
                "name": _field(listener, "name"),
                "host": _field(listener, "host"),
                "port": _field(listener, "port"),
                "security_protocol": _field(listener, "security_protocol"),
            }
            for listener in _field(request, "listeners", [])
        ],
        "features": [
            {"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
            for name, r in requested
        ],
        "rack": _field(request, "rack"),
        "fenced": fenced,
    }
    if version >= 1:
        data["in_controlled_shutdown"] = in_controlled_shutdown
    if version >= 3:
        data["log_dirs"] = log_dirs
    return ControllerResult(
        [record(mr.REGISTER_BROKER_RECORD, data, version=version)],
        {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "broker_epoch": epoch},
        atomic=True,
    )


# ---------------------------------------------------------------------------
# BrokerHeartbeat (API 63, v0-1)
# ---------------------------------------------------------------------------

FENCED = "fenced"
UNFENCED = "unfenced"
CONTROLLED_SHUTDOWN = "controlled_shutdown"
SHUTDOWN_NOW = "shutdown_now"


def fence_record(state: ControllerState, registration: BrokerRegistration) -> MetadataRecord:
    mv = _require_metadata_version(state)
    if ft.broker_registration_change_record_supported(mv):
        return record(
            mr.BROKER_REGISTRATION_CHANGE_RECORD,
            {"broker_id": registration.broker_id, "broker_epoch": registration.epoch, "fenced": FENCING_CHANGE_FENCE},
            version=0,
        )
    return record(mr.FENCE_BROKER_RECORD, {"id": registration.broker_id, "epoch": registration.epoch}, version=0)


def unfence_record(state: ControllerState, registration: BrokerRegistration) -> MetadataRecord:
    mv = _require_metadata_version(state)
    if ft.broker_registration_change_record_supported(mv):
        return record(
            mr.BROKER_REGISTRATION_CHANGE_RECORD,
            {"broker_id": registration.broker_id, "broker_epoch": registration.epoch, "fenced": FENCING_CHANGE_UNFENCE},
            version=0,
        )
    return record(mr.UNFENCE_BROKER_RECORD, {"id": registration.broker_id, "epoch": registration.epoch}, version=0)


def _controlled_shutdown_records(state: ControllerState, registration: BrokerRegistration) -> list[MetadataRecord]:
    mv = _require_metadata_version(state)
    if not ft.in_controlled_shutdown_state_supported(mv):
        return []
    return [
        record(
            mr.BROKER_REGISTRATION_CHANGE_RECORD,
            {
                "broker_id": registration.broker_id,
                "broker_epoch": registration.epoch,
                "in_controlled_shutdown": SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN,
            },
            version=1,
        )
    ]


def _cordoned_log_dirs_records(state: ControllerState, registration: BrokerRegistration, request: Any,
                               api_version: int) -> list[MetadataRecord]:
    """KIP-1066: a heartbeat (v2+) naming a different set of cordoned log directories
    than the registration holds is recorded (from metadata.version 4.3-IV0); null in
    the heartbeat means the broker does not say yet."""
    cordoned = _field(request, "cordoned_log_dirs") if api_version >= 2 else None
    mv = state.metadata_version
    if cordoned is None or mv is None or not ft.cordoned_log_dirs_supported(mv):
        return []
    known = registration.cordoned_log_dirs
    if known is not None and set(known) == set(cordoned):
        return []
    return [record(mr.BROKER_REGISTRATION_CHANGE_RECORD, {
        "broker_id": registration.broker_id, "broker_epoch": registration.epoch,
        "cordoned_log_dirs": list(cordoned)}, version=3)]


def _next_broker_state(current: str, want_fence: bool, want_shut_down: bool, caught_up: bool, has_leaderships: bool,
                       others_replayed_shutdown: bool) -> str:
    """Kafka's BrokerHeartbeatManager.calculateNextBrokerState."""
    if current == FENCED:
        if want_shut_down:
            return SHUTDOWN_NOW
        if not want_fence and caught_up:
            return UNFENCED
        return FENCED
    if current == UNFENCED:
        if want_fence:
            return SHUTDOWN_NOW if want_shut_down else FENCED
        if want_shut_down:
            return CONTROLLED_SHUTDOWN if has_leaderships else SHUTDOWN_NOW
        return UNFENCED
    if current == CONTROLLED_SHUTDOWN:
        # Entering controlled shutdown moved every leadership it could; one left means a
        # partition still has it as leader, and the broker must wait. So it does until
        # every active broker has replayed the moves: clients it sends away are told
        # the new leaders wherever they ask.
        return SHUTDOWN_NOW if not has_leaderships and others_replayed_shutdown else CONTROLLED_SHUTDOWN
    return SHUTDOWN_NOW


def _lowest_active_offset(state: ControllerState, tracker: BrokerHeartbeatTracker) -> int | None:
    """The lowest metadata offset the active brokers (unfenced, not shutting down) last
    reported; None when there are none (Kafka's lowestActiveOffset). ZooKeeper-mode
    brokers of a migration send no heartbeats (the controller pushes them UpdateMetadata)
    and are not waited for."""
    offsets = [tracker.metadata_offset(r.broker_id, r.epoch) for r in state.brokers.values()
               if not r.fenced and not r.in_controlled_shutdown and not r.is_migrating_zk_broker]
    return min(offsets) if offsets else None


def broker_heartbeat(
    state: ControllerState,
    tracker: BrokerHeartbeatTracker,
    request: Any,
    api_version: int,
    now_ms: int,
    config: ControllerConfig,
    *,
    next_offset: int,
) -> ControllerResult:
    """BrokerHeartbeat v0-2 (Kafka's ReplicationControlManager.processBrokerHeartbeat).

    A broker that leads partitions and asks to shut down enters controlled shutdown: it
    leaves every ISR it is not the last member of and its partitions get new leaders
    (records after the BrokerRegistrationChangeRecord); it is told to shut down once it
    leads nothing. Fencing takes the broker out the same way (records before the fence
    record); unfencing gives it the leaderless partitions whose ISR holds it.
    """
    broker_id = _field(request, "broker_id")
    broker_epoch = _field(request, "broker_epoch", -1)
    registration = state.broker(broker_id)
    if registration is None or registration.epoch != broker_epoch:
        message = (
            f"No broker registration found for broker id {broker_id}"
            if registration is None
            else f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}"
        )
        return ControllerResult(
            [],
            {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.STALE_BROKER_EPOCH,
                "is_caught_up": False,
                "is_fenced": True,
                "should_shut_down": False,
            },
            error_message=message,
        )

    if registration.fenced:
        current = FENCED
    elif registration.in_controlled_shutdown:
        current = CONTROLLED_SHUTDOWN
    else:
        current = UNFENCED
    offset = _field(request, "current_metadata_offset", -1)
    caught_up = offset >= registration.registration_offset
    want_shut_down = bool(_field(request, "want_shut_down", False))
    # Only these transitions depend on leaderships; the scan is skipped otherwise.
    leads = (current == CONTROLLED_SHUTDOWN or (current == UNFENCED and want_shut_down)) \
        and partitions.has_leaderships(state, broker_id)
    shutdown_offset = None
    replayed = False
    if current == CONTROLLED_SHUTDOWN:
        # A controller that took over mid-shutdown notes the log's end instead.
        shutdown_offset = tracker.controlled_shutdown_offset(broker_id, broker_epoch)
        if shutdown_offset is None:
            shutdown_offset = next_offset - 1
        lowest = _lowest_active_offset(state, tracker)
        replayed = lowest is None or shutdown_offset <= lowest
    following = _next_broker_state(
        current,
        bool(_field(request, "want_fence", False)),
        want_shut_down,
        caught_up,
        has_leaderships=leads,
        others_replayed_shutdown=replayed,
    )
    records: list[MetadataRecord] = []
    if following != current:
        if following in (FENCED, SHUTDOWN_NOW):
            records.extend(partitions.leader_and_isr_updates(
                state, remove=broker_id, migration_enabled=config.migration_enabled))
            records.append(fence_record(state, registration))
        elif following == UNFENCED:
            records.append(unfence_record(state, registration))
            records.extend(partitions.leader_and_isr_updates(
                state, add=broker_id, leaderless_only=True, migration_enabled=config.migration_enabled))
        elif following == CONTROLLED_SHUTDOWN:
            records.extend(_controlled_shutdown_records(state, registration))
            records.extend(partitions.leader_and_isr_updates(
                state, remove=broker_id, migration_enabled=config.migration_enabled))
            shutdown_offset = next_offset + len(records) - 1
    records.extend(_cordoned_log_dirs_records(state, registration, request, api_version))
    return ControllerResult(
        records,
        {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "is_caught_up": caught_up,
            "is_fenced": following in (FENCED, SHUTDOWN_NOW),
            "should_shut_down": following == SHUTDOWN_NOW,
        },
        heartbeat=HeartbeatUpdate(broker_id, broker_epoch, now_ms, offset,
                                  shutdown_offset if following == CONTROLLED_SHUTDOWN else None),
    )


# ---------------------------------------------------------------------------
# UnregisterBroker (API 64, v0) and session expiry
# ---------------------------------------------------------------------------


def unregister_broker(
    state: ControllerState, request: Any, api_version: int, config: ControllerConfig
) -> ControllerResult:
    broker_id = _field(request, "broker_id")
    registration = state.broker(broker_id)
    if registration is None:
        message = f"Broker ID {broker_id} is not currently registered"
        return ControllerResult(
            [],
            {"throttle_time_ms": 0, "error_code": ErrorCode.BROKER_ID_NOT_REGISTERED, "error_message": message},
            error_message=message,
        )
    # The broker leaves every ISR (but the last member of one) and every leadership first.
    records = partitions.leader_and_isr_updates(state, remove=broker_id, migration_enabled=config.migration_enabled)
    records.append(record(mr.UNREGISTER_BROKER_RECORD, {"broker_id": broker_id, "broker_epoch": registration.epoch},
                          version=0))
    return ControllerResult(records, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None})


def fence_expired_brokers(
    state: ControllerState, tracker: BrokerHeartbeatTracker, now_ms: int, config: ControllerConfig
) -> ControllerResult:
    """Fence every unfenced broker whose session (last heartbeat for its current
    epoch) is older than the session timeout. The response lists them by id.
    ZooKeeper-mode brokers of a migration never heartbeat: their liveness is their
    ZooKeeper session, followed by the migration driver (server/migration/brokers.py)."""
    records: list[MetadataRecord] = []
    fenced_ids: list[NodeId] = []
    # Kafka fences one stale broker per event so each sees the last one's effect; the
    # partitions as the earlier fencings leave them (`pending`) do the same in one command.
    pending: dict = {}
    for broker_id in sorted(state.brokers):
        registration = state.brokers[broker_id]
        if registration.fenced or registration.is_migrating_zk_broker:
            continue
        if tracker.is_expired(broker_id, registration.epoch, now_ms):
            records.extend(partitions.leader_and_isr_updates(
                state, remove=broker_id, inactive=frozenset(fenced_ids), pending=pending,
                migration_enabled=config.migration_enabled))
            records.append(fence_record(state, registration))
            fenced_ids.append(broker_id)
    return ControllerResult(records, {"fenced_broker_ids": fenced_ids})


# ---------------------------------------------------------------------------
# Bootstrap and read-only views
# ---------------------------------------------------------------------------


def bootstrap_records(
    metadata_version_level: int, feature_levels: Mapping[str, int] | None = None
) -> list[MetadataRecord]:
    """The records a new cluster starts with: metadata.version first, then every other
    feature at the given level or its default for that metadata.version. kraft.version
    is left out (the raft layer writes it as a control record) and so are features
    at level 0 (replaying them would change nothing)."""
    mv = ft.find_metadata_version(metadata_version_level)
    if mv is None or metadata_version_level < MINIMUM_BOOTSTRAP_VERSION.level:
        raise ValueError(
            f"cannot bootstrap at metadata.version level {metadata_version_level}: "
            f"need a known level >= {MINIMUM_BOOTSTRAP_VERSION.level} ({MINIMUM_BOOTSTRAP_VERSION})"
        )
    levels = ft.default_feature_levels(metadata_version_level)
    if feature_levels:
        unknown = set(feature_levels) - set(levels) - {METADATA_VERSION}
        if unknown:
            raise ValueError(f"unknown features {sorted(unknown)}")
        levels.update({k: v for k, v in feature_levels.items() if k != METADATA_VERSION})
    proposed = {METADATA_VERSION: metadata_version_level, **levels}
    records = [feature_level_record(METADATA_VERSION, metadata_version_level)]
    for name, level in levels.items():
        reason = ft.dependency_error(name, level, proposed)
        if reason is not None:
            raise ValueError(reason)
        if name == KRAFT_VERSION or level == 0:
            continue
        records.append(feature_level_record(name, level))
    return records


def finalized_features_for_api_versions(state: ControllerState) -> list[dict[str, Any]]:
    """ApiVersions FinalizedFeatures entries: min = max = level, level 0 omitted,
    metadata.version always present once bootstrapped. Sorted by name. The epoch to
    send with them is `state.finalized_features_epoch`."""
    entries = []
    for name, level in sorted(state.all_finalized_levels().items()):
        if level == 0 and name != METADATA_VERSION:
            continue
        entries.append({"name": name, "min_version_level": level, "max_version_level": level})
    return entries


def registered_brokers(state: ControllerState, include_fenced: bool = False) -> list[BrokerRegistration]:
    """Registered brokers by id; DescribeCluster and Metadata list only unfenced ones
    (Kafka lists brokers that are not fenced), so fenced ones are opt-in."""
    return [
        state.brokers[broker_id]
        for broker_id in sorted(state.brokers)
        if include_fenced or not state.brokers[broker_id].fenced
    ]
