"""MetadataRaftLog answers the core's questions exactly like MemoryRaftLog (the
simulator's log) after the same appends, truncations, snapshot installs and
compactions, over a real MetadataLog and real snapshot files."""

from __future__ import annotations

import random

import pytest

from protocol.record_batch import ControlRecordType
from server.raft.core import Append, InstallSnapshot, TruncateTo
from server.raft.log import Batch, MemoryRaftLog
from server.raft.storage import MetadataRaftLog, StoredRecordsCodec, raw_bytes
from server.storage.log import LogConfig, MetadataLog
from server.storage.snapshot import SnapshotWriter, list_snapshots, snapshot_path
from server.values import SnapshotId


def snapshot_bytes(directory, snapshot_id: SnapshotId, values: list[bytes]) -> bytes:
    """A valid snapshot file's bytes (written to a scratch directory and read back)."""
    with SnapshotWriter(directory, snapshot_id, 0) as writer:
        writer.append(values or [b"empty"])
        writer.freeze()
    path = snapshot_path(directory, snapshot_id)
    data = open(path, "rb").read()
    return data


def assert_same_view(memory: MemoryRaftLog, real: MetadataRaftLog, context: str) -> None:
    assert (real.start_offset, real.end_offset, real.last_epoch) == \
        (memory.start_offset, memory.end_offset, memory.last_epoch), context
    for offset in range(memory.start_offset, memory.end_offset + 1):
        assert real.epoch_before(offset) == memory.epoch_before(offset), (context, offset)
    for epoch in range(0, memory.last_epoch + 3):
        assert real.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch), (context, epoch)
    for offset in range(memory.start_offset, memory.end_offset):
        ours = [(b.base_offset, b.epoch, b.values, b.control_type) for b in real.read(offset, 1 << 20)]
        theirs = [(b.base_offset, b.epoch, b.values, b.control_type) for b in memory.read(offset, 1 << 20)]
        assert ours == theirs, (context, offset)
    assert real.latest_snapshot_id() == memory.snapshot_id, context


@pytest.mark.parametrize("seed", range(6))
async def test_metadata_raft_log_matches_the_simulators_log(tmp_path, seed):
    rng = random.Random(seed)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    metadata_log = MetadataLog.open(tmp_path / "log", LogConfig(segment_bytes=512))
    # A small tail cache, so reads come from both the cache and the disk.
    real = MetadataRaftLog(metadata_log, tail_cache_bytes=300)
    memory = MemoryRaftLog()
    epoch = 1
    counter = 0
    try:
        for step in range(60):
            choice = rng.random()
            context = f"seed {seed} step {step}"
            if choice < 0.55 or memory.end_offset == memory.start_offset:
                ops = []
                end = memory.end_offset
                for _ in range(rng.randrange(1, 4)):
                    epoch += rng.random() < 0.3
                    counter += 1
                    control = int(ControlRecordType.LEADER_CHANGE) if rng.random() < 0.1 else None
                    batch = Batch(end, epoch, tuple(f"v{counter}-{i}".encode() for i in range(rng.randrange(1, 4))),
                                  control, 1000 + counter)
                    ops.append(Append(batch))
                    end = batch.next_offset
                for op in ops:
                    memory.append(op.batch)
                memory.flush()
                await real.apply(ops)
            elif choice < 0.75:
                offset = rng.randrange(memory.start_offset, memory.end_offset + 1)
                memory.truncate_to(offset)
                await real.apply([TruncateTo(offset)])
            elif choice < 0.85:
                snapshot_id = SnapshotId(memory.end_offset + rng.randrange(0, 5), epoch + 1)
                epoch += 1
                data = snapshot_bytes(scratch, snapshot_id, [b"s"])
                memory.install_snapshot(snapshot_id, data)
                await real.apply([InstallSnapshot(snapshot_id, data)])
                assert list_snapshots(real.directory) == [snapshot_id]
            else:
                boundaries = [b.next_offset for b in memory.batches]
                if not boundaries:
                    continue
                end = rng.choice(boundaries)
                snapshot_id = SnapshotId(end, memory.epoch_before(end))
                with SnapshotWriter(real.directory, snapshot_id, 0) as writer:
                    writer.append([b"state"])
                    writer.freeze()
                memory.create_snapshot(snapshot_id, b"")
                assert await real.compact(snapshot_id) == end
            assert_same_view(memory, real, context)
    finally:
        metadata_log.close()


