"""DescribeConfigs (key 32, v0-4): topic, broker and broker-logger configs.

A read handler on controllers and broker agents alike: both hold the same replayed
image, so no forwarding is needed (a broker may lag the controller by what it has not
fetched yet, as in Kafka). The answering node's own BROKER resource adds what only it
knows (the properties it was started with) and its BROKER_LOGGER resource its loggers:
`node_view` builds that from the node's frozen config.
"""

from __future__ import annotations

from server.api.context import ServingServices
from server.config import ServerConfig
from server.controller import topics
from server.security import item_checks

# The structlog components kraftwerk logs under (server/observability.get_logger);
# one level, `log.level`, governs them all.
LOGGERS = ("broker", "controller", "controller.snapshot", "metrics", "migration", "net", "net.peer", "raft",
           "raft.storage", "security", "snapshot", "storage.log", "storage.snapshot", "zk", "zkbroker")
_DEFAULTS = ServerConfig()


def static_broker_configs(config: ServerConfig) -> dict[str, str]:
    """The broker configs this node's properties set, as Kafka spells them: the keys
    every node must be given, the modelled ones whose value differs from the default,
    and every property kraftwerk keeps without modelling (`extra`)."""
    def listeners(items) -> str:
        return ",".join(str(item) for item in items)

    values = {
        "node.id": str(config.node_id),
        "process.roles": ",".join(config.process_roles),
        "listeners": listeners(config.listeners),
        "metadata.log.dir": str(config.metadata_log_dir),
    }
    modelled = {
        "advertised.listeners": (listeners(config.advertised_listeners), listeners(_DEFAULTS.advertised_listeners)),
        "listener.security.protocol.map": (
            ",".join(f"{name}:{protocol}" for name, protocol in config.security_protocol_map), ""),
        "controller.listener.names": (",".join(config.controller_listener_names), ""),
        "inter.broker.listener.name": (config.inter_broker_listener_name or "", ""),
        "controller.quorum.voters": (
            ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in config.quorum_voters), ""),
        "broker.rack": (config.broker_rack or "", ""),
    }
    numbers = {
        "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
        "broker.session.timeout.ms": "broker_session_timeout_ms",
        "connections.max.idle.ms": "connections_max_idle_ms",
        "controller.quorum.election.timeout.ms": "quorum_election_timeout_ms",
        "controller.quorum.fetch.timeout.ms": "quorum_fetch_timeout_ms",
        "max.connections": "max_connections",
        "max.connections.per.ip": "max_connections_per_ip",
        "metadata.log.max.record.bytes.between.snapshots": "metadata_snapshot_max_record_bytes",
        "queued.max.request.bytes": "queued_max_request_bytes",
        "socket.request.max.bytes": "socket_request_max_bytes",
    }
    for key, attr in numbers.items():
        modelled[key] = (str(getattr(config, attr)), str(getattr(_DEFAULTS, attr)))
    modelled["max.connections.per.ip.overrides"] = (
        ",".join(f"{host}:{count}" for host, count in config.max_connections_per_ip_overrides), "")
    modelled["unstable.feature.versions.enable"] = (
        str(config.unstable_feature_versions_enable).lower(), str(_DEFAULTS.unstable_feature_versions_enable).lower())
    modelled["sasl.mechanism.controller.protocol"] = (config.sasl_mechanism_controller_protocol,
                                                      _DEFAULTS.sasl_mechanism_controller_protocol)
    values.update({key: value for key, (value, default) in modelled.items() if value != default})
    values.update(config.extra)
    return values


def node_view(services: ServingServices) -> topics.NodeConfigView:
    config = services.config
    level = config.log_level.upper()
    return topics.NodeConfigView(node_id=services.node_id, static=static_broker_configs(config),
                                 loggers={"root": level, **{name: level for name in LOGGERS}})


def handle(ctx, request):
    services: ServingServices = ctx.services
    # resources the principal may not describe are answered with an error.
    authorized, refused = item_checks.config_resources(ctx, request, alter=False)
    response = topics.describe_configs(services.image, authorized, ctx.api_version, node_view(services))
    if refused:
        response["results"] = refused + response["results"]
    return response
