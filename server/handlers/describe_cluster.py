"""DescribeCluster (key 60, v0-1).

EndpointType (v1): 1 = brokers, 2 = controllers. For brokers a controller lists
the controllers serving this listener first (so a client bootstrapped here can
always reach a listed node) and then every registered, unfenced broker, as
Kafka lists only unfenced brokers. A broker lists itself and the registered,
unfenced brokers, and answers EndpointType 2 with UNSUPPORTED_ENDPOINT_TYPE,
as Kafka's brokers do (KIP-919).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import NodeServices
from server.security.item_checks import cluster_operations

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
UNSUPPORTED_ENDPOINT_TYPE = 117


def handle(ctx, request):
    services: NodeServices = ctx.services
    endpoint_type = request.endpoint_type if ctx.api_version >= 1 else ENDPOINT_TYPE_BROKER
    # A broker, as in Kafka (KIP-919), does not list controllers.
    allowed = (ENDPOINT_TYPE_BROKER,) if services.is_broker else (ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER)
    if endpoint_type not in allowed:
        return {
            "error_code": UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": f"Unsupported endpoint type {endpoint_type}",
            "endpoint_type": endpoint_type,
            "cluster_id": services.cluster_id,
            "controller_id": -1,
        }
    listener = ctx.connection.listener_name
    nodes = [
        {"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}
        for n in services.client_endpoints(listener)
    ]
    if endpoint_type == ENDPOINT_TYPE_BROKER:
        seen = {n["broker_id"] for n in nodes}
        for broker in services.registered_broker_endpoints(False, listener):
            if broker.node_id not in seen:
                nodes.append({"broker_id": broker.node_id, "host": broker.host, "port": broker.port,
                              "rack": broker.rack})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": services.cluster_id,
        "controller_id": services.active_controller_id(),
        "brokers": nodes,
        "cluster_authorized_operations": cluster_operations(
            ctx, bool(request.include_cluster_authorized_operations)),
    }
