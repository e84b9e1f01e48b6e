"""A broker's client connections across metadata.version changes (KIP-778 without breaking
clients): a version the connection's ApiVersions offered but the new level gates away is
answered UNSUPPORTED_VERSION, never by closing; only connections whose ApiVersions answer
offered a version the change took away are closed, and only once idle for a while."""

from __future__ import annotations

import trio

from protocol.errors import ErrorCode
from server.broker.lifecycle import BrokerState
from server.client import KafkaClient
from server.net.listener import STALE_CLOSE_LINGER_S

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


async def test_a_broker_closes_only_connections_whose_answer_a_downgrade_narrowed_once_idle(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(111, None)
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as early:
                told = dict(early.api_versions)
                # 3.7-IV4 -> 3.8-IV0 moves no gate: the connection's answer is still current.
                assert (await cluster.update_metadata_version(MV_3_8_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_8_IV0)
                reply = await early.call(METADATA, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
                await early.negotiate()
                assert early.api_versions == told
                # 3.8-IV0 -> 3.9-IV0 allows UpdateFeatures v2: an upgrade only adds versions,
                # so everything this connection may send is still served; it stays open.
                assert (await cluster.update_metadata_version(MV_3_9_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_9_IV0)
                reply = await early.call(METADATA, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
                assert broker.connections.closed_by_request == 0
                async with await KafkaClient.connect("127.0.0.1", broker.port) as late:
                    assert late.api_versions[UPDATE_FEATURES].max_version == 2
                    # Back to 3.8-IV0: v2 is gone. `late` was offered it, `early` was not.
                    reply = await cluster.update_metadata_version(MV_3_8_IV0, SAFE_DOWNGRADE)
                    assert reply.error_code == ErrorCode.NONE
                    await broker.wait_renegotiated(MV_3_8_IV0)
                    # Still served while it is busy: the close waits for it to be idle a while.
                    reply = await late.call(METADATA, {"topics": []})
                    assert reply.cluster_id == cluster.cluster_id
                    answered_at = trio.current_time()
                    # Then the broker ends it: the client reads the end of the stream.
                    assert await late._stream.receive_some(1024) == b""
                    assert trio.current_time() - answered_at >= STALE_CLOSE_LINGER_S
                reply = await early.call(METADATA, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
            assert broker.connections.closed_by_request == 1
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert client.api_versions[UPDATE_FEATURES].max_version == 1
