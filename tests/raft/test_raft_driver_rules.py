"""RaftDriver rules that need no network: a single-voter quorum over a real log,
and "persist before answering" for a vote grant."""

from __future__ import annotations

import random
import time
from contextlib import asynccontextmanager

import trio

from protocol.errors import ErrorCode
from server.net.peer import PeerAddress
from server.raft.core import RaftConfig, Role
from server.raft.driver import CommittedBatch, RaftDriver
from server.raft.messages import ApiKey, fetch_request, fetch_snapshot_request, vote_request
from server.raft.quorum_state import FileQuorumStateStore, QuorumState
from server.raft.storage import MetadataRaftLog, decode_stored
from server.storage.log import MetadataLog

CLUSTER = "rules-cluster-AAAAAAAAAA"
LEADER_WAIT_S = 10


@asynccontextmanager
async def lone_leader(tmp_path, seed: int, **settings):
    """A single-voter driver over a real log, running and ready to lead; stopped (its
    nursery cancelled, the log closed) when the block ends."""
    voters = frozenset({1})
    config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER, election_timeout_ms=200, **settings)
    log = MetadataLog.open(tmp_path)
    try:
        driver = RaftDriver(config, MetadataRaftLog(log), FileQuorumStateStore(tmp_path, CLUSTER, voters), {},
                            random.Random(seed))
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            with trio.fail_after(LEADER_WAIT_S):
                while not driver.leader_ready:
                    await driver.wait_changed()
            yield driver
            nursery.cancel_scope.cancel()
    finally:
        log.close()


