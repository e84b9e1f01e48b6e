"""Pure topic and config commands (server/controller/topics.py).

CreateTopics (placement, explicit assignments, every refusal), DeleteTopics (by name and
by id), IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT, per-resource
all-or-nothing), DescribeConfigs; the records each write replay to the same image from
scratch and through a snapshot, and a transaction abort takes them back.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.apis import create_topics, delete_topics, describe_configs, incremental_alter_configs
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller import features as ft
from server.controller import topics as tp
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import RESOURCE_BROKER, RESOURCE_TOPIC
from server.controller.topics import TopicErrorCode

from .helpers import CLUSTER_ID, Cluster, decoded


def ids():
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter) << 8)


class TopicCluster(Cluster):
    """`Cluster` with the topic commands and a deterministic topic id source."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_id = ids()

    def create(self, *topics: dict, version: int = 7, validate_only: bool = False):
        request = decoded(create_topics.REQUEST, version, topics=list(topics), timeout_ms=1000,
                          validate_only=validate_only)
        return self.run(tp.create_topics(self.state, request, version, self.new_id))

    def delete(self, names=(), topic_ids=(), version: int = 6):
        if version >= 6:
            entries = [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names]
            entries += [{"name": None, "topic_id": i} for i in topic_ids]
            request = decoded(delete_topics.REQUEST, version, topics=entries, timeout_ms=1000)
        else:
            request = decoded(delete_topics.REQUEST, version, topic_names=list(names), timeout_ms=1000)
        return self.run(tp.delete_topics(self.state, request, version))

    def alter(self, *resources: tuple, validate_only: bool = False, version: int = 1):
        request = decoded(incremental_alter_configs.REQUEST, version, validate_only=validate_only, resources=[
            {"resource_type": kind, "resource_name": name,
             "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs]}
            for kind, name, configs in resources])
        return self.run(tp.incremental_alter_configs(self.state, request, version))

    def describe(self, *resources: tuple, version: int = 4, include_synonyms: bool = False):
        request = decoded(describe_configs.REQUEST, version, include_synonyms=include_synonyms, resources=[
            {"resource_type": kind, "resource_name": name, "configuration_keys": keys}
            for kind, name, keys in resources])
        response = tp.describe_configs(self.state, request, version)
        describe_configs.RESPONSE.encode(version, response)  # it must encode
        return response


def cluster_with_brokers(count: int = 3, fenced: tuple[int, ...] = (), mv_level: int = 22) -> TopicCluster:
    cluster = TopicCluster.bootstrapped(mv_level=mv_level)
    for broker_id in range(1, count + 1):
        epoch = cluster.register(broker_id, uuid.UUID(int=broker_id)).response["broker_epoch"]
        if broker_id not in fenced:
            cluster.heartbeat(broker_id, epoch)
    assert tp.usable_brokers(cluster.state) == tp.UsableBrokers(
        unfenced=tuple(b for b in range(1, count + 1) if b not in fenced), fenced=tuple(sorted(fenced)))
    return cluster


def topic(name: str, partitions: int = -1, rf: int = -1, assignments=(), configs=None) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": list(b)} for i, b in enumerate(assignments)],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


def only(result) -> dict:
    (entry,) = result.response["topics"]
    return entry


def assert_consistent(cluster: Cluster) -> None:
    assert cluster.replayed_from_scratch() == cluster.state
    loaded = load_snapshot(encode_snapshot_records(cluster.state), cluster.state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == cluster.state


# -- placement ---------------------------------------------------------------------------


def test_placement_is_round_robin_deterministic_and_balanced():
    brokers = [1, 2, 3, 4]
    placed = tp.place_replicas("orders", 8, 3, brokers)
    assert placed == tp.place_replicas("orders", 8, 3, brokers)
    assert all(len(set(replicas)) == 3 for replicas in placed)
    leaders = Counter(replicas[0] for replicas in placed)
    assert leaders == {1: 2, 2: 2, 3: 2, 4: 2}
    replicas = Counter(b for r in placed for b in r)
    assert set(replicas.values()) == {6}
    # Consecutive partitions start at consecutive brokers.
    assert [brokers.index(r[0]) for r in placed] == [(brokers.index(placed[0][0]) + p) % 4 for p in range(8)]
    with pytest.raises(ValueError):
        tp.place_replicas("x", 1, 5, brokers)


def test_different_names_start_at_different_brokers():
    starts = {tp.place_replicas(f"topic-{n}", 1, 1, [1, 2, 3, 4, 5])[0][0] for n in range(30)}
    assert len(starts) > 1


# -- CreateTopics ------------------------------------------------------------------------


def test_create_writes_topic_partitions_and_configs():
    cluster = cluster_with_brokers(3)
    result = cluster.create(topic("orders", 4, 2, configs={"retention.ms": "1000", "cleanup.policy": "compact"}))
    entry = only(result)
    assert entry["error_code"] == 0, entry
    assert entry["num_partitions"] == 4 and entry["replication_factor"] == 2
    assert result.atomic
    names = [r.name for r in result.records]
    assert names == ["TopicRecord"] + ["PartitionRecord"] * 4 + ["ConfigRecord"] * 2
    image = cluster.state.topics()["orders"]
    assert image.topic_id == entry["topic_id"]
    assert sorted(image.partitions) == [0, 1, 2, 3]
    for partition in image.partitions.values():
        assert len(partition.replicas) == 2
        assert partition.isr == partition.replicas
        assert partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
        # metadata.version 4.0-IV0 has directory assignment: each replica's single log dir.
        assert partition.directories == tuple(cluster.state.broker(b).log_dirs[0] for b in partition.replicas)
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "orders")) == {"retention.ms": "1000",
                                                                     "cleanup.policy": "compact"}
    configs = {c["name"]: (c["value"], c["config_source"]) for c in entry["configs"]}
    assert configs["retention.ms"] == ("1000", tp.SOURCE_DYNAMIC_TOPIC_CONFIG)
    assert configs["segment.ms"] == ("604800000", tp.SOURCE_DEFAULT_CONFIG)
    create_topics.RESPONSE.encode(7, result.response)
    assert_consistent(cluster)


