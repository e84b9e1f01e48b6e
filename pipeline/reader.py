"""Reading a fleet's KRaft metadata logs and snapshots into rows, without Spark.

Owns: finding the files of a fleet (`fleet_files`, `fleet_nodes`), and turning
one segment or snapshot file into rows of `pipeline.schema.RECORD_FIELDS`
(`read_file`, built from `open_file` and `step`, one batch per step); `read_fleet`
chains them for the plain-Python baseline. The Spark data source reads through
pipeline/columnar.py, whose compiled fast path hands every batch it does not
accept to `step`, so the rows and every error row are this module's.

Fleet layout: `<fleet>/<cluster>/<node>/` where `<node>` is a node's
metadata.log.dir (`meta.properties`, optional `node.properties`, and
`__cluster_metadata-0/` with `*.log` segments and `*.checkpoint` snapshots).
The root may also be one cluster directory or one node directory; the `file`
column is always relative to the (implied) fleet root, so it reads
`<cluster>/<node>/__cluster_metadata-0/<name>` whichever level was given.

Rules kept here:
- Read-only and lock-free: files are read directly with the record-batch codec,
  never through `MetadataLog.open`, which takes the log's lock and truncates a
  torn tail. A reader of a live or damaged node must change nothing.
- Bad bytes never raise. A batch that does not verify (CRC, truncation, bad
  header) becomes ONE row with `error` set, and reading goes on at the next
  batch when its position can be found: skip by the batch's own length when
  that lands on a batch that verifies (or on the end of the file), else scan
  forward for the next position where a batch verifies. A record that does not
  decode inside a verified batch becomes one error row in place of that
  record; the batch's other records still give rows. A file that cannot be
  read at all gives one error row.
- Physical contents: every batch in a segment is read, including records below
  the log start offset that a snapshot has already covered (Kafka deletes whole
  segments only). Deduplicating snapshot and log rows is the transforms' job.
- Bounded: a file is read whole (segments are ~1 MiB, snapshots small) up to
  `MAX_FILE_BYTES`; the resynchronising scan visits each byte of a file at most
  once.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.schema import BROKER_RECORDS
from protocol.errors import DecodeError
from protocol.raft_records import (
    KRAFT_VERSION_RECORD,
    LEADER_CHANGE_MESSAGE,
    SNAPSHOT_FOOTER_RECORD,
    SNAPSHOT_HEADER_RECORD,
    VOTERS_RECORD,
)
from protocol.record_batch import (
    DEFAULT_MAX_BATCH_BYTES,
    HEADER_BYTES,
    MAGIC,
    MAGIC_OFFSET,
    ControlRecordType,
    Record,
    RecordBatch,
    control_record_type,
    decode_batch,
    peek_batch_length,
)
from protocol.records import decode_metadata_record
from protocol.schema import Field, Message, Versions
from server.controller.snapshot import REPLAY_OFFSET_HEADER
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.storage.log import SEGMENT_SUFFIX
from server.storage.meta_properties import (
    MAX_META_PROPERTIES_BYTES,
    MetaPropertiesError,
    parse_properties,
    read_meta_properties,
    uuid_to_string,
)
from server.storage.snapshot import SNAPSHOT_SUFFIX, parse_snapshot_file_name

META_PROPERTIES_NAME = "meta.properties"
NODE_PROPERTIES_NAME = "node.properties"
SOURCE_LOG = "log"
SOURCE_SNAPSHOT = "snapshot"

# Far above any segment (1 MiB by default) or controller snapshot; a file
# beyond this is not something a metadata log writes, and reading it whole
# would put the worker's memory at risk.
MAX_FILE_BYTES = 256 * 1024 * 1024

# The names operators know control records by (Kafka's ControlRecordType,
# in the message specs' spelling).
CONTROL_TYPE_NAMES = {
    ControlRecordType.ABORT: "Abort",
    ControlRecordType.COMMIT: "Commit",
    ControlRecordType.LEADER_CHANGE: "LeaderChange",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlRecordType.KRAFT_VERSION: "KRaftVersion",
    ControlRecordType.VOTERS: "Voters",
}
_CONTROL_MESSAGES = {
    ControlRecordType.LEADER_CHANGE: LEADER_CHANGE_MESSAGE,
    ControlRecordType.SNAPSHOT_HEADER: SNAPSHOT_HEADER_RECORD,
    ControlRecordType.SNAPSHOT_FOOTER: SNAPSHOT_FOOTER_RECORD,
    ControlRecordType.KRAFT_VERSION: KRAFT_VERSION_RECORD,
    ControlRecordType.VOTERS: VOTERS_RECORD,
}
# BrokerRegistrationChangeRecord's tagged int8 fields (Kafka's
# BrokerRegistrationFencingChange / BrokerRegistrationInControlledShutdownChange).
_FENCING_CHANGE = {1: True, -1: False, 0: None}
_SHUTDOWN_CHANGE = {1: True, 0: None}
_METADATA_VERSION_FEATURE = "metadata.version"
_REPLAY_OFFSET = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_BATCH_PREFIX = struct.Struct(">qii")  # baseOffset, length, partitionLeaderEpoch


@dataclass(frozen=True, slots=True)
class FleetFile:
    """One segment or snapshot file of one node, and where it sits in the fleet."""

    cluster: str
    cluster_id: str | None
    node_id: int  # -1 when the node has no readable meta.properties
    source: str  # SOURCE_LOG or SOURCE_SNAPSHOT
    path: str  # absolute
    relative_path: str  # relative to the fleet root, '/'-separated


@dataclass(frozen=True, slots=True)
class FleetNode:
    cluster: str
    cluster_id: str | None
    node_id: int
    role: str | None  # "controller", "broker", or None when node.properties does not say
    release: str | None  # node.properties `kraftwerk.release`
    path: str  # the node's metadata.log.dir, absolute


# --------------------------------------------------------------------------
# Finding the files
# --------------------------------------------------------------------------


def _is_node_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, META_PROPERTIES_NAME)) or os.path.isdir(
        os.path.join(path, METADATA_LOG_DIR_NAME)
    )


def _subdirectories(path: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [os.path.join(path, name) for name in names if not name.startswith(".") and os.path.isdir(os.path.join(path, name))]


def _node_dirs(root: str | os.PathLike[str]) -> tuple[str, list[tuple[str, str]]]:
    """The implied fleet root and the (cluster name, node dir) pairs under `root`."""
    root = os.path.abspath(os.fspath(root))
    if _is_node_dir(root):
        cluster_dir = os.path.dirname(root)
        return os.path.dirname(cluster_dir), [(os.path.basename(cluster_dir), root)]
    children = _subdirectories(root)
    if any(_is_node_dir(child) for child in children):
        name = os.path.basename(root)
        return os.path.dirname(root), [(name, child) for child in children if _is_node_dir(child)]
    pairs = []
    for cluster_dir in children:
        name = os.path.basename(cluster_dir)
        pairs.extend((name, node) for node in _subdirectories(cluster_dir) if _is_node_dir(node))
    return root, pairs


def _identity(node_dir: str) -> tuple[str | None, int]:
    # A damaged meta.properties must not stop the scan: the node's rows then
    # carry no cluster id and node id -1, and its log is still read.
    try:
        meta = read_meta_properties(node_dir)
    except (OSError, MetaPropertiesError, UnicodeDecodeError):
        return None, -1
    if meta is None:
        return None, -1
    return meta.cluster_id, meta.node_id


def fleet_files(root: str | os.PathLike[str]) -> list[FleetFile]:
    """Every segment and snapshot file under `root`, sorted by relative path."""
    fleet_root, pairs = _node_dirs(root)
    files: list[FleetFile] = []
    for cluster, node_dir in pairs:
        metadata_dir = os.path.join(node_dir, METADATA_LOG_DIR_NAME)
        try:
            names = os.listdir(metadata_dir)
        except OSError:
            continue
        cluster_id, node_id = _identity(node_dir)
        for name in names:
            if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit():
                source = SOURCE_LOG
            elif name.endswith(SNAPSHOT_SUFFIX) and parse_snapshot_file_name(name) is not None:
                source = SOURCE_SNAPSHOT
            else:
                continue  # .lock, log-start-offset, quorum-state, .part leftovers
            path = os.path.join(metadata_dir, name)
            if not os.path.isfile(path):
                continue
            relative = os.path.relpath(path, fleet_root).replace(os.sep, "/")
            files.append(FleetFile(cluster, cluster_id, node_id, source, path, relative))
    files.sort(key=lambda item: item.relative_path)
    return files


def _read_node_properties(node_dir: str) -> dict[str, str]:
    path = os.path.join(node_dir, NODE_PROPERTIES_NAME)
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_META_PROPERTIES_BYTES + 1)
    except OSError:
        return {}
    if len(raw) > MAX_META_PROPERTIES_BYTES:
        return {}
    try:
        return parse_properties(raw.decode("latin-1"))
    except MetaPropertiesError:
        return {}


def _role(process_roles: str | None) -> str | None:
    if process_roles is None:
        return None
    roles = {part.strip() for part in process_roles.split(",") if part.strip()}
    # A combined node runs a controller and keeps a voter's metadata log, so
    # for this pipeline it counts as a controller.
    if "controller" in roles:
        return "controller"
    if roles == {"broker"}:
        return "broker"
    return None


def fleet_nodes(root: str | os.PathLike[str]) -> list[FleetNode]:
    """Every node directory under `root`, sorted by (cluster, directory)."""
    _, pairs = _node_dirs(root)
    nodes = []
    for cluster, node_dir in sorted(pairs):
        cluster_id, node_id = _identity(node_dir)
        properties = _read_node_properties(node_dir)
        release = properties.get("kraftwerk.release")
        nodes.append(
            FleetNode(cluster, cluster_id, node_id, _role(properties.get("process.roles")), release or None, node_dir)
        )
    return nodes


# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------


# A plan: for each field a version has, (attribute, kind, the plan of its struct or
# None). Worked out once per (message, version) — working it out per record was most of
# the reader's time — and typed by the field's declared type, so a record's values are
# converted without asking each one what it is.
Plan = tuple[tuple[str, int, "Plan | None"], ...]

_PLAIN, _UUID, _BYTES, _PLAIN_ARRAY, _UUID_ARRAY, _BYTES_ARRAY, _STRUCT, _STRUCT_ARRAY = range(8)
_SCALAR_KINDS = {"uuid": _UUID, "bytes": _BYTES, "records": _BYTES}
# The text `fields_json` writes: compact, unicode as is. One encoder for every call (it
# holds only its settings); json.dumps would build a new one per record for these
# non-default settings.
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _plan(message: Message, fields: tuple[Field, ...], version: int) -> Plan:
    out = []
    for f in fields:
        if version not in Versions.parse(f.versions):
            continue
        if f.is_struct:
            inner = _plan(message, message.struct_fields(f.element_type, f), version)
            out.append((f.attr, _STRUCT_ARRAY if f.is_array else _STRUCT, inner))
        else:
            kind = _SCALAR_KINDS.get(f.element_type, _PLAIN)
            out.append((f.attr, kind + _PLAIN_ARRAY if f.is_array else kind, None))
    return tuple(out)


def _uuid_json(value: Any) -> Any:
    return uuid_to_string(value) if isinstance(value, uuid.UUID) else value


def _bytes_json(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _versioned(plan: Plan, data: Any) -> dict[str, Any]:
    # The decoder fills fields a version does not have with defaults; leaving
    # them out keeps "v0 says nothing about X" apart from "X is false".
    out: dict[str, Any] = {}
    for attr, kind, inner in plan:
        if attr not in data:
            continue
        value = data[attr]
        if value is None or kind == _PLAIN:
            out[attr] = value
        elif kind == _STRUCT:
            out[attr] = _versioned(inner, value)
        elif kind == _STRUCT_ARRAY:
            out[attr] = [_versioned(inner, item) for item in value]
        elif kind == _PLAIN_ARRAY:
            out[attr] = list(value)
        elif kind == _UUID:
            out[attr] = _uuid_json(value)
        elif kind == _BYTES:
            out[attr] = _bytes_json(value)
        elif kind == _UUID_ARRAY:
            out[attr] = [_uuid_json(item) for item in value]
        else:  # _BYTES_ARRAY
            out[attr] = [_bytes_json(item) for item in value]
    return out


def fields_json(message: Message, version: int, data: Any, plans: dict | None = None) -> str:
    """A decoded record's fields as compact JSON in declaration order: only the
    fields `version` has, uuids in Kafka's base64url text form, bytes as base64,
    private keys (`_unknown_tagged_fields`) dropped. `plans` caches the per-version
    field plans across calls (a reader keeps one per file)."""
    key = (message.name, version)
    plan = plans.get(key) if plans is not None else None
    if plan is None:
        plan = _plan(message, message.fields, version)
        if plans is not None:
            plans[key] = plan
    return _JSON_ENCODER.encode(_versioned(plan, data))


def _uuid_text(value: Any) -> str | None:
    return uuid_to_string(value) if isinstance(value, uuid.UUID) else None


_BROKER_RECORDS = frozenset(BROKER_RECORDS)


def _broker(name: str, version: int, data: Any) -> tuple | None:
    """The `broker` struct: broker_id, broker_epoch, incarnation_id, fenced,
    in_controlled_shutdown, rack, mv_min, mv_max, log_dirs."""
    if name == "BrokerRegistrationChangeRecord":  # first: most of a fleet's records
        log_dirs = [uuid_to_string(d) for d in data.get("log_dirs") or ()]
        return (
            data.get("broker_id"),
            data.get("broker_epoch"),
            None,
            _FENCING_CHANGE.get(data.get("fenced")),
            _SHUTDOWN_CHANGE.get(data.get("in_controlled_shutdown")),
            None,
            None,
            None,
            log_dirs or None,  # an empty list means "unchanged"
        )
    if name == "RegisterBrokerRecord":
        mv_min = mv_max = None
        for feature in data.get("features") or ():
            if feature.get("name") == _METADATA_VERSION_FEATURE:
                mv_min = feature.get("min_supported_version")
                mv_max = feature.get("max_supported_version")
        # Fields a version does not carry are "not said", not false/empty.
        shutdown = bool(data.get("in_controlled_shutdown")) if version >= 1 else None
        log_dirs = [uuid_to_string(d) for d in data.get("log_dirs") or ()] if version >= 3 else None
        return (
            data.get("broker_id"),
            data.get("broker_epoch"),
            _uuid_text(data.get("incarnation_id")),
            bool(data.get("fenced")),
            shutdown,
            data.get("rack"),
            mv_min,
            mv_max,
            log_dirs,
        )
    if name in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
        fenced = name == "FenceBrokerRecord"
        return (data.get("id"), data.get("epoch"), None, fenced, None, None, None, None, None)
    if name == "UnregisterBrokerRecord":
        return (data.get("broker_id"), data.get("broker_epoch"), None, None, None, None, None, None, None)
    return None


@dataclass(frozen=True, slots=True)
class _FileContext:
    """What every row of one file shares, and how its offsets are read."""

    cluster: str
    cluster_id: str | None
    node_id: int
    source: str
    file: str
    # For snapshots: the offset a record without a replay-offset header gets.
    snapshot_last_offset: int | None
    # fields_json's per-(message, version) plans, shared by this file's rows.
    plans: dict = field(default_factory=dict)

    @property
    def prefix(self) -> tuple:
        """The first five columns, the same for every row of the file."""
        return (self.cluster, self.cluster_id, self.node_id, self.source, self.file)

    def row(
        self,
        offset: int,
        leader_epoch: int | None,
        timestamp_ms: int | None,
        record_type: str | None,
        record_version: int | None,
        feature: tuple | None,
        broker: tuple | None,
        json_text: str | None,
        error: str | None,
    ) -> tuple:
        return self.prefix + (
            offset, leader_epoch, timestamp_ms, record_type, record_version, feature, broker, json_text, error,
        )

    def error_row(self, offset: int, leader_epoch: int | None, error: str) -> tuple:
        return self.row(offset, leader_epoch, None, None, None, None, None, None, error)

    def record_offset(self, record: Record) -> int:
        if self.snapshot_last_offset is None:
            return record.offset
        for key, value in record.headers:
            if key == REPLAY_OFFSET_HEADER and value is not None and len(value) == _REPLAY_OFFSET.size:
                return _REPLAY_OFFSET.unpack(value)[0]
        return self.snapshot_last_offset


def _context(f: FleetFile) -> _FileContext:
    last_offset = None
    if f.source == SOURCE_SNAPSHOT:
        snapshot_id = parse_snapshot_file_name(os.path.basename(f.path))
        last_offset = snapshot_id.end_offset - 1 if snapshot_id is not None else -1
    return _FileContext(f.cluster, f.cluster_id, f.node_id, f.source, f.relative_path, last_offset)


def _control_row(ctx: _FileContext, batch: RecordBatch, record: Record) -> tuple:
    offset = ctx.record_offset(record)
    try:
        control_type = control_record_type(record)
    except DecodeError as exc:
        return ctx.error_row(offset, batch.leader_epoch, f"undecodable control record at offset {offset}: {exc}")
    name = CONTROL_TYPE_NAMES.get(control_type, f"ControlType{control_type}")
    message = _CONTROL_MESSAGES.get(control_type)
    json_text = None
    if message is not None:
        value = record.value or b""
        # Each control record starts with its own int16 Version field, which
        # is also the version it is encoded at.
        version = _INT16.unpack_from(value, 0)[0] if len(value) >= _INT16.size else 0
        if version not in message.versions:
            version = 0
        try:
            json_text = fields_json(message, version, message.decode(version, value), ctx.plans)
        except DecodeError as exc:
            return ctx.error_row(offset, batch.leader_epoch, f"undecodable {name} control record at offset {offset}: {exc}")
    return ctx.row(offset, batch.leader_epoch, batch.max_timestamp_ms, name, None, None, None, json_text, None)


def _metadata_row(ctx: _FileContext, prefix: tuple, batch: RecordBatch, record: Record) -> tuple:
    # The reader's hot path (one call per record): `prefix` is `ctx.prefix`, taken once
    # per file, and the row is built in one tuple concatenation.
    offset = record.offset if ctx.snapshot_last_offset is None else ctx.record_offset(record)
    if record.value is None:
        return ctx.error_row(offset, batch.leader_epoch, f"undecodable record at offset {offset}: null value")
    try:
        decoded = decode_metadata_record(record.value)
    except DecodeError as exc:
        return ctx.error_row(offset, batch.leader_epoch, f"undecodable record at offset {offset}: {exc}")
    message = decoded.message
    name = message.name
    version = decoded.version
    data = decoded.data
    return prefix + (
        offset,
        batch.leader_epoch,
        batch.max_timestamp_ms,
        name,
        version,
        (data.get("name"), data.get("feature_level")) if name == "FeatureLevelRecord" else None,
        _broker(name, version, data) if name in _BROKER_RECORDS else None,
        fields_json(message, version, data, ctx.plans),
        None,
    )


def _verifies_at(data: bytes, position: int) -> bool:
    if position == len(data):
        return True
    try:
        decode_batch(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError:
        return False
    return True


def _resync(data: bytes, bad_position: int, claimed_size: int | None) -> int | None:
    """Where reading continues after the bad batch at `bad_position`, or None."""
    if claimed_size is not None and bad_position + claimed_size <= len(data):
        if _verifies_at(data, bad_position + claimed_size):
            return bad_position + claimed_size
    # The length itself may be what is damaged: look for the next position a
    # batch verifies at. The magic byte filters out almost every position
    # before the CRC is computed; bounded by the file's length.
    last_start = len(data) - HEADER_BYTES
    for position in range(bad_position + 1, last_start + 1):
        if data[position + MAGIC_OFFSET] == MAGIC and _verifies_at(data, position):
            return position
    return None


def _bad_batch_row(ctx: _FileContext, data: bytes, position: int, exc: DecodeError) -> tuple[tuple, int | None]:
    """The error row of a batch that did not verify, and its claimed size (None if unknown)."""
    try:
        claimed = peek_batch_length(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError:
        claimed = None
    available = len(data) - position
    message = str(exc)
    if claimed is None:
        reason = "unreadable batch header" if available >= 12 else "truncated batch"
    elif available < claimed or available < HEADER_BYTES:
        reason = "truncated batch"
    elif "CRC mismatch" in message:
        reason = "crc mismatch"
    else:
        reason = "bad batch"
    offset = -1
    leader_epoch = None
    # baseOffset and the epoch lie outside the CRC, so they are as trustworthy
    # in a bad batch as in a good one; a snapshot's in-file offsets are not log
    # offsets, so its error rows keep -1.
    if available >= _BATCH_PREFIX.size and claimed is not None:
        base_offset, _length, epoch = _BATCH_PREFIX.unpack_from(data, position)
        leader_epoch = epoch
        if ctx.snapshot_last_offset is None:
            offset = base_offset
    row = ctx.error_row(offset, leader_epoch, f"{reason} at byte {position}: {message}")
    return row, claimed


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES} bytes")
    return data


def _segment_base_offset(f: FleetFile) -> int | None:
    stem = os.path.basename(f.path).split(".")[0]
    return int(stem) if stem.isdigit() else None


@dataclass(slots=True)
class ScanState:
    """Where the reading of one file stands between batches: the next position, and
    for a segment the offset and the lowest epoch the next batch must have (None: not
    known, after a damaged batch)."""

    position: int
    expected_offset: int | None
    last_epoch: int = -1
    done: bool = False


def open_file(f: FleetFile, data: bytes | None = None) -> tuple[_FileContext, bytes | None, ScanState, tuple | None]:
    """(context, the file's bytes or None, the initial state, the error row when the file
    cannot be read). `data`: the file's bytes when the caller has read them already."""
    ctx = _context(f)
    try:
        if data is None:
            data = _read_bytes(f.path)
    except OSError as exc:
        return ctx, None, ScanState(0, None, done=True), ctx.error_row(-1, None, f"cannot read file: {exc}")
    # A segment is named after its first offset and its batches follow each other
    # without gaps, in non-decreasing epochs. The base offset and the epoch lie outside
    # the batch CRC, so that continuity is what catches a damaged one.
    expected = _segment_base_offset(f) if ctx.snapshot_last_offset is None else None
    return ctx, data, ScanState(0, expected), None


