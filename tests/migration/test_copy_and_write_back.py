"""The copy (ZooKeeper -> records) and the write-back (image -> ZooKeeper writes) are
inverse: a ZooKeeper cluster copied into the log and replayed needs no write at all to
make ZooKeeper equal the image again. And after a change, exactly the changed znodes are
written, once."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.records import record
from server.controller import commands as cmd
from server.controller.state import ControllerState
from server.migration import copy as mcopy
from server.migration.state import ZkMigrationState
from server.migration.zk_sync import (
    Scope,
    desired_broker_configs,
    desired_features,
    desired_topics,
    plan_writes,
    touched_scope,
)
from server.zk import paths as zp

MV = 19
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
BROKER_IDS = (1, 2, 3, 4)
CONTROLLER_EPOCH = 7


def broker_znode(broker_id: int) -> zp.BrokerRegistrationZnode:
    return zp.BrokerRegistrationZnode(
        host="127.0.0.1", port=9000 + broker_id, endpoints=(zp.Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack=None, jmx_port=-1,
        timestamp_ms=1_700_000_000_000 + broker_id,
        features={"metadata.version": zp.SupportedFeatureRange(1, 19)})


config_maps = st.dictionaries(st.sampled_from(["retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas"]),
                              st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), max_size=3)


@st.composite
def partitions(draw):
    replicas = tuple(draw(st.permutations(BROKER_IDS))[:draw(st.integers(1, 3))])
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = isr[0]
    state = zp.PartitionStateZnode(leader=leader, leader_epoch=draw(st.integers(0, 5)), isr=isr,
                                   controller_epoch=draw(st.integers(1, 3)))
    return replicas, state


@st.composite
def zk_images(draw):
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True), unique=True, max_size=5))
    ids = draw(st.lists(st.uuids(), min_size=len(names), max_size=len(names), unique=True))
    topics, topic_configs = {}, {}
    for name, topic_id in zip(names, ids):
        parts = draw(st.lists(partitions(), min_size=1, max_size=4))
        assignment = zp.TopicZnode(topic_id=zp.kafka_uuid_string(topic_id),
                                   partitions={i: p[0] for i, p in enumerate(parts)})
        topics[name] = zp.ZkTopicImage(name, assignment, {i: p[1] for i, p in enumerate(parts)})
        topic_configs[name] = zp.ConfigZnode(draw(config_maps))
    broker_configs = {}
    for zk_name in draw(st.lists(st.sampled_from(["<default>", "1", "2", "3"]), unique=True, max_size=3)):
        config = draw(config_maps)
        if config:
            broker_configs[zk_name] = zp.ConfigZnode(config)
    return zp.ZkClusterImage(
        cluster_id=CLUSTER, brokers={b: broker_znode(b) for b in BROKER_IDS}, topics=topics,
        topic_configs=topic_configs, broker_configs=broker_configs, features=None, controller=None,
        controller_epoch=None, migration=None, migration_version=None)


def migrated_state(image: zp.ZkClusterImage) -> ControllerState:
    """A controller state after bootstrap and the copy, replayed record by record."""
    state = ControllerState(CLUSTER)
    offset = 0
    for item in cmd.bootstrap_records(MV):
        state.replay(item, offset)
        offset += 1
    state.replay(mcopy.migration_state_record(ZkMigrationState.PRE_MIGRATION), offset)
    offset += 1
    plan = mcopy.plan_copy(image, known_features=set())
    records = [mcopy.begin_record()] + mcopy.broker_records(plan, offset + 1, MV)
    for chunk in mcopy.copy_chunks(plan, chunk_records=7):
        records += chunk
    records += [mcopy.migration_state_record(ZkMigrationState.MIGRATION), mcopy.end_record()]
    for item in records:
        state.replay(item, offset)
        offset += 1
    return state


def writes_for(state: ControllerState, image: zp.ZkClusterImage, scope: Scope):
    return plan_writes(scope, desired_topics=desired_topics(state, CONTROLLER_EPOCH),
                       desired_broker_configs=desired_broker_configs(state), desired_features=desired_features(state),
                       actual_topics=image.topics, actual_topic_configs=image.topic_configs,
                       actual_broker_configs=image.broker_configs, actual_features=image.features)


@settings(max_examples=150, deadline=None)
@given(zk_images())
def test_a_copied_cluster_needs_no_write_back(image):
    state = migrated_state(image)
    assert not state.in_transaction
    assert sorted(state.topics()) == sorted(image.topics)
    for broker_id in BROKER_IDS:
        registration = state.broker(broker_id)
        assert registration.is_migrating_zk_broker and not registration.fenced
    # Everything but /features (ZooKeeper has none; the quorum's levels go there next).
    assert writes_for(state, image, Scope(everything=True)) == []
    feature_writes = writes_for(state, image, Scope.all())
    assert [(w.kind, w.path) for w in feature_writes] == [("create", zp.FEATURES_PATH)]


def test_a_config_change_writes_that_config_and_one_notification():
    topic_id = uuid.uuid4()
    image = zp.ZkClusterImage(
        cluster_id=CLUSTER, brokers={b: broker_znode(b) for b in BROKER_IDS},
        topics={"orders": zp.ZkTopicImage("orders", zp.TopicZnode(zp.kafka_uuid_string(topic_id), {0: (1, 2)}),
                                          {0: zp.PartitionStateZnode(1, 0, (1, 2), 1)})},
        topic_configs={"orders": zp.ConfigZnode({"retention.ms": "1000"})}, broker_configs={}, features=None,
        controller=None, controller_epoch=None, migration=None, migration_version=None)
    state = migrated_state(image)
    change = record(mr.CONFIG_RECORD, {"resource_type": 2, "resource_name": "orders", "name": "retention.ms",
                                       "value": "2000"}, 0)
    state.replay(change, state.last_applied_offset + 1)
    names = {topic_id: "orders"}
    scope = touched_scope([change], names)
    assert scope.topics == frozenset({"orders"})
    writes = writes_for(state, image, scope)
    assert [(w.kind, w.path) for w in writes] == [
        ("set", "/config/topics/orders"), ("create", "/config/changes/config_change_")]
    # The write-behind computes only the batch's part of the image: the same writes.
    scoped = plan_writes(scope, desired_topics=desired_topics(state, CONTROLLER_EPOCH, scope.topics),
                         desired_broker_configs=desired_broker_configs(state, scope.broker_configs),
                         desired_features=desired_features(state), actual_topics=image.topics,
                         actual_topic_configs=image.topic_configs, actual_broker_configs=image.broker_configs,
                         actual_features=image.features)
    assert scoped == writes
    assert set(desired_topics(state, CONTROLLER_EPOCH, {"orders", "gone"})) == {"orders"}
    assert zp.ConfigZnode.decode(writes[0].data).config == {"retention.ms": "2000"}


def test_a_new_topic_and_a_deleted_topic():
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    image = zp.ZkClusterImage(
        cluster_id=CLUSTER, brokers={b: broker_znode(b) for b in BROKER_IDS},
        topics={"old": zp.ZkTopicImage("old", zp.TopicZnode(zp.kafka_uuid_string(old_id), {0: (1,)}),
                                       {0: zp.PartitionStateZnode(1, 0, (1,), 1)})},
        topic_configs={"old": zp.ConfigZnode({})}, broker_configs={}, features=None,
        controller=None, controller_epoch=None, migration=None, migration_version=None)
    state = migrated_state(image)
    changes = [
        record(mr.TOPIC_RECORD, {"name": "new", "topic_id": new_id}, 0),
        record(mr.PARTITION_RECORD, {"partition_id": 0, "topic_id": new_id, "replicas": [2, 3], "isr": [2, 3],
                                     "leader": 2, "leader_epoch": 0, "partition_epoch": 0}, 0),
        record(mr.REMOVE_TOPIC_RECORD, {"topic_id": old_id}, 0),
    ]
    for item in changes:
        state.replay(item, state.last_applied_offset + 1)
    scope = touched_scope(changes, {old_id: "old"})
    assert scope.topics == frozenset({"new", "old"})
    writes = [(w.kind, w.path) for w in writes_for(state, image, scope)]
    assert writes == [
        ("create", "/brokers/topics/new"), ("create", "/brokers/topics/new/partitions"),
        ("create", "/brokers/topics/new/partitions/0"), ("create", "/brokers/topics/new/partitions/0/state"),
        ("create", "/config/topics/new"),
        ("delete", "/brokers/topics/old/partitions/0/state"), ("delete", "/brokers/topics/old/partitions/0"),
        ("delete", "/brokers/topics/old/partitions"), ("delete", "/brokers/topics/old"),
        ("delete", "/config/topics/old"),
    ]


def test_a_damaged_zookeeper_with_a_repeated_topic_id_is_copied_and_then_repaired():
    shared = uuid.uuid4()
    topic = lambda name: zp.ZkTopicImage(name, zp.TopicZnode(zp.kafka_uuid_string(shared), {0: (1,)}),  # noqa: E731
                                         {0: zp.PartitionStateZnode(1, 0, (1,), 1)})
    image = zp.ZkClusterImage(
        cluster_id=CLUSTER, brokers={b: broker_znode(b) for b in BROKER_IDS}, topics={"a": topic("a"), "b": topic("b")},
        topic_configs={"a": zp.ConfigZnode({}), "b": zp.ConfigZnode({})}, broker_configs={}, features=None,
        controller=None, controller_epoch=None, migration=None, migration_version=None)
    state = migrated_state(image)
    assert state.topic("a").topic_id == shared and state.topic("b").topic_id != shared
    # The write-back gives "b" its new id in ZooKeeper: delete and re-create, nothing else.
    writes = [(w.kind, w.path) for w in writes_for(state, image, Scope(everything=True))]
    assert ("create", "/brokers/topics/b") in writes and all("/a" not in path for _, path in writes)