async def test_a_single_voter_leads_commits_and_keeps_its_data_across_a_restart(tmp_path):
    epochs = []
    started_ms = time.time_ns() // 1_000_000
    for incarnation in range(2):
        async with lone_leader(tmp_path, seed=incarnation) as driver:
            with trio.fail_after(10):
                epochs.append(driver.epoch)
                base, epoch = await driver.propose([f"value-{incarnation}".encode()])
                await driver.wait_committed(base, epoch)
                seen = []
                reader = driver.committed_reader(0)
                while not seen or seen[-1].next_offset < driver.high_watermark:
                    seen.extend(await reader.next())
            # Batches carry wall-clock time, as Kafka's (not the driver's trio clock).
            log = driver.storage.metadata_log
            stamps = [batch.timestamp_ms for batch in decode_stored(log.read_raw(log.start_offset, 1 << 30))]
            assert stamps and all(started_ms <= stamp <= time.time_ns() // 1_000_000 for stamp in stamps), stamps
        data = [value for batch in seen if isinstance(batch, CommittedBatch) and batch.control_type is None
                for value in batch.values]
        assert data == [f"value-{index}".encode() for index in range(incarnation + 1)]
    # A leader that restarts never continues its old epoch.
    assert epochs[1] > epochs[0] >= 1



async def test_an_entry_committed_by_a_leadership_that_ends_in_the_same_step_is_reported_committed(tmp_path):
    """A leader committing its own removal resigns in the step that commits it (KIP-853):
    a commit waiter that looks before the driver has processed that step must still be
    told "committed" (the RemoveRaftVoter answer), not NOT_LEADER."""
    async with lone_leader(tmp_path, seed=3) as driver:
        with trio.fail_after(10):
            base, epoch = await driver.propose([b"committed-before-resigning"])
            await driver.wait_committed(base, epoch)

            async def resign_then_wait(d: RaftDriver) -> str:
                # In the driver task, between the core's step and its Ready: the core
                # no longer leads, the driver has not published that yet.
                d._core.resign(d._clock_ms())
                assert d._core.role is Role.RESIGNED
                await d.wait_committed(base, epoch)
                return "committed"

            assert await driver.call(resign_then_wait) == "committed"
            while driver.role is not Role.RESIGNED:
                await driver.wait_changed()
            # Once the resignation is processed the answer is the same (the commit mark).
            await driver.wait_committed(base, epoch)

class SlowRecordingStore(FileQuorumStateStore):
    """A quorum-state store whose fsync is slow, recording when writes finish."""

    def __init__(self, *args, events: list, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.events = events

    def write(self, state: QuorumState) -> None:
        # Stands in for a slow disk: the answer must still wait for this write.
        time.sleep(0.05)
        super().write(state)
        self.events.append(("persisted", state))


async def test_a_vote_is_answered_only_after_it_is_durable(tmp_path):
    voters = frozenset({1, 2, 3})
    events: list = []
    log = MetadataLog.open(tmp_path)
    try:
        store = SlowRecordingStore(tmp_path, CLUSTER, voters, events=events)
        # The peers are unreachable; only the inbound Vote matters here.
        peers = {2: PeerAddress(2, "127.0.0.1", 1), 3: PeerAddress(3, "127.0.0.1", 1)}
        config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER, election_timeout_ms=60_000)
        driver = RaftDriver(config, MetadataRaftLog(log), store, peers, random.Random(5))
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            answered = trio.Event()

            def answer(body) -> None:
                events.append(("answered", body["topics"][0]["partitions"][0]["vote_granted"]))
                answered.set()

            driver.offer_request(2, ApiKey.VOTE, vote_request(CLUSTER, 1, 1, 2, 0, 0, pre_vote=False), answer)
            with trio.fail_after(10):
                await answered.wait()
            assert driver.role is Role.UNATTACHED and driver.epoch == 1
            nursery.cancel_scope.cancel()
    finally:
        log.close()
    assert events == [("persisted", QuorumState(epoch=1, voted_id=2)), ("answered", True)]


SNAPSHOT_REQUEST = fetch_snapshot_request(CLUSTER, 7, 1, (5, 1), 0, 1024)


async def test_an_offered_request_is_answered_exactly_once_even_when_the_inbox_is_full(tmp_path):
    """offer_request never waits: with no room in the inbox the requester is told
    BROKER_NOT_AVAILABLE at once (it retries), and a request that got in is answered by
    the core, once. The request is an observer's FetchSnapshot, which the core answers at once."""
    voters = frozenset({1})
    config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER, election_timeout_ms=60_000)
    log = MetadataLog.open(tmp_path)
    try:
        driver = RaftDriver(config, MetadataRaftLog(log), FileQuorumStateStore(tmp_path, CLUSTER, voters), {},
                            random.Random(3), inbox_capacity=1)
        answers: dict[int, list] = {1: [], 2: [], 3: []}
        # Not running yet: answered at once.
        driver.offer_request(7, ApiKey.FETCH_SNAPSHOT, SNAPSHOT_REQUEST, answers[1].append)
        assert [a["error_code"] for a in answers[1]] == [ErrorCode.BROKER_NOT_AVAILABLE]
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            # Two offers without a checkpoint between them: the driver cannot take the
            # first before the second arrives, so the second finds the inbox full.
            driver.offer_request(7, ApiKey.FETCH_SNAPSHOT, SNAPSHOT_REQUEST,
                                 answers[2].append)
            driver.offer_request(7, ApiKey.FETCH_SNAPSHOT, SNAPSHOT_REQUEST,
                                 answers[3].append)
            assert [a["error_code"] for a in answers[3]] == [ErrorCode.BROKER_NOT_AVAILABLE]
            assert answers[2] == []
            with trio.fail_after(10):
                while not answers[2]:
                    await driver.wait_changed()
            nursery.cancel_scope.cancel()
    finally:
        log.close()
    assert len(answers[2]) == 1 and answers[2][0]["error_code"] == ErrorCode.NONE
    assert [len(a) for a in answers.values()] == [1, 1, 1]


