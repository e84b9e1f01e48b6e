"""Leadership that follows the brokers (Kafka's ReplicationControlManager): a broker that
is fenced, shuts down or is unregistered leaves every ISR (but the last member of one) and
every leadership; a broker in controlled shutdown is let go once it leads nothing; an
unfenced broker leads the leaderless partitions whose ISR holds it; unclean election only
when the topic allows it. Records replay and snapshot like any other."""

from __future__ import annotations

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.records import record
from server.controller.partitions import RECOVERING, has_leaderships
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import RESOURCE_TOPIC

from .helpers import CLUSTER_ID, Cluster

TOPIC_ID = uuid.UUID(int=0xC3)
HALF_SESSION_MS = 5000  # the session timeout is 9000 ms


def cluster_with(partitions, mv_level: int = 22, brokers=(1, 2, 3), configs=None) -> Cluster:
    """Unfenced brokers and topic "t" whose partition i is (replicas, isr, leader)."""
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    for broker_id in brokers:
        cluster.register(broker_id, uuid.UUID(int=broker_id))
    for broker_id in brokers:
        cluster.heartbeat(broker_id, epoch(cluster, broker_id))
    records = [record(mr.TOPIC_RECORD, {"name": "t", "topic_id": TOPIC_ID}, version=0)]
    for index, (replicas, isr, leader) in enumerate(partitions):
        records.append(record(mr.PARTITION_RECORD, {
            "topic_id": TOPIC_ID, "partition_id": index, "replicas": list(replicas), "isr": list(isr),
            "leader": leader, "leader_epoch": 5, "partition_epoch": 10}, version=0))
    for key, value in (configs or {}).items():
        records.append(record(mr.CONFIG_RECORD, {"resource_type": RESOURCE_TOPIC, "resource_name": "t",
                                                 "name": key, "value": value}, version=0))
    cluster.append(records)
    return cluster


def epoch(cluster: Cluster, broker_id: int) -> int:
    return cluster.state.broker(broker_id).epoch


def view(cluster: Cluster) -> dict[int, tuple]:
    """partition -> (leader, isr, leader epoch, partition epoch)."""
    return {index: (p.leader, p.isr, p.leader_epoch, p.partition_epoch)
            for index, p in cluster.state.topic("t").partitions.items()}


def names(result) -> list[str]:
    return [r.name for r in result.records]


def expire_only(cluster: Cluster, *stale: int):
    """Let the sessions of `stale` run out while the other brokers keep heartbeating."""
    cluster.now_ms += HALF_SESSION_MS
    for broker_id, registration in cluster.state.brokers.items():
        if broker_id not in stale and not registration.fenced:
            cluster.heartbeat(broker_id, registration.epoch)
    cluster.now_ms += HALF_SESSION_MS
    return cluster.expire()


THREE_PARTITIONS = [
    ((1, 2, 3), (1, 2, 3), 1),  # led by 1: 2 takes over
    ((2, 1, 3), (2, 1, 3), 2),  # 1 only leaves the ISR
    ((1, 3), (1,), 1),          # 1 is the last ISR member: no leader, the ISR keeps it
]


def test_session_expiry_moves_leaderships_and_shrinks_isrs_before_the_fence_record():
    cluster = cluster_with(THREE_PARTITIONS)
    result = expire_only(cluster, 1)
    assert result.response == {"fenced_broker_ids": [1]}
    assert names(result) == ["PartitionChangeRecord"] * 3 + ["BrokerRegistrationChangeRecord"]
    assert view(cluster) == {
        0: (2, (2, 3), 6, 11),
        1: (2, (2, 3), 5, 11),  # from 3.6-IV0 a shrink keeps the leader epoch
        2: (-1, (1,), 6, 11),
    }
    assert cluster.state.broker(1).fenced
    assert not has_leaderships(cluster.state, 1)


def test_before_3_6_a_fencing_shrink_bumps_the_leader_epoch_too():
    cluster = cluster_with(THREE_PARTITIONS, mv_level=11)
    expire_only(cluster, 1)
    assert view(cluster)[1] == (2, (2, 3), 6, 11)