def test_create_before_directory_assignment_writes_partition_record_v0():
    cluster = cluster_with_brokers(2, mv_level=ft.IBP_3_7_IV0)
    result = cluster.create(topic("old", 2, 2))
    assert {r.version for r in result.records if r.name == "PartitionRecord"} == {0}
    assert cluster.state.topics()["old"].partitions[0].directories == ()
    assert_consistent(cluster)


def test_create_uses_defaults_for_minus_one():
    cluster = cluster_with_brokers(3)
    entry = only(cluster.create(topic("d")))
    assert (entry["num_partitions"], entry["replication_factor"]) == (1, 1)
    request = decoded(create_topics.REQUEST, 7, topics=[topic("e")])
    result = tp.create_topics(cluster.state, request, 7, ids(), tp.TopicDefaults(num_partitions=6,
                                                                                   replication_factor=3))
    assert (only(result)["num_partitions"], only(result)["replication_factor"]) == (6, 3)


def test_explicit_assignments_are_honoured():
    cluster = cluster_with_brokers(3, fenced=(3,))
    entry = only(cluster.create(topic("manual", assignments=[(2, 1), (3, 2), (1, 3)])))
    assert entry["error_code"] == 0, entry
    partitions = cluster.state.topics()["manual"].partitions
    assert [partitions[i].replicas for i in range(3)] == [(2, 1), (3, 2), (1, 3)]
    # A fenced replica is left out of the ISR and does not lead.
    assert partitions[1].isr == (2,) and partitions[1].leader == 2
    assert partitions[0].leader == 2 and partitions[0].isr == (2, 1)
    assert_consistent(cluster)


@pytest.mark.parametrize(("assignments", "needle"), [
    ([(1, 1)], "more than once"),
    ([(9,)], "no such broker is registered"),
    ([(3,)], "fenced or in controlled shutdown"),
    ([()], "empty replica list"),
    ([(1, 2), (2,)], "same number of replicas"),
])
def test_bad_assignments_are_refused(assignments, needle):
    cluster = cluster_with_brokers(3, fenced=(3,))
    entry = only(cluster.create(topic("bad", assignments=assignments)))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert needle in entry["error_message"]
    assert "bad" not in cluster.state.topics()


