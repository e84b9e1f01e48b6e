"""Downgrades on a running controller and broker (in-process, real sockets): snapshots at
the metadata.version change, the lossy projection on every copy, and restarts."""

from __future__ import annotations

import trio

from protocol.errors import ErrorCode
from server.broker.lifecycle import BrokerState
from server.controller.snapshot import load_snapshot
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.storage.snapshot import list_snapshots, read_snapshot, snapshot_path

from .harness import running_cluster

TIMEOUT_S = 30
MV_3_6_IV2, MV_3_7_IV2, MV_3_7_IV4 = 14, 17, 19
SAFE, UNSAFE = 2, 3


def snapshots(directory):
    return list_snapshots(directory / METADATA_LOG_DIR_NAME)


def snapshot_records(directory, snapshot_id):
    return read_snapshot(snapshot_path(directory / METADATA_LOG_DIR_NAME, snapshot_id))


def latest_loaded(directory, cluster_id):
    latest = max(snapshots(directory))
    return load_snapshot(snapshot_records(directory, latest).records, latest.end_offset, cluster_id)


async def restarted_controller_state(cluster):
    node = ControllerNode(cluster.controller.config)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        await node.controller.wait_active()
        state = node.state
        nursery.cancel_scope.cancel()
    return state


async def test_unsafe_downgrade_drops_log_dirs_everywhere_and_survives_restarts(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            async with trio.open_nursery() as brokers:
                broker = await cluster.start_broker_in(brokers, 106, "3.7")
                await broker.lifecycle.wait_state(BrokerState.RUNNING)
                assert cluster.controller.state.broker(106).log_dirs == (broker.directory_id,)
                reply = await cluster.update_metadata_version(MV_3_6_IV2, UNSAFE)
                assert reply.error_code == ErrorCode.NONE
                assert (f"broker 106: RegisterBrokerRecord.LogDirs (since 3.7-IV2) = {broker.directory_id}"
                        in reply.error_message)
                await broker.wait_renegotiated(MV_3_6_IV2)
                for image in (cluster.controller.state, broker.state):
                    assert image.metadata_version == MV_3_6_IV2
                    assert image.broker(106).log_dirs == ()
                    assert image.broker(106).endpoints  # only what 3.6-IV2 cannot hold is gone
                # A snapshot at the new level right after the change, on the controller and
                # the broker, and the log before it is gone: no 3.7 record is left to read.
                for directory in (tmp_path / "controller-1", tmp_path / "broker-106"):
                    loaded = latest_loaded(directory, cluster.cluster_id)
                    assert loaded.metadata_version == MV_3_6_IV2 and loaded.broker(106).log_dirs == ()
                assert cluster.controller.raft_driver.storage.start_offset == max(
                    snapshots(tmp_path / "controller-1")).end_offset
                await broker.shutdown(10)
            cluster.nursery.cancel_scope.cancel()
        state = await restarted_controller_state(cluster)
        assert state.metadata_version == MV_3_6_IV2
        assert state.broker(106).log_dirs == ()


async def test_lossless_downgrade_keeps_every_record_across_a_restart(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            async with trio.open_nursery() as brokers:
                broker = await cluster.start_broker_in(brokers, 107, "3.7")
                await broker.lifecycle.wait_state(BrokerState.RUNNING)
                before = cluster.controller.state.broker(107)
                reply = await cluster.update_metadata_version(MV_3_7_IV2, SAFE)
                assert (reply.error_code, reply.error_message) == (ErrorCode.NONE, None)
                assert cluster.controller.state.broker(107) == before
                # The snapshot just before the change is the rollback point; a lossless
                # change keeps the whole log (older software reads every record in it).
                latest = latest_loaded(tmp_path / "controller-1", cluster.cluster_id)
                assert latest.metadata_version == MV_3_7_IV4 and latest.broker(107) == before
                assert cluster.controller.raft_driver.storage.start_offset == 0
                await broker.wait_renegotiated(MV_3_7_IV2)
                assert broker.state.broker(107).log_dirs == before.log_dirs
                # An upgrade snapshots the state just before it: the rollback point.
                assert (await cluster.update_metadata_version(MV_3_7_IV4)).error_code == ErrorCode.NONE
                latest = latest_loaded(tmp_path / "controller-1", cluster.cluster_id)
                assert latest.metadata_version == MV_3_7_IV2
                assert cluster.controller.state.metadata_version == MV_3_7_IV4
                await broker.wait_renegotiated(MV_3_7_IV4)
                await broker.shutdown(10)
            cluster.nursery.cancel_scope.cancel()
        state = await restarted_controller_state(cluster)
        assert state.metadata_version == MV_3_7_IV4
        assert state.broker(107).log_dirs == before.log_dirs
