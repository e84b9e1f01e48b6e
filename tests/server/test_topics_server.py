"""Topic and config APIs on running nodes (in process, real sockets on 127.0.0.1).

A controller serves CreateTopics, DeleteTopics, IncrementalAlterConfigs (committed
through the quorum before the reply), DescribeConfigs and Metadata (from the committed
image); a broker agent forwards the writes to the active controller and answers the
reads from its own replayed image.
"""

from __future__ import annotations

import uuid

import trio

from protocol.errors import ErrorCode
from server.client import KafkaClient
from server.config import Listener, ServerConfig
from server.controller.state import RESOURCE_BROKER, RESOURCE_TOPIC
from server.nodes.controller import ControllerNode

from node_harness import running_node

TIMEOUT_S = 30
METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 3, 19, 20, 32, 44
BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63
TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, UNKNOWN_TOPIC_ID = 36, 38, 40, 100
SET, DELETE, APPEND = 0, 1, 2
MV_3_7_IV4 = 19


async def register_unfenced(client: KafkaClient, broker_id: int, cluster_id: str) -> None:
    reply = await client.call(BROKER_REGISTRATION, {
        "broker_id": broker_id, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 29092 + broker_id, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
        "rack": None, "log_dirs": [uuid.uuid4()],
    })
    assert reply.error_code == ErrorCode.NONE
    beat = await client.call(BROKER_HEARTBEAT, {
        "broker_id": broker_id, "broker_epoch": reply.broker_epoch, "current_metadata_offset": 2**40,
        "want_fence": False, "want_shut_down": False})
    assert beat.error_code == ErrorCode.NONE and not beat.is_fenced


def create_body(*topics: tuple, validate_only: bool = False) -> dict:
    return {"timeout_ms": 5000, "validate_only": validate_only, "topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [],
         "configs": [{"name": k, "value": v} for k, v in configs.items()]}
        for name, partitions, rf, configs in topics]}