def test_brokers_fenced_together_each_see_the_others():
    cluster = cluster_with([((1, 2, 3), (1, 2, 3), 1), ((1, 2), (1, 2), 1)])
    result = expire_only(cluster, 1, 2)
    assert result.response == {"fenced_broker_ids": [1, 2]}
    assert names(result) == ["PartitionChangeRecord"] * 2 + ["BrokerRegistrationChangeRecord"] \
        + ["PartitionChangeRecord"] * 2 + ["BrokerRegistrationChangeRecord"]
    # 2 led after 1 went, then 3 (or nobody) after 2 went; the last ISR member stays.
    assert view(cluster) == {0: (3, (3,), 7, 12), 1: (-1, (2,), 7, 12)}


def test_unfencing_gives_the_broker_the_leaderless_partitions_of_its_isr():
    cluster = cluster_with(THREE_PARTITIONS)
    expire_only(cluster, 1)
    before = view(cluster)
    result = cluster.heartbeat(1, epoch(cluster, 1))
    assert not result.response["is_fenced"]
    assert names(result) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    after = view(cluster)
    assert after[2] == (1, (1,), 7, 12)
    # Partitions with a leader wait for AlterPartition to take it back into the ISR.
    assert (after[0], after[1]) == (before[0], before[1])


def test_controlled_shutdown_moves_leaderships_and_lets_the_broker_go_once_it_leads_nothing():
    cluster = cluster_with(THREE_PARTITIONS)
    first = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert (first.response["is_fenced"], first.response["should_shut_down"]) == (False, False)
    assert names(first) == ["BrokerRegistrationChangeRecord"] + ["PartitionChangeRecord"] * 3
    assert first.records[0].data["in_controlled_shutdown"] == 1
    assert cluster.state.broker(1).in_controlled_shutdown
    assert view(cluster) == {0: (2, (2, 3), 6, 11), 1: (2, (2, 3), 5, 11), 2: (-1, (1,), 6, 11)}
    shutdown_offset = cluster.next_offset - 1  # the last record that moved its leaderships
    # Brokers 2 and 3 last reported offsets from before the moves: broker 1 waits for both.
    waiting = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert (waiting.response["is_fenced"], waiting.response["should_shut_down"], waiting.records) == (False, False, [])
    cluster.heartbeat(2, epoch(cluster, 2), offset=shutdown_offset)
    cluster.heartbeat(3, epoch(cluster, 3), offset=shutdown_offset - 1)
    assert not cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True).response["should_shut_down"]
    cluster.heartbeat(3, epoch(cluster, 3), offset=shutdown_offset)
    second = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert (second.response["is_fenced"], second.response["should_shut_down"]) == (True, True)
    assert names(second) == ["BrokerRegistrationChangeRecord"]
    assert cluster.state.broker(1).fenced


def test_controlled_shutdown_waits_only_for_active_brokers():
    cluster = cluster_with(THREE_PARTITIONS)
    cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    expire_only(cluster, 2, 3)  # broker 1 heartbeats on (it shuts down), 2 and 3 are fenced
    assert cluster.state.broker(2).fenced and cluster.state.broker(3).fenced
    result = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert result.response["should_shut_down"]


def test_controlled_shutdown_does_not_wait_for_zookeeper_mode_brokers():
    """A migration's ZooKeeper-mode brokers never heartbeat: only KRaft brokers are waited for."""
    cluster = cluster_with(THREE_PARTITIONS)
    cluster.append([record(mr.REGISTER_BROKER_RECORD, {
        "broker_id": 9, "incarnation_id": uuid.UUID(int=9), "broker_epoch": 1, "end_points": [], "features": [],
        "rack": None, "fenced": False, "in_controlled_shutdown": False, "is_migrating_zk_broker": True,
        "log_dirs": []}, version=3)])
    assert not cluster.state.broker(9).fenced
    cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    for broker_id in (2, 3):
        cluster.heartbeat(broker_id, epoch(cluster, broker_id))
    assert cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True).response["should_shut_down"]


