"""Three real controller processes on 127.0.0.1: failover under a stream of writes,
a partitioned follower that must catch up from a snapshot, and DescribeQuorum as
kafka-python and `kraftwerk metadata-quorum describe` see it.

The controllers run with Kafka's default quorum timeouts (election 1 s, fetch
2 s), so a failover takes a few seconds of real time; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest
from kafka.admin import KafkaAdminClient, UpdateFeatureType
from kafka.errors import KafkaError

from .helpers import run_cli, status_node_ids
from .quorum_helpers import (
    MV,
    SAFE_DOWNGRADE,
    UPGRADE,
    LocalQuorum,
    QuorumTestError,
    collapse_repeats,
    feature_levels_in,
    finalized,
    poll_until,
    read_log_batches,
)

pytestmark = pytest.mark.e2e

MV_3_8 = 20  # 3.8-IV0, the level the quorum is formatted at
MV_3_9 = 21  # 3.9-IV0
LEADER_TIMEOUT_S = 15.0
CATCH_UP_TIMEOUT_S = 15.0
STREAM_TIMEOUT_S = 30.0
# Between failed calls while the quorum elects a new leader: bounded polling of
# other processes' state, not synchronisation.
RETRY_INTERVAL_S = 0.05
ADMIN_REQUEST_TIMEOUT_MS = 5_000
# How long after the N-th acknowledged update the leader is killed: long enough that
# the next update is usually in flight (chaos, not synchronisation: every assertion
# holds wherever the kill lands).
KILL_DELAY_S = 0.005


@pytest.fixture
def make_quorum(tmp_path):
    quorums: list[LocalQuorum] = []

    def make(**kwargs) -> LocalQuorum:
        quorum = LocalQuorum(tmp_path / f"quorum-{len(quorums)}", **kwargs)
        quorums.append(quorum)
        quorum.start_all()
        return quorum

    try:
        yield make
    finally:
        for quorum in quorums:
            quorum.stop_all()


def new_admin(quorum: LocalQuorum) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=quorum.bootstrap_servers(), client_id="kraftwerk-quorum-e2e",
                            request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS, bootstrap_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS)


class FeatureStream:
    """Alternates metadata.version between 3.8-IV0 and 3.9-IV0 through kafka-python.

    A call that raises is retried with the same target: updating to the current
    level is accepted (and writes a record), so a retry after an update that was
    committed but never acknowledged is harmless, and the committed levels with
    repeats collapsed must be exactly the acknowledged sequence.

    kafka-python 3.0.12 re-reads the controller id only on NOT_CONTROLLER; after a
    connection failure it keeps sending to the dead controller. So after any
    failure the stream opens a new client, as an application would."""

    def __init__(self, quorum: LocalQuorum) -> None:
        self.quorum = quorum
        self.admin = new_admin(quorum)
        self.acked: list[int] = []
        self.raised: list[tuple[int, str]] = []
        # The finalized-features epoch each node reported, in order: it must never go down.
        self.epochs_seen: dict[int, list[int]] = {node_id: [] for node_id in quorum.specs}
        self.not_observed: set[int] = set()  # nodes being killed: not asked for their epoch

    def next_update(self) -> tuple[int, UpdateFeatureType]:
        if len(self.acked) % 2 == 0:
            return MV_3_9, UpdateFeatureType.UPGRADE
        return MV_3_8, UpdateFeatureType.SAFE_DOWNGRADE

    def run_until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise QuorumTestError(f"the stream did not finish in time: {len(self.acked)} updates acknowledged; "
                                      f"last failures: {self.raised[-5:]}")
            level, kind = self.next_update()
            try:
                result = self.admin.update_features({MV: (kind, level)}, timeout_ms=ADMIN_REQUEST_TIMEOUT_MS)
            except (KafkaError, RuntimeError) as exc:  # RuntimeError: kafka-python's second NOT_CONTROLLER
                self.raised.append((level, type(exc).__name__))
                self.admin.close()
                time.sleep(RETRY_INTERVAL_S)
                self.admin = self._reopen(deadline)
                continue
            assert result == {MV: "OK"}, result
            self.acked.append(level)
            self.observe_epochs()

    def _reopen(self, deadline: float) -> KafkaAdminClient:
        def attempt():
            try:
                return new_admin(self.quorum)
            except KafkaError:
                return None

        return poll_until("a kafka-python admin client to bootstrap", attempt,
                          max(deadline - time.monotonic(), 0.0), RETRY_INTERVAL_S)

    def observe_epochs(self) -> None:
        for node_id in self.quorum.live:
            if node_id in self.not_observed:
                continue
            epoch = finalized(self.quorum.address(node_id)).epoch
            seen = self.epochs_seen[node_id]
            assert not seen or epoch >= seen[-1], f"controller {node_id}'s finalized epoch went back: {seen} -> {epoch}"
            seen.append(epoch)

    def close(self) -> None:
        self.admin.close()


def wait_for_same_finalized(quorum: LocalQuorum, node_ids: list[int], timeout_s: float):
    """The nodes' common ApiVersions view once they all report the same epoch and levels."""

    def probe():
        quorum.assert_alive()
        views = {node_id: finalized(quorum.address(node_id)) for node_id in node_ids}
        first = next(iter(views.values()))
        return first if all(view == first for view in views.values()) else None

    return poll_until(f"controllers {node_ids} to report the same finalized features", probe, timeout_s)


