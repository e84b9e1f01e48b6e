"""The ZooKeeper-mode broker agent against a real ZooKeeper, in-process (server/zkbroker/)."""

from __future__ import annotations

import json
import uuid

import pytest
import trio
from kafka.admin import KafkaAdminClient

from protocol.errors import ErrorCode
from server.zk import paths
from server.zk.client import connect
from server.zk.paths import FeaturesZnode, FeatureZnodeStatus, FinalizedFeature
from server.nodes.zkbroker import MetadataType, ZkBrokerFatalError, ZkBrokerNode
from .harness import CLUSTER_ID, WAIT_S, broker_config, client_for, running_broker, seed

UPDATE_METADATA = 6
MIGRATION_CHECK = 10000
METADATA = 3
TOPIC_ID = uuid.UUID(int=0xABCDEF)


def features_znode(**levels: int) -> bytes:
    return FeaturesZnode(FeatureZnodeStatus.ENABLED,
                         {name.replace("_", "."): FinalizedFeature(level) for name, level in levels.items()}).encode()


def update_metadata_body(controller_epoch: int, *, controller_id: int = 3000, kraft: bool = False,
                         brokers: dict[int, int] | None = None, broker_epoch: int = -1) -> dict:
    brokers = brokers or {}
    return {
        "controller_id": controller_id,
        "is_kraft_controller": kraft,
        "type": 1,
        "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch,
        "topic_states": [{
            "topic_name": "orders",
            "topic_id": TOPIC_ID,
            "partition_states": [
                {"partition_index": p, "controller_epoch": controller_epoch, "leader": 1, "leader_epoch": 4,
                 "isr": [1, 2], "zk_version": 1, "replicas": [1, 2], "offline_replicas": []}
                for p in (0, 1)
            ],
        }],
        "live_brokers": [
            {"id": b, "endpoints": [{"port": port, "host": "127.0.0.1", "listener": "PLAINTEXT",
                                     "security_protocol": 0}], "rack": None}
            for b, port in brokers.items()
        ],
    }


