"""A broker's client connections across metadata.version changes (KIP-778 without breaking
clients): a version the connection's ApiVersions offered but the new level gates away is
answered UNSUPPORTED_VERSION, never by closing; only connections whose ApiVersions answer
the change made stale are closed, and only once idle."""

from __future__ import annotations

import pytest
import trio

from protocol.errors import ErrorCode
from server.broker.lifecycle import BrokerState
from server.client import ClientError, KafkaClient

from .harness import running_cluster

TIMEOUT_S = 30
MV_3_7_IV4, MV_3_8_IV0, MV_3_9_IV0 = 19, 20, 21
UPDATE_FEATURES, METADATA = 57, 3
UPGRADE, SAFE_DOWNGRADE = 1, 2


def validate_only(level: int) -> dict:
    return {"timeout_ms": 5000, "validate_only": True,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level, "upgrade_type": UPGRADE}]}


async def test_a_version_told_before_a_downgrade_is_answered_unsupported_by_the_broker(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_9_IV0) as cluster:
            # Closing stale connections off: what is left is the answer and an open connection.
            broker = await cluster.start_broker(110, None, close_connections_on_metadata_version_change=False)
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert client.api_versions[UPDATE_FEATURES].max_version == 2
                reply = await cluster.update_metadata_version(MV_3_8_IV0, SAFE_DOWNGRADE)
                assert reply.error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_8_IV0)
                reply = await client.request(UPDATE_FEATURES, 2, validate_only(MV_3_8_IV0))
                assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
                assert "UpdateFeatures v2 needs metadata.version 3.9-IV0 (21)" in reply.error_message
                # The connection is still open and served.
                reply = await client.call(METADATA, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
                reply = await client.request(UPDATE_FEATURES, 1, validate_only(MV_3_8_IV0))
                assert reply.error_code == ErrorCode.NONE
            assert broker.connections.closed_by_request == 0


async def test_a_broker_closes_only_connections_whose_answer_went_stale(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(111, None)
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                told = dict(client.api_versions)
                # 3.7-IV4 -> 3.8-IV0 moves no gate: the connection's answer is still current.
                assert (await cluster.update_metadata_version(MV_3_8_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_8_IV0)
                reply = await client.call(METADATA, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
                await client.negotiate()
                assert client.api_versions == told
                assert broker.connections.closed_by_request == 0
                # 3.8-IV0 -> 3.9-IV0 allows UpdateFeatures v2: this idle connection is closed.
                assert (await cluster.update_metadata_version(MV_3_9_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_9_IV0)
                with pytest.raises(ClientError):
                    await client.call(METADATA, {"topics": []})
            assert broker.connections.closed_by_request == 1
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert client.api_versions[UPDATE_FEATURES].max_version == 2
