"""KIP-778 gating on a real controller: ApiVersions lists only the versions the finalized
metadata.version allows, a request above them is answered UNSUPPORTED_VERSION in its own
version's shape (the connection stays open), and a metadata.version change moves the
advertised versions."""

from __future__ import annotations

import trio

from protocol.errors import ErrorCode
from server.client import KafkaClient
from node_harness import running_node

TIMEOUT_S = 20
MV_3_5_IV2, MV_3_7_IV4, MV_3_9_IV0 = 11, 19, 21
UPDATE_FEATURES, BROKER_REGISTRATION, BROKER_HEARTBEAT, DESCRIBE_CLUSTER = 57, 62, 63, 60


def metadata_version_update(level: int, validate_only: bool) -> dict:
    return {"timeout_ms": 5000, "validate_only": validate_only,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level, "upgrade_type": 1}]}


async def advertised(port: int) -> dict[int, tuple[int, int]]:
    async with await KafkaClient.connect("127.0.0.1", port) as client:
        return {key: (r.min_version, r.max_version) for key, r in client.api_versions.items()}


async def test_versions_follow_the_finalized_metadata_version(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_7_IV4) as node:
            before = await advertised(node.port)
            assert before[UPDATE_FEATURES] == (0, 1)
            assert before[BROKER_REGISTRATION] == (0, 4)
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                # Gated: answered UNSUPPORTED_VERSION in that version's shape, nothing done.
                reply = await client.request(UPDATE_FEATURES, 2, metadata_version_update(MV_3_9_IV0, True))
                assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
                assert node.state.metadata_version == MV_3_7_IV4
                reply = await client.call(UPDATE_FEATURES, metadata_version_update(MV_3_9_IV0, False))
                assert reply.error_code == ErrorCode.NONE
            after = await advertised(node.port)
            assert after[UPDATE_FEATURES] == (0, 2)
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                reply = await client.request(UPDATE_FEATURES, 2, metadata_version_update(MV_3_9_IV0, True))
                assert reply.error_code == ErrorCode.NONE
            # Everything that is not gated is advertised unchanged.
            assert {k: v for k, v in after.items() if k != UPDATE_FEATURES} == \
                {k: v for k, v in before.items() if k != UPDATE_FEATURES}


async def test_broker_rpcs_are_held_back_before_3_7_iv2(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_5_IV2) as node:
            ranges = await advertised(node.port)
            assert ranges[BROKER_REGISTRATION] == (0, 1)
            assert ranges[BROKER_HEARTBEAT] == (0, 0)
            assert ranges[DESCRIBE_CLUSTER] == (0, 0)
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                reply = await client.request(BROKER_HEARTBEAT, 1, {"broker_id": 7, "broker_epoch": 1,
                                                                   "current_metadata_offset": 0})
                assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
            # The refusal touched that request only: the node still answers.
            assert (await advertised(node.port))[BROKER_HEARTBEAT] == (0, 0)


async def test_api_versions_v5_on_a_controller_checks_the_shape_not_the_cluster(tmp_path):
    """KIP-1242: ClusterId and NodeId come both or neither (INVALID_REQUEST, no API
    list); a controller answers a client that names another cluster or node as any
    other, as Kafka's controllers do (brokers tell it to rebootstrap:
    tests/broker/test_broker_agent.py)."""
    software = {"client_software_name": "kraftwerk-test", "client_software_version": "1"}
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_7_IV4) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                assert client.api_versions[18].max_version == 5
                for asked, code in (({"cluster_id": node.cluster_id, "node_id": node.node_id}, ErrorCode.NONE),
                                    ({"cluster_id": "another-cluster-AAAAAAAA", "node_id": 9}, ErrorCode.NONE),
                                    ({"cluster_id": None, "node_id": node.node_id}, ErrorCode.INVALID_REQUEST),
                                    ({"cluster_id": node.cluster_id, "node_id": -1}, ErrorCode.INVALID_REQUEST)):
                    reply = await client.request(18, 5, {**software, **asked})
                    assert reply.error_code == code, asked
                    assert bool(reply.api_keys) == (code == ErrorCode.NONE), asked