def test_assignments_must_be_numbered_from_zero():
    cluster = cluster_with_brokers(2)
    request = decoded(create_topics.REQUEST, 7, topics=[{
        "name": "gap", "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [1]}, {"partition_index": 2, "broker_ids": [2]}],
        "configs": []}])
    entry = only(tp.create_topics(cluster.state, request, 7, ids()))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_assignments_with_counts_set_are_invalid_requests():
    cluster = cluster_with_brokers(2)
    entry = only(cluster.create({**topic("x", assignments=[(1,)]), "num_partitions": 1}))
    assert entry["error_code"] == ErrorCode.INVALID_REQUEST
    entry = only(cluster.create({**topic("x", assignments=[(1,)]), "replication_factor": 1}))
    assert entry["error_code"] == ErrorCode.INVALID_REQUEST


def test_replication_factor_above_unfenced_brokers():
    # Kafka places on a fenced broker when the unfenced ones run out (tests in
    # test_replica_placement.py); only fewer registered brokers than replicas refuses.
    cluster = cluster_with_brokers(3, fenced=(2,))
    assert only(cluster.create(topic("wide", 1, 3)))["error_code"] == 0
    partition = cluster.state.topics()["wide"].partitions[0]
    assert partition.replicas[2] == 2 and set(partition.isr) == {1, 3}
    assert partition.isr == partition.replicas[:2] and partition.leader == partition.replicas[0]
    entry = only(cluster.create(topic("wider", 1, 4)))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICATION_FACTOR
    assert "only 3 broker(s) are registered" in entry["error_message"]
    assert sorted(cluster.state.topics()) == ["wide"]


def test_no_brokers_at_all():
    cluster = TopicCluster.bootstrapped()
    entry = only(cluster.create(topic("lonely", 1, 1)))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize(("partitions", "rf", "code"), [
    (0, 1, TopicErrorCode.INVALID_PARTITIONS),
    (-2, 1, TopicErrorCode.INVALID_PARTITIONS),
    (1, 0, TopicErrorCode.INVALID_REPLICATION_FACTOR),
    (1, -3, TopicErrorCode.INVALID_REPLICATION_FACTOR),
])
def test_bad_counts(partitions, rf, code):
    cluster = cluster_with_brokers(1)
    assert only(cluster.create(topic("t", partitions, rf)))["error_code"] == code


