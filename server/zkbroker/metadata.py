"""Metadata (key 3, v0-12) as a ZooKeeper-mode broker answers it: from its cache.

Brokers are the live brokers of the latest UpdateMetadata (this broker always among
them, so a client bootstrapped here can reach a listed node), with the endpoint of
the listener the client came in on. The controller id is the ZooKeeper controller
the latest UpdateMetadata named; when that controller is a KRaft controller (KIP-866)
clients are given a live broker instead (this one): a KRaft controller is not
reachable on the brokers' listener, and writes reach it through forwarding. Before
any UpdateMetadata the broker names itself. Topics come from the cached partition
states; a named topic the cache does not hold is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.primitives import ZERO_UUID
from server.api.context import ZkBrokerServices
from server.authorization import AUTHORIZED_OPERATIONS_OMITTED, cluster_authorized_operations
from server.handlers.metadata import missing_topic
from server.zkbroker.cache import UNKNOWN_TOPIC_ID, CachedTopic


def _topic_entry(topic: CachedTopic, live: set[int]) -> dict:
    partitions = []
    for index, state in sorted(topic.partitions.items()):
        leader_live = state.leader >= 0 and state.leader in live
        partitions.append({
            "error_code": ErrorCode.NONE if leader_live else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": index,
            "leader_id": state.leader if leader_live else -1,
            "leader_epoch": state.leader_epoch,
            "replica_nodes": list(state.replicas),
            "isr_nodes": list(state.isr),
            "offline_replicas": list(state.offline_replicas),
        })
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name.startswith("__"),
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def handle(ctx, request):
    services: ZkBrokerServices = ctx.services
    cache = services.metadata_cache
    brokers = [
        {"node_id": endpoint.node_id, "host": endpoint.host, "port": endpoint.port, "rack": endpoint.rack}
        for endpoint in services.client_endpoints()
    ]
    live = {broker["node_id"] for broker in brokers}
    # v0: an empty list means every topic; v1+: null means every topic, [] none.
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    topics = []
    if all_topics:
        topics = [_topic_entry(topic, live) for _, topic in sorted(cache.topics.items())]
    else:
        for wanted in request.topics:
            if wanted.name is not None:
                topic = cache.topics.get(wanted.name)
                topics.append(_topic_entry(topic, live) if topic is not None
                              else missing_topic(wanted.name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topic = cache.topic_by_id(wanted.topic_id)
                topics.append(_topic_entry(topic, live) if topic is not None
                              else missing_topic(None, wanted.topic_id, UNKNOWN_TOPIC_ID))
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": services.cluster_id,
        "controller_id": services.active_controller_id(),
        "topics": topics,
        "cluster_authorized_operations": cluster_authorized_operations(
            bool(request.include_cluster_authorized_operations)),
    }
