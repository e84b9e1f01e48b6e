"""The image models topics, partitions and configs, only through replay.

TopicRecord / PartitionRecord / ConfigRecord / RemoveTopicRecord replay into
`ControllerState.topics()`, `topic_by_id`, `configs` and `config_resources`;
mismatching records raise ReplayError and change nothing; an aborted metadata
transaction takes them back; snapshots carry them (a state loaded from its
snapshot equals the original); a lossy metadata.version downgrade drops partition
log directories.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.records import record
from server.controller import commands as cmd
from server.controller import features as ft
from server.controller.snapshot import encode_snapshot_records, load_snapshot, snapshot_records
from server.controller.state import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ControllerState,
    PartitionImage,
    ReplayError,
    TopicImage,
)
from server.values import ZkMigrationState

from .helpers import CLUSTER_ID, Cluster

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)
DIR_A = uuid.UUID(int=(5 << 64) | 1)


def topic_record(name: str, topic_id: uuid.UUID):
    return record(mr.TOPIC_RECORD, {"name": name, "topic_id": topic_id})


def partition_record(topic_id: uuid.UUID, index: int, replicas=(1, 2, 3), leader=None, epoch=0,
                     directories=(), **extra):
    data = {"partition_id": index, "topic_id": topic_id, "replicas": list(replicas), "isr": list(replicas),
            "leader": replicas[0] if leader is None else leader, "leader_epoch": epoch, "partition_epoch": epoch,
            "directories": list(directories), **extra}
    return record(mr.PARTITION_RECORD, data, version=1 if directories else 0)


def config_record(resource_type: int, resource_name: str, name: str, value: str | None):
    return record(mr.CONFIG_RECORD, {"resource_type": resource_type, "resource_name": resource_name,
                                     "name": name, "value": value})


def remove_topic_record(topic_id: uuid.UUID):
    return record(mr.REMOVE_TOPIC_RECORD, {"topic_id": topic_id})


def two_topics() -> Cluster:
    cluster = Cluster.bootstrapped()
    cluster.append([
        topic_record("orders", T1),
        partition_record(T1, 0, (1, 2, 3)),
        partition_record(T1, 1, (2, 3, 1), removing_replicas=[1], adding_replicas=[]),
        topic_record("events", T2),
        partition_record(T2, 0, (3,)),
        config_record(RESOURCE_TOPIC, "orders", "retention.ms", "1000"),
        config_record(RESOURCE_TOPIC, "orders", "cleanup.policy", "compact"),
        config_record(RESOURCE_TOPIC, "events", "segment.bytes", "1048576"),
        config_record(RESOURCE_BROKER, "1", "log.retention.ms", "5"),
        config_record(RESOURCE_BROKER, "", "log.cleaner.threads", "2"),
    ])
    return cluster


def test_replay_builds_topics_partitions_and_configs():
    state = two_topics().state
    topics = state.topics()
    assert sorted(topics) == ["events", "orders"]
    orders = topics["orders"]
    assert isinstance(orders, TopicImage)
    assert orders.topic_id == T1 and orders.name == "orders"
    assert orders.partitions[0] == PartitionImage(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=0,
                                                  partition_epoch=0)
    assert orders.partitions[1].removing_replicas == (1,)
    assert state.topic_by_id(T2).name == "events"
    assert state.topic_by_id(uuid.UUID(int=99)) is None
    assert state.topic("orders") == orders
    assert dict(state.configs(RESOURCE_TOPIC, "orders")) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert dict(state.configs(RESOURCE_BROKER, "")) == {"log.cleaner.threads": "2"}
    assert dict(state.configs(RESOURCE_TOPIC, "missing")) == {}
    assert state.config_resources() == ((RESOURCE_TOPIC, "events"), (RESOURCE_TOPIC, "orders"),
                                        (RESOURCE_BROKER, ""), (RESOURCE_BROKER, "1"))


def test_views_are_read_only_and_do_not_change_under_a_reader():
    cluster = two_topics()
    topics = cluster.state.topics()
    orders = topics["orders"]
    configs = cluster.state.configs(RESOURCE_TOPIC, "orders")
    with pytest.raises(TypeError):
        topics["x"] = orders  # type: ignore[index]
    with pytest.raises(TypeError):
        orders.partitions[5] = orders.partitions[0]  # type: ignore[index]
    with pytest.raises(TypeError):
        configs["x"] = "y"  # type: ignore[index]
    cluster.append([partition_record(T1, 2), config_record(RESOURCE_TOPIC, "orders", "retention.ms", "7"),
                    remove_topic_record(T2)])
    assert sorted(orders.partitions) == [0, 1]
    assert sorted(topics) == ["events", "orders"]
    assert configs["retention.ms"] == "1000"
    assert sorted(cluster.state.topics()["orders"].partitions) == [0, 1, 2]
    assert cluster.state.configs(RESOURCE_TOPIC, "orders")["retention.ms"] == "7"


def test_partition_record_replaces_the_partition():
    cluster = two_topics()
    cluster.append([partition_record(T1, 0, (3, 1), leader=3, epoch=4)])
    partition = cluster.state.topics()["orders"].partitions[0]
    assert (partition.replicas, partition.leader, partition.leader_epoch, partition.partition_epoch) == ((3, 1), 3, 4, 4)


def test_config_value_none_deletes_and_empty_resources_disappear():
    cluster = two_topics()
    cluster.append([config_record(RESOURCE_TOPIC, "events", "segment.bytes", None),
                    config_record(RESOURCE_TOPIC, "orders", "retention.ms", None),
                    config_record(RESOURCE_TOPIC, "orders", "never.set", None)])
    assert (RESOURCE_TOPIC, "events") not in cluster.state.config_resources()
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "orders")) == {"cleanup.policy": "compact"}


def test_remove_topic_drops_partitions_and_topic_configs_only():
    cluster = two_topics()
    cluster.append([remove_topic_record(T1)])
    state = cluster.state
    assert sorted(state.topics()) == ["events"]
    assert state.topic_by_id(T1) is None and state.topic("orders") is None
    assert dict(state.configs(RESOURCE_TOPIC, "orders")) == {}
    assert dict(state.configs(RESOURCE_TOPIC, "events")) == {"segment.bytes": "1048576"}
    assert dict(state.configs(RESOURCE_BROKER, "1")) == {"log.retention.ms": "5"}
    # The name can be used again, with a new id.
    t3 = uuid.UUID(int=0x3333)
    cluster.append([topic_record("orders", t3), partition_record(t3, 0)])
    assert state.topics()["orders"].topic_id == t3
    assert state == cluster.replayed_from_scratch()


@pytest.mark.parametrize("bad", [
    topic_record("orders", uuid.UUID(int=0x9999)),     # name taken by another id
    topic_record("other", T1),                          # id taken
    topic_record("", uuid.UUID(int=0x9999)),            # no name
    topic_record("zero", uuid.UUID(int=0)),             # no id
    partition_record(uuid.UUID(int=0x9999), 0),         # unknown topic
    partition_record(T1, -1),                           # bad index
    remove_topic_record(uuid.UUID(int=0x9999)),         # unknown topic
])
def test_mismatching_records_raise_and_change_nothing(bad):
    cluster = two_topics()
    before = cluster.state.snapshot()
    with pytest.raises(ReplayError):
        cluster.state.replay(bad, cluster.next_offset)
    assert cluster.state.snapshot() == before


def test_aborted_transaction_rolls_back_topics_and_configs():
    cluster = two_topics()
    before = cluster.state.snapshot()
    t3 = uuid.UUID(int=0x3333)
    cluster.append([
        record(mr.BEGIN_TRANSACTION_RECORD, {"name": "zk migration"}),
        topic_record("copied", t3),
        partition_record(t3, 0),
        partition_record(T1, 0, (2,), leader=2, epoch=9),
        config_record(RESOURCE_TOPIC, "orders", "retention.ms", "42"),
        config_record(RESOURCE_BROKER, "7", "x", "y"),
        remove_topic_record(T2),
    ])
    assert "copied" in cluster.state.topics() and "events" not in cluster.state.topics()
    cluster.append([record(mr.ABORT_TRANSACTION_RECORD, {"reason": "controller failed over"})])
    after = cluster.state.snapshot()
    before.pop("last_applied_offset")
    after.pop("last_applied_offset")
    assert after == before
    assert sorted(cluster.state.topics()) == ["events", "orders"]
    assert cluster.state.topics()["orders"].partitions[0].replicas == (1, 2, 3)
    assert cluster.state.configs(RESOURCE_TOPIC, "orders")["retention.ms"] == "1000"
    assert cluster.state == cluster.replayed_from_scratch()


def test_committed_transaction_keeps_topics():
    cluster = two_topics()
    t3 = uuid.UUID(int=0x3333)
    cluster.append([record(mr.BEGIN_TRANSACTION_RECORD, {"name": "copy"}), topic_record("copied", t3),
                    partition_record(t3, 0), record(mr.END_TRANSACTION_RECORD, {})])
    assert "copied" in cluster.state.topics()


def round_trip(state: ControllerState) -> ControllerState:
    return load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)


def test_snapshot_round_trip_with_topics_and_configs():
    cluster = two_topics()
    cluster.register(1, uuid.UUID(int=11))
    cluster.append([partition_record(T2, 1, (1,), directories=[DIR_A])])
    loaded = round_trip(cluster.state)
    assert loaded == cluster.state
    assert loaded.topics()["events"].partitions[1].directories == (DIR_A,)
    names = [item.name for item in snapshot_records(cluster.state)]
    # Every topic's TopicRecord comes before its partitions; configs after all topics.
    assert names.index("TopicRecord") < names.index("PartitionRecord")
    assert max(i for i, n in enumerate(names) if n == "PartitionRecord") < names.index("ConfigRecord")


def test_snapshot_of_a_state_after_deletes_and_overwrites():
    cluster = two_topics()
    for value in range(5):
        cluster.append([config_record(RESOURCE_TOPIC, "orders", "retention.ms", str(value))])
    cluster.append([remove_topic_record(T1)])
    loaded = round_trip(cluster.state)
    assert loaded == cluster.state
    assert loaded.last_applied_offset == cluster.state.last_applied_offset


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "partition", "config", "unset", "remove"]),
                          st.integers(0, 3), st.integers(0, 3)), max_size=25))
def test_snapshot_round_trip_of_random_histories(steps):
    cluster = Cluster.bootstrapped()
    generation = {n: 0 for n in range(4)}
    for kind, n, value in steps:
        name = f"t{n}"
        topic_id = uuid.UUID(int=(generation[n] << 16) | (0x100 + n))
        exists = name in cluster.state.topics()
        if kind == "create" and not exists:
            cluster.append([topic_record(name, topic_id), partition_record(topic_id, 0)])
        elif kind == "partition" and exists:
            cluster.append([partition_record(cluster.state.topics()[name].topic_id, value, (value + 1,))])
        elif kind == "config":
            cluster.append([config_record(RESOURCE_TOPIC, name, f"k{value}", str(value))])
        elif kind == "unset":
            cluster.append([config_record(RESOURCE_TOPIC, name, f"k{value}", None)])
        elif kind == "remove" and exists:
            cluster.append([remove_topic_record(cluster.state.topics()[name].topic_id)])
            generation[n] += 1
    assert round_trip(cluster.state) == cluster.state
    assert cluster.replayed_from_scratch() == cluster.state


def test_lossy_downgrade_drops_partition_directories():
    cluster = Cluster.bootstrapped(mv_level=ft.IBP_3_7_IV2)
    cluster.append([topic_record("orders", T1), partition_record(T1, 0, (1,), directories=[DIR_A]),
                    partition_record(T1, 1, (1,))])
    view_before = cluster.state.topics()["orders"]
    result = cluster.update([(ft.METADATA_VERSION, ft.IBP_3_7_IV0, cmd.UNSAFE_DOWNGRADE)])
    assert result.response["error_code"] == 0, result.response
    partitions = cluster.state.topics()["orders"].partitions
    assert partitions[0].directories == () and partitions[0].replicas == (1,)
    assert view_before.partitions[0].directories == (DIR_A,)  # an old view is not changed
    assert cluster.state == cluster.replayed_from_scratch()
    assert round_trip(cluster.state) == cluster.state


def test_lossless_downgrade_keeps_directories():
    cluster = Cluster.bootstrapped(mv_level=ft.IBP_3_7_IV2 + 1)
    cluster.append([topic_record("orders", T1), partition_record(T1, 0, (1,), directories=[DIR_A])])
    cluster.update([(ft.METADATA_VERSION, ft.IBP_3_7_IV2, cmd.UNSAFE_DOWNGRADE)])
    assert cluster.state.metadata_version == ft.IBP_3_7_IV2
    assert cluster.state.topics()["orders"].partitions[0].directories == (DIR_A,)


def zk_state_record(value: int):
    return record(mr.ZK_MIGRATION_STATE_RECORD, {"zk_migration_state": value})


def test_zk_migration_state_replays_rolls_back_and_snapshots():
    cluster = two_topics()
    assert cluster.state.zk_migration_state == 0
    cluster.append([zk_state_record(2)])
    assert cluster.state.zk_migration_state == 2
    cluster.append([record(mr.BEGIN_TRANSACTION_RECORD, {"name": "copy"}), zk_state_record(1),
                    record(mr.ABORT_TRANSACTION_RECORD, {"reason": "failover"})])
    assert cluster.state.zk_migration_state == 2
    cluster.append([zk_state_record(1)])
    loaded = round_trip(cluster.state)
    assert loaded == cluster.state and loaded.zk_migration_state == 1
    assert "ZkMigrationStateRecord" in [item.name for item in snapshot_records(cluster.state)]
    with pytest.raises(ReplayError):
        cluster.state.replay(zk_state_record(9), cluster.next_offset)
    assert cluster.state.zk_migration_state == 1


@pytest.mark.parametrize("value", [4, 5, -1, 127])
def test_zk_migration_state_outside_the_enum_is_refused_at_replay(value):
    # 4 is Kafka's ZK, which Kafka never persists; the others are not states at all. Refusing
    # them at replay keeps every reader of the image from meeting a value ZkMigrationState lacks.
    cluster = two_topics()
    cluster.append([zk_state_record(2)])
    before = cluster.state.snapshot()
    with pytest.raises(ReplayError, match="unknown state"):
        cluster.state.replay(zk_state_record(value), cluster.next_offset)
    assert cluster.state.snapshot() == before
    assert cluster.state.zk_migration_state is ZkMigrationState.PRE_MIGRATION


def test_lossy_downgrade_below_3_4_drops_the_migration_state():
    cluster = Cluster.bootstrapped(mv_level=ft.IBP_3_4_IV0)
    cluster.append([zk_state_record(1)])
    result = cluster.update([(ft.METADATA_VERSION, ft.IBP_3_4_IV0 - 1, cmd.UNSAFE_DOWNGRADE)])
    assert result.response["error_code"] == 0, result.response
    assert cluster.state.zk_migration_state == 0
    assert cluster.state == cluster.replayed_from_scratch()


def test_unsafe_downgrade_note_names_dropped_partition_directories():
    cluster = Cluster.bootstrapped(mv_level=ft.IBP_3_7_IV2)
    cluster.append([topic_record("orders", T1), partition_record(T1, 0, (1,), directories=[DIR_A]),
                    partition_record(T1, 1, (1,), directories=[DIR_A])])
    result = cluster.update([(ft.METADATA_VERSION, ft.IBP_3_7_IV0, cmd.UNSAFE_DOWNGRADE)], validate_only=True)
    assert "2 partition(s): PartitionRecord.Directories (since 3.7-IV2)" in result.response["error_message"]


def test_the_same_topic_record_again_restarts_the_topic():
    cluster = two_topics()
    cluster.append([topic_record("orders", T1), partition_record(T1, 0, (2,))])
    orders = cluster.state.topics()["orders"]
    assert sorted(orders.partitions) == [0] and orders.partitions[0].replicas == (2,)
    assert dict(cluster.state.configs(RESOURCE_TOPIC, "orders"))["retention.ms"] == "1000"
    assert cluster.state == cluster.replayed_from_scratch()
    assert round_trip(cluster.state) == cluster.state


def test_a_copy_is_equal_and_independent_even_inside_a_transaction():
    from protocol import metadata_records as mr
    from protocol.records import record
    from server.controller import commands as cmd
    from server.controller.state import ControllerState

    state = ControllerState("q1Sh-9_ISia_zwGINzRvyQ")
    offset = 0
    for item in cmd.bootstrap_records(19):
        state.replay(item, offset)
        offset += 1
    topic_id = uuid.UUID(int=7)
    for item in (record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}, 0),
                 record(mr.TOPIC_RECORD, {"name": "inside", "topic_id": topic_id}, 0)):
        state.replay(item, offset)
        offset += 1
    clone = state.copy()
    assert clone == state and clone.in_transaction and clone.transaction_start_offset == state.transaction_start_offset
    # Independent: aborting in the copy rolls the copy back and leaves the original alone.
    clone.replay(record(mr.ABORT_TRANSACTION_RECORD, {"reason": "test"}, 0), offset)
    assert clone.topic("inside") is None and not clone.in_transaction
    assert state.topic("inside") is not None and state.in_transaction


def test_lossy_downgrade_below_3_5_iv2_drops_scram_credentials_and_says_so():
    cluster = Cluster.bootstrapped(mv_level=11)  # 3.5-IV2: SCRAM credentials in the log
    cluster.append([record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
        "name": "alice", "mechanism": 1, "salt": b"salt", "stored_key": b"k" * 32, "server_key": b"s" * 32,
        "iterations": 4096})])
    assert cluster.state.scram_credential("alice", 1) is not None
    dry = cluster.update([(ft.METADATA_VERSION, 10, cmd.UNSAFE_DOWNGRADE)], validate_only=True)
    assert "1 SCRAM user(s): UserScramCredentialRecord (since 3.5-IV2): alice" in dry.response["error_message"]
    assert cluster.state.scram_credential("alice", 1) is not None  # a dry run changes nothing
    result = cluster.update([(ft.METADATA_VERSION, 10, cmd.UNSAFE_DOWNGRADE)])
    assert result.response["error_code"] == 0, result.response
    assert cluster.state.scram_credentials() == {}
    assert cluster.state == cluster.replayed_from_scratch()
    # A lossless step between levels that both hold SCRAM keeps them.
    other = Cluster.bootstrapped(mv_level=12)
    other.append([record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
        "name": "bob", "mechanism": 2, "salt": b"salt", "stored_key": b"k" * 64, "server_key": b"s" * 64,
        "iterations": 4096})])
    other.update([(ft.METADATA_VERSION, 11, cmd.UNSAFE_DOWNGRADE)])
    assert other.state.scram_credential("bob", 2) is not None