def test_kill_the_leader_during_a_stream_of_feature_updates_loses_no_acknowledged_update(make_quorum):
    acked_before_kill, acked_after_kill = 8, 8
    quorum = make_quorum(metadata_version="3.8-IV0")
    first = quorum.wait_for_leader(LEADER_TIMEOUT_S)
    stream = FeatureStream(quorum)
    try:
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        stream.run_until(lambda: len(stream.acked) >= acked_before_kill, deadline)

        # The leader now (it may have changed since start-up). It is killed from another
        # thread a moment later, so the kill lands while the stream goes on, usually with
        # an update in flight: one the client never sees acknowledged, committed or not.
        before = quorum.wait_for_leader(LEADER_TIMEOUT_S, min_epoch=first.leader_epoch)
        killed = before.leader_id
        stream.not_observed.add(killed)
        pid = quorum.processes[killed].process.pid
        acked_at_kill: list[int] = []

        def kill_leader() -> None:
            os.killpg(pid, signal.SIGKILL)
            acked_at_kill.append(len(stream.acked))

        killer = threading.Timer(KILL_DELAY_S, kill_leader)
        killer.start()
        try:
            stream.run_until(lambda: bool(acked_at_kill) and len(stream.acked) >= acked_at_kill[0] + acked_after_kill,
                             deadline)
        finally:
            killer.cancel()
            killer.join(LEADER_TIMEOUT_S)
            quorum.kill(killed)  # reaps it (and kills it now if the stream failed first)
    finally:
        stream.close()
    survivors = quorum.live
    assert killed not in survivors and len(survivors) == 2

    # A new leader, of a higher epoch, served the writes acknowledged after the kill.
    after = quorum.wait_for_leader(LEADER_TIMEOUT_S, min_epoch=before.leader_epoch + 1, exclude=(killed,))
    assert after.leader_id in survivors
    assert after.leader_epoch > before.leader_epoch

    last_acked = stream.acked[-1]
    common = wait_for_same_finalized(quorum, survivors, CATCH_UP_TIMEOUT_S)
    assert common.level(MV) == last_acked
    for node_id in survivors:
        assert common.epoch >= stream.epochs_seen[node_id][-1]
    killed_seen = stream.epochs_seen[killed]
    assert killed_seen, "the killed leader was never observed"

    # The killed node comes back on its own data and catches up.
    quorum.start(killed)
    rejoined = wait_for_same_finalized(quorum, [*survivors, killed], CATCH_UP_TIMEOUT_S)
    # The same levels; the epoch may have moved on by the restarted controller's own
    # registration (KIP-919: a new incarnation registers again, a record of its own).
    assert rejoined.levels == common.levels and rejoined.epoch >= common.epoch
    assert rejoined.epoch > killed_seen[-1]  # acknowledged updates happened after the kill

    # A write through the new quorum reaches all three.
    next_level, next_type = (MV_3_8, SAFE_DOWNGRADE) if last_acked == MV_3_9 else (MV_3_9, UPGRADE)
    leader_id = quorum.update_on_leader(MV, next_level, next_type, LEADER_TIMEOUT_S)
    stream.acked.append(next_level)
    final = wait_for_same_finalized(quorum, sorted(quorum.specs), CATCH_UP_TIMEOUT_S)
    assert final.level(MV) == next_level
    assert final.epoch > rejoined.epoch

    # The committed logs, batch by batch, once every voter holds the whole log.
    high_watermark = quorum.wait_until_replicated(CATCH_UP_TIMEOUT_S).high_watermark
    quorum.stop_all()
    committed = {}
    for node_id in quorum.specs:
        start, batches = read_log_batches(quorum.metadata_log_dir(node_id))
        assert start == 0  # no snapshot at the default interval: the whole history is there
        committed[node_id] = [batch for batch in batches if batch.last_offset < high_watermark]
    reference = committed[leader_id]
    assert reference and reference[-1].last_offset == high_watermark - 1
    for node_id, batches in committed.items():
        assert batches == reference, f"controller {node_id}'s committed log differs from the leader's"

    # Every acknowledged update is in the log, in order; only unacknowledged retries repeat a level.
    levels = feature_levels_in(reference, MV)
    assert levels[0] == MV_3_8  # the bootstrap record
    assert collapse_repeats(levels) == [MV_3_8, *stream.acked], (levels, stream.acked, stream.raised)


