"""Looking into the metadata log without a running cluster: `kraftwerk dump-log` and
`kraftwerk metadata-shell`.

Owns: reading segment (`*.log`) and snapshot (`*.checkpoint`) files read-only
(`scan_file`), the text `dump-log` prints for them (Kafka 4.4's
`kafka-dump-log.sh --cluster-metadata-decoder` shape: one "baseOffset: ..." line per
batch, one "| offset: ..." line per record with the record as Kafka's JSON), building
an image from a snapshot or a whole metadata directory (`load_snapshot_image`,
`load_directory_image`), the tree of that image (Kafka's MetadataShell layout:
/image/features, /image/cluster/brokers/<id>, /image/cluster/controllers/<id>, /image/topics/byName/<name>/<partition>,
...) and the shell commands over it (ls, cat, cd, pwd, find, tree, help, exit).

Rules kept here:
- Read-only and lock-free: files are mapped and decoded with the record-batch codec
  (`protocol/record_batch.py`), never opened through `MetadataLog`, which takes the
  log's lock and truncates a torn tail. Snapshots are verified by the storage layer's
  own reader (`server/storage/snapshot.py`). Looking must change nothing, even on a
  live or damaged node.
- Damage is reported, never skipped: a batch that does not verify (CRC, length,
  truncation), a header outside the CRC that breaks the file's offsets or epochs, a
  record that does not decode and a snapshot whose structure is wrong each become a
  `Damage` naming the file, the byte and the offset; `dump-log` prints it in place and
  on stderr and exits 1. Reading goes on at the next batch that verifies, so one bad
  batch does not hide the rest of a file.
- One replay: the image is built by `ControllerState.replay` (snapshots through
  `server.controller.snapshot.load_snapshot`), exactly as a node builds it. A
  directory's log is replayed up to its first damage and no further: past a gap the
  image would be a state no node ever had.
- Secrets stay hidden: SCRAM salts and keys and PASSWORD-typed broker configs show as
  `[redacted]` (Kafka's shell prints them).
- Bounded: files are memory-mapped, not read into memory; the resynchronising scan
  visits each byte of a file at most once; a shell session runs at most
  `MAX_SHELL_COMMANDS` commands.
"""

from __future__ import annotations

import argparse
import base64
import json
import mmap
import os
import re
import shlex
import struct
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from importlib import metadata as package_metadata
from typing import Any, NamedTuple, TextIO

from protocol.errors import DecodeError
from protocol.raft_records import (
    KRAFT_VERSION_RECORD,
    LEADER_CHANGE_MESSAGE,
    SNAPSHOT_FOOTER_RECORD,
    SNAPSHOT_HEADER_RECORD,
    VOTERS_RECORD,
)
from protocol.record_batch import (
    CRC_OFFSET,
    DEFAULT_MAX_BATCH_BYTES,
    HEADER_BYTES,
    MAGIC,
    MAGIC_OFFSET,
    ControlRecordType,
    RecordBatch,
    control_record_type,
    decode_batch,
    peek_batch_length,
)
from protocol.records import decode_metadata_record
from protocol.schema import Field, Message, Versions, scalar_default, snake_case
from server.authorization import AclOperation
from server.controller.broker_config_catalog import BROKER_CONFIG_CATALOG
from server.controller.features import METADATA_VERSION, find_metadata_version
from server.controller.snapshot import REPLAY_OFFSET_HEADER, load_snapshot, replay_batch
from server.controller.state import RESOURCE_BROKER, ControllerState, ReplayError
from server.security.model import AclPermissionType, PatternType, ResourceType, ScramMechanism
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.storage.meta_properties import MetaPropertiesError, read_meta_properties, uuid_to_string
from server.storage.snapshot import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    SnapshotRecord,
    list_snapshots,
    parse_snapshot,
    parse_snapshot_file_name,
    read_snapshot,
    snapshot_path,
)
from server.values import SnapshotId

EXIT_OK = 0
EXIT_DAMAGED = 1  # damage found, a file unreadable, a shell command failed
EXIT_USAGE = 2

# Far more commands than any person types or script pipes in; a bound, not a limit
# anyone should meet.
MAX_SHELL_COMMANDS = 1_000_000

_CRC = struct.Struct(">I")
_BASE_OFFSET = struct.Struct(">q")
_INT16 = struct.Struct(">h")
_END_TXN_MARKER = struct.Struct(">hi")  # version, coordinator epoch
_REPLAY_OFFSET = struct.Struct(">q")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_PLACE_PREFIX = re.compile(r"^record batch at byte \d+(?: \(base offset -?\d+\))?: ")


class MetadataToolError(Exception):
    """The command cannot do its work at all (a missing file, no image); the message
    says what and where."""


# --------------------------------------------------------------------------
# Reading files: batches, damage, where reading continues
# --------------------------------------------------------------------------


class FileKind:
    SEGMENT = "segment"  # <20-digit base offset>.log
    SNAPSHOT = "snapshot"  # <20-digit end offset>-<10-digit epoch>.checkpoint
    CHECKPOINT = "checkpoint"  # any other .checkpoint (bootstrap.checkpoint)


def file_kind(path: str) -> str | None:
    name = os.path.basename(path)
    if _SEGMENT_NAME.match(name):
        return FileKind.SEGMENT
    if parse_snapshot_file_name(name) is not None:
        return FileKind.SNAPSHOT
    if name.endswith(SNAPSHOT_SUFFIX):
        return FileKind.CHECKPOINT
    return None


