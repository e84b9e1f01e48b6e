"""DescribeQuorum (key 55, v0-2): the state of the `__cluster_metadata` quorum.

Only the Raft leader knows every replica's progress (FACTS §11). Kafka's
brokers forward DescribeQuorum to the active controller; kraftwerk's standby
controllers do the same (one hop, bounded by a timeout), so an admin client
that picked any controller still gets the leader's view. Only partition 0 of
`__cluster_metadata` exists; a request naming anything else (alone or beside it) gets
UNKNOWN_TOPIC_OR_PARTITION for every partition it names, as Kafka's.
"""

from __future__ import annotations

import trio

from protocol.errors import KAFKA_ERROR_MESSAGES, ErrorCode
from server.api.context import ControllerServices
from server.client import ClientError, KafkaClient
from server.security.client_config import ClientSecurity

METADATA_TOPIC = "__cluster_metadata"
FORWARD_TIMEOUT_S = 1.0


async def handle(ctx, request):
    services: ControllerServices = ctx.services
    leader_id = services.active_controller_id()
    if not services.is_quorum_leader() and leader_id >= 0 and leader_id != services.node_id:
        forwarded = await _forward(services, leader_id, request, ctx.api_version)
        if forwarded is not None:
            return forwarded
    # Kafka's error_message is an empty string, never null, on success.
    body = {"error_code": ErrorCode.NONE, "error_message": ""}
    if not _asks_for_quorum(request):
        # Kafka describes the quorum only when asked for exactly __cluster_metadata-0;
        # otherwise every partition named gets UNKNOWN_TOPIC_OR_PARTITION with the
        # response's defaults (0, not -1) and no nodes.
        body["topics"] = [{"topic_name": topic.topic_name, "partitions": [
            {"partition_index": partition.partition_index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
             "error_message": KAFKA_ERROR_MESSAGES[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
             "leader_id": 0, "leader_epoch": 0, "high_watermark": 0}
            for partition in topic.partitions]} for topic in request.topics]
        if ctx.api_version >= 2:
            body["nodes"] = []
        return body
    partition = dict(services.quorum_partition_state())
    if partition.get("error_message") is None and partition.get("error_code", 0) == ErrorCode.NONE:
        partition["error_message"] = ""  # Kafka's, as at the top level
    body["topics"] = [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]
    if ctx.api_version >= 2:
        body["nodes"] = services.quorum_nodes()
    return body


def _asks_for_quorum(request) -> bool:
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0)


async def _forward(services: ControllerServices, leader_id: int, request, version: int):
    """The leader's answer to the same request, or None if it cannot be had quickly.

    A connection of its own, not the Raft peer connection: that one carries this
    node's long-poll Fetch, which the leader may hold for up to fetch_max_wait_ms,
    and answers on one connection leave in order. A dead leader (just after a
    failover, before the election) is given up on after FORWARD_TIMEOUT_S; the
    caller then answers locally with NOT_LEADER_OR_FOLLOWER, which clients retry."""
    address = next((v for v in services.voters if v.node_id == leader_id), None)
    if address is None:
        return None
    try:
        with trio.fail_after(FORWARD_TIMEOUT_S):
            async with await KafkaClient.connect(address.host, address.port,
                                                 client_id=f"kraftwerk-controller-{services.node_id}",
                                                 security=ClientSecurity.for_node(services.config)) as client:
                return await client.request(55, version, request)
    except (ClientError, trio.TooSlowError):
        return None
