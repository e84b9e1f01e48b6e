"""MetadataLog: durability order, recovery, truncation, segments, epoch cache, bounds."""

from __future__ import annotations

import os
import shutil
import stat
import struct

import pytest
import trio
from structlog.testing import capture_logs

from protocol.record_batch import ControlRecordType, decode_batch, encode_batch
from server.storage.log import (
    BatchRejectedError,
    CorruptLogError,
    LogClosedError,
    LogConfig,
    LogFailedError,
    MetadataLog,
    OffsetOutOfRangeError,
    segment_file_name,
)
from server.storage.recovery_point import RECOVERY_POINT_FILE_NAME
from server.values import EpochEndOffset, EpochEntry

SEGMENT_0 = segment_file_name(0)


def values_of(batches):
    return [value for batch in batches for value in batch.values]


def segment_files(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".log"))


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "metadata"


def test_segment_file_name_is_kafka_style():
    assert segment_file_name(0) == "00000000000000000000.log"
    assert segment_file_name(1234) == "00000000000000001234.log"


def test_empty_log(log_dir):
    with MetadataLog.open(log_dir) as log:
        assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 0, 0)
        assert log.read(0) == []
        assert log.epoch_start_offsets() == []
        assert log.end_offset_for_epoch(0) is None
        assert segment_files(log_dir) == [SEGMENT_0]


def test_append_read_reopen(log_dir):
    with MetadataLog.open(log_dir) as log:
        assert log.append([b"a"], leader_epoch=1, timestamp_ms=10) == (0, 0)
        assert log.append([b"b", b"c", b"d"], leader_epoch=1, timestamp_ms=11) == (1, 3)
        assert log.append([b"lc"], leader_epoch=2, timestamp_ms=12, control_type=ControlRecordType.LEADER_CHANGE) == (4, 4)
        assert log.end_offset == 5 and log.last_epoch == 2
        batches = log.read(0)
        assert values_of(batches) == [b"a", b"b", b"c", b"d", b"lc"]
        assert [b.base_offset for b in batches] == [0, 1, 4]
        assert batches[2].is_control and batches[2].control_type == ControlRecordType.LEADER_CHANGE
        # A read from inside a batch starts with the whole batch holding it.
        assert [b.base_offset for b in log.read(2)] == [1, 4]
        assert log.read(5) == []
        with pytest.raises(OffsetOutOfRangeError):
            log.read(6)
    with MetadataLog.open(log_dir) as log:
        assert log.end_offset == 5 and log.last_epoch == 2
        assert values_of(log.read(0)) == [b"a", b"b", b"c", b"d", b"lc"]
        assert log.append([b"e"], leader_epoch=2, timestamp_ms=13) == (5, 5)


def test_on_disk_bytes_are_exactly_the_encoded_batches(log_dir):
    with MetadataLog.open(log_dir) as log:
        log.append([b"x", b"y"], leader_epoch=3, timestamp_ms=77)
        log.append([b"z"], leader_epoch=3, timestamp_ms=78)
    expected = encode_batch(0, 3, [b"x", b"y"], 77) + encode_batch(2, 3, [b"z"], 78)
    assert (log_dir / SEGMENT_0).read_bytes() == expected