async def test_a_parked_fetch_is_answered_when_the_driver_stops(tmp_path):
    """A long-poll Fetch waits inside the driver with no task behind it: stopping the
    driver answers it (BROKER_NOT_AVAILABLE), so the requester's connection is not left
    waiting for kraftwerk.request.timeout.ms."""
    answers: list = []
    async with lone_leader(tmp_path, seed=4, fetch_max_wait_ms=60_000) as driver:
        end, epoch = driver.log_end_offset, driver.epoch
        # An observer (id 9) fetching at the log end: nothing to send, so it parks.
        driver.offer_request(9, ApiKey.FETCH, fetch_request(CLUSTER, 9, epoch, end, epoch, 60_000, 1 << 20),
                             answers.append)
        with trio.fail_after(10):
            while 9 not in driver.describe().observers:  # the driver took it (and parked it)
                await trio.lowlevel.checkpoint()
        assert answers == []
    assert [a["error_code"] for a in answers] == [ErrorCode.BROKER_NOT_AVAILABLE]


async def test_refused_requests_are_counted_each_and_logged_at_a_bounded_rate(tmp_path):
    """A flood of hostile frames: every one is answered and counted (metric), but the log
    gets at most REFUSAL_LOG_LINES_PER_S lines a second for that kind of refusal, and the
    next line says how many were left out."""
    import structlog

    from server.raft.driver import REFUSAL_LOG_LINES_PER_S
    from server.raft.validate import MAX_EPOCH

    voters = frozenset({1})
    config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER, election_timeout_ms=60_000)
    log = MetadataLog.open(tmp_path)
    seen: list = []
    clock = {"ms": 0}
    try:
        driver = RaftDriver(config, MetadataRaftLog(log), FileQuorumStateStore(tmp_path, CLUSTER, voters), {},
                            random.Random(3), on_refusal=seen.append, clock_ms=lambda: clock["ms"])
        answers: list = []
        hostile = vote_request(CLUSTER, 1, MAX_EPOCH + 1, 2, 0, 0, pre_vote=False)
        with structlog.testing.capture_logs() as lines:
            for _ in range(100):
                driver.offer_request(2, ApiKey.VOTE, hostile, answers.append)
            clock["ms"] = 1000
            driver.offer_request(2, ApiKey.VOTE, hostile, answers.append)
    finally:
        log.close()
    assert len(answers) == len(seen) == 101
    assert all(answer["error_code"] == ErrorCode.INVALID_REQUEST for answer in answers)
    assert sum(driver.refused.values()) == 101
    refused_lines = [line for line in lines if line["event"] == "raft.request_refused"]
    assert len(refused_lines) == REFUSAL_LOG_LINES_PER_S + 1
    assert refused_lines[-1]["not_logged_before"] == 100 - REFUSAL_LOG_LINES_PER_S


async def test_a_peer_that_refuses_this_node_is_named_in_its_own_log(tmp_path):
    """A wrong super.users or principal shows on the refused node too (not only as the
    other side's `security.authorization_failed`), once a minute per peer and error."""
    import structlog

    from server.raft.driver import _Response

    voters = frozenset({1, 2})
    config = RaftConfig(node_id=1, voters=voters, cluster_id=CLUSTER, election_timeout_ms=60_000)
    log = MetadataLog.open(tmp_path)
    clock = {"ms": 0}
    refused = {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "topics": []}
    try:
        driver = RaftDriver(config, MetadataRaftLog(log), FileQuorumStateStore(tmp_path, CLUSTER, voters),
                            {2: PeerAddress(2, "127.0.0.1", 1)}, random.Random(3), clock_ms=lambda: clock["ms"])
        request = vote_request(CLUSTER, 2, 1, 1, 0, 0, pre_vote=False)
        with structlog.testing.capture_logs() as lines:
            async with trio.open_nursery() as nursery:
                await nursery.start(driver.run)
                for at_ms in (0, 30_000, 60_000):
                    clock["ms"] = at_ms
                    await driver._send_channel.send(_Response(2, ApiKey.VOTE, request, refused))
                    await driver.call(lambda d: None)  # the driver has handled everything before it
                nursery.cancel_scope.cancel()
    finally:
        log.close()
    named = [line for line in lines if line["event"] == "raft.refused_by_peer"]
    assert [(line["peer_id"], line["error"]) for line in named] == [(2, "CLUSTER_AUTHORIZATION_FAILED")] * 2
    assert driver.epoch == 0
