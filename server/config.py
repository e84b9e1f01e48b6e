"""Node configuration (controllers and brokers): Kafka-style properties into a frozen dataclass.

Owns: `ServerConfig`, `load_properties`, and the mapping from Kafka property
names (`node.id`, `listeners`, `socket.request.max.bytes`, ...) to typed
fields with units in their names. Unknown properties are kept (and logged by
the caller) rather than rejected, as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

DEFAULT_PORT = 9093


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @staticmethod
    def parse(text: str) -> "Listener":
        # NAME://host:port ; an empty host means all interfaces in Kafka, but
        # kraftwerk binds loopback unless told otherwise.
        name, _, rest = text.partition("://")
        host, _, port = rest.rpartition(":")
        return Listener(name=name or "CONTROLLER", host=host or "127.0.0.1", port=int(port))

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class VoterAddress:
    """One entry of `controller.quorum.voters`: `id@host:port`."""

    node_id: int
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> "VoterAddress":
        node, at, address = text.strip().partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.strip().isdigit() or not port.isdigit():
            raise ValueError(f"controller.quorum.voters entry {text!r} must look like id@host:port")
        return VoterAddress(int(node), host, int(port))


def parse_voters(text: str) -> tuple[VoterAddress, ...]:
    voters = tuple(VoterAddress.parse(item) for item in text.split(",") if item.strip())
    ids = [voter.node_id for voter in voters]
    if len(set(ids)) != len(ids):
        raise ValueError(f"controller.quorum.voters names a node twice: {text!r}")
    return voters


# Kafka's SecurityProtocol ids, used in BrokerRegistration/Metadata endpoints.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    node_id: int = 1
    listener: Listener = Listener("CONTROLLER", "127.0.0.1", DEFAULT_PORT)
    # What clients are told to connect to (Metadata, DescribeCluster); defaults
    # to the bound listener. Needed when binding 0.0.0.0 (containers).
    advertised_listener: Listener | None = None
    metadata_log_dir: Path = Path("var/controller-1")
    socket_request_max_bytes: int = 100 * 1024 * 1024
    connection_max_in_flight_requests: int = 64
    connections_max_idle_ms: int = 600_000
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 2_000
    fence_check_interval_ms: int = 1_000
    unstable_feature_versions_enable: bool = False
    controller_queue_max_commands: int = 1_000
    log_segment_bytes: int = 1024 * 1024
    log_level: str = "info"
    # The static voter set; empty means "this node alone" (the degenerate quorum).
    quorum_voters: tuple[VoterAddress, ...] = ()
    # controller.quorum.* with Kafka's defaults (FACTS §11).
    quorum_election_timeout_ms: int = 1_000
    quorum_fetch_timeout_ms: int = 2_000
    # kraftwerk's: share one append+fsync between concurrent writers (on by default).
    controller_group_commit: bool = True
    # Kafka's metadata.log.max.record.bytes.between.snapshots (20 MiB).
    metadata_snapshot_max_record_bytes: int = 20 * 1024 * 1024
    # process.roles: "controller" or "broker" (kraftwerk runs one role per process).
    process_roles: tuple[str, ...] = ("controller",)
    # kraftwerk's: act as this Apache Kafka release (server/releases.py); None is
    # kraftwerk's own software.
    release: str | None = None
    # kraftwerk's (KIP-778): a broker closes its client connections when the finalized
    # metadata.version changes, so clients reconnect and see the new ApiVersions.
    close_connections_on_metadata_version_change: bool = True
    # The rack a broker registers with (Kafka's broker.rack).
    broker_rack: str | None = None
    # KIP-866: on a controller, the trigger of the ZooKeeper -> KRaft migration; on a
    # ZooKeeper-mode broker, its consent to be migrated (kafka.metadata.migration.enable).
    migration_enabled: bool = False
    # zookeeper.connect: where the ZooKeeper of the cluster being migrated runs.
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    # kraftwerk's (KIP-866 leaves the bound open): above this many committed records not yet
    # written back to ZooKeeper, the active controller refuses new metadata writes.
    migration_max_write_behind_lag_records: int = 10_000
    # kraftwerk's: records per controller command (one Raft batch) during the copy, and a
    # pause between those commands. The pause is a fault drill (0 in production): it
    # stretches the copy so an operator or a test can kill a controller in the middle.
    migration_copy_chunk_records: int = 5_000
    migration_copy_pause_ms: int = 0
    # kraftwerk's: serve Prometheus metrics over HTTP on this port (0 picks a free one;
    # None serves none). Kafka exposes the same metrics over JMX.
    metrics_port: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles


def load_properties(text: str) -> dict[str, str]:
    """Java properties, the subset Kafka configs use: key=value or key: value, # and ! comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for index, char in enumerate(line):
            if char in "=:":
                props[line[:index].strip()] = line[index + 1 :].strip()
                break
        else:
            props[line] = ""
    return props


