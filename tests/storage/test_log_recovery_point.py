"""The recovery point: corruption of flushed data versus a torn write, and `repair`.

A flipped byte inside a batch the log had fsynced is corruption (refused,
named); damage past the recovery point is a torn write (cut, logged); a log
without the file recovers as before; truncation and reset never leave the
point ahead of the data; `MetadataLog.repair` cuts to the last good batch.
"""

from __future__ import annotations

import itertools
import os
import shutil

import pytest
from structlog.testing import capture_logs

from protocol.record_batch import encode_batch
from server.storage.log import CorruptLogError, LogConfig, MetadataLog, segment_file_name
from server.storage.recovery_point import (
    RECOVERY_POINT_FILE_NAME,
    SLOT_BYTES,
    SLOT_POSITIONS,
    RecoveryPoint,
    decode_slot,
    encode_slot,
    newest_point,
    read_recovery_point,
)

SEGMENT_0 = segment_file_name(0)
THREE_BATCHES = [([b"one"], 1), ([b"two", b"three"], 1), ([b"four", b"five", b"six"], 2)]
FIRST_SIZE = len(encode_batch(0, 1, [b"one"], 1000))
THIRD_START = FIRST_SIZE + len(encode_batch(1, 1, [b"two", b"three"], 1000))
THIRD_SIZE = len(encode_batch(3, 2, [b"four", b"five", b"six"], 1000))


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "metadata"


def build_log(log_dir, batches, config=None):
    with MetadataLog.open(log_dir, config) as log:
        for values, epoch in batches:
            log.append(values, leader_epoch=epoch, timestamp_ms=1000)
        return log.end_offset


def values_of(log):
    return [value for batch in log.read(0, max_bytes=2**30) for value in batch.values]


def recovery_point(log_dir) -> int | None:
    point = read_recovery_point(str(log_dir)).point
    return None if point is None else point.offset


def damage(path, kind):
    data = bytearray(path.read_bytes())
    if kind == "flip_last_byte":
        data[-1] ^= 0x40
    elif kind == "flip_inside":
        data[THIRD_START + 40] ^= 0x01  # inside the CRC-covered part of the last batch
    elif kind == "zero_tail":
        data[-20:] = bytes(20)
    elif kind == "cut_short":
        del data[-5:]
    else:
        raise AssertionError(kind)
    path.write_bytes(bytes(data))


# -- the file format ----------------------------------------------------------------

def test_slot_round_trip_and_torn_slots_are_rejected():
    slot = encode_slot(RecoveryPoint(7, 12345))
    assert len(slot) == SLOT_BYTES
    assert decode_slot(slot) == RecoveryPoint(7, 12345)
    for position in range(24 + 4):  # every byte the CRC or the body covers
        torn = bytearray(slot)
        torn[position] ^= 0x01
        assert decode_slot(bytes(torn)) is None, position
    assert decode_slot(bytes(SLOT_BYTES)) is None  # a zero-filled (never written) slot
    assert decode_slot(slot[:20]) is None


def test_the_newest_verifying_slot_wins():
    data = bytearray(SLOT_POSITIONS[-1] + SLOT_BYTES)
    data[0:SLOT_BYTES] = encode_slot(RecoveryPoint(4, 100))
    data[4096 : 4096 + SLOT_BYTES] = encode_slot(RecoveryPoint(5, 140))
    assert newest_point(bytes(data)) == RecoveryPoint(5, 140)
    data[4096 + 10] ^= 0xFF  # the newer slot torn: the older, lower one stands
    assert newest_point(bytes(data)) == RecoveryPoint(4, 100)
    data[3] ^= 0xFF
    assert newest_point(bytes(data)) is None


def test_an_old_higher_value_never_outlives_a_lowering(log_dir):
    """After `truncate_to`, raises are pwrites without fsync: whichever of them
    reach the disk, whole or torn, the point must not come back above the data."""
    build_log(log_dir, [([b"v%d" % i], 1) for i in range(10)])
    path = log_dir / RECOVERY_POINT_FILE_NAME
    with MetadataLog.open(log_dir) as log:
        log.truncate_to(4)
        after_lowering = path.read_bytes()  # what the lowering's fsync made durable
        log.append([b"a"], leader_epoch=1, timestamp_ms=0)
        log.append([b"b"], leader_epoch=1, timestamp_ms=0)
        after_raises = path.read_bytes()
        durable_end = log.end_offset
    garbage = bytes(range(SLOT_BYTES))
    # Each slot independently: as after the lowering, as after the raises, or torn.
    for choices in itertools.product(("old", "new", "torn"), repeat=len(SLOT_POSITIONS)):
        disk = bytearray(after_raises)
        for position, choice in zip(SLOT_POSITIONS, choices):
            source = {"old": after_lowering, "new": after_raises, "torn": garbage}[choice]
            disk[position : position + SLOT_BYTES] = source[position : position + SLOT_BYTES] if choice != "torn" \
                else garbage
        point = newest_point(bytes(disk))
        assert point is None or 4 <= point.offset <= durable_end, (choices, point)


