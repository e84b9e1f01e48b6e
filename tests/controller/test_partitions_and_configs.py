"""CreatePartitions, the legacy AlterConfigs and DescribeConfigs of a node's own
BROKER / BROKER_LOGGER resources (pure commands in server/controller/topics.py)."""

from __future__ import annotations

import pytest

from protocol.apis import alter_configs, create_partitions, describe_configs
from protocol.errors import ErrorCode
from server.controller import topics as tp
from server.controller.state import RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC
from server.controller.topics import TopicErrorCode

from .helpers import decoded
from .test_topics import assert_consistent, cluster_with_brokers, topic


def grow(cluster, *topics: tuple, validate_only: bool = False, version: int = 3):
    """topics: (name, count, assignments or None)."""
    request = decoded(create_partitions.REQUEST, version, timeout_ms=1000, validate_only=validate_only, topics=[
        {"name": name, "count": count,
         "assignments": None if assignments is None else [{"broker_ids": list(b)} for b in assignments]}
        for name, count, assignments in topics])
    result = cluster.run(tp.create_partitions(cluster.state, request, version))
    back = create_partitions.RESPONSE.decode(version, create_partitions.RESPONSE.encode(version, result.response))
    return result, {r.name: (r.error_code, r.error_message) for r in back.results}


def replace(cluster, *resources: tuple, validate_only: bool = False, version: int = 2):
    request = decoded(alter_configs.REQUEST, version, validate_only=validate_only, resources=[
        {"resource_type": kind, "resource_name": name, "configs": [{"name": k, "value": v} for k, v in configs]}
        for kind, name, configs in resources])
    result = cluster.run(tp.alter_configs(cluster.state, request, version))
    alter_configs.RESPONSE.encode(version, result.response)
    return result, [(r["error_code"], r["error_message"]) for r in result.response["responses"]]


def replicas(cluster, name: str) -> dict[int, list[int]]:
    image = cluster.state.topic(name)
    return {index: list(p.replicas) for index, p in image.partitions.items()}


# -- CreatePartitions ---------------------------------------------------------------------


def test_grow_places_new_partitions_with_the_topics_replication_factor():
    cluster = cluster_with_brokers(3)
    cluster.create(topic("t", 2, 2))
    before = replicas(cluster, "t")
    result, errors = grow(cluster, ("t", 5, None))
    assert errors == {"t": (0, None)}
    after = replicas(cluster, "t")
    assert {i: after[i] for i in before} == before  # existing partitions untouched
    assert sorted(after) == [0, 1, 2, 3, 4] and all(len(r) == 2 and len(set(r)) == 2 for r in after.values())
    # The same round robin as CreateTopics, continued.
    assert [after[i] for i in range(5)] == tp.place_replicas("t", 5, 2, [1, 2, 3])
    assert [r.data["partition_id"] for r in result.records] == [2, 3, 4]
    assert all(p.leader == p.replicas[0] for p in cluster.state.topic("t").partitions.values())
    assert_consistent(cluster)


def test_explicit_assignments_are_honoured_and_validated():
    cluster = cluster_with_brokers(3)
    cluster.create(topic("t", 1, 2))
    _, errors = grow(cluster, ("t", 3, [[3, 1], [2, 3]]))
    assert errors == {"t": (0, None)}
    assert {i: r for i, r in replicas(cluster, "t").items() if i > 0} == {1: [3, 1], 2: [2, 3]}


@pytest.mark.parametrize("assignments, needle", [
    ([[1, 2]], "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    ([[1, 2], [3]], "includes a partition with 1 replica(s), but this is not consistent with previous "
                    "partitions, which have 2 replica(s)."),
    ([[1, 2], [9, 1]], "includes broker 9, but no such broker is registered."),
    ([[1, 1], [2, 3]], "includes the broker 1 more than once for partition 1."),
    ([[], [2, 3]], "empty replica list for partition 1."),
])
def test_bad_assignments_are_invalid_replica_assignment(assignments, needle):
    cluster = cluster_with_brokers(3)
    cluster.create(topic("t", 1, 2))
    result, errors = grow(cluster, ("t", 3, assignments))
    code, message = errors["t"]
    assert code == TopicErrorCode.INVALID_REPLICA_ASSIGNMENT and needle in message
    assert result.records == [] and len(cluster.state.topic("t").partitions) == 1


