"""Node configuration (controllers and brokers): Kafka-style properties into a frozen dataclass.

Owns: `ServerConfig`, `load_properties`, and the mapping from Kafka property
names (`node.id`, `listeners`, `socket.request.max.bytes`, ...) to typed
fields with units in their names. Unknown properties are kept (and logged by
the caller) rather than rejected, as Kafka does.

Also owns the listener and TLS configuration: several listeners with
their security protocols (`listeners`, `listener.security.protocol.map`,
`advertised.listeners`, `controller.listener.names`, `inter.broker.listener.name`),
PEM key and trust material per listener (`ssl.*`, `listener.name.<name>.ssl.*`) and
the connection and request limits.

Rules kept here:
- `ServerConfig.listener` is always `listeners[0]` (everything written before several
  listeners existed uses it); `__post_init__` keeps the two consistent.
- Secrets (`ssl.key.password`, JAAS lines, inline PEM keys) never appear in a repr.
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


def parse_bootstrap_servers(text: str) -> tuple[tuple[str, int], ...]:
    """controller.quorum.bootstrap.servers: host:port,... (an IPv6 host in brackets),
    the controllers a node asks for the quorum when the voters live in the log (KIP-853)."""
    servers = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, port = item.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"controller.quorum.bootstrap.servers entry {item!r} must look like host:port")
        servers.append((host, int(port)))
    return tuple(servers)


# Kafka's SecurityProtocol ids, used in BrokerRegistration/Metadata endpoints.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# Kafka's default listener.security.protocol.map.
DEFAULT_SECURITY_PROTOCOL_MAP = {name: name for name in SECURITY_PROTOCOL_IDS}
TLS_PROTOCOLS = frozenset(("SSL", "SASL_SSL"))
SASL_PROTOCOLS = frozenset(("SASL_PLAINTEXT", "SASL_SSL"))
# Kafka's Int.MaxValue: "no limit" for max.connections and max.connections.per.ip.
UNLIMITED_CONNECTIONS = 2**31 - 1
CLIENT_AUTH_MODES = ("none", "requested", "required")


@dataclass(frozen=True, slots=True)
class SslConfig:
    """One listener's TLS material (PEM only, Kafka 2.7+'s `ssl.keystore.type=PEM`).

    `keystore_location`: a PEM file holding the private key and the certificate chain.
    `keystore_certificate_chain` / `keystore_key`: the same as two values; each is either
    the PEM text itself (Kafka's meaning of these keys) or a path to a PEM file.
    `truststore_location`: a PEM CA bundle (or `truststore_certificates`: PEM text)."""

    keystore_type: str = "PEM"
    keystore_location: str | None = None
    keystore_certificate_chain: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    truststore_type: str = "PEM"
    truststore_location: str | None = None
    truststore_certificates: str | None = field(default=None, repr=False)
    client_auth: str = "none"
    # "https" (Kafka's default since 2.0): clients check the server's host name.
    endpoint_identification_algorithm: str = "https"

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)


_SSL_KEYS = {
    "ssl.keystore.type": "keystore_type",
    "ssl.keystore.location": "keystore_location",
    "ssl.keystore.certificate.chain": "keystore_certificate_chain",
    "ssl.keystore.key": "keystore_key",
    "ssl.key.password": "key_password",
    "ssl.truststore.type": "truststore_type",
    "ssl.truststore.location": "truststore_location",
    "ssl.truststore.certificates": "truststore_certificates",
    "ssl.client.auth": "client_auth",
    "ssl.endpoint.identification.algorithm": "endpoint_identification_algorithm",
}


def ssl_config_from_properties(props: dict[str, str], prefix: str = "") -> SslConfig:
    """`prefix + ssl.*` keys into an SslConfig; a listener's `listener.name.<name>.ssl.*`
    keys override the plain `ssl.*` ones key by key, as in Kafka."""
    values: dict[str, str] = {}
    for key, attr in _SSL_KEYS.items():
        if prefix and prefix + key in props:
            values[attr] = props[prefix + key]
        elif key in props:
            values[attr] = props[key]
    for attr in ("keystore_type", "truststore_type"):
        if attr in values and values[attr].strip().upper() != "PEM":
            raise ValueError(f"{prefix}ssl.{attr.replace('_', '.')}={values[attr]!r}: kraftwerk reads PEM only")
        if attr in values:
            values[attr] = "PEM"
    if "client_auth" in values:
        values["client_auth"] = values["client_auth"].strip().lower() or "none"
        if values["client_auth"] not in CLIENT_AUTH_MODES:
            raise ValueError(f"{prefix}ssl.client.auth must be one of {', '.join(CLIENT_AUTH_MODES)}")
    if "endpoint_identification_algorithm" in values:
        values["endpoint_identification_algorithm"] = values["endpoint_identification_algorithm"].strip().lower()
    for attr in ("keystore_location", "keystore_certificate_chain", "keystore_key", "truststore_location",
                 "truststore_certificates", "key_password"):
        if attr in values and not values[attr].strip():
            values[attr] = None
    return SslConfig(**values)


def parse_protocol_map(text: str) -> dict[str, str]:
    """listener.security.protocol.map: NAME:PROTOCOL,..."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, colon, protocol = item.strip().partition(":")
        protocol = protocol.strip().upper()
        if not colon or not name.strip() or protocol not in SECURITY_PROTOCOL_IDS:
            raise ValueError(f"listener.security.protocol.map entry {item.strip()!r} must be NAME:PROTOCOL with "
                             f"PROTOCOL one of {', '.join(SECURITY_PROTOCOL_IDS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """max.connections.per.ip.overrides: host:count,..."""
    overrides = []
    for item in text.split(","):
        if not item.strip():
            continue
        host, colon, count = item.strip().rpartition(":")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides entry {item.strip()!r} must look like host:count")
        overrides.append((host.strip(), int(count)))
    return tuple(overrides)


def _parse_listeners(text: str) -> tuple[Listener, ...]:
    listeners = tuple(Listener.parse(item.strip()) for item in text.split(",") if item.strip())
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ValueError(f"listeners names a listener twice: {text!r}")
    return listeners


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip().upper() for name in text.split(",") if name.strip())


_SECRET_MARKERS = ("password", "jaas", "secret", "ssl.keystore.key", "credential")


def _redacted(extra: dict[str, str]) -> dict[str, str]:
    return {key: ("[hidden]" if any(marker in key.lower() for marker in _SECRET_MARKERS) else value)
            for key, value in extra.items()}


@dataclass(frozen=True, slots=True, repr=False)
class ServerConfig:
    node_id: int = 1
    # The first listener (what everything that serves one listener uses); `listeners`
    # holds all of them, this one first.
    listener: Listener = Listener("CONTROLLER", "127.0.0.1", DEFAULT_PORT)
    listeners: tuple[Listener, ...] = ()
    # What clients are told to connect to (Metadata, DescribeCluster); defaults
    # to the bound listener. Needed when binding 0.0.0.0 (containers).
    advertised_listener: Listener | None = None
    advertised_listeners: tuple[Listener, ...] = ()
    # listener.security.protocol.map as given (upper-case names); empty: Kafka's default map.
    security_protocol_map: tuple[tuple[str, str], ...] = ()
    controller_listener_names: tuple[str, ...] = ()
    inter_broker_listener_name: str | None = None
    # TLS material: `ssl.*` (the default) and `listener.name.<name>.ssl.*` merged per listener.
    ssl: SslConfig = SslConfig()
    listener_ssl: tuple[tuple[str, SslConfig], ...] = ()
    # kraftwerk's: a TLS handshake must complete within this (Kafka bounds it only by
    # connections.max.idle.ms).
    ssl_handshake_timeout_ms: int = 10_000
    # Connection limits (Kafka's names and defaults: unlimited).
    max_connections: int = UNLIMITED_CONNECTIONS
    max_connections_per_ip: int = UNLIMITED_CONNECTIONS
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    # Kafka's sasl.server.max.receive.size: the largest frame before SASL authentication.
    sasl_server_max_receive_size: int = 524_288
    # Kafka's queued.max.request.bytes: the memory all connections' requests may hold
    # between "size read" and "decoded"; -1 = unbounded.
    queued_max_request_bytes: int = -1
    # kraftwerk's: a request whose first byte has arrived must be complete within this
    # (slowloris); an async request still unanswered after request_timeout_ms closes
    # its connection.
    request_receive_timeout_ms: int = 30_000
    request_timeout_ms: int = 30_000
    # The SASL mechanism a node uses on its own connections to the controllers
    # (Kafka's sasl.mechanism.controller.protocol; Kafka defaults to GSSAPI, which
    # kraftwerk does not implement, so kraftwerk defaults to PLAIN).
    sasl_mechanism_controller_protocol: str = "PLAIN"
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
    # controller.quorum.bootstrap.servers (KIP-853): (host, port) of controllers to ask
    # for the quorum when the voters live in the log; empty when not set.
    quorum_bootstrap_servers: tuple[tuple[str, int], ...] = ()
    # controller.quorum.* with Kafka's defaults (FACTS §11).
    quorum_election_timeout_ms: int = 1_000
    quorum_fetch_timeout_ms: int = 2_000
    # How long the Raft leader may hold a follower's or observer's fetch when the only
    # news is a higher high watermark (the next records usually carry it sooner).
    quorum_high_watermark_linger_ms: int = 5
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

    def __post_init__(self) -> None:
        # `listener` always leads `listeners`: code that replaces `listener` (tests bind
        # port 0 that way) keeps the other listeners.
        others = tuple(item for item in self.listeners if item.name != self.listener.name)
        object.__setattr__(self, "listeners", (self.listener, *others))
        if self.advertised_listener is not None:
            others = tuple(item for item in self.advertised_listeners if item.name != self.advertised_listener.name)
            object.__setattr__(self, "advertised_listeners", (self.advertised_listener, *others))
        elif self.advertised_listeners:
            object.__setattr__(self, "advertised_listener", self.advertised_listeners[0])

    def __repr__(self) -> str:
        parts = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "extra":
                value = _redacted(value)
            parts.append(f"{name}={value!r}")
        return f"ServerConfig({', '.join(parts)})"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def controller_listener_name(self) -> str:
        """The listener controllers reach each other on (Kafka: the first of
        controller.listener.names), whose endpoint a voter is known by (KIP-853)."""
        return self.controller_listener_names[0] if self.controller_listener_names else self.listener.name

    def security_protocol_for(self, listener_name: str) -> str:
        """The security protocol of a listener name, from listener.security.protocol.map."""
        mapping = dict(self.security_protocol_map) or DEFAULT_SECURITY_PROTOCOL_MAP
        name = listener_name.upper()
        if name in mapping:
            return mapping[name]
        if self.security_protocol_map:
            raise ValueError(f"listener {listener_name} has no entry in listener.security.protocol.map")
        # No map given: Kafka maps controller listeners to PLAINTEXT then; kraftwerk does
        # the same for any name outside the default map (CONTROLLER://... configs).
        return "PLAINTEXT"

    def ssl_for(self, listener_name: str) -> SslConfig:
        return dict(self.listener_ssl).get(listener_name.upper(), self.ssl)

    def listener_named(self, name: str) -> Listener | None:
        for item in self.listeners:
            if item.name == name.upper():
                return item
        return None


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
    "controller.quorum.bootstrap.servers": ("quorum_bootstrap_servers", parse_bootstrap_servers),
    "controller.quorum.election.timeout.ms": ("quorum_election_timeout_ms", int),
    "controller.quorum.fetch.timeout.ms": ("quorum_fetch_timeout_ms", int),
    "kraftwerk.quorum.high.watermark.linger.ms": ("quorum_high_watermark_linger_ms", int),
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
    "max.connections": ("max_connections", int),
    "max.connections.per.ip": ("max_connections_per_ip", int),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", parse_ip_overrides),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", int),
    "queued.max.request.bytes": ("queued_max_request_bytes", int),
    "kraftwerk.request.receive.timeout.ms": ("request_receive_timeout_ms", int),
    "kraftwerk.request.timeout.ms": ("request_timeout_ms", int),
    "kraftwerk.ssl.handshake.timeout.ms": ("ssl_handshake_timeout_ms", int),
    "controller.listener.names": ("controller_listener_names", _names),
    "inter.broker.listener.name": ("inter_broker_listener_name", lambda value: value.strip().upper() or None),
    "sasl.mechanism.controller.protocol": ("sasl_mechanism_controller_protocol", lambda value: value.strip().upper()),
}

# Properties Kafka uses that kraftwerk accepts and understands without a field.
# controller.quorum.append.linger.ms is accepted but has no effect: kraftwerk batches
# whatever arrives while the previous batch is in flight (group commit), which needs
# no linger and adds no latency to a lone writer.
_ACCEPTED = {"controller.quorum.append.linger.ms"}


def config_from_properties(props: dict[str, str], base: ServerConfig | None = None) -> ServerConfig:
    config = base or ServerConfig()
    changes: dict = {}
    extra: dict[str, str] = dict(config.extra)
    for key, value in props.items():
        if key in _KNOWN:
            attr, convert = _KNOWN[key]
            changes[attr] = convert(value)
        elif key == "listeners":
            listeners = _parse_listeners(value)
            if not listeners:
                raise ValueError("listeners is empty")
            changes["listener"], changes["listeners"] = listeners[0], listeners
        elif key == "advertised.listeners":
            advertised = _parse_listeners(value)
            changes["advertised_listener"] = advertised[0] if advertised else None
            changes["advertised_listeners"] = advertised
        elif key == "listener.security.protocol.map":
            changes["security_protocol_map"] = tuple(parse_protocol_map(value).items())
        elif key.startswith("ssl.") and key in _SSL_KEYS:
            pass  # read below, together with the listener overrides
        elif key.startswith("listener.name.") and ".ssl." in key:
            pass
        elif key in ("metadata.log.dir", "log.dirs", "log.dir"):
            # metadata.log.dir wins over log.dirs, as in Kafka.
            if key == "metadata.log.dir" or "metadata.log.dir" not in props:
                changes["metadata_log_dir"] = Path(value.split(",")[0].strip())
        elif key not in _ACCEPTED:
            extra[key] = value
    changes["extra"] = extra
    if any(key in _SSL_KEYS for key in props):
        changes["ssl"] = ssl_config_from_properties(props)
    overridden = sorted({key[len("listener.name."):].partition(".")[0] for key in props
                         if key.startswith("listener.name.") and ".ssl." in key})
    if overridden:
        changes["listener_ssl"] = tuple(
            (name.upper(), ssl_config_from_properties(props, f"listener.name.{name}.")) for name in overridden)
    config = replace(config, **changes)
    return _with_protocols(config)


def _with_protocols(config: ServerConfig) -> ServerConfig:
    """Sets each listener's security protocol from the map and checks the names."""
    listeners = tuple(replace(item, security_protocol=config.security_protocol_for(item.name))
                      for item in config.listeners)
    advertised = tuple(replace(item, security_protocol=config.security_protocol_for(item.name))
                       for item in config.advertised_listeners)
    names = {item.name for item in listeners}
    for item in advertised:
        if item.name not in names:
            raise ValueError(f"advertised.listeners names {item.name}, which is not in listeners")
    if config.inter_broker_listener_name and config.is_broker and config.inter_broker_listener_name not in names:
        raise ValueError(f"inter.broker.listener.name={config.inter_broker_listener_name} is not in listeners")
    for item in listeners:
        if item.security_protocol in TLS_PROTOCOLS and not config.ssl_for(item.name).has_keystore:
            raise ValueError(f"listener {item.name} is {item.security_protocol} but has no ssl.keystore.location "
                             f"(or listener.name.{item.name.lower()}.ssl.keystore.location)")
    return replace(config, listener=listeners[0], listeners=listeners,
                   advertised_listener=advertised[0] if advertised else config.advertised_listener,
                   advertised_listeners=advertised)


def load_config(path: str | Path | None, overrides: dict[str, str] | None = None) -> ServerConfig:
    props: dict[str, str] = {}
    if path is not None:
        props.update(load_properties(Path(path).read_text()))
    props.update(overrides or {})
    return config_from_properties(props)