def _bool(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _roles(value: str) -> tuple[str, ...]:
    roles = tuple(role.strip() for role in value.split(",") if role.strip())
    if roles not in (("controller",), ("broker",)):
        raise ValueError(f"process.roles={value!r}: kraftwerk runs either controller or broker in one process")
    return roles


_KNOWN = {
    "node.id": ("node_id", int),
    "socket.request.max.bytes": ("socket_request_max_bytes", int),
    "max.in.flight.requests.per.connection": ("connection_max_in_flight_requests", int),
    "connections.max.idle.ms": ("connections_max_idle_ms", int),
    "broker.session.timeout.ms": ("broker_session_timeout_ms", int),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", int),
    "unstable.feature.versions.enable": ("unstable_feature_versions_enable", _bool),
    "log.segment.bytes": ("log_segment_bytes", int),
    "log.level": ("log_level", str),
    "controller.quorum.voters": ("quorum_voters", parse_voters),
    "controller.quorum.election.timeout.ms": ("quorum_election_timeout_ms", int),
    "controller.quorum.fetch.timeout.ms": ("quorum_fetch_timeout_ms", int),
    "metadata.log.max.record.bytes.between.snapshots": ("metadata_snapshot_max_record_bytes", int),
    "controller.group.commit.enable": ("controller_group_commit", _bool),
    "process.roles": ("process_roles", _roles),
    "kraftwerk.release": ("release", str),
    "kraftwerk.metadata.version.change.close.connections": ("close_connections_on_metadata_version_change", _bool),
    "broker.rack": ("broker_rack", str),
    "kafka.metadata.migration.enable": ("migration_enabled", _bool),
    # The name Kafka shipped for the same switch (3.4+).
    "zookeeper.metadata.migration.enable": ("migration_enabled", _bool),
    "zookeeper.connect": ("zookeeper_connect", str),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", int),
    "kraftwerk.migration.max.write.behind.lag.records": ("migration_max_write_behind_lag_records", int),
    "kraftwerk.migration.copy.chunk.records": ("migration_copy_chunk_records", int),
    "kraftwerk.migration.copy.pause.ms": ("migration_copy_pause_ms", int),
    "kraftwerk.metrics.port": ("metrics_port", int),
}

# Properties Kafka uses that kraftwerk accepts and understands without a field.
# controller.quorum.append.linger.ms is accepted but has no effect: kraftwerk batches
# whatever arrives while the previous batch is in flight (group commit), which needs
# no linger and adds no latency to a lone writer.
_ACCEPTED = {"controller.listener.names", "controller.quorum.append.linger.ms",
             "listener.security.protocol.map", "inter.broker.listener.name"}


def config_from_properties(props: dict[str, str], base: ServerConfig | None = None) -> ServerConfig:
    config = base or ServerConfig()
    changes: dict = {}
    extra: dict[str, str] = dict(config.extra)
    for key, value in props.items():
        if key in _KNOWN:
            attr, convert = _KNOWN[key]
            changes[attr] = convert(value)
        elif key == "listeners":
            first = value.split(",")[0].strip()
            changes["listener"] = Listener.parse(first)
        elif key == "advertised.listeners":
            changes["advertised_listener"] = Listener.parse(value.split(",")[0].strip())
        elif key in ("metadata.log.dir", "log.dirs", "log.dir"):
            # metadata.log.dir wins over log.dirs, as in Kafka.
            if key == "metadata.log.dir" or "metadata.log.dir" not in props:
                changes["metadata_log_dir"] = Path(value.split(",")[0].strip())
        elif key not in _ACCEPTED:
            extra[key] = value
    changes["extra"] = extra
    return replace(config, **changes)


def load_config(path: str | Path | None, overrides: dict[str, str] | None = None) -> ServerConfig:
    props: dict[str, str] = {}
    if path is not None:
        props.update(load_properties(Path(path).read_text()))
    props.update(overrides or {})
    return config_from_properties(props)