def test_stored_codec_passes_stored_bytes_through():
    codec = StoredRecordsCodec()
    batches = [Batch(0, 1, (b"a", b"b"), None, 7), Batch(2, 1, (b"c",), None, 8)]
    encoded = codec.encode(batches)
    decoded = codec.decode(encoded)
    assert decoded == batches
    # Decoded batches keep their bytes, and encoding them again reuses those bytes.
    assert [raw_bytes(batch) for batch in decoded] == [raw_bytes(batch) for batch in batches]
    assert codec.encode(decoded) == encoded
    # A leader may cut the last batch short: the partial tail is dropped.
    assert codec.decode(encoded[:-3]) == batches[:1]


async def test_appends_of_one_ready_share_one_write(tmp_path):
    metadata_log = MetadataLog.open(tmp_path / "log")
    calls = []
    original = metadata_log.append_verified

    def counting_append_verified(batches):
        calls.append(sum(len(batch[-1]) for batch in batches))
        return original(batches)

    metadata_log.append_verified = counting_append_verified
    try:
        real = MetadataRaftLog(metadata_log)
        ops = [Append(Batch(index, 1, (b"x",), None, 0)) for index in range(20)]
        applied = await real.apply(ops)
        assert applied.appended_batches == 20 and real.end_offset == 20
        # One append (one fsync) for all twenty batches of the Ready.
        assert calls == [sum(len(raw_bytes(op.batch)) for op in ops)]
        # A truncation between appends splits them into two writes, in order.
        calls.clear()
        ops = [Append(Batch(20, 2, (b"y",), None, 0)), TruncateTo(20), Append(Batch(20, 2, (b"z",), None, 0))]
        await real.apply(ops)
        assert len(calls) == 2 and [b.values for b in real.read(20, 1 << 20)] == [(b"z",)]
    finally:
        metadata_log.close()


@pytest.mark.parametrize("tail_cache_bytes", [0, 1 << 20])
async def test_staged_leader_appends_answer_at_once_and_are_durable_after_write_staged(tmp_path, tail_cache_bytes):
    metadata_log = MetadataLog.open(tmp_path / "log")
    try:
        real = MetadataRaftLog(metadata_log, tail_cache_bytes=tail_cache_bytes)
        memory = MemoryRaftLog()
        first = [Batch(0, 1, (b"a", b"b"), None, 0)]
        await real.apply([Append(batch) for batch in first])
        for batch in first:
            memory.append(batch)
        staged = [Batch(2, 1, (b"c",), None, 0), Batch(3, 2, (b"d", b"e"), None, 0)]
        real.stage(staged)
        for batch in staged:
            memory.append(batch)
        # The core sees the staged tail as part of the log; the disk does not have it yet.
        assert_same_view(memory, real, "staged")
        assert real.has_staged and real.flushed_end_offset == metadata_log.end_offset == 2
        assert [b.values for b in real.read_cached(2, 1 << 20)] == [(b"c",), (b"d", b"e")]
        # A batch that does not continue the log is refused.
        with pytest.raises(ValueError):
            real.stage([Batch(9, 2, (b"x",), None, 0)])
        with pytest.raises(ValueError):
            real.stage([Batch(5, 1, (b"x",), None, 0)])  # a lower epoch

        assert await real.write_staged() == 5
        assert not real.has_staged and real.flushed_end_offset == metadata_log.end_offset == 5
        assert_same_view(memory, real, "written")
        # A follower's Ready (here a truncation) first writes whatever is still staged.
        real.stage([Batch(5, 2, (b"f",), None, 0)])
        applied = await real.apply([TruncateTo(4)])
        assert applied.truncated_to == [4] and not real.has_staged
        assert real.end_offset == metadata_log.end_offset == 3  # batches are atomic: 3..4 went whole
    finally:
        metadata_log.close()
    reopened = MetadataLog.open(tmp_path / "log")
    try:
        assert reopened.end_offset == 3
    finally:
        reopened.close()


async def test_a_snapshot_that_ends_inside_a_batch_cannot_become_the_log_start(tmp_path):
    """A replica that installed such a snapshot would fetch from inside a batch, which the
    leader can only send whole: it would ask for the same batch forever."""
    metadata_log = MetadataLog.open(tmp_path / "log")
    try:
        real = MetadataRaftLog(metadata_log)
        await real.apply([Append(Batch(0, 1, (b"a", b"b", b"c"), None, 0)), Append(Batch(3, 1, (b"d",), None, 0))])
        directory = real.directory
        for end in (2, 3):
            stored = SnapshotId(end, 1)
            with SnapshotWriter(directory, stored, 0) as writer:
                writer.append([b"state"])
                writer.freeze()
        with pytest.raises(ValueError, match="inside a record batch"):
            await real.compact(SnapshotId(2, 1))
        assert real.start_offset == 0
        assert await real.compact(SnapshotId(3, 1)) == 3
    finally:
        metadata_log.close()
