"""Replica placement with fenced, shutting-down and cordoned brokers, as Kafka 4.4.0's
StripedReplicaPlacer and ReplicationControlManager place them (server/controller/topics.py).

The usable brokers are the registered ones with a log directory that is not cordoned,
but for unfenced ones in controlled shutdown; fenced ones are included. A partition
takes fenced brokers only when the unfenced ones run out, its leader is always unfenced
and its ISR is its active replicas. Refusals, in Kafka's order: no unfenced broker at all, then fewer usable
brokers (fenced counted) than the replication factor. Explicit assignments may name
fenced brokers as long as one replica of each partition is active.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import broker_heartbeat
from server.controller import commands as cmd
from server.controller import features as ft
from server.controller import topics as tp
from server.controller.topics import TopicErrorCode

from .helpers import FULL_BROKER_FEATURES, decoded
from .test_partitions_and_configs import grow, replicas
from .test_topics import TopicCluster, assert_consistent, cluster_with_brokers, only, topic

ALL_FENCED = "All brokers are currently fenced, or have all their log directories cordoned."


def too_few(replication_factor: int, usable: int) -> str:
    return (f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
            f"{replication_factor} cannot be reached because only {usable} broker(s) are registered or some "
            "brokers have all their log directories cordoned.")


def assert_led_by_unfenced(cluster, name: str, unfenced: set[int]) -> None:
    """Every partition's leader is its first replica and unfenced; its ISR is its unfenced
    replicas in replica order."""
    for partition in cluster.state.topic(name).partitions.values():
        assert partition.leader == partition.replicas[0] and partition.leader in unfenced
        assert partition.isr == tuple(b for b in partition.replicas if b in unfenced)


# -- place_replicas ------------------------------------------------------------------------


def test_with_enough_unfenced_brokers_placement_is_unchanged():
    expected = [[3, 4, 1], [4, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2]]
    assert tp.place_replicas("orders", 6, 3, [1, 2, 3, 4]) == expected
    assert tp.place_replicas("orders", 6, 3, [1, 2, 3, 4], fenced=[5, 6]) == expected
    cluster = cluster_with_brokers(6, fenced=(5, 6))
    assert only(cluster.create(topic("orders", 6, 3)))["error_code"] == 0
    assert [replicas(cluster, "orders")[p] for p in range(6)] == expected
    assert_led_by_unfenced(cluster, "orders", {1, 2, 3, 4})


def test_fenced_brokers_fill_in_after_the_unfenced_ones():
    assert tp.place_replicas("orders", 4, 3, [1, 2], fenced=[3, 4]) == [[1, 2, 3], [2, 1, 4], [1, 2, 3], [2, 1, 4]]
    assert tp.place_replicas("orders", 3, 3, [2], fenced=[1, 3]) == [[2, 1, 3], [2, 3, 1], [2, 1, 3]]
    with pytest.raises(ValueError):
        tp.place_replicas("orders", 1, 1, [], fenced=[1, 2])
    with pytest.raises(ValueError):
        tp.place_replicas("orders", 1, 4, [1, 2], fenced=[3])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=12, unique=True).flatmap(
    lambda ids: st.tuples(st.just(sorted(ids)), st.integers(1, len(ids)), st.integers(1, len(ids)),
                          st.integers(1, 12), st.text("abc-", min_size=1, max_size=8))))
def test_placement_prefers_unfenced_brokers(case):
    brokers, unfenced_count, replication_factor, partitions, name = case
    unfenced, fenced = brokers[:unfenced_count], brokers[unfenced_count:]
    placed = tp.place_replicas(name, partitions, replication_factor, unfenced, fenced)
    assert placed == tp.place_replicas(name, partitions, replication_factor, unfenced, fenced)
    from_unfenced = min(replication_factor, len(unfenced))
    for replica_list in placed:
        assert len(replica_list) == len(set(replica_list)) == replication_factor
        assert set(replica_list[:from_unfenced]) <= set(unfenced)
        assert set(replica_list[from_unfenced:]) <= set(fenced)
    if replication_factor <= len(unfenced):
        assert placed == tp.place_replicas(name, partitions, replication_factor, unfenced)


# -- CreateTopics --------------------------------------------------------------------------


def test_too_few_unfenced_brokers_places_fenced_replicas_behind_an_unfenced_leader():
    cluster = cluster_with_brokers(4, fenced=(3, 4))
    result = cluster.create(topic("wide", 4, 3))
    entry = only(result)
    assert (entry["error_code"], entry["num_partitions"], entry["replication_factor"]) == (0, 4, 3)
    assert [replicas(cluster, "wide")[p] for p in range(4)] == tp.place_replicas("wide", 4, 3, [1, 2], [3, 4])
    assert_led_by_unfenced(cluster, "wide", {1, 2})
    # Leaders still alternate between the unfenced brokers; both fenced ones get replicas.
    assert {p.leader for p in cluster.state.topic("wide").partitions.values()} == {1, 2}
    assert {p.replicas[2] for p in cluster.state.topic("wide").partitions.values()} == {3, 4}
    assert_consistent(cluster)


def test_a_single_unfenced_broker_leads_every_partition():
    cluster = cluster_with_brokers(3, fenced=(2, 3))
    assert only(cluster.create(topic("solo", 3, 3)))["error_code"] == 0
    assert_led_by_unfenced(cluster, "solo", {1})
    assert all(p.isr == (1,) for p in cluster.state.topic("solo").partitions.values())


@pytest.mark.parametrize("replication_factor", [1, 2, 5])
def test_no_unfenced_broker_refuses_before_counting(replication_factor):
    cluster = cluster_with_brokers(2, fenced=(1, 2))
    entry = only(cluster.create(topic("t", 1, replication_factor)))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICATION_FACTOR
    assert entry["error_message"] == f"Unable to replicate the partition {replication_factor} time(s): {ALL_FENCED}"
    assert cluster.state.topics() == {}


def test_too_few_registered_brokers_counts_the_fenced_ones():
    cluster = cluster_with_brokers(3, fenced=(2, 3))
    entry = only(cluster.create(topic("t", 1, 4)))
    assert (entry["error_code"], entry["error_message"]) == (TopicErrorCode.INVALID_REPLICATION_FACTOR,
                                                             too_few(4, 3))
    assert cluster.state.topics() == {}


def held_in_controlled_shutdown() -> TopicCluster:
    """Three unfenced brokers; broker 2 asked to shut down while it still led a partition,
    so it stays in controlled shutdown (unfenced) until the others catch up."""
    cluster = cluster_with_brokers(3)
    assert only(cluster.create(topic("held", assignments=[(2, 1)])))["error_code"] == 0
    cluster.heartbeat(2, cluster.state.broker(2).epoch, want_shut_down=True)
    broker = cluster.state.broker(2)
    assert broker.in_controlled_shutdown and not broker.fenced
    return cluster


def test_brokers_in_controlled_shutdown_get_no_new_replicas():
    cluster = held_in_controlled_shutdown()
    assert tp.usable_brokers(cluster.state) == tp.UsableBrokers(unfenced=(1, 3), fenced=())
    assert only(cluster.create(topic("spread", 6, 2)))["error_code"] == 0
    assert all(2 not in r for r in replicas(cluster, "spread").values())
    entry = only(cluster.create(topic("wide", 1, 3)))
    assert (entry["error_code"], entry["error_message"]) == (TopicErrorCode.INVALID_REPLICATION_FACTOR,
                                                             too_few(3, 2))
    # Named explicitly, it may hold a replica, but neither leads nor joins the ISR.
    assert only(cluster.create(topic("manual", assignments=[(2, 3)])))["error_code"] == 0
    partition = cluster.state.topic("manual").partitions[0]
    assert (partition.replicas, partition.isr, partition.leader) == ((2, 3), (3,), 3)
    entry = only(cluster.create(topic("alone", assignments=[(2,)])))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert entry["error_message"] == ("All brokers specified in the manual partition assignment for partition 0 "
                                      "are fenced or in controlled shutdown.")


def test_a_broker_that_finished_its_controlled_shutdown_is_usable_as_fenced():
    cluster = held_in_controlled_shutdown()
    for broker_id in (1, 3):  # the others catch up, so broker 2 may go
        cluster.heartbeat(broker_id, cluster.state.broker(broker_id).epoch)
    assert cluster.heartbeat(2, cluster.state.broker(2).epoch, want_shut_down=True).response["should_shut_down"]
    broker = cluster.state.broker(2)
    assert broker.fenced and broker.in_controlled_shutdown
    assert tp.usable_brokers(cluster.state) == tp.UsableBrokers(unfenced=(1, 3), fenced=(2,))
    assert only(cluster.create(topic("wide", 2, 3)))["error_code"] == 0
    assert_led_by_unfenced(cluster, "wide", {1, 3})
    assert all(p.replicas[2] == 2 for p in cluster.state.topic("wide").partitions.values())


# -- cordoned log directories (KIP-1066, metadata.version 4.3-IV0) ------------------------


def cordoned_cluster() -> TopicCluster:
    """Brokers 1-3 unfenced with two log directories each: broker 2 cordons one of
    them, broker 3 both."""
    cluster = TopicCluster.bootstrapped(mv_level=ft.IBP_4_3_IV0)
    features = {name: (0, level) for name, level in cluster.state.finalized_levels.items()}
    features.update(FULL_BROKER_FEATURES, **{"metadata.version": (1, ft.IBP_4_3_IV0)})
    for broker_id, cordoned in ((1, 0), (2, 1), (3, 2)):
        dirs = [uuid.UUID(int=broker_id << 64 | n) for n in (1, 2)]
        epoch = cluster.register(broker_id, uuid.UUID(int=broker_id), features=features,
                                 log_dirs=dirs).response["broker_epoch"]
        request = decoded(broker_heartbeat.REQUEST, 2, broker_id=broker_id, broker_epoch=epoch,
                          current_metadata_offset=cluster.next_offset - 1, want_fence=False,
                          want_shut_down=False, cordoned_log_dirs=dirs[:cordoned])
        cluster.run(cmd.broker_heartbeat(cluster.state, cluster.tracker, request, 2, cluster.now_ms,
                                         cluster.config, next_offset=cluster.next_offset))
        assert not cluster.state.broker(broker_id).fenced
    return cluster


def test_a_broker_with_every_log_directory_cordoned_is_not_usable():
    cluster = cordoned_cluster()
    assert tp.usable_brokers(cluster.state) == tp.UsableBrokers(unfenced=(1, 2), fenced=())
    assert only(cluster.create(topic("t", 4, 2)))["error_code"] == 0
    assert all(sorted(r) == [1, 2] for r in replicas(cluster, "t").values())
    entry = only(cluster.create(topic("wide", 1, 3)))
    assert (entry["error_code"], entry["error_message"]) == (TopicErrorCode.INVALID_REPLICATION_FACTOR,
                                                             too_few(3, 2))
    entry = only(cluster.create(topic("manual", assignments=[(1, 3)])))
    assert entry["error_code"] == TopicErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert entry["error_message"] == ("The manual partition assignment includes broker 3, but all its log "
                                      "directories are cordoned.")
    assert only(cluster.create(topic("half", assignments=[(2, 1)])))["error_code"] == 0
    assert_consistent(cluster)


# -- explicit assignments ------------------------------------------------------------------


def test_an_assignment_led_by_a_fenced_broker_is_led_by_its_first_active_replica():
    cluster = cluster_with_brokers(3, fenced=(3,))
    entry = only(cluster.create(topic("manual", assignments=[(3, 1, 2), (3, 2, 1)])))
    assert entry["error_code"] == 0, entry
    partitions = cluster.state.topic("manual").partitions
    assert [(p.replicas, p.isr, p.leader) for p in (partitions[0], partitions[1])] == [
        ((3, 1, 2), (1, 2), 1), ((3, 2, 1), (2, 1), 2)]
    _, errors = grow(cluster, ("manual", 4, [[3, 2, 1], [3, 1, 2]]))
    assert errors == {"manual": (0, None)}
    partitions = cluster.state.topic("manual").partitions
    assert [(partitions[i].isr, partitions[i].leader) for i in (2, 3)] == [((2, 1), 2), ((1, 2), 1)]
    assert_consistent(cluster)


# -- CreatePartitions ----------------------------------------------------------------------


def test_grow_places_fenced_replicas_behind_an_unfenced_leader():
    cluster = cluster_with_brokers(4, fenced=(3, 4))
    cluster.create(topic("t", assignments=[(1, 2, 3)]))
    result, errors = grow(cluster, ("t", 5, None))
    assert errors == {"t": (0, None)}
    after = replicas(cluster, "t")
    assert [after[i] for i in range(1, 5)] == tp.place_replicas("t", 5, 3, [1, 2], [3, 4])[1:]
    assert [r.data["partition_id"] for r in result.records] == [1, 2, 3, 4]
    assert_led_by_unfenced(cluster, "t", {1, 2})
    assert_consistent(cluster)


def test_grow_with_every_broker_fenced_is_refused():
    cluster = cluster_with_brokers(2)
    cluster.create(topic("t", 1, 2))
    cluster.now_ms += 10 * cluster.config.session_timeout_ms
    cluster.expire()
    assert tp.usable_brokers(cluster.state) == tp.UsableBrokers(unfenced=(), fenced=(1, 2))
    result, errors = grow(cluster, ("t", 2, None))
    assert errors == {"t": (TopicErrorCode.INVALID_REPLICATION_FACTOR,
                            f"Unable to replicate the partition 2 time(s): {ALL_FENCED}")}
    assert result.records == [] and len(cluster.state.topic("t").partitions) == 1
    # An explicit assignment needs an active replica too.
    _, errors = grow(cluster, ("t", 2, [[1, 2]]))
    assert errors == {"t": (TopicErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            "All brokers specified in the manual partition assignment for partition 1 are "
                            "fenced or in controlled shutdown.")}


def test_grow_counts_fenced_brokers_but_not_unregistered_or_shutting_down_ones():
    cluster = cluster_with_brokers(4, fenced=(3,))
    cluster.create(topic("t", assignments=[(1, 2, 3, 4)]))
    cluster.unregister(4)
    _, errors = grow(cluster, ("t", 2, None))
    assert errors == {"t": (TopicErrorCode.INVALID_REPLICATION_FACTOR, too_few(4, 3))}
    held = held_in_controlled_shutdown()
    held.create(topic("three", assignments=[(1, 2, 3)]))
    _, errors = grow(held, ("three", 2, None))
    assert errors == {"three": (TopicErrorCode.INVALID_REPLICATION_FACTOR, too_few(3, 2))}
