"""Kafka Streams' SubscriptionInfo: the userdata a Streams member puts in its
JoinGroup subscription, in every version KIP-268 discusses.

Owns: the wire declaration (`SUBSCRIPTION_INFO`, data compiled by
`protocol.schema`), the value type `SubscriptionInfo` and `encode`/`decode`.

Layouts (facts from Kafka's Streams sources and KIP-268):
- v1 (0.10.0):        Version ProcessId PrevTasks StandbyTasks
- v2 (0.10.1 - 1.1):  v1 + UserEndpoint (int32 length, UTF-8; empty means none)
- v3 (2.0):           Version LatestSupportedVersion ProcessId PrevTasks StandbyTasks UserEndpoint
- v4 (simulated, the KIP's "metadata version 4"): the same prefix, then a
  flexible body (compact arrays and bytes, tagged-field sections) with a new
  nullable Rack field. After the prefix a v3 reader would misread every
  length, so v4 is a format it genuinely cannot parse, which is the case
  version probing exists for.
ProcessId is a UUID (two int64, most significant first); a TaskId is
(int32 topic group id, int32 partition). All integers are big-endian.

Rules kept here: `decode` returns a `SubscriptionInfo` or an `UnknownVersion`
and raises only `DecodeError` (see `_common`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from protocol.errors import DecodeError, EncodeError
from protocol.schema import Field as F
from protocol.schema import Message
from protocol.streams._common import (
    EARLIEST_PROBEABLE_VERSION,
    UNKNOWN_SUPPORTED_VERSION,
    UnknownVersion,
    decode_versioned,
)

# The highest SubscriptionInfo version kraftwerk can read and write.
LATEST_KNOWN_VERSION = 4

_TASK_ID = (
    F("TopicGroupId", "int32", "1+"),
    F("Partition", "int32", "1+"),
)

SUBSCRIPTION_INFO = Message(
    name="SubscriptionInfo",
    type="data",
    valid_versions="1-4",
    flexible_versions="4+",
    fields=(
        F("Version", "int32", "1+"),
        F("LatestSupportedVersion", "int32", "3+", default="-1"),
        F("ProcessId", "uuid", "1+"),
        F("PrevTasks", "[]TaskId", "1+", fields=_TASK_ID),
        F("StandbyTasks", "[]TaskId", "1+", fields=_TASK_ID),
        F("UserEndpoint", "bytes", "2+"),
        F("Rack", "string", "4+", nullable_versions="4+", default="null"),
    ),
)


@dataclass(frozen=True, slots=True, order=True)
class TaskId:
    topic_group_id: int
    partition: int


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One member's subscription userdata. `latest_supported_version` is -1
    for v1 and v2 (those formats cannot say); `user_endpoint` exists from v2,
    `rack` only in the simulated v4."""

    version: int
    latest_supported_version: int
    process_id: uuid.UUID
    prev_tasks: tuple[TaskId, ...] = ()
    standby_tasks: tuple[TaskId, ...] = ()
    user_endpoint: str | None = None
    rack: str | None = None


def _tasks_out(tasks) -> list[dict]:
    return [{"topic_group_id": t.topic_group_id, "partition": t.partition} for t in tasks]


def _tasks_in(items) -> tuple[TaskId, ...]:
    return tuple(TaskId(item["topic_group_id"], item["partition"]) for item in items)


def encode(info: SubscriptionInfo) -> bytes:
    version = info.version
    if not 1 <= version <= LATEST_KNOWN_VERSION:
        raise EncodeError(f"SubscriptionInfo: no version {version}")
    if version >= EARLIEST_PROBEABLE_VERSION and info.latest_supported_version < version:
        raise EncodeError(f"SubscriptionInfo v{version}: latest supported version "
                          f"{info.latest_supported_version} is below the used version")
    return SUBSCRIPTION_INFO.encode(version, {
        "version": version,
        "latest_supported_version": info.latest_supported_version,
        "process_id": info.process_id,
        "prev_tasks": _tasks_out(info.prev_tasks),
        "standby_tasks": _tasks_out(info.standby_tasks),
        # Kafka writes a missing endpoint as zero bytes and reads them back as none.
        "user_endpoint": (info.user_endpoint or "").encode("utf-8"),
        "rack": info.rack,
    })


def decode(data: bytes, reader_latest_version: int = LATEST_KNOWN_VERSION) -> SubscriptionInfo | UnknownVersion:
    """Decodes as a reader that knows versions up to `reader_latest_version`
    (a 2.0 member passes 3), so a newer message comes back as `UnknownVersion`."""
    result = decode_versioned(SUBSCRIPTION_INFO, data, reader_latest_version)
    if isinstance(result, UnknownVersion):
        return result
    version = result["version"]
    endpoint = bytes(result["user_endpoint"])
    try:
        endpoint_text = endpoint.decode("utf-8") if endpoint else None
    except UnicodeDecodeError as exc:
        raise DecodeError(f"SubscriptionInfo v{version}: user endpoint is not UTF-8: {exc}") from None
    return SubscriptionInfo(
        version=version,
        latest_supported_version=(result["latest_supported_version"]
                                  if version >= EARLIEST_PROBEABLE_VERSION else UNKNOWN_SUPPORTED_VERSION),
        process_id=result["process_id"],
        prev_tasks=_tasks_in(result["prev_tasks"]),
        standby_tasks=_tasks_in(result["standby_tasks"]),
        user_endpoint=endpoint_text,
        rack=result["rack"] if version >= 4 else None,
    )
