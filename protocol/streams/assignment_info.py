"""Kafka Streams' AssignmentInfo: the userdata the group leader hands each
member in SyncGroup, in every version KIP-268 discusses.

Owns: the wire declaration (`ASSIGNMENT_INFO`), the value type
`AssignmentInfo` and `encode`/`decode`.

Layouts (facts from Kafka's Streams sources and KIP-268):
- v1 (0.10.0):        Version ActiveTasks StandbyTasks
- v2 (0.10.1 - 1.1):  v1 + PartitionsByHost (the Interactive Queries map)
- v3 (2.0):           Version LatestSupportedVersion ActiveTasks StandbyTasks PartitionsByHost
- v4 (simulated):     the v3 prefix, then a flexible body (compact arrays and
  strings, tagged-field sections) plus an ErrorCode, so a v3 reader cannot
  parse anything after the prefix.
ActiveTasks is an int32-counted list of TaskId; StandbyTasks an int32-counted
list of (TaskId, [TopicPartition]); PartitionsByHost an int32-counted list of
(host, int32 port, [TopicPartition]); a TopicPartition is (topic, int32).
Topics and hosts are Java `writeUTF` strings (uint16 length): kraftwerk
writes them as Kafka int16-length strings, byte-identical below 32 KiB and
for text without NUL or characters outside the BMP (Java's modified UTF-8
differs only there).

Rules kept here: `decode` returns an `AssignmentInfo` or an `UnknownVersion`
and raises only `DecodeError` (see `_common`). The version-probing answer is
an ordinary empty AssignmentInfo whose used and latest supported versions are
both the leader's latest (`probing_assignment`).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import EncodeError
from protocol.schema import Field as F
from protocol.schema import Message
from protocol.streams._common import (
    EARLIEST_PROBEABLE_VERSION,
    UNKNOWN_SUPPORTED_VERSION,
    UnknownVersion,
    decode_versioned,
)
from protocol.streams.subscription_info import TaskId

LATEST_KNOWN_VERSION = 4

_TOPIC_PARTITION = (
    F("Topic", "string", "1+"),
    F("Partition", "int32", "1+"),
)

ASSIGNMENT_INFO = Message(
    name="AssignmentInfo",
    type="data",
    valid_versions="1-4",
    flexible_versions="4+",
    fields=(
        F("Version", "int32", "1+"),
        F("LatestSupportedVersion", "int32", "3+", default="-1"),
        F("ActiveTasks", "[]TaskId", "1+", fields=(
            F("TopicGroupId", "int32", "1+"),
            F("Partition", "int32", "1+"),
        )),
        F("StandbyTasks", "[]StandbyTask", "1+", fields=(
            F("TopicGroupId", "int32", "1+"),
            F("Partition", "int32", "1+"),
            F("Partitions", "[]TopicPartition", "1+", fields=_TOPIC_PARTITION),
        )),
        F("PartitionsByHost", "[]HostPartitions", "2+", fields=(
            F("Host", "string", "2+"),
            F("Port", "int32", "2+"),
            F("Partitions", "[]TopicPartition", "2+", fields=_TOPIC_PARTITION),
        )),
        F("ErrorCode", "int32", "4+"),
    ),
)


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, order=True)
class HostInfo:
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class AssignmentInfo:
    """One member's assignment userdata. `latest_supported_version` is the
    leader's (-1 in v1 and v2); `partitions_by_host` exists from v2,
    `error_code` only in the simulated v4."""

    version: int
    latest_supported_version: int
    active_tasks: tuple[TaskId, ...] = ()
    standby_tasks: tuple[tuple[TaskId, tuple[TopicPartition, ...]], ...] = ()
    partitions_by_host: tuple[tuple[HostInfo, tuple[TopicPartition, ...]], ...] = ()
    error_code: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.active_tasks and not self.standby_tasks


def probing_assignment(leader_latest_version: int) -> AssignmentInfo:
    """The leader's answer to a subscription newer than it understands: no
    tasks, used version == latest supported version == the leader's latest."""
    return AssignmentInfo(leader_latest_version, leader_latest_version)


def _partitions_out(partitions) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def _partitions_in(items) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(item["topic"], item["partition"]) for item in items)


def encode(info: AssignmentInfo) -> bytes:
    version = info.version
    if not 1 <= version <= LATEST_KNOWN_VERSION:
        raise EncodeError(f"AssignmentInfo: no version {version}")
    if version >= EARLIEST_PROBEABLE_VERSION and info.latest_supported_version < version:
        raise EncodeError(f"AssignmentInfo v{version}: latest supported version "
                          f"{info.latest_supported_version} is below the used version")
    return ASSIGNMENT_INFO.encode(version, {
        "version": version,
        "latest_supported_version": info.latest_supported_version,
        "active_tasks": [{"topic_group_id": t.topic_group_id, "partition": t.partition}
                         for t in info.active_tasks],
        "standby_tasks": [{"topic_group_id": t.topic_group_id, "partition": t.partition,
                           "partitions": _partitions_out(parts)} for t, parts in info.standby_tasks],
        "partitions_by_host": [{"host": h.host, "port": h.port, "partitions": _partitions_out(parts)}
                               for h, parts in info.partitions_by_host],
        "error_code": info.error_code,
    })


def decode(data: bytes, reader_latest_version: int = LATEST_KNOWN_VERSION) -> AssignmentInfo | UnknownVersion:
    """Decodes as a reader that knows versions up to `reader_latest_version`."""
    result = decode_versioned(ASSIGNMENT_INFO, data, reader_latest_version)
    if isinstance(result, UnknownVersion):
        return result
    version = result["version"]
    return AssignmentInfo(
        version=version,
        latest_supported_version=(result["latest_supported_version"]
                                  if version >= EARLIEST_PROBEABLE_VERSION else UNKNOWN_SUPPORTED_VERSION),
        active_tasks=tuple(TaskId(t["topic_group_id"], t["partition"]) for t in result["active_tasks"]),
        standby_tasks=tuple((TaskId(s["topic_group_id"], s["partition"]), _partitions_in(s["partitions"]))
                            for s in result["standby_tasks"]),
        partitions_by_host=tuple((HostInfo(h["host"], h["port"]), _partitions_in(h["partitions"]))
                                 for h in result["partitions_by_host"]),
        error_code=result["error_code"] if version >= 4 else 0,
    )