def test_counts_are_checked_in_kafkas_order():
    cluster = cluster_with_brokers(1)
    # The replication factor before the partition count.
    assert only(cluster.create(topic("t", 0, 0)))["error_code"] == TopicErrorCode.INVALID_REPLICATION_FACTOR
    assert only(cluster.create(topic("t", 0, 1)))["error_code"] == TopicErrorCode.INVALID_PARTITIONS
    # With a manual assignment, a replication factor other than -1 is named first.
    entry = only(cluster.create({**topic("t", assignments=[(1,)]), "num_partitions": 1, "replication_factor": 1}))
    assert (entry["error_code"], entry["error_message"]) == (
        ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not "
                                   "set to -1.")


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "bad/name", "ümlaut"])
def test_invalid_names(name):
    cluster = cluster_with_brokers(1)
    entry = only(cluster.create(topic(name, 1, 1)))
    assert entry["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert entry["error_message"]
    assert cluster.state.topics() == {}


def test_longest_legal_name():
    cluster = cluster_with_brokers(1)
    assert only(cluster.create(topic("a" * 249, 1, 1)))["error_code"] == 0


def test_existing_topic_and_collisions():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("a.b", 1, 1))
    entry = only(cluster.create(topic("a.b", 1, 1)))
    assert entry["error_code"] == TopicErrorCode.TOPIC_ALREADY_EXISTS
    assert entry["error_message"] == "Topic 'a.b' already exists."
    entry = only(cluster.create(topic("a_b", 1, 1)))
    assert entry["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in entry["error_message"]


def test_duplicates_in_one_request_are_refused_once_each():
    cluster = cluster_with_brokers(1)
    result = cluster.create(topic("dup", 1, 1), topic("ok", 1, 1), topic("dup", 1, 1))
    by_name = {t["name"]: t for t in result.response["topics"]}
    assert len(result.response["topics"]) == 2
    assert by_name["dup"]["error_code"] == ErrorCode.INVALID_REQUEST
    assert by_name["ok"]["error_code"] == 0
    assert sorted(cluster.state.topics()) == ["ok"]


def test_one_bad_topic_does_not_stop_the_others():
    cluster = cluster_with_brokers(2)
    result = cluster.create(topic("good", 2, 2), topic("bad", 1, 5), topic("also.good", 1, 1))
    codes = {t["name"]: t["error_code"] for t in result.response["topics"]}
    assert codes == {"good": 0, "bad": TopicErrorCode.INVALID_REPLICATION_FACTOR, "also.good": 0}
    assert sorted(cluster.state.topics()) == ["also.good", "good"]
    assert_consistent(cluster)


@pytest.mark.parametrize(("configs", "needle"), [
    ({"no.such.config": "1"}, "Unknown topic config name"),
    ({"retention.ms": "soon"}, "Not a number"),
    ({"preallocate": "maybe"}, "true or false"),
    ({"segment.bytes": str(1 << 40)}, "Not a number"),
])
def test_bad_configs_refuse_the_topic(configs, needle):
    cluster = cluster_with_brokers(1)
    entry = only(cluster.create(topic("cfg", 1, 1, configs=configs)))
    assert entry["error_code"] == TopicErrorCode.INVALID_CONFIG
    assert needle in entry["error_message"]
    assert cluster.state.topics() == {} and cluster.state.config_resources() == ()


def test_null_config_value_is_refused():
    cluster = cluster_with_brokers(1)
    entry = only(cluster.create(topic("cfg", 1, 1, configs={"retention.ms": None})))
    assert entry["error_code"] == TopicErrorCode.INVALID_CONFIG


def test_validate_only_writes_nothing_but_answers_as_if():
    cluster = cluster_with_brokers(3)
    before = cluster.state.snapshot()
    result = cluster.create(topic("dry", 3, 3), validate_only=True)
    assert result.records == []
    assert only(result)["error_code"] == 0 and only(result)["num_partitions"] == 3
    assert cluster.state.snapshot() == before


@pytest.mark.parametrize("version", range(0, 8))
def test_every_version_encodes(version):
    cluster = cluster_with_brokers(2)
    result = cluster.create(topic(f"v{version}", 1, 1), topic("bad", 1, 9), version=version)
    encoded = create_topics.RESPONSE.encode(version, result.response)
    back = create_topics.RESPONSE.decode(version, encoded)
    assert [t.error_code for t in back.topics] == [0, TopicErrorCode.INVALID_REPLICATION_FACTOR]
    if version >= 7:
        assert back.topics[0].topic_id == cluster.state.topics()[f"v{version}"].topic_id


# -- DeleteTopics ------------------------------------------------------------------------


def test_delete_by_name_and_by_id():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("a", 2, 1, configs={"retention.ms": "5"}), topic("b", 1, 1), topic("c", 1, 1))
    b_id = cluster.state.topics()["b"].topic_id
    result = cluster.delete(names=["a"], topic_ids=[b_id])
    assert [r.name for r in result.records] == ["RemoveTopicRecord", "RemoveTopicRecord"]
    assert [(r["name"], r["error_code"]) for r in result.response["responses"]] == [("a", 0), ("b", 0)]
    assert result.response["responses"][1]["topic_id"] == b_id
    assert sorted(cluster.state.topics()) == ["c"]
    assert cluster.state.configs(RESOURCE_TOPIC, "a") == {}
    delete_topics.RESPONSE.encode(6, result.response)
    assert_consistent(cluster)


def test_delete_unknown_names_and_ids():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("a", 1, 1))
    result = cluster.delete(names=["missing", "a"], topic_ids=[uuid.UUID(int=12345)])
    codes = [r["error_code"] for r in result.response["responses"]]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, TopicErrorCode.UNKNOWN_TOPIC_ID]
    assert cluster.state.topics() == {}


