"""AssignReplicasToDirs (KIP-858) in the controller core: where new replicas start
(Kafka's defaultDir), the broker's report of the directories it chose, Kafka's refusals
and per-partition error codes, the PartitionChangeRecord written and its replay, repeated
reports that write nothing, and replicas placed in an offline directory leaving the ISR."""

from __future__ import annotations

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.api_keys import ApiKey
from protocol.apis import assign_replicas_to_dirs as api
from protocol.apis import create_topics
from protocol.errors import ErrorCode
from protocol.records import record
from server.api.catalog import CATALOG
from server.controller import commands as cmd
from server.controller import topics as tp
from server.controller.directory_assignment import assign_replicas_to_dirs, has_online_dir
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import (
    DIRECTORY_LOST,
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    PartitionImage,
)

from .helpers import CLUSTER_ID, FULL_BROKER_FEATURES, Cluster, decoded

TOPIC_ID = uuid.UUID(int=0xA1 << 64)
OTHER_TOPIC_ID = uuid.UUID(int=0xB2 << 64)


def dirs(broker_id: int) -> tuple[uuid.UUID, uuid.UUID]:
    """The two log directories broker `broker_id` registers (ids above Kafka's reserved 100)."""
    return uuid.UUID(int=(broker_id << 64) | 0xD1), uuid.UUID(int=(broker_id << 64) | 0xD2)


SINGLE_DIR_BROKER = 4


def jbod_cluster(mv_level: int = 22, replicas=(1, 2, 3), partitions: int = 2) -> Cluster:
    """Brokers 1-3 with two log directories each, broker 4 with one, all unfenced; topic
    "t" (TOPIC_ID) created by the CreateTopics command with `partitions` partitions on
    `replicas`."""
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    for broker_id in (1, 2, 3, SINGLE_DIR_BROKER):
        log_dirs = list(dirs(broker_id)[:1] if broker_id == SINGLE_DIR_BROKER else dirs(broker_id))
        cluster.register(broker_id, uuid.UUID(int=broker_id), log_dirs=log_dirs,
                         features={**FULL_BROKER_FEATURES, "metadata.version": (1, max(22, mv_level))})
        cluster.heartbeat(broker_id, cluster.state.broker(broker_id).epoch)
        assert not cluster.state.broker(broker_id).fenced
    create(cluster, "t", TOPIC_ID, [list(replicas)] * partitions)
    return cluster


