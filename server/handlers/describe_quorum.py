"""DescribeQuorum (key 55, v0-2): the state of the `__cluster_metadata` quorum.

Only the Raft leader knows every replica's progress (FACTS §11). Kafka's
brokers forward DescribeQuorum to the active controller; kraftwerk's standby
controllers do the same (one hop, bounded by a timeout), so an admin client
that picked any controller still gets the leader's view. Only partition 0 of
`__cluster_metadata` exists; anything else gets UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.net.peer import PeerUnavailable

import trio

METADATA_TOPIC = "__cluster_metadata"
FORWARD_TIMEOUT_S = 5.0


async def handle(ctx, request):
    node = ctx.node
    driver = node.raft_driver
    leader_id = node.active_controller_id()
    if not driver.is_leader and leader_id >= 0 and leader_id != node.config.node_id:
        forwarded = await _forward(node, leader_id, request, ctx.api_version)
        if forwarded is not None:
            return forwarded
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            if topic.topic_name != METADATA_TOPIC or partition.partition_index != 0:
                partitions.append({
                    "partition_index": partition.partition_index,
                    "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": "Only __cluster_metadata-0 exists on a controller.",
                    "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                })
                continue
            partitions.append(node.quorum_partition_state())
        topics.append({"topic_name": topic.topic_name, "partitions": partitions})
    body = {"error_code": ErrorCode.NONE, "error_message": None, "topics": topics}
    if ctx.api_version >= 2:
        body["nodes"] = node.quorum_nodes()
    return body


async def _forward(node, leader_id: int, request, version: int):
    """The leader's answer to the same request, or None if it cannot be had now."""
    peer = node.raft_driver.peer(leader_id)
    if peer is None:
        return None
    try:
        return await peer.request(55, request, timeout_s=FORWARD_TIMEOUT_S, version=version)
    except (PeerUnavailable, trio.TooSlowError):
        return None