def test_no_increase_unknown_topic_duplicates_and_per_topic_outcome():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("a", 3, 1), topic("b", 1, 1))
    result, errors = grow(cluster, ("a", 2, None), ("b", 4, None), ("nope", 2, None))
    assert errors == {
        "a": (TopicErrorCode.INVALID_PARTITIONS, "The topic a currently has 3 partition(s); 2 would not be an increase."),
        "b": (0, None),
        "nope": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")}
    assert len(cluster.state.topic("b").partitions) == 4 and len(cluster.state.topic("a").partitions) == 3
    _, errors = grow(cluster, ("a", 3, None))
    assert errors == {"a": (TopicErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s).")}
    _, errors = grow(cluster, ("b", 5, None), ("b", 6, None))
    assert errors == {"b": (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")}
    assert len(cluster.state.topic("b").partitions) == 4


def test_replication_factor_above_usable_brokers():
    cluster = cluster_with_brokers(3, fenced=(3,))
    cluster.create(topic("t", assignments=[[1, 2, 3]]))
    assert len(cluster.state.topic("t").partitions) == 1
    # A fenced broker fills in when the unfenced ones run out; an unfenced one leads.
    _, errors = grow(cluster, ("t", 2, None))
    assert errors == {"t": (0, None)}
    added = cluster.state.topic("t").partitions[1]
    assert added.replicas[2] == 3 and added.leader == added.replicas[0] and added.isr == added.replicas[:2]
    cluster.unregister(3)
    _, errors = grow(cluster, ("t", 3, None))
    assert errors["t"][0] == TopicErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 2 broker(s) are registered" in errors["t"][1]


def test_validate_only_answers_but_writes_nothing():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("t", 1, 1))
    result, errors = grow(cluster, ("t", 4, None), validate_only=True)
    assert errors == {"t": (0, None)} and result.records == []
    assert len(cluster.state.topic("t").partitions) == 1


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_every_version(version):
    cluster = cluster_with_brokers(2)
    cluster.create(topic("t", 1, 1))
    _, errors = grow(cluster, ("t", 2, None), version=version)
    assert errors == {"t": (0, None)}


# -- AlterConfigs (legacy) ----------------------------------------------------------------


def test_alter_configs_replaces_the_whole_topic_set():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000", "cleanup.policy": "compact"}))
    result, errors = replace(cluster, (RESOURCE_TOPIC, "t", [("retention.ms", "2000"), ("segment.ms", "5")]))
    assert errors == [(0, None)]
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "t")) == {"retention.ms": "2000", "segment.ms": "5"}
    assert {(r.data["name"], r.data["value"]) for r in result.records} == {
        ("cleanup.policy", None), ("retention.ms", "2000"), ("segment.ms", "5")}
    # An empty set removes everything.
    replace(cluster, (RESOURCE_TOPIC, "t", []))
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "t")) == {}
    assert_consistent(cluster)


def test_alter_configs_broker_resources_and_cluster_default():
    cluster = cluster_with_brokers(2)
    replace(cluster, (RESOURCE_BROKER, "1", [("log.cleaner.threads", "2"), ("num.io.threads", "4")]),
            (RESOURCE_BROKER, "", [("log.retention.ms", "9")]))
    _, errors = replace(cluster, (RESOURCE_BROKER, "1", [("num.io.threads", "8")]))
    assert errors == [(0, None)]
    assert dict(cluster.state.configs(RESOURCE_BROKER, "1")) == {"num.io.threads": "8"}
    assert dict(cluster.state.configs(RESOURCE_BROKER, "")) == {"log.retention.ms": "9"}


def test_alter_configs_refusals_are_per_resource():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}), topic("u", 1, 1))
    result, errors = replace(cluster,
                             (RESOURCE_TOPIC, "t", [("retention.ms", "x")]),
                             (RESOURCE_TOPIC, "gone", [("retention.ms", "1")]),
                             (RESOURCE_TOPIC, "u", [("no.such.key", "1")]),
                             (RESOURCE_BROKER, "one", [("a", "1")]),
                             (RESOURCE_BROKER_LOGGER, "1", [("root", "DEBUG")]),
                             (RESOURCE_BROKER, "1", [("a", "1")]),
                             (RESOURCE_BROKER, "1", [("b", "1")]))
    codes = [code for code, _ in errors]
    assert codes == [TopicErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     TopicErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
                     ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert errors[2][1] == "Unknown topic config name: no.such.key"
    assert errors[5][1] == "Duplicate resource."
    assert result.records == [] and dict(cluster.state.configs(RESOURCE_TOPIC, "t")) == {"retention.ms": "1000"}


def test_alter_configs_validate_only_writes_nothing():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}))
    result, errors = replace(cluster, (RESOURCE_TOPIC, "t", []), validate_only=True)
    assert errors == [(0, None)] and result.records == []
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "t")) == {"retention.ms": "1000"}


# -- DescribeConfigs of the answering node --------------------------------------------------


NODE = tp.NodeConfigView(node_id=1, static={"node.id": "1", "num.partitions": "3", "my.custom": "x",
                                            "sasl.jaas.config": "secret"},
                         loggers={"root": "INFO", "controller": "INFO"})


