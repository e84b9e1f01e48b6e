"""Metadata records as Kafka frames them inside a record's value.

Owns: `MetadataRecord` (a declaration, a version and the field values) and
the frame codec: uvarint frame version (always 1), uvarint API key, uvarint
record version, then the record body (Kafka's `AbstractApiMessageSerde`).
Metadata records use the flexible encoding in every version they declare as
flexible (all of them: "0+").

The record batches that carry these values live in `protocol/record_batch.py`.

`decode_metadata_record` has a hand-written fast path for the records a large image
is made of (TopicRecord, PartitionRecord, ConfigRecord, without tagged fields): every
replica decodes each of them (a ZooKeeper migration's copy is 100k+ of them), and
the generic decoder costs more than half as much again. RegisterBrokerRecord (every
version, its known tagged fields included) has one too: each of N nodes decodes every
broker's registration, again whenever the fleet re-registers. The fast path returns exactly
what the generic decoder returns (the same Container, key order included:
tests/migration/test_record_fast_path.py and tests/protocol/test_register_broker_fast_path.py
compare both on arbitrary records and bytes);
anything it does not handle, or any doubt about the bytes, goes to the generic
decoder, which alone reports errors.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from io import BytesIO
from types import MappingProxyType
from typing import Any, Callable

from construct import Container

from protocol import metadata_records as mr
from protocol.errors import DecodeError
from protocol.primitives import _uuid_from_bytes, read_uvarint, write_uvarint
from protocol.schema import Message

FRAME_VERSION = 1

RECORD_TYPES: MappingProxyType[int, Message] = MappingProxyType(
    {
        message.api_key: message
        for message in vars(mr).values()
        if isinstance(message, Message) and message.type == "metadata"
    }
)


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One metadata record: which record (`message`), its version, its fields."""

    message: Message
    version: int
    data: Any  # a dict or construct Container keyed by snake_case field names

    @property
    def api_key(self) -> int:
        return self.message.api_key

    @property
    def name(self) -> str:
        return self.message.name


def encode_metadata_record(record: MetadataRecord) -> bytes:
    stream = BytesIO()
    write_uvarint(stream, FRAME_VERSION)
    write_uvarint(stream, record.message.api_key)
    write_uvarint(stream, record.version)
    record.message.encode_into(record.version, record.data, stream)
    return stream.getvalue()


def decode_metadata_record(value: bytes) -> MetadataRecord:
    # Fast path: frame version 1, one-byte api key and version (every record type today).
    if len(value) > 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
        fast = _FAST_DECODERS.get((value[1], value[2]))
        if fast is not None:
            try:
                data = fast[1](value)
            except (struct.error, IndexError, ValueError, UnicodeDecodeError):
                data = None  # bad or unusual bytes: the generic decoder says what is wrong
            if data is not None:
                return MetadataRecord(fast[0], value[2], data)
    return _decode_generic(value)


def _decode_generic(value: bytes) -> MetadataRecord:
    stream = BytesIO(value)
    frame_version = read_uvarint(stream)
    if frame_version != FRAME_VERSION:
        raise DecodeError(f"unknown metadata record frame version {frame_version}")
    api_key = read_uvarint(stream)
    message = RECORD_TYPES.get(api_key)
    if message is None:
        raise DecodeError(f"unknown metadata record type {api_key}")
    version = read_uvarint(stream)
    if version not in _VERSIONS[api_key]:
        raise DecodeError(f"{message.name} has no version {version}")
    data = message.decode(version, stream)
    if stream.read(1):
        raise DecodeError(f"{message.name} v{version}: trailing bytes")
    return MetadataRecord(message, version, data)


def record(message: Message, data: dict, version: int | None = None) -> MetadataRecord:
    """Builds a record at the given version (default: the highest declared)."""
    return MetadataRecord(message, message.version_range[1] if version is None else version, data)


# Each record type's versions, parsed once (`Message.versions` parses its text per call).
_VERSIONS = {api_key: message.versions for api_key, message in RECORD_TYPES.items()}

# -- the fast path (see the module docstring) ------------------------------------------

_INT8 = struct.Struct(">b").unpack_from
_BODY = 3  # the frame's three one-byte varints


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > 0xFFFFFFFF:
                raise ValueError("unsigned varint exceeds 32 bits")
            return result, pos + 1
        shift += 7
        if shift > 28:
            raise ValueError("unsigned varint too long")


