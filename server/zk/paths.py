"""Kafka's ZooKeeper znodes: their paths and JSON layouts, as pure values.

Owns: the path constants and helpers (`broker_path`, `topic_path`,
`partition_state_path`, `config_path`, `quota_entity_path`, ...), one frozen dataclass
per znode kind with `encode() -> bytes` and `decode(bytes)`, the client quota and SCRAM
layouts of the users/clients/ips config znodes (Kafka's sanitized entity names,
`<default>`, the SCRAM credential text), the `ZkClusterImage` that `server/zk/seed.py`
reads a whole ZooKeeper-mode cluster into, and `ZnodeDecodeError`.

Rules kept here:
- No I/O, no clock: a timestamp is a field the caller fills in.
- The layouts are facts from Apache Kafka's ZooKeeper-mode brokers and controller
  (field names, nesting, numbers as JSON numbers except where Kafka writes strings:
  `/cluster/id`'s version, the broker and controller `timestamp`), plus the KIP-866
  `/migration` znode exactly as the KIP names its fields.
- Decoders are strict: bad JSON, a missing key or a value of the wrong type raises
  `ZnodeDecodeError` and nothing else, so a caller handles one error for every znode.
  Unknown extra keys are ignored, as Kafka's decoders do.
- Dataclasses are frozen; mapping fields hold plain dicts (compare by value; these
  values are not hashable).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from enum import IntEnum
from typing import Any, Mapping

from server.storage.meta_properties import parse_uuid_string, uuid_to_string

# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------

CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_PATH = "/config"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
MIGRATION_PATH = "/migration"
# Apache Kafka's FeatureZNode lives at "/feature" (singular); kraftwerk uses
# "/features", the name KIP-584 gives it (docs/kip-differences.md). Every kraftwerk component (seed, ZK broker
# agent, migration) reads and writes it through this one constant, so the name is
# chosen here only.
FEATURES_PATH = "/features"

# Config entity types, the second path component under /config (Kafka's ConfigType).
CONFIG_TOPICS = "topics"
CONFIG_BROKERS = "brokers"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def config_entity_type_path(entity_type: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}"


def config_path(entity_type: str, name: str) -> str:
    """`/config/topics/<topic>`, `/config/brokers/<id>` (`<default>` for the cluster default)."""
    return f"{config_entity_type_path(entity_type)}/{name}"


# --------------------------------------------------------------------------
# Errors and JSON helpers
# --------------------------------------------------------------------------

class ZnodeDecodeError(ValueError):
    """A znode's bytes are not the JSON layout Kafka writes there."""


