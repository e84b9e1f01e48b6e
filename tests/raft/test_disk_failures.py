"""A voter whose disk fails (ENOSPC, EIO) goes offline, not down, and rejoins.

Three RaftDrivers over real MetadataLogs and real 127.0.0.1 sockets (raft_harness),
each log writing through a `FaultyDisk` (faulty_disk.py) the test switches; and one
driver whose quorum-state writes fail. What must hold: the waiter of a proposal its
leader could not make durable is told so (never "committed"); a failed node
acknowledges and grants nothing, answers with a retriable error, and after the disk
heals rejoins with a log identical to the others' and a replay that neither repeats
nor skips an entry.
"""

from __future__ import annotations

import errno
import random

import pytest
import trio
from structlog.testing import capture_logs

from faulty_disk import FaultyDisk
from raft_harness import CLUSTER_ID, raft_cluster
from protocol.errors import ErrorCode
from server.net.peer import BackoffPolicy, PeerAddress
from server.observability import Event
from server.raft import messages as m
from server.raft.core import Append, RaftConfig, Role
from server.raft.driver import RaftDriver, StorageFailedError
from server.raft.log import Batch
from server.raft.messages import ApiKey
from server.raft.quorum_state import FileQuorumStateStore, QuorumState, read_quorum_state
from server.raft.storage import MetadataRaftLog
from server.storage.log import LogFailedError, MetadataLog

BOUND_S = 30  # generous: a loaded CI machine fsyncs slowly; the usual run is ~1-2 s
# Fast retries, so a healed disk is noticed within ~50 ms.
RETRY = BackoffPolicy(initial_ms=10, max_ms=50)


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


def gauge(node, name: str) -> float:
    return node.metrics.registry.get_sample_value(name)


def healthy_leader(cluster, excluded, min_epoch: int):
    """The leader the running nodes other than `excluded` agree on, in an epoch >= min_epoch."""
    others = [node for node in cluster.running() if node is not excluded]
    leaders = [node for node in others if node.driver.role is Role.LEADER and node.driver.epoch >= min_epoch]
    if len(leaders) != 1 or not leaders[0].driver.leader_ready:
        return None
    leader = leaders[0]
    if all(node.driver.leader_id == leader.node_id and node.driver.epoch == leader.driver.epoch for node in others):
        return leader
    return None


async def offer_to(driver: RaftDriver, sender_id: int, api_key: ApiKey, body) -> dict:
    """Offers a KRaft request to a driver (as its listener would) and waits for the answer."""
    answered = trio.Event()
    answers = []

    def answer(response) -> None:
        answers.append(response)
        answered.set()

    driver.offer_request(sender_id, int(api_key), body, answer)
    await answered.wait()
    assert len(answers) == 1
    return answers[0]


async def offer(node, sender_id: int, api_key: ApiKey, body) -> dict:
    return await offer_to(node.driver, sender_id, api_key, body)


def assert_identical_committed_logs(cluster) -> int:
    end = min(node.driver.high_watermark for node in cluster.nodes.values())
    reference = next(iter(cluster.nodes.values())).committed_batches(end)
    for node in cluster.nodes.values():
        assert node.committed_batches(end) == reference, node.node_id
    return end


