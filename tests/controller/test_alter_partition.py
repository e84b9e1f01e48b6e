"""AlterPartition (KIP-497/841/903) and PartitionChangeRecord in the controller core:
Kafka's checks and error codes in Kafka's order, the epochs a change bumps, leader
recovery, reassignment completion, replay of the change records and snapshots that
carry the resulting PartitionRecord."""

from __future__ import annotations

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.apis import alter_partition as api
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller.alter_partition import alter_partition
from server.controller.partitions import RECOVERED, RECOVERING
from server.controller.snapshot import encode_snapshot_records, load_snapshot, snapshot_records
from server.controller.state import PartitionImage, ReplayError

from .helpers import CLUSTER_ID, FULL_BROKER_FEATURES, Cluster, decoded

TOPIC_ID = uuid.UUID(int=0xA1)
OTHER_TOPIC_ID = uuid.UUID(int=0xB2)


def directory(broker_id: int) -> uuid.UUID:
    # helpers.registration_request's default log directory of a broker.
    return uuid.UUID(int=(broker_id + 1) << 64 | 7)


def cluster_with_partition(mv_level: int = 22, replicas=(1, 2, 3), isr=None, leader: int = 1,
                           brokers=(1, 2, 3, 4), **partition) -> Cluster:
    """Registered, unfenced brokers and topic "t" (TOPIC_ID) with partition 0."""
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    for broker_id in brokers:
        cluster.register(broker_id, uuid.UUID(int=broker_id),
                         features={**FULL_BROKER_FEATURES, "metadata.version": (1, max(22, mv_level))})
    for broker_id in brokers:
        cluster.heartbeat(broker_id, cluster.state.broker(broker_id).epoch)
    assert all(not cluster.state.broker(b).fenced for b in brokers)
    data = {"topic_id": TOPIC_ID, "partition_id": 0, "replicas": list(replicas),
            "isr": list(replicas if isr is None else isr), "leader": leader, "leader_epoch": 5,
            "partition_epoch": 10, **partition}
    version = 0
    if mv_level >= 17:
        data.setdefault("directories", [directory(b) for b in replicas])
        version = 1
    cluster.append([record(mr.TOPIC_RECORD, {"name": "t", "topic_id": TOPIC_ID}, version=0),
                    record(mr.PARTITION_RECORD, data, version=version)])
    return cluster


def partition(cluster: Cluster, index: int = 0) -> PartitionImage:
    return cluster.state.topic("t").partitions[index]


def request(cluster: Cluster, isr, *, broker_id: int = 1, broker_epoch: int | None = None, version: int = 3,
            leader_epoch: int = 5, partition_epoch: int = 10, recovery: int = RECOVERED,
            topic_id: uuid.UUID = TOPIC_ID, index: int = 0, member_epochs: dict | None = None):
    if broker_epoch is None:
        broker_epoch = cluster.state.broker(broker_id).epoch
    entry = {"partition_index": index, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
             "leader_recovery_state": recovery}
    if version >= 3:
        epochs = member_epochs or {}
        entry["new_isr_with_epochs"] = [
            {"broker_id": b, "broker_epoch": epochs.get(b, cluster.state.broker(b).epoch
                                                         if cluster.state.broker(b) else -1)} for b in isr]
    else:
        entry["new_isr"] = list(isr)
    return decoded(api.REQUEST, version, broker_id=broker_id, broker_epoch=broker_epoch,
                   topics=[{"topic_id": topic_id, "partitions": [entry]}])


def alter(cluster: Cluster, isr, version: int = 3, **kwargs):
    result = alter_partition(cluster.state, request(cluster, isr, version=version, **kwargs), version,
                             cluster.config)
    # The response must encode at the version asked.
    api.RESPONSE.encode(version, result.response)
    return cluster.run(result)


def only(result) -> dict:
    [topic] = result.response["topics"]
    [answer] = topic["partitions"]
    return answer


