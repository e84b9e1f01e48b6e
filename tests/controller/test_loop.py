"""The controller loop over the Raft driver and the real segment log, one voter (the
degenerate quorum): replies only after commit and replay, restart replays exactly
what was acknowledged, group commit, readers see only committed state, snapshots,
and session fencing on trio's virtual clock (no wall-clock waits)."""

from __future__ import annotations

import threading
import uuid
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trio.testing

from server.config import Listener, ServerConfig
from server.controller import commands as cmd
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, write_meta_properties

from .helpers import CLUSTER_ID, features_request, heartbeat_request, registration_request

SESSION_TIMEOUT_MS = 9_000

node_config = cmd.ControllerConfig(node_id=1, cluster_id=CLUSTER_ID)


def formatted_config(tmp_path: Path, metadata_version_level: int = 19, **changes) -> ServerConfig:
    directory = tmp_path / "controller-1"
    if not directory.exists():
        directory.mkdir()
        write_bootstrap_checkpoint(directory, cmd.bootstrap_records(metadata_version_level))
        write_meta_properties(directory, MetaProperties(cluster_id=CLUSTER_ID, node_id=1))
    config = ServerConfig(node_id=1, listener=Listener("CONTROLLER", "127.0.0.1", 0),
                          metadata_log_dir=directory, broker_session_timeout_ms=SESSION_TIMEOUT_MS)
    return replace(config, **changes)


@asynccontextmanager
async def running(config: ServerConfig, before_start=None):
    node = ControllerNode(config)
    node.open()
    if before_start is not None:
        before_start(node)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        yield node
        nursery.cancel_scope.cancel()


def acknowledged_then_reregistered(restarted: ControllerNode, acknowledged: dict) -> dict:
    """What a restarted lone controller's image must be: exactly the acknowledged one,
    plus the one record the new process wrote before it reported started — its own
    RegisterControllerRecord under a new incarnation id (KIP-919)."""
    own = restarted.state.controller_registration(restarted.config.node_id)
    assert own is not None and own.incarnation_id != acknowledged["controllers"][restarted.config.node_id].incarnation_id
    # Its offset comes after the new leader's LeaderChange control record.
    offset = restarted.state.last_applied_offset
    assert offset > acknowledged["last_applied_offset"]
    return {**acknowledged, "controllers": {**acknowledged["controllers"], restarted.config.node_id: own},
            "last_applied_offset": offset}


def upgrade(level: int):
    request = features_request([("metadata.version", level, cmd.UPGRADE)])
    return lambda state, tracker, next_offset, now_ms: cmd.update_features(state, request, 2, node_config)


def register(broker_id: int, incarnation: uuid.UUID | None = None):
    request = registration_request(broker_id, incarnation or uuid.uuid4())
    return lambda state, tracker, next_offset, now_ms: cmd.register_broker(
        state, tracker, request, 4, now_ms, next_offset, node_config)


async def test_reply_only_after_records_are_committed_and_replayed(tmp_path):
    async with running(formatted_config(tmp_path)) as node:
        assert node.state.metadata_version == 19  # bootstrapped by the first leader
        end_before = node.metadata_log.end_offset
        result = await node.submit(upgrade(21))
        assert result.response["error_code"] == 0
        # Durable: the record is in the log (after the batch that held it).
        assert node.metadata_log.end_offset > end_before
        assert node.raft_driver.high_watermark == node.metadata_log.end_offset
        # Applied: the committed state shows the new level, its epoch is that record's offset.
        assert node.state.metadata_version == 21
        assert node.state.finalized_features_epoch == node.metadata_log.end_offset - 1


async def test_restart_replays_exactly_the_acknowledged_state(tmp_path):
    config = formatted_config(tmp_path)
    incarnation = uuid.uuid4()
    async with running(config) as node:
        first_epoch = node.raft_driver.epoch
        await node.submit(upgrade(21))
        registered = await node.submit(register(7, incarnation))
        assert registered.response["error_code"] == 0
        snapshot = node.state.snapshot()
    async with running(config) as restarted:
        # A new leader epoch; the state is exactly what was acknowledged before.
        assert restarted.raft_driver.epoch > first_epoch
        assert restarted.state.snapshot() == acknowledged_then_reregistered(restarted, snapshot)
        assert restarted.state.broker(7).incarnation_id == incarnation
        assert restarted.state.broker(7).epoch == registered.response["broker_epoch"]


async def test_a_failing_command_is_reported_and_the_loop_goes_on(tmp_path):
    def broken(state, tracker, next_offset, now_ms):
        raise RuntimeError("bug in a command")

    async with running(formatted_config(tmp_path)) as node:
        with pytest.raises(RuntimeError, match="bug in a command"):
            await node.submit(broken)
        result = await node.submit(upgrade(20))
        assert result.response["error_code"] == 0
        assert node.state.metadata_version == 20