def test_a_controller_that_took_over_mid_shutdown_waits_for_the_log_end():
    cluster = cluster_with(THREE_PARTITIONS)
    cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    cluster.tracker.activate(cluster.state, cluster.now_ms)  # a new active controller: no offsets known
    end = cluster.next_offset - 1
    assert not cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True).response["should_shut_down"]
    for broker_id in (2, 3):
        cluster.heartbeat(broker_id, epoch(cluster, broker_id), offset=end)
    assert cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True).response["should_shut_down"]


def test_a_broker_that_leads_nothing_is_let_go_at_once():
    cluster = cluster_with([((2, 1), (2, 1), 2)])
    result = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert result.response["should_shut_down"]
    # It leaves the ISR with the fencing.
    assert names(result) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert view(cluster) == {0: (2, (2,), 5, 11)}


def test_a_broker_still_leading_stays_in_controlled_shutdown():
    cluster = cluster_with(THREE_PARTITIONS)
    cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    # A leadership comes back to it (a record kraftwerk itself would not write now).
    cluster.append([record(mr.PARTITION_CHANGE_RECORD, {"topic_id": TOPIC_ID, "partition_id": 2, "leader": 1},
                           version=1)])
    result = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert (result.response["should_shut_down"], result.records) == (False, [])


def test_controlled_shutdown_before_the_shutdown_state_existed():
    # Below 3.3-IV3 no record says "in controlled shutdown": moving the leaderships is all.
    cluster = cluster_with(THREE_PARTITIONS, mv_level=6)
    first = cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True)
    assert names(first) == ["PartitionChangeRecord"] * 3
    assert not first.response["should_shut_down"]
    assert cluster.heartbeat(1, epoch(cluster, 1), want_shut_down=True).response["should_shut_down"]


def test_unregistering_moves_leaderships_before_the_unregister_record():
    cluster = cluster_with(THREE_PARTITIONS)
    result = cluster.unregister(1)
    assert names(result) == ["PartitionChangeRecord"] * 3 + ["UnregisterBrokerRecord"]
    assert view(cluster)[0] == (2, (2, 3), 6, 11)
    assert cluster.state.broker(1) is None


@pytest.mark.parametrize("configs, expected", [
    ({}, (-1, (1,), 6, 11, 0)),
    ({"unclean.leader.election.enable": "true"}, (3, (3,), 6, 11, RECOVERING)),
    ({"unclean.leader.election.enable": "false"}, (-1, (1,), 6, 11, 0)),
])
def test_unclean_election_only_when_the_topic_allows_it(configs, expected):
    cluster = cluster_with([((1, 3), (1,), 1)], configs=configs)
    expire_only(cluster, 1)
    p = cluster.state.topic("t").partitions[0]
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == expected


def test_the_changes_replay_and_snapshot_like_the_log():
    cluster = cluster_with(THREE_PARTITIONS)
    expire_only(cluster, 1)
    cluster.heartbeat(1, epoch(cluster, 1))
    cluster.heartbeat(2, epoch(cluster, 2), want_shut_down=True)
    state = cluster.state
    assert cluster.replayed_from_scratch() == state
    assert load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID) == state


def test_a_leader_that_still_qualifies_keeps_the_partition():
    # 1 leads although 2 is the preferred (first) replica: 3 leaving changes only the ISR.
    cluster = cluster_with([((2, 1, 3), (2, 1, 3), 1)])
    expire_only(cluster, 3)
    assert view(cluster) == {0: (1, (2, 1), 5, 11)}


def test_an_unclean_election_never_picks_a_broker_fenced_in_the_same_sweep():
    # 1 is outside the ISR: only an unclean election could pick it, and it is going too.
    cluster = cluster_with([((1, 2), (2,), 2)], configs={"unclean.leader.election.enable": "true"})
    result = expire_only(cluster, 1, 2)
    assert result.response == {"fenced_broker_ids": [1, 2]}
    assert view(cluster) == {0: (-1, (2,), 6, 11)}