# -- recovery: corruption versus torn write -------------------------------------------

@pytest.mark.parametrize("kind", ["flip_last_byte", "flip_inside", "zero_tail", "cut_short"])
def test_damage_inside_the_last_flushed_batch_is_corruption(log_dir, kind):
    build_log(log_dir, THREE_BATCHES)
    assert recovery_point(log_dir) == 6
    path = log_dir / SEGMENT_0
    damage(path, kind)
    before = path.read_bytes()
    with capture_logs() as logs:
        with pytest.raises(CorruptLogError) as excinfo:
            MetadataLog.open(log_dir)
    message = str(excinfo.value)
    assert str(path) in message
    assert f"byte {THIRD_START}" in message
    assert "base offset 3" in message
    assert "flushed up to offset 6" in message
    assert "kraftwerk storage recover --config FILE" in message
    assert (excinfo.value.path, excinfo.value.position, excinfo.value.offset) == (str(path), THIRD_START, 3)
    # Nothing was cut and nothing claimed a torn write: the operator decides.
    assert path.read_bytes() == before
    assert not [entry for entry in logs if entry["event"] == "storage.torn_tail_truncated"]
    assert recovery_point(log_dir) == 6


def test_a_log_that_ends_before_its_recovery_point_is_corruption(log_dir):
    build_log(log_dir, THREE_BATCHES)
    path = log_dir / SEGMENT_0
    # A whole flushed batch is gone, cleanly: every remaining batch verifies.
    path.write_bytes(path.read_bytes()[:THIRD_START])
    with pytest.raises(CorruptLogError, match="ends at offset 3 .* flushed up to offset 6") as excinfo:
        MetadataLog.open(log_dir)
    assert str(path) in str(excinfo.value)
    assert excinfo.value.offset == 3


def test_a_missing_last_segment_below_the_recovery_point_is_corruption(log_dir):
    config = LogConfig(segment_bytes=150)
    build_log(log_dir, [([b"x" * 60], 1)] * 4, config)
    names = sorted(name for name in os.listdir(log_dir) if name.endswith(".log"))
    assert len(names) >= 2
    os.unlink(log_dir / names[-1])
    with pytest.raises(CorruptLogError, match="flushed up to offset 4"):
        MetadataLog.open(log_dir, config)


@pytest.mark.parametrize("kind", ["flip_last_byte", "flip_inside", "zero_tail", "cut_short"])
def test_damage_past_the_recovery_point_is_a_torn_write(log_dir, kind):
    # The last append's fsync never returned, so the point was not raised past it.
    build_log(log_dir, THREE_BATCHES[:2])
    point_before = (log_dir / RECOVERY_POINT_FILE_NAME).read_bytes()
    build_log(log_dir, THREE_BATCHES[2:])
    (log_dir / RECOVERY_POINT_FILE_NAME).write_bytes(point_before)
    assert recovery_point(log_dir) == 3
    path = log_dir / SEGMENT_0
    damage(path, kind)
    with capture_logs() as logs:
        log = MetadataLog.open(log_dir)
    with log:
        assert log.end_offset == 3
        assert values_of(log) == [b"one", b"two", b"three"]
        assert path.stat().st_size == THIRD_START
        torn = [entry for entry in logs if entry["event"] == "storage.torn_tail_truncated"]
        assert len(torn) == 1 and torn[0]["position"] == THIRD_START
        assert log.append([b"again"], leader_epoch=2, timestamp_ms=0) == (3, 3)


