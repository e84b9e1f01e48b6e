"""The single-writer loop with the real segment log: durability before replies,
replay at restart, a failing command not stopping the loop, and session fencing
driven by trio's virtual clock (no wall-clock waits)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio
import trio.testing

from server.config import Listener, ServerConfig
from server.controller import commands as cmd
from server.node import ControllerNode, write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, write_meta_properties

from .helpers import CLUSTER_ID, features_request, heartbeat_request, registration_request

SESSION_TIMEOUT_MS = 9_000


def formatted_node(tmp_path: Path, metadata_version_level: int = 19) -> ControllerNode:
    directory = tmp_path / "controller-1"
    directory.mkdir()
    write_bootstrap_checkpoint(directory, cmd.bootstrap_records(metadata_version_level))
    write_meta_properties(directory, MetaProperties(cluster_id=CLUSTER_ID, node_id=1))
    config = ServerConfig(node_id=1, listener=Listener("CONTROLLER", "127.0.0.1", 0),
                          metadata_log_dir=directory, broker_session_timeout_ms=SESSION_TIMEOUT_MS)
    node = ControllerNode(config)
    node.open()
    return node


def upgrade(level: int):
    request = features_request([("metadata.version", level, cmd.UPGRADE)])
    return lambda state, tracker, next_offset, now_ms: cmd.update_features(state, request, 2, node_config)


node_config = cmd.ControllerConfig(node_id=1, cluster_id=CLUSTER_ID)


async def test_reply_only_after_records_are_in_the_log_and_replayed(tmp_path):
    node = formatted_node(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        end_before = node.metadata_log.end_offset
        result = await node.submit(upgrade(21))
        assert result.response["error_code"] == 0
        # Durable: the record is in the log file, readable through the log.
        assert node.metadata_log.end_offset == end_before + 1
        batches = node.metadata_log.read(end_before)
        assert batches[-1].last_offset == end_before
        # Applied: the state shows the new level at that offset.
        assert node.state.metadata_version == 21
        assert node.state.finalized_features_epoch == end_before
        nursery.cancel_scope.cancel()
    node.metadata_log.close()


async def test_restart_replays_exactly_the_acknowledged_state(tmp_path):
    node = formatted_node(tmp_path)
    incarnation = uuid.uuid4()
    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        await node.submit(upgrade(21))
        request = registration_request(7, incarnation)
        registered = await node.submit(
            lambda state, tracker, next_offset, now_ms: cmd.register_broker(
                state, tracker, request, 4, now_ms, next_offset, node_config))
        assert registered.response["error_code"] == 0
        nursery.cancel_scope.cancel()
    snapshot = node.state.snapshot()
    node.metadata_log.close()

    restarted = ControllerNode(node.config)
    restarted.open()
    try:
        assert restarted.state.snapshot() == snapshot
        assert restarted.state.metadata_version == 21
        assert restarted.state.broker(7).incarnation_id == incarnation
        assert restarted.state.broker(7).epoch == registered.response["broker_epoch"]
    finally:
        restarted.metadata_log.close()


async def test_a_failing_command_is_reported_and_the_loop_goes_on(tmp_path):
    node = formatted_node(tmp_path)

    def broken(state, tracker, next_offset, now_ms):
        raise RuntimeError("bug in a command")

    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        with pytest.raises(RuntimeError, match="bug in a command"):
            await node.submit(broken)
        result = await node.submit(upgrade(20))
        assert result.response["error_code"] == 0
        assert node.state.metadata_version == 20
        nursery.cancel_scope.cancel()
    node.metadata_log.close()


async def test_brokers_without_heartbeats_are_fenced_after_the_session_timeout(tmp_path, autojump_clock):
    """Virtual time: MockClock jumps whenever every task waits, so 9 s pass instantly."""
    node = formatted_node(tmp_path)
    # pytest-trio runs this test on its autojump MockClock fixture.
    assert trio.lowlevel.current_clock() is autojump_clock
    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        node.tracker.activate(node.state, int(trio.current_time() * 1000))
        epochs = {}
        for broker_id in (1, 2):
            request = registration_request(broker_id, uuid.uuid4())
            result = await node.submit(
                lambda state, tracker, next_offset, now_ms, request=request: cmd.register_broker(
                    state, tracker, request, 4, now_ms, next_offset, node_config))
            epochs[broker_id] = result.response["broker_epoch"]

        async def heartbeat(broker_id: int):
            request = heartbeat_request(broker_id, epochs[broker_id], node.metadata_log.end_offset)
            return await node.submit(
                lambda state, tracker, next_offset, now_ms: cmd.broker_heartbeat(
                    state, tracker, request, 1, now_ms, node_config))

        for broker_id in (1, 2):
            response = (await heartbeat(broker_id)).response
            assert response["is_fenced"] is False
        assert not node.state.broker(1).fenced and not node.state.broker(2).fenced

        nursery.start_soon(node._fence_expired_brokers)
        start = trio.current_time()
        # Broker 2 keeps heartbeating every 2 s; broker 1 goes silent.
        while trio.current_time() - start < 3 * SESSION_TIMEOUT_MS / 1000:
            await trio.sleep(2)
            assert (await heartbeat(2)).response["error_code"] == 0
        assert node.state.broker(1).fenced
        assert not node.state.broker(2).fenced
        nursery.cancel_scope.cancel()
    node.metadata_log.close()


async def test_snapshots_are_taken_by_size_and_a_restart_recovers_from_them(tmp_path):
    from dataclasses import replace

    from server.storage.snapshot import list_snapshots

    node = formatted_node(tmp_path)
    # A tiny interval: a snapshot after every ~2 FeatureLevelRecords.
    node.config = replace(node.config, metadata_snapshot_max_record_bytes=40)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        incarnation = uuid.uuid4()
        request = registration_request(5, incarnation)
        await node.submit(lambda state, tracker, next_offset, now_ms: cmd.register_broker(
            state, tracker, request, 4, now_ms, next_offset, node_config))
        current = node.state.metadata_version
        for level in (20, 21, 20, 21, 20, 21):
            kind = cmd.UPGRADE if level > current else cmd.SAFE_DOWNGRADE
            current = level
            r = features_request([("metadata.version", level, kind)])
            result = await node.submit(lambda s, t, n, now, r=r: cmd.update_features(s, r, 2, node_config))
            assert result.response["error_code"] == 0
        nursery.cancel_scope.cancel()
    log_dir = Path(node.config.metadata_log_dir) / "__cluster_metadata-0"
    snapshots = list_snapshots(log_dir)
    assert snapshots, "no snapshot was written"
    # The log no longer starts at 0: the prefix below the snapshot was deleted.
    assert node.metadata_log.start_offset > 0
    assert node.metadata_log.start_offset <= snapshots[-1].end_offset
    expected = node.state.snapshot()
    node.metadata_log.close()

    restarted = ControllerNode(node.config)
    restarted.open()
    try:
        assert restarted.state.snapshot() == expected
        assert restarted.state.metadata_version == 21
        assert restarted.state.broker(5).incarnation_id == incarnation
    finally:
        restarted.metadata_log.close()


async def _register_many(node, count: int, group_commit: bool) -> None:
    node.controller.group_commit = group_commit

    async def one(broker_id: int) -> None:
        request = registration_request(broker_id, uuid.uuid4())
        result = await node.submit(lambda state, tracker, next_offset, now_ms: cmd.register_broker(
            state, tracker, request, 4, now_ms, next_offset, node_config))
        assert result.response["error_code"] == 0
        # Durable before the reply: the committed state already has it.
        assert node.state.broker(broker_id) is not None

    async with trio.open_nursery() as nursery:
        for broker_id in range(100, 100 + count):
            nursery.start_soon(one, broker_id)


@pytest.mark.parametrize("group_commit", [True, False])
async def test_group_commit_shares_fsyncs_between_concurrent_writers(tmp_path, group_commit):
    node = formatted_node(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        appends_before = node.controller.appends
        await _register_many(node, 40, group_commit)
        appends = node.controller.appends - appends_before
        if group_commit:
            # 40 concurrent writers: later ones wait for the fsync in flight and share the next.
            assert appends < 40
        else:
            assert appends == 40
        assert sorted(node.state.brokers) == list(range(100, 140))
        # Broker epochs are the offsets their records got, all distinct.
        assert len({b.epoch for b in node.state.brokers.values()}) == 40
        nursery.cancel_scope.cancel()
    node.metadata_log.close()
    restarted = ControllerNode(node.config)
    restarted.open()
    try:
        assert restarted.state.snapshot() == node.state.snapshot()
    finally:
        restarted.metadata_log.close()


async def test_readers_never_see_records_before_they_are_durable(tmp_path):
    import threading

    node = formatted_node(tmp_path)
    real_append = node.metadata_log.append
    release = threading.Event()
    entered = threading.Event()

    def held_append(*args, **kwargs):
        # Holds the append (and its fsync) until the test has looked.
        entered.set()
        if not release.wait(timeout=30):
            raise RuntimeError("test did not release the append")
        return real_append(*args, **kwargs)

    async with trio.open_nursery() as nursery:
        await nursery.start(node.controller.run)
        await node.bootstrap_if_empty()
        node.metadata_log.append = held_append
        upgraded, validated = trio.Event(), trio.Event()
        answers = {}

        async def upgrade_to_21():
            answers["upgrade"] = await node.submit(upgrade(21))
            upgraded.set()

        async def validate_downgrade_to_20():
            # Only valid against the upgrade still in flight (from 19, 20 is an upgrade, not a
            # downgrade), so this proves commands see the speculative state.
            request = features_request([("metadata.version", 20, cmd.SAFE_DOWNGRADE)], validate_only=True)
            answers["validate"] = await node.submit(
                lambda s, t, n, now: cmd.update_features(s, request, 2, node_config))
            validated.set()

        nursery.start_soon(upgrade_to_21)
        with trio.fail_after(10):
            await trio.to_thread.run_sync(entered.wait)
        nursery.start_soon(validate_downgrade_to_20)
        await trio.testing.wait_all_tasks_blocked()
        # The upgrade is applied speculatively but not durable: readers still see 19, and
        # neither command has been answered (the validation waits for the earlier write).
        assert node.state.metadata_version == 19
        assert answers == {}
        release.set()
        with trio.fail_after(10):
            await upgraded.wait()
            await validated.wait()
        assert node.state.metadata_version == 21
        assert answers["upgrade"].response["error_code"] == 0
        assert answers["validate"].response["error_code"] == 0
        nursery.cancel_scope.cancel()
    node.metadata_log.close()