def test_delete_both_or_neither_name_and_id_is_invalid():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("a", 1, 1))
    topic_id = cluster.state.topics()["a"].topic_id
    request = decoded(delete_topics.REQUEST, 6, timeout_ms=1, topics=[
        {"name": "a", "topic_id": topic_id}, {"name": None, "topic_id": uuid.UUID(int=0)}])
    result = cluster.run(tp.delete_topics(cluster.state, request, 6))
    assert [r["error_code"] for r in result.response["responses"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert "a" in cluster.state.topics()


def test_delete_the_same_topic_twice_in_one_request():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("a", 1, 1))
    topic_id = cluster.state.topics()["a"].topic_id
    result = cluster.delete(names=["a"], topic_ids=[topic_id])
    assert [r["error_code"] for r in result.response["responses"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert result.records == [] and "a" in cluster.state.topics()


@pytest.mark.parametrize("version", range(0, 6))
def test_delete_by_name_in_old_versions(version):
    cluster = cluster_with_brokers(1)
    cluster.create(topic("a", 1, 1))
    result = cluster.delete(names=["a", "zz"], version=version)
    back = delete_topics.RESPONSE.decode(version, delete_topics.RESPONSE.encode(version, result.response))
    assert [(r.name, r.error_code) for r in back.responses] == [("a", 0), ("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_recreated_topic_gets_a_new_id():
    cluster = cluster_with_brokers(1)
    first = only(cluster.create(topic("again", 1, 1)))["topic_id"]
    cluster.delete(names=["again"])
    second = only(cluster.create(topic("again", 1, 1)))["topic_id"]
    assert first != second and cluster.state.topics()["again"].topic_id == second
    assert_consistent(cluster)


# -- IncrementalAlterConfigs -------------------------------------------------------------


def test_set_delete_append_subtract_on_a_topic():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}))
    result = cluster.alter((RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_DELETE, None),
                                                  ("segment.ms", tp.OP_SET, "60000"),
                                                  ("cleanup.policy", tp.OP_APPEND, "compact")]))
    assert result.response["responses"][0]["error_code"] == 0
    # cleanup.policy started at its default, delete: APPEND adds to it.
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "t")) == {"segment.ms": "60000",
                                                                "cleanup.policy": "delete,compact"}
    cluster.alter((RESOURCE_TOPIC, "t", [("cleanup.policy", tp.OP_SUBTRACT, "delete")]))
    assert cluster.state.configs(RESOURCE_TOPIC, "t")["cleanup.policy"] == "compact"
    cluster.alter((RESOURCE_TOPIC, "t", [("cleanup.policy", tp.OP_APPEND, "compact")]))  # already there
    assert cluster.state.configs(RESOURCE_TOPIC, "t")["cleanup.policy"] == "compact"
    assert_consistent(cluster)


def test_only_changes_become_records():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}))
    result = cluster.alter((RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_SET, "1000"),
                                                  ("segment.ms", tp.OP_DELETE, None)]))
    assert result.response["responses"][0]["error_code"] == 0
    assert result.records == []


def test_delete_writes_a_null_config_record():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}))
    result = cluster.alter((RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_DELETE, None)]))
    assert [(r.name, r.data["value"]) for r in result.records] == [("ConfigRecord", None)]
    assert cluster.state.config_resources() == ()


def test_each_resource_is_all_or_nothing():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("t", 1, 1), topic("u", 1, 1))
    result = cluster.alter(
        (RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_SET, "5"), ("retention.bytes", tp.OP_SET, "lots")]),
        (RESOURCE_TOPIC, "u", [("retention.ms", tp.OP_SET, "6")]),
        (RESOURCE_TOPIC, "missing", [("retention.ms", tp.OP_SET, "7")]),
        (RESOURCE_BROKER, "1", [("log.cleaner.threads", tp.OP_SET, "2")]),
        (RESOURCE_BROKER, "", [("log.retention.ms", tp.OP_SET, "9")]),
    )
    codes = [r["error_code"] for r in result.response["responses"]]
    assert codes == [TopicErrorCode.INVALID_CONFIG, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, 0]
    assert cluster.state.configs(RESOURCE_TOPIC, "t") == {}
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "u")) == {"retention.ms": "6"}
    assert dict(cluster.state.configs(RESOURCE_BROKER, "1")) == {"log.cleaner.threads": "2"}
    assert dict(cluster.state.configs(RESOURCE_BROKER, "")) == {"log.retention.ms": "9"}
    assert result.atomic
    incremental_alter_configs.RESPONSE.encode(0, result.response)
    assert_consistent(cluster)


