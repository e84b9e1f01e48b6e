"""Controller snapshots: the image as records, loading it back, and start-up recovery.

Owns: turning a `ControllerState` into snapshot records (`snapshot_plan`,
`snapshot_records`), rebuilding a state from them (`load_snapshot`), writing
a controller snapshot file, and start-up recovery (`recover_snapshot`: the
newest valid snapshot and where the log continues; the node replays the log
after it as the Raft quorum commits it). `take_snapshot` and `recover_state`
serve a log whose every entry is committed (no Raft in between): the node
does not use them — under Raft only the driver may move the log start — but
the snapshot tests and the crash tests drive storage through them.

Rules kept here:
- Loading goes through the SAME `ControllerState.replay` (and
  `replay_kraft_version`) as the log, so a snapshot can only say what the log
  could have said, and `load_snapshot(snapshot of S) == S` exactly.
- Replay offsets are part of the image: a broker's `registration_offset` is
  the offset its RegisterBrokerRecord was replayed at (it differs from its
  epoch after a same-incarnation re-registration), and the finalized features
  epoch is the last applied offset. Neither fits a field of any record, so
  every record in a controller snapshot carries its replay offset in a record
  header `kraftwerk.replay_offset` (int64, big-endian). Kafka readers ignore
  record headers, so the file stays a valid Kafka snapshot, and the metadata
  record values are exactly what Kafka would write. Offsets are chosen so they
  increase in file order: each RegisterBrokerRecord at its registration offset;
  the FeatureLevelRecords (metadata.version first), the ZkMigrationStateRecord
  (when not NONE), then per topic (by name) its
  TopicRecord and PartitionRecords (by index), then the ConfigRecords (by
  resource and name), the UserScramCredentialRecords (by user and mechanism),
  the AccessControlEntryRecords (by id), the ClientQuotaRecords (by entity and
  key), the ProducerIdsRecord (once a block was handed out), the
  RegisterControllerRecords (v0, by controller id), and a KRaftVersion
  control record (when kraft.version > 0)
  in the highest free offsets up to the last applied offset, so the last record
  replayed lands on it; a NoOpRecord there when nothing else does. Every item of
  the image came from a record at an offset of its own, so they always fit.
- PartitionRecord is written at v0, or v1 when the partition holds log directories.
- RegisterBrokerRecords are written straight from the registrations
  (`register_broker_record_value`), byte for byte what the generic encoder writes for
  the record `snapshot_plan` lists: every node snapshots every registration at each
  metadata.version change, so this is the bulk of a large fleet's snapshot.
- RegisterBrokerRecord is written at the version the finalized metadata.version
  implies, raised to the lowest version that can carry what the registration
  holds (controlled shutdown v1, ZK migration v2, log dirs v3), so nothing is lost.
- No snapshot inside an open metadata transaction: the image would hold
  records an abort could still take back.
- A snapshot ending at offset 0 is the bootstrap snapshot (`storage format`), not
  state: recovery starts from an empty state and the log from 0. The control
  records in a snapshot's header batch (KRaftVersion, Voters) are the raft
  layer's; `load_snapshot` only sees the records after that batch.
- Recovery never silently skips data: a corrupt snapshot is logged and an older
  one tried; if the log no longer reaches back to a usable snapshot, start-up
  fails with `SnapshotRecoveryError` (fetch a snapshot from the leader, or restore).
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from protocol import metadata_records as mr
from protocol.errors import DecodeError, EncodeError
from protocol.primitives import encode_uvarint
from protocol.raft_records import KRAFT_VERSION_RECORD
from protocol.record_batch import ControlRecordType, control_record_type
from protocol.records import MetadataRecord, decode_metadata_record, encode_metadata_record, record
from server.controller import features as ft
from server.controller.features import METADATA_VERSION
from server.controller.state import BrokerRegistration, ControllerState, PartitionImage, ReplayError
from server.observability import Event, get_logger
from server.storage.log import MetadataLog
from server.storage.snapshot import (
    CorruptSnapshotError,
    SnapshotConfig,
    SnapshotExistsError,
    SnapshotRecord,
    SnapshotWriter,
    delete_snapshots_before,
    latest_snapshot,
    list_snapshots,
    read_snapshot,
    remove_partial_snapshots,
    snapshot_path,
)
from server.values import SnapshotId

_log = get_logger("controller.snapshot")

REPLAY_OFFSET_HEADER = "kraftwerk.replay_offset"
_OFFSET = struct.Struct(">q")
KRAFT_VERSION_RECORD_VERSION = 0


class SnapshotLoadError(CorruptSnapshotError):
    """A snapshot verified as a file but its records do not rebuild a state."""


class SnapshotRecoveryError(Exception):
    """No valid snapshot covers the log's missing prefix; the node cannot start."""


