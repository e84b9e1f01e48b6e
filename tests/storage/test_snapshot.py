"""Snapshot files (layout, verification, atomicity, chunked transfer) and the
log's prefix deletion / reset that snapshots make possible."""

from __future__ import annotations

import json
import os

import pytest

from protocol.raft_records import SNAPSHOT_FOOTER_RECORD, SNAPSHOT_HEADER_RECORD
from protocol.record_batch import (
    CONTROL_BIT,
    ControlRecordType,
    decode_batches,
    encode_batch,
)
from server.storage import snapshot as snap
from server.storage.log import (
    LOG_START_FILE_NAME,
    BatchRejectedError,
    CorruptLogError,
    LogConfig,
    MetadataLog,
    OffsetOutOfRangeError,
    segment_file_name,
)
from server.storage.snapshot import (
    CorruptSnapshotError,
    SnapshotConfig,
    SnapshotExistsError,
    SnapshotPositionError,
    SnapshotReceiver,
    SnapshotRecord,
    SnapshotWriter,
    UnknownSnapshotError,
)
from server.values import EpochEndOffset, EpochEntry, SnapshotId

SID = SnapshotId(end_offset=1234, epoch=7)
TIMESTAMP_MS = 1_700_000_000_000


def values(count: int, size: int = 20) -> list[bytes]:
    return [(b"v%05d-" % index).ljust(size, b"x") for index in range(count)]


def write(directory, snapshot_id=SID, records=None, config=None) -> str:
    with SnapshotWriter(directory, snapshot_id, TIMESTAMP_MS, config) as writer:
        writer.append_records(records if records is not None else [SnapshotRecord(v) for v in values(5)])
        writer.freeze()
    return snap.snapshot_path(directory, snapshot_id)


# --------------------------------------------------------------------------
# Names and layout
# --------------------------------------------------------------------------


def test_file_name_is_kafka_style_and_parses_back():
    assert snap.snapshot_file_name(SID) == "00000000000000001234-0000000007.checkpoint"
    assert snap.parse_snapshot_file_name(snap.snapshot_file_name(SID)) == SID
    for bad in ("1234-7.checkpoint", snap.snapshot_file_name(SID) + ".part", "00000000000000001234.log", "x"):
        assert snap.parse_snapshot_file_name(bad) is None


def test_golden_layout_header_data_footer(tmp_path):
    records = [SnapshotRecord(b"a"), SnapshotRecord(b"bb"), SnapshotRecord(b"ccc")]
    path = write(tmp_path, records=records)
    data = open(path, "rb").read()
    header_value = SNAPSHOT_HEADER_RECORD.encode(0, {"version": 0, "last_contained_log_timestamp": TIMESTAMP_MS})
    footer_value = SNAPSHOT_FOOTER_RECORD.encode(0, {"version": 0})
    # Built independently from the batch encoder: offsets 0.. across the file,
    # the snapshot epoch on every batch, the last contained timestamp everywhere.
    expected = (
        encode_batch(0, SID.epoch, [header_value], TIMESTAMP_MS, ControlRecordType.SNAPSHOT_HEADER)
        + encode_batch(1, SID.epoch, [b"a", b"bb", b"ccc"], TIMESTAMP_MS)
        + encode_batch(4, SID.epoch, [footer_value], TIMESTAMP_MS, ControlRecordType.SNAPSHOT_FOOTER)
    )
    assert data == expected
    batches = decode_batches(data)
    assert [b.is_control for b in batches] == [True, False, True]
    assert [b.control_type for b in batches] == [ControlRecordType.SNAPSHOT_HEADER, None, ControlRecordType.SNAPSHOT_FOOTER]
    # The control attribute bit, checked on the raw bytes (attributes are int16 at byte 21).
    position = 0
    for batch in batches:
        attributes = int.from_bytes(data[position + 21 : position + 23], "big")
        assert bool(attributes & CONTROL_BIT) == batch.is_control
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    # The header value's bytes: version int16 0, timestamp int64, empty tagged fields.
    assert header_value == b"\x00\x00" + TIMESTAMP_MS.to_bytes(8, "big") + b"\x00"


