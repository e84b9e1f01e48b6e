"""Metadata (key 3, v0-12): enough for real clients to bootstrap, list and describe topics.

Topics and partitions come from the node's committed image (controllers and broker
agents replay the same log). "All topics" (null topics in v1+, an empty list in v0)
lists every topic; a named topic that does not exist is answered with
UNKNOWN_TOPIC_OR_PARTITION (kraftwerk never auto-creates topics, whatever
AllowAutoTopicCreation says), one asked for by id (v10+) that does not exist with
UNKNOWN_TOPIC_ID. A partition's offline replicas are those on brokers that are not
registered and unfenced. The node list holds the nodes serving this listener (clients may
connect to any node they are given, so only reachable ones are listed); registered
brokers are listed by DescribeCluster. Kafka's controllers do not serve Metadata at
all; kraftwerk does so that kafka-python, librdkafka and kcat can bootstrap.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from server.api.context import ServingServices
from server.authorization import AUTHORIZED_OPERATIONS_OMITTED
from server.controller.topics import TopicErrorCode
from server.security.item_checks import cluster_operations, describable_topics, may_describe_topic, topic_operations

_NO_ID = uuid.UUID(int=0)


def _topic_entry(topic, live_brokers: set[int]) -> dict:
    partitions = []
    for index in sorted(topic.partitions):
        partition = topic.partitions[index]
        partitions.append({
            "error_code": ErrorCode.NONE,
            "partition_index": index,
            "leader_id": partition.leader,
            "leader_epoch": partition.leader_epoch,
            "replica_nodes": list(partition.replicas),
            "isr_nodes": list(partition.isr),
            "offline_replicas": [b for b in partition.replicas if b not in live_brokers],
        })
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def missing_topic(name, topic_id, code) -> dict:
    """A Metadata topic entry for a topic this node does not know (by name or by id)."""
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def handle(ctx, request):
    services: ServingServices = ctx.services
    state = services.image
    brokers = [
        {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": n.rack}
        for n in services.client_endpoints(ctx.connection.listener_name)
    ]
    known = state.topics() if state is not None else {}
    live = {b for b, registration in state.brokers.items() if not registration.fenced} if state is not None else set()
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        # topics the principal may not describe are left out.
        topics = [_topic_entry(known[name], live) for name in describable_topics(ctx, sorted(known))]
    else:
        topics = []
        for wanted in requested:
            name = wanted.name
            if name is None:
                # v10+: by topic id.
                topic = state.topic_by_id(wanted.topic_id) if state is not None else None
                if topic is None or not may_describe_topic(ctx, topic.name, log_refusal=True):
                    topics.append(missing_topic(None if ctx.api_version >= 12 else "", wanted.topic_id,
                                           TopicErrorCode.UNKNOWN_TOPIC_ID))
                    continue
            else:
                if not may_describe_topic(ctx, name, log_refusal=True):
                    topics.append(missing_topic(name, _NO_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
                topic = known.get(name)
                if topic is None:
                    topics.append(missing_topic(name, _NO_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            topics.append(_topic_entry(topic, live))
    if ctx.api_version >= 8 and request.include_topic_authorized_operations:
        for entry in topics:
            if entry["error_code"] == ErrorCode.NONE:
                entry["topic_authorized_operations"] = topic_operations(ctx, entry["name"])
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": services.cluster_id,
        "controller_id": services.active_controller_id(),
        "topics": topics,
        # The field exists in v8-10 only; the request flag is false in other versions.
        "cluster_authorized_operations": cluster_operations(
            ctx, bool(request.include_cluster_authorized_operations)),
    }
