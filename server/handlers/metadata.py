"""Metadata (key 3, v0-12): enough for real clients to bootstrap from a controller.

kraftwerk's controllers hold no topics, so every named topic is answered
with UNKNOWN_TOPIC_OR_PARTITION and "all topics" is an empty list. The node
list holds the controllers serving this listener (clients may connect to any
node they are given, so only reachable ones are listed); registered brokers
are listed by DescribeCluster. Kafka's controllers do not serve Metadata at
all; kraftwerk does so that kafka-python, librdkafka and kcat can bootstrap.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.authorization import AUTHORIZED_OPERATIONS_OMITTED, cluster_authorized_operations


def handle(ctx, request):
    node = ctx.node
    brokers = [
        {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}
        for n in node.client_endpoints()
    ]
    topics = []
    for topic in request.topics or ():
        topics.append({
            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "name": topic.name,
            "is_internal": False,
            "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        })
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": node.cluster_id,
        "controller_id": node.active_controller_id(),
        "topics": topics,
        # The field exists in v8-10 only; the request flag is false in other versions.
        "cluster_authorized_operations": cluster_authorized_operations(
            bool(request.include_cluster_authorized_operations)),
    }
