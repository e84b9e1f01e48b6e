"""Pure topic and config commands: CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, DescribeConfigs, and replica placement.

Owns: `TopicDefaults`, `place_replicas`, the topic config catalogue (`TOPIC_CONFIGS`:
Kafka's topic-level configs with their types and defaults), and one function per API:
`create_topics`, `delete_topics`, `create_partitions`, `alter_configs`,
`incremental_alter_configs` (writes) and `describe_configs` (a read of the committed
image, plus the answering node's own broker configs and loggers: `NodeConfigView`,
`BROKER_CONFIGS`).

Rules kept here:
- Same contract as `commands.py`: `(state, decoded request, ...) -> ControllerResult`;
  nothing is mutated, the records say everything. A new topic's id comes from the
  `new_topic_id` source the caller injects (the handler passes `uuid.uuid4`), so the
  command is deterministic under test.
- All-or-nothing per topic / per resource, as Kafka's controller does: each entry gets
  its own error code, the entries that pass are written, the others write nothing.
  Everything a request writes goes out as one atomic batch.
- Replicas go to Kafka's usable brokers: registered, with a log directory that is not
  cordoned, and not unfenced in controlled shutdown; fenced ones included. Placement is round-robin
  over the unfenced ones (sorted by id), starting at an index derived from the topic
  name with CRC-32 (stable across processes, unlike `hash()`), so the same request
  against the same image places the same way. When a partition needs more replicas
  than there are unfenced brokers, it takes every unfenced one (the first, its leader,
  in the same rotation) and then fenced ones, as Kafka's StripedReplicaPlacer does; a
  new partition's ISR is its active replicas and it is led by the first of them.
  Explicit assignments are honoured as given, fenced brokers included, as long as one
  replica of each partition is active.
- Error codes and messages follow Kafka's controller (ReplicationControlManager,
  ConfigurationControlManager) where kraftwerk has the same notion.

Differences from Kafka, on purpose:
- Topic configs are checked against `TOPIC_CONFIGS` (name and type); broker configs
  are not checked when written (as Kafka's controller, which leaves that to the broker):
  any name may be set on a broker resource, so configs copied from ZooKeeper always fit.
- There is no `create.topic.policy`, no `delete.topic.enable=false` and no quota.
- DescribeConfigs lists the topic catalogue with Kafka's defaults (source DEFAULT_CONFIG)
  but not the broker-level synonyms; the answering node's own broker resource lists every
  key of Kafka's broker definition (`BROKER_CONFIGS`, generated from Kafka's own classes
  into `broker_config_catalog`) and its properties, other brokers only their dynamic
  configs (Kafka refuses other ids).
"""

from __future__ import annotations

import re
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import MetadataRecord, record
from server.controller import features as ft
from server.controller.broker_config_catalog import BROKER_CONFIG_CATALOG, BrokerConfigFact
from server.controller.commands import ControllerResult
from server.controller.partitions import default_directory, is_active
from server.controller.state import (
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_TOPIC,
    ControllerState,
    TopicImage,
)


class TopicErrorCode(IntEnum):
    """Kafka error codes these APIs answer with that `protocol.errors.ErrorCode` lacks."""

    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    UNKNOWN_TOPIC_ID = 100


# Kafka's ConfigSource (DescribeConfigs / CreateTopics v5+).
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG = 6

# IncrementalAlterConfigs ConfigOperation (KIP-339).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs ConfigType (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


_LONG_MAX = str((1 << 63) - 1)

# Kafka's topic-level configs (TopicConfig / LogConfig) with their types and the defaults
# a topic gets when neither it nor the brokers override them.
TOPIC_CONFIGS: Mapping[str, tuple[ConfigType, str]] = {
    "cleanup.policy": (ConfigType.LIST, "delete"),
    "compression.gzip.level": (ConfigType.INT, "-1"),
    "compression.lz4.level": (ConfigType.INT, "9"),
    "compression.type": (ConfigType.STRING, "producer"),
    "compression.zstd.level": (ConfigType.INT, "3"),
    "delete.retention.ms": (ConfigType.LONG, "86400000"),
    "file.delete.delay.ms": (ConfigType.LONG, "60000"),
    "flush.messages": (ConfigType.LONG, _LONG_MAX),
    "flush.ms": (ConfigType.LONG, _LONG_MAX),
    "follower.replication.throttled.replicas": (ConfigType.LIST, ""),
    "index.interval.bytes": (ConfigType.INT, "4096"),
    "leader.replication.throttled.replicas": (ConfigType.LIST, ""),
    "local.retention.bytes": (ConfigType.LONG, "-2"),
    "local.retention.ms": (ConfigType.LONG, "-2"),
    "max.compaction.lag.ms": (ConfigType.LONG, _LONG_MAX),
    "max.message.bytes": (ConfigType.INT, "1048588"),
    "message.downconversion.enable": (ConfigType.BOOLEAN, "true"),
    "message.format.version": (ConfigType.STRING, "3.0-IV1"),
    "message.timestamp.after.max.ms": (ConfigType.LONG, _LONG_MAX),
    "message.timestamp.before.max.ms": (ConfigType.LONG, _LONG_MAX),
    "message.timestamp.difference.max.ms": (ConfigType.LONG, _LONG_MAX),
    "message.timestamp.type": (ConfigType.STRING, "CreateTime"),
    "min.cleanable.dirty.ratio": (ConfigType.DOUBLE, "0.5"),
    "min.compaction.lag.ms": (ConfigType.LONG, "0"),
    "min.insync.replicas": (ConfigType.INT, "1"),
    "preallocate": (ConfigType.BOOLEAN, "false"),
    "remote.log.copy.disable": (ConfigType.BOOLEAN, "false"),
    "remote.log.delete.on.disable": (ConfigType.BOOLEAN, "false"),
    "remote.storage.enable": (ConfigType.BOOLEAN, "false"),
    "retention.bytes": (ConfigType.LONG, "-1"),
    "retention.ms": (ConfigType.LONG, "604800000"),
    "segment.bytes": (ConfigType.INT, "1073741824"),
    "segment.index.bytes": (ConfigType.INT, "10485760"),
    "segment.jitter.ms": (ConfigType.LONG, "0"),
    "segment.ms": (ConfigType.LONG, "604800000"),
    "unclean.leader.election.enable": (ConfigType.BOOLEAN, "false"),
}

