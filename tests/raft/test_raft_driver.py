"""Three RaftDrivers over real MetadataLogs and real 127.0.0.1 sockets: election,
replication, failover, restart and catch-up by FetchSnapshot."""

from __future__ import annotations

import threading

import pytest
import trio

from raft_harness import raft_cluster
from server.raft.core import Role
from server.raft.driver import NotLeaderError
from server.raft.messages import ApiKey
from server.raft.quorum_state import read_quorum_state
from server.storage.snapshot import SnapshotWriter, delete_snapshots_before, list_snapshots, snapshot_file_name
from server.values import SnapshotId

BOUND_S = 30  # generous: a loaded CI machine fsyncs slowly; the usual run is ~1 s


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


def entry_at(node, offset: int) -> tuple[int, bytes]:
    """(epoch, value) of the entry at `offset` in a node's log."""
    for base, epoch, batch_values, _ in node.committed_batches(node.driver.log_end_offset):
        if base <= offset < base + len(batch_values):
            return epoch, batch_values[offset - base]
    raise AssertionError(f"node {node.node_id} has no entry at {offset}")


async def test_three_voters_elect_one_leader_and_replicate_identical_committed_batches(tmp_path):
    async with raft_cluster(tmp_path) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            followers = [node for node in cluster.nodes.values() if node is not leader]
            assert [node.driver.role for node in followers] == [Role.FOLLOWER, Role.FOLLOWER]
            # The election is durable: the quorum-state file names the leader and its epoch.
            # (The driver's properties show the core's state, which a follower persists in the
            # Ready that follows, so a wake-up from another node can come just before the write.)
            def durable(node) -> bool:
                state = read_quorum_state(node.directory)
                return (state.epoch, state.leader_id) == (leader.driver.epoch, leader.node_id)

            await cluster.wait_until(lambda: all(durable(node) for node in cluster.nodes.values()))
            assert cluster.agreed_leader() is leader

            with pytest.raises(NotLeaderError) as refused:
                await followers[0].driver.propose([b"not here"])
            assert refused.value.leader_id == leader.node_id
            assert refused.value.epoch == leader.driver.epoch

            appends_before = leader.driver.appends
            proposed = values("a", 30)
            committed = await cluster.commit(leader, proposed)
            # Concurrent proposals share appends (group commit), one fsync each.
            assert leader.driver.appends - appends_before < len(proposed)
            end = max(offset for offset, _ in committed) + 1
            # The leader's own fsync may trail its commits (followers' copies commit them).
            await cluster.wait_until(lambda: leader.driver.flushed_end_offset >= end)
            for (offset, epoch), value in zip(committed, proposed):
                assert epoch == leader.driver.epoch
                assert entry_at(leader, offset) == (epoch, value)

            await cluster.wait_until(lambda: all(
                node.driver.high_watermark >= end and node.applied_offset >= end for node in cluster.nodes.values()))
            reference = leader.committed_batches(end)
            assert reference[0][3] is not None  # the epoch opens with a LeaderChange control batch
            for node in followers:
                assert node.committed_batches(end) == reference
            # Replay saw the same values, in commit order, everywhere.
            for node in cluster.nodes.values():
                assert sorted(node.values) == sorted(proposed)
                assert node.values == leader.values
            assert len([node for node in cluster.nodes.values() if node.driver.role is Role.LEADER]) == 1

            assert leader.driver.leader_ready and leader.driver.epoch_start_offset == reference[0][0]
            assert leader.driver.next_offset == leader.driver.log_end_offset == end
            assert not any(node.driver.leader_ready for node in followers)
            described = leader.driver.describe_partition(wall_clock_ms=1_000_000)
            assert described["leader_id"] == leader.node_id and described["high_watermark"] >= end
            assert sorted(voter["replica_id"] for voter in described["current_voters"]) == [1, 2, 3]


async def test_failover_keeps_committed_data_and_a_restarted_node_catches_up(tmp_path):
    async with raft_cluster(tmp_path) as cluster:
        with trio.fail_after(BOUND_S):
            first = await cluster.wait_for_leader()
            first_epoch = first.driver.epoch
            before = await cluster.commit(first, values("before", 10))
            end_before = max(offset for offset, _ in before) + 1

            await cluster.stop_node(first.node_id)
            second = await cluster.wait_for_leader(min_epoch=first_epoch + 1)
            assert second is not first and second.driver.epoch > first_epoch
            # Everything committed under the old leader is still there, unchanged.
            for (offset, epoch), value in zip(before, values("before", 10)):
                assert entry_at(second, offset) == (epoch, value)

            after = await cluster.commit(second, values("after", 10))  # 2 of 3 voters suffice
            end_after = max(offset for offset, _ in after) + 1
            assert end_after > end_before
            assert all(epoch == second.driver.epoch for _, epoch in after)

            restarted = await cluster.start_node(first.node_id)
            await cluster.wait_until(lambda: restarted.driver.high_watermark >= end_after
                                     and restarted.applied_offset >= end_after)
            assert restarted.driver.role is Role.FOLLOWER and restarted.driver.leader_id == second.node_id
            await cluster.wait_until(lambda: all(node.applied_offset >= end_after for node in cluster.nodes.values())
                                     and second.driver.flushed_end_offset >= end_after)
            reference = second.committed_batches(end_after)
            for node in cluster.nodes.values():
                assert node.committed_batches(end_after) == reference
                assert sorted(node.values) == sorted(values("before", 10) + values("after", 10))
                assert node.values == second.values