@pytest.mark.parametrize("version", [2, 3])
def test_a_shrink_writes_one_change_and_answers_the_new_state(version):
    cluster = cluster_with_partition()
    result = alter(cluster, [1, 2], version=version)
    assert [r.name for r in result.records] == ["PartitionChangeRecord"]
    change = result.records[0]
    assert change.version == 1  # metadata.version 4.0-IV0 (22): Directories, no ELR yet
    assert change.data == {"topic_id": TOPIC_ID, "partition_id": 0, "isr": [1, 2]}
    # From 3.6-IV0 a shrink bumps the partition epoch only (KAFKA-15021).
    assert partition(cluster) == PartitionImage(replicas=(1, 2, 3), isr=(1, 2), leader=1, leader_epoch=5,
                                                partition_epoch=11, directories=tuple(map(directory, (1, 2, 3))))
    assert result.response["error_code"] == 0
    assert result.response["topics"][0]["topic_id"] == TOPIC_ID
    assert only(result) == {"partition_index": 0, "error_code": 0, "leader_id": 1, "leader_epoch": 5,
                            "isr": [1, 2], "leader_recovery_state": 0, "partition_epoch": 11}
    assert result.error_message is None


@pytest.mark.parametrize("mv_level, record_version", [(7, 0), (17, 1), (23, 2)])
def test_the_change_record_version_follows_metadata_version(mv_level, record_version):
    cluster = cluster_with_partition(mv_level=mv_level)
    assert alter(cluster, [1, 3]).records[0].version == record_version


@pytest.mark.parametrize("mv_level, leader_epoch", [(11, 6), (12, 5)])
def test_before_3_6_a_shrink_also_bumps_the_leader_epoch(mv_level, leader_epoch):
    cluster = cluster_with_partition(mv_level=mv_level)
    answer = only(alter(cluster, [1, 3]))
    assert (answer["leader_epoch"], answer["partition_epoch"]) == (leader_epoch, 11)
    assert partition(cluster).leader_epoch == leader_epoch


def test_an_expansion_never_bumps_the_leader_epoch():
    cluster = cluster_with_partition(mv_level=11, isr=(1,))
    answer = only(alter(cluster, [1, 3, 2]))
    assert answer["isr"] == [1, 3, 2]  # the leader's order is kept
    assert (answer["leader_epoch"], answer["partition_epoch"]) == (5, 11)


def test_the_same_isr_writes_nothing_and_answers_the_current_state():
    cluster = cluster_with_partition(isr=(1, 2))
    result = alter(cluster, [1, 2])
    assert result.records == []
    assert only(result) == {"partition_index": 0, "error_code": 0, "leader_id": 1, "leader_epoch": 5,
                            "isr": [1, 2], "leader_recovery_state": 0, "partition_epoch": 10}