def create(cluster: Cluster, name: str, topic_id: uuid.UUID, assignments: list[list[int]]) -> None:
    body = decoded(create_topics.REQUEST, 7, timeout_ms=1000, validate_only=False, topics=[{
        "name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
        "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignments)]}])
    result = cluster.run(tp.create_topics(cluster.state, body, 7, lambda: topic_id))
    assert result.response["topics"][0]["error_code"] == 0, result.response


def partition(cluster: Cluster, index: int = 0, name: str = "t") -> PartitionImage:
    return cluster.state.topic(name).partitions[index]


def request(broker_id: int, broker_epoch: int, assignments: list[tuple[uuid.UUID, uuid.UUID, list[int]]]):
    """assignments: (directory, topic id, partition indexes), one directory entry each."""
    return decoded(api.REQUEST, 0, broker_id=broker_id, broker_epoch=broker_epoch, directories=[
        {"id": directory, "topics": [{"topic_id": topic_id,
                                      "partitions": [{"partition_index": i} for i in indexes]}]}
        for directory, topic_id, indexes in assignments])


def assign(cluster: Cluster, broker_id: int, assignments, broker_epoch: int | None = None):
    if broker_epoch is None:
        broker_epoch = cluster.state.broker(broker_id).epoch
    result = assign_replicas_to_dirs(cluster.state, request(broker_id, broker_epoch, assignments), cluster.config)
    # The response must encode (v0 is the only version).
    api.RESPONSE.encode(0, result.response)
    return cluster.run(result)


def codes(result) -> list[tuple[uuid.UUID, uuid.UUID, int, int]]:
    """(directory, topic id, partition, error code) in response order."""
    return [(d["id"], t["topic_id"], p["partition_index"], p["error_code"])
            for d in result.response["directories"] for t in d["topics"] for p in t["partitions"]]


def assert_consistent(cluster: Cluster) -> None:
    assert cluster.replayed_from_scratch() == cluster.state
    loaded = load_snapshot(encode_snapshot_records(cluster.state), cluster.state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == cluster.state


# ---- where new replicas start ------------------------------------------------------


def test_kafkas_reserved_directory_ids():
    # Kafka's DirectoryId: MIGRATING = Uuid(0, 0), UNASSIGNED = Uuid(0, 1), LOST = Uuid(0, 2).
    assert (DIRECTORY_MIGRATING.int, DIRECTORY_UNASSIGNED.int, DIRECTORY_LOST.int) == (0, 1, 2)


def test_new_replicas_start_unassigned_on_brokers_with_several_directories():
    cluster = jbod_cluster(replicas=(1, SINGLE_DIR_BROKER))
    # The single-directory broker's replica is placed at once; the other waits for its broker.
    assert partition(cluster).directories == (DIRECTORY_UNASSIGNED, dirs(SINGLE_DIR_BROKER)[0])


def test_new_replicas_on_a_broker_that_registered_no_directories_are_migrating():
    # Registered below 3.7-IV2 (no LogDirs), then metadata.version moved up.
    cluster = Cluster.bootstrapped(mv_level=16)
    cluster.register(1, uuid.UUID(int=1), version=1)
    cluster.heartbeat(1, cluster.state.broker(1).epoch)
    assert cluster.update([("metadata.version", 22, cmd.UPGRADE)]).response["error_code"] == 0
    create(cluster, "t", TOPIC_ID, [[1]])
    assert cluster.state.broker(1).log_dirs == ()
    assert partition(cluster).directories == (DIRECTORY_MIGRATING,)


# ---- the assignment ------------------------------------------------------------------


def test_an_assignment_writes_one_change_per_partition_and_replays():
    cluster = jbod_cluster()
    before = partition(cluster)
    first, second = dirs(2)
    result = assign(cluster, 2, [(first, TOPIC_ID, [0]), (second, TOPIC_ID, [1])])
    assert result.response["error_code"] == 0 and result.error_message is None
    assert codes(result) == [(first, TOPIC_ID, 0, 0), (second, TOPIC_ID, 1, 0)]
    assert [r.name for r in result.records] == ["PartitionChangeRecord"] * 2
    assert result.records[0].version == 1  # metadata.version 4.0-IV0: Directories, no ELR
    assert result.records[0].data == {"topic_id": TOPIC_ID, "partition_id": 0,
                                      "directories": [DIRECTORY_UNASSIGNED, first, DIRECTORY_UNASSIGNED]}
    assert result.records[1].data["directories"] == [DIRECTORY_UNASSIGNED, second, DIRECTORY_UNASSIGNED]
    # Only the directories (and the partition epoch) change: brokers need no new leader epoch.
    assert partition(cluster) == PartitionImage(
        replicas=before.replicas, isr=before.isr, leader=before.leader, leader_epoch=before.leader_epoch,
        partition_epoch=before.partition_epoch + 1, directories=(DIRECTORY_UNASSIGNED, first, DIRECTORY_UNASSIGNED))
    assert partition(cluster, 1).directories == (DIRECTORY_UNASSIGNED, second, DIRECTORY_UNASSIGNED)
    assert_consistent(cluster)


@pytest.mark.parametrize("mv_level, record_version", [(17, 1), (22, 1), (23, 2)])
def test_the_change_record_version_follows_metadata_version(mv_level, record_version):
    cluster = jbod_cluster(mv_level=mv_level)
    result = assign(cluster, 1, [(dirs(1)[1], TOPIC_ID, [0])])
    assert [r.version for r in result.records] == [record_version]
    assert partition(cluster).directories[0] == dirs(1)[1]


def test_every_replica_reports_its_own_directory():
    cluster = jbod_cluster()
    for broker_id in (3, 1, 2):
        assign(cluster, broker_id, [(dirs(broker_id)[0], TOPIC_ID, [0])])
    assert partition(cluster).directories == tuple(dirs(b)[0] for b in (1, 2, 3))
    assert partition(cluster).partition_epoch == 3
    assert_consistent(cluster)


def test_the_same_assignment_again_writes_nothing():
    cluster = jbod_cluster()
    assign(cluster, 1, [(dirs(1)[0], TOPIC_ID, [0, 1])])
    image = cluster.state.topic("t")
    again = assign(cluster, 1, [(dirs(1)[0], TOPIC_ID, [0, 1])])
    assert again.records == []
    assert codes(again) == [(dirs(1)[0], TOPIC_ID, 0, 0), (dirs(1)[0], TOPIC_ID, 1, 0)]
    assert cluster.state.topic("t") == image


def test_a_move_to_the_other_directory_is_recorded():
    cluster = jbod_cluster()
    assign(cluster, 1, [(dirs(1)[0], TOPIC_ID, [0])])
    moved = assign(cluster, 1, [(dirs(1)[1], TOPIC_ID, [0])])
    assert [r.data.get("directories") for r in moved.records] == [
        [dirs(1)[1], DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED]]
    assert partition(cluster).directories[0] == dirs(1)[1]


def test_a_partition_named_twice_gets_two_changes_and_the_later_wins():
    cluster = jbod_cluster()
    result = assign(cluster, 1, [(dirs(1)[0], TOPIC_ID, [0]), (dirs(1)[1], TOPIC_ID, [0])])
    assert len(result.records) == 2
    assert partition(cluster).directories[0] == dirs(1)[1]


def test_a_partition_from_before_directory_assignment_gets_its_first_directories():
    # Created at 3.7-IV1 (PartitionRecord v0, no Directories): every replica is MIGRATING.
    cluster = Cluster.bootstrapped(mv_level=16)
    for broker_id in (1, 2):
        cluster.register(broker_id, uuid.UUID(int=broker_id), version=1)
        cluster.heartbeat(broker_id, cluster.state.broker(broker_id).epoch)
    create(cluster, "t", TOPIC_ID, [[1, 2]])
    assert partition(cluster).directories == ()
    cluster.update([("metadata.version", 22, cmd.UPGRADE)])
    cluster.register(1, uuid.UUID(int=1), log_dirs=list(dirs(1)))  # same incarnation, now with directories
    result = assign(cluster, 1, [(dirs(1)[1], TOPIC_ID, [0])])
    assert [r.data["directories"] for r in result.records] == [[dirs(1)[1], DIRECTORY_MIGRATING]]
    assert partition(cluster).directories == (dirs(1)[1], DIRECTORY_MIGRATING)
    # Reporting MIGRATING for a partition without directories changes nothing.
    assert assign(cluster, 2, [(DIRECTORY_MIGRATING, TOPIC_ID, [0])]).records == []
    assert_consistent(cluster)


# ---- refusals -----------------------------------------------------------------------


@pytest.mark.parametrize("broker_id, epoch_delta, message", [
    (9, 0, "No broker registration found for broker id 9"),
    (1, 1, "Expected broker epoch {epoch}, but got broker epoch {wrong}"),
    (1, -1, "Expected broker epoch {epoch}, but got broker epoch {wrong}"),
])
def test_a_broker_not_registered_at_that_epoch_is_refused_whole(broker_id, epoch_delta, message):
    cluster = jbod_cluster()
    epoch = cluster.state.broker(1).epoch
    wrong = epoch + epoch_delta
    result = assign(cluster, broker_id, [(dirs(1)[0], TOPIC_ID, [0])], broker_epoch=wrong)
    assert result.records == []
    assert result.response == {"throttle_time_ms": 0, "error_code": ErrorCode.STALE_BROKER_EPOCH, "directories": []}
    assert result.error_message == message.format(epoch=epoch, wrong=wrong)


def test_before_3_7_iv2_the_request_is_unsupported():
    cluster = Cluster.bootstrapped(mv_level=16)
    cluster.register(1, uuid.UUID(int=1), version=1)
    result = assign(cluster, 1, [(dirs(1)[0], TOPIC_ID, [0])])
    assert result.records == []
    assert result.response["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert result.response["directories"] == []
    assert result.error_message == "Directory assignment is not supported yet."


def test_each_partition_is_answered_on_its_own_in_request_order():
    cluster = jbod_cluster(replicas=(1, 2))
    create(cluster, "other", OTHER_TOPIC_ID, [[2, 3]])
    first = dirs(1)[0]
    unknown_topic = uuid.UUID(int=0xEE << 64)
    result = assign(cluster, 1, [
        (first, unknown_topic, [0, 1]),   # no such topic: every partition UNKNOWN_TOPIC_ID
        (first, TOPIC_ID, [7, 1]),        # no partition 7
        (first, OTHER_TOPIC_ID, [0]),     # broker 1 is not a replica
    ])
    assert result.response["error_code"] == 0
    assert codes(result) == [
        (first, unknown_topic, 0, ErrorCode.UNKNOWN_TOPIC_ID), (first, unknown_topic, 1, ErrorCode.UNKNOWN_TOPIC_ID),
        (first, TOPIC_ID, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (first, TOPIC_ID, 1, 0),
        (first, OTHER_TOPIC_ID, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ]
    # Only the one accepted partition is written.
    assert [(r.data["topic_id"], r.data["partition_id"]) for r in result.records] == [(TOPIC_ID, 1)]
    assert partition(cluster, 1).directories == (first, DIRECTORY_UNASSIGNED)
    assert partition(cluster, 0).directories == (DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED)
    assert partition(cluster, 0, "other").directories == (DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED)
    assert result.error_message == (f"unknown topic id {unknown_topic}; unknown topic id {unknown_topic}; "
                                    "unknown partition t-7; other-0 is not assigned to it")


def test_a_refusal_from_the_dispatcher_has_the_top_level_code_only():
    # NOT_CONTROLLER, KAFKA_STORAGE_ERROR, ...: the catalog's error response for this API.
    body = CATALOG[ApiKey.ASSIGN_REPLICAS_TO_DIRS].error_response(None, 0, ErrorCode.NOT_CONTROLLER, "standby")
    assert body == {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "directories": []}
    api.RESPONSE.encode(0, body)


# ---- offline directories ----------------------------------------------------------------


def test_online_directories():
    cluster = jbod_cluster()
    registration = cluster.state.broker(1)
    assert has_online_dir(registration, dirs(1)[0]) and has_online_dir(registration, dirs(1)[1])
    assert has_online_dir(registration, DIRECTORY_UNASSIGNED) and has_online_dir(registration, DIRECTORY_MIGRATING)
    assert not has_online_dir(registration, DIRECTORY_LOST)
    assert not has_online_dir(registration, dirs(2)[0])  # another broker's
    # A broker that registered no directories is trusted with any.
    legacy = Cluster.bootstrapped(mv_level=16)
    legacy.register(1, uuid.UUID(int=1), version=1)
    assert has_online_dir(legacy.state.broker(1), dirs(2)[0])


def test_a_replica_put_in_an_offline_directory_leaves_the_isr_and_the_leadership():
    cluster = jbod_cluster()
    assert (partition(cluster).leader, partition(cluster).isr) == (1, (1, 2, 3))
    gone = uuid.UUID(int=(1 << 64) | 0xD9)  # not one broker 1 registered
    result = assign(cluster, 1, [(gone, TOPIC_ID, [0])])
    assert codes(result) == [(gone, TOPIC_ID, 0, 0)]
    assert [r.data for r in result.records] == [
        {"topic_id": TOPIC_ID, "partition_id": 0, "directories": [gone, DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED]},
        {"topic_id": TOPIC_ID, "partition_id": 0, "leader": 2, "isr": [2, 3]},
    ]
    image = partition(cluster)
    assert (image.leader, image.isr, image.leader_epoch, image.partition_epoch) == (2, (2, 3), 1, 2)
    assert image.directories == (gone, DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED)
    # Partition 1, not named, is untouched.
    assert (partition(cluster, 1).leader, partition(cluster, 1).isr) == (1, (1, 2, 3))
    assert_consistent(cluster)


def test_lost_is_offline_and_a_follower_outside_the_isr_only_moves():
    cluster = jbod_cluster()
    # Broker 3 is out of partition 0's ISR already.
    cluster.append([record(mr.PARTITION_CHANGE_RECORD, {"topic_id": TOPIC_ID, "partition_id": 0, "isr": [1, 2]},
                           version=1)])
    result = assign(cluster, 3, [(DIRECTORY_LOST, TOPIC_ID, [0]), (DIRECTORY_LOST, TOPIC_ID, [1])])
    # Partition 0: the directory only; partition 1: the directory, then the ISR without 3.
    assert [(r.data["partition_id"], sorted(set(r.data) - {"topic_id", "partition_id"})) for r in result.records] == [
        (0, ["directories"]), (1, ["directories"]), (1, ["isr"])]
    assert partition(cluster, 0).isr == (1, 2) and partition(cluster, 1).isr == (1, 2)
    assert partition(cluster, 1).directories[2] == DIRECTORY_LOST
    assert_consistent(cluster)


def test_the_last_isr_member_keeps_its_place_in_an_offline_directory():
    # The ISR never becomes empty (the partition then has no leader).
    cluster = jbod_cluster(replicas=(1,), partitions=1)
    result = assign(cluster, 1, [(DIRECTORY_LOST, TOPIC_ID, [0])])
    assert [r.data for r in result.records] == [
        {"topic_id": TOPIC_ID, "partition_id": 0, "directories": [DIRECTORY_LOST]},
        {"topic_id": TOPIC_ID, "partition_id": 0, "leader": -1}]
    assert (partition(cluster).leader, partition(cluster).isr) == (-1, (1,))