async def test_controller_serves_the_topic_lifecycle(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                for broker_id in (1, 2, 3):
                    await register_unfenced(client, broker_id, node.cluster_id)
                assert {CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS} <= set(
                    client.api_versions)
                reply = await client.call(CREATE_TOPICS, create_body(
                    ("orders", 6, 3, {"retention.ms": "3600000"}), ("bad", 1, 4, {}), ("events", 2, 1, {})))
                codes = {t.name: t.error_code for t in reply.topics}
                assert codes == {"orders": 0, "bad": INVALID_REPLICATION_FACTOR, "events": 0}
                # Answered only after commit: the committed image already has the topics.
                assert sorted(node.state.topics()) == ["events", "orders"]
                orders_id = next(t.topic_id for t in reply.topics if t.name == "orders")
                assert node.state.topics()["orders"].topic_id == orders_id

                again = await client.call(CREATE_TOPICS, create_body(("orders", 1, 1, {})))
                assert again.topics[0].error_code == TOPIC_ALREADY_EXISTS

                everything = await client.call(METADATA, {"topics": None})
                listed = {t.name: t for t in everything.topics}
                assert sorted(listed) == ["events", "orders"]
                assert len(listed["orders"].partitions) == 6
                for partition in listed["orders"].partitions:
                    assert len(partition.replica_nodes) == 3 and partition.leader_id == partition.replica_nodes[0]
                    assert list(partition.isr_nodes) == list(partition.replica_nodes)
                assert listed["orders"].topic_id == orders_id
                some = await client.call(METADATA, {"topics": [{"name": "events"}, {"name": "nope"}]})
                assert [(t.name, t.error_code) for t in some.topics] == [
                    ("events", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]

                altered = await client.call(INCREMENTAL_ALTER_CONFIGS, {"validate_only": False, "resources": [
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "orders", "configs": [
                        {"name": "retention.ms", "config_operation": DELETE, "value": None},
                        {"name": "cleanup.policy", "config_operation": APPEND, "value": "compact"}]},
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "events", "configs": [
                        {"name": "retention.ms", "config_operation": SET, "value": "not-a-number"}]},
                    {"resource_type": RESOURCE_BROKER, "resource_name": "2", "configs": [
                        {"name": "log.cleaner.threads", "config_operation": SET, "value": "4"}]}]})
                assert [r.error_code for r in altered.responses] == [0, INVALID_CONFIG, 0]
                assert dict(node.state.configs(RESOURCE_TOPIC, "orders")) == {"cleanup.policy": "delete,compact"}
                assert dict(node.state.configs(RESOURCE_BROKER, "2")) == {"log.cleaner.threads": "4"}

                described = await client.call(DESCRIBE_CONFIGS, {"include_synonyms": False, "resources": [
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "orders",
                     "configuration_keys": ["cleanup.policy", "retention.ms"]},
                    {"resource_type": RESOURCE_BROKER, "resource_name": "2", "configuration_keys": None},
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "nope", "configuration_keys": None}]})
                topic_result, broker_result, missing = described.results
                assert {c.name: c.value for c in topic_result.configs} == {"cleanup.policy": "delete,compact",
                                                                           "retention.ms": "604800000"}
                assert [(c.name, c.value) for c in broker_result.configs] == [("log.cleaner.threads", "4")]
                assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

                deleted = await client.call(DELETE_TOPICS, {"timeout_ms": 5000, "topics": [
                    {"name": None, "topic_id": orders_id}, {"name": "nope", "topic_id": uuid.UUID(int=0)},
                    {"name": None, "topic_id": uuid.UUID(int=7)}]})
                assert [(r.name, r.error_code) for r in deleted.responses] == [
                    ("orders", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (None, UNKNOWN_TOPIC_ID)]
                assert sorted(node.state.topics()) == ["events"]
                assert node.state.configs(RESOURCE_TOPIC, "orders") == {}


async def test_topics_survive_a_restart(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                await register_unfenced(client, 1, node.cluster_id)
                reply = await client.call(CREATE_TOPICS, create_body(("kept", 3, 1, {"segment.ms": "1000"})))
                assert reply.topics[0].error_code == 0
            image = node.state.snapshot()
        # The same directory, a new process-like start: replay rebuilds the topics.
        directory = tmp_path / "metadata"
        restarted = ControllerNode(ServerConfig(listener=Listener("CONTROLLER", "127.0.0.1", 0),
                                                metadata_log_dir=directory))
        async with trio.open_nursery() as nursery:
            await nursery.start(restarted.run)
            async with await KafkaClient.connect("127.0.0.1", restarted.port) as client:
                metadata = await client.call(METADATA, {"topics": [{"name": "kept"}]})
                assert metadata.topics[0].error_code == 0 and len(metadata.topics[0].partitions) == 3
            assert restarted.state.topics()["kept"] == image["topics"][restarted.state.topics()["kept"].topic_id]
            assert dict(restarted.state.configs(RESOURCE_TOPIC, "kept")) == {"segment.ms": "1000"}
            nursery.cancel_scope.cancel()


# -- through a broker agent --------------------------------------------------------------


async def test_broker_forwards_writes_and_serves_reads_from_its_image(controller_and_broker):
    with trio.fail_after(TIMEOUT_S):
        async with controller_and_broker() as (controller, broker):
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert {CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS} <= set(
                    client.api_versions)
                reply = await client.call(CREATE_TOPICS, create_body(("via-broker", 2, 1, {"retention.ms": "10"})))
                assert reply.topics[0].error_code == 0, reply
                assert "via-broker" in controller.state.topics()
                # The broker's image catches up by fetching the log; Metadata reads it.
                await broker.replayer.wait_replayed(controller.state.last_applied_offset + 1)
                assert broker.state.topic_by_id(reply.topics[0].topic_id) is not None
                metadata = await client.call(METADATA, {"topics": None})
                assert [(t.name, len(t.partitions)) for t in metadata.topics] == [("via-broker", 2)]
                assert all(p.leader_id == 100 for p in metadata.topics[0].partitions)

                altered = await client.call(INCREMENTAL_ALTER_CONFIGS, {"validate_only": False, "resources": [
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "via-broker", "configs": [
                        {"name": "retention.ms", "config_operation": SET, "value": "20"}]}]})
                assert altered.responses[0].error_code == 0
                await broker.replayer.wait_replayed(controller.state.last_applied_offset + 1)
                assert broker.state.configs(RESOURCE_TOPIC, "via-broker")["retention.ms"] == "20"
                described = await client.call(DESCRIBE_CONFIGS, {"resources": [
                    {"resource_type": RESOURCE_TOPIC, "resource_name": "via-broker",
                     "configuration_keys": ["retention.ms"]}]})
                assert described.results[0].configs[0].value == "20"

                deleted = await client.request(DELETE_TOPICS, 5, {"timeout_ms": 5000,
                                                                  "topic_names": ["via-broker"]})
                assert deleted.responses[0].error_code == 0
                assert controller.state.topics() == {}


def test_topic_defaults_come_from_the_server_properties():
    from server.handlers.create_topics import topic_defaults

    assert topic_defaults({}) == topic_defaults({"num.partitions": "x", "default.replication.factor": "0"})
    defaults = topic_defaults({"num.partitions": "6", "default.replication.factor": "3"})
    assert (defaults.num_partitions, defaults.replication_factor) == (6, 3)


async def test_default_partitions_on_a_running_node(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, extra={"num.partitions": "5"}) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                await register_unfenced(client, 1, node.cluster_id)
                reply = await client.call(CREATE_TOPICS, create_body(("defaulted", -1, -1, {})))
                assert reply.topics[0].error_code == 0 and reply.topics[0].num_partitions == 5
                assert len(node.state.topics()["defaulted"].partitions) == 5