class SnapshotItem(NamedTuple):
    """One entry of a controller snapshot: a metadata record, or (record None) the
    kraft.version control record, and the offset it is replayed at."""

    offset: int
    record: MetadataRecord | None
    kraft_version: int | None = None


# --------------------------------------------------------------------------
# State -> records
# --------------------------------------------------------------------------


def _register_broker_record(registration: BrokerRegistration, mv_level: int | None) -> MetadataRecord:
    version = register_broker_record_version(registration, mv_level)
    data = {
        "broker_id": registration.broker_id,
        "is_migrating_zk_broker": registration.is_migrating_zk_broker,
        "incarnation_id": registration.incarnation_id,
        "broker_epoch": registration.epoch,
        "end_points": [
            {"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
            for e in registration.endpoints
        ],
        "features": [
            {"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
            for name, r in sorted(registration.supported_features.items())
        ],
        "rack": registration.rack,
        "fenced": registration.fenced,
        "in_controlled_shutdown": registration.in_controlled_shutdown,
        "log_dirs": list(registration.log_dirs),
        "cordoned_log_dirs": None if registration.cordoned_log_dirs is None else list(registration.cordoned_log_dirs),
    }
    return record(mr.REGISTER_BROKER_RECORD, data, version=version)


def register_broker_record_version(registration: BrokerRegistration, mv_level: int | None) -> int:
    """The RegisterBrokerRecord version a snapshot writes `registration` at: the one the
    finalized metadata.version implies, raised to the lowest that carries what it holds."""
    return _registration_record_version(
        registration, ft.register_broker_record_version(mv_level) if mv_level is not None else 0)


def _registration_record_version(registration: BrokerRegistration, version: int) -> int:
    # `version`: what the finalized metadata.version implies (the same for every
    # registration of one snapshot, so looked up once per snapshot).
    if registration.in_controlled_shutdown:
        version = max(version, 1)
    if registration.is_migrating_zk_broker:
        version = max(version, 2)
    if registration.log_dirs:
        version = max(version, 3)
    if registration.cordoned_log_dirs is not None:
        version = max(version, 4)
    return version


def snapshot_plan(state: ControllerState) -> list[SnapshotItem]:
    """The records of `state`'s snapshot with their replay offsets, in file order."""
    return [item if item.record is not None or item.kraft_version is not None
            else SnapshotItem(item.offset, _register_broker_record(item.registration, state.metadata_version))
            for item in _plan(state)]


class _PlanItem(NamedTuple):
    """A `SnapshotItem`, except that a broker registration stays a registration (record
    None) until it is written: the encoder writes it without building a record."""

    offset: int
    record: MetadataRecord | None
    kraft_version: int | None = None
    registration: BrokerRegistration | None = None


def _plan(state: ControllerState) -> list[_PlanItem]:
    if state.in_transaction:
        raise ValueError(
            f"cannot snapshot inside the metadata transaction begun at offset {state.transaction_start_offset}"
        )
    last_offset = state.last_applied_offset
    if last_offset < 0:
        return []
    pinned: dict[int, _PlanItem] = {}
    for registration in state.brokers.values():
        if not 0 <= registration.registration_offset <= last_offset:
            raise ValueError(f"broker {registration.broker_id} registered at {registration.registration_offset}, "
                             f"outside [0, {last_offset}]")
        pinned[registration.registration_offset] = _PlanItem(registration.registration_offset, None, None,
                                                              registration)
    levels = dict(state.finalized_levels)
    floating: list[tuple[MetadataRecord | None, int | None]] = []
    if METADATA_VERSION in levels:
        floating.append((_feature_level_record(METADATA_VERSION, levels.pop(METADATA_VERSION)), None))
    floating.extend((_feature_level_record(name, level), None) for name, level in sorted(levels.items()))
    if state.zk_migration_state != 0:
        floating.append((record(mr.ZK_MIGRATION_STATE_RECORD, {"zk_migration_state": state.zk_migration_state},
                                version=0), None))
    floating.extend((item, None) for item in topic_and_config_records(state))
    floating.extend((item, None) for item in security_records(state))
    floating.extend((item, None) for item in client_quota_records(state))
    producer_ids = state.producer_ids
    if producer_ids.next_producer_id > 0:
        floating.append((record(mr.PRODUCER_IDS_RECORD, producer_ids._asdict(), version=0), None))
    floating.extend((item, None) for item in controller_registration_records(state))
    if state.kraft_version > 0:
        floating.append((None, state.kraft_version))
    if not floating and last_offset not in pinned:
        # Only a record at the last applied offset can make replay end there.
        floating.append((record(mr.NO_OP_RECORD, {}, version=0), None))
    # The highest free offsets <= last_offset, found walking down; bounded by
    # len(floating) + len(pinned) steps.
    slots: list[int] = []
    offset = last_offset
    while len(slots) < len(floating):
        if offset < 0:
            raise ValueError(
                f"{len(floating)} feature records and {len(pinned)} registrations do not fit offsets "
                f"0..{last_offset}; the state did not come from a log"
            )
        if offset not in pinned:
            slots.append(offset)
        offset -= 1
    slots.reverse()
    items = list(pinned.values())
    items.extend(_PlanItem(slot, item, level) for slot, (item, level) in zip(slots, floating))
    items.sort(key=_item_offset)
    return items


def _item_offset(item: _PlanItem) -> int:
    return item.offset


def partition_record(topic_id, index: int, partition: PartitionImage) -> MetadataRecord:
    """The PartitionRecord that replays to `partition`."""
    data = {
        "partition_id": index,
        "topic_id": topic_id,
        "replicas": list(partition.replicas),
        "isr": list(partition.isr),
        "removing_replicas": list(partition.removing_replicas),
        "adding_replicas": list(partition.adding_replicas),
        "leader": partition.leader,
        "leader_recovery_state": partition.leader_recovery_state,
        "leader_epoch": partition.leader_epoch,
        "partition_epoch": partition.partition_epoch,
        "directories": list(partition.directories),
    }
    return record(mr.PARTITION_RECORD, data, version=1 if partition.directories else 0)


def topic_and_config_records(state: ControllerState) -> list[MetadataRecord]:
    """TopicRecord + PartitionRecords per topic (by name), then every ConfigRecord."""
    records: list[MetadataRecord] = []
    topics = state.topics()
    for name in sorted(topics):
        topic = topics[name]
        records.append(record(mr.TOPIC_RECORD, {"name": name, "topic_id": topic.topic_id}, version=0))
        for index in sorted(topic.partitions):
            records.append(partition_record(topic.topic_id, index, topic.partitions[index]))
    for resource_type, resource_name in state.config_resources():
        values = state.configs(resource_type, resource_name)
        for key in sorted(values):
            records.append(record(mr.CONFIG_RECORD, {"resource_type": resource_type, "resource_name": resource_name,
                                                     "name": key, "value": values[key]}, version=0))
    return records


def security_records(state: ControllerState) -> list[MetadataRecord]:
    """UserScramCredentialRecords (by user, mechanism), then AccessControlEntryRecords (by id)."""
    records: list[MetadataRecord] = []
    credentials = state.scram_credentials()
    for key in sorted(credentials):
        credential = credentials[key]
        records.append(record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
            "name": credential.user, "mechanism": int(credential.mechanism), "salt": credential.salt,
            "stored_key": credential.stored_key, "server_key": credential.server_key,
            "iterations": credential.iterations}, version=0))
    acls = state.acls()
    for acl_id in sorted(acls):
        acl = acls[acl_id]
        records.append(record(mr.ACCESS_CONTROL_ENTRY_RECORD, {
            "id": acl.acl_id, "resource_type": acl.resource_type, "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation, "permission_type": acl.permission_type}, version=0))
    return records


def client_quota_records(state: ControllerState) -> list[MetadataRecord]:
    """One ClientQuotaRecord per quota key of every entity (entities and keys sorted)."""
    records: list[MetadataRecord] = []
    quotas = state.client_quotas()
    for entity in sorted(quotas, key=_entity_sort_key):
        values = quotas[entity]
        for key in sorted(values):
            records.append(record(mr.CLIENT_QUOTA_RECORD, {
                "entity": [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity],
                "key": key, "value": values[key], "remove": False}, version=0))
    return records


def controller_registration_records(state: ControllerState) -> list[MetadataRecord]:
    """One RegisterControllerRecord (v0, the only version) per registered controller, by id."""
    records: list[MetadataRecord] = []
    controllers = state.controllers
    for controller_id in sorted(controllers):
        registration = controllers[controller_id]
        records.append(record(mr.REGISTER_CONTROLLER_RECORD, {
            "controller_id": controller_id,
            "incarnation_id": registration.incarnation_id,
            "zk_migration_ready": registration.zk_migration_ready,
            "end_points": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                           for e in registration.endpoints],
            "features": [{"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
                         for name, r in sorted(registration.supported_features.items())],
        }, version=0))
    return records


def _entity_sort_key(entity) -> tuple:
    # A default (None) name sorts before every named one of the same type.
    return tuple((entity_type, name is not None, name or "") for entity_type, name in entity)


def _feature_level_record(name: str, level: int) -> MetadataRecord:
    return record(mr.FEATURE_LEVEL_RECORD, {"name": name, "feature_level": level}, version=0)


def snapshot_records(state: ControllerState) -> list[MetadataRecord]:
    """The metadata records of `state`'s snapshot, in file order (kraft.version,
    a control record, is left out; see `snapshot_plan` for the offsets)."""
    return [item.record for item in snapshot_plan(state) if item.record is not None]


def encode_snapshot_records(state: ControllerState) -> list[SnapshotRecord]:
    """`snapshot_plan` as records of the snapshot file, each with its replay offset header."""
    entries = []
    mv_level = state.metadata_version
    base_version = ft.register_broker_record_version(mv_level) if mv_level is not None else 0
    pack_offset = _OFFSET.pack
    # The encoded features of each distinct features mapping, by identity: registrations
    # with the same ranges share one mapping (server/controller/state.py), so a fleet's
    # snapshot encodes them once. Keys are the ids of mappings the state holds for the
    # whole call, so none is reused meanwhile.
    features_bytes: dict[int, bytes] = {}
    for item in _plan(state):
        headers = ((REPLAY_OFFSET_HEADER, pack_offset(item.offset)),)
        registration = item.registration
        if registration is not None:
            value = _registration_value(registration, mv_level, _registration_record_version(registration, base_version),
                                        features_bytes)
            entries.append(SnapshotRecord(value, None, headers))
        elif item.record is not None:
            entries.append(SnapshotRecord(encode_metadata_record(item.record), None, headers))
        else:
            value = KRAFT_VERSION_RECORD.encode(
                KRAFT_VERSION_RECORD_VERSION,
                {"version": KRAFT_VERSION_RECORD_VERSION, "kraft_version": item.kraft_version},
            )
            entries.append(SnapshotRecord(value, ControlRecordType.KRAFT_VERSION, headers))
    return entries


# RegisterBrokerRecord written directly from a registration. Every broker's snapshot
# holds every registration, and a broker snapshots at each metadata.version change: the
# generic path (a record dict, then the schema's encoder) cost ~17 us per registration,
# most of a 300-broker snapshot. This writes the same bytes (frame, fields, tagged
# LogDirs/CordonedLogDirs, as the flexible encoding lays them out) in a few us;
# tests/controller/test_snapshot_fast_path.py compares it with the generic encoder on
# arbitrary registrations at every version. Anything unusual (a value out of range, a
# type other than the record's) goes to the generic encoder, which alone reports errors.
_RB_HEAD = struct.Struct(">i")
_RB_EPOCH = struct.Struct(">q")
_RB_PORT_PROTOCOL = struct.Struct(">Hh")
_RB_RANGE = struct.Struct(">hh")
_FRAME_PREFIX = bytes((1, mr.REGISTER_BROKER_RECORD.api_key))


def register_broker_record_value(registration: BrokerRegistration, mv_level: int | None) -> bytes:
    """The encoded RegisterBrokerRecord (frame included) a snapshot holds for `registration`:
    exactly `encode_metadata_record(_register_broker_record(registration, mv_level))`."""
    return _registration_value(registration, mv_level, register_broker_record_version(registration, mv_level))


def _registration_value(registration: BrokerRegistration, mv_level: int | None, version: int,
                        features_bytes: dict[int, bytes] | None = None) -> bytes:
    # A registration is immutable: the bytes it got at this version last time are its
    # bytes now (every node snapshots at each metadata.version change, and most
    # registrations are unchanged since the previous one).
    held = registration.snapshot_value
    if held is not None and held[0] == version:
        return held[1]
    try:
        value = _register_broker_record_fast(registration, version, features_bytes)
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError, IndexError):
        return encode_metadata_record(_register_broker_record(registration, mv_level))
    # Another thread may store the same bytes at the same time: either write is the value.
    registration.keep_snapshot_value(version, value)
    return value


# One-byte unsigned varints (0..127): the lengths, counts and versions of a registration
# almost always fall here. An immutable table, built once.
_UVARINT_1 = tuple(bytes((number,)) for number in range(0x80))


def _compact_string(value: str) -> bytes:
    if value.__class__ is not str:
        raise TypeError("not a str")
    data = value.encode("utf-8")
    length = len(data) + 1
    return (_UVARINT_1[length] if length < 0x80 else encode_uvarint(length)) + data


def _uuid_array(values) -> bytes:
    count = len(values) + 1
    parts = [_UVARINT_1[count] if count < 0x80 else encode_uvarint(count)]
    for value in values:
        if value.__class__ is not uuid.UUID:
            raise TypeError("not a UUID")
        parts.append(value.bytes)
    return b"".join(parts)


def _features_bytes(supported_features) -> bytes:
    """A registration's Features array as the record lays it out (sorted by name)."""
    features = sorted(supported_features.items())
    parts = [_UVARINT_1[len(features) + 1] if len(features) < 0x7F else encode_uvarint(len(features) + 1)]
    supported_range = _RB_RANGE.pack
    for name, supported in features:
        parts.append(_compact_string(name))
        parts.append(supported_range(supported.min_level, supported.max_level))
        parts.append(b"\x00")  # the feature's (empty) tagged fields
    return b"".join(parts)


def _register_broker_record_fast(registration: BrokerRegistration, version: int,
                                 features_bytes: dict[int, bytes] | None = None) -> bytes:
    # Every broker's snapshot holds every registration (N of them, at each
    # metadata.version change): local names and the one-byte varint table rather than
    # a call per length.
    if registration.incarnation_id.__class__ is not uuid.UUID or version.__class__ is not int \
            or not 0 <= version <= 4:
        raise TypeError("unusual registration")
    uvarint = _UVARINT_1
    compact = _compact_string
    parts = [_FRAME_PREFIX, uvarint[version], _RB_HEAD.pack(registration.broker_id)]
    append = parts.append
    if version >= 2:
        append(b"\x01" if registration.is_migrating_zk_broker else b"\x00")
    append(registration.incarnation_id.bytes)
    append(_RB_EPOCH.pack(registration.epoch))
    endpoints = registration.endpoints
    append(uvarint[len(endpoints) + 1] if len(endpoints) < 0x7F else encode_uvarint(len(endpoints) + 1))
    port_protocol = _RB_PORT_PROTOCOL.pack
    for endpoint in endpoints:
        append(compact(endpoint.name))
        append(compact(endpoint.host))
        append(port_protocol(endpoint.port, endpoint.security_protocol))
        append(b"\x00")  # the endpoint's (empty) tagged fields
    supported_features = registration.supported_features
    if features_bytes is None:
        append(_features_bytes(supported_features))
    else:
        encoded = features_bytes.get(id(supported_features))
        if encoded is None:
            encoded = features_bytes[id(supported_features)] = _features_bytes(supported_features)
        append(encoded)
    rack = registration.rack
    append(b"\x00" if rack is None else compact(rack))
    append(b"\x01" if registration.fenced else b"\x00")
    if version >= 1:
        append(b"\x01" if registration.in_controlled_shutdown else b"\x00")
    # Tagged fields, by tag, each only when it differs from its default (LogDirs: empty,
    # CordonedLogDirs: null).
    tagged = []
    if version >= 3 and registration.log_dirs:
        tagged.append((0, _uuid_array(registration.log_dirs)))
    if version >= 4 and registration.cordoned_log_dirs is not None:
        tagged.append((1, _uuid_array(registration.cordoned_log_dirs)))
    append(uvarint[len(tagged)])
    for tag, payload in tagged:
        append(uvarint[tag])
        append(uvarint[len(payload)] if len(payload) < 0x80 else encode_uvarint(len(payload)))
        append(payload)
    return b"".join(parts)


# --------------------------------------------------------------------------
# Records -> state
# --------------------------------------------------------------------------


def _replay_offset(entry: SnapshotRecord, index: int) -> int:
    for key, value in entry.headers:
        if key == REPLAY_OFFSET_HEADER:
            if value is None or len(value) != _OFFSET.size:
                raise SnapshotLoadError(f"snapshot record {index}: malformed {REPLAY_OFFSET_HEADER} header")
            return _OFFSET.unpack(value)[0]
    raise SnapshotLoadError(f"snapshot record {index}: no {REPLAY_OFFSET_HEADER} header")


def load_snapshot(records: Iterable[SnapshotRecord], snapshot_end_offset: int, cluster_id: str) -> ControllerState:
    """A fresh state with the snapshot's records replayed at their offsets.

    Voters control records belong to the raft layer and are skipped here.
    Raises SnapshotLoadError when a record does not decode or replay, or claims
    an offset at or past the snapshot's end.
    """
    state = ControllerState(cluster_id)
    for index, entry in enumerate(records):
        if entry.control_type is not None and entry.control_type != ControlRecordType.KRAFT_VERSION:
            continue
        offset = _replay_offset(entry, index)
        if offset >= snapshot_end_offset:
            raise SnapshotLoadError(
                f"snapshot record {index} replays at offset {offset}, not below the snapshot end {snapshot_end_offset}"
            )
        try:
            if entry.control_type is None:
                state.replay(decode_metadata_record(entry.value), offset)
            else:
                level = KRAFT_VERSION_RECORD.decode(KRAFT_VERSION_RECORD_VERSION, entry.value).kraft_version
                state.replay_kraft_version(level, offset)
        except (DecodeError, ReplayError) as exc:
            raise SnapshotLoadError(f"snapshot record {index} (offset {offset}): {exc}") from None
    return state


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def write_controller_snapshot(
    state: ControllerState,
    log_dir: str | os.PathLike[str],
    end_offset: int,
    epoch: int,
    last_contained_log_timestamp_ms: int = 0,
    config: SnapshotConfig | None = None,
    voter_records: Sequence[tuple[int, bytes]] = (),
) -> SnapshotId:
    """Writes `state` as snapshot (end_offset, epoch) atomically; a snapshot that
    already exists with that id is left as it is (snapshots are immutable).
    `voter_records`: the quorum's (control type, value) records at the snapshot's end
    (server.voters.snapshot_voter_records), for the header's batch."""
    if end_offset <= state.last_applied_offset:
        raise ValueError(f"snapshot end {end_offset} does not cover the last applied offset {state.last_applied_offset}")
    snapshot_id = SnapshotId(end_offset, epoch)
    try:
        writer = SnapshotWriter(log_dir, snapshot_id, last_contained_log_timestamp_ms, config,
                                [SnapshotRecord(value, control_type) for control_type, value in voter_records])
    except SnapshotExistsError:
        return snapshot_id
    with writer:
        try:
            writer.append_records(encode_snapshot_records(state))
        except EncodeError as exc:
            raise ValueError(f"state does not encode as a snapshot: {exc}") from None
        return writer.freeze()


def take_snapshot(
    state: ControllerState, metadata_log: MetadataLog, config: SnapshotConfig | None = None
) -> SnapshotId | None:
    """Snapshots `state` as of its last applied offset, then moves the log start
    there and deletes older snapshots. Returns None when there is nothing newer
    than the latest snapshot. The caller must only snapshot committed state."""
    end_offset = state.last_applied_offset + 1
    directory = metadata_log.directory
    newest = latest_snapshot(directory)
    if end_offset <= 0 or (newest is not None and newest.end_offset >= end_offset):
        return None
    # The snapshot id's epoch and header timestamp are those of the batch that
    # holds the last contained record, as Kafka's snapshot writer takes them.
    batches = metadata_log.read(end_offset - 1, max_bytes=1)
    if not batches or not batches[0].base_offset <= end_offset - 1 <= batches[0].last_offset:
        raise ValueError(f"the log does not hold offset {end_offset - 1}")
    last_batch = batches[0]
    snapshot_id = write_controller_snapshot(
        state, directory, end_offset, last_batch.leader_epoch, last_batch.max_timestamp_ms, config
    )
    metadata_log.delete_before(end_offset)
    delete_snapshots_before(directory, snapshot_id)
    return snapshot_id


def recover_state(
    log_dir: str | os.PathLike[str],
    metadata_log: MetadataLog,
    cluster_id: str,
    config: SnapshotConfig | None = None,
) -> ControllerState:
    """Start-up of a log whose every entry is committed (one controller, no Raft):
    the newest usable snapshot, then the whole log after it."""
    state, from_offset, chosen = recover_snapshot(log_dir, metadata_log, cluster_id, config)
    replayed = replay_log(state, metadata_log, from_offset)
    _log.info(
        Event.RECOVERED_FROM_SNAPSHOT,
        snapshot_end_offset=chosen.end_offset if chosen else None,
        snapshot_epoch=chosen.epoch if chosen else None,
        log_records_replayed=replayed,
        last_applied_offset=state.last_applied_offset,
    )
    return state


def recover_snapshot(
    log_dir: str | os.PathLike[str],
    metadata_log: MetadataLog,
    cluster_id: str,
    config: SnapshotConfig | None = None,
) -> tuple[ControllerState, int, SnapshotId | None]:
    """The newest snapshot that verifies and loads, and the offset the log continues at.

    Under Raft the log after the snapshot may hold uncommitted entries, so the
    controller replays it only as the quorum commits it. Partial snapshot files are deleted first. A snapshot past the log's end (or
    of a newer epoch than the log's last) means a snapshot was installed and the
    crash came before the log was reset: the reset is done now. Without a usable
    snapshot the log must start at 0.
    """
    log_dir = os.fspath(log_dir)
    remove_partial_snapshots(log_dir)
    state: ControllerState | None = None
    chosen: SnapshotId | None = None
    for snapshot_id in reversed(list_snapshots(log_dir)):
        if snapshot_id.end_offset < metadata_log.start_offset:
            # This and every older snapshot end before the log begins.
            break
        if snapshot_id.end_offset == 0:
            # The bootstrap snapshot `storage format` writes (KIP-853): no state, only
            # the records the first leader writes into the log (server/storage/bootstrap.py).
            break
        try:
            contents = read_snapshot(snapshot_path(log_dir, snapshot_id), config)
            state = load_snapshot(contents.records, snapshot_id.end_offset, cluster_id)
        except CorruptSnapshotError as exc:
            _log.error(Event.SNAPSHOT_CORRUPT, end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch,
                       error=str(exc))
            continue
        chosen = snapshot_id
        break
    if chosen is None or state is None:
        if metadata_log.start_offset > 0:
            raise SnapshotRecoveryError(
                f"{log_dir}: the log starts at offset {metadata_log.start_offset} but no valid snapshot reaches it; "
                "fetch a snapshot from the quorum leader or restore the directory"
            )
        state = ControllerState(cluster_id)
        from_offset = 0
    else:
        if chosen.end_offset > metadata_log.end_offset or chosen.epoch > metadata_log.last_epoch:
            metadata_log.reset_to(chosen.end_offset, chosen.epoch)
        from_offset = chosen.end_offset
    return state, from_offset, chosen


def replay_batch(state: ControllerState, batch, from_offset: int) -> int:
    """Replays `batch`'s records at offsets >= `from_offset` into `state`; returns how
    many. Metadata records go to `replay`, KRaftVersion control records to
    `replay_kraft_version`; other control records are the raft layer's. Raises
    DecodeError or ReplayError at the first record that does not decode or replay."""
    replayed = 0
    for item in batch.records:
        if item.offset < from_offset:
            continue
        if batch.is_control:
            if control_record_type(item) == ControlRecordType.KRAFT_VERSION:
                if item.value is None:
                    raise DecodeError(f"KRaftVersion record at offset {item.offset} has a null value")
                level = KRAFT_VERSION_RECORD.decode(KRAFT_VERSION_RECORD_VERSION, item.value).kraft_version
                state.replay_kraft_version(level, item.offset)
                replayed += 1
            continue
        if item.value is None:
            raise DecodeError(f"record at offset {item.offset} has a null value")
        state.replay(decode_metadata_record(item.value), item.offset)
        replayed += 1
    return replayed


def replay_log(state: ControllerState, metadata_log: MetadataLog, from_offset: int) -> int:
    """Replays the log's records at offsets >= `from_offset` into `state` (`replay_batch`);
    returns how many."""
    replayed = 0
    offset = from_offset
    # Bounded: every round moves `offset` past at least one batch.
    while offset < metadata_log.end_offset:
        batches = metadata_log.read(offset)
        if not batches:
            break
        for batch in batches:
            replayed += replay_batch(state, batch, from_offset)
            offset = batch.next_offset
    return replayed