# Kafka's Topic.validate.
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """What NumPartitions / ReplicationFactor -1 mean (Kafka's `num.partitions` and
    `default.replication.factor`, both 1 by default)."""

    num_partitions: int = 1
    replication_factor: int = 1


# ---------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------


def _field(data: Any, key: str, default: Any = None) -> Any:
    """A request field from a decoded Container or a plain dict; None reads as `default`."""
    value = data.get(key, default) if hasattr(data, "get") else getattr(data, key, default)
    return default if value is None else value



def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate message, or None when `name` is a legal topic name."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                f"topic name: {name}")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None


def _collision_key(name: str) -> str:
    # Kafka: '.' and '_' collide in metric names, so two topics may not differ only by them.
    return name.replace(".", "_")


def _config_value_error(name: str, value: str) -> str | None:
    """Kafka-style type check of a topic config value, or None when it parses."""
    config_type = TOPIC_CONFIGS[name][0]
    text = value.strip()
    try:
        if config_type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            number = int(text)
            bits = {ConfigType.INT: 31, ConfigType.LONG: 63, ConfigType.SHORT: 15}[config_type]
            if not -(1 << bits) <= number < (1 << bits):
                raise ValueError
        elif config_type == ConfigType.DOUBLE:
            float(text)
        elif config_type == ConfigType.BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise ValueError
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type {config_type.name}" \
            if config_type != ConfigType.BOOLEAN else \
            f"Invalid value {value} for configuration {name}: Expected value to be either true or false"
    return None


def _topic_config_error(name: str, value: str | None) -> str | None:
    if name not in TOPIC_CONFIGS:
        return f"Unknown topic config name: {name}"
    if value is None:
        return f"Null value not supported for topic configs: {name}"
    return _config_value_error(name, value)


def _split_list(value: str | None) -> list[str]:
    if not value:
        return []
    return [item.strip() for item in value.split(",") if item.strip()]


# ---------------------------------------------------------------------------
# Placement
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsableBrokers:
    """The brokers new replicas may go to (Kafka's ClusterControlManager.usableBrokers),
    split by fencing because placement takes fenced ones only when the unfenced ones run
    out; each tuple sorted by id."""

    unfenced: tuple[int, ...]
    fenced: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.unfenced) + len(self.fenced)


def has_uncordoned_log_dir(state: ControllerState, broker_id: int) -> bool:
    """Kafka's BrokerRegistration.hasUncordonedDirs: a broker that registered no log
    directories, or whose heartbeats never named cordoned ones, counts as having one."""
    registration = state.broker(broker_id)
    if registration is None:
        return False
    if not registration.log_dirs or registration.cordoned_log_dirs is None:
        return True
    return bool(set(registration.log_dirs) - set(registration.cordoned_log_dirs))


def usable_brokers(state: ControllerState) -> UsableBrokers:
    """Registered brokers with a log directory not cordoned, but for unfenced ones in
    controlled shutdown. Fenced brokers are usable: Kafka places replicas on them when
    too few brokers are unfenced, so a topic can be created while a broker restarts.
    A fenced broker counts as fenced even if it was shutting down (one that finished its
    controlled shutdown keeps the flag until it registers again): Kafka's heartbeat
    manager forgets the shutdown of every broker it records as fenced."""
    def shutting_down(broker_id: int) -> bool:
        registration = state.brokers[broker_id]
        return registration.in_controlled_shutdown and not registration.fenced

    usable = [b for b in sorted(state.brokers) if not shutting_down(b) and has_uncordoned_log_dir(state, b)]
    return UsableBrokers(unfenced=tuple(b for b in usable if not state.brokers[b].fenced),
                         fenced=tuple(b for b in usable if state.brokers[b].fenced))


def _unplaceable(replication_factor: int, brokers: UsableBrokers) -> str | None:
    """Kafka 4.4's StripedReplicaPlacer refusal, or None when the replicas can be placed:
    no unfenced broker at all is checked first (a partition's leader must be unfenced),
    then too few usable brokers, fenced ones counted."""
    prefix = f"Unable to replicate the partition {replication_factor} time(s): "
    if replication_factor <= 0:
        return prefix + f"Invalid replication factor {replication_factor}: the replication factor must be positive."
    if not brokers.unfenced:
        return prefix + "All brokers are currently fenced, or have all their log directories cordoned."
    if replication_factor > len(brokers):
        return (prefix + f"The target replication factor of {replication_factor} cannot be reached because "
                f"only {len(brokers)} broker(s) are registered or some brokers have all their log "
                "directories cordoned.")
    return None


def place_replicas(topic_name: str, num_partitions: int, replication_factor: int,
                   brokers: Sequence[int], fenced: Sequence[int] = ()) -> list[list[int]]:
    """Round-robin placement over the unfenced `brokers`: partition p's replicas are
    `replication_factor` consecutive brokers from index (start + p), wrapping; start =
    CRC-32 of the name. Leaders (the first replica) are spread evenly and no partition
    has a broker twice. With fewer unfenced brokers than the replication factor, each
    partition takes all of them in that order (so its leader is unfenced) and then the
    missing replicas from `fenced`, rotated the same way."""
    if not brokers or replication_factor > len(brokers) + len(fenced):
        raise ValueError(f"replication factor {replication_factor} > {len(brokers)} unfenced "
                         f"+ {len(fenced)} fenced brokers, or no unfenced broker")
    start = zlib.crc32(topic_name.encode())
    from_unfenced = min(replication_factor, len(brokers))
    from_fenced = replication_factor - from_unfenced
    return [[brokers[(start + p + r) % len(brokers)] for r in range(from_unfenced)]
            + [fenced[(start + p + r) % len(fenced)] for r in range(from_fenced)]
            for p in range(num_partitions)]


