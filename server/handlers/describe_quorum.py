"""DescribeQuorum (key 55, v0-2): the state of the `__cluster_metadata` quorum.

With one controller the quorum is the degenerate one: this node is the
leader and only voter; registered brokers appear as observers (they fetch
the log once brokers exist, issue 4). Only partition 0 of
`__cluster_metadata` exists; anything else gets UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"


def handle(ctx, request):
    node = ctx.node
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
