"""The remembered answers of forwarded writes: the wire tags and the NoOpRecord that
carries an answer in the metadata log (server/controller/idempotence.py says why).

Owns: the tagged-field numbers of kraftwerk's own (EnvelopeRequest forward id,
EnvelopeResponse committed offset, NoOpRecord answer), the answer's encoding (JSON
with UUIDs and bytes tagged: any controller that replayed the record returns the same
answer), and `ForwardedAnswers`, the image's bounded memory of them (oldest forgotten
first; not in snapshots). Pure: no I/O, no controller imports (the image uses it).
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from protocol import metadata_records as mr
from protocol.records import MetadataRecord, record

# Tagged-field numbers of kraftwerk's own, far above any Kafka declares.
FORWARD_ID_TAG = 10_000  # EnvelopeRequest: the broker's id for one client request
COMMITTED_OFFSET_TAG = 10_001  # EnvelopeResponse: the controller's last replayed offset
ANSWER_TAG = 10_000  # NoOpRecord: forward id + the answer of the write it commits with

FORWARD_ID_BYTES = 16
# Answers remembered; a broker retries within its forward timeout, far fewer writes.
MAX_REMEMBERED = 4096
_HEADER = struct.Struct(">16sHhh")  # forward id, write index, api key, api version


@dataclass(frozen=True, slots=True)
class Answer:
    api_key: int
    api_version: int
    response: dict
    error_message: str | None


def tagged(body: Any, tag: int) -> bytes | None:
    """The raw bytes of unknown tagged field `tag` of a decoded body, if present."""
    for number, value in (body.get("_unknown_tagged_fields") or ()) if hasattr(body, "get") else ():
        if number == tag:
            return bytes(value)
    return None


def with_tag(body: dict, tag: int, value: bytes) -> dict:
    """`body` with unknown tagged field `tag` set to `value` (for encoding)."""
    fields = [(n, v) for n, v in (body.get("_unknown_tagged_fields") or ()) if n != tag]
    return {**body, "_unknown_tagged_fields": sorted([*fields, (tag, value)])}


def encode_offset(offset: int) -> bytes:
    return struct.pack(">q", offset)


def decode_offset(value: bytes | None) -> int | None:
    if value is None or len(value) != 8:
        return None
    return struct.unpack(">q", value)[0]


def _to_json(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return {"$uuid": value.hex}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"cannot remember a {type(value).__name__} in an answer")


def _from_json(obj: dict) -> Any:
    if len(obj) == 1:
        if "$uuid" in obj:
            return uuid.UUID(hex=obj["$uuid"])
        if "$bytes" in obj:
            return base64.b64decode(obj["$bytes"])
    return obj


def answer_record(key: bytes, api_key: int, api_version: int, response: dict,
                  error_message: str | None) -> MetadataRecord:
    """The NoOpRecord that remembers `response` for `key` (forward id + write index)."""
    payload = json.dumps({"response": response, "error_message": error_message},
                         default=_to_json, separators=(",", ":")).encode()
    header = _HEADER.pack(key[:FORWARD_ID_BYTES], int.from_bytes(key[FORWARD_ID_BYTES:], "big"), api_key, api_version)
    return record(mr.NO_OP_RECORD, {"_unknown_tagged_fields": [(ANSWER_TAG, header + payload)]}, version=0)


def parse_answer(value: bytes) -> tuple[bytes, Answer] | None:
    """(key, answer) from a NoOpRecord's ANSWER_TAG bytes; None if they are not one
    (a NoOpRecord of someone else's making is nothing, as in Kafka)."""
    if len(value) < _HEADER.size:
        return None
    forward_id, index, api_key, api_version = _HEADER.unpack_from(value)
    try:
        payload = json.loads(value[_HEADER.size:], object_hook=_from_json)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("response"), dict):
        return None
    message = payload.get("error_message")
    key = forward_id + index.to_bytes(2, "big")
    return key, Answer(api_key, api_version, payload["response"], message if isinstance(message, str) else None)


class ForwardedAnswers:
    """The remembered answers of forwarded writes, oldest first (part of the image,
    changed only by replaying NoOpRecords)."""

    __slots__ = ("_answers",)

    def __init__(self, answers: "OrderedDict[bytes, Answer] | None" = None) -> None:
        self._answers: OrderedDict[bytes, Answer] = answers if answers is not None else OrderedDict()

    def copy(self) -> "ForwardedAnswers":
        return ForwardedAnswers(OrderedDict(self._answers))

    def get(self, key: bytes) -> Answer | None:
        return self._answers.get(key)

    def __len__(self) -> int:
        return len(self._answers)

    def replay(self, data: Any) -> None:
        value = tagged(data, ANSWER_TAG)
        parsed = parse_answer(value) if value is not None else None
        if parsed is None:
            return
        key, answer = parsed
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > MAX_REMEMBERED:
            self._answers.popitem(last=False)
