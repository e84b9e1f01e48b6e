"""Helpers for the migration's end-to-end tests: metadata writes sent to the active
controller with our own client, so a test sees each write's outcome."""

from __future__ import annotations

import trio

from server.client import ClientError, KafkaClient
from cli.migration_story import MigrationCluster

RETENTION = "retention.ms"
# A write may wait up to 5 s for ZooKeeper to catch up (then REQUEST_TIMED_OUT); a node
# that never answers (killed or frozen mid-request) must not hang the test.
CALL_TIMEOUT_S = 20.0
NO_ANSWER = -1


async def _call(address: str, api_key: int, body: dict):
    host, _, port = address.rpartition(":")
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(host, int(port)) as client:
            await client.negotiate()
            return await client.call(api_key, body)


def _at_active_controller(cluster: MigrationCluster, api_key: int, body: dict):
    view = cluster.migration()
    if view is None:
        return None
    try:
        return trio.run(_call, cluster.address(view.controller_id), api_key, body)
    except (ClientError, OSError, trio.TooSlowError):
        return None


def alter(cluster: MigrationCluster, topic: str, value: str) -> int:
    """One IncrementalAlterConfigs (retention.ms) at the active controller; its error
    code, NO_ANSWER when there was none."""
    response = _at_active_controller(cluster, 44, {"resources": [{
        "resource_type": 2, "resource_name": topic,
        "configs": [{"name": RETENTION, "config_operation": 0, "value": value}]}], "validate_only": False})
    return NO_ANSWER if response is None else response.responses[0].error_code


def create_topic(cluster: MigrationCluster, name: str, partitions: int = 2) -> int:
    """One CreateTopics (replication factor 3) at the active controller; its error code."""
    response = _at_active_controller(cluster, 19, {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 10_000, "validate_only": False})
    return NO_ANSWER if response is None else response.topics[0].error_code
