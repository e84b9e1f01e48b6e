"""The ZooKeeper-mode broker's metadata cache (sans-I/O): UpdateMetadata's rules."""

from __future__ import annotations

import uuid

from protocol.apis.update_metadata import REQUEST
from protocol.errors import ErrorCode
from server.zkbroker.cache import STALE_CONTROLLER_EPOCH, ZkMetadataCache, apply_update_metadata

TOPIC_ID = uuid.UUID(int=7)


def request(controller_epoch: int, *, controller_id: int = 3000, kraft: bool = True, broker_epoch: int = -1,
            update_type: int = 1, topics=None, brokers=(1, 2)):
    body = {
        "controller_id": controller_id,
        "is_kraft_controller": kraft,
        "type": update_type,
        "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch,
        "topic_states": topics if topics is not None else [],
        "live_brokers": [
            {"id": b, "endpoints": [{"port": 9000 + b, "host": f"h{b}", "listener": "PLAINTEXT",
                                     "security_protocol": 0}], "rack": None}
            for b in brokers
        ],
    }
    return REQUEST.decode(8, REQUEST.encode(8, body))


def topic(name: str, partitions: dict[int, int], topic_id: uuid.UUID = TOPIC_ID) -> dict:
    return {
        "topic_name": name,
        "topic_id": topic_id,
        "partition_states": [
            {"partition_index": p, "controller_epoch": 1, "leader": leader, "leader_epoch": 3, "isr": [1, 2],
             "zk_version": 0, "replicas": [1, 2], "offline_replicas": []}
            for p, leader in partitions.items()
        ],
    }


def test_accepts_newer_or_equal_epochs_and_refuses_older() -> None:
    cache = ZkMetadataCache()
    assert apply_update_metadata(cache, request(5), broker_epoch=10).error_code == ErrorCode.NONE
    assert (cache.controller_id, cache.controller_epoch, cache.is_kraft_controller) == (3000, 5, True)
    assert sorted(cache.live_brokers) == [1, 2]
    assert apply_update_metadata(cache, request(5, controller_id=3001), 10).error_code == ErrorCode.NONE
    assert cache.controller_id == 3001
    stale = apply_update_metadata(cache, request(4, controller_id=9, brokers=(9,)), 10)
    assert stale.error_code == STALE_CONTROLLER_EPOCH == 11
    assert cache.controller_id == 3001 and sorted(cache.live_brokers) == [1, 2]
    assert cache.updates_applied == 2


def test_stale_broker_epoch_is_refused_and_minus_one_skips_the_check() -> None:
    cache = ZkMetadataCache()
    outcome = apply_update_metadata(cache, request(1, broker_epoch=9), broker_epoch=10)
    assert outcome.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert not cache.knows_controller
    assert apply_update_metadata(cache, request(1, broker_epoch=10), 10).error_code == ErrorCode.NONE
    assert apply_update_metadata(cache, request(1, broker_epoch=-1), 10).error_code == ErrorCode.NONE


def test_partition_states_upsert_delete_and_full_replace() -> None:
    cache = ZkMetadataCache()
    apply_update_metadata(cache, request(1, topics=[topic("a", {0: 1, 1: 2}), topic("b", {0: 2})]), 1)
    assert cache.partition_count() == 3
    apply_update_metadata(cache, request(1, topics=[topic("a", {1: 1})]), 1)  # incremental
    assert cache.topics["a"].partitions[1].leader == 1
    assert cache.topics["a"].partitions[0].leader == 1 and "b" in cache.topics
    apply_update_metadata(cache, request(1, topics=[topic("b", {0: -2})]), 1)  # LeaderDuringDelete
    assert "b" not in cache.topics
    apply_update_metadata(cache, request(1, update_type=2, topics=[topic("c", {0: 2})]), 1)  # full
    assert sorted(cache.topics) == ["c"]
    # The same name with a new topic id is a new topic: old partitions go.
    apply_update_metadata(cache, request(1, topics=[topic("c", {1: 1}, uuid.UUID(int=8))]), 1)
    assert sorted(cache.topics["c"].partitions) == [1]
