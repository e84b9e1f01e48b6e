"""DescribeCluster (key 60, v0-1).

EndpointType (v1): 1 = brokers, 2 = controllers. For brokers a controller lists
the controllers serving this listener first (so a client bootstrapped here can
always reach a listed node) and then every registered, unfenced broker, as
Kafka lists only unfenced brokers (Kafka's controllers answer EndpointType 1
MISMATCHED_ENDPOINT_TYPE: a kraftwerk extension, docs/kip-differences.md). A
broker lists itself and the registered, unfenced brokers, and answers
EndpointType 2 with UNSUPPORTED_ENDPOINT_TYPE, as Kafka's brokers do (KIP-919).

EndpointType 2 on a controller is Kafka 4.4's ControllerApis.handleDescribeCluster:
it needs a finalized metadata.version that has controller registration (3.7-IV0;
UNSUPPORTED_VERSION with Kafka's two texts otherwise), then ALTER on CLUSTER (on
top of the DESCRIBE the catalog asks of every DescribeCluster on a controller).
The nodes are the registered controllers (RegisterControllerRecord, KIP-919) that
have an endpoint named like the listener the request came in on, by id, rack
null; the controller id is the Raft leader's when it is among them, else -1.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import NodeServices
from server.api.errors import ApiError
from server.authorization import AclOperation
from server.controller.features import controller_registration_supported
from server.security.item_checks import CLUSTER_REFUSED_MESSAGE, cluster_operations

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
UNSUPPORTED_ENDPOINT_TYPE = 117

NO_METADATA_VERSION_MESSAGE = ("There is no finalized MetadataVersion, so direct-to-controller communication "
                               "is not supported.")
TOO_OLD_MESSAGE = "Direct-to-controller communication is not supported with the current MetadataVersion."


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
    if endpoint_type == ENDPOINT_TYPE_CONTROLLER:
        return _registered_controllers(ctx, services, request, listener)
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


def _registered_controllers(ctx, services: NodeServices, request, listener: str | None) -> dict:
    mv_level = services.finalized_levels().get("metadata.version")
    if mv_level is None:
        raise ApiError(ErrorCode.UNSUPPORTED_VERSION, NO_METADATA_VERSION_MESSAGE)
    if not controller_registration_supported(mv_level):
        raise ApiError(ErrorCode.UNSUPPORTED_VERSION, TOO_OLD_MESSAGE)
    authorizer = services.authorizer
    if authorizer is not None and not authorizer.authorize_cluster(ctx, AclOperation.ALTER, "DescribeCluster"):
        raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED_MESSAGE)
    nodes = [{"broker_id": endpoint.node_id, "host": endpoint.host, "port": endpoint.port, "rack": None}
             for endpoint in services.registered_controller_endpoints(listener)]
    leader = services.active_controller_id()
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": ENDPOINT_TYPE_CONTROLLER,
        "cluster_id": services.cluster_id,
        # Kafka names the leader only when it is listed, so a client never gets an id it
        # has no address for.
        "controller_id": leader if any(node["broker_id"] == leader for node in nodes) else -1,
        "brokers": nodes,
        "cluster_authorized_operations": cluster_operations(
            ctx, bool(request.include_cluster_authorized_operations)),
    }