@pytest.mark.parametrize("kind", ["flip_last_byte", "flip_inside", "zero_tail", "cut_short"])
def test_a_log_without_the_file_keeps_the_torn_tail_rule(log_dir, kind):
    build_log(log_dir, THREE_BATCHES)
    os.unlink(log_dir / RECOVERY_POINT_FILE_NAME)  # as a log written before the file existed
    damage(log_dir / SEGMENT_0, kind)
    with capture_logs() as logs:
        log = MetadataLog.open(log_dir)
    with log:
        assert log.end_offset == 3
        assert [entry["event"] for entry in logs].count("storage.torn_tail_truncated") == 1
    # From now on it has one, at what recovery kept.
    assert recovery_point(log_dir) == 3


def test_a_file_with_both_slots_torn_is_lenient_and_warned(log_dir):
    build_log(log_dir, THREE_BATCHES)
    (log_dir / RECOVERY_POINT_FILE_NAME).write_bytes(b"\xff" * 5000)
    damage(log_dir / SEGMENT_0, "flip_last_byte")
    with capture_logs() as logs:
        log = MetadataLog.open(log_dir)
    with log:
        assert log.end_offset == 3
    events = [entry["event"] for entry in logs]
    assert "storage.recovery_point_unreadable" in events
    assert "storage.torn_tail_truncated" in events
    assert recovery_point(log_dir) == 3


def test_appends_raise_the_point_and_a_reopen_keeps_it(log_dir):
    with MetadataLog.open(log_dir) as log:
        assert recovery_point(log_dir) == 0
        log.append([b"a", b"b"], leader_epoch=1, timestamp_ms=0)
        assert recovery_point(log_dir) == 2
        log.append_raw(encode_batch(2, 1, [b"c"], 0) + encode_batch(3, 1, [b"d"], 0))
        assert recovery_point(log_dir) == 4
    with MetadataLog.open(log_dir) as log:
        assert log.end_offset == recovery_point(log_dir) == 4


# -- truncation, prefix deletion and reset keep it consistent ------------------------

def test_truncate_then_crash_is_no_false_corruption(tmp_path):
    source = tmp_path / "source"
    config = LogConfig(segment_bytes=150)
    build_log(source, [([b"x" * 60], 1)] * 6, config)
    with MetadataLog.open(source, config) as log:
        assert len(log.segment_base_offsets()) >= 3
        log.truncate_to(2)
        # A process killed right after truncate_to returned: its files as they are.
        crashed = tmp_path / "crashed"
        shutil.copytree(source, crashed, ignore=shutil.ignore_patterns(".lock"))
    assert recovery_point(crashed) == 2
    with MetadataLog.open(crashed, config) as log:
        assert log.end_offset == 2


@pytest.mark.parametrize("crash_at", ["unlink", "ftruncate"])
def test_a_crash_inside_truncate_to_is_no_false_corruption(tmp_path, monkeypatch, crash_at):
    """The point goes down before the first byte goes; a crash at any later step
    leaves a log at or above it."""
    source = tmp_path / "source"
    config = LogConfig(segment_bytes=150)
    build_log(source, [([b"x" * 60], 1)] * 6, config)
    crashed = tmp_path / "crashed"
    log = MetadataLog.open(source, config)

    def crash(*args):
        shutil.copytree(source, crashed, ignore=shutil.ignore_patterns(".lock"))
        raise OSError(5, f"simulated crash at {crash_at}")

    monkeypatch.setattr(os, crash_at, crash)
    with pytest.raises(OSError, match="simulated crash"):
        log.truncate_to(1)
    monkeypatch.undo()
    log.close()
    assert recovery_point(crashed) == 1
    with MetadataLog.open(crashed, config) as recovered:
        # Whatever the crash left (later segments gone or not, the last one cut
        # or not) is at or above the point: opened, never refused.
        assert recovered.end_offset >= 1
        assert values_of(recovered) == [b"x" * 60] * recovered.end_offset


def test_delete_before_and_reset_to_keep_it_consistent(log_dir):
    config = LogConfig(segment_bytes=150)
    build_log(log_dir, [([b"x" * 60], 1)] * 6, config)
    with MetadataLog.open(log_dir, config) as log:
        log.delete_before(3)
        assert recovery_point(log_dir) == 6
    with MetadataLog.open(log_dir, config) as log:
        assert (log.start_offset, log.end_offset) == (3, 6)
        log.reset_to(2, 1)  # a leader's snapshot below this log's (diverged) end
        assert recovery_point(log_dir) == 2
    with MetadataLog.open(log_dir, config) as log:
        assert (log.start_offset, log.end_offset) == (2, 2)
        log.reset_to(50, 3)  # and one beyond it
        assert recovery_point(log_dir) == 50
    with MetadataLog.open(log_dir, config) as log:
        assert (log.start_offset, log.end_offset) == (50, 50)