def _uuid(buf: bytes, pos: int) -> uuid.UUID:
    end = pos + 16
    if end > len(buf):
        raise ValueError("truncated uuid")
    return _uuid_from_bytes(bytes(buf[pos:end]))


def _string(buf: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    length, pos = _uvarint(buf, pos)
    length -= 1
    if length < 0:
        if nullable:
            return None, pos
        raise ValueError("null string")
    end = pos + length
    if end > len(buf):
        raise ValueError("truncated string")
    return bytes(buf[pos:end]).decode("utf-8"), end


def _no_tags_at_end(buf: bytes, pos: int) -> bool:
    """True when the body ends with an empty tagged-field section and nothing after it."""
    return pos + 1 == len(buf) and buf[pos] == 0


def _topic_record_v0(buf: bytes) -> Container | None:
    name, pos = _string(buf, _BODY)
    topic_id = _uuid(buf, pos)
    if not _no_tags_at_end(buf, pos + 16):
        return None
    return Container(name=name, topic_id=topic_id)


def _config_record_v0(buf: bytes) -> Container | None:
    resource_type = _INT8(buf, _BODY)[0]
    resource_name, pos = _string(buf, _BODY + 1)
    name, pos = _string(buf, pos)
    value, pos = _string(buf, pos, nullable=True)
    if not _no_tags_at_end(buf, pos):
        return None
    return Container(resource_type=resource_type, resource_name=resource_name, name=name, value=value)


# PartitionRecord's layout depends only on its array lengths: one struct per shape
# (lengths below 127, so each length is one byte) reads the whole body in one call.
_PARTITION_SHAPES: dict[tuple[int, ...], Callable] = {}
_MAX_PARTITION_SHAPES = 4096
_ONE_BYTE_LENGTH = 0x80


def _partition_fields(buf: bytes, with_directories: bool):
    pos = _BODY + 20  # after the partition id and the topic id
    lengths = []
    for _ in range(4):  # replicas, isr, removing, adding
        count = buf[pos] - 1
        if count < 0 or count >= _ONE_BYTE_LENGTH - 1:
            return None
        lengths.append(count)
        pos += 1 + 4 * count
    pos += 12  # leader, leader epoch, partition epoch
    directories = 0
    if with_directories:
        directories = buf[pos] - 1
        if directories < 0 or directories >= _ONE_BYTE_LENGTH - 1:
            return None
        pos += 1 + 16 * directories
    if not _no_tags_at_end(buf, pos):
        return None
    shape = (with_directories, *lengths, directories)
    unpack = _PARTITION_SHAPES.get(shape)
    if unpack is None:
        layout = ">i16s" + "".join(f"x{count}i" for count in lengths) + "iii"
        if with_directories:
            layout += "x" + "16s" * directories
        unpack = struct.Struct(layout).unpack_from
        if len(_PARTITION_SHAPES) < _MAX_PARTITION_SHAPES:
            _PARTITION_SHAPES[shape] = unpack
    values = unpack(buf, _BODY)
    replicas_end = 2 + lengths[0]
    isr_end = replicas_end + lengths[1]
    removing_end = isr_end + lengths[2]
    adding_end = removing_end + lengths[3]
    leader, leader_epoch, partition_epoch = values[adding_end:adding_end + 3]
    return (values[0], _uuid_from_bytes(values[1]), list(values[2:replicas_end]), list(values[replicas_end:isr_end]),
            list(values[isr_end:removing_end]), list(values[removing_end:adding_end]), leader, leader_epoch,
            partition_epoch, [_uuid_from_bytes(raw) for raw in values[adding_end + 3:]])


# The generic decoder puts the fields a version does not have first, then the version's
# own fields, then its tagged ones: the fast path builds the same order.
def _partition_record_v0(buf: bytes) -> Container | None:
    fields = _partition_fields(buf, False)
    if fields is None:
        return None
    pid, tid, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch, directories = fields
    return Container(directories=directories, eligible_leader_replicas=None, last_known_elr=None,
                     partition_id=pid, topic_id=tid, replicas=replicas, isr=isr, removing_replicas=removing,
                     adding_replicas=adding, leader=leader, leader_epoch=leader_epoch,
                     partition_epoch=partition_epoch, leader_recovery_state=0)


def _partition_record_v1(buf: bytes) -> Container | None:
    fields = _partition_fields(buf, True)
    if fields is None:
        return None
    pid, tid, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch, directories = fields
    return Container(eligible_leader_replicas=None, last_known_elr=None,
                     partition_id=pid, topic_id=tid, replicas=replicas, isr=isr, removing_replicas=removing,
                     adding_replicas=adding, leader=leader, leader_epoch=leader_epoch,
                     partition_epoch=partition_epoch, directories=directories, leader_recovery_state=0)


def _partition_record_v2(buf: bytes) -> Container | None:
    fields = _partition_fields(buf, True)
    if fields is None:
        return None
    pid, tid, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch, directories = fields
    return Container(partition_id=pid, topic_id=tid, replicas=replicas, isr=isr, removing_replicas=removing,
                     adding_replicas=adding, leader=leader, leader_epoch=leader_epoch,
                     partition_epoch=partition_epoch, directories=directories, leader_recovery_state=0,
                     eligible_leader_replicas=None, last_known_elr=None)


# RegisterBrokerRecord: every broker registers (and re-registers when a metadata.version
# change lets its registration carry log directories), and every node replays each
# registration, so a fleet of N brokers decodes N records on each of N nodes.
_RB_ID = struct.Struct(">i").unpack_from
_RB_ID_ZK = struct.Struct(">i?").unpack_from
_RB_INCARNATION_EPOCH = struct.Struct(">16sq").unpack_from
_RB_PORT_PROTOCOL = struct.Struct(">Hh").unpack_from
_RB_RANGE = struct.Struct(">hh").unpack_from


def _uuid_list(buf: bytes, pos: int, end: int, nullable: bool) -> list[uuid.UUID] | None:
    """A compact array of uuids filling exactly buf[pos:end] (a tagged field's payload);
    None when it is null (and may be), or anything else unusual (the caller then leaves
    the record to the generic decoder)."""
    count, pos = _uvarint(buf, pos)
    if count == 0:
        return _NULL_LIST if nullable and pos == end else None
    if pos + 16 * (count - 1) != end:
        return None
    return [_uuid_from_bytes(bytes(buf[at:at + 16])) for at in range(pos, end, 16)]


_NULL_LIST: Any = object()  # marker: a null array (decoded as None)


def _register_broker_fields(buf: bytes, version: int) -> tuple | None:
    if version >= 2:
        broker_id, zk = _RB_ID_ZK(buf, _BODY)
        pos = _BODY + 5
    else:
        broker_id, zk = _RB_ID(buf, _BODY)[0], False
        pos = _BODY + 4
    raw_incarnation, epoch = _RB_INCARNATION_EPOCH(buf, pos)
    pos += 24
    count, pos = _uvarint(buf, pos)
    if count == 0:
        return None  # null array: the generic decoder says what is wrong
    end_points = []
    for _ in range(count - 1):
        name, pos = _string(buf, pos)
        host, pos = _string(buf, pos)
        port, protocol = _RB_PORT_PROTOCOL(buf, pos)
        if buf[pos + 4] != 0:
            return None  # the endpoint has tagged fields
        pos += 5
        end_points.append(Container(name=name, host=host, port=port, security_protocol=protocol))
    count, pos = _uvarint(buf, pos)
    if count == 0:
        return None
    features = []
    for _ in range(count - 1):
        name, pos = _string(buf, pos)
        low, high = _RB_RANGE(buf, pos)
        if buf[pos + 4] != 0:
            return None
        pos += 5
        features.append(Container(name=name, min_supported_version=low, max_supported_version=high))
    rack, pos = _string(buf, pos, nullable=True)
    fenced = buf[pos] != 0
    pos += 1
    shutdown = False
    if version >= 1:
        shutdown = buf[pos] != 0
        pos += 1
    # The tagged fields: LogDirs (tag 0, v3+) and CordonedLogDirs (tag 1, v4+), in tag
    # order, each at most once; any other tag, or a payload that is not exactly what it
    # should be, goes to the generic decoder (it keeps unknown tags).
    log_dirs: list | None = []
    cordoned = None
    tags, pos = _uvarint(buf, pos)
    previous = -1
    for _ in range(tags):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        end = pos + size
        if tag <= previous or end > len(buf) or tag > 1 or (tag == 0 and version < 3) or (tag == 1 and version < 4):
            return None
        previous = tag
        values = _uuid_list(buf, pos, end, nullable=tag == 1)
        if values is None:
            return None
        if tag == 0:
            if values is _NULL_LIST:
                return None
            log_dirs = values
        else:
            cordoned = None if values is _NULL_LIST else values
        pos = end
    if pos != len(buf):
        return None
    return (broker_id, zk, _uuid_from_bytes(raw_incarnation), epoch, end_points, features, rack, fenced, shutdown,
            log_dirs, cordoned)


# Key order as the generic decoder builds it: the fields a version does not have first
# (declaration order), then its own fields, then its tagged ones.
def _register_broker_record_v0(buf: bytes) -> Container | None:
    fields = _register_broker_fields(buf, 0)
    if fields is None:
        return None
    broker_id, _, incarnation, epoch, end_points, features, rack, fenced, _, _, _ = fields
    return Container(is_migrating_zk_broker=False, in_controlled_shutdown=False, log_dirs=[], cordoned_log_dirs=None,
                     broker_id=broker_id, incarnation_id=incarnation, broker_epoch=epoch, end_points=end_points,
                     features=features, rack=rack, fenced=fenced)


def _register_broker_record_v1(buf: bytes) -> Container | None:
    fields = _register_broker_fields(buf, 1)
    if fields is None:
        return None
    broker_id, _, incarnation, epoch, end_points, features, rack, fenced, shutdown, _, _ = fields
    return Container(is_migrating_zk_broker=False, log_dirs=[], cordoned_log_dirs=None,
                     broker_id=broker_id, incarnation_id=incarnation, broker_epoch=epoch, end_points=end_points,
                     features=features, rack=rack, fenced=fenced, in_controlled_shutdown=shutdown)


def _register_broker_record_v2(buf: bytes) -> Container | None:
    fields = _register_broker_fields(buf, 2)
    if fields is None:
        return None
    broker_id, zk, incarnation, epoch, end_points, features, rack, fenced, shutdown, _, _ = fields
    return Container(log_dirs=[], cordoned_log_dirs=None,
                     broker_id=broker_id, is_migrating_zk_broker=zk, incarnation_id=incarnation, broker_epoch=epoch,
                     end_points=end_points, features=features, rack=rack, fenced=fenced,
                     in_controlled_shutdown=shutdown)


def _register_broker_record_v3(buf: bytes) -> Container | None:
    fields = _register_broker_fields(buf, 3)
    if fields is None:
        return None
    broker_id, zk, incarnation, epoch, end_points, features, rack, fenced, shutdown, log_dirs, _ = fields
    return Container(cordoned_log_dirs=None,
                     broker_id=broker_id, is_migrating_zk_broker=zk, incarnation_id=incarnation, broker_epoch=epoch,
                     end_points=end_points, features=features, rack=rack, fenced=fenced,
                     in_controlled_shutdown=shutdown, log_dirs=log_dirs)


def _register_broker_record_v4(buf: bytes) -> Container | None:
    fields = _register_broker_fields(buf, 4)
    if fields is None:
        return None
    broker_id, zk, incarnation, epoch, end_points, features, rack, fenced, shutdown, log_dirs, cordoned = fields
    return Container(broker_id=broker_id, is_migrating_zk_broker=zk, incarnation_id=incarnation, broker_epoch=epoch,
                     end_points=end_points, features=features, rack=rack, fenced=fenced,
                     in_controlled_shutdown=shutdown, log_dirs=log_dirs, cordoned_log_dirs=cordoned)


_FAST_DECODERS: dict[tuple[int, int], tuple[Message, Callable[[bytes], Container | None]]] = {
    (mr.REGISTER_BROKER_RECORD.api_key, 0): (mr.REGISTER_BROKER_RECORD, _register_broker_record_v0),
    (mr.REGISTER_BROKER_RECORD.api_key, 1): (mr.REGISTER_BROKER_RECORD, _register_broker_record_v1),
    (mr.REGISTER_BROKER_RECORD.api_key, 2): (mr.REGISTER_BROKER_RECORD, _register_broker_record_v2),
    (mr.REGISTER_BROKER_RECORD.api_key, 3): (mr.REGISTER_BROKER_RECORD, _register_broker_record_v3),
    (mr.REGISTER_BROKER_RECORD.api_key, 4): (mr.REGISTER_BROKER_RECORD, _register_broker_record_v4),
    (mr.TOPIC_RECORD.api_key, 0): (mr.TOPIC_RECORD, _topic_record_v0),
    (mr.CONFIG_RECORD.api_key, 0): (mr.CONFIG_RECORD, _config_record_v0),
    (mr.PARTITION_RECORD.api_key, 0): (mr.PARTITION_RECORD, _partition_record_v0),
    (mr.PARTITION_RECORD.api_key, 1): (mr.PARTITION_RECORD, _partition_record_v1),
    (mr.PARTITION_RECORD.api_key, 2): (mr.PARTITION_RECORD, _partition_record_v2),
}