async def test_a_leader_whose_disk_fills_resigns_answers_reads_and_rejoins_as_a_follower(tmp_path):
    disks = {node_id: FaultyDisk() for node_id in (1, 2, 3)}
    async with raft_cluster(tmp_path, file_ops=disks, storage_retry=RETRY) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            await cluster.commit(leader, values("before", 5))
            old_epoch = leader.driver.epoch
            durable_before = leader.driver.flushed_end_offset
            assert gauge(leader, "kraftwerk_storage_offline") == 0
            # With one follower down, nothing commits without the leader's own copy: the
            # proposal below cannot win the race against its failing write.
            bystander = next(node for node in cluster.nodes.values() if node is not leader)
            await cluster.stop_node(bystander.node_id)

            disk = disks[leader.node_id]
            with capture_logs() as logs:
                disk.fail(errno.ENOSPC)
                # The proposal is accepted (staged and sent), then its write fails: its
                # waiter learns of the disk failure, never of a commit.
                with pytest.raises(StorageFailedError) as failed:
                    base, epoch = await leader.driver.propose([b"lost"])
                    await leader.driver.wait_committed(base, epoch)
                assert leader.driver.high_watermark <= base
                assert "ENOSPC" in str(failed.value)
                assert leader.driver.storage_offline and disk.failures >= 1
                # Further proposals are refused at once while offline.
                with pytest.raises(StorageFailedError):
                    await leader.driver.propose([b"refused"])
            failed_events = [entry for entry in logs if entry["event"] == Event.STORAGE_DISK_FAILED]
            assert len(failed_events) == 1 and failed_events[0]["role"] == "leader"
            assert "ENOSPC" in failed_events[0]["error"]
            assert gauge(leader, "kraftwerk_storage_offline") == 1
            assert gauge(leader, "kraftwerk_storage_failures_total") == 1
            # It resigned: EndQuorumEpoch to both others, so they need not wait for a fetch timeout.
            assert leader.driver.requests_sent[ApiKey.END_QUORUM_EPOCH] >= 2
            assert leader.driver.role is not Role.LEADER

            # The other two elect a leader and commit without it.
            await cluster.start_node(bystander.node_id)
            await cluster.wait_until(lambda: healthy_leader(cluster, leader, old_epoch + 1) is not None)
            successor = healthy_leader(cluster, leader, old_epoch + 1)
            await cluster.commit(successor, values("during", 5))

            # Offline, the node still answers: DescribeQuorum in its own shape, KRaft
            # requests with a retriable error (no vote granted), and its committed state.
            partition = leader.driver.describe_partition(0)
            assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert partition["leader_epoch"] >= old_epoch
            vote = await offer(leader, successor.node_id, ApiKey.VOTE, m.vote_request(
                CLUSTER_ID, leader.node_id, successor.driver.epoch + 1, successor.node_id,
                successor.driver.epoch, 1 << 20, False))
            assert vote["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            assert sorted(leader.values) == sorted(values("before", 5))  # its committed state, as it was
            # Still failing: a retry fails, and the node stays offline.
            await cluster.wait_until(lambda: leader.driver.storage_recovery_failures >= 1)
            assert leader.driver.storage_offline

            with capture_logs() as logs:
                disk.heal()
                # Space returns: it reopens its log (the torn tail and the never-fsynced
                # batch cut), comes back resigned, and follows the new leader.
                await cluster.wait_until(lambda: not leader.driver.storage_offline
                                         and leader.driver.role is Role.FOLLOWER
                                         and leader.driver.leader_id == successor.node_id
                                         and leader.applied_offset >= successor.driver.high_watermark)
            assert any(entry["event"] == Event.STORAGE_DISK_RECOVERED for entry in logs)
            assert gauge(leader, "kraftwerk_storage_offline") == 0
            assert leader.driver.flushed_end_offset >= durable_before

            await cluster.commit(successor, values("after", 5))
            await cluster.wait_until(lambda: all(
                node.driver.high_watermark == successor.driver.high_watermark
                and node.applied_offset == successor.driver.high_watermark for node in cluster.nodes.values()))
            assert_identical_committed_logs(cluster)
            # Replay continued where it was: nothing read twice, nothing skipped.
            for node in cluster.nodes.values():
                assert node.values == successor.values
            for value in values("before", 5) + values("during", 5) + values("after", 5):
                assert successor.values.count(value) == 1


async def test_a_follower_whose_fsync_fails_stops_acknowledging_and_rejoins(tmp_path):
    disks = {node_id: FaultyDisk() for node_id in (1, 2, 3)}
    async with raft_cluster(tmp_path, file_ops=disks, storage_retry=RETRY) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            await cluster.commit(leader, values("before", 3))
            follower = next(node for node in cluster.nodes.values() if node is not leader)
            other = next(node for node in cluster.nodes.values() if node not in (leader, follower))
            await cluster.wait_until(lambda: follower.driver.flushed_end_offset == leader.driver.log_end_offset)
            durable = follower.driver.flushed_end_offset

            # EIO on fsync: the bytes reach the page cache, the fsync fails.
            disks[follower.node_id].fail(errno.EIO, operations=("fsync",))
            committed = await cluster.commit(leader, values("while-failed", 5))
            end = max(offset for offset, _ in committed) + 1
            await cluster.wait_until(lambda: follower.driver.storage_offline)
            assert follower.driver.role is not Role.FOLLOWER  # it stopped fetching
            # The quorum committed with the other two; the failed follower acknowledged
            # nothing past what it had made durable.
            assert leader.driver.high_watermark >= end
            acknowledged = leader.driver.describe().voters[follower.node_id].end_offset
            assert acknowledged <= durable
            await cluster.wait_until(lambda: other.applied_offset >= end)
            # A vote request is answered with a retriable error, never a grant.
            vote = await offer(follower, other.node_id, ApiKey.VOTE, m.vote_request(
                CLUSTER_ID, follower.node_id, leader.driver.epoch + 1, other.node_id,
                leader.driver.epoch, end, False))
            assert vote["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR

            disks[follower.node_id].heal()
            await cluster.wait_until(lambda: not follower.driver.storage_offline
                                     and follower.driver.role is Role.FOLLOWER
                                     and follower.applied_offset >= end)
            await cluster.commit(leader, values("after", 3))
            await cluster.wait_until(lambda: all(
                node.applied_offset == leader.driver.high_watermark for node in cluster.nodes.values()))
            assert_identical_committed_logs(cluster)
            assert follower.values == leader.values == other.values
            assert cluster.agreed_leader() is leader  # the failure moved no leadership


class FailingQuorumStore(FileQuorumStateStore):
    """A quorum-state store whose writes fail with EIO while `failing` is set."""

    failing = False

    def write(self, state: QuorumState) -> None:
        if self.failing:
            raise OSError(errno.EIO, "Input/output error (injected on the quorum-state write)")
        super().write(state)


async def test_a_vote_whose_quorum_state_write_fails_is_never_granted(tmp_path):
    voters = frozenset({1, 2, 3})
    log = MetadataLog.open(tmp_path)
    try:
        store = FailingQuorumStore(tmp_path, CLUSTER_ID, voters)
        # The peers are unreachable; only the inbound votes matter here.
        peers = {2: PeerAddress(2, "127.0.0.1", 1), 3: PeerAddress(3, "127.0.0.1", 1)}
        config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER_ID, election_timeout_ms=60_000)
        driver = RaftDriver(config, MetadataRaftLog(log), store, peers, random.Random(5), storage_retry=RETRY)
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            with trio.fail_after(BOUND_S):
                store.failing = True
                answer = await offer_to(driver, 2, ApiKey.VOTE, m.vote_request(CLUSTER_ID, 1, 1, 2, 0, 0, False))
                assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
                assert driver.storage_offline and store.read() == QuorumState()

                store.failing = False
                while driver.storage_offline:
                    await driver.wait_changed()
                # The grant to 2 never became durable, so it was never given: in the same
                # epoch this voter may still vote for 3, and the file says so.
                answer = await offer_to(driver, 3, ApiKey.VOTE, m.vote_request(CLUSTER_ID, 1, 1, 3, 0, 0, False))
                assert answer["error_code"] == ErrorCode.NONE
                assert answer["topics"][0]["partitions"][0]["vote_granted"]
                assert read_quorum_state(tmp_path) == QuorumState(epoch=1, voted_id=3)
            nursery.cancel_scope.cancel()
    finally:
        log.close()


async def test_entries_committed_on_the_followers_copies_survive_the_leaders_failed_fsync(tmp_path):
    disks = {node_id: FaultyDisk() for node_id in (1, 2, 3)}
    async with raft_cluster(tmp_path, file_ops=disks, storage_retry=RETRY) as cluster:
        with trio.fail_after(BOUND_S):
            leader = await cluster.wait_for_leader()
            await cluster.commit(leader, values("before", 3))
            await cluster.wait_until(lambda: leader.driver.flushed_end_offset == leader.driver.log_end_offset)
            old_epoch = leader.driver.epoch
            disk = disks[leader.node_id]

            # The leader's own fsync of x stalls; the followers' durable copies commit it.
            disk.hold_fsyncs()
            [(x_offset, _)] = await cluster.commit(leader, [b"x"])
            await cluster.wait_until(lambda: leader.applied_offset > x_offset)
            assert leader.driver.flushed_end_offset <= x_offset < leader.driver.high_watermark
            # Then its fsync fails (the stalled one, or the one not reached yet): x is in
            # the page cache, not known durable.
            disk.fail(errno.EIO, operations=("fsync",))
            disk.release()
            await cluster.wait_until(lambda: leader.driver.storage_offline)
            assert leader.driver.flushed_end_offset <= x_offset

            await cluster.wait_until(lambda: healthy_leader(cluster, leader, old_epoch + 1) is not None)
            successor = healthy_leader(cluster, leader, old_epoch + 1)
            await cluster.commit(successor, values("during", 3))

            with capture_logs() as logs:
                disk.heal()
                await cluster.wait_until(lambda: not leader.driver.storage_offline
                                         and leader.driver.role is Role.FOLLOWER
                                         and leader.applied_offset >= successor.driver.high_watermark)
            # Reopened, it cut the batch its failed fsync may not have written (recovery
            # alone would have kept it: the bytes read back whole) and fetched it again.
            cuts = [entry for entry in logs if entry["event"] == Event.STORAGE_TRUNCATED
                    and entry.get("end_offset", 1 << 62) <= x_offset]
            assert cuts, "the never-fsynced tail was not cut on reopen"
            await cluster.commit(successor, values("after", 3))
            await cluster.wait_until(lambda: all(
                node.applied_offset == successor.driver.high_watermark for node in cluster.nodes.values()))
            assert_identical_committed_logs(cluster)
            # Its replay read x once, before the failure, and neither repeated nor skipped anything.
            assert leader.values == successor.values
            assert leader.values.count(b"x") == 1


async def test_reopen_after_a_failed_fsync_keeps_the_durable_log_and_cuts_the_rest(tmp_path):
    disk = FaultyDisk()
    metadata_log = MetadataLog.open(tmp_path / "log", file_ops=disk)
    try:
        storage = MetadataRaftLog(metadata_log)
        await storage.apply([Append(Batch(0, 1, (b"a", b"b"), None, 0))])
        storage.stage([Batch(2, 1, (b"c",), None, 0), Batch(3, 2, (b"d",), None, 0)])
        disk.fail(errno.EIO, operations=("fsync",))
        with pytest.raises(OSError):
            await storage.write_staged()
        # The log refuses every use until it is reopened; its end is still the durable end.
        with pytest.raises(LogFailedError):
            metadata_log.read_raw(0)
        assert storage.flushed_end_offset == 2
        # The disk still fails: the probe says so before anything is reopened.
        with pytest.raises(OSError):
            await storage.reopen()
        with pytest.raises(LogFailedError):
            metadata_log.read_raw(0)

        disk.heal()
        with capture_logs() as logs:
            await storage.reopen()
        # Recovery found the unfsynced batches whole in the page cache and kept them;
        # the cut to the durable end removed them again.
        opened = [entry for entry in logs if entry["event"] == Event.STORAGE_LOG_OPENED]
        assert opened and opened[0]["end_offset"] == 4
        assert not storage.has_staged
        assert storage.end_offset == storage.flushed_end_offset == metadata_log.end_offset == 2
        assert [batch.values for batch in storage.read(0, 1 << 20)] == [(b"a", b"b")]
        # The same object is a working log again.
        await storage.apply([Append(Batch(2, 2, (b"e",), None, 0))])
        assert metadata_log.end_offset == 3
    finally:
        metadata_log.close()
    reopened = MetadataLog.open(tmp_path / "log")
    try:
        assert reopened.end_offset == 3 and reopened.last_epoch == 2
    finally:
        reopened.close()
