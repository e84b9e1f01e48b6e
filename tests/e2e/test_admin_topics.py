"""Real admin clients create, alter, describe, list and delete topics through broker
agents of a running cluster of real processes (one controller, two brokers).

kafka-python's KafkaAdminClient bootstrapped from a broker: CreateTopics, DeleteTopics
and IncrementalAlterConfigs are forwarded to the controller; Metadata and
DescribeConfigs are answered from the broker's own image, which follows the log, so
reads after a write wait (bounded) until the broker has caught up, as Kafka's own tests
do. confluent-kafka (librdkafka) creates topics too.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError


pytestmark = pytest.mark.e2e

TIMEOUT_S = 10
BROKERS = [101, 102]


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.address(101), request_timeout_ms=10_000,
                              client_id="kraftwerk-e2e")
    try:
        yield client
    finally:
        client.close()


def topic_configs(admin: KafkaAdminClient, name: str) -> dict[str, str]:
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    return {key: entry["value"] for key, entry in described["topic"][name].items()}


def test_kafka_python_topic_lifecycle(cluster, admin):
    created = admin.create_topics({
        "e2e-orders": {"num_partitions": 3, "replication_factor": 2, "configs": {"retention.ms": "3600000"}},
        "e2e-scratch": {"num_partitions": 1, "replication_factor": 1},
    })
    assert {t["name"]: t["error_code"] for t in created["topics"]} == {"e2e-orders": 0, "e2e-scratch": 0}
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({"e2e-orders": {"num_partitions": 1, "replication_factor": 1}})

    # Every broker's image follows the log; wait until 101 (this client's) lists both.
    cluster.wait_until("the new topics in broker metadata",
                       lambda: {"e2e-orders", "e2e-scratch"} <= set(admin.list_topics()))
    (orders,) = admin.describe_topics(["e2e-orders"])
    assert orders["error_code"] == 0
    partitions = sorted(orders["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in partitions] == [0, 1, 2]
    for partition in partitions:
        assert sorted(partition["replica_nodes"]) == BROKERS
        assert partition["leader_id"] == partition["replica_nodes"][0]
    # Leaders are spread over both brokers.
    assert {p["leader_id"] for p in partitions} == set(BROKERS)

    cluster.wait_until("the topic's configs", lambda: topic_configs(admin, "e2e-orders") == {
        "retention.ms": "3600000"})
    altered = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "e2e-orders", {
        "retention.ms": (AlterConfigOp.SET, "7200000"),
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
    })], incremental=True)
    assert altered == {"topic": {"e2e-orders": "OK"}}
    cluster.wait_until("the altered configs", lambda: topic_configs(admin, "e2e-orders") == {
        "retention.ms": "7200000", "cleanup.policy": "delete,compact"})
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "e2e-orders", {
        "retention.ms": (AlterConfigOp.DELETE, None)})], incremental=True)
    cluster.wait_until("the deleted config", lambda: topic_configs(admin, "e2e-orders") == {
        "cleanup.policy": "delete,compact"})

    deleted = admin.delete_topics(["e2e-scratch"])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("e2e-scratch", 0)]
    cluster.wait_until("the deleted topic to leave broker metadata",
                       lambda: "e2e-scratch" not in admin.list_topics())
    assert "e2e-orders" in admin.list_topics()


def test_kafka_python_through_the_other_broker_sees_the_same_topics(cluster, admin):
    admin.create_topics({"e2e-shared": {"num_partitions": 2, "replication_factor": 2}})
    other = KafkaAdminClient(bootstrap_servers=cluster.address(102), request_timeout_ms=10_000,
                             client_id="kraftwerk-e2e-2")
    try:
        cluster.wait_until("broker 102 to list the topic", lambda: "e2e-shared" in other.list_topics())
        assert other.delete_topics(["e2e-shared"])["topics"][0]["error_code"] == 0
        cluster.wait_until("broker 101 to drop the topic", lambda: "e2e-shared" not in admin.list_topics())
    finally:
        other.close()


def test_confluent_kafka_creates_topics(cluster, admin):
    client = AdminClient({"bootstrap.servers": cluster.address(102), "client.id": "kraftwerk-e2e",
                          "socket.timeout.ms": TIMEOUT_S * 1000})
    futures = client.create_topics([NewTopic("e2e-librdkafka", num_partitions=4, replication_factor=2),
                                    NewTopic("e2e-librdkafka-cfg", num_partitions=1, replication_factor=1,
                                             config={"segment.ms": "60000"})],
                                   operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    for name, future in futures.items():
        assert future.result(timeout=TIMEOUT_S) is None, name
    again = client.create_topics([NewTopic("e2e-librdkafka", num_partitions=1, replication_factor=1)],
                                 request_timeout=TIMEOUT_S)
    with pytest.raises(Exception) as failure:
        again["e2e-librdkafka"].result(timeout=TIMEOUT_S)
    assert "TOPIC_ALREADY_EXISTS" in str(failure.value)

    def listed() -> dict:
        return client.list_topics(timeout=TIMEOUT_S).topics

    cluster.wait_until("librdkafka to see the topics",
                       lambda: {"e2e-librdkafka", "e2e-librdkafka-cfg"} <= set(listed()))
    assert len(listed()["e2e-librdkafka"].partitions) == 4
    cluster.wait_until("the config to reach broker 101",
                       lambda: topic_configs(admin, "e2e-librdkafka-cfg") == {"segment.ms": "60000"})