@pytest.mark.parametrize(("resource", "configs", "code"), [
    ((RESOURCE_TOPIC, "t"), [("segment.ms", tp.OP_APPEND, "1")], TopicErrorCode.INVALID_CONFIG),
    ((RESOURCE_TOPIC, "t"), [("retention.ms", tp.OP_SET, None)], TopicErrorCode.INVALID_CONFIG),
    ((RESOURCE_TOPIC, "t"), [("made.up", tp.OP_SET, "1")], TopicErrorCode.INVALID_CONFIG),
    ((RESOURCE_TOPIC, "t"), [("retention.ms", tp.OP_SET, "1"), ("retention.ms", tp.OP_DELETE, None)],
     ErrorCode.INVALID_REQUEST),
    ((RESOURCE_TOPIC, "t"), [("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST),
    ((RESOURCE_BROKER, "one"), [("x", tp.OP_SET, "1")], ErrorCode.INVALID_REQUEST),
    ((RESOURCE_BROKER, "-1"), [("x", tp.OP_SET, "1")], ErrorCode.INVALID_REQUEST),
    ((8, "1"), [("kafka", tp.OP_SET, "DEBUG")], ErrorCode.INVALID_REQUEST),
    ((3, "x"), [("x", tp.OP_SET, "1")], ErrorCode.INVALID_REQUEST),
])
def test_alter_refusals(resource, configs, code):
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1))
    before = cluster.state.snapshot()
    result = cluster.alter((*resource, configs))
    assert result.response["responses"][0]["error_code"] == code
    assert result.records == []
    assert cluster.state.snapshot() == before


def test_duplicate_resources_are_refused():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1))
    result = cluster.alter((RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_SET, "1")]),
                           (RESOURCE_TOPIC, "t", [("segment.ms", tp.OP_SET, "1")]))
    assert [r["error_code"] for r in result.response["responses"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert result.records == []


def test_alter_validate_only():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1))
    result = cluster.alter((RESOURCE_TOPIC, "t", [("retention.ms", tp.OP_SET, "1")]), validate_only=True)
    assert result.response["responses"][0]["error_code"] == 0 and result.records == []
    assert cluster.state.configs(RESOURCE_TOPIC, "t") == {}


# -- DescribeConfigs ---------------------------------------------------------------------


def test_describe_topic_lists_set_values_and_defaults():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1000"}))
    response = cluster.describe((RESOURCE_TOPIC, "t", None), include_synonyms=True)
    (result,) = response["results"]
    assert result["error_code"] == 0
    configs = {c["name"]: c for c in result["configs"]}
    assert set(tp.TOPIC_CONFIGS) <= set(configs)
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["retention.ms"]["config_source"] == tp.SOURCE_DYNAMIC_TOPIC_CONFIG
    assert [s["source"] for s in configs["retention.ms"]["synonyms"]] == [tp.SOURCE_DYNAMIC_TOPIC_CONFIG,
                                                                          tp.SOURCE_DEFAULT_CONFIG]
    assert configs["segment.ms"]["config_source"] == tp.SOURCE_DEFAULT_CONFIG
    assert configs["cleanup.policy"]["config_type"] == tp.ConfigType.LIST


def test_describe_filters_keys_and_reports_errors():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1))
    cluster.alter((RESOURCE_BROKER, "", [("log.retention.ms", tp.OP_SET, "9")]),
                  (RESOURCE_BROKER, "1", [("log.retention.ms", tp.OP_SET, "8"), ("num.io.threads", tp.OP_SET, "4")]))
    response = cluster.describe((RESOURCE_TOPIC, "t", ["retention.ms", "no.such"]),
                                (RESOURCE_TOPIC, "gone", None),
                                (RESOURCE_BROKER, "1", None),
                                (RESOURCE_BROKER, "", None),
                                (RESOURCE_BROKER, "2", None))
    topic_result, gone, broker, default, other = response["results"]
    assert [c["name"] for c in topic_result["configs"]] == ["retention.ms"]
    assert gone["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and gone["configs"] == []
    assert {c["name"]: (c["value"], c["config_source"]) for c in broker["configs"]} == {
        "log.retention.ms": ("8", tp.SOURCE_DYNAMIC_BROKER_CONFIG),
        "num.io.threads": ("4", tp.SOURCE_DYNAMIC_BROKER_CONFIG)}
    assert {c["name"]: c["config_source"] for c in default["configs"]} == {
        "log.retention.ms": tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG}
    assert {c["name"]: c["value"] for c in other["configs"]} == {"log.retention.ms": "9"}


@pytest.mark.parametrize("version", range(0, 5))
def test_describe_every_version_encodes(version):
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1, configs={"retention.ms": "1"}))
    response = cluster.describe((RESOURCE_TOPIC, "t", ["retention.ms", "segment.ms"]), version=version,
                                include_synonyms=version >= 1)
    back = describe_configs.RESPONSE.decode(version, describe_configs.RESPONSE.encode(version, response))
    configs = {c.name: c for c in back.results[0].configs}
    assert configs["retention.ms"].value == "1"
    if version == 0:
        assert configs["segment.ms"].is_default and not configs["retention.ms"].is_default