def _partition_records(state: ControllerState, topic_id: uuid.UUID,
                       assignments: list[list[int]], first_index: int = 0) -> list[MetadataRecord]:
    mv = state.metadata_version or 0
    with_directories = ft.directory_assignment_supported(mv)
    records = []
    for index, replicas in enumerate(assignments, start=first_index):
        isr = [b for b in replicas if is_active(state, b)]
        data = {
            "partition_id": index,
            "topic_id": topic_id,
            "replicas": list(replicas),
            "isr": isr,
            "removing_replicas": [],
            "adding_replicas": [],
            "leader": isr[0] if isr else -1,
            "leader_epoch": 0,
            "partition_epoch": 0,
        }
        if with_directories:
            data["directories"] = [default_directory(state, b) for b in replicas]
        records.append(record(mr.PARTITION_RECORD, data, version=1 if with_directories else 0))
    return records


# ---------------------------------------------------------------------------
# CreateTopics (API 19, v0-7)
# ---------------------------------------------------------------------------


def _created_configs(values: Mapping[str, str]) -> list[dict[str, Any]]:
    """CreateTopics v5+ Configs: the topic's whole effective configuration (KIP-525)."""
    entries = []
    for name in sorted(set(TOPIC_CONFIGS) | set(values)):
        if name in values:
            value, source = values[name], SOURCE_DYNAMIC_TOPIC_CONFIG
        else:
            value, source = TOPIC_CONFIGS[name][1], SOURCE_DEFAULT_CONFIG
        entries.append({"name": name, "value": value, "read_only": False, "config_source": source,
                        "is_sensitive": False})
    return entries


def _create_error(name: str, code: int, message: str) -> dict[str, Any]:
    return {"name": name, "topic_id": uuid.UUID(int=0), "error_code": int(code), "error_message": message,
            "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1,
            "configs": []}  # Kafka answers an empty list, not null, for a refused topic