async def test_a_follower_behind_the_log_start_catches_up_by_fetch_snapshot(tmp_path):
    # Small snapshot chunks, so the transfer takes several FetchSnapshot round trips.
    async with raft_cluster(tmp_path, snapshot_chunk_bytes=128) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            await cluster.commit(leader, values("early", 5))
            lagging = next(node for node in cluster.nodes.values() if node is not leader)
            lagging_end = lagging.driver.log_end_offset
            await cluster.stop_node(lagging.node_id)

            await cluster.commit(leader, values("while-down", 40))
            await cluster.wait_until(lambda: leader.applied_offset >= leader.driver.high_watermark)
            # The leader snapshots its committed state and deletes the log before it.
            snapshot_end = leader.applied_offset
            epoch = leader.storage.epoch_before(snapshot_end)
            writer = SnapshotWriter(leader.storage.directory, SnapshotId(snapshot_end, epoch), 0)
            with writer:
                writer.append(leader.values)
                writer.freeze()
            start = await leader.driver.compact(SnapshotId(snapshot_end, epoch))
            assert start == snapshot_end > lagging_end
            assert leader.metadata_log.start_offset == snapshot_end

            restarted = await cluster.start_node(lagging.node_id)
            await cluster.wait_until(lambda: restarted.applied_offset >= snapshot_end)
            assert restarted.snapshots_loaded == [SnapshotId(snapshot_end, epoch)]
            assert restarted.driver.snapshot_generation == 1
            snapshot_bytes = (restarted.directory / snapshot_file_name(SnapshotId(snapshot_end, epoch))).stat().st_size
            assert restarted.driver.requests_sent[ApiKey.FETCH_SNAPSHOT] >= snapshot_bytes // 128 > 1
            assert restarted.metadata_log.start_offset == snapshot_end
            assert list_snapshots(restarted.directory) == [SnapshotId(snapshot_end, epoch)]
            # An interval snapshot of its own, of an offset the leader's snapshot overtook (its
            # replay wrote it meanwhile, and the install deleted it as older) is passed over
            # rather than failing the node.
            overtaken = SnapshotId(lagging_end, epoch)
            with SnapshotWriter(restarted.storage.directory, overtaken, 0) as writer:
                writer.append(restarted.values[:1] or [b"x"])
                writer.freeze()
            delete_snapshots_before(restarted.storage.directory, SnapshotId(snapshot_end, epoch))
            assert await restarted.driver.compact(overtaken) == snapshot_end
            assert restarted.metadata_log.start_offset == snapshot_end

            # Replication continues on top of the installed snapshot.
            later = await cluster.commit(leader, values("later", 5))
            end = max(offset for offset, _ in later) + 1
            await cluster.wait_until(lambda: all(node.applied_offset >= end for node in cluster.nodes.values())
                                     and leader.driver.flushed_end_offset >= end)
            for node in cluster.nodes.values():
                assert node.values == leader.values
            assert restarted.committed_batches(end) == [
                batch for batch in leader.committed_batches(end) if batch[0] >= snapshot_end]


async def test_a_leader_commits_on_its_followers_durable_copies_while_its_own_fsync_lags(tmp_path):
    """The leader sends before its own fsync (KRaft does): a commit rests on a majority of
    durable copies, here both followers', while the leader's write is held."""
    async with raft_cluster(tmp_path) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            await cluster.commit(leader, values("warm", 3))
            await cluster.wait_until(lambda: leader.driver.flushed_end_offset >= leader.driver.high_watermark)
            followers = [node for node in cluster.nodes.values() if node is not leader]

            entered, release = threading.Event(), threading.Event()
            real_append = leader.metadata_log.append_verified

            def held_append(batches):
                # Runs in the leader's writer thread: holds the write and its fsync.
                entered.set()
                if not release.wait(timeout=BOUND_S):
                    raise RuntimeError("the test did not release the leader's write")
                return real_append(batches)

            leader.metadata_log.append_verified = held_append
            try:
                flushed_before = leader.driver.flushed_end_offset
                base, epoch = await leader.driver.propose([b"held"])
                await leader.driver.wait_committed(base, epoch)
                assert await trio.to_thread.run_sync(entered.wait, BOUND_S)
                high_watermark = leader.driver.high_watermark
                assert high_watermark > base
                # Not on the leader's disk: its durable end did not move, the file lacks the entry.
                assert leader.driver.flushed_end_offset == leader.metadata_log.end_offset == flushed_before <= base
                assert all(batch[0] + len(batch[2]) <= base for batch in leader.committed_batches(base + 1))
                # ... but durable on both followers, so on a majority.
                for node in followers:
                    assert node.metadata_log.end_offset > base
                    assert entry_at(node, base) == (epoch, b"held")
                # The leader still serves its own log (reads come from the staged tail).
                assert leader.driver.log_end_offset == base + 1
            finally:
                release.set()
            await cluster.wait_until(lambda: leader.driver.flushed_end_offset == leader.driver.log_end_offset)
            # The flush completing changes nothing that was acknowledged.
            assert leader.driver.high_watermark == high_watermark
            assert entry_at(leader, base) == (epoch, b"held")
            await cluster.wait_until(lambda: all(node.applied_offset >= base + 1 for node in cluster.nodes.values()))
            reference = leader.committed_batches(base + 1)
            for node in followers:
                assert node.committed_batches(base + 1) == reference
            for node in cluster.nodes.values():
                assert node.values[-1] == b"held" and node.values == leader.values