@pytest.mark.parametrize("group_commit", [True, False])
async def test_group_commit_shares_proposals_between_concurrent_writers(tmp_path, group_commit):
    config = formatted_config(tmp_path, controller_group_commit=group_commit)
    async with running(config) as node:
        proposals_before = node.controller.proposals

        async def one(broker_id: int) -> None:
            result = await node.submit(register(broker_id))
            assert result.response["error_code"] == 0
            # Committed before the reply: the committed state already has it.
            assert node.state.broker(broker_id) is not None

        async with trio.open_nursery() as writers:
            for broker_id in range(100, 140):
                writers.start_soon(one, broker_id)
        proposals = node.controller.proposals - proposals_before
        if group_commit:
            # Later writers wait for the batch in flight and share the next one.
            assert proposals < 40
        else:
            assert proposals == 40
        assert sorted(node.state.brokers) == list(range(100, 140))
        # Broker epochs are the offsets their records got, all distinct.
        assert len({b.epoch for b in node.state.brokers.values()}) == 40
        snapshot = node.state.snapshot()
    async with running(config) as restarted:
        assert restarted.state.snapshot() == acknowledged_then_reregistered(restarted, snapshot)


async def test_readers_never_see_records_before_they_are_committed(tmp_path):
    release = threading.Event()
    entered = threading.Event()
    holding = {"on": False}

    def hold_appends(node: ControllerNode) -> None:
        real_append = node.metadata_log.append_verified

        def held_append(batches):
            # Holds the append (and its fsync) until the test has looked.
            if holding["on"]:
                entered.set()
                if not release.wait(timeout=30):
                    raise RuntimeError("test did not release the append")
            return real_append(batches)

        node.metadata_log.append_verified = held_append

    async with running(formatted_config(tmp_path), before_start=hold_appends) as node:
        holding["on"] = True
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

        async with trio.open_nursery() as clients:
            clients.start_soon(upgrade_to_21)
            with trio.fail_after(10):
                await trio.to_thread.run_sync(entered.wait)
            clients.start_soon(validate_downgrade_to_20)
            await trio.testing.wait_all_tasks_blocked()
            # The upgrade is applied speculatively but not durable: readers still see 19,
            # and neither command has been answered (the validation waits for the write).
            assert node.state.metadata_version == 19
            assert answers == {}
            holding["on"] = False
            release.set()
            with trio.fail_after(10):
                await upgraded.wait()
                await validated.wait()
        assert node.state.metadata_version == 21
        assert answers["upgrade"].response["error_code"] == 0
        assert answers["validate"].response["error_code"] == 0


async def test_snapshots_are_taken_by_size_and_a_restart_recovers_from_them(tmp_path):
    from server.storage.snapshot import list_snapshots

    # A tiny interval: a snapshot after every couple of records.
    config = formatted_config(tmp_path, metadata_snapshot_max_record_bytes=40)
    incarnation = uuid.uuid4()
    async with running(config) as node:
        await node.submit(register(5, incarnation))
        current = node.state.metadata_version
        for level in (20, 21, 20, 21, 20, 21):
            kind = cmd.UPGRADE if level > current else cmd.SAFE_DOWNGRADE
            current = level
            request = features_request([("metadata.version", level, kind)])
            result = await node.submit(lambda s, t, n, now, r=request: cmd.update_features(s, r, 2, node_config))
            assert result.response["error_code"] == 0
        log_dir = node.log_dir
        snapshots = list_snapshots(log_dir)
        assert snapshots, "no snapshot was written"
        # The log no longer starts at 0: the prefix below a snapshot was deleted.
        assert node.metadata_log.start_offset > 0
        assert node.metadata_log.start_offset <= snapshots[-1].end_offset
        expected = node.state.snapshot()
    async with running(config) as restarted:
        assert restarted.state.snapshot() == acknowledged_then_reregistered(restarted, expected)
        assert restarted.state.metadata_version == 21
        assert restarted.state.broker(5).incarnation_id == incarnation


async def test_brokers_without_heartbeats_are_fenced_after_the_session_timeout(tmp_path, autojump_clock):
    """Virtual time: MockClock jumps whenever every task waits, so 9 s pass instantly."""
    # pytest-trio runs this test on its autojump MockClock fixture.
    assert trio.lowlevel.current_clock() is autojump_clock
    async with running(formatted_config(tmp_path)) as node:
        epochs = {}
        for broker_id in (1, 2):
            result = await node.submit(register(broker_id))
            epochs[broker_id] = result.response["broker_epoch"]

        async def heartbeat(broker_id: int):
            request = heartbeat_request(broker_id, epochs[broker_id], node.metadata_log.end_offset)
            return await node.submit(
                lambda state, tracker, next_offset, now_ms: cmd.broker_heartbeat(
                    state, tracker, request, 1, now_ms, node_config, next_offset=next_offset))

        for broker_id in (1, 2):
            response = (await heartbeat(broker_id)).response
            assert response["is_fenced"] is False
        assert not node.state.broker(1).fenced and not node.state.broker(2).fenced

        start = trio.current_time()
        # Broker 2 keeps heartbeating every 2 s; broker 1 goes silent.
        while trio.current_time() - start < 3 * SESSION_TIMEOUT_MS / 1000:
            await trio.sleep(2)
            assert (await heartbeat(2)).response["error_code"] == 0
        assert node.state.broker(1).fenced
        assert not node.state.broker(2).fenced