def test_the_answer_carries_the_epochs_a_second_change_must_name():
    cluster = cluster_with_partition()
    first = only(alter(cluster, [1, 2]))
    stale = only(alter(cluster, [1]))  # still names partition epoch 10
    assert stale["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    second = only(alter(cluster, [1], partition_epoch=first["partition_epoch"]))
    assert (second["error_code"], second["isr"], second["partition_epoch"]) == (0, [1], 12)


@pytest.mark.parametrize("broker_id, epoch_delta, message", [
    (9, 0, "No broker registration found for broker id 9"),
    (1, 1, "Expected broker epoch {epoch}, but got broker epoch {wrong}"),
])
def test_a_stale_broker_epoch_refuses_the_whole_request(broker_id, epoch_delta, message):
    cluster = cluster_with_partition()
    epoch = cluster.state.broker(1).epoch
    wrong = epoch + epoch_delta
    body = request(cluster, [1, 2], broker_epoch=wrong)
    body.broker_id = broker_id
    result = alter_partition(cluster.state, body, 3, cluster.config)
    assert result.records == []
    assert result.response == {"throttle_time_ms": 0, "error_code": ErrorCode.STALE_BROKER_EPOCH, "topics": []}
    assert result.error_message == message.format(epoch=epoch, wrong=wrong)


def test_an_unknown_topic_id_refuses_each_of_its_partitions():
    cluster = cluster_with_partition()
    result = alter(cluster, [1, 2], topic_id=OTHER_TOPIC_ID)
    assert result.records == []
    assert result.response["topics"][0]["topic_id"] == OTHER_TOPIC_ID
    assert only(result)["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
    assert "unknown topic id" in result.error_message


@pytest.mark.parametrize("change, code", [
    ({"index": 7}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    # Epochs above the controller's: it is behind, the leader must find the new one.
    ({"leader_epoch": 6}, ErrorCode.NOT_CONTROLLER),
    ({"partition_epoch": 11}, ErrorCode.NOT_CONTROLLER),
    ({"leader_epoch": 4}, ErrorCode.FENCED_LEADER_EPOCH),
    # The leader-epoch check comes before the leader check.
    ({"leader_epoch": 4, "broker_id": 2}, ErrorCode.FENCED_LEADER_EPOCH),
    ({"broker_id": 2}, ErrorCode.INVALID_REQUEST),
    ({"partition_epoch": 9}, ErrorCode.INVALID_UPDATE_VERSION),
    ({"isr": [1, 4]}, ErrorCode.INVALID_REQUEST),     # 4 is no replica
    ({"isr": [1, 2, 2]}, ErrorCode.INVALID_REQUEST),  # duplicate
    ({"isr": [2, 3]}, ErrorCode.INVALID_REQUEST),     # without the leader
    ({"isr": []}, ErrorCode.INVALID_REQUEST),
    ({"isr": [1, 2], "recovery": RECOVERING}, ErrorCode.INVALID_REQUEST),
    # RECOVERED never goes back to RECOVERING.
    ({"isr": [1], "recovery": RECOVERING}, ErrorCode.INVALID_REQUEST),
    # KIP-903: a member's broker epoch must be its current one (-1 skips the check).
    ({"member_epochs": {2: 12345}}, ErrorCode.INELIGIBLE_REPLICA),
])
def test_refusals_in_kafkas_order(change, code):
    cluster = cluster_with_partition()
    change = dict(change)
    isr = change.pop("isr", [1, 2])
    result = alter(cluster, isr, **change)
    assert result.records == []
    assert only(result) == {"partition_index": change.get("index", 0), "error_code": code}
    assert result.error_message


def test_a_member_epoch_of_minus_one_skips_the_check():
    cluster = cluster_with_partition()
    assert only(alter(cluster, [1, 2], member_epochs={2: -1}))["error_code"] == 0


@pytest.mark.parametrize("how, reason", [("fence", "fenced"), ("shut_down", "shutting down"),
                                         ("unregister", "not registered")])
def test_ineligible_isr_members(how, reason):
    cluster = cluster_with_partition(replicas=(1, 2, 4), isr=(1, 2))
    epoch = cluster.state.broker(4).epoch
    if how == "fence":
        cluster.heartbeat(4, epoch, want_fence=True)
        assert cluster.state.broker(4).fenced
    elif how == "shut_down":
        cluster.heartbeat(4, epoch, want_shut_down=True)
        cluster.append([record(mr.BROKER_REGISTRATION_CHANGE_RECORD, {
            "broker_id": 4, "broker_epoch": epoch, "fenced": -1, "in_controlled_shutdown": 1}, version=1)])
        assert cluster.state.broker(4).in_controlled_shutdown and not cluster.state.broker(4).fenced
    else:
        cluster.unregister(4)
    result = alter(cluster, [1, 2, 4], member_epochs={4: -1})
    assert only(result)["error_code"] == ErrorCode.INELIGIBLE_REPLICA
    assert result.records == []
    assert f"4 ({reason})" in result.error_message


def test_a_recovering_leader_reports_recovery_then_expands():
    cluster = cluster_with_partition(isr=(1,), leader_recovery_state=RECOVERING)
    # Still recovering with more than one member: refused.
    assert only(alter(cluster, [1, 2], recovery=RECOVERING))["error_code"] == ErrorCode.INVALID_REQUEST
    same = alter(cluster, [1], recovery=RECOVERING)
    assert same.records == [] and only(same)["leader_recovery_state"] == RECOVERING
    recovered = alter(cluster, [1], recovery=RECOVERED)
    assert recovered.records[0].data == {"topic_id": TOPIC_ID, "partition_id": 0, "leader_recovery_state": 0}
    assert partition(cluster).leader_recovery_state == RECOVERED
    assert only(alter(cluster, [1, 2], partition_epoch=11))["isr"] == [1, 2]


def test_completing_a_reassignment_that_removes_the_leader_answers_new_leader_elected():
    # Moving 1 -> 4: replicas [1, 2, 3, 4], removing [1], adding [4].
    cluster = cluster_with_partition(replicas=(1, 2, 3, 4), isr=(1, 2, 3), removing_replicas=[1],
                                     adding_replicas=[4])
    result = alter(cluster, [1, 2, 3, 4])
    assert only(result) == {"partition_index": 0, "error_code": ErrorCode.NEW_LEADER_ELECTED}
    # The record is written all the same.
    [change] = result.records
    assert change.data["leader"] == 2 and change.data["isr"] == [2, 3, 4]
    assert partition(cluster) == PartitionImage(
        replicas=(2, 3, 4), isr=(2, 3, 4), leader=2, leader_epoch=6, partition_epoch=11,
        directories=tuple(map(directory, (2, 3, 4))))


def test_completing_a_reassignment_that_keeps_the_leader_bumps_the_leader_epoch():
    cluster = cluster_with_partition(replicas=(1, 2, 3, 4), isr=(1, 2, 3), removing_replicas=[3],
                                     adding_replicas=[4])
    answer = only(alter(cluster, [1, 2, 3, 4]))
    assert (answer["error_code"], answer["leader_id"], answer["isr"]) == (0, 1, [1, 2, 4])
    # Replicas left the set: the leader epoch goes up although the leader stayed.
    assert (answer["leader_epoch"], answer["partition_epoch"]) == (6, 11)
    image = partition(cluster)
    assert (image.replicas, image.removing_replicas, image.adding_replicas) == ((1, 2, 4), (), ())


def test_an_incomplete_reassignment_only_changes_the_isr():
    cluster = cluster_with_partition(replicas=(1, 2, 3, 4), isr=(1, 2), removing_replicas=[3],
                                     adding_replicas=[4])
    answer = only(alter(cluster, [1, 2, 3]))
    assert (answer["isr"], answer["leader_epoch"]) == ([1, 2, 3], 5)
    assert partition(cluster).adding_replicas == (4,)


# ---- replay and snapshots -------------------------------------------------------


def change(**data):
    return record(mr.PARTITION_CHANGE_RECORD, {"topic_id": TOPIC_ID, "partition_id": 0, **data}, version=1)


def test_replay_merges_only_what_the_record_names():
    cluster = cluster_with_partition()
    cluster.append([change(leader=2)])
    image = partition(cluster)
    assert (image.leader, image.leader_epoch, image.partition_epoch, image.isr) == (2, 6, 11, (1, 2, 3))
    # Leader set to itself: a leader epoch bump without a leader change.
    cluster.append([change(leader=2)])
    assert (partition(cluster).leader_epoch, partition(cluster).partition_epoch) == (7, 12)
    cluster.append([change(isr=[2], leader_recovery_state=RECOVERING)])
    image = partition(cluster)
    assert (image.leader, image.leader_epoch, image.partition_epoch, image.isr, image.leader_recovery_state) == (
        2, 7, 13, (2,), RECOVERING)
    cluster.append([change(leader=-1)])
    assert (partition(cluster).leader, partition(cluster).leader_epoch) == (-1, 8)
    assert cluster.replayed_from_scratch() == cluster.state


@pytest.mark.parametrize("data, needle", [({"topic_id": OTHER_TOPIC_ID}, "no topic"),
                                          ({"partition_id": 3}, "no partition 3")])
def test_a_change_of_an_unknown_partition_is_refused_at_replay(data, needle):
    cluster = cluster_with_partition()
    before = cluster.state.snapshot()
    with pytest.raises(ReplayError, match=needle):
        cluster.state.replay(change(**data), cluster.next_offset)
    assert cluster.state.snapshot() == before


def test_a_snapshot_writes_the_changed_partition_not_the_changes():
    cluster = cluster_with_partition()
    alter(cluster, [1, 2])
    cluster.append([change(leader=2, leader_recovery_state=RECOVERING)])
    state = cluster.state
    names = [r.name for r in snapshot_records(state)]
    assert "PartitionChangeRecord" not in names
    [written] = [r for r in snapshot_records(state) if r.name == "PartitionRecord"]
    assert (written.data["leader"], written.data["leader_epoch"], written.data["partition_epoch"],
            written.data["isr"], written.data["leader_recovery_state"]) == (2, 6, 12, [1, 2], RECOVERING)
    loaded = load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == state
    # A controller that loads it goes on from the same epochs.
    body = request(cluster, [2], broker_id=2, leader_epoch=6, partition_epoch=12, recovery=RECOVERING)
    answer = only(alter_partition(loaded, body, 3, cluster.config))
    assert (answer["error_code"], answer["partition_epoch"]) == (0, 13)
