"""DescribeCluster (key 60, v0-1).

EndpointType (v1): 1 = brokers, 2 = controllers. For brokers kraftwerk lists
the controllers serving this listener first (so a client bootstrapped here
can always reach a listed node) and then every registered, unfenced broker,
as Kafka lists only unfenced brokers.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.authorization import cluster_authorized_operations

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
UNSUPPORTED_ENDPOINT_TYPE = 117


def handle(ctx, request):
    node = ctx.node
    endpoint_type = request.endpoint_type if ctx.api_version >= 1 else ENDPOINT_TYPE_BROKER
    if endpoint_type not in (ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER):
        return {
            "error_code": UNSUPPORTED_ENDPOINT_TYPE,
            "error_message": f"Unsupported endpoint type {endpoint_type}",
            "endpoint_type": endpoint_type,
            "cluster_id": node.cluster_id,
            "controller_id": -1,
        }
    nodes = [
        {"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}
        for n in node.controller_endpoints()
    ]
    if endpoint_type == ENDPOINT_TYPE_BROKER:
        seen = {n["broker_id"] for n in nodes}
        for broker in node.registered_broker_endpoints(include_fenced=False):
            if broker.node_id not in seen:
                nodes.append({"broker_id": broker.node_id, "host": broker.host, "port": broker.port,
                              "rack": broker.rack})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": node.cluster_id,
        "controller_id": node.active_controller_id(),
        "brokers": nodes,
        "cluster_authorized_operations": cluster_authorized_operations(
            bool(request.include_cluster_authorized_operations)),
    }
