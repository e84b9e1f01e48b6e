"""kafka-python's KafkaAdminClient against a running cluster of real processes (one
controller, two brokers): CreatePartitions, the legacy AlterConfigs and DescribeConfigs
of topics, brokers and broker loggers, through a broker and through the controller."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import InvalidPartitionsError


pytestmark = pytest.mark.e2e

BROKERS = [101, 102]


@pytest.fixture(params=[101, 1], ids=["through-broker", "through-controller"])
def admin(cluster, request):
    client = KafkaAdminClient(bootstrap_servers=cluster.address(request.param), request_timeout_ms=10_000,
                              client_id="kraftwerk-e2e")
    try:
        yield client, request.param
    finally:
        client.close()


def partition_count(admin: KafkaAdminClient, name: str) -> int:
    (described,) = admin.describe_topics([name])
    return len(described["partitions"])


def test_create_partitions(cluster, admin):
    client, via = admin
    name = f"grow-{via}"
    client.create_topics({name: {"num_partitions": 1, "replication_factor": 2}})
    cluster.wait_until("the topic in metadata", lambda: name in set(client.list_topics()))
    client.create_partitions({name: 2}, validate_only=True)
    client.create_partitions({name: {"count": 3, "assignments": [[102, 101], [101, 102]]}})
    cluster.wait_until("three partitions", lambda: partition_count(client, name) == 3)
    (described,) = client.describe_topics([name])
    replicas = {p["partition_index"]: p["replica_nodes"] for p in described["partitions"]}
    assert replicas[1] == [102, 101] and replicas[2] == [101, 102]
    with pytest.raises(InvalidPartitionsError):
        client.create_partitions({name: 2})


def test_alter_configs_replaces_and_describe_reads_back(cluster, admin):
    client, via = admin
    name = f"cfg-{via}"
    client.create_topics({name: {"num_partitions": 1, "replication_factor": 1,
                                 "configs": {"retention.ms": "1000", "cleanup.policy": "compact"}}})
    cluster.wait_until("the topic in metadata", lambda: name in set(client.list_topics()))
    result = client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {"segment.ms": "60000"})],
                                  incremental=False, raise_on_unknown=False)
    assert result == {"topic": {name: "OK"}}

    def modified():
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        return {k: v["value"] for k, v in described["topic"][name].items()}
    # kafka-python's non-incremental path re-sends the modified keys it read, so the
    # replace keeps them and adds segment.ms.
    cluster.wait_until("the replaced configs", lambda: modified() == {
        "retention.ms": "1000", "cleanup.policy": "compact", "segment.ms": "60000"})


def test_describe_broker_and_broker_logger(cluster, admin):
    # kafka-python sends a BROKER resource to that node itself; bootstrapped from the
    # controller it knows only the controller, which answers for its own id as Kafka's do.
    client, via = admin
    node = str(via)
    described = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                        include_synonyms=True, config_filter="all")
    configs = described["broker"][node]
    assert configs["node.id"]["value"] == node and configs["node.id"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["process.roles"]["value"] == ("broker" if via in BROKERS else "controller")
    assert configs["num.partitions"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["max.connections"]["read_only"] is False
    loggers = client.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, node)],
                                      config_filter="all")["broker_logger"][node]
    assert "root" in loggers and loggers["root"]["config_source"] == "DYNAMIC_BROKER_LOGGER_CONFIG"


def test_alter_broker_configs(cluster, admin):
    client, via = admin
    node = str(via)
    result = client.alter_configs([ConfigResource(ConfigResourceType.BROKER, node, {"max.connections": "500"})],
                                  incremental=False)
    assert result == {"broker": {node: "OK"}}

    def value():
        described = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)],
                                            include_synonyms=True)
        entry = described["broker"][node].get("max.connections")
        return entry and (entry["value"], entry["config_source"])
    cluster.wait_until("the dynamic broker config", lambda: value() == ("500", "DYNAMIC_BROKER_CONFIG"))