def _encode_json(value: Mapping[str, Any]) -> bytes:
    # Compact separators like Kafka's Jackson output; key order is the dataclass order.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _parse_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    # ValueError covers JSONDecodeError, bad UTF-8 and integers over Python's
    # digit limit; RecursionError a maliciously deep nesting.
    except (ValueError, RecursionError) as exc:
        raise ZnodeDecodeError(f"{what}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ZnodeDecodeError(f"{what}: want a JSON object, got {type(value).__name__}")
    return value


def _require(obj: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in obj:
        raise ZnodeDecodeError(f"{what}: missing key {key!r}")
    return obj[key]


def _as_int(value: Any, what: str) -> int:
    # bool is an int subclass in Python; JSON true is never a Kafka number.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZnodeDecodeError(f"{what}: want an integer, got {value!r}")
    return value


def _as_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ZnodeDecodeError(f"{what}: want a string, got {value!r}")
    return value


def _as_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ZnodeDecodeError(f"{what}: want a JSON object, got {value!r}")
    return value


def _as_int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ZnodeDecodeError(f"{what}: want a list of integers, got {value!r}")
    return tuple(_as_int(item, what) for item in value)


def _int_key(key: str, what: str) -> int:
    # Partition ids are JSON object keys, hence strings; Kafka writes them in decimal.
    if not key.isdigit() or not key.isascii():
        raise ZnodeDecodeError(f"{what}: partition key {key!r} is not a decimal integer")
    try:
        return int(key)
    except ValueError:
        raise ZnodeDecodeError(f"{what}: partition key too long") from None


def _int_text(text: str, what: str) -> int:
    stripped = text.strip()
    body = stripped[1:] if stripped.startswith("-") else stripped
    if not body or not body.isdigit() or not body.isascii():
        raise ZnodeDecodeError(f"{what}: want an integer as text, got {text!r}")
    try:
        return int(stripped)
    except ValueError:  # more digits than Python converts
        raise ZnodeDecodeError(f"{what}: integer text too long") from None


def _replica_map(value: Any, what: str) -> dict[int, tuple[int, ...]]:
    obj = _as_object(value, what)
    return {_int_key(key, what): _as_int_list(replicas, what) for key, replicas in obj.items()}


def _replica_map_json(value: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
    return {str(partition): list(replicas) for partition, replicas in sorted(value.items())}


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's textual uuid (base64url, no padding, 22 characters)."""
    return uuid_to_string(value)


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's textual uuid back to a UUID; bad text raises `ZnodeDecodeError`."""
    try:
        return parse_uuid_string(text)
    except ValueError as exc:
        raise ZnodeDecodeError(str(exc)) from None


# --------------------------------------------------------------------------
# /cluster/id
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ClusterIdZnode:
    """`/cluster/id`: {"version":"1","id":"<base64url uuid>"} (Kafka writes version as a string)."""

    cluster_id: str

    def encode(self) -> bytes:
        return _encode_json({"version": "1", "id": self.cluster_id})

    @classmethod
    def decode(cls, data: bytes) -> ClusterIdZnode:
        what = CLUSTER_ID_PATH
        obj = _parse_object(data, what)
        return cls(_as_str(_require(obj, "id", what), what))

    def cluster_uuid(self) -> uuid.UUID:
        """The 16 bytes the id encodes (MigrationCheck's `cluster_id`)."""
        return parse_kafka_uuid(self.cluster_id)


# --------------------------------------------------------------------------
# /brokers/ids/<id>
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener, `LISTENER://host:port` in the registration."""

    listener: str
    host: str
    port: int

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        what = "endpoint"
        listener, sep, rest = text.partition("://")
        host, colon, port_text = rest.rpartition(":")
        if not sep or not listener or not colon:
            raise ZnodeDecodeError(f"{what}: want LISTENER://host:port, got {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(listener, host, _int_text(port_text, what))


@dataclass(frozen=True, slots=True)
class SupportedFeatureRange:
    """A broker's supported range for one feature (KIP-584), as it registers it."""

    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationZnode:
    """`/brokers/ids/<id>`, Kafka's broker registration JSON version 5 (ephemeral).

    `host`/`port` are the first PLAINTEXT endpoint for old clients (null/-1 when
    there is none); `timestamp_ms`
    is written as a decimal string, as Kafka does. The broker id is the path's last
    component, not part of the JSON.
    """

    host: str | None
    port: int
    endpoints: tuple[Endpoint, ...]
    listener_security_protocol_map: Mapping[str, str]
    rack: str | None
    jmx_port: int
    timestamp_ms: int
    features: Mapping[str, SupportedFeatureRange]
    version: int = 5

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "version": self.version,
            "host": self.host,
            "port": self.port,
            "endpoints": [endpoint.connection_string() for endpoint in self.endpoints],
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
        }
        # Kafka omits "rack" when the broker has none; a decoder reads that as null.
        if self.rack is not None:
            value["rack"] = self.rack
        value["listener_security_protocol_map"] = dict(self.listener_security_protocol_map)
        value["features"] = {
            name: {"min_version": rng.min_version, "max_version": rng.max_version}
            for name, rng in self.features.items()
        }
        return _encode_json(value)

    @classmethod
    def decode(cls, data: bytes) -> BrokerRegistrationZnode:
        what = "broker registration"
        obj = _parse_object(data, what)
        version = _as_int(_require(obj, "version", what), what)
        host = obj.get("host")
        rack = obj.get("rack")
        protocol_map = _as_object(obj.get("listener_security_protocol_map", {}), what)
        features_obj = _as_object(obj.get("features", {}), what)
        features: dict[str, SupportedFeatureRange] = {}
        for name, rng in features_obj.items():
            rng_obj = _as_object(rng, what)
            features[name] = SupportedFeatureRange(
                _as_int(_require(rng_obj, "min_version", what), what),
                _as_int(_require(rng_obj, "max_version", what), what),
            )
        endpoints_value = _require(obj, "endpoints", what)
        if not isinstance(endpoints_value, list):
            raise ZnodeDecodeError(f"{what}: endpoints must be a list, got {endpoints_value!r}")
        return cls(
            host=_as_str(host, what) if host is not None else None,
            port=_as_int(obj.get("port", -1), what),
            endpoints=tuple(Endpoint.parse(_as_str(item, what)) for item in endpoints_value),
            listener_security_protocol_map={
                _as_str(k, what): _as_str(v, what) for k, v in protocol_map.items()
            },
            rack=_as_str(rack, what) if rack is not None else None,
            jmx_port=_as_int(obj.get("jmx_port", -1), what),
            timestamp_ms=_int_text(_as_str(_require(obj, "timestamp", what), what), what),
            features=features,
            version=version,
        )


# --------------------------------------------------------------------------
# /brokers/topics/<topic> and its partition states
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicZnode:
    """`/brokers/topics/<topic>` version 3: topic id and replica assignment.

    `partitions` maps partition id -> replicas; `adding_replicas`/`removing_replicas`
    hold only partitions under reassignment (Kafka writes empty objects otherwise).
    `topic_id` is Kafka's textual uuid, None for topics created before topic ids.
    """

    topic_id: str | None
    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    version: int = 3

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "version": self.version,
            "partitions": _replica_map_json(self.partitions),
            "adding_replicas": _replica_map_json(self.adding_replicas),
            "removing_replicas": _replica_map_json(self.removing_replicas),
        }
        if self.topic_id is not None:
            value["topic_id"] = self.topic_id
        return _encode_json(value)

    @classmethod
    def decode(cls, data: bytes) -> TopicZnode:
        what = "topic assignment"
        obj = _parse_object(data, what)
        topic_id = obj.get("topic_id")
        return cls(
            topic_id=_as_str(topic_id, what) if topic_id is not None else None,
            partitions=_replica_map(_require(obj, "partitions", what), what),
            adding_replicas=_replica_map(obj.get("adding_replicas", {}), what),
            removing_replicas=_replica_map(obj.get("removing_replicas", {}), what),
            version=_as_int(obj.get("version", 1), what),
        )


@dataclass(frozen=True, slots=True)
class PartitionStateZnode:
    """`/brokers/topics/<t>/partitions/<p>/state`: leader, leader epoch, ISR, controller epoch."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 1

    def encode(self) -> bytes:
        return _encode_json({
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": self.version,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        })

    @classmethod
    def decode(cls, data: bytes) -> PartitionStateZnode:
        what = "partition state"
        obj = _parse_object(data, what)
        return cls(
            leader=_as_int(_require(obj, "leader", what), what),
            leader_epoch=_as_int(_require(obj, "leader_epoch", what), what),
            isr=_as_int_list(_require(obj, "isr", what), what),
            controller_epoch=_as_int(_require(obj, "controller_epoch", what), what),
            version=_as_int(obj.get("version", 1), what),
        )


# --------------------------------------------------------------------------
# /config/<entity type>/<name>
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConfigZnode:
    """`/config/topics/<t>`, `/config/brokers/<id>`: {"version":1,"config":{key: value}}."""

    config: Mapping[str, str]
    version: int = 1

    def encode(self) -> bytes:
        return _encode_json({"version": self.version, "config": dict(self.config)})

    @classmethod
    def decode(cls, data: bytes) -> ConfigZnode:
        what = "config"
        obj = _parse_object(data, what)
        config = _as_object(_require(obj, "config", what), what)
        return cls(
            config={_as_str(k, what): _as_str(v, what) for k, v in config.items()},
            version=_as_int(obj.get("version", 1), what),
        )


# --------------------------------------------------------------------------
# /features (KIP-584)
# --------------------------------------------------------------------------

class FeatureZnodeStatus(IntEnum):
    """Kafka's FeatureZNodeStatus: whether the finalized features are in force."""

    DISABLED = 0
    ENABLED = 1


@dataclass(frozen=True, slots=True)
class FinalizedFeature:
    """One finalized feature. KIP-584's first layout also had `min_version_level`
    (None here when absent; Kafka dropped it later)."""

    max_version_level: int
    min_version_level: int | None = None


@dataclass(frozen=True, slots=True)
class FeaturesZnode:
    """`/features`: {"version":..,"status":..,"features":{name:{"max_version_level":..}}}."""

    status: FeatureZnodeStatus
    features: Mapping[str, FinalizedFeature]
    version: int = 2

    def encode(self) -> bytes:
        features: dict[str, dict[str, int]] = {}
        for name, feature in self.features.items():
            entry: dict[str, int] = {}
            if feature.min_version_level is not None:
                entry["min_version_level"] = feature.min_version_level
            entry["max_version_level"] = feature.max_version_level
            features[name] = entry
        return _encode_json({"version": self.version, "status": int(self.status), "features": features})

    @classmethod
    def decode(cls, data: bytes) -> FeaturesZnode:
        what = FEATURES_PATH
        obj = _parse_object(data, what)
        status_value = _as_int(_require(obj, "status", what), what)
        try:
            status = FeatureZnodeStatus(status_value)
        except ValueError:
            raise ZnodeDecodeError(f"{what}: unknown status {status_value}") from None
        features: dict[str, FinalizedFeature] = {}
        for name, entry in _as_object(_require(obj, "features", what), what).items():
            entry_obj = _as_object(entry, what)
            min_level = entry_obj.get("min_version_level")
            features[name] = FinalizedFeature(
                max_version_level=_as_int(_require(entry_obj, "max_version_level", what), what),
                min_version_level=_as_int(min_level, what) if min_level is not None else None,
            )
        return cls(status=status, features=features, version=_as_int(_require(obj, "version", what), what))

    def finalized_levels(self) -> dict[str, int]:
        """Feature name -> finalized (max) level; empty when the status is DISABLED."""
        if self.status != FeatureZnodeStatus.ENABLED:
            return {}
        return {name: feature.max_version_level for name, feature in self.features.items()}


# --------------------------------------------------------------------------
# /controller, /controller_epoch
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ControllerZnode:
    """`/controller`: {"version":2,"brokerid":N,"timestamp":"<ms>","kraftControllerEpoch":E}.

    A ZK controller writes version 1 (no epoch) as an ephemeral node; a KRaft
    controller in migration writes version 2 with its epoch, persistent (KIP-866).
    """

    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int | None = None
    version: int = 2

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "version": self.version,
            "brokerid": self.broker_id,
            "timestamp": str(self.timestamp_ms),
        }
        if self.kraft_controller_epoch is not None:
            value["kraftControllerEpoch"] = self.kraft_controller_epoch
        return _encode_json(value)

    @classmethod
    def decode(cls, data: bytes) -> ControllerZnode:
        what = CONTROLLER_PATH
        obj = _parse_object(data, what)
        epoch = obj.get("kraftControllerEpoch")
        timestamp = obj.get("timestamp", "0")
        return cls(
            broker_id=_as_int(_require(obj, "brokerid", what), what),
            timestamp_ms=_int_text(_as_str(timestamp, what), what),
            kraft_controller_epoch=_as_int(epoch, what) if epoch is not None else None,
            version=_as_int(obj.get("version", 1), what),
        )

    @property
    def is_kraft(self) -> bool:
        return self.kraft_controller_epoch is not None