async def test_registration_znode_has_kafkas_layout(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1, release="3.6", broker_rack="r1") as node, \
            await connect(zk_hosts) as zk:
        data, _ = await zk.get("/brokers/ids/1")
        raw = json.loads(data)
        assert raw["version"] == 5
        assert raw["endpoints"] == [f"PLAINTEXT://127.0.0.1:{node.port}"]
        assert (raw["host"], raw["port"]) == ("127.0.0.1", node.port)
        assert raw["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert raw["rack"] == "r1" and raw["jmx_port"] == -1 and raw["timestamp"].isdigit()
        # Kafka 3.6's ranges (server/releases.py), as KIP-584 registration features.
        assert raw["features"] == {
            "kraft.version": {"min_version": 0, "max_version": 0},
            "metadata.version": {"min_version": 1, "max_version": 14},
        }
        stat = await zk.stat("/brokers/ids/1")
        assert stat.ephemeral_owner != 0
        assert node.broker_epoch == stat.czxid
        assert node.cluster_id == CLUSTER_ID
        assert node.metadata_type == MetadataType.ZOOKEEPER == 1
        # Nothing else was written by the broker: the seeded cluster is unchanged.
        assert await zk.children("/brokers/ids") == ["1"]


async def test_migration_check_and_api_versions_over_tcp(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as enabled, running_broker(zk_hosts, 2, migration_enabled=False) as off:
        async with client_for(enabled) as client:
            assert {6, 10000, 18, 3, 60} <= set(client.api_versions)
            assert client.api_versions[UPDATE_METADATA].min_version == 8
            assert client.api_versions_response.zk_migration_ready is True
            answer = await client.request(MIGRATION_CHECK, 0, {})
            assert answer.error_code == ErrorCode.NONE
            assert answer.cluster_id == paths.parse_kafka_uuid(CLUSTER_ID)
            assert answer.config_enabled is True
        async with client_for(off) as client:
            assert client.api_versions_response.zk_migration_ready is False
            answer = await client.request(MIGRATION_CHECK, 0, {})
            assert answer.error_code == ErrorCode.NONE and answer.config_enabled is False


async def test_update_metadata_then_metadata_reflects_it_and_stale_epochs_are_refused(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as node, client_for(node) as client:
        before = await client.request(METADATA, 12, {"topics": None})
        assert [b.node_id for b in before.brokers] == [1]
        assert before.controller_id == 1  # nobody told it otherwise yet
        assert before.cluster_id == CLUSTER_ID and before.topics == []

        body = update_metadata_body(7, controller_id=2, brokers={1: node.port, 2: 19092})
        assert (await client.request(UPDATE_METADATA, 8, body)).error_code == ErrorCode.NONE
        after = await client.request(METADATA, 12, {"topics": None})
        assert sorted((b.node_id, b.port) for b in after.brokers) == [(1, node.port), (2, 19092)]
        assert after.controller_id == 2
        [orders] = after.topics
        assert orders.name == "orders" and orders.topic_id == TOPIC_ID
        assert [(p.partition_index, p.leader_id, list(p.isr_nodes)) for p in orders.partitions] == \
            [(0, 1, [1, 2]), (1, 1, [1, 2])]
        named = await client.request(METADATA, 12, {"topics": [{"name": "orders"}, {"name": "nope"}]})
        assert [t.error_code for t in named.topics] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

        # An older controller epoch is refused and changes nothing.
        stale = update_metadata_body(6, controller_id=9, brokers={1: node.port, 9: 19099})
        assert (await client.request(UPDATE_METADATA, 8, stale)).error_code == 11  # STALE_CONTROLLER_EPOCH
        unchanged = await client.request(METADATA, 12, {"topics": None})
        assert unchanged.controller_id == 2 and {b.node_id for b in unchanged.brokers} == {1, 2}

        # A request for an earlier incarnation of this broker is refused too.
        old_incarnation = update_metadata_body(8, brokers={1: node.port}, broker_epoch=node.broker_epoch - 1)
        answer = await client.request(UPDATE_METADATA, 8, old_incarnation)
        assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH

        # KIP-866: with a KRaft controller, clients are given a live broker as controller.
        kraft = update_metadata_body(8, controller_id=3000, kraft=True, brokers={1: node.port, 2: 19092},
                                     broker_epoch=node.broker_epoch)
        assert (await client.request(UPDATE_METADATA, 8, kraft)).error_code == ErrorCode.NONE
        assert node.metadata_cache.controller_id == 3000 and node.metadata_cache.is_kraft_controller
        assert (await client.request(METADATA, 12, {"topics": None})).controller_id == 1


async def test_kafka_python_admin_client_bootstraps(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as node, client_for(node) as client:
        body = update_metadata_body(3, controller_id=1, brokers={1: node.port})
        assert (await client.request(UPDATE_METADATA, 8, body)).error_code == ErrorCode.NONE

        def describe() -> dict:
            admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{node.port}", request_timeout_ms=10_000,
                                     client_id="kraftwerk-zkbroker-test")
            try:
                return admin.describe_cluster()
            finally:
                admin.close()

        with trio.fail_after(60):
            described = await trio.to_thread.run_sync(describe)
    assert described["cluster_id"] == CLUSTER_ID
    assert described["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in described["brokers"]] == [(1, node.port)]


async def test_stops_when_features_become_unsupported(zk_hosts: str) -> None:
    seed(zk_hosts, features={"metadata.version": 14})
    node = ZkBrokerNode(broker_config(zk_hosts, 1, release="3.6"))
    failures: list[BaseException] = []

    async def run_node(task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await node.run(task_status=task_status)
        except ZkBrokerFatalError as exc:
            failures.append(exc)

    async with await connect(zk_hosts) as zk:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                await nursery.start(run_node)
                assert node.finalized_levels() == {"metadata.version": 14}
                async with await zk.watch_data("/brokers/ids/1") as registration:
                    assert (await registration.next(WAIT_S)).exists
                    # Kafka 3.6 supports metadata.version up to 14 (3.6-IV2).
                    await zk.set(paths.FEATURES_PATH, features_znode(metadata_version=15))
                    assert not (await registration.next(WAIT_S)).exists
            # The nursery ended: run() returned by itself, with the fatal error.
        assert len(failures) == 1
        assert "metadata.version is finalized at 15" in str(failures[0])
        assert "but this node supports 1-14" in str(failures[0])
        assert await zk.exists("/brokers/ids/1") is None


async def test_refuses_to_start_on_unsupported_features(zk_hosts: str) -> None:
    seed(zk_hosts, features={"metadata.version": 22})
    node = ZkBrokerNode(broker_config(zk_hosts, 1, release="3.6"))
    with trio.fail_after(WAIT_S):
        with pytest.raises(ZkBrokerFatalError, match="refuses to start.*metadata.version is finalized at 22"):
            await node.run()
    async with await connect(zk_hosts) as zk:
        assert await zk.exists("/brokers/ids/1") is None
    # kraftwerk's own software supports 22: that broker starts.
    async with running_broker(zk_hosts, 1) as ok:
        assert ok.finalized_levels() == {"metadata.version": 22}
        assert ok.finalized_features_epoch() == 0  # the /features znode's version


async def test_features_change_is_followed_and_advertised(zk_hosts: str) -> None:
    seed(zk_hosts, features={"metadata.version": 14})
    async with running_broker(zk_hosts, 1) as node, await connect(zk_hosts) as zk, client_for(node) as client:
        assert client.api_versions_response.finalized_features_epoch == 0
        await zk.set(paths.FEATURES_PATH, features_znode(metadata_version=20))
        with trio.fail_after(WAIT_S):
            while node.finalized_features_epoch() != 1:
                await node.wait_changed()
        async with client_for(node) as again:
            response = again.api_versions_response
            assert response.finalized_features_epoch == 1
            assert [(f.name, f.max_version_level) for f in response.finalized_features] == [("metadata.version", 20)]


async def test_registration_goes_when_the_broker_stops(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with await connect(zk_hosts) as zk:
        async with running_broker(zk_hosts, 3):
            assert await zk.exists("/brokers/ids/3") is not None
        # The session is closed on stop, not left to expire.
        assert await zk.exists("/brokers/ids/3") is None


async def test_a_second_broker_with_the_same_id_is_refused(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1):
        twin = ZkBrokerNode(broker_config(zk_hosts, 1))
        with trio.fail_after(WAIT_S):
            with pytest.raises(ZkBrokerFatalError, match="already registered"):
                await twin.run()
        assert twin.fatal_reason is not None


async def test_controller_znode_is_followed(zk_hosts: str) -> None:
    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as node, await connect(zk_hosts) as zk:
        assert node.zk_controller is None
        await zk.create(paths.CONTROLLER_PATH, paths.ControllerZnode(3000, 1, 5).encode())
        with trio.fail_after(WAIT_S):
            while node.zk_controller is None:
                await node.wait_changed()
        assert node.zk_controller == paths.ControllerZnode(3000, 1, 5)


async def test_keeps_its_registration_across_a_zookeeper_restart(zookeeper) -> None:
    seed(zookeeper.hosts)
    async with running_broker(zookeeper.hosts, 1) as node:
        epoch = node.broker_epoch
        await trio.to_thread.run_sync(zookeeper.restart)
        async with await connect(zookeeper.hosts) as zk:
            assert await zk.exists("/brokers/ids/1") is not None
            assert (await zk.stat("/brokers/ids/1")).czxid == epoch
        async with client_for(node) as client:
            assert (await client.request(MIGRATION_CHECK, 0, {})).error_code == ErrorCode.NONE


async def test_registers_again_after_its_session_expired(zk_hosts: str) -> None:
    from kazoo.client import KazooClient

    def expire(client_id: tuple[int, bytes]) -> None:
        hijacker = KazooClient(hosts=zk_hosts, client_id=client_id)
        hijacker.start(timeout=15)
        hijacker.stop()
        hijacker.close()

    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as node, await connect(zk_hosts) as zk:
        first_epoch = node.broker_epoch
        first_session = node.zk.session_id
        await trio.to_thread.run_sync(expire, node.zk.client_id)
        # The old registration went with the old session; the broker registers again.
        with trio.fail_after(WAIT_S):
            while node.registrations < 2:
                await node.wait_changed()
        stat = await zk.stat("/brokers/ids/1")
        assert node.zk.session_id != first_session
        assert stat.ephemeral_owner == node.zk.session_id
        assert node.broker_epoch == stat.czxid > first_epoch


async def test_librdkafka_lists_topics_learned_from_update_metadata(zk_hosts: str) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    seed(zk_hosts)
    async with running_broker(zk_hosts, 1) as node, client_for(node) as client:
        body = update_metadata_body(3, controller_id=1, brokers={1: node.port})
        assert (await client.request(UPDATE_METADATA, 8, body)).error_code == ErrorCode.NONE

        def list_topics():
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
            return admin.list_topics(timeout=10)

        with trio.fail_after(60):
            metadata = await trio.to_thread.run_sync(list_topics)
    assert confluent_kafka is not None
    assert metadata.cluster_id == CLUSTER_ID
    assert metadata.controller_id == 1
    assert sorted(metadata.brokers) == [1]
    assert sorted(metadata.topics) == ["orders"]
    partitions = metadata.topics["orders"].partitions
    assert {p: (partitions[p].leader, list(partitions[p].isrs)) for p in partitions} == {0: (1, [1, 2]),
                                                                                         1: (1, [1, 2])}
