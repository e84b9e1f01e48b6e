"""Metadata records as Kafka frames them inside a record's value.

Owns: `MetadataRecord` (a declaration, a version and the field values) and
the frame codec: uvarint frame version (always 1), uvarint API key, uvarint
record version, then the record body (Kafka's `AbstractApiMessageSerde`).
Metadata records use the flexible encoding in every version they declare as
flexible (all of them: "0+").

The record batches that carry these values live in `protocol/record_batch.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from types import MappingProxyType
from typing import Any

from protocol import metadata_records as mr
from protocol.errors import DecodeError
from protocol.primitives import read_uvarint, write_uvarint
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
    stream = BytesIO(value)
    frame_version = read_uvarint(stream)
    if frame_version != FRAME_VERSION:
        raise DecodeError(f"unknown metadata record frame version {frame_version}")
    api_key = read_uvarint(stream)
    message = RECORD_TYPES.get(api_key)
    if message is None:
        raise DecodeError(f"unknown metadata record type {api_key}")
    version = read_uvarint(stream)
    if version not in message.versions:
        raise DecodeError(f"{message.name} has no version {version}")
    data = message.decode(version, stream)
    if stream.read(1):
        raise DecodeError(f"{message.name} v{version}: trailing bytes")
    return MetadataRecord(message, version, data)


def record(message: Message, data: dict, version: int | None = None) -> MetadataRecord:
    """Builds a record at the given version (default: the highest declared)."""
    return MetadataRecord(message, message.version_range[1] if version is None else version, data)