# -- repair ---------------------------------------------------------------------------

def test_repair_cuts_to_the_last_good_batch(log_dir):
    build_log(log_dir, THREE_BATCHES)
    damage(log_dir / SEGMENT_0, "flip_inside")
    plan = MetadataLog.repair(log_dir, apply=False)
    assert plan.problem is not None and "base offset 3" in plan.problem
    assert (plan.cut_offset, plan.recovery_point, plan.applied) == (3, 6, False)
    assert plan.removed_bytes == THIRD_SIZE
    assert (plan.cut_segment, plan.cut_position) == (str(log_dir / SEGMENT_0), THIRD_START)
    with pytest.raises(CorruptLogError):  # a look changes nothing
        MetadataLog.open(log_dir)
    with capture_logs() as logs:
        done = MetadataLog.repair(log_dir, apply=True)
    assert (done.applied, done.end_offset, done.removed_bytes) == (True, 3, THIRD_SIZE)
    assert [entry for entry in logs if entry["event"] == "storage.recovered"][0]["cut_offset"] == 3
    with MetadataLog.open(log_dir) as log:
        assert values_of(log) == [b"one", b"two", b"three"]
        assert recovery_point(log_dir) == 3
        assert log.append([b"new"], leader_epoch=2, timestamp_ms=0) == (3, 3)
    assert MetadataLog.repair(log_dir, apply=True).problem is None


def test_repair_removes_every_later_segment(log_dir):
    config = LogConfig(segment_bytes=300)  # two batches a segment
    build_log(log_dir, [([b"x" * 60], 1)] * 8, config)
    names = sorted(name for name in os.listdir(log_dir) if name.endswith(".log"))
    assert len(names) == 4
    first = log_dir / names[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0x01  # the first segment's second batch
    first.write_bytes(bytes(data))
    done = MetadataLog.repair(log_dir, config, apply=True)
    assert done.removed_segments == tuple(str(log_dir / name) for name in names[1:])
    assert done.end_offset == 1
    assert sorted(name for name in os.listdir(log_dir) if name.endswith(".log")) == names[:1]
    with MetadataLog.open(log_dir, config) as log:
        assert log.end_offset == 1


def test_repair_of_a_log_that_ends_early_only_resets_the_point(log_dir):
    build_log(log_dir, THREE_BATCHES)
    path = log_dir / SEGMENT_0
    path.write_bytes(path.read_bytes()[:THIRD_START])
    done = MetadataLog.repair(log_dir, apply=True)
    assert (done.cut_offset, done.removed_bytes, done.end_offset, done.recovery_point) == (3, 0, 3, 6)
    with MetadataLog.open(log_dir) as log:
        assert log.end_offset == 3


def test_repair_refuses_while_the_log_is_open(log_dir):
    build_log(log_dir, THREE_BATCHES)
    with MetadataLog.open(log_dir):
        with pytest.raises(RuntimeError, match="locked"):
            MetadataLog.repair(log_dir, apply=True)


def test_repair_below_the_log_start_resets_the_log_to_it(log_dir):
    config = LogConfig(segment_bytes=300)  # two batches a segment
    build_log(log_dir, [([b"x" * 60], 1)] * 8, config)
    with MetadataLog.open(log_dir, config) as log:
        assert log.delete_before(3) == 3  # a snapshot ends at 3: segment [2, 4) still holds offset 2
        first_segment = log_dir / segment_file_name(log.segment_base_offsets()[0])
    assert first_segment.name == segment_file_name(2)
    data = bytearray(first_segment.read_bytes())
    data[40] ^= 0x01  # inside batch 2, below the log start
    first_segment.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="base offset 2"):
        MetadataLog.open(log_dir, config)
    done = MetadataLog.repair(log_dir, config, apply=True)
    assert (done.cut_offset, done.reset_to_start, done.end_offset) == (2, 3, 3)
    with MetadataLog.open(log_dir, config) as log:
        assert (log.start_offset, log.end_offset, log.last_epoch) == (3, 3, 1)
        assert recovery_point(log_dir) == 3
        assert log.append([b"next"], leader_epoch=1, timestamp_ms=0) == (3, 3)