def test_a_partitioned_follower_catches_up_from_a_snapshot(make_quorum):
    # A snapshot every ~200 bytes of records, so a handful of updates moves the log start.
    quorum = make_quorum(metadata_version="3.8-IV0",
                         extra={"metadata.log.max.record.bytes.between.snapshots": "200"})
    leader = quorum.wait_for_leader(LEADER_TIMEOUT_S).leader_id
    # A follower, not the leader: a partitioned leader is the failover test's business.
    follower = next(node_id for node_id in quorum.live if node_id != leader)
    # Settled first: a registration still on its way would reach the follower after this
    # measure, and its log would then end past `follower_end`.
    follower_end = quorum.wait_until_settled(CATCH_UP_TIMEOUT_S).high_watermark

    quorum.pause(follower)
    others = [node_id for node_id in quorum.live if node_id != follower]
    log_start = 0
    for index in range(200):  # bound: a few dozen updates are enough
        level, kind = (MV_3_9, UPGRADE) if index % 2 == 0 else (MV_3_8, SAFE_DOWNGRADE)
        quorum.update_on_leader(MV, level, kind, LEADER_TIMEOUT_S)
        # Both nodes that could lead must have dropped the follower's next offset.
        log_start = min(max((e["log_start_offset"] for e in quorum.events(node_id, "raft.log_compacted")), default=0)
                        for node_id in others)
        if log_start > follower_end:
            break
    assert log_start > follower_end, "the quorum never moved its log start past the paused follower"
    quorum.update_on_leader("group.version", 1, UPGRADE, LEADER_TIMEOUT_S)

    quorum.resume(follower)
    installed = quorum.wait_for_event(follower, "raft.snapshot_installed", CATCH_UP_TIMEOUT_S,
                                      accept=lambda entry: entry["end_offset"] >= log_start)
    assert installed["end_offset"] > follower_end
    common = wait_for_same_finalized(quorum, sorted(quorum.specs), CATCH_UP_TIMEOUT_S)
    assert common.level("group.version") == 1
    assert common.level(MV) == level
    # On disk, the follower's log now starts where the snapshot it installed ends.
    quorum.stop_all()
    start, _ = read_log_batches(quorum.metadata_log_dir(follower))
    assert start >= installed["end_offset"]


def parse_status(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def test_kafka_python_and_kraftwerk_describe_the_same_quorum(make_quorum):
    quorum = make_quorum()
    # Stable: every controller has registered, every voter holds the whole log, and
    # nothing writes from here on.
    expected = quorum.wait_until_settled(CATCH_UP_TIMEOUT_S)
    admin = new_admin(quorum)
    try:
        described = admin.describe_metadata_quorum()
    finally:
        admin.close()
    partition = described["topics"][0]["partitions"][0]
    assert partition["error"] is None, partition
    from_kafka_python = (partition["leader_id"], partition["leader_epoch"], partition["high_watermark"],
                         sorted(voter["replica_id"] for voter in partition["current_voters"]))
    assert from_kafka_python == (expected.leader_id, expected.leader_epoch, expected.high_watermark,
                                 sorted(quorum.specs))
    # Asked on each controller: standbys forward to the leader, so all agree.
    for node_id in sorted(quorum.specs):
        result = run_cli("metadata-quorum", "describe", "--status", "--bootstrap-server", quorum.address(node_id))
        assert result.returncode == 0, result.stderr
        status = parse_status(result.stdout)
        from_cli = (int(status["LeaderId"]), int(status["LeaderEpoch"]), int(status["HighWatermark"]),
                    status_node_ids(result.stdout, "CurrentVoters"))
        assert from_cli == from_kafka_python, f"asked on controller {node_id}:\n{result.stdout}"
        assert int(status["MaxFollowerLag"]) == 0