def test_round_trip_with_batching_headers_and_inner_control_records(tmp_path):
    config = SnapshotConfig(max_batch_bytes=400, max_records_per_batch=4)
    records = [SnapshotRecord(v) for v in values(30, size=50)]
    records.insert(0, SnapshotRecord(b"\x00\x00\x01\x00", ControlRecordType.KRAFT_VERSION, (("k", b"v"),)))
    records.append(SnapshotRecord(b"last", None, (("kraftwerk.replay_offset", b"\x00" * 8), ("n", None))))
    path = write(tmp_path, records=records, config=config)
    contents = snap.read_snapshot(path)
    assert contents.snapshot_id == SID
    assert contents.last_contained_log_timestamp_ms == TIMESTAMP_MS
    assert contents.records == tuple(records)
    assert contents.values == [r.value for r in records if r.control_type is None]
    assert contents.size_bytes == os.path.getsize(path)
    batches = decode_batches(open(path, "rb").read())
    assert all(len(b.records) <= 4 for b in batches)
    raw = open(path, "rb").read()
    sizes = []
    position = 0
    while position < len(raw):
        size = int.from_bytes(raw[position + 8 : position + 12], "big") + 12
        sizes.append(size)
        position += size
    assert max(sizes) <= 400
    # The control record got a batch of its own.
    assert batches[1].control_type == ControlRecordType.KRAFT_VERSION and len(batches[1].records) == 1


def test_writer_rejects_what_does_not_belong(tmp_path):
    with SnapshotWriter(tmp_path, SID, 0, SnapshotConfig(max_batch_bytes=200)) as writer:
        with pytest.raises(ValueError):
            writer.append_records([SnapshotRecord(b"x", ControlRecordType.SNAPSHOT_FOOTER)])
        with pytest.raises(ValueError):
            writer.append_records([SnapshotRecord(b"x", ControlRecordType.LEADER_CHANGE)])
        with pytest.raises(ValueError):
            writer.append([b"x" * 500])
    assert os.listdir(tmp_path) == []


def test_empty_snapshot_is_header_and_footer_only(tmp_path):
    path = write(tmp_path, records=[])
    contents = snap.read_snapshot(path)
    assert contents.records == ()
    assert len(decode_batches(open(path, "rb").read())) == 2


# --------------------------------------------------------------------------
# Corruption and truncation
# --------------------------------------------------------------------------


def test_every_single_byte_corruption_is_detected(tmp_path):
    path = write(tmp_path, records=[SnapshotRecord(v) for v in values(3, size=8)])
    original = open(path, "rb").read()
    for position in range(len(original)):
        damaged = bytearray(original)
        damaged[position] ^= 0x41
        with pytest.raises(CorruptSnapshotError):
            snap.parse_snapshot(bytes(damaged), SID)


def test_every_truncation_is_detected(tmp_path):
    path = write(tmp_path)
    original = open(path, "rb").read()
    for length in range(len(original)):
        with pytest.raises(CorruptSnapshotError):
            snap.parse_snapshot(original[:length], SID)
    snap.parse_snapshot(original, SID)


def _header(epoch=SID.epoch, offset=0):
    value = SNAPSHOT_HEADER_RECORD.encode(0, {"version": 0, "last_contained_log_timestamp": 0})
    return encode_batch(offset, epoch, [value], 0, ControlRecordType.SNAPSHOT_HEADER)


