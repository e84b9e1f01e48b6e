"""Where a metadata log append is written and fsynced: a small append of a voter's
log on the event loop (its fsync is on the commit path, and a worker-thread round
trip costs more than the fsync), every append of a broker's log in a worker thread
(an observer's copy counts towards no high watermark, and its loop serves clients).
Either way the append is durable when `apply` returns."""

from __future__ import annotations

import threading

import pytest
import trio

from server.broker.lifecycle import BrokerState
from server.raft.core import Append
from server.raft.log import Batch
from server.raft.storage import MetadataRaftLog
from server.storage.log import LogConfig, MetadataLog

from .harness import running_cluster

TIMEOUT_S = 30
MV_3_5_IV2, MV_3_7_IV2 = 11, 17


def record_append_threads(metadata_log: MetadataLog) -> list[int]:
    """Wraps `metadata_log.append_verified` on this instance; returns the list that
    collects the ident of the thread of every call."""
    threads: list[int] = []
    append = metadata_log.append_verified

    def recorded(batches):
        threads.append(threading.get_ident())
        return append(batches)

    metadata_log.append_verified = recorded
    return threads


@pytest.mark.parametrize("inline_append_max_bytes, inline", [(None, True), (0, False)])
async def test_a_small_append_is_written_where_the_log_says_and_is_durable(tmp_path, inline_append_max_bytes,
                                                                             inline):
    metadata_log = MetadataLog.open(tmp_path, LogConfig())
    options = {} if inline_append_max_bytes is None else {"inline_append_max_bytes": inline_append_max_bytes}
    raft_log = MetadataRaftLog(metadata_log, **options)
    threads = record_append_threads(metadata_log)
    try:
        applied = await raft_log.apply([Append(Batch(0, 1, (b"a", b"b"))), Append(Batch(2, 1, (b"c",)))])
        assert applied.appended_batches == 2
        assert raft_log.end_offset == raft_log.flushed_end_offset == 3
        # Consecutive appends of one Ready: one write, one fsync.
        assert len(threads) == 1
        assert (threads[0] == threading.get_ident()) is inline
    finally:
        metadata_log.close()
    reopened = MetadataLog.open(tmp_path, LogConfig())
    try:
        assert reopened.end_offset == 3
    finally:
        reopened.close()


def test_a_negative_inline_bound_is_refused(tmp_path):
    metadata_log = MetadataLog.open(tmp_path, LogConfig())
    try:
        with pytest.raises(ValueError, match="inline_append_max_bytes"):
            MetadataRaftLog(metadata_log, inline_append_max_bytes=-1)
    finally:
        metadata_log.close()


async def test_a_brokers_fetched_appends_are_written_off_its_event_loop(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(100, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            threads = record_append_threads(broker.metadata_log)
            end_before = broker.metadata_log.end_offset
            assert (await cluster.update_metadata_version(MV_3_7_IV2)).error_code == 0
            await broker.wait_renegotiated(MV_3_7_IV2)
            assert broker.metadata_log.end_offset > end_before
            assert threads, "the broker appended what it fetched without append_verified"
            assert threading.get_ident() not in threads