# -- the image: transactions and random histories ----------------------------------------


def test_aborted_transaction_takes_back_created_topics_and_configs():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("kept", 1, 1))
    before = cluster.state.snapshot()
    cluster.append([record(mr.BEGIN_TRANSACTION_RECORD, {"name": "migration"})])
    cluster.create(topic("copied", 2, 2, configs={"retention.ms": "1"}))
    cluster.alter((RESOURCE_TOPIC, "kept", [("segment.ms", tp.OP_SET, "5")]))
    cluster.delete(names=["kept"])
    assert sorted(cluster.state.topics()) == ["copied"]
    cluster.append([record(mr.ABORT_TRANSACTION_RECORD, {"reason": "failover"})])
    after = cluster.state.snapshot()
    assert {k: v for k, v in after.items() if k != "last_applied_offset"} == \
        {k: v for k, v in before.items() if k != "last_applied_offset"}
    assert_consistent(cluster)


OPS = st.one_of(
    st.tuples(st.just("create"), st.integers(0, 5), st.integers(1, 4), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("set"), st.integers(0, 5), st.sampled_from(["retention.ms", "segment.ms"]),
              st.integers(0, 3)),
    st.tuples(st.just("unset"), st.integers(0, 5), st.sampled_from(["retention.ms", "segment.ms"])),
    st.tuples(st.just("append"), st.integers(0, 5), st.sampled_from(["compact", "delete"])),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, max_size=20))
def test_random_command_histories_replay_and_snapshot_to_the_same_image(ops):
    cluster = cluster_with_brokers(3)
    for op in ops:
        name = f"topic-{op[1]}"
        if op[0] == "create":
            cluster.create(topic(name, op[2], op[3]))
        elif op[0] == "delete":
            cluster.delete(names=[name])
        elif op[0] == "set":
            cluster.alter((RESOURCE_TOPIC, name, [(op[2], tp.OP_SET, str(op[3]))]))
        elif op[0] == "unset":
            cluster.alter((RESOURCE_TOPIC, name, [(op[2], tp.OP_DELETE, None)]))
        else:
            cluster.alter((RESOURCE_TOPIC, name, [("cleanup.policy", tp.OP_APPEND, op[2])]))
        # Every topic in the image is fully placed on usable brokers.
        for image in cluster.state.topics().values():
            for partition in image.partitions.values():
                assert partition.leader in partition.replicas
                assert len(set(partition.replicas)) == len(partition.replicas)
        # Configs only exist for existing topics when written through the commands.
        assert {n for t, n in cluster.state.config_resources() if t == RESOURCE_TOPIC} <= set(cluster.state.topics())
    assert_consistent(cluster)


def test_a_key_outside_the_catalogue_can_still_be_deleted():
    cluster = cluster_with_brokers(1)
    cluster.create(topic("t", 1, 1))
    cluster.append([record(mr.CONFIG_RECORD, {"resource_type": RESOURCE_TOPIC, "resource_name": "t",
                                              "name": "vendor.special", "value": "1"})])
    described = cluster.describe((RESOURCE_TOPIC, "t", ["vendor.special"]))
    assert [(c["name"], c["value"]) for c in described["results"][0]["configs"]] == [("vendor.special", "1")]
    refused = cluster.alter((RESOURCE_TOPIC, "t", [("vendor.special", tp.OP_SET, "2")]))
    assert refused.response["responses"][0]["error_code"] == TopicErrorCode.INVALID_CONFIG
    result = cluster.alter((RESOURCE_TOPIC, "t", [("vendor.special", tp.OP_DELETE, None)]))
    assert result.response["responses"][0]["error_code"] == 0
    assert cluster.state.configs(RESOURCE_TOPIC, "t") == {}