def create_topics(
    state: ControllerState,
    request: Any,
    api_version: int,
    new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
    defaults: TopicDefaults = TopicDefaults(),
) -> ControllerResult:
    """CreateTopics v0-7 (Kafka's ReplicationControlManager.createTopics).

    Per topic, in Kafka's order: duplicate in the request (INVALID_REQUEST), illegal
    name (INVALID_TOPIC_EXCEPTION), already exists or collides (TOPIC_ALREADY_EXISTS /
    INVALID_TOPIC_EXCEPTION), configs (INVALID_CONFIG), then the assignment: explicit
    (INVALID_REPLICA_ASSIGNMENT) or automatic (INVALID_REPLICATION_FACTOR,
    INVALID_PARTITIONS, then the placer's INVALID_REPLICATION_FACTOR). Records:
    TopicRecord, PartitionRecords (ISR = the active replicas, leader = the first of
    them), ConfigRecords.
    """
    topics = list(_field(request, "topics", []))
    validate_only = bool(_field(request, "validate_only", False)) if api_version >= 1 else False
    counts: dict[str, int] = {}
    for topic in topics:
        counts[_field(topic, "name", "")] = counts.get(_field(topic, "name", ""), 0) + 1

    existing = state.topics()
    taken = {_collision_key(name): name for name in existing}
    brokers = usable_brokers(state)
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    reported: set[str] = set()
    for topic in topics:
        name = _field(topic, "name", "")
        if counts[name] > 1:
            if name not in reported:
                reported.add(name)
                results.append(_create_error(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        result, topic_records = _create_one(state, topic, name, existing, taken, brokers, new_topic_id, defaults)
        results.append(result)
        if topic_records:
            taken[_collision_key(name)] = name
            records.extend(topic_records)
    response = {"throttle_time_ms": 0, "topics": results}
    return ControllerResult([] if validate_only else records, response, atomic=True)


def _create_one(state, topic, name, existing, taken, brokers, new_topic_id, defaults):
    error = topic_name_error(name)
    if error is not None:
        return _create_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION, error), []
    if name in existing:
        return _create_error(name, TopicErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."), []
    clash = taken.get(_collision_key(name))
    if clash is not None:
        return _create_error(name, ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {clash}"), []

    configs: dict[str, str] = {}
    for entry in _field(topic, "configs", []):
        key = _field(entry, "name", "")
        value = entry.get("value") if hasattr(entry, "get") else getattr(entry, "value", None)
        error = _topic_config_error(key, value)
        if error is not None:
            return _create_error(name, TopicErrorCode.INVALID_CONFIG, error), []
        configs[key] = value

    assignments_requested = list(_field(topic, "assignments", []))
    num_partitions = _field(topic, "num_partitions", -1)
    replication_factor = _field(topic, "replication_factor", -1)
    if assignments_requested:
        if replication_factor != -1:
            return _create_error(name, ErrorCode.INVALID_REQUEST,
                                 "A manual partition assignment was specified, but replication factor "
                                 "was not set to -1."), []
        if num_partitions != -1:
            return _create_error(name, ErrorCode.INVALID_REQUEST,
                                 "A manual partition assignment was specified, but numPartitions "
                                 "was not set to -1."), []
        assignments, error = _manual_assignments(state, assignments_requested)
        if error is not None:
            return _create_error(name, TopicErrorCode.INVALID_REPLICA_ASSIGNMENT, error), []
    else:
        # Kafka's order: the requested factor, the requested count, then the placer (on
        # the values after the defaults are applied).
        if replication_factor < -1 or replication_factor == 0:
            return _create_error(name, TopicErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0, or -1 to use the default value."), []
        if num_partitions == -1:
            num_partitions = defaults.num_partitions
        if replication_factor == -1:
            replication_factor = defaults.replication_factor
        if num_partitions <= 0:
            return _create_error(name, TopicErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value."), []
        error = _unplaceable(replication_factor, brokers)
        if error is not None:
            return _create_error(name, TopicErrorCode.INVALID_REPLICATION_FACTOR, error), []
        assignments = place_replicas(name, num_partitions, replication_factor, brokers.unfenced, brokers.fenced)

    topic_id = new_topic_id()
    records = [record(mr.TOPIC_RECORD, {"name": name, "topic_id": topic_id}, version=0)]
    records.extend(_partition_records(state, topic_id, assignments))
    records.extend(_config_record(RESOURCE_TOPIC, name, key, value) for key, value in sorted(configs.items()))
    result = {
        "name": name, "topic_id": topic_id, "error_code": 0, "error_message": None, "topic_config_error_code": 0,
        "num_partitions": len(assignments), "replication_factor": len(assignments[0]),
        "configs": _created_configs(configs),
    }
    return result, records


def _manual_assignments(state: ControllerState, requested: list) -> tuple[list[list[int]], str | None]:
    by_index: dict[int, list[int]] = {}
    for entry in requested:
        index = _field(entry, "partition_index", -1)
        if index in by_index:
            return [], f"Partition {index} was assigned more than once."
        by_index[index] = list(_field(entry, "broker_ids", []))
    if sorted(by_index) != list(range(len(by_index))):
        return [], "Partitions should be numbered 0 through N-1, where N is the number of partitions."
    assignments = [by_index[index] for index in range(len(by_index))]
    error = _replica_lists_error(state, assignments, 0)
    return ([], error) if error is not None else (assignments, None)


def _replica_lists_error(state: ControllerState, assignments: list[list[int]], first_index: int) -> str | None:
    """Kafka's checks of manual replica lists (numbered from `first_index`), or None.
    Fenced brokers may be named (they join the ISR once unfenced); a broker whose log
    directories are all cordoned may not, and one replica of each partition must be
    active to lead it."""
    for index, replicas in enumerate(assignments, start=first_index):
        if not replicas:
            return f"The manual partition assignment includes an empty replica list for partition {index}."
        seen: set[int] = set()
        for broker_id in replicas:
            if broker_id in seen:
                return (f"The manual partition assignment includes the broker {broker_id} more than "
                        f"once for partition {index}.")
            seen.add(broker_id)
            if state.broker(broker_id) is None:
                return (f"The manual partition assignment includes broker {broker_id}, but no such "
                        "broker is registered.")
            if not has_uncordoned_log_dir(state, broker_id):
                return (f"The manual partition assignment includes broker {broker_id}, but all its log "
                        "directories are cordoned.")
        if not any(is_active(state, b) for b in replicas):
            return (f"All brokers specified in the manual partition assignment for partition {index} "
                    "are fenced or in controlled shutdown.")
        if len(replicas) != len(assignments[0]):
            return "All partitions in the manual partition assignment must have the same number of replicas."
    return None


def _config_record(resource_type: int, resource_name: str, name: str, value: str | None) -> MetadataRecord:
    return record(mr.CONFIG_RECORD, {"resource_type": resource_type, "resource_name": resource_name,
                                     "name": name, "value": value}, version=0)


# ---------------------------------------------------------------------------
# DeleteTopics (API 20, v0-6)
# ---------------------------------------------------------------------------


def delete_topics(state: ControllerState, request: Any, api_version: int) -> ControllerResult:
    """DeleteTopics v0-6: one RemoveTopicRecord per topic. v0-5 name topics; v6 names
    each by name or by id (not both). Unknown name: UNKNOWN_TOPIC_OR_PARTITION; unknown
    id: UNKNOWN_TOPIC_ID; a topic named twice: INVALID_REQUEST for every mention."""
    zero = uuid.UUID(int=0)
    if api_version >= 6:
        entries = [(_field(t, "name", None), _field(t, "topic_id", zero)) for t in _field(request, "topics", [])]
    else:
        entries = [(name, zero) for name in _field(request, "topic_names", [])]

    topics = state.topics()
    resolved: list[tuple[str | None, uuid.UUID, TopicImage | None, tuple[int, str] | None]] = []
    for name, topic_id in entries:
        error: tuple[int, str] | None = None
        topic: TopicImage | None = None
        if name is not None and topic_id != zero:
            error = (ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id.")
        elif name is not None:
            topic = topics.get(name)
            if topic is None:
                error = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        elif topic_id != zero:
            topic = state.topic_by_id(topic_id)
            if topic is None:
                error = (TopicErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
        else:
            error = (ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
        resolved.append((name, topic_id, topic, error))

    mentions: dict[uuid.UUID, int] = {}
    for _, _, topic, error in resolved:
        if topic is not None and error is None:
            mentions[topic.topic_id] = mentions.get(topic.topic_id, 0) + 1

    records: list[MetadataRecord] = []
    results = []
    for name, topic_id, topic, error in resolved:
        if error is None and topic is not None and mentions[topic.topic_id] > 1:
            error = (ErrorCode.INVALID_REQUEST, "Duplicate topic name." if name is not None else "Duplicate topic id.")
        if error is None and topic is not None:
            records.append(record(mr.REMOVE_TOPIC_RECORD, {"topic_id": topic.topic_id}, version=0))
            results.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None})
        else:
            code, message = error  # type: ignore[misc]
            results.append({"name": name if api_version >= 6 else (name or ""), "topic_id": topic_id,
                            "error_code": int(code), "error_message": message})
    return ControllerResult(records, {"throttle_time_ms": 0, "responses": results}, atomic=True)


# ---------------------------------------------------------------------------
# CreatePartitions (API 37, v0-3)
# ---------------------------------------------------------------------------


def _partitions_error(name: str, code: int, message: str) -> dict[str, Any]:
    return {"name": name, "error_code": int(code), "error_message": message}


def _create_partitions_one(state: ControllerState, topic: Any, name: str,
                           brokers: UsableBrokers) -> tuple[int, str | None, list[MetadataRecord]]:
    image = state.topic(name)
    if image is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", []
    current = len(image.partitions)
    count = _field(topic, "count", 0)
    if count < current:
        return (TopicErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.", [])
    if count == current:
        return TopicErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).", []
    additional = count - current
    # New partitions keep the topic's replication factor (that of its first partition).
    first = image.partitions.get(0)
    replication_factor = len(first.replicas) if first is not None else 1
    requested = topic.get("assignments") if hasattr(topic, "get") else getattr(topic, "assignments", None)
    if requested is not None:
        if len(requested) != additional:
            return (TopicErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {additional} additional partition(s), but only {len(requested)} "
                    "assignment(s) were specified.", [])
        assignments = [list(_field(entry, "broker_ids", [])) for entry in requested]
        for replicas in assignments:
            if replicas and len(replicas) != replication_factor:
                return (TopicErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes a partition with {len(replicas)} "
                        f"replica(s), but this is not consistent with previous partitions, which have "
                        f"{replication_factor} replica(s).", [])
        error = _replica_lists_error(state, assignments, current)
        if error is not None:
            return TopicErrorCode.INVALID_REPLICA_ASSIGNMENT, error, []
    else:
        unplaceable = _unplaceable(replication_factor, brokers)
        if unplaceable is not None:
            return TopicErrorCode.INVALID_REPLICATION_FACTOR, unplaceable, []
        # The same round robin CreateTopics uses, continued from the existing partitions.
        assignments = place_replicas(name, count, replication_factor, brokers.unfenced, brokers.fenced)[current:]
    return 0, None, _partition_records(state, image.topic_id, assignments, first_index=current)


def create_partitions(state: ControllerState, request: Any, api_version: int) -> ControllerResult:
    """CreatePartitions v0-3 (Kafka's ReplicationControlManager.createPartitions): raise
    a topic's partition count. Per topic: named twice (INVALID_REQUEST), unknown
    (UNKNOWN_TOPIC_OR_PARTITION), no increase (INVALID_PARTITIONS), explicit
    assignments of the wrong number, brokers or size (INVALID_REPLICA_ASSIGNMENT), too
    few usable brokers (INVALID_REPLICATION_FACTOR). The new partitions keep the
    topic's replication factor and are placed as CreateTopics places them; each topic
    passes or fails alone, ValidateOnly writes nothing."""
    validate_only = bool(_field(request, "validate_only", False))
    topics = list(_field(request, "topics", []))
    counts = Counter(_field(topic, "name", "") for topic in topics)
    brokers = usable_brokers(state)
    records: list[MetadataRecord] = []
    results: list[dict[str, Any]] = []
    reported: set[str] = set()
    for topic in topics:
        name = _field(topic, "name", "")
        if counts[name] > 1:
            if name not in reported:
                reported.add(name)
                results.append(_partitions_error(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        code, message, topic_records = _create_partitions_one(state, topic, name, brokers)
        results.append(_partitions_error(name, code, message))
        records.extend(topic_records)
    return ControllerResult([] if validate_only else records, {"throttle_time_ms": 0, "results": results},
                            atomic=True)


# ---------------------------------------------------------------------------
# IncrementalAlterConfigs (API 44, v0-1)
# ---------------------------------------------------------------------------


def _resource_error(state: ControllerState, resource_type: int, resource_name: str) -> tuple[int, str] | None:
    if resource_type == RESOURCE_TOPIC:
        if state.topic(resource_name) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource_name}' does not exist."
        return None
    if resource_type == RESOURCE_BROKER:
        if resource_name == "":
            return None  # the cluster-wide default
        try:
            broker_id = int(resource_name)
        except ValueError:
            broker_id = -1
        if broker_id < 0 or str(broker_id) != resource_name.strip():
            return ErrorCode.INVALID_REQUEST, f"Invalid broker name {resource_name}"
        return None
    if resource_type == RESOURCE_BROKER_LOGGER:
        return ErrorCode.INVALID_REQUEST, "Broker logger configs are not kept in the metadata log."
    return ErrorCode.INVALID_REQUEST, f"Unexpected resource type {resource_type}"


def _broker_update_error(resource_name: str, keys: Iterable[str]) -> tuple[int, str] | None:
    """Kafka's check of the broker keys an alteration sets (DynamicBrokerConfig): keys it
    can only read at start-up are refused, and per-broker keys need a broker id."""
    def refused(what: str, names: list[str]) -> tuple[int, str]:
        return (ErrorCode.INVALID_REQUEST, f"Invalid config value for resource ConfigResource(type=BROKER, "
                                           f"name='{resource_name}'): {what}: Set({', '.join(names)})")

    modes = {key: BROKER_CONFIG_CATALOG[key].dynamic for key in keys if key in BROKER_CONFIG_CATALOG}
    read_only = sorted(key for key, mode in modes.items() if mode == "read-only")
    if read_only:
        return refused("Cannot update these configs dynamically", read_only)
    per_broker = sorted(key for key, mode in modes.items() if mode == "per-broker")
    if resource_name == "" and per_broker:
        return refused("Cannot update these configs at default cluster level, broker id must be specified",
                       per_broker)
    return None


def _alter_resource(state: ControllerState, resource: Any) -> tuple[list[MetadataRecord], tuple[int, str] | None]:
    resource_type = _field(resource, "resource_type", 0)
    resource_name = _field(resource, "resource_name", "")
    error = _resource_error(state, resource_type, resource_name)
    if error is not None:
        return [], error
    current = dict(state.configs(resource_type, resource_name))
    updated = dict(current)
    seen: set[str] = set()
    for entry in _field(resource, "configs", []):
        key = _field(entry, "name", "")
        operation = _field(entry, "config_operation", OP_SET)
        value = entry.get("value") if hasattr(entry, "get") else getattr(entry, "value", None)
        if key in seen:
            return [], (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        seen.add(key)
        if resource_type == RESOURCE_TOPIC and key not in TOPIC_CONFIGS and not (
                operation == OP_DELETE and key in current):
            # A key outside the catalogue (copied from ZooKeeper, say) may still be deleted.
            return [], (TopicErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
        if operation == OP_SET:
            if value is None:
                return [], (TopicErrorCode.INVALID_CONFIG, f"Null value not supported for : {key}")
            updated[key] = value
        elif operation == OP_DELETE:
            updated.pop(key, None)
        elif operation in (OP_APPEND, OP_SUBTRACT):
            if resource_type == RESOURCE_TOPIC and TOPIC_CONFIGS[key][0] != ConfigType.LIST:
                verb = "APPEND" if operation == OP_APPEND else "SUBTRACT"
                return [], (TopicErrorCode.INVALID_CONFIG,
                            f"Can't {verb} to key {key} because its type is not LIST.")
            base = current.get(key)
            if base is None and resource_type == RESOURCE_TOPIC:
                base = TOPIC_CONFIGS[key][1]
            items = _split_list(updated.get(key, base))
            given = _split_list(value)
            if operation == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            updated[key] = ",".join(items)
        else:
            return [], (ErrorCode.INVALID_REQUEST, f"Unknown config operation {operation} for {key}")
        if resource_type == RESOURCE_TOPIC and key in updated:
            error_text = _config_value_error(key, updated[key])
            if error_text is not None:
                return [], (TopicErrorCode.INVALID_CONFIG, error_text)
    if resource_type == RESOURCE_BROKER:
        error = _broker_update_error(resource_name, [key for key in seen if key in updated])
        if error is not None:
            return [], error
    records = []
    for key in sorted(set(current) | set(updated)):
        if current.get(key) != updated.get(key):
            records.append(_config_record(resource_type, resource_name, key, updated.get(key)))
    return records, None


def incremental_alter_configs(state: ControllerState, request: Any, api_version: int) -> ControllerResult:
    """IncrementalAlterConfigs v0-1 (KIP-339) for TOPIC (2) and BROKER (4) resources:
    SET, DELETE, APPEND, SUBTRACT. Each resource is all-or-nothing; only real changes
    become ConfigRecords (DELETE writes a null value)."""
    return _per_resource(state, request, _alter_resource)


def _per_resource(state: ControllerState, request: Any, change_one) -> ControllerResult:
    """The shape both config-altering APIs share: each resource changed by `change_one`
    on its own (a resource named twice is INVALID_REQUEST), one result per resource,
    nothing written under ValidateOnly."""
    validate_only = bool(_field(request, "validate_only", False))
    resources = list(_field(request, "resources", []))
    counts = Counter((_field(r, "resource_type", 0), _field(r, "resource_name", "")) for r in resources)
    records: list[MetadataRecord] = []
    results = []
    for resource in resources:
        key = (_field(resource, "resource_type", 0), _field(resource, "resource_name", ""))
        if counts[key] > 1:
            resource_records, error = [], (ErrorCode.INVALID_REQUEST, "Duplicate resource.")
        else:
            resource_records, error = change_one(state, resource)
        code, message = error if error is not None else (0, None)
        results.append({"error_code": int(code), "error_message": message, "resource_type": key[0],
                        "resource_name": key[1]})
        records.extend(resource_records)
    return ControllerResult([] if validate_only else records, {"throttle_time_ms": 0, "responses": results},
                            atomic=True)


# ---------------------------------------------------------------------------
# AlterConfigs (API 33, v0-2): the legacy whole-set replacement
# ---------------------------------------------------------------------------


def _replace_resource(state: ControllerState, resource: Any) -> tuple[list[MetadataRecord], tuple[int, str] | None]:
    resource_type = _field(resource, "resource_type", 0)
    resource_name = _field(resource, "resource_name", "")
    error = _resource_error(state, resource_type, resource_name)
    if error is not None:
        return [], error
    wanted: dict[str, str] = {}
    seen: set[str] = set()
    for entry in _field(resource, "configs", []):
        key = _field(entry, "name", "")
        value = entry.get("value") if hasattr(entry, "get") else getattr(entry, "value", None)
        if key in seen:
            return [], (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        seen.add(key)
        if resource_type == RESOURCE_TOPIC:
            error_text = _topic_config_error(key, value)
            if error_text is not None:
                return [], (TopicErrorCode.INVALID_CONFIG, error_text)
        if value is not None:
            # A broker key given without a value is simply not part of the new set.
            wanted[key] = value
    if resource_type == RESOURCE_BROKER:
        error = _broker_update_error(resource_name, wanted)
        if error is not None:
            return [], error
    current = state.configs(resource_type, resource_name)
    records = [_config_record(resource_type, resource_name, key, wanted.get(key))
               for key in sorted(set(current) | set(wanted)) if current.get(key) != wanted.get(key)]
    return records, None


def alter_configs(state: ControllerState, request: Any, api_version: int) -> ControllerResult:
    """AlterConfigs v0-2 (Kafka's ConfigurationControlManager.legacyAlterConfigs) for
    TOPIC (2) and BROKER (4) resources: the given keys become the resource's whole set
    of dynamic configs, every key not given is removed (a null-valued ConfigRecord).
    Topic keys are checked as IncrementalAlterConfigs checks them; a resource named
    twice is INVALID_REQUEST; each resource passes or fails alone; ValidateOnly writes
    nothing."""
    return _per_resource(state, request, _replace_resource)


# ---------------------------------------------------------------------------
# DescribeConfigs (API 32, v0-4): a read of the committed image
# ---------------------------------------------------------------------------


def _described(name: str, value: str | None, source: int, config_type: ConfigType,
               synonyms: list[dict[str, Any]], include_synonyms: bool) -> dict[str, Any]:
    return {
        "name": name, "value": value, "read_only": False,
        "is_default": source == SOURCE_DEFAULT_CONFIG, "config_source": source, "is_sensitive": False,
        "synonyms": synonyms if include_synonyms else [], "config_type": int(config_type), "documentation": None,
    }


def _describe_topic(state: ControllerState, name: str, include_synonyms: bool) -> list[dict[str, Any]]:
    values = state.configs(RESOURCE_TOPIC, name)
    entries = []
    for key in sorted(set(TOPIC_CONFIGS) | set(values)):
        config_type, default = TOPIC_CONFIGS.get(key, (ConfigType.UNKNOWN, None))
        synonyms = []
        if key in values:
            synonyms.append({"name": key, "value": values[key], "source": SOURCE_DYNAMIC_TOPIC_CONFIG})
        if key in TOPIC_CONFIGS:
            synonyms.append({"name": key, "value": default, "source": SOURCE_DEFAULT_CONFIG})
        value, source = (values[key], SOURCE_DYNAMIC_TOPIC_CONFIG) if key in values else (default,
                                                                                          SOURCE_DEFAULT_CONFIG)
        entries.append(_described(key, value, source, config_type, synonyms, include_synonyms))
    return entries


# Kafka's broker configs (every key of its KafkaConfig definition, generated from the
# pinned release by tools/gen_broker_configs.py): the keys Kafka's broker lists when
# nobody set them, with Kafka's type, default and update mode. Where kraftwerk's node
# behaves differently when a key is left unset, its own default replaces Kafka's, so
# DEFAULT_CONFIG tells what the node really uses.
_KRAFTWERK_DEFAULTS: Mapping[str, str] = {
    # kraftwerk's controller listeners speak SASL/PLAIN unless told otherwise (no Kerberos).
    "sasl.mechanism.controller.protocol": "PLAIN",
}


def _with_kraftwerk_default(fact: BrokerConfigFact, key: str) -> BrokerConfigFact:
    return fact._replace(default=_KRAFTWERK_DEFAULTS[key]) if key in _KRAFTWERK_DEFAULTS else fact


BROKER_CONFIGS: Mapping[str, BrokerConfigFact] = MappingProxyType({
    key: _with_kraftwerk_default(fact, key) for key, fact in BROKER_CONFIG_CATALOG.items() if fact.listed})
# Keys Kafka knows but lists only when someone set them (internal keys, the broker-level
# replication quotas): typed and checked for sensitivity like the others.
_UNLISTED_BROKER_CONFIGS: Mapping[str, BrokerConfigFact] = MappingProxyType({
    key: fact for key, fact in BROKER_CONFIG_CATALOG.items() if not fact.listed})
_LISTENER_PREFIX = re.compile(r"^listener\.name\.[^.]+\.(.+)$")


@dataclass(frozen=True, slots=True)
class NodeConfigView:
    """What DescribeConfigs may say about the node answering it: its id, the broker
    configs its operator set in its properties (`static`, key -> value as given) and its
    loggers with their levels (BROKER_LOGGER)."""

    node_id: int
    static: Mapping[str, str]
    loggers: Mapping[str, str]


def _broker_fact(key: str) -> BrokerConfigFact | None:
    """Kafka's facts for a broker key; a listener-prefixed key
    (listener.name.<listener>.<key>) is typed by the key it overrides, as Kafka types it."""
    fact = BROKER_CONFIGS.get(key) or _UNLISTED_BROKER_CONFIGS.get(key)
    if fact is not None:
        return fact
    match = _LISTENER_PREFIX.match(key)
    if match is None:
        return None
    base = match.group(1)
    fact = BROKER_CONFIGS.get(base) or _UNLISTED_BROKER_CONFIGS.get(base)
    if fact is None and base.endswith(".sasl.jaas.config"):
        # listener.name.<listener>.<mechanism>.sasl.jaas.config
        fact = BROKER_CONFIGS.get("sasl.jaas.config")
    if fact is None:
        return None
    # An override is dynamic only under its exact name in Kafka's lists, so it is not.
    return fact._replace(default=None, has_default=False, dynamic="read-only", synonyms=(key, base))


def _broker_entry(key: str, fact: BrokerConfigFact | None, synonyms: list[dict[str, Any]],
                  include_synonyms: bool, untyped_sensitive: bool = True) -> dict[str, Any]:
    """One BROKER config as Kafka's broker answers it: the value and source of the first
    synonym (Kafka's order: by source, then by synonym, starting at the key itself);
    Kafka treats a key it cannot type as sensitive (`untyped_sensitive`), and never shows
    a sensitive value; read-only unless Kafka can change the key at run time."""
    value, source = (synonyms[0]["value"], synonyms[0]["source"]) if synonyms else (None, SOURCE_DEFAULT_CONFIG)
    sensitive = fact.sensitive if fact is not None else untyped_sensitive
    if sensitive:
        value = None
        synonyms = [{**synonym, "value": None} for synonym in synonyms]
    config_type = ConfigType.UNKNOWN if fact is None else ConfigType[fact.type]
    entry = _described(key, value, source, config_type, synonyms, include_synonyms)
    entry["read_only"] = fact is None or fact.dynamic == "read-only"
    entry["is_sensitive"] = sensitive
    return entry


def _broker_synonyms(key: str, fact: BrokerConfigFact | None,
                     layers: list[tuple[Mapping[str, str], int]]) -> list[dict[str, Any]]:
    names = fact.synonyms if fact is not None else (key,)
    synonyms = [{"name": name, "value": values[name], "source": source}
                for values, source in layers for name in names if name in values]
    if fact is not None:
        synonyms += [{"name": name, "value": default.default, "source": SOURCE_DEFAULT_CONFIG}
                     for name in names if (default := BROKER_CONFIGS.get(name)) is not None and default.has_default]
    # Synonyms more specific than the key itself (log.retention.ms for log.retention.hours)
    # are dropped until the key's own first entry, as Kafka does.
    first = next((index for index, synonym in enumerate(synonyms) if synonym["name"] == key), len(synonyms))
    return synonyms[first:]


def _describe_own_broker(state: ControllerState, node: NodeConfigView,
                         include_synonyms: bool) -> list[dict[str, Any]]:
    """This node's BROKER resource as Kafka's broker answers it: every key of Kafka's
    definition plus any other key set on it, valued by precedence dynamic per-broker >
    dynamic cluster default > static > default."""
    own = state.configs(RESOURCE_BROKER, str(node.node_id))
    cluster_default = state.configs(RESOURCE_BROKER, "")
    static = dict(node.static)
    # Kafka fills broker.id from node.id (and node.id from broker.id) when only one is
    # given, before anything reads the properties: both answer the node's id.
    for given, filled in (("node.id", "broker.id"), ("broker.id", "node.id")):
        if given in static and filled not in static:
            static[filled] = static[given]
    layers = [(own, SOURCE_DYNAMIC_BROKER_CONFIG), (cluster_default, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
              (static, SOURCE_STATIC_BROKER_CONFIG)]
    entries = []
    for key in sorted(set(BROKER_CONFIGS) | set(static) | set(own) | set(cluster_default)):
        fact = _broker_fact(key)
        entries.append(_broker_entry(key, fact, _broker_synonyms(key, fact, layers), include_synonyms))
    return entries


def _describe_loggers(node: NodeConfigView) -> list[dict[str, Any]]:
    return [{"name": name, "value": level, "read_only": False, "is_default": False,
             "config_source": SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG, "is_sensitive": False, "synonyms": [],
             "config_type": int(ConfigType.STRING), "documentation": None}
            for name, level in sorted(node.loggers.items())]


def _node_resource_error(node: NodeConfigView, resource_type: int, resource_name: str) -> tuple[int, str] | None:
    """Kafka's broker-side checks of a BROKER_LOGGER resource name."""
    if resource_type != RESOURCE_BROKER_LOGGER:
        return None
    if resource_name == "":
        return ErrorCode.INVALID_REQUEST, "Broker id must not be empty"
    if resource_name != str(node.node_id):
        return (ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {node.node_id} but received {resource_name}")
    return None


def _describe_broker(state: ControllerState, name: str, include_synonyms: bool) -> list[dict[str, Any]]:
    """Another broker's resource, or the cluster default (""): only what the image holds
    for it (its own static properties are that node's to tell), typed from Kafka's
    catalogue. Kafka's broker refuses other ids; kraftwerk answers them as a view of the
    image, so a key it cannot type is shown as set rather than hidden."""
    cluster_default = state.configs(RESOURCE_BROKER, "")
    own = state.configs(RESOURCE_BROKER, name) if name != "" else {}
    layers = [(own, SOURCE_DYNAMIC_BROKER_CONFIG), (cluster_default, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)]
    entries = []
    for key in sorted(set(cluster_default) | set(own)):
        synonyms = [{"name": key, "value": values[key], "source": source} for values, source in layers
                    if key in values]
        entries.append(_broker_entry(key, _broker_fact(key), synonyms, include_synonyms, untyped_sensitive=False))
    return entries


def describe_configs(state: ControllerState, request: Any, api_version: int,
                     node: NodeConfigView | None = None) -> dict[str, Any]:
    """DescribeConfigs v0-4 from the image: a TOPIC lists Kafka's topic configs (set ones
    as DYNAMIC_TOPIC_CONFIG, the rest at their defaults) plus any other key set on it.
    The answering node's own BROKER resource (`node`) lists every broker key it knows
    with Kafka's sources (dynamic, dynamic default, static, default) and synonyms; any
    other broker id, or "" (the cluster default), lists the dynamic configs the image
    holds for it. BROKER_LOGGER names the answering node: its loggers and levels. A
    non-null ConfigurationKeys keeps only those keys."""
    include_synonyms = bool(_field(request, "include_synonyms", False)) if api_version >= 1 else False
    results = []
    for resource in _field(request, "resources", []):
        resource_type = _field(resource, "resource_type", 0)
        resource_name = _field(resource, "resource_name", "")
        keys = resource.get("configuration_keys") if hasattr(resource, "get") else None
        if node is not None and resource_type == RESOURCE_BROKER_LOGGER:
            error = _node_resource_error(node, resource_type, resource_name)
        else:
            error = _resource_error(state, resource_type, resource_name)
        # Kafka answers a described resource with an empty message, not null.
        result: dict[str, Any] = {"error_code": 0, "error_message": "", "resource_type": resource_type,
                                  "resource_name": resource_name, "configs": []}
        if error is not None:
            result["error_code"], result["error_message"] = int(error[0]), error[1]
        else:
            if resource_type == RESOURCE_TOPIC:
                entries = _describe_topic(state, resource_name, include_synonyms)
            elif resource_type == RESOURCE_BROKER_LOGGER and node is not None:
                entries = _describe_loggers(node)
            elif node is not None and resource_name == str(node.node_id):
                entries = _describe_own_broker(state, node, include_synonyms)
            else:
                entries = _describe_broker(state, resource_name, include_synonyms)
            if keys is not None:
                wanted = set(keys)
                entries = [entry for entry in entries if entry["name"] in wanted]
            result["configs"] = entries
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}