def _footer(offset, epoch=SID.epoch):
    value = SNAPSHOT_FOOTER_RECORD.encode(0, {"version": 0})
    return encode_batch(offset, epoch, [value], 0, ControlRecordType.SNAPSHOT_FOOTER)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_header() + encode_batch(1, SID.epoch, [b"a"], 0), "no SnapshotFooter"),
        (encode_batch(0, SID.epoch, [b"a"], 0) + _footer(1), "does not start"),
        (_header() + _footer(1) + encode_batch(2, SID.epoch, [b"a"], 0), "after the SnapshotFooter"),
        (_header() + _header(offset=1) + _footer(2), "control record of type 3"),
        (_header() + encode_batch(1, SID.epoch, [b"x"], 0, ControlRecordType.LEADER_CHANGE) + _footer(2), "type 2"),
        (_header() + encode_batch(2, SID.epoch, [b"a"], 0) + _footer(3), "expected 1"),
        (_header() + encode_batch(1, SID.epoch + 1, [b"a"], 0) + _footer(2), "epoch"),
        (b"", "empty"),
        (
            _header()
            + _footer(1)[:-1]
            + b"",
            "truncated",
        ),
        (
            encode_batch(0, SID.epoch, [SNAPSHOT_HEADER_RECORD.encode(0, {"version": 1})], 0,
                         ControlRecordType.SNAPSHOT_HEADER) + _footer(1),
            "version 1",
        ),
    ],
)
def test_structural_damage_is_named(data, reason):
    with pytest.raises(CorruptSnapshotError, match=reason):
        snap.parse_snapshot(data, SID)


def test_file_renamed_to_another_epoch_is_caught(tmp_path):
    path = write(tmp_path)
    other = snap.snapshot_path(tmp_path, SnapshotId(SID.end_offset, SID.epoch + 1))
    os.rename(path, other)
    with pytest.raises(CorruptSnapshotError, match="epoch"):
        snap.read_snapshot(other)


def test_latest_valid_snapshot_falls_back_past_a_corrupt_one(tmp_path):
    older = SnapshotId(100, 3)
    write(tmp_path, older)
    newer_path = write(tmp_path, SID)
    with open(newer_path, "r+b") as file:
        file.seek(80)
        byte = file.read(1)
        file.seek(80)
        file.write(bytes([byte[0] ^ 1]))
    assert snap.latest_snapshot(tmp_path) == SID
    assert snap.latest_valid_snapshot(tmp_path).snapshot_id == older
    assert os.path.exists(newer_path)  # left for the operator


# --------------------------------------------------------------------------
# Atomicity and housekeeping
# --------------------------------------------------------------------------


def test_partial_snapshot_is_never_listed_and_abort_removes_it(tmp_path):
    writer = SnapshotWriter(tmp_path, SID, 0)
    writer.append(values(3))
    assert os.listdir(tmp_path) == [snap.snapshot_file_name(SID) + ".part"]
    assert snap.list_snapshots(tmp_path) == []
    assert snap.latest_snapshot(tmp_path) is None
    with pytest.raises(UnknownSnapshotError):
        snap.read_chunk(tmp_path, SID, 0, 10)
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_exception_inside_with_block_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with SnapshotWriter(tmp_path, SID, 0) as writer:
            writer.append(values(3))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_leftover_part_files_are_removed_at_start_up(tmp_path):
    write(tmp_path)
    leftover = tmp_path / (snap.snapshot_file_name(SnapshotId(2000, 7)) + ".part")
    leftover.write_bytes(b"half a snapshot")
    (tmp_path / "unrelated.part").write_bytes(b"")
    assert snap.remove_partial_snapshots(tmp_path) == [leftover.name]
    assert sorted(os.listdir(tmp_path)) == sorted([snap.snapshot_file_name(SID), "unrelated.part"])


def test_existing_snapshot_is_immutable(tmp_path):
    write(tmp_path)
    with pytest.raises(SnapshotExistsError):
        SnapshotWriter(tmp_path, SID, 0)
    with pytest.raises(SnapshotExistsError):
        SnapshotReceiver(tmp_path, SID, 100)