def step(ctx: _FileContext, data: bytes, state: ScanState) -> list[tuple]:
    """The rows of the one batch at `state.position` (one error row for a bad batch);
    moves `state` past it (or marks it done when no later batch can be found). The
    compiled fast path (pipeline/_columnar.c) hands every batch it does not accept to
    this function, so every error row comes from here."""
    position = state.position
    try:
        batch, next_position = decode_batch(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError as exc:
        row, claimed = _bad_batch_row(ctx, data, position, exc)
        resumed = _resync(data, position, claimed)
        if resumed is None:
            state.done = True
        else:
            state.position = resumed
        state.expected_offset = None  # the bad batch's extent is unknown: trust the next one
        return [row]
    expected_offset = state.expected_offset
    if expected_offset is not None and (batch.base_offset != expected_offset or batch.leader_epoch < state.last_epoch):
        state.expected_offset = expected_offset + len(batch.records)
        state.position = next_position
        return [ctx.error_row(expected_offset, None,
                              f"batch header damaged at byte {position}: base offset {batch.base_offset} "
                              f"(expected {expected_offset}), leader epoch {batch.leader_epoch} (previous "
                              f"{state.last_epoch})")]
    if ctx.snapshot_last_offset is None:
        state.expected_offset = batch.base_offset + len(batch.records)
        state.last_epoch = batch.leader_epoch
    state.position = next_position
    if batch.is_control:
        return [_control_row(ctx, batch, record) for record in batch.records]
    prefix = ctx.prefix
    return [_metadata_row(ctx, prefix, batch, record) for record in batch.records]


def read_file(f: FleetFile) -> Iterator[tuple]:
    """The rows of one segment or snapshot file (see the module docstring)."""
    ctx, data, state, failure = open_file(f)
    if failure is not None:
        yield failure
        return
    # Bounded: every step moves `state.position` forward by at least one byte or ends.
    while not state.done and state.position < len(data):
        yield from step(ctx, data, state)


def read_fleet(root: str | os.PathLike[str]) -> Iterator[tuple]:
    """Every row of every file under `root`, in `fleet_files` order."""
    for f in fleet_files(root):
        yield from read_file(f)