class IoRecorder:
    """Wraps os.pwrite/os.fsync to record the order of writes and fsyncs."""

    def __init__(self, monkeypatch):
        self.events: list[tuple[str, str]] = []
        real_pwrite, real_fsync = os.pwrite, os.fsync

        def pwrite(fd, data, offset):
            self.events.append(("write", self.kind(fd)))
            return real_pwrite(fd, data, offset)

        def fsync(fd):
            self.events.append(("fsync", self.kind(fd)))
            return real_fsync(fd)

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "fsync", fsync)

    @staticmethod
    def kind(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return "dir"
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == RECOVERY_POINT_FILE_NAME:
            return "recovery-point"
        return "file"

    def take(self):
        events, self.events = self.events, []
        return events


def test_append_fsyncs_the_segment_before_returning(log_dir, monkeypatch):
    log = MetadataLog.open(log_dir, LogConfig(segment_bytes=200))
    recorder = IoRecorder(monkeypatch)
    # One fsync per append; the recovery point moves (a pwrite, no fsync) only after it.
    log.append([b"a"], leader_epoch=1, timestamp_ms=0)
    assert recorder.take() == [("write", "file"), ("fsync", "file"), ("write", "recovery-point")]
    # Group commit: many values, one batch, one fsync.
    log.append([b"v%d" % i for i in range(64)][:3], leader_epoch=1, timestamp_ms=0)
    assert recorder.take() == [("write", "file"), ("fsync", "file"), ("write", "recovery-point")]
    # A roll creates a segment: its directory entry is fsynced before data goes in
    # (and the recovery point, cheaply, with it).
    log.append([b"x" * 150], leader_epoch=1, timestamp_ms=0)
    assert recorder.take() == [("fsync", "dir"), ("fsync", "recovery-point"), ("write", "file"),
                               ("fsync", "file"), ("write", "recovery-point")]
    assert len(segment_files(log_dir)) == 2
    log.truncate_to(1)
    events = recorder.take()
    # The recovery point goes down durably (both slots) before any data goes.
    assert events[:3] == [("write", "recovery-point"), ("write", "recovery-point"), ("fsync", "recovery-point")]
    assert events[3] == ("fsync", "dir")  # the removed segment's unlink
    assert events[-1] == ("fsync", "file")  # the cut segment
    log.close()


def test_append_writes_hit_the_file_before_fsync_returns(log_dir, monkeypatch):
    # At the moment fsync is called, the batch must already be in the file.
    log = MetadataLog.open(log_dir)
    seen_sizes = []
    real_fsync = os.fsync

    def fsync(fd):
        seen_sizes.append(os.fstat(fd).st_size)
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log.append([b"abc"], leader_epoch=1, timestamp_ms=0)
    assert seen_sizes == [len(encode_batch(0, 1, [b"abc"], 0))]
    log.close()


def test_failed_fsync_poisons_the_log(log_dir, monkeypatch):
    log = MetadataLog.open(log_dir)
    log.append([b"kept"], leader_epoch=1, timestamp_ms=0)

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        log.append([b"lost?"], leader_epoch=1, timestamp_ms=0)
    # The in-memory state did not advance past what was durable.
    assert log.end_offset == 1
    monkeypatch.undo()
    with pytest.raises(LogFailedError):
        log.append([b"again"], leader_epoch=1, timestamp_ms=0)
    with pytest.raises(LogFailedError):
        log.read(0)
    log.close()
    with MetadataLog.open(log_dir) as reopened:
        # The write itself reached the page cache, so recovery finds it; what
        # matters is that it was never acknowledged and the log is consistent.
        assert values_of(reopened.read(0))[0] == b"kept"
        assert reopened.end_offset in (1, 2)


def build_log(log_dir, batches, config=None):
    with MetadataLog.open(log_dir, config) as log:
        for values, epoch in batches:
            log.append(values, leader_epoch=epoch, timestamp_ms=1000)
        return log.end_offset


THREE_BATCHES = [([b"one"], 1), ([b"two", b"three"], 1), ([b"four", b"five", b"six"], 2)]


def test_torn_tail_is_truncated_at_every_cut_position(tmp_path):
    source = tmp_path / "source"
    build_log(source, THREE_BATCHES)
    full = (source / SEGMENT_0).read_bytes()
    last = encode_batch(3, 2, [b"four", b"five", b"six"], 1000)
    assert full.endswith(last)
    prefix_bytes = len(full) - len(last)
    for kept in range(len(last)):
        directory = tmp_path / f"cut{kept}"
        directory.mkdir()
        (directory / SEGMENT_0).write_bytes(full[: prefix_bytes + kept])
        with capture_logs() as logs:
            log = MetadataLog.open(directory)
        assert log.end_offset == 3, kept
        assert log.last_epoch == 1
        assert values_of(log.read(0)) == [b"one", b"two", b"three"]
        assert (directory / SEGMENT_0).stat().st_size == prefix_bytes
        torn = [entry for entry in logs if entry["event"] == "storage.torn_tail_truncated"]
        if kept:
            assert len(torn) == 1
            assert torn[0]["bytes_removed"] == kept
            assert torn[0]["position"] == prefix_bytes
            assert torn[0]["end_offset"] == 3
        else:
            assert torn == []
        # The log keeps working: the next append reuses the lost offsets.
        assert log.append([b"again"], leader_epoch=2, timestamp_ms=0) == (3, 3)
        log.close()
        shutil.rmtree(directory)


def build_log_with_unflushed_last_batch(log_dir):
    """THREE_BATCHES, with the recovery point as it was before the last append:
    what a crash leaves when the last append's fsync never returned (so it was
    never acknowledged). Damage to that batch is a torn write."""
    build_log(log_dir, THREE_BATCHES[:2])
    point_before = (log_dir / RECOVERY_POINT_FILE_NAME).read_bytes()
    build_log(log_dir, THREE_BATCHES[2:])
    (log_dir / RECOVERY_POINT_FILE_NAME).write_bytes(point_before)


@pytest.mark.parametrize("damage", ["flip_last_byte", "zero_tail", "garbage_after", "zeros_after"])
def test_complete_but_bad_last_batch_is_a_torn_tail(log_dir, damage):
    build_log_with_unflushed_last_batch(log_dir)
    path = log_dir / SEGMENT_0
    data = bytearray(path.read_bytes())
    last_size = len(encode_batch(3, 2, [b"four", b"five", b"six"], 1000))
    expected_end, expected_size = 3, len(data) - last_size
    if damage == "flip_last_byte":
        data[-1] ^= 0x40
    elif damage == "zero_tail":
        data[-20:] = bytes(20)  # the file grew, the data pages did not make it
    elif damage == "garbage_after":
        data += b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00\x02"  # a stray header, cut short
        expected_end, expected_size = 6, len(data) - 13
    else:
        data += bytes(4096)  # preallocated zeros after the last batch
        expected_end, expected_size = 6, len(data) - 4096
    path.write_bytes(bytes(data))
    with capture_logs() as logs:
        log = MetadataLog.open(log_dir)
    assert log.end_offset == expected_end
    assert path.stat().st_size == expected_size
    assert [e["event"] for e in logs].count("storage.torn_tail_truncated") == 1
    log.close()


def corrupt_at(path, position, mask=0x01):
    data = bytearray(path.read_bytes())
    data[position] ^= mask
    path.write_bytes(bytes(data))


def test_corrupt_middle_batch_is_fatal_and_named(log_dir):
    build_log(log_dir, THREE_BATCHES)
    first_size = len(encode_batch(0, 1, [b"one"], 1000))
    path = log_dir / SEGMENT_0
    before = path.read_bytes()
    corrupt_at(path, first_size + 30)  # inside the second batch's CRC range
    with pytest.raises(CorruptLogError) as excinfo:
        MetadataLog.open(log_dir)
    message = str(excinfo.value)
    assert SEGMENT_0 in message
    assert f"byte {first_size}" in message
    assert "CRC mismatch" in message
    # Nothing was truncated: the operator gets the file as it was.
    assert len(path.read_bytes()) == len(before)


@pytest.mark.parametrize("field_offset", [8, 9, 10, 11, 16, 17, 21, 40, 60, 61, 62])
def test_corruption_of_any_header_field_in_the_middle_is_fatal(log_dir, field_offset):
    build_log(log_dir, THREE_BATCHES)
    first_size = len(encode_batch(0, 1, [b"one"], 1000))
    corrupt_at(log_dir / SEGMENT_0, first_size + field_offset, mask=0x80)
    with pytest.raises(CorruptLogError, match=f"byte {first_size}"):
        MetadataLog.open(log_dir)


def test_corrupt_base_offset_outside_the_crc_is_caught_by_contiguity(log_dir):
    build_log(log_dir, THREE_BATCHES)
    first_size = len(encode_batch(0, 1, [b"one"], 1000))
    corrupt_at(log_dir / SEGMENT_0, first_size + 7)  # low byte of the 2nd batch's baseOffset
    with pytest.raises(CorruptLogError, match="base offset 0, expected 1"):
        MetadataLog.open(log_dir)


def test_corrupt_leader_epoch_going_backwards_is_caught(log_dir):
    build_log(log_dir, THREE_BATCHES)
    data = bytearray((log_dir / SEGMENT_0).read_bytes())
    second_start = len(encode_batch(0, 1, [b"one"], 1000))
    third_start = second_start + len(encode_batch(1, 1, [b"two", b"three"], 1000))
    struct.pack_into(">i", data, third_start + 12, 0)  # epoch 2 -> 0, not covered by the CRC
    (log_dir / SEGMENT_0).write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="leader epoch 0 after epoch 1"):
        MetadataLog.open(log_dir)


