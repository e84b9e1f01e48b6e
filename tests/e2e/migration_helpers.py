"""Helpers for the migration's end-to-end tests: metadata writes sent to the active
controller with our own client, so a test sees each write's outcome."""

from __future__ import annotations

import trio

from server.client import ClientError, KafkaClient
from server.migration_story import MigrationCluster

RETENTION = "retention.ms"


async def _alter(address: str, topic: str, value: str) -> int:
    host, _, port = address.rpartition(":")
    async with await KafkaClient.connect(host, int(port)) as client:
        await client.negotiate()
        response = await client.call(44, {"resources": [{
            "resource_type": 2, "resource_name": topic,
            "configs": [{"name": RETENTION, "config_operation": 0, "value": value}]}], "validate_only": False})
    return response.responses[0].error_code


def alter(cluster: MigrationCluster, topic: str, value: str) -> int:
    """One IncrementalAlterConfigs at the active controller; its error code (-1: no answer)."""
    view = cluster.migration()
    if view is None:
        return -1
    try:
        return trio.run(_alter, cluster.address(view.controller_id), topic, value)
    except (ClientError, OSError):
        return -1