@dataclass(frozen=True, slots=True)
class ControllerEpochZnode:
    """`/controller_epoch`: the epoch as decimal text (not JSON)."""

    epoch: int

    def encode(self) -> bytes:
        return str(self.epoch).encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> ControllerEpochZnode:
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise ZnodeDecodeError(f"{CONTROLLER_EPOCH_PATH}: not ASCII") from None
        return cls(_int_text(text, CONTROLLER_EPOCH_PATH))


# --------------------------------------------------------------------------
# /migration (KIP-866)
# --------------------------------------------------------------------------

def format_iso_timestamp_ms(timestamp_ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with milliseconds: 2022-01-01T00:00:00.000Z."""
    moment = datetime.fromtimestamp(timestamp_ms // 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{timestamp_ms % 1000:03d}Z"


def parse_iso_timestamp_ms(text: str) -> int:
    """ISO-8601 (as `format_iso_timestamp_ms` writes, or with an offset) to epoch ms."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ZnodeDecodeError(f"{MIGRATION_PATH}: not an ISO-8601 timestamp: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@dataclass(frozen=True, slots=True)
class MigrationZnode:
    """`/migration`, the write-behind fence, with the KIP's field names.

    {"version":0,"lastOffset":..,"lastTimestamp":"ISO-8601","kraftControllerId":..,
    "kraftControllerEpoch":..}. The znode's ZooKeeper version (not in the JSON) is
    the fence: every dual write is a multi with a check on it.
    """

    last_offset: int
    last_timestamp_ms: int
    kraft_controller_id: int
    kraft_controller_epoch: int
    version: int = 0

    def encode(self) -> bytes:
        return _encode_json({
            "version": self.version,
            "lastOffset": self.last_offset,
            "lastTimestamp": format_iso_timestamp_ms(self.last_timestamp_ms),
            "kraftControllerId": self.kraft_controller_id,
            "kraftControllerEpoch": self.kraft_controller_epoch,
        })

    @classmethod
    def decode(cls, data: bytes) -> MigrationZnode:
        what = MIGRATION_PATH
        obj = _parse_object(data, what)
        return cls(
            last_offset=_as_int(_require(obj, "lastOffset", what), what),
            last_timestamp_ms=parse_iso_timestamp_ms(_as_str(_require(obj, "lastTimestamp", what), what)),
            kraft_controller_id=_as_int(_require(obj, "kraftControllerId", what), what),
            kraft_controller_epoch=_as_int(_require(obj, "kraftControllerEpoch", what), what),
            version=_as_int(obj.get("version", 0), what),
        )


# --------------------------------------------------------------------------
# Client quotas and SCRAM credentials: /config/users, /config/clients, /config/ips
# --------------------------------------------------------------------------

# Kafka's ZooKeeper names the default entity of a type "<default>"; KRaft names it null.
ZK_DEFAULT_ENTITY = "<default>"
# Kafka's client quota entity types (ClientQuotaEntity) and their ZooKeeper config types.
QUOTA_USER, QUOTA_CLIENT_ID, QUOTA_IP = "user", "client-id", "ip"
CONFIG_USERS, CONFIG_CLIENTS, CONFIG_IPS = "users", "clients", "ips"
# A user's config znode also holds its SCRAM credentials under the mechanism names.
SCRAM_MECHANISM_NAMES = ("SCRAM-SHA-256", "SCRAM-SHA-512")

# (entity type, name or None for the default) pairs sorted by type: the same shape as the
# controller's QuotaEntity, without depending on the controller.
QuotaEntityKey = tuple[tuple[str, "str | None"], ...]

# Characters Java's URLEncoder keeps as they are; Kafka's Sanitizer percent-encodes the
# rest (UTF-8 bytes, upper-case hex), a space and '*' included.
_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize_entity_name(name: str) -> str:
    """A user or client-id as Kafka spells it in a znode name (Sanitizer.sanitize)."""
    return "".join(chr(byte) if byte in _URL_SAFE else f"%{byte:02X}" for byte in name.encode("utf-8"))


def desanitize_entity_name(text: str) -> str:
    """A znode name back to the user or client-id (Sanitizer.desanitize: URL decoding, so
    '+' is a space too). A malformed escape raises `ZnodeDecodeError`."""
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%":
            pair = text[index + 1:index + 3]
            if len(pair) != 2 or not all(c in "0123456789abcdefABCDEF" for c in pair):
                raise ZnodeDecodeError(f"quota entity name {text!r}: malformed %-escape")
            out.append(int(pair, 16))
            index += 3
            continue
        out += b" " if char == "+" else char.encode("utf-8")
        index += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ZnodeDecodeError(f"quota entity name {text!r}: escapes are not UTF-8") from None


def _zk_entity_name(entity_type: str, name: str | None) -> str:
    if name is None:
        return ZK_DEFAULT_ENTITY
    # Kafka sanitizes users and client-ids, never ip addresses.
    return name if entity_type == QUOTA_IP else sanitize_entity_name(name)


def _kraft_entity_name(entity_type: str, zk_name: str) -> str | None:
    if zk_name == ZK_DEFAULT_ENTITY:
        return None
    return zk_name if entity_type == QUOTA_IP else desanitize_entity_name(zk_name)


def quota_entity_path(entity: QuotaEntityKey) -> str:
    """Kafka's entity path of a quota entity, relative to /config (also the change
    notification's entity_path): users/<u>, clients/<c>, users/<u>/clients/<c>, ips/<ip>.
    ValueError for a combination Kafka has no znode for."""
    names = dict(entity)
    if set(names) == {QUOTA_USER}:
        return f"{CONFIG_USERS}/{_zk_entity_name(QUOTA_USER, names[QUOTA_USER])}"
    if set(names) == {QUOTA_CLIENT_ID}:
        return f"{CONFIG_CLIENTS}/{_zk_entity_name(QUOTA_CLIENT_ID, names[QUOTA_CLIENT_ID])}"
    if set(names) == {QUOTA_USER, QUOTA_CLIENT_ID}:
        return (f"{CONFIG_USERS}/{_zk_entity_name(QUOTA_USER, names[QUOTA_USER])}/{CONFIG_CLIENTS}/"
                f"{_zk_entity_name(QUOTA_CLIENT_ID, names[QUOTA_CLIENT_ID])}")
    if set(names) == {QUOTA_IP}:
        return f"{CONFIG_IPS}/{_zk_entity_name(QUOTA_IP, names[QUOTA_IP])}"
    raise ValueError(f"no ZooKeeper path for quota entity {entity!r}")


def parse_quota_entity_path(entity_path: str) -> QuotaEntityKey:
    """An entity path (as `quota_entity_path` writes it) back to the entity."""
    parts = entity_path.split("/")
    if any(part == "" for part in parts):
        raise ZnodeDecodeError(f"{entity_path!r} has an empty component")
    if len(parts) == 2 and parts[0] == CONFIG_USERS:
        pairs = [(QUOTA_USER, _kraft_entity_name(QUOTA_USER, parts[1]))]
    elif len(parts) == 2 and parts[0] == CONFIG_CLIENTS:
        pairs = [(QUOTA_CLIENT_ID, _kraft_entity_name(QUOTA_CLIENT_ID, parts[1]))]
    elif len(parts) == 4 and parts[0] == CONFIG_USERS and parts[2] == CONFIG_CLIENTS:
        pairs = [(QUOTA_USER, _kraft_entity_name(QUOTA_USER, parts[1])),
                 (QUOTA_CLIENT_ID, _kraft_entity_name(QUOTA_CLIENT_ID, parts[3]))]
    elif len(parts) == 2 and parts[0] == CONFIG_IPS:
        pairs = [(QUOTA_IP, _kraft_entity_name(QUOTA_IP, parts[1]))]
    else:
        raise ZnodeDecodeError(f"{entity_path!r} is not a client quota entity path")
    return tuple(sorted(pairs))


def quota_config_path(entity_path: str) -> str:
    """The config znode of an entity path: /config/<entity path>."""
    return f"{CONFIG_PATH}/{entity_path}"


def user_clients_path(zk_user: str) -> str:
    """`/config/users/<u>/clients`, the parent of a user's per-client quota znodes."""
    return f"{config_path(CONFIG_USERS, zk_user)}/{CONFIG_CLIENTS}"


def _java_double_text(value: float) -> str:
    """Java's Double.toString for a finite double: decimal in [1e-3, 1e7), else
    scientific with 'E' (both with the shortest digits that read back the same)."""
    if value == 0.0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) - 1 + exponent
    mantissa = text[0] + "." + (text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{power}"


def quota_value_text(value: float) -> str:
    """A quota value as the config znode holds it. Whole values are written as integers
    (how Kafka writes its integer-typed keys, and a double key reads "25" as 25.0);
    others as Java prints a double."""
    if math.isfinite(value) and value == int(value) and abs(value) < 2**63:
        return str(int(value))
    return _java_double_text(value)


def quota_values(config: ConfigZnode, what: str = "quota config") -> dict[str, float]:
    """The quota keys of an entity's config znode as numbers (SCRAM entries left out).
    A value that is not a number raises `ZnodeDecodeError` (Kafka's migration stops on it too)."""
    out: dict[str, float] = {}
    for key, text in config.config.items():
        if key in SCRAM_MECHANISM_NAMES:
            continue
        try:
            value = float(text.strip())
        except ValueError:
            raise ZnodeDecodeError(f"{what}: {key}={text!r} is not a number") from None
        if not math.isfinite(value):
            raise ZnodeDecodeError(f"{what}: {key}={text!r} is not a finite number")
        out[key] = value
    return out


def scram_entries(config: ConfigZnode) -> dict[str, str]:
    """The SCRAM credential entries of a user's config znode: mechanism name -> text."""
    return {key: value for key, value in config.config.items() if key in SCRAM_MECHANISM_NAMES}


@dataclass(frozen=True, slots=True)
class ScramCredentialText:
    """One SCRAM credential as a user's config znode holds it (Kafka's
    ScramCredentialUtils): "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>".
    The repr leaves the secrets out."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def encode(self) -> str:
        b64 = lambda raw: base64.b64encode(raw).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> ScramCredentialText:
        what = "SCRAM credential"  # never the text itself: it holds the keys
        fields: dict[str, str] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")  # base64 padding holds '=' too
            if not sep:
                raise ZnodeDecodeError(f"{what}: an entry without '='")
            fields[key.strip()] = value.strip()
        try:
            raw = {key: base64.b64decode(_require(fields, key, what), validate=True)
                   for key in ("salt", "stored_key", "server_key")}
        except (binascii.Error, ValueError):
            raise ZnodeDecodeError(f"{what}: a key is not base64") from None
        iterations = _int_text(_require(fields, "iterations", what), what)
        return cls(raw["salt"], raw["stored_key"], raw["server_key"], iterations)


# --------------------------------------------------------------------------
# A whole ZooKeeper-mode cluster, as read by server/zk/seed.py:read_zookeeper
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ZkTopicImage:
    """One topic: its assignment znode and the state of each partition (absent if none)."""

    name: str
    assignment: TopicZnode
    partition_states: Mapping[int, PartitionStateZnode]


@dataclass(frozen=True, slots=True)
class ZkClusterImage:
    """Everything the migration copies, read from ZooKeeper in one pass.

    `brokers` and `topics` are keyed by id / name; `topic_configs` and
    `broker_configs` by the config znode's name (broker ids as text, `<default>`
    included); missing singletons are None. `migration_version` is the ZooKeeper
    version of `/migration` (the fence a dual writer checks), None when absent.
    `broker_epochs` holds each registration's czxid, the broker epoch a ZooKeeper-mode
    broker checks UpdateMetadata's BrokerEpoch against (Kafka's ZK broker epoch).
    """

    cluster_id: str | None
    brokers: Mapping[int, BrokerRegistrationZnode]
    topics: Mapping[str, ZkTopicImage]
    topic_configs: Mapping[str, ConfigZnode]
    broker_configs: Mapping[str, ConfigZnode]
    features: FeaturesZnode | None
    controller: ControllerZnode | None
    controller_epoch: int | None
    migration: MigrationZnode | None
    migration_version: int | None
    broker_epochs: Mapping[int, int] = field(default_factory=dict)
    # Every config znode under /config/users, /config/clients and /config/ips by entity
    # path (`quota_entity_path`), those with an empty config included (a user's znode is
    # also the parent of its per-client znodes); `user_client_parents` holds the znode
    # names of the users that have a /config/users/<u>/clients znode.
    quota_configs: Mapping[str, ConfigZnode] = field(default_factory=dict)
    user_client_parents: frozenset[str] = frozenset()

    def partition_count(self) -> int:
        return sum(len(topic.assignment.partitions) for topic in self.topics.values())

    def client_quotas(self) -> dict[QuotaEntityKey, dict[str, float]]:
        """Entity -> {quota key: value} for every entity with at least one quota (SCRAM
        entries are not quotas). `ZnodeDecodeError` names the znode of a bad value."""
        out: dict[QuotaEntityKey, dict[str, float]] = {}
        for entity_path in sorted(self.quota_configs):
            path = quota_config_path(entity_path)
            values = quota_values(self.quota_configs[entity_path], path)
            if values:
                out[parse_quota_entity_path(entity_path)] = values
        return out

    def scram_credentials(self) -> dict[tuple[str, str], ScramCredentialText]:
        """(user, mechanism name) -> credential, from the users' config znodes (the
        default user holds none)."""
        out: dict[tuple[str, str], ScramCredentialText] = {}
        for entity_path in sorted(self.quota_configs):
            parts = entity_path.split("/")
            if len(parts) != 2 or parts[0] != CONFIG_USERS or parts[1] == ZK_DEFAULT_ENTITY:
                continue
            user = desanitize_entity_name(parts[1])
            for mechanism, text in sorted(scram_entries(self.quota_configs[entity_path]).items()):
                try:
                    out[(user, mechanism)] = ScramCredentialText.parse(text)
                except ZnodeDecodeError as exc:
                    raise ZnodeDecodeError(f"{quota_config_path(entity_path)} {mechanism}: {exc}") from None
        return out
