"""Producer-id blocks (AllocateProducerIds, KIP-730) in the controller core: Kafka's
broker-epoch checks and messages, consecutive blocks that survive replay and snapshots,
and corruption (a block that does not move forward) refused at replay."""

from __future__ import annotations

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.apis import allocate_producer_ids as api
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller.producer_ids import MAX_PRODUCER_ID, PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import NO_PRODUCER_IDS, ProducerIds, ReplayError

from .helpers import CLUSTER_ID, Cluster, decoded

INCARNATION = uuid.UUID(int=7)


def registered(broker_id: int = 1) -> tuple[Cluster, int]:
    cluster = Cluster.bootstrapped(mv_level=22)
    cluster.register(broker_id, INCARNATION)
    return cluster, cluster.state.broker(broker_id).epoch


def allocate(cluster: Cluster, broker_id: int, broker_epoch: int):
    request = decoded(api.REQUEST, 0, broker_id=broker_id, broker_epoch=broker_epoch)
    return cluster.run(allocate_producer_ids(cluster.state, request))


def test_consecutive_blocks_never_overlap_and_are_recorded():
    cluster, epoch = registered()
    assert cluster.state.producer_ids == NO_PRODUCER_IDS
    first = allocate(cluster, 1, epoch).response
    second = allocate(cluster, 1, epoch).response
    assert (first["error_code"], first["producer_id_start"], first["producer_id_len"]) == (0, 0, 1000)
    assert (second["error_code"], second["producer_id_start"], second["producer_id_len"]) == (0, 1000, 1000)
    assert cluster.state.producer_ids == ProducerIds(2 * PRODUCER_ID_BLOCK_SIZE, 1, epoch)


@pytest.mark.parametrize("broker_id, epoch_delta, message", [
    (2, 0, "No broker registration found for broker id 2"),
    (1, 1, "Expected broker epoch {epoch}, but got broker epoch {wrong}"),
])
def test_only_a_registered_broker_at_its_epoch_gets_a_block(broker_id, epoch_delta, message):
    cluster, epoch = registered()
    wrong = epoch + epoch_delta
    result = allocate(cluster, broker_id, wrong)
    assert result.records == []
    assert result.response["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert result.error_message == message.format(epoch=epoch, wrong=wrong)
    assert cluster.state.producer_ids == NO_PRODUCER_IDS


def test_the_ids_run_out_below_two_to_the_63():
    cluster, epoch = registered()
    last_block = MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE
    cluster.append([record(mr.PRODUCER_IDS_RECORD, {"broker_id": 1, "broker_epoch": epoch,
                                                    "next_producer_id": last_block}, version=0)])
    assert allocate(cluster, 1, epoch).response["producer_id_start"] == last_block
    exhausted = allocate(cluster, 1, epoch)
    assert exhausted.response["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert exhausted.records == []


def test_a_block_that_does_not_move_forward_is_refused_at_replay():
    cluster, epoch = registered()
    allocate(cluster, 1, epoch)
    stale = record(mr.PRODUCER_IDS_RECORD, {"broker_id": 1, "broker_epoch": epoch,
                                           "next_producer_id": PRODUCER_ID_BLOCK_SIZE}, version=0)
    with pytest.raises(ReplayError, match="not after 1000"):
        cluster.state.replay(stale, cluster.next_offset)


def test_a_snapshot_keeps_the_next_block():
    cluster, epoch = registered()
    allocate(cluster, 1, epoch)
    allocate(cluster, 1, epoch)
    state = cluster.state
    loaded = load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == state
    assert loaded.producer_ids == ProducerIds(2000, 1, epoch)
    # A controller that loads it hands out the block after, never one again.
    request = decoded(api.REQUEST, 0, broker_id=1, broker_epoch=epoch)
    assert allocate_producer_ids(loaded, request).response["producer_id_start"] == 2000