def test_freeze_fsyncs_file_then_renames_then_fsyncs_directory(tmp_path, monkeypatch):
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"))
        real_fsync(fd)

    def rename(source, target):
        events.append(("rename", os.path.basename(source), os.path.basename(target)))
        real_rename(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    write(tmp_path)
    assert events == [
        ("fsync", "file"),
        ("rename", snap.snapshot_file_name(SID) + ".part", snap.snapshot_file_name(SID)),
        ("fsync", "dir"),
    ]


def test_listing_and_deleting_older_snapshots(tmp_path):
    ids = [SnapshotId(10, 1), SnapshotId(20, 1), SnapshotId(20, 2), SnapshotId(35, 4)]
    for snapshot_id in reversed(ids):
        write(tmp_path, snapshot_id)
    assert snap.list_snapshots(tmp_path) == ids
    assert snap.latest_snapshot(tmp_path) == SnapshotId(35, 4)
    assert snap.delete_snapshots_before(tmp_path, SnapshotId(20, 2)) == ids[:2]
    assert snap.list_snapshots(tmp_path) == ids[2:]
    assert snap.list_snapshots(tmp_path / "missing") == []


# --------------------------------------------------------------------------
# Chunked transfer
# --------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 1000, 10**6])
def test_chunked_transfer_reproduces_identical_bytes(tmp_path, chunk_bytes):
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    leader_dir.mkdir()
    follower_dir.mkdir()
    path = write(leader_dir, records=[SnapshotRecord(v) for v in values(40)])
    size = snap.snapshot_size_bytes(leader_dir, SID)
    receiver = SnapshotReceiver(follower_dir, SID, size)
    rounds = 0
    while not receiver.complete:
        chunk = snap.read_chunk(leader_dir, SID, receiver.position, chunk_bytes)
        assert 0 < len(chunk) <= chunk_bytes
        receiver.write(receiver.position, chunk)
        rounds += 1
        assert rounds <= size
    assert snap.read_chunk(leader_dir, SID, size, chunk_bytes) == b""
    contents = receiver.finish()
    assert open(snap.snapshot_path(follower_dir, SID), "rb").read() == open(path, "rb").read()
    assert contents == snap.read_snapshot(path)
    assert os.listdir(follower_dir) == [snap.snapshot_file_name(SID)]


def test_chunk_errors_map_to_fetch_snapshot_errors(tmp_path):
    write(tmp_path)
    size = snap.snapshot_size_bytes(tmp_path, SID)
    with pytest.raises(UnknownSnapshotError):
        snap.read_chunk(tmp_path, SnapshotId(1, 1), 0, 10)
    with pytest.raises(UnknownSnapshotError):
        snap.snapshot_size_bytes(tmp_path, SnapshotId(1, 1))
    for position in (-1, size + 1):
        with pytest.raises(SnapshotPositionError):
            snap.read_chunk(tmp_path, SID, position, 10)


def test_receiver_refuses_out_of_order_and_overrunning_chunks(tmp_path):
    with SnapshotReceiver(tmp_path, SID, 10) as receiver:
        with pytest.raises(SnapshotPositionError):
            receiver.write(3, b"abc")
        receiver.write(0, b"abcdefgh")
        with pytest.raises(SnapshotPositionError):
            receiver.write(8, b"xyz")
    assert os.listdir(tmp_path) == []


def test_receiver_rejects_a_corrupt_or_incomplete_transfer(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    data = open(write(source), "rb").read()
    target = tmp_path / "target"
    target.mkdir()
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    receiver = SnapshotReceiver(target, SID, len(data))
    receiver.write(0, bytes(damaged))
    with pytest.raises(CorruptSnapshotError):
        receiver.finish()
    assert os.listdir(target) == []
    receiver = SnapshotReceiver(target, SID, len(data))
    receiver.write(0, data[:-5])
    with pytest.raises(CorruptSnapshotError, match="received"):
        receiver.finish()
    assert os.listdir(target) == []


# --------------------------------------------------------------------------
# MetadataLog: prefix deletion and reset
# --------------------------------------------------------------------------

SMALL_SEGMENTS = LogConfig(segment_bytes=300)


def fill(log: MetadataLog, batches: int, epoch_every: int = 4) -> None:
    for index in range(batches):
        base = log.end_offset
        log.append(
            [b"value-%d" % (base + i) for i in range(index % 3 + 1)],
            leader_epoch=log.last_epoch + (index % epoch_every == 0),
            timestamp_ms=index,
        )


def all_values(log: MetadataLog) -> dict[int, bytes]:
    return {
        record.offset: record.value
        for batch in log.read(log.start_offset, max_bytes=2**30)
        for record in batch.records
        if record.offset >= log.start_offset
    }


def segments(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".log"))


def batch_bases(log: MetadataLog) -> list[int]:
    return [batch.base_offset for batch in log.read(log.start_offset, max_bytes=2**30)]


def test_delete_before_drops_whole_segments_and_survives_reopen(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 30)
        end, last_epoch = log.end_offset, log.last_epoch
        before = all_values(log)
        epochs_before = log.epoch_start_offsets()
        bases = batch_bases(log)
        cut = bases[len(bases) // 2]
        assert len(log.segment_base_offsets()) > 3
        assert log.delete_before(cut) == cut
        assert log.start_offset == cut
        assert all(base <= cut for base in log.segment_base_offsets()[:1])
        assert len(segments(directory)) == len(log.segment_base_offsets())
        assert log.segment_base_offsets()[0] <= cut < (log.segment_base_offsets() + [end])[1]
        assert all_values(log) == {o: v for o, v in before.items() if o >= cut}
        with pytest.raises(OffsetOutOfRangeError):
            log.read(cut - 1)
        in_force = [e for e in epochs_before if e.start_offset <= cut][-1]
        expected_epochs = [EpochEntry(in_force.epoch, cut)] + [e for e in epochs_before if e.start_offset > cut]
        assert log.epoch_start_offsets() == expected_epochs
        answers = {epoch: log.end_offset_for_epoch(epoch) for epoch in range(0, last_epoch + 2)}
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert (log.start_offset, log.end_offset, log.last_epoch) == (cut, end, last_epoch)
        assert log.epoch_start_offsets() == expected_epochs
        assert {epoch: log.end_offset_for_epoch(epoch) for epoch in range(0, last_epoch + 2)} == answers
        assert all_values(log) == {o: v for o, v in before.items() if o >= cut}
        fill(log, 3)
        assert log.end_offset > end


def test_delete_before_rounds_down_inside_a_batch_and_checks_bounds(tmp_path):
    with MetadataLog.open(tmp_path / "log", SMALL_SEGMENTS) as log:
        fill(log, 10)
        bases = batch_bases(log)
        multi = next(b for b, n in zip(bases, bases[1:]) if n - b > 1)
        assert log.delete_before(multi + 1) == multi
        assert log.delete_before(multi - 1) == multi  # never moves backwards
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_before(log.end_offset + 1)


def test_delete_before_the_end_leaves_an_empty_log_with_its_epoch(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 12)
        end, epoch = log.end_offset, log.last_epoch
        assert log.delete_before(end) == end
        assert (log.start_offset, log.end_offset, log.last_epoch) == (end, end, epoch)
        assert log.read(end) == []
        assert log.epoch_start_offsets() == []
        assert log.end_offset_for_epoch(epoch) == EpochEndOffset(epoch, end)
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert (log.start_offset, log.end_offset, log.last_epoch) == (end, end, epoch)
        with pytest.raises(BatchRejectedError):
            log.append([b"old"], leader_epoch=epoch - 1, timestamp_ms=0)
        assert log.append([b"new"], leader_epoch=epoch, timestamp_ms=0) == (end, end)


def test_truncating_to_the_start_after_deletion_keeps_the_start_epoch(tmp_path):
    with MetadataLog.open(tmp_path / "log", SMALL_SEGMENTS) as log:
        fill(log, 12)
        cut = batch_bases(log)[5]
        log.delete_before(cut)
        epoch_before = log.epoch_before_start
        assert log.truncate_to(cut) == cut
        assert log.last_epoch == epoch_before
        with pytest.raises(OffsetOutOfRangeError):
            log.truncate_to(cut - 1)


def test_reset_to_a_snapshot_gives_an_empty_log_at_its_end(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 12)
        log.reset_to(5000, 9)
        assert (log.start_offset, log.end_offset, log.last_epoch) == (5000, 5000, 9)
        assert segments(directory) == [segment_file_name(5000)]
        assert log.end_offset_for_epoch(9) == EpochEndOffset(9, 5000)
        assert log.end_offset_for_epoch(10) is None
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert (log.start_offset, log.end_offset, log.last_epoch) == (5000, 5000, 9)
        with pytest.raises(BatchRejectedError):
            log.append([b"x"], leader_epoch=8, timestamp_ms=0)
        assert log.append([b"x", b"y"], leader_epoch=9, timestamp_ms=0) == (5000, 5001)
        fill(log, 10)
        assert log.epoch_start_offsets()[0] == EpochEntry(9, 5000)
        end = log.end_offset
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert (log.start_offset, log.end_offset) == (5000, end)
        assert all_values(log)[5000] == b"x"


def test_reset_below_the_current_end_discards_everything(tmp_path):
    with MetadataLog.open(tmp_path / "log", SMALL_SEGMENTS) as log:
        fill(log, 20)
        log.reset_to(7, 2)
        assert (log.start_offset, log.end_offset, log.last_epoch) == (7, 7, 2)
        assert log.read(7) == []


def _write_log_start(directory, start_offset, epoch, reset_pending=False):
    (directory / LOG_START_FILE_NAME).write_text(
        json.dumps({"version": 1, "start_offset": start_offset, "epoch": epoch, "reset_pending": reset_pending})
    )


def test_recovery_finishes_an_interrupted_reset(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 20)
        end = log.end_offset
    # The crash came after the intent was recorded, before (or while) segments went.
    for start in (end + 100, 3):
        _write_log_start(directory, start, 6, reset_pending=True)
        with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
            assert (log.start_offset, log.end_offset, log.last_epoch) == (start, start, 6)
            assert segments(directory) == [segment_file_name(start)]
        assert json.loads((directory / LOG_START_FILE_NAME).read_text())["reset_pending"] is False
        with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
            log.append([b"a"], leader_epoch=6, timestamp_ms=0)


def test_recovery_finishes_an_interrupted_prefix_deletion(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 30)
        before = all_values(log)
        bases = log.segment_base_offsets()
        cut = batch_bases(log)[len(batch_bases(log)) // 2]
        epoch = [e for e in log.epoch_start_offsets() if e.start_offset <= cut - 1][-1].epoch
    _write_log_start(directory, cut, epoch)  # crash: the file made it, no segment was deleted yet
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert log.start_offset == cut
        assert len(log.segment_base_offsets()) < len(bases)
        assert segments(directory) == [segment_file_name(b) for b in log.segment_base_offsets()]
        assert all_values(log) == {o: v for o, v in before.items() if o >= cut}


def test_log_start_file_inconsistent_with_segments_is_fatal(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 30)
        log.delete_before(batch_bases(log)[10])
        first_base = log.segment_base_offsets()[0]
        end = log.end_offset
    _write_log_start(directory, first_base - 1, 1)
    with pytest.raises(CorruptLogError, match="segments are missing"):
        MetadataLog.open(directory, SMALL_SEGMENTS)
    _write_log_start(directory, end + 1, 1)
    with pytest.raises(CorruptLogError, match="beyond its end"):
        MetadataLog.open(directory, SMALL_SEGMENTS)
    (directory / LOG_START_FILE_NAME).write_text("{not json")
    with pytest.raises(CorruptLogError, match="unreadable"):
        MetadataLog.open(directory, SMALL_SEGMENTS)


def test_a_log_without_the_file_starts_at_its_first_segment(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        fill(log, 30)
    assert not (directory / LOG_START_FILE_NAME).exists()
    names = segments(directory)
    os.unlink(directory / names[0])  # what an older kraftwerk's deletion would leave
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        assert log.start_offset == int(names[1][:20])
