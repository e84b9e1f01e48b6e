"""Cordoned log directories (KIP-1066): what a Kafka 4.3+ broker's heartbeats (v2) say
is recorded from metadata.version 4.3-IV0 on (BrokerRegistrationChangeRecord v3), kept
by RegisterBrokerRecord v4 in snapshots, and ignored below that level."""

from __future__ import annotations

import uuid

from protocol import metadata_records as mr
from protocol.apis import broker_heartbeat
from protocol.records import decode_metadata_record, encode_metadata_record
from server.controller import commands as cmd
from server.controller.snapshot import encode_snapshot_records, load_snapshot, snapshot_records

from .helpers import CLUSTER_ID, FULL_BROKER_FEATURES, Cluster, decoded

MV_4_2, MV_4_3_IV0 = 29, 30
DIR_A, DIR_B = uuid.UUID(int=0xA << 64 | 1), uuid.UUID(int=0xB << 64 | 1)


def started(mv_level: int) -> tuple[Cluster, int]:
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    # What a Kafka 4.3 broker supports (the features bootstrap finalizes at 4.3-IV0 too).
    features = {name: (0, level) for name, level in cluster.state.finalized_levels.items()}
    features.update(FULL_BROKER_FEATURES, **{"metadata.version": (1, MV_4_3_IV0)})
    cluster.register(1, uuid.UUID(int=5), features=features, log_dirs=[DIR_A, DIR_B])
    return cluster, cluster.state.broker(1).epoch


def heartbeat(cluster: Cluster, epoch: int, cordoned: list[uuid.UUID] | None) -> cmd.ControllerResult:
    request = decoded(broker_heartbeat.REQUEST, 2, broker_id=1, broker_epoch=epoch,
                      current_metadata_offset=cluster.next_offset - 1, want_fence=False, want_shut_down=False,
                      cordoned_log_dirs=cordoned)
    return cluster.run(cmd.broker_heartbeat(cluster.state, cluster.tracker, request, 2, cluster.now_ms,
                                            cluster.config, next_offset=cluster.next_offset))


def change_records(result: cmd.ControllerResult) -> list:
    return [r for r in result.records if r.message is mr.BROKER_REGISTRATION_CHANGE_RECORD
            and r.data.get("cordoned_log_dirs") is not None]


def test_a_heartbeat_naming_cordoned_directories_is_recorded_once():
    cluster, epoch = started(MV_4_3_IV0)
    registered = [r for r, _ in ((decode_metadata_record(raw), o) for raw, o in cluster.log)
                  if r.message is mr.REGISTER_BROKER_RECORD]
    assert registered[-1].version == 4
    assert cluster.state.broker(1).cordoned_log_dirs is None
    first = heartbeat(cluster, epoch, [DIR_B])
    assert [(r.version, list(r.data["cordoned_log_dirs"])) for r in change_records(first)] == [(3, [DIR_B])]
    assert cluster.state.broker(1).cordoned_log_dirs == (DIR_B,)
    assert change_records(heartbeat(cluster, epoch, [DIR_B])) == []  # nothing new
    assert change_records(heartbeat(cluster, epoch, None)) == []  # the broker does not say
    uncordoned = heartbeat(cluster, epoch, [])
    assert [list(r.data["cordoned_log_dirs"]) for r in change_records(uncordoned)] == [[]]
    assert cluster.state.broker(1).cordoned_log_dirs == ()


def test_below_4_3_the_heartbeat_field_changes_nothing():
    cluster, epoch = started(MV_4_2)
    assert change_records(heartbeat(cluster, epoch, [DIR_A])) == []
    assert cluster.state.broker(1).cordoned_log_dirs is None


def test_a_snapshot_keeps_the_cordoned_directories():
    cluster, epoch = started(MV_4_3_IV0)
    heartbeat(cluster, epoch, [DIR_A])
    state = cluster.state
    loaded = load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == state
    assert loaded.broker(1).cordoned_log_dirs == (DIR_A,)
    # Written in Kafka's own form: the record round-trips at v4.
    registration = next(r for r in snapshot_records(state) if r.message is mr.REGISTER_BROKER_RECORD)
    assert decode_metadata_record(encode_metadata_record(registration)).version == 4