@dataclass(frozen=True, slots=True)
class Damage:
    """Something in a file that is not what a writer of the metadata log writes."""

    path: str
    position: int | None  # byte in the file, when the damage has one
    offset: int | None  # the (base) offset concerned, when known
    reason: str

    def where(self) -> str:
        parts = []
        if self.position is not None:
            parts.append(f"byte {self.position}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        return " ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{self.path}: {where}: {self.reason}" if where else f"{self.path}: {self.reason}"


class GoodBatch(NamedTuple):
    """A batch that verified (CRC, lengths, records)."""

    position: int
    size: int
    crc: int
    batch: RecordBatch


class BadBatch(NamedTuple):
    """A batch that did not verify. `resume` is where reading continues (None: nothing
    after it could be read); `size` is what its length field claims, when readable."""

    position: int
    size: int | None
    base_offset: int | None
    damage: Damage
    resume: int | None


def _verifies_at(data, position: int) -> bool:
    if position == len(data):
        return True
    try:
        size = peek_batch_length(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError:
        return False
    if size is None or position + size > len(data) or data[position + MAGIC_OFFSET] != MAGIC:
        return False
    try:
        decode_batch(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError:
        return False
    return True


def _looks_like_batch(data, position: int) -> bool:
    """A batch header seems to start here (magic byte, a sane length), whether or not
    the batch verifies."""
    if len(data) - position <= MAGIC_OFFSET or data[position + MAGIC_OFFSET] != MAGIC:
        return False
    try:
        return peek_batch_length(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES) is not None
    except DecodeError:
        return False


def _resume_after(data, position: int, claimed: int | None) -> int | None:
    """Where reading continues after the bad batch at `position`: past it by its own
    length when that lands on a batch that verifies (or on the end), else at the next
    position where a batch verifies; None when there is none."""
    if claimed is not None and position + claimed <= len(data):
        following = position + claimed
        if _verifies_at(data, following) or _looks_like_batch(data, following):
            return following  # a damaged next batch is then reported on its own
    # The length itself may be what is damaged. Cheap filters (length in bounds, the
    # magic byte) reject almost every position before a CRC is computed.
    for candidate in range(position + 1, len(data) - HEADER_BYTES + 1):
        if _verifies_at(data, candidate):
            return candidate
    return None


def _bad_batch(path: str, data, position: int, exc: DecodeError) -> BadBatch:
    try:
        claimed = peek_batch_length(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
    except DecodeError:
        claimed = None
    base_offset = None
    if len(data) - position >= _BASE_OFFSET.size:
        # Outside the CRC, so as trustworthy (or not) as in a good batch; a snapshot's
        # in-file offsets are shown as they are too.
        base_offset = _BASE_OFFSET.unpack_from(data, position)[0]
    resume = _resume_after(data, position, claimed)
    # The codec's message starts with the place, which the Damage already names.
    reason = _PLACE_PREFIX.sub("", str(exc))
    if resume is None:
        reason += f"; the {len(data) - position} bytes from here to the end of the file could not be read"
    elif claimed is None or resume != position + claimed:
        reason += f"; reading resumes at byte {resume}"
    return BadBatch(position, claimed, base_offset, Damage(path, position, base_offset, reason), resume)


def _map(path: str) -> Any:
    """The file's bytes, memory-mapped read-only (b"" for an empty file): a segment
    can be a gigabyte (Kafka's default segment size), and a reader needs only the
    batch at hand in memory."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _unmap(data: Any) -> None:
    if isinstance(data, mmap.mmap):
        data.close()


def scan_file(path: str, data=None) -> Iterator[GoodBatch | BadBatch | Damage]:
    """Every batch of a segment or snapshot file in file order, as GoodBatch or BadBatch,
    and a Damage wherever a verified batch breaks the file's order (base offsets follow
    each other without gaps from the file's first offset, epochs never go down; in a
    snapshot offsets start at 0 and every batch carries the id's epoch) and, for a
    snapshot without other damage, wherever the storage layer's snapshot reader refuses
    it (header first, footer last, nothing after it).
    """
    if data is None:
        data = _map(path)
        try:
            yield from scan_file(path, data)
        finally:
            _unmap(data)
        return
    if len(data) == 0:
        yield Damage(path, 0, None, "empty file")
        return
    kind = file_kind(path)
    snapshot_id = parse_snapshot_file_name(os.path.basename(path)) if kind == FileKind.SNAPSHOT else None
    if kind == FileKind.SEGMENT:
        expected: int | None = int(os.path.basename(path)[:20])
    elif kind == FileKind.SNAPSHOT:
        expected = 0
    else:
        expected = None  # a bootstrap checkpoint: its first batch sets the start
    last_epoch = -1
    damaged = False
    position = 0
    # Bounded: every round moves `position` forward by at least one batch header or ends.
    while position < len(data):
        try:
            batch, next_position = decode_batch(data, position, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES)
        except DecodeError as exc:
            damaged = True
            bad = _bad_batch(path, data, position, exc)
            yield bad
            if bad.resume is None:
                return
            position = bad.resume
            expected = None  # the bad batch's extent is unknown: the next good one sets it
            continue
        problems = []
        if expected is not None and batch.base_offset != expected:
            problems.append(f"base offset {batch.base_offset}, expected {expected} (the offset is outside the "
                            f"batch CRC: a damaged header or a gap in the file)")
        if snapshot_id is not None and batch.leader_epoch != snapshot_id.epoch:
            problems.append(f"leader epoch {batch.leader_epoch}, the snapshot id says {snapshot_id.epoch}")
        elif batch.leader_epoch < last_epoch:
            problems.append(f"leader epoch {batch.leader_epoch} after epoch {last_epoch} (epochs never go down)")
        if len(batch.records) != batch.last_offset_delta + 1:
            problems.append(f"{len(batch.records)} records for {batch.last_offset_delta + 1} offsets (KRaft batches "
                            "have no gaps)")
        for problem in problems:
            damaged = True
            yield Damage(path, position, batch.base_offset, problem)
        yield GoodBatch(position, next_position - position, _CRC.unpack_from(data, position + CRC_OFFSET)[0], batch)
        expected = batch.next_offset
        last_epoch = max(last_epoch, batch.leader_epoch)
        position = next_position
    if snapshot_id is not None and not damaged:
        try:
            parse_snapshot(data, snapshot_id, path)
        except CorruptSnapshotError as exc:
            reason = str(exc)
            if reason.startswith(f"{path}: "):
                reason = reason[len(path) + 2:]
            yield Damage(path, None, None, reason)


# --------------------------------------------------------------------------
# Kafka's JSON form of a record (the generated JsonConverters' output)
# --------------------------------------------------------------------------


def _camel_case(name: str) -> str:
    return name[:1].lower() + name[1:]


def java_double(value: float) -> str:
    """Java's Double.toString: plain decimals in [1e-3, 1e7), else d.dddE±n."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    scientific = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{scientific}"


def _is_default(f: Field, value: Any) -> bool:
    if f.is_array:
        return value is None if f.default == "null" else (value is not None and len(value) == 0)
    if f.is_struct:
        return False  # no metadata record has a tagged struct; print it rather than guess
    return value == scalar_default(f)


def _json_value(message: Message, f: Field, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.is_array:
        return [_json_element(message, f, item, version) for item in value]
    return _json_element(message, f, value, version)


def _json_element(message: Message, f: Field, value: Any, version: int) -> Any:
    if f.is_struct:
        return _json_struct(message, message.struct_fields(f.element_type, f), value, version)
    if isinstance(value, uuid.UUID):
        return uuid_to_string(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _json_struct(message: Message, fields: tuple[Field, ...], data: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if version not in Versions.parse(f.versions):
            continue
        value = data.get(f.attr) if hasattr(data, "get") else None
        tagged = f.tag is not None and version in Versions.parse(f.tagged_versions)
        if tagged and _is_default(f, value):
            continue  # Kafka writes a tagged field only when it differs from its default
        out[_camel_case(f.name)] = _json_value(message, f, value, version)
    return out


def _encode_json(value: Any) -> str:
    # Jackson's compact output: no spaces, non-ASCII as is, doubles as Java prints them.
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(key, ensure_ascii=False)}:{_encode_json(item)}"
                              for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode_json(item) for item in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return java_double(value)
    return json.dumps(value, ensure_ascii=False)


def kafka_json(message: Message, version: int, data: Any) -> str:
    """A decoded message as Kafka's generated JsonConverter writes it: camelCase names in
    declaration order, only the fields `version` has, tagged fields only when not at
    their default, uuids in Kafka's base64url form, bytes as base64."""
    return _encode_json(_json_struct(message, message.fields, data, version))


def record_type_name(message: Message) -> str:
    """Kafka's MetadataRecordType constant: FeatureLevelRecord -> FEATURE_LEVEL_RECORD."""
    return snake_case(message.name).upper()


def metadata_record_json(value: bytes) -> str:
    """The payload DumpLogSegments prints for a metadata record; DecodeError if it does not decode."""
    decoded = decode_metadata_record(value)
    return (f'{{"type":"{record_type_name(decoded.message)}","version":{decoded.version},'
            f'"data":{kafka_json(decoded.message, decoded.version, decoded.data)}}}')


# The label each control record type gets, and its declaration (DumpLogSegments' names).
_CONTROL_LABELS: dict[int, tuple[str, Message]] = {
    ControlRecordType.LEADER_CHANGE: ("LeaderChange:", LEADER_CHANGE_MESSAGE),
    ControlRecordType.SNAPSHOT_HEADER: ("SnapshotHeader", SNAPSHOT_HEADER_RECORD),
    ControlRecordType.SNAPSHOT_FOOTER: ("SnapshotFooter", SNAPSHOT_FOOTER_RECORD),
    ControlRecordType.KRAFT_VERSION: ("KRaftVersion", KRAFT_VERSION_RECORD),
    ControlRecordType.VOTERS: ("KRaftVoters", VOTERS_RECORD),
}


def control_record_text(control_type: int, value: bytes | None) -> str:
    """What follows a control record's metadata on its line; DecodeError if it does not decode."""
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if value is None or len(value) < _END_TXN_MARKER.size:
            raise DecodeError("end transaction marker shorter than 6 bytes")
        _version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value, 0)
        return f"endTxnMarker: {ControlRecordType(control_type).name} coordinatorEpoch: {coordinator_epoch}"
    known = _CONTROL_LABELS.get(control_type)
    if known is None:
        return f"controlType: UNKNOWN({control_type})"
    label, message = known
    if value is None or len(value) < _INT16.size:
        raise DecodeError(f"{message.name} has no value")
    # Every control record starts with its own int16 Version, the version it is written at.
    version = _INT16.unpack_from(value, 0)[0]
    if version not in message.versions:
        raise DecodeError(f"{message.name} has no version {version}")
    return f"{label} {kafka_json(message, version, message.decode(version, value))}"


# --------------------------------------------------------------------------
# dump-log
# --------------------------------------------------------------------------


def _batch_line(item: GoodBatch) -> str:
    batch = item.batch
    last_sequence = -1 if batch.base_sequence == -1 else batch.base_sequence + batch.last_offset_delta
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {len(batch.records)} "
            f"baseSequence: {batch.base_sequence} lastSequence: {last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.leader_epoch} "
            f"isTransactional: {_java_bool(batch.is_transactional)} isControl: {_java_bool(batch.is_control)} "
            f"deleteHorizonMs: OptionalLong.empty position: {item.position} CreateTime: {batch.max_timestamp_ms} "
            f"size: {item.size} magic: {MAGIC} compresscodec: none crc: {item.crc} isvalid: true")


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _record_lines(path: str, item: GoodBatch, payloads: bool) -> tuple[list[str], list[Damage]]:
    batch = item.batch
    lines: list[str] = []
    damages: list[Damage] = []
    for record in batch.records:
        sequence = -1 if batch.base_sequence == -1 else batch.base_sequence + (record.offset - batch.base_offset)
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = ",".join(key for key, _ in record.headers)
        line = (f"| offset: {record.offset} CreateTime: {record.timestamp_ms} keySize: {key_size} "
                f"valueSize: {value_size} sequence: {sequence} headerKeys: [{header_keys}]")
        try:
            if batch.is_control:
                line += " " + control_record_text(control_record_type(record), record.value)
            elif payloads:
                if record.value is None:
                    raise DecodeError("null value")
                line += " payload: " + metadata_record_json(record.value)
        except DecodeError as exc:
            damage = Damage(path, item.position, record.offset, f"record does not decode: {exc}")
            damages.append(damage)
            line += f" payload: Error at {record.offset}: {exc}" if not batch.is_control else f" Error: {exc}"
        lines.append(line)
    return lines, damages


def expand_paths(paths: Iterable[str]) -> list[str]:
    """The files to dump: files as given (in order), directories as their segment and
    snapshot files (a node's metadata.log.dir means its __cluster_metadata-0)."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            directory = path
            inner = os.path.join(path, METADATA_LOG_DIR_NAME)
            if os.path.isdir(inner):
                directory = inner
            names = sorted(name for name in os.listdir(directory) if file_kind(name) is not None)
            out.extend(os.path.join(directory, name) for name in names)
        else:
            out.append(path)
    return out


def _print_item(path: str, item: GoodBatch | BadBatch | Damage, file_size: int, out: TextIO, payloads: bool,
                deep: bool) -> list[Damage]:
    """Prints one item of `scan_file`; returns the damage it is or holds."""
    if isinstance(item, GoodBatch):
        print(_batch_line(item), file=out)
        if not deep:
            return []
        lines, damages = _record_lines(path, item, payloads)
        for line in lines:
            print(line, file=out)
        return damages
    if isinstance(item, BadBatch):
        size = "unknown" if item.size is None else item.size
        base = "unknown" if item.base_offset is None else item.base_offset
        print(f"baseOffset: {base} position: {item.position} size: {size} isvalid: false", file=out)
        print(f"Error: {item.damage.where()}: {item.damage.reason}", file=out)
        if item.resume is None:
            print(f"Found {file_size - item.position} invalid bytes at the end of {os.path.basename(path)}", file=out)
        return [item.damage]
    where = item.where()
    print(f"Error: {where + ': ' if where else ''}{item.reason}", file=out)
    return [item]


def dump_file(path: str, out: TextIO, payloads: bool, deep: bool = True) -> list[Damage]:
    """Prints one file as DumpLogSegments does; returns the damage found (also printed in place)."""
    kind = file_kind(path)
    print(f"Dumping {path}", file=out)
    if kind is None:
        print(f"Ignoring unknown file {path}", file=out)
        return []
    if kind == FileKind.SEGMENT:
        print(f"Log starting offset: {int(os.path.basename(path)[:20])}", file=out)
    elif kind == FileKind.SNAPSHOT:
        snapshot_id = parse_snapshot_file_name(os.path.basename(path))
        print(f"Snapshot end offset: {snapshot_id.end_offset}, epoch: {snapshot_id.epoch}", file=out)
    else:
        print("KRaft bootstrap snapshot", file=out)
    try:
        data = _map(path)
    except OSError as exc:
        damage = Damage(path, None, None, f"cannot read the file: {exc.strerror or exc}")
        print(f"Error: {damage.reason}", file=out)
        return [damage]
    damages: list[Damage] = []
    try:
        # Streamed: a segment's batches are printed as they are read, never all held.
        for item in scan_file(path, data):
            damages.extend(_print_item(path, item, len(data), out, payloads, deep))
    finally:
        _unmap(data)
    return damages


def dump_log(paths: Iterable[str], out: TextIO, err: TextIO, payloads: bool = True, deep: bool = True) -> int:
    """`kraftwerk dump-log`: every file dumped; each damage also on `err`. Exit status."""
    try:
        files = expand_paths(paths)
    except OSError as exc:
        print(f"Error: {exc}", file=err)
        return EXIT_DAMAGED
    if not files:
        print("Error: no segment (.log) or snapshot (.checkpoint) files to dump", file=err)
        return EXIT_USAGE
    damages: list[Damage] = []
    for path in files:
        if not os.path.exists(path):
            damages.append(Damage(path, None, None, "no such file"))
            print(f"Error: {path}: no such file", file=out)
            continue
        damages.extend(dump_file(path, out, payloads, deep))
    out.flush()
    for damage in damages:
        print(f"Error: {damage}", file=err)
    if damages:
        print(f"Error: {len(damages)} problem(s) found; the metadata log above is not what its writer wrote "
              "(or not readable by this release)", file=err)
        return EXIT_DAMAGED
    return EXIT_OK


# --------------------------------------------------------------------------
# Building the image
# --------------------------------------------------------------------------


class Provenance(NamedTuple):
    """What the image contains up to: the last offset, its epoch and its time."""

    offset: int
    epoch: int
    time_ms: int


@dataclass(frozen=True, slots=True)
class LoadedImage:
    state: ControllerState
    provenance: Provenance
    # Damage met while loading (a corrupt newer snapshot, a damaged log tail): the
    # image stops before it. Empty when everything read verified.
    damages: tuple[Damage, ...] = ()


def _cluster_id(metadata_dir: str) -> str:
    # Not in the log (Kafka keeps it in meta.properties); the image only carries it.
    try:
        meta = read_meta_properties(os.path.dirname(os.path.abspath(metadata_dir)))
    except (OSError, MetaPropertiesError, UnicodeDecodeError):
        return ""
    return meta.cluster_id if meta is not None else ""


def _with_replay_offsets(records: tuple[SnapshotRecord, ...], end_offset: int) -> tuple[list[SnapshotRecord], int]:
    """A snapshot's records, each with the offset it replays at. kraftwerk's snapshots
    carry it in a record header; Kafka's do not, and then the records take the offsets
    just below the snapshot's end, so the last one lands on its last offset, as the
    node's own snapshots place them. A snapshot with more records than offsets (Kafka's
    bootstrap snapshot ends at 0) counts from 0. Returns the records and the end to
    check them against."""
    if all(any(key == REPLAY_OFFSET_HEADER for key, _ in entry.headers) for entry in records):
        return list(records), end_offset
    first = max(0, end_offset - len(records))
    placed = [SnapshotRecord(entry.value, entry.control_type,
                             entry.headers + ((REPLAY_OFFSET_HEADER, _REPLAY_OFFSET.pack(first + index)),))
              for index, entry in enumerate(records)]
    return placed, max(end_offset, first + len(records))


def _load_snapshot_contents(path: str, snapshot_id: SnapshotId, cluster_id: str) -> LoadedImage:
    contents = read_snapshot(path)
    records, end = _with_replay_offsets(contents.records, snapshot_id.end_offset)
    state = load_snapshot(records, end, cluster_id)
    provenance = Provenance(snapshot_id.end_offset - 1, snapshot_id.epoch, contents.last_contained_log_timestamp_ms)
    return LoadedImage(state, provenance)


def replay_batches(state: ControllerState, batches: Iterable[RecordBatch], from_offset: int) -> Provenance | None:
    """Replays the records at offsets >= `from_offset` of `batches` (file order) into
    `state` as the node does (`replay_batch`). Returns where the image stands (None if
    nothing was replayed). Raises DecodeError or ReplayError at the first record that
    does not decode or replay."""
    provenance = None
    for batch in batches:
        replay_batch(state, batch, from_offset)
        if batch.records and batch.records[-1].offset >= from_offset:
            provenance = Provenance(batch.records[-1].offset, batch.leader_epoch, batch.max_timestamp_ms)
    return provenance


def _replay_file(state: ControllerState, path: str, from_offset: int, expected: int | None
                 ) -> tuple[Provenance | None, int | None, Damage | None]:
    """Replays one file's verified batches until its first damage. Returns where the
    image stands, the offset the next file must start at, and the damage (if any)."""
    provenance = None
    for item in scan_file(path):
        if isinstance(item, BadBatch):
            return provenance, expected, item.damage
        if isinstance(item, Damage):
            return provenance, expected, item
        batch = item.batch
        if expected is not None and batch.base_offset != expected and batch.next_offset > from_offset:
            return provenance, expected, Damage(path, item.position, batch.base_offset,
                                                f"the log continues at offset {batch.base_offset}, expected "
                                                f"{expected}: offsets {min(expected, batch.base_offset)} to "
                                                f"{max(expected, batch.base_offset) - 1} are missing or repeated")
        try:
            replayed = replay_batches(state, [batch], from_offset)
        except (DecodeError, ReplayError) as exc:
            return provenance, expected, Damage(path, item.position, batch.base_offset,
                                                f"does not replay: {exc}")
        provenance = replayed or provenance
        expected = batch.next_offset
    return provenance, expected, None


def load_snapshot_image(path: str) -> LoadedImage:
    """The image a snapshot file holds (kraftwerk's or Kafka's; a bootstrap checkpoint
    too). Raises MetadataToolError when it does not verify or does not replay."""
    if not os.path.isfile(path):
        raise MetadataToolError(f"{path}: no such file")
    cluster_id = _cluster_id(os.path.dirname(os.path.abspath(path)))
    snapshot_id = parse_snapshot_file_name(os.path.basename(path))
    try:
        if snapshot_id is not None:
            return _load_snapshot_contents(path, snapshot_id, cluster_id)
    except CorruptSnapshotError as exc:
        raise MetadataToolError(str(exc)) from None
    if not os.path.basename(path).endswith(SNAPSHOT_SUFFIX):
        raise MetadataToolError(f"{path}: not a snapshot (.checkpoint) file")
    # A checkpoint without a snapshot id (bootstrap.checkpoint): its records at their
    # offsets in the file.
    state = ControllerState(cluster_id)
    provenance, _expected, damage = _replay_file(state, path, 0, None)
    if damage is not None:
        raise MetadataToolError(str(damage))
    return LoadedImage(state, provenance or Provenance(-1, -1, 0))


def metadata_directory(path: str) -> str:
    """`path` if it holds segments or snapshots, else its __cluster_metadata-0."""
    inner = os.path.join(path, METADATA_LOG_DIR_NAME)
    return inner if os.path.isdir(inner) else path


def load_directory_image(path: str) -> LoadedImage:
    """The image of a metadata directory: its newest snapshot that verifies and
    replays, then its log after it, up to the log's end (committed or not: the high
    watermark is not on disk) or its first damage. Damage is returned with the image;
    MetadataToolError when there is no image to show at all."""
    if not os.path.isdir(path):
        raise MetadataToolError(f"{path}: no such directory")
    directory = metadata_directory(path)
    cluster_id = _cluster_id(directory)
    damages: list[Damage] = []
    state = ControllerState(cluster_id)
    provenance = Provenance(-1, -1, 0)
    from_offset = 0
    for snapshot_id in reversed(list_snapshots(directory)):
        if snapshot_id.end_offset == 0:
            # Kafka's bootstrap snapshot (KIP-853): the first leader writes its records
            # into the log, which is replayed from 0.
            continue
        snapshot_file = snapshot_path(directory, snapshot_id)
        try:
            loaded = _load_snapshot_contents(snapshot_file, snapshot_id, cluster_id)
        except (CorruptSnapshotError, OSError) as exc:
            damages.append(Damage(snapshot_file, None, None, f"{exc}; an older snapshot is used"))
            continue
        state, provenance, from_offset = loaded.state, loaded.provenance, snapshot_id.end_offset
        break
    segments = sorted((int(name[:20]), name) for name in os.listdir(directory) if _SEGMENT_NAME.match(name))
    expected: int | None = None
    if segments and segments[0][0] > from_offset:
        raise MetadataToolError(
            f"{directory}: the log starts at offset {segments[0][0]} but "
            + (f"the newest usable snapshot ends at {from_offset}" if from_offset else "there is no usable snapshot")
            + f": offsets {from_offset} to {segments[0][0] - 1} are missing")
    for _base, name in segments:
        segment = os.path.join(directory, name)
        replayed, expected, damage = _replay_file(state, segment, from_offset, expected)
        provenance = replayed or provenance
        if damage is not None:
            damages.append(Damage(damage.path, damage.position, damage.offset,
                                  f"{damage.reason}; the image stops before it"))
            break
    if provenance.offset < 0 and not segments and not list_snapshots(directory):
        raise MetadataToolError(f"{directory}: no segment (.log) or snapshot (.checkpoint) files")
    return LoadedImage(state, provenance, tuple(damages))


# --------------------------------------------------------------------------
# The image as a tree (Kafka's MetadataShell layout)
# --------------------------------------------------------------------------

# A directory maps child names to nodes; a file is its text.
Node = dict | str

REDACTED = "[redacted]"
_SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
_LEADER_RECOVERY_STATES = {0: "RECOVERED", 1: "RECOVERING"}
# ConfigRecord.ResourceType codes and Kafka's ConfigResource.Type names.
_CONFIG_RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS",
                          32: "GROUP"}
_QUOTA_ENTITY_NAMES = (("client-id", "clientId"), ("ip", "ip"), ("user", "user"))


def _enum_name(enum_type, code: int) -> str:
    try:
        return enum_type(code).name
    except ValueError:
        return "UNKNOWN"


def _java_list(values: Iterable[Any]) -> str:
    return "[" + ", ".join(str(value) for value in values) + "]"


def _uuid_list(values: Iterable[uuid.UUID]) -> str:
    return _java_list(uuid_to_string(value) for value in values)


def _optional(value: Any) -> str:
    return "Optional.empty" if value is None else f"Optional[{value}]"


def _version_range(low: int, high: int) -> str:
    if low == high:
        return str(low)
    if high == 0x7FFF:
        return f"{low}+"
    return f"{low}-{high}"


def _listeners_and_features_text(registration) -> tuple[str, str]:
    """Kafka's texts of a broker's or controller's registered endpoints and features (sorted by name)."""
    listeners = ", ".join(
        f"Endpoint(listenerName='{e.name}', securityProtocol="
        f"{_SECURITY_PROTOCOLS.get(e.security_protocol, e.security_protocol)}, host='{e.host}', port={e.port})"
        for e in sorted(registration.endpoints, key=lambda endpoint: endpoint.name))
    features = ", ".join(f"{name}: {_version_range(r.min_level, r.max_level)}"
                         for name, r in sorted(registration.supported_features.items()))
    return listeners, features


def _broker_text(registration) -> str:
    listeners, features = _listeners_and_features_text(registration)
    cordoned = registration.cordoned_log_dirs
    return (f"BrokerRegistration(id={registration.broker_id}, epoch={registration.epoch}, "
            f"incarnationId={uuid_to_string(registration.incarnation_id)}, listeners=[{listeners}], "
            f"supportedFeatures={{{features}}}, rack={_optional(registration.rack)}, "
            f"fenced={_java_bool(registration.fenced)}, "
            f"inControlledShutdown={_java_bool(registration.in_controlled_shutdown)}, "
            f"isMigratingZkBroker={_java_bool(registration.is_migrating_zk_broker)}, "
            f"directories={_uuid_list(registration.log_dirs)}, "
            f"cordonedDirectories={_uuid_list(cordoned or ())})")


def _controller_text(registration) -> str:
    """Kafka 4.4's ControllerRegistration.toString (listeners and features sorted by name)."""
    listeners, features = _listeners_and_features_text(registration)
    return (f"ControllerRegistration(id={registration.controller_id}, "
            f"incarnationId={uuid_to_string(registration.incarnation_id)}, "
            f"zkMigrationReady={_java_bool(registration.zk_migration_ready)}, listeners=[{listeners}], "
            f"supportedFeatures={{{features}}})")


def _partition_text(partition) -> str:
    return (f"PartitionRegistration(replicas={_java_list(partition.replicas)}, "
            f"directories={_uuid_list(partition.directories)}, isr={_java_list(partition.isr)}, "
            f"removingReplicas={_java_list(partition.removing_replicas)}, "
            f"addingReplicas={_java_list(partition.adding_replicas)}, elr=[], lastKnownElr=[], "
            f"leader={partition.leader}, "
            f"leaderRecoveryState={_LEADER_RECOVERY_STATES.get(partition.leader_recovery_state, 'UNKNOWN')}, "
            f"leaderEpoch={partition.leader_epoch}, partitionEpoch={partition.partition_epoch})")


def _topic_node(topic) -> dict:
    node: dict = {"name": topic.name, "id": uuid_to_string(topic.topic_id)}
    for index, partition in topic.partitions.items():
        node[str(index)] = _partition_text(partition)
    return node


def _acl_text(acl) -> str:
    return (f"StandardAcl(resourceType={_enum_name(ResourceType, acl.resource_type)}, "
            f"resourceName={acl.resource_name}, patternType={_enum_name(PatternType, acl.pattern_type)}, "
            f"principal={acl.principal}, host={acl.host}, operation={_enum_name(AclOperation, acl.operation)}, "
            f"permissionType={_enum_name(AclPermissionType, acl.permission_type)})")


def _escape_quota_name(name: str) -> str:
    return name.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def quota_entity_name(entity) -> str:
    """Kafka's child name for a client quota entity: clientId(a)_ip(b)_user(c); a
    default entity name shows as <default>."""
    names = dict(entity)
    parts = []
    for entity_type, label in _QUOTA_ENTITY_NAMES:
        if entity_type in names:
            name = names[entity_type]
            parts.append(f"{label}({'<default>' if name is None else _escape_quota_name(name)})")
    return "_".join(parts)


def _config_value(resource_type: int, key: str, value: str) -> str:
    fact = BROKER_CONFIG_CATALOG.get(key) if resource_type == RESOURCE_BROKER else None
    return REDACTED if fact is not None and fact.sensitive else value


def _features_node(state: ControllerState) -> dict:
    level = state.metadata_version
    version = None if level is None else find_metadata_version(level)
    node: dict = {
        # Kafka 3.9's shape: the version's name (4.4 prints its Optional), and the ZK
        # migration state, which kraftwerk still runs.
        "metadataVersion": "none" if level is None else (version.name if version is not None else str(level)),
        "zkMigrationState": state.zk_migration_state.name,
    }
    for name, feature_level in state.finalized_levels.items():
        if name != METADATA_VERSION:
            node[f"finalized_{name}"] = str(feature_level)
    return node


def _provenance_text(provenance: Provenance) -> str:
    moment = datetime.fromtimestamp(provenance.time_ms / 1000, tz=timezone.utc)
    # Java's ISO_ZONED_DATE_TIME: seconds always, the fraction only as long as needed.
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    fraction = provenance.time_ms % 1000
    if fraction:
        text += f".{fraction:03d}".rstrip("0")
    return f"offset {provenance.offset}, epoch {provenance.epoch}, time {text}Z[UTC]"


def _tool_version() -> str:
    try:
        return package_metadata.version("kraftwerk")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def image_tree(image: LoadedImage) -> dict:
    """The shell's root: /local (this tool) and /image (the metadata image)."""
    state = image.state
    topics = state.topics()
    configs: dict = {}
    for resource_type, resource_name in state.config_resources():
        type_name = _CONFIG_RESOURCE_TYPES.get(resource_type, "UNKNOWN")
        name = type_name if resource_name == "" else f"{type_name}:{resource_name}"
        configs[name] = {key: _config_value(resource_type, key, value)
                         for key, value in state.configs(resource_type, resource_name).items()}
    scram: dict = {mechanism.mechanism_name: {} for mechanism in ScramMechanism
                   if mechanism != ScramMechanism.UNKNOWN}
    for (user, mechanism), credential in state.scram_credentials().items():
        mechanism_name = _enum_name(ScramMechanism, mechanism).replace("_", "-")
        scram.setdefault(mechanism_name, {})[user] = (
            f"ScramCredentialData(salt={REDACTED}, storedKey={REDACTED}, serverKey={REDACTED}, "
            f"iterations={credential.iterations})")
    image_node: dict = {
        "provenance": _provenance_text(image.provenance),
        "features": _features_node(state),
        "cluster": {
            "brokers": {str(broker_id): _broker_text(registration)
                        for broker_id, registration in state.brokers.items()},
            "controllers": {str(controller_id): _controller_text(registration)
                            for controller_id, registration in sorted(state.controllers.items())},
        },
        "topics": {
            "byName": {name: _topic_node(topic) for name, topic in topics.items()},
            "byId": {uuid_to_string(topic.topic_id): _topic_node(topic) for topic in topics.values()},
        },
        "configs": configs,
        "clientQuotas": {quota_entity_name(entity): {key: java_double(value) for key, value in values.items()}
                         for entity, values in state.client_quotas().items()},
        "producerIds": {"nextProducerId": str(state.producer_ids.next_producer_id)},
        "acls": {"byId": {uuid_to_string(acl_id): _acl_text(acl) for acl_id, acl in state.acls().items()}},
        "scram": scram,
        # kraftwerk does not model delegation tokens.
        "delegationToken": {},
    }
    return {"local": {"version": _tool_version(), "commitId": "unknown"}, "image": image_node}


# --------------------------------------------------------------------------
# The shell
# --------------------------------------------------------------------------


def _split_path(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _strip_dots(parts: list[str]) -> list[str]:
    out: list[str] = []
    for part in parts:
        if part == "..":
            if out:
                out.pop()
        elif part != ".":
            out.append(part)
    return out


def glob_pattern(component: str) -> re.Pattern[str] | str:
    """A path component as Kafka's shell reads it: `*`, `?` and `{a,b}` are wildcards,
    `\\` escapes; returns the literal name when there is no wildcard."""
    regex = []
    literal = []
    wildcard = False
    in_group = False
    index = 0
    while index < len(component):
        char = component[index]
        index += 1
        if char == "\\" and index < len(component):
            regex.append(re.escape(component[index]))
            literal.append(component[index])
            index += 1
        elif char == "*":
            wildcard = True
            regex.append(".*")
        elif char == "?":
            wildcard = True
            regex.append(".")
        elif char == "{" and not in_group:
            wildcard = in_group = True
            regex.append("(?:")
        elif char == "," and in_group:
            regex.append("|")
        elif char == "}" and in_group:
            in_group = False
            regex.append(")")
        else:
            regex.append(re.escape(char))
            literal.append(char)
    if in_group:
        raise ValueError(f"unterminated glob group in {component!r}")
    return re.compile("^" + "".join(regex) + "$") if wildcard else "".join(literal)


class Match(NamedTuple):
    parts: tuple[str, ...]
    node: Node

    @property
    def absolute_path(self) -> str:
        return "/" + "/".join(self.parts)

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else "/"


def resolve(root: dict, working_directory: str, glob: str) -> list[Match]:
    """Every node `glob` names (relative to `working_directory` unless absolute), in
    sorted order; empty when none."""
    full = glob if glob.startswith("/") else f"{working_directory}/{glob}"
    components = [glob_pattern(part) for part in _strip_dots(_split_path(full))]
    matches: list[Match] = []

    def visit(index: int, node: Node, parts: tuple[str, ...]) -> None:
        if index == len(components):
            matches.append(Match(parts, node))
            return
        if not isinstance(node, dict):
            return
        pattern = components[index]
        if isinstance(pattern, str):
            if pattern in node:
                visit(index + 1, node[pattern], parts + (pattern,))
            return
        for name in sorted(node):
            if pattern.match(name):
                visit(index + 1, node[name], parts + (name,))

    visit(0, root, ())
    return matches


# Kafka's command names and descriptions (MetadataShell's Commands).
COMMANDS = {
    "cat": "Show the contents of metadata files.",
    "cd": "Set the current working directory.",
    "exit": "Exit the metadata shell.",
    "find": "Search for nodes in the directory hierarchy.",
    "help": "Display this help message.",
    "ls": "List metadata nodes.",
    "pwd": "Print the current working directory.",
    "tree": "Show the contents of metadata nodes in a tree structure.",
}


class Shell:
    """The commands over one image tree. `run(words)` runs one command line and returns
    False when it reported an error; `exited` is set by `exit`."""

    def __init__(self, root: dict, write: Callable[[str], None]) -> None:
        self.root = root
        self.working_directory = "/"
        self.exited = False
        self._write = write

    def _print(self, text: str = "") -> None:
        self._write(text + "\n")

    def run(self, words: list[str]) -> bool:
        while words and not words[-1]:
            words = words[:-1]
        if not words:
            return True
        command, args = words[0], words[1:]
        handler = getattr(self, f"_cmd_{command}", None) if command in COMMANDS else None
        if handler is None:
            choices = ", ".join(f"'{name}'" for name in COMMANDS)
            self._print(f"invalid choice: '{command}' (choose from {choices})")
            return False
        try:
            return handler(args)
        except ValueError as exc:  # a malformed glob
            self._print(f"{command}: {exc}")
            return False

    def _targets(self, args: list[str]) -> list[str]:
        return [arg for arg in args if arg] or ["."]

    def _cmd_ls(self, args: list[str]) -> bool:
        ok = True
        files: list[str] = []
        directories: list[tuple[str, list[str]]] = []
        for target in self._targets(args):
            matches = resolve(self.root, self.working_directory, target)
            if not matches:
                self._print(f"ls: {target}: no such file or directory.")
                ok = False
            for match in matches:
                if isinstance(match.node, dict):
                    directories.append((match.name, sorted(match.node)))
                else:
                    files.append(match.name)
        for name in files:
            self._print(name)
        need_intro = bool(files) or len(directories) > 1
        first = not files
        for name, children in directories:
            intro = []
            if need_intro:
                intro = [f"{name}:"] if first else ["", f"{name}:"]
                first = False
            if children:  # an empty directory prints nothing, not even its name (as Kafka)
                for line in intro + children:
                    self._print(line)
        return ok

    def _print_node(self, node: Node, indent: int) -> None:
        pad = "  " * indent
        if isinstance(node, dict):
            for name in sorted(node):
                self._print(f"{pad}{name}:")
                self._print_node(node[name], indent + 1)
        else:
            self._print(f"{pad}{node}")

    def _for_each_match(self, command: str, args: list[str], show: Callable[[str, Any], bool]) -> bool:
        """Runs `show(target, node)` on every node each argument names; False when an
        argument names nothing, none was given, or `show` refused a node."""
        if not args:
            self._print(f"{command}: too few arguments")
            return False
        ok = True
        for target in args:
            matches = resolve(self.root, self.working_directory, target)
            if not matches:
                self._print(f"{command}: {target}: No such file or directory.")
                ok = False
            for match in matches:
                ok = show(target, match.node) and ok
        return ok

    def _cmd_cat(self, args: list[str]) -> bool:
        def show(target: str, node: Any) -> bool:
            if isinstance(node, dict):
                self._print(f"cat: {target}: Is a directory")
                return False
            self._print_node(node, 0)
            return True
        return self._for_each_match("cat", args, show)

    def _cmd_tree(self, args: list[str]) -> bool:
        def show(target: str, node: Any) -> bool:
            self._print_node(node, 0)
            return True
        return self._for_each_match("tree", args, show)

    def _cmd_cd(self, args: list[str]) -> bool:
        if len(args) > 1:
            self._print("cd: too many arguments")
            return False
        target = args[0] if args else "/"
        matches = resolve(self.root, self.working_directory, target)
        if not matches:
            self._print(f"cd: {target}: no such directory.")
            return False
        if not isinstance(matches[0].node, dict):
            self._print(f"cd: {target}: not a directory.")
            return False
        self.working_directory = matches[0].absolute_path
        return True

    def _cmd_pwd(self, args: list[str]) -> bool:
        self._print(self.working_directory)
        return True

    def _find(self, path: str, node: Node) -> None:
        self._print(path)
        if isinstance(node, dict):
            for name in sorted(node):
                self._find(f"{path}{name}" if path == "/" else f"{path}/{name}", node[name])

    def _cmd_find(self, args: list[str]) -> bool:
        ok = True
        for target in self._targets(args):
            matches = resolve(self.root, self.working_directory, target)
            if not matches:
                self._print(f"find: {target}: no such file or directory.")
                ok = False
            # A plain path is printed as given (Kafka's way); a glob as each match's path.
            literal = all(isinstance(glob_pattern(part), str) for part in _split_path(target))
            for match in matches:
                self._find(target if literal else match.absolute_path, match.node)
        return ok

    def _cmd_help(self, args: list[str]) -> bool:
        self._print("Welcome to the kraftwerk metadata shell.")
        self._print()
        for name, description in COMMANDS.items():
            self._print(f"  {name:<6} {description}")
        return True

    def _cmd_exit(self, args: list[str]) -> bool:
        self.exited = True
        return True


def run_shell_lines(shell: Shell, lines: Iterable[str]) -> bool:
    """Runs one command per line until `exit` or the end; True when every command succeeded."""
    ok = True
    for count, line in enumerate(lines):
        if count >= MAX_SHELL_COMMANDS:
            shell._print(f"stopped after {MAX_SHELL_COMMANDS} commands")
            return False
        try:
            words = shlex.split(line)
        except ValueError as exc:
            shell._print(f"cannot parse the line: {exc}")
            ok = False
            continue
        ok = shell.run(words) and ok
        if shell.exited:
            break
    return ok


def _interactive_lines(stdin: TextIO, stdout: TextIO) -> Iterator[str]:
    while True:
        stdout.write(">> ")
        stdout.flush()
        line = stdin.readline()
        if not line:
            stdout.write("\n")
            return
        yield line


def metadata_shell(snapshot: str | None, directory: str | None, command: list[str],
                   stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """`kraftwerk metadata-shell`: one command from the arguments, else one per line of
    stdin (a prompt only on a terminal). Exit status: 0, or 1 when loading met damage
    or a command failed."""
    try:
        image = load_snapshot_image(snapshot) if snapshot is not None else load_directory_image(directory)
    except (MetadataToolError, OSError) as exc:
        print(f"Error: {exc}", file=stderr)
        return EXIT_DAMAGED
    for damage in image.damages:
        print(f"Error: {damage}", file=stderr)
    shell = Shell(image_tree(image), stdout.write)
    if command:
        ok = shell.run(list(command))
    elif stdin.isatty():
        stdout.write("[ kraftwerk metadata shell ]\n")
        ok = run_shell_lines(shell, _interactive_lines(stdin, stdout))
    else:
        ok = run_shell_lines(shell, stdin)
    stdout.flush()
    return EXIT_OK if ok and not image.damages else EXIT_DAMAGED


# --------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------


def cmd_dump_log(args) -> int:
    paths = list(args.files)
    for listed in args.files_option or ():
        paths.extend(part for part in listed.split(",") if part)
    if not paths:
        print("Error: name the files to dump (FILE... or --files a,b)", file=sys.stderr)
        return EXIT_USAGE
    return dump_log(paths, sys.stdout, sys.stderr, payloads=args.cluster_metadata, deep=args.cluster_metadata
                    or args.deep_iteration)


def cmd_metadata_shell(args) -> int:
    return metadata_shell(args.snapshot, args.directory, args.command, sys.stdin, sys.stdout, sys.stderr)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Registers `dump-log` and `metadata-shell` on the `kraftwerk` command."""
    dump = sub.add_parser(
        "dump-log", help="print every batch and record of metadata log segments and snapshots "
                         "(like kafka-dump-log.sh --cluster-metadata-decoder)")
    dump.add_argument("files", nargs="*", metavar="FILE",
                      help="segment (*.log) and snapshot (*.checkpoint) files, or a metadata directory")
    dump.add_argument("--files", dest="files_option", action="append", metavar="FILE,FILE",
                      help="comma-separated files, as Kafka's tool takes them")
    dump.add_argument("--cluster-metadata", "--cluster-metadata-decoder", dest="cluster_metadata",
                      action="store_true", help="decode every record as a metadata record (Kafka's JSON)")
    dump.add_argument("--deep-iteration", action="store_true",
                      help="list every record (implied by --cluster-metadata)")
    dump.set_defaults(func=cmd_dump_log)

    shell = sub.add_parser(
        "metadata-shell", help="browse the metadata image of a snapshot or a metadata directory "
                               "(like kafka-metadata-shell.sh)")
    source = shell.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", "-s", help="a snapshot file (<end offset>-<epoch>.checkpoint)")
    source.add_argument("--directory", "-d",
                        help="a metadata directory (or a node's metadata.log.dir): newest snapshot + log")
    shell.add_argument("command", nargs=argparse.REMAINDER,
                       help="one command to run (ls, cat, find, tree, ...); none: read commands from stdin")
    shell.set_defaults(func=cmd_metadata_shell)
