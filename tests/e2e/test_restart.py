"""Durability across a crash: everything the controller acknowledged survives kill -9.

The test drives a real controller with kraftwerk's own client
(`server.client.KafkaClient`): broker registrations, heartbeats that unfence
some of them, and feature upgrades; then SIGKILLs the process (no shutdown
path runs), restarts it on the same directory and compares.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from protocol.errors import ErrorCode
from server.client import KafkaClient

pytestmark = pytest.mark.e2e

MV = "metadata.version"
# A long session, so no broker is fenced by the clock while the test runs.
OVERRIDES = ("broker.session.timeout.ms=600000",)
CALL_TIMEOUT_S = 20


def registration(broker_id: int, cluster_id: str) -> dict:
    return {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19090 + broker_id, "security_protocol": 0}],
        "features": [{"name": MV, "min_supported_version": 1, "max_supported_version": 22},
                     {"name": "group.version", "min_supported_version": 0, "max_supported_version": 1}],
        "rack": f"rack-{broker_id}",
        "log_dirs": [uuid.uuid4()],
    }


def heartbeat(broker_id: int, epoch: int) -> dict:
    # A metadata offset far ahead counts as caught up, so the broker is unfenced.
    return {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 2**40,
            "want_fence": False, "want_shut_down": False}


def upgrade(feature: str, level: int) -> dict:
    return {"timeout_ms": 10_000, "validate_only": False,
            "feature_updates": [{"feature": feature, "max_version_level": level, "upgrade_type": 1}]}


async def snapshot(controller) -> dict:
    """What a client can observe: finalized features, epoch, quorum observers, listed brokers."""
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(controller.host, controller.port) as client:
            versions = client.api_versions_response
            quorum = await client.call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                        "partitions": [{"partition_index": 0}]}]})
            cluster = await client.call(60, {"endpoint_type": 1})
    partition = quorum.topics[0].partitions[0]
    return {
        "finalized": {f.name: (f.min_version_level, f.max_version_level) for f in versions.finalized_features},
        "epoch": versions.finalized_features_epoch,
        "observers": sorted(r.replica_id for r in partition.observers),
        "high_watermark": partition.high_watermark,
        # The controller lists itself first, on its (new, ephemeral) port.
        "brokers": sorted((b.broker_id, b.host, "self" if b.port == controller.port else b.port, b.rack)
                          for b in cluster.brokers),
    }


async def test_acknowledged_state_survives_kill_9(controllers):
    controller = controllers.new(overrides=OVERRIDES)
    epochs = {}
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(controller.host, controller.port) as client:
            for broker_id in (2, 3, 4):
                response = await client.call(62, registration(broker_id, controller.cluster_id))
                assert response.error_code == ErrorCode.NONE
                epochs[broker_id] = response.broker_epoch
            for broker_id in (2, 3):  # 4 stays fenced
                response = await client.call(63, heartbeat(broker_id, epochs[broker_id]))
                assert (response.error_code, response.is_fenced) == (ErrorCode.NONE, False)
            for feature, level in ((MV, 20), (MV, 21), ("group.version", 1)):
                response = await client.call(57, upgrade(feature, level), min_version=1)
                assert response.error_code == ErrorCode.NONE, response.error_message

    before = await snapshot(controller)
    assert before["finalized"][MV] == (21, 21)
    assert before["finalized"]["group.version"] == (1, 1)
    assert before["observers"] == [2, 3, 4]
    assert [b[0] for b in before["brokers"]] == [1, 2, 3]
    assert (2, "127.0.0.1", 19092, "rack-2") in before["brokers"]
    # Offset 0 is the leader's LeaderChange control record, then 1 bootstrap record, the
    # controller's own registration (KIP-919), 3 broker registrations + 2 unfences + 3
    # feature records.
    assert before["epoch"] == 10
    assert before["high_watermark"] == 11

    assert controller.kill() == -9
    restarted = await trio.to_thread.run_sync(controllers.restart_on, controller.log_dir, controller.cluster_id,
                                              OVERRIDES)
    recovered = restarted.wait_for_event("controller.recovered")
    assert recovered["log_end_offset"] == 11
    assert not restarted.events("controller.bootstrapped")  # the log was not empty

    after = await snapshot(restarted)
    # The restarted node leads a new epoch, which starts with its own LeaderChange record,
    # and registers its new incarnation (KIP-919): two records more, nothing else changed.
    assert after.pop("high_watermark") == before.pop("high_watermark") + 2
    assert after.pop("epoch") == before.pop("epoch") + 2
    assert after == before

    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(restarted.host, restarted.port) as client:
            # The same incarnations keep their epochs: heartbeats with them are accepted.
            for broker_id in (2, 3):
                response = await client.call(63, heartbeat(broker_id, epochs[broker_id]))
                assert (response.error_code, response.is_fenced) == (ErrorCode.NONE, False)
            stale = await client.call(63, heartbeat(2, epochs[2] + 100))
            assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
            # And the controller keeps writing after the recovered tail.
            response = await client.call(57, upgrade(MV, 22), min_version=1)
            assert response.error_code == ErrorCode.NONE
    assert (await snapshot(restarted))["finalized"][MV] == (22, 22)


def test_feature_finalized_log_line_carries_the_level(controller):
    """Operators read `controller.feature_finalized` to see what level was finalized.

    The server passes the level as `level=...`, which structlog's add_log_level
    overwrites with the log level ("info"): the level is lost. Expected field:
    `feature_level`.
    """
    event = controller.wait_for_event("controller.feature_finalized", feature=MV, offset=1)
    assert event.get("feature_level") == 19, event
