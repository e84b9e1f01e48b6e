"""MigrationCheck (kraftwerk's key 10000, v0): KIP-866's readiness probe, answered by
a ZooKeeper-mode broker.

The response carries the cluster id (the 16 bytes of the base64url uuid in
`/cluster/id`) and whether `kafka.metadata.migration.enable` is set in the broker's
static configuration. A broker that has not read its cluster id yet answers
BROKER_NOT_AVAILABLE; one whose `/cluster/id` is not a Kafka uuid answers
INCONSISTENT_CLUSTER_ID (a controller cannot migrate a cluster it cannot name).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.primitives import ZERO_UUID
from server.api.context import ZkBrokerServices
from server.zk.paths import ZnodeDecodeError, parse_kafka_uuid


def handle(ctx, request):
    services: ZkBrokerServices = ctx.services
    config_enabled = bool(services.migration_enabled)
    cluster_id = services.cluster_id
    if not cluster_id:
        return {"error_code": ErrorCode.BROKER_NOT_AVAILABLE, "cluster_id": ZERO_UUID,
                "config_enabled": config_enabled}
    try:
        cluster_uuid = parse_kafka_uuid(cluster_id)
    except ZnodeDecodeError:
        return {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID, "cluster_id": ZERO_UUID,
                "config_enabled": config_enabled}
    return {"error_code": ErrorCode.NONE, "cluster_id": cluster_uuid, "config_enabled": config_enabled}