def test_corruption_in_an_earlier_segment_is_fatal_even_at_its_end(log_dir):
    config = LogConfig(segment_bytes=150)
    build_log(log_dir, [([b"x" * 60], 1)] * 4, config)
    names = segment_files(log_dir)
    assert len(names) >= 2
    first = log_dir / names[0]
    corrupt_at(first, first.stat().st_size - 1)
    with pytest.raises(CorruptLogError, match=names[0]):
        MetadataLog.open(log_dir, config)


def test_missing_segment_is_fatal(log_dir):
    config = LogConfig(segment_bytes=150)
    build_log(log_dir, [([b"x" * 60], 1)] * 6, config)
    names = segment_files(log_dir)
    assert len(names) >= 3
    os.unlink(log_dir / names[1])
    with pytest.raises(CorruptLogError, match="missing or overlapping"):
        MetadataLog.open(log_dir, config)


def test_segments_roll_and_reads_span_them(log_dir):
    config = LogConfig(segment_bytes=300)
    values = [b"value-%03d" % i for i in range(60)]
    with MetadataLog.open(log_dir, config) as log:
        for index in range(0, 60, 3):
            log.append(values[index : index + 3], leader_epoch=1 + index // 20, timestamp_ms=index)
        names = segment_files(log_dir)
        assert len(names) > 3
        # Each segment is named by the base offset of its first batch and stays under the limit.
        for name in names:
            data = (log_dir / name).read_bytes()
            assert len(data) <= 300
            first_batch, _ = decode_batch(data, 0)
            assert first_batch.base_offset == int(name[:20])
        assert log.segment_base_offsets() == [int(name[:20]) for name in names]
        assert values_of(log.read(0)) == values
        middle = int(names[2][:20])
        assert log.read(middle)[0].base_offset == middle
        assert values_of(log.read(middle - 1))[0] == values[middle - 3]
    with MetadataLog.open(log_dir, config) as log:
        assert log.end_offset == 60
        assert values_of(log.read(0)) == values


def test_read_max_bytes_is_respected_but_returns_at_least_one_batch(log_dir):
    config = LogConfig(segment_bytes=250)
    with MetadataLog.open(log_dir, config) as log:
        for index in range(12):
            log.append([b"%02d" % index + b"." * 40], leader_epoch=1, timestamp_ms=0)
        batch_size = len(log.read_raw(0, max_bytes=1))
        assert len(log.read(0, max_bytes=1)) == 1
        assert len(log.read(0, max_bytes=batch_size * 5)) == 5  # spans segments of 2 batches
        assert len(log.read(0, max_bytes=batch_size * 5 + batch_size - 1)) == 5
        assert len(log.read(0)) == 12
        raw = log.read_raw(3, max_bytes=batch_size * 2)
        assert len(raw) == batch_size * 2
        assert decode_batch(raw, 0)[0].base_offset == 3


def test_truncate_to(log_dir):
    with MetadataLog.open(log_dir) as log:
        log.append([b"a", b"b"], leader_epoch=1, timestamp_ms=0)  # 0-1
        log.append([b"c"], leader_epoch=2, timestamp_ms=0)  # 2
        log.append([b"d", b"e", b"f"], leader_epoch=3, timestamp_ms=0)  # 3-5
        assert log.truncate_to(10) == 6  # beyond the end: nothing happens
        assert log.truncate_to(6) == 6
        # Inside a batch: the whole batch goes.
        assert log.truncate_to(4) == 3
        assert log.epoch_start_offsets() == [EpochEntry(1, 0), EpochEntry(2, 2)]
        assert log.last_epoch == 2
        assert log.append([b"g"], leader_epoch=4, timestamp_ms=0) == (3, 3)
        assert log.truncate_to(2) == 2
        assert values_of(log.read(0)) == [b"a", b"b"]
        assert log.last_epoch == 1
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(-1)
        assert log.truncate_to(0) == 0
        assert log.last_epoch == 0 and log.read(0) == []
        assert log.append([b"h"], leader_epoch=5, timestamp_ms=0) == (0, 0)
    with MetadataLog.open(log_dir) as log:
        assert values_of(log.read(0)) == [b"h"]
        assert log.epoch_start_offsets() == [EpochEntry(5, 0)]


def test_truncate_across_segments_deletes_later_segments(log_dir):
    config = LogConfig(segment_bytes=200)
    with MetadataLog.open(log_dir, config) as log:
        for index in range(20):
            log.append([b"v%02d" % index + b"-" * 50], leader_epoch=1 + index // 5, timestamp_ms=0)
        assert len(segment_files(log_dir)) >= 5
        names_before = segment_files(log_dir)
        assert log.truncate_to(7) == 7
        remaining = segment_files(log_dir)
        assert remaining == [name for name in names_before if int(name[:20]) <= 7]
        assert log.epoch_start_offsets() == [EpochEntry(1, 0), EpochEntry(2, 5)]
        assert log.append([b"new"], leader_epoch=9, timestamp_ms=0) == (7, 7)
        # Truncating exactly at a segment's base empties it but keeps it as the active one.
        base = int(remaining[-1][:20])
        assert log.truncate_to(base) == base
    with MetadataLog.open(log_dir, config) as log:
        assert log.end_offset == base
        assert [v[:3] for v in values_of(log.read(0))] == [b"v%02d" % i for i in range(base)]


def test_epoch_cache_and_end_offset_for_epoch_survive_reopen(log_dir):
    with MetadataLog.open(log_dir) as log:
        log.append([b"a", b"b"], leader_epoch=2, timestamp_ms=0)  # 0-1 epoch 2
        log.append([b"c"], leader_epoch=2, timestamp_ms=0)  # 2 epoch 2
        log.append([b"d"], leader_epoch=5, timestamp_ms=0)  # 3 epoch 5
        log.append([b"e", b"f"], leader_epoch=7, timestamp_ms=0)  # 4-5 epoch 7
        in_memory = log.epoch_start_offsets()
    with MetadataLog.open(log_dir) as log:
        assert log.epoch_start_offsets() == in_memory == [EpochEntry(2, 0), EpochEntry(5, 3), EpochEntry(7, 4)]
        assert log.last_epoch == 7
        assert log.end_offset_for_epoch(7) == EpochEndOffset(7, 6)  # the last epoch ends at the log end
        assert log.end_offset_for_epoch(5) == EpochEndOffset(5, 4)
        assert log.end_offset_for_epoch(2) == EpochEndOffset(2, 3)
        assert log.end_offset_for_epoch(6) == EpochEndOffset(5, 4)  # unknown epoch between: the one below
        assert log.end_offset_for_epoch(3) == EpochEndOffset(2, 3)
        assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 0)  # below all: where the first starts
        assert log.end_offset_for_epoch(8) is None


def test_bounds_and_ordering_rules(log_dir):
    config = LogConfig(max_batch_bytes=1000, max_records_per_batch=5)
    with MetadataLog.open(log_dir, config) as log:
        log.append([b"x"], leader_epoch=3, timestamp_ms=0)
        with pytest.raises(BatchRejectedError, match="max_batch_bytes"):
            log.append([b"y" * 1000], leader_epoch=3, timestamp_ms=0)
        with pytest.raises(BatchRejectedError, match="max_records_per_batch"):
            log.append([b"y"] * 6, leader_epoch=3, timestamp_ms=0)
        with pytest.raises(BatchRejectedError, match="below the log's last epoch"):
            log.append([b"y"], leader_epoch=2, timestamp_ms=0)
        with pytest.raises(BatchRejectedError):
            log.append([], leader_epoch=3, timestamp_ms=0)
        # Rejections leave nothing behind.
        assert log.end_offset == 1
        assert log.append([b"z"] * 5, leader_epoch=3, timestamp_ms=0) == (1, 5)


def test_append_raw_replicates_byte_for_byte(tmp_path):
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    config = LogConfig(segment_bytes=400)
    with MetadataLog.open(leader_dir, config) as leader, MetadataLog.open(follower_dir, config) as follower:
        for index in range(15):
            leader.append([b"r%02d" % index] * (index % 4 + 1), leader_epoch=1 + index // 6, timestamp_ms=index)
        fetched = 0
        # Bounded: each round appends at least one batch.
        for _ in range(100):
            if follower.end_offset == leader.end_offset:
                break
            raw = leader.read_raw(follower.end_offset, max_bytes=300)
            first, last = follower.append_raw(raw)
            assert first == fetched
            fetched = last + 1
        assert follower.end_offset == leader.end_offset
        assert follower.epoch_start_offsets() == leader.epoch_start_offsets()
        assert follower.read_raw(0, max_bytes=10**6) == leader.read_raw(0, max_bytes=10**6)


def test_append_raw_and_append_batches_reject_bad_input(tmp_path):
    with MetadataLog.open(tmp_path / "log") as log:
        log.append([b"a"], leader_epoch=2, timestamp_ms=0)
        with pytest.raises(BatchRejectedError, match="does not continue the log at 1"):
            log.append_raw(encode_batch(5, 2, [b"gap"], 0))
        with pytest.raises(BatchRejectedError, match="below the log's last epoch"):
            log.append_raw(encode_batch(1, 1, [b"old"], 0))
        corrupt = bytearray(encode_batch(1, 2, [b"b"], 0))
        corrupt[-1] ^= 1
        with pytest.raises(BatchRejectedError, match="CRC mismatch"):
            log.append_raw(bytes(corrupt))
        with pytest.raises(BatchRejectedError, match="truncated"):
            log.append_raw(encode_batch(1, 2, [b"b"], 0)[:-1])
        # Batches within one call are checked against each other too.
        with pytest.raises(BatchRejectedError):
            log.append_raw(encode_batch(1, 3, [b"b"], 0) + encode_batch(2, 2, [b"c"], 0))
        assert log.end_offset == 1
        batches = [decode_batch(encode_batch(1, 3, [b"b", b"c"], 0), 0)[0],
                   decode_batch(encode_batch(3, 4, [b"d"], 0, ControlRecordType.LEADER_CHANGE), 0)[0]]
        assert log.append_batches(batches) == (1, 3)
        assert log.read(1) == batches


def test_second_open_of_the_same_directory_is_refused(log_dir):
    with MetadataLog.open(log_dir):
        with pytest.raises(RuntimeError, match="locked"):
            MetadataLog.open(log_dir)
    MetadataLog.open(log_dir).close()  # the lock went with the close


def test_closed_log_refuses_work(log_dir):
    log = MetadataLog.open(log_dir)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append([b"a"], leader_epoch=1, timestamp_ms=0)


async def test_calls_from_trio_worker_threads(log_dir):
    # The trio shell runs each call on whatever worker thread is free; the log
    # must not care which thread opened it or made the previous call.
    log = await trio.to_thread.run_sync(MetadataLog.open, log_dir)
    for index in range(20):
        await trio.to_thread.run_sync(lambda i=index: log.append([b"%d" % i], leader_epoch=1, timestamp_ms=i))
    batches = await trio.to_thread.run_sync(log.read, 0)
    assert values_of(batches) == [b"%d" % i for i in range(20)]
    await trio.to_thread.run_sync(log.close)