def describe(cluster, *resources, include_synonyms=True, version=4, node=NODE):
    request = decoded(describe_configs.REQUEST, version, include_synonyms=include_synonyms, resources=[
        {"resource_type": kind, "resource_name": name, "configuration_keys": keys} for kind, name, keys in resources])
    response = tp.describe_configs(cluster.state, request, version, node)
    back = describe_configs.RESPONSE.decode(version, describe_configs.RESPONSE.encode(version, response))
    return back.results


def test_own_broker_lists_static_default_and_dynamic_with_synonyms():
    cluster = cluster_with_brokers(2)
    # Keys Kafka lets a cluster-wide default set (num.partitions is read at start-up only).
    replace(cluster, (RESOURCE_BROKER, "", [("num.io.threads", "5"), ("max.connections", "100")]))
    replace(cluster, (RESOURCE_BROKER, "1", [("max.connections", "50")]))
    node = tp.NodeConfigView(node_id=1, static={**NODE.static, "num.io.threads": "3"}, loggers=NODE.loggers)
    (own,) = describe(cluster, (RESOURCE_BROKER, "1", None), node=node)
    assert own.error_code == 0
    configs = {c.name: c for c in own.configs}
    assert set(tp.BROKER_CONFIGS) <= set(configs)
    mc = configs["max.connections"]
    assert (mc.value, mc.config_source, mc.read_only) == ("50", tp.SOURCE_DYNAMIC_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in mc.synonyms] == [
        ("50", tp.SOURCE_DYNAMIC_BROKER_CONFIG), ("100", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("2147483647", tp.SOURCE_DEFAULT_CONFIG)]
    io_threads = configs["num.io.threads"]
    assert (io_threads.value, io_threads.config_source) == ("5", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [s.source for s in io_threads.synonyms] == [tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
                                                       tp.SOURCE_STATIC_BROKER_CONFIG, tp.SOURCE_DEFAULT_CONFIG]
    node_id = configs["node.id"]
    assert (node_id.value, node_id.config_source, node_id.read_only) == ("1", tp.SOURCE_STATIC_BROKER_CONFIG, True)
    rack = configs["broker.rack"]
    assert (rack.value, rack.config_source) == (None, tp.SOURCE_DEFAULT_CONFIG)
    assert configs["my.custom"].config_source == tp.SOURCE_STATIC_BROKER_CONFIG and configs["my.custom"].read_only
    jaas = configs["sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None and all(s.value is None for s in jaas.synonyms)


def test_other_brokers_and_the_cluster_default_list_their_dynamic_configs():
    cluster = cluster_with_brokers(2)
    replace(cluster, (RESOURCE_BROKER, "2", [("max.connections", "7")]), (RESOURCE_BROKER, "", [("x", "y")]))
    other, default = describe(cluster, (RESOURCE_BROKER, "2", None), (RESOURCE_BROKER, "", None))
    assert {c.name: (c.value, c.config_source) for c in other.configs} == {
        "max.connections": ("7", tp.SOURCE_DYNAMIC_BROKER_CONFIG), "x": ("y", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)}
    assert {c.name: c.config_source for c in default.configs} == {"x": tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG}


def test_without_synonyms_and_filtered_keys():
    cluster = cluster_with_brokers(1)
    (own,) = describe(cluster, (RESOURCE_BROKER, "1", ["node.id", "num.partitions"]), include_synonyms=False)
    assert {c.name: (c.value, list(c.synonyms)) for c in own.configs} == {"node.id": ("1", []),
                                                                          "num.partitions": ("3", [])}


def test_broker_logger_of_this_node_and_kafkas_errors_for_others():
    cluster = cluster_with_brokers(1)
    own, other, empty = describe(cluster, (RESOURCE_BROKER_LOGGER, "1", None), (RESOURCE_BROKER_LOGGER, "2", None),
                                 (RESOURCE_BROKER_LOGGER, "", None))
    assert {c.name: (c.value, c.config_source) for c in own.configs} == {
        "root": ("INFO", tp.SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG),
        "controller": ("INFO", tp.SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG)}
    assert (other.error_code, other.error_message) == (ErrorCode.INVALID_REQUEST,
                                                       "Unexpected broker id, expected 1 but received 2")
    assert (empty.error_code, empty.error_message) == (ErrorCode.INVALID_REQUEST, "Broker id must not be empty")


@pytest.mark.parametrize("version", range(0, 5))
def test_own_broker_every_version_encodes(version):
    cluster = cluster_with_brokers(1)
    (own,) = describe(cluster, (RESOURCE_BROKER, "1", None), version=version, include_synonyms=version >= 1)
    configs = {c.name: c for c in own.configs}
    if version == 0:
        assert configs["broker.rack"].is_default and not configs["node.id"].is_default
