"""KRaft snapshot files: writing, verified reading, chunked transfer, clean-up.

Owns: the on-disk snapshot format and its life cycle in the metadata log
directory. A snapshot is named by its id, the end offset (exclusive: the
first offset *not* in it) and the epoch of its last record, as Kafka names
them: `<20-digit end offset>-<10-digit epoch>.checkpoint`. The content is
plain record batches v2 (FACTS §10), as Kafka's snapshot writer lays them out:

    control batch   SnapshotHeader (type 3; v0 value: version 0, last contained log timestamp)
    data batches    metadata record values (and, if any, KRaftVersion/Voters control batches)
    control batch   SnapshotFooter (type 4; v0 value: version 0)

Offsets inside the file run 0, 1, 2, ... across all batches (not log
offsets), every batch carries the snapshot's epoch as partitionLeaderEpoch,
and every batch has the last contained log timestamp, so the same state and
id always give the same bytes.

Rules kept here:
- Atomic: a snapshot is written to `<name>.checkpoint.part`, fsynced, renamed
  to `<name>.checkpoint` and the directory fsynced. Only `.checkpoint` files are
  ever listed or read as snapshots; `remove_partial_snapshots` deletes the
  `.part` leftovers of a crash at start-up.
- Verified on read: every batch's CRC, offsets contiguous from 0, the epoch of
  every batch equal to the id's (neither is covered by the CRC), the header
  first (in its batch only KRaftVersion/Voters may follow it, as Kafka writes
  them: `SnapshotContents.header_records`), the footer last with nothing after
  it, only known control types in between. Any failure is `CorruptSnapshotError` naming the file and the byte;
  the caller falls back to an older snapshot or fetches one from the leader.
- Bounded: batches at most `max_batch_bytes` / `max_records_per_batch`; a read
  refuses files above `max_snapshot_bytes`; `read_chunk` returns at most
  `max_bytes`.
- Received snapshots (FetchSnapshot) are written sequentially to a `.part`
  file and verified in full before the rename, so a torn or corrupt transfer
  never becomes a snapshot.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import DecodeError
from protocol.raft_records import SNAPSHOT_FOOTER_RECORD, SNAPSHOT_HEADER_RECORD
from protocol.record_batch import (
    CONTROL_KEY_BYTES,
    DEFAULT_MAX_BATCH_BYTES,
    HEADER_BYTES,
    ControlRecordType,
    Record,
    RecordBatch,
    control_record_key,
    control_record_type,
    decode_batch,
    encode_batch,
    encode_record_batch,
)
from server.observability import Event, get_logger
from server.storage.log import _fsync_directory, _pwrite_all
from server.values import LeaderEpoch, Offset, SnapshotId

_log = get_logger("storage.snapshot")

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_PARTIAL_NAME = re.compile(r"^\d{20}-\d{10}\.checkpoint\.part$")
SNAPSHOT_HEADER_VERSION = 0
SNAPSHOT_FOOTER_VERSION = 0
# Control types that may sit between header and footer (KIP-853 puts the
# kraft.version and the voter set into snapshots).
_INNER_CONTROL_TYPES = frozenset({ControlRecordType.KRAFT_VERSION, ControlRecordType.VOTERS})
# An upper bound on one record's framing bytes besides key, value and
# headers: length (5), attributes (1), timestamp delta (1: always 0), offset
# delta (5), key length (5), value length (5), header count (5).
_RECORD_OVERHEAD_BYTES = 27


class CorruptSnapshotError(Exception):
    """A completed snapshot (or a received one) does not verify."""


class UnknownSnapshotError(LookupError):
    """No snapshot with that id exists (FetchSnapshot's SNAPSHOT_NOT_FOUND, 98)."""


class SnapshotPositionError(ValueError):
    """A chunk position outside the snapshot (FetchSnapshot's POSITION_OUT_OF_RANGE, 99)."""


class SnapshotExistsError(FileExistsError):
    """A snapshot with that id is already complete; snapshots are immutable."""


class SnapshotRecord(NamedTuple):
    """One record of a snapshot between header and footer.

    `control_type` is None for a metadata record (the value is a framed
    metadata record) and a ControlRecordType for a control record. `headers`
    are the record's headers (Kafka readers ignore them; the controller uses
    one to carry the offset a record is replayed at).
    """

    value: bytes
    control_type: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    # KRaft's cap on a batch (KafkaRaftClient MAX_BATCH_SIZE_BYTES).
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_records_per_batch: int = 10_000
    # What a read accepts; a controller snapshot of this project is tiny, so a
    # file above this is damage, not data.
    max_snapshot_bytes: int = 1024 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_batch_bytes <= HEADER_BYTES + _RECORD_OVERHEAD_BYTES:
            raise ValueError("SnapshotConfig.max_batch_bytes is too small for one record")
        for name in ("max_records_per_batch", "max_snapshot_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SnapshotConfig.{name} must be positive")


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    snapshot_id: SnapshotId
    last_contained_log_timestamp_ms: int
    records: tuple[SnapshotRecord, ...]
    size_bytes: int
    # Control records that share the SnapshotHeader's batch: Kafka's snapshot writer puts
    # KRaftVersion and the VotersRecord there (KIP-853). They are the raft layer's, so they
    # are kept apart from `records` (which a controller replays).
    header_records: tuple[SnapshotRecord, ...] = ()

    @property
    def values(self) -> list[bytes]:
        """The metadata record values, in order (control records left out)."""
        return [entry.value for entry in self.records if entry.control_type is None]


# --------------------------------------------------------------------------
# Names and listing
# --------------------------------------------------------------------------


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    """`<20-digit end offset>-<10-digit epoch>.checkpoint`, Kafka's name for the snapshot."""
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    match = _SNAPSHOT_NAME.match(name)
    if match is None:
        return None
    return SnapshotId(Offset(int(match.group(1))), LeaderEpoch(int(match.group(2))))


def snapshot_path(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> str:
    return os.path.join(os.fspath(directory), snapshot_file_name(snapshot_id))


def list_snapshots(directory: str | os.PathLike[str]) -> list[SnapshotId]:
    """Completed snapshots (by name only, not verified), oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [parse_snapshot_file_name(name) for name in names]
    return sorted(snapshot_id for snapshot_id in found if snapshot_id is not None)


def latest_snapshot(directory: str | os.PathLike[str]) -> SnapshotId | None:
    """The newest completed snapshot by id (not verified; see `latest_valid_snapshot`)."""
    snapshots = list_snapshots(directory)
    return snapshots[-1] if snapshots else None


def remove_partial_snapshots(directory: str | os.PathLike[str]) -> list[str]:
    """Deletes `.checkpoint.part` files: a crash cut their writing or receiving
    short, and they were never snapshots. Call at start-up, before any writer
    runs. Returns the names removed."""
    directory = os.fspath(directory)
    try:
        names = sorted(name for name in os.listdir(directory) if _PARTIAL_NAME.match(name))
    except FileNotFoundError:
        return []
    for name in names:
        os.unlink(os.path.join(directory, name))
        _log.warning(Event.SNAPSHOT_PARTIAL_REMOVED, directory=directory, file=name)
    if names:
        _fsync_directory(directory)
    return names


def delete_snapshots_before(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> list[SnapshotId]:
    """Deletes every completed snapshot older than `snapshot_id` (call once the
    log start has moved to `snapshot_id.end_offset`). Returns what went."""
    directory = os.fspath(directory)
    doomed = [older for older in list_snapshots(directory) if older < snapshot_id]
    for older in doomed:
        os.unlink(snapshot_path(directory, older))
        _log.info(Event.SNAPSHOT_DELETED, directory=directory, end_offset=older.end_offset, epoch=older.epoch)
    if doomed:
        _fsync_directory(directory)
    return doomed


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def _record_bound_bytes(record: SnapshotRecord) -> int:
    # Once per record of every snapshot (a broker's holds every registration): plain
    # loops, no generator. A control key is always CONTROL_KEY_BYTES (int16 version,
    # int16 type); append_records has checked the type first.
    size = _RECORD_OVERHEAD_BYTES + len(record.value)
    if record.control_type is not None:
        size += CONTROL_KEY_BYTES
    for key, value in record.headers:
        size += 10 + len(key.encode("utf-8"))
        if value is not None:
            size += len(value)
    return size


def _encode_snapshot_batch(
    base_offset: int, epoch: int, timestamp_ms: int, records: Sequence[SnapshotRecord]
) -> bytes:
    control_type = records[0].control_type
    mixed = any(record.control_type != control_type for record in records)
    if not mixed:
        # One control type (or none): KRaft's batch layout, each record's headers
        # (a controller snapshot's replay offsets) written straight after its value;
        # the same bytes as the general encoder below, without a Record per record.
        values = [record.value for record in records]
        headers = [record.headers for record in records]
        return encode_batch(base_offset, epoch, values, timestamp_ms, control_type,
                            headers=headers if any(headers) else None)
    return encode_record_batch(
        RecordBatch(
            base_offset=base_offset,
            leader_epoch=epoch,
            base_timestamp_ms=timestamp_ms,
            last_offset_delta=len(records) - 1,
            is_control=control_type is not None,
            records=tuple(
                Record(base_offset + index, record.value,
                       None if record.control_type is None else control_record_key(record.control_type),
                       record.headers, timestamp_ms)
                for index, record in enumerate(records)
            ),
            max_timestamp_ms=timestamp_ms,
        )
    )


class SnapshotWriter:
    """Writes one snapshot: header at creation, `append*` for the records,
    `freeze()` for footer + fsync + rename. Leaving a `with` block without
    `freeze()` (or with an exception) deletes the partial file."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        snapshot_id: SnapshotId,
        last_contained_log_timestamp_ms: int,
        config: SnapshotConfig | None = None,
        header_records: Sequence[SnapshotRecord] = (),
    ) -> None:
        """`header_records`: control records that go in the header's batch after the
        SnapshotHeader (KRaftVersion and Voters: the quorum's voters at the snapshot's end)."""
        if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"invalid snapshot id {snapshot_id}")
        self._directory = os.fspath(directory)
        self._snapshot_id = snapshot_id
        self._timestamp_ms = last_contained_log_timestamp_ms
        self._config = config or SnapshotConfig()
        self._path = snapshot_path(self._directory, snapshot_id)
        self._part_path = self._path + ".part"
        if os.path.exists(self._path):
            raise SnapshotExistsError(f"snapshot {self._path} already exists")
        # O_TRUNC: a `.part` of the same id can only be a dead attempt.
        self._fd: int | None = os.open(self._part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size_bytes = 0
        self._next_offset = 0
        self._pending: list[SnapshotRecord] = []
        self._pending_bytes = 0
        self._frozen = False
        try:
            header = SNAPSHOT_HEADER_RECORD.encode(
                SNAPSHOT_HEADER_VERSION,
                {"version": SNAPSHOT_HEADER_VERSION, "last_contained_log_timestamp": last_contained_log_timestamp_ms},
            )
            if any(record.control_type not in _INNER_CONTROL_TYPES for record in header_records):
                raise ValueError("only KRaftVersion and Voters records join the snapshot header")
            self._write_batch([SnapshotRecord(header, ControlRecordType.SNAPSHOT_HEADER), *header_records])
        except BaseException:
            self.abort()
            raise

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot_id

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def append(self, values: Iterable[bytes]) -> None:
        """Metadata record values (framed, as in the log), batched by size."""
        self.append_records(SnapshotRecord(value) for value in values)

    def append_records(self, records: Iterable[SnapshotRecord]) -> None:
        self._check_open()
        limit_bytes = self._config.max_batch_bytes - HEADER_BYTES
        for record in records:
            if record.control_type is not None:
                if record.control_type in (ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.SNAPSHOT_FOOTER):
                    raise ValueError("the writer adds the snapshot header and footer itself")
                if record.control_type not in _INNER_CONTROL_TYPES:
                    raise ValueError(f"control type {record.control_type} does not belong in a snapshot")
            size = _record_bound_bytes(record)
            if size > limit_bytes:
                raise ValueError(f"snapshot record of ~{size} bytes exceeds max_batch_bytes={self._config.max_batch_bytes}")
            # One control type per batch, as KRaft writes them; data records
            # share batches up to the byte and count bounds.
            if self._pending and (
                record.control_type != self._pending[0].control_type
                or self._pending_bytes + size > limit_bytes
                or len(self._pending) >= self._config.max_records_per_batch
            ):
                self._flush()
            self._pending.append(record)
            self._pending_bytes += size

    def freeze(self) -> SnapshotId:
        """Footer, fsync, rename into place, fsync the directory. Returns the id."""
        self._check_open()
        try:
            self._flush()
            footer = SNAPSHOT_FOOTER_RECORD.encode(SNAPSHOT_FOOTER_VERSION, {"version": SNAPSHOT_FOOTER_VERSION})
            self._write_batch([SnapshotRecord(footer, ControlRecordType.SNAPSHOT_FOOTER)])
            assert self._fd is not None
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            if os.path.exists(self._path):
                raise SnapshotExistsError(f"snapshot {self._path} appeared while it was being written")
            os.rename(self._part_path, self._path)
            _fsync_directory(self._directory)
        except BaseException:
            self.abort()
            raise
        self._frozen = True
        _log.info(
            Event.SNAPSHOT_WRITTEN,
            directory=self._directory,
            end_offset=self._snapshot_id.end_offset,
            epoch=self._snapshot_id.epoch,
            size_bytes=self._size_bytes,
            records=self._next_offset - 2,
        )
        return self._snapshot_id

    def abort(self) -> None:
        """Drops the partial file (idempotent; a no-op after `freeze`)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._frozen:
            try:
                os.unlink(self._part_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()

    def _check_open(self) -> None:
        if self._fd is None:
            raise ValueError(f"snapshot writer for {self._path} is closed")

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending, self._pending_bytes = self._pending, [], 0
            self._write_batch(pending)

    def _write_batch(self, records: Sequence[SnapshotRecord]) -> None:
        data = _encode_snapshot_batch(self._next_offset, self._snapshot_id.epoch, self._timestamp_ms, records)
        assert len(data) <= self._config.max_batch_bytes, (len(data), self._config.max_batch_bytes)
        assert self._fd is not None
        _pwrite_all(self._fd, data, self._size_bytes)
        self._size_bytes += len(data)
        self._next_offset += len(records)


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------


def parse_snapshot(data: bytes, snapshot_id: SnapshotId, source: str = "snapshot") -> SnapshotContents:
    """Verifies the bytes of a whole snapshot (module docstring) and returns its contents."""
    records: list[SnapshotRecord] = []
    header_records: list[SnapshotRecord] = []
    position = 0
    expected_offset = 0
    timestamp_ms: int | None = None
    footer_at: int | None = None
    batch_index = 0
    # Bounded: each round consumes one batch of at least HEADER_BYTES.
    while position < len(data):
        if footer_at is not None:
            raise CorruptSnapshotError(f"{source}: {len(data) - position} bytes after the SnapshotFooter at byte {footer_at}")
        try:
            batch, next_position = decode_batch(data, position, max_batch_bytes=len(data))
        except DecodeError as exc:
            raise CorruptSnapshotError(f"{source}: {exc}") from None
        where = f"{source}: batch at byte {position}"
        if batch.base_offset != expected_offset:
            raise CorruptSnapshotError(f"{where} has base offset {batch.base_offset}, expected {expected_offset}")
        if batch.leader_epoch != snapshot_id.epoch:
            raise CorruptSnapshotError(f"{where} has epoch {batch.leader_epoch}, the snapshot id says {snapshot_id.epoch}")
        if len(batch.records) != batch.last_offset_delta + 1:
            raise CorruptSnapshotError(f"{where} has gaps in its offsets")
        try:
            types = [control_record_type(record) if batch.is_control else None for record in batch.records]
        except DecodeError as exc:
            raise CorruptSnapshotError(f"{where}: {exc}") from None
        if batch_index == 0:
            if types[:1] != [ControlRecordType.SNAPSHOT_HEADER] or not set(types[1:]) <= _INNER_CONTROL_TYPES:
                raise CorruptSnapshotError(f"{source}: does not start with a SnapshotHeader control record (followed "
                                           "by nothing but KRaftVersion and Voters records in its batch)")
            header = _decode_control(SNAPSHOT_HEADER_RECORD, batch.records[0].value, where)
            timestamp_ms = header.last_contained_log_timestamp
            for record, control_type in zip(batch.records[1:], types[1:]):
                if record.value is None:
                    raise CorruptSnapshotError(f"{where}: record at offset {record.offset} has a null value")
                header_records.append(SnapshotRecord(record.value, control_type, record.headers))
        elif types == [ControlRecordType.SNAPSHOT_FOOTER]:
            _decode_control(SNAPSHOT_FOOTER_RECORD, batch.records[0].value, where)
            footer_at = position
        else:
            for record, control_type in zip(batch.records, types):
                if control_type is not None and control_type not in _INNER_CONTROL_TYPES:
                    raise CorruptSnapshotError(f"{where}: control record of type {control_type} inside the snapshot")
                if record.value is None:
                    raise CorruptSnapshotError(f"{where}: record at offset {record.offset} has a null value")
                records.append(SnapshotRecord(record.value, control_type, record.headers))
        expected_offset = batch.next_offset
        position = next_position
        batch_index += 1
    if batch_index == 0:
        raise CorruptSnapshotError(f"{source}: empty file")
    if footer_at is None:
        raise CorruptSnapshotError(f"{source}: no SnapshotFooter (the snapshot is incomplete)")
    assert timestamp_ms is not None
    return SnapshotContents(snapshot_id, timestamp_ms, tuple(records), len(data), tuple(header_records))


def _decode_control(message, value: bytes | None, where: str):
    if value is None:
        raise CorruptSnapshotError(f"{where}: {message.name} has a null value")
    try:
        decoded = message.decode(0, value)
    except DecodeError as exc:
        raise CorruptSnapshotError(f"{where}: {exc}") from None
    if decoded.version != 0:
        raise CorruptSnapshotError(f"{where}: {message.name} version {decoded.version}, only 0 is known")
    return decoded


def read_snapshot(path: str | os.PathLike[str], config: SnapshotConfig | None = None) -> SnapshotContents:
    """Reads and verifies the completed snapshot at `path`."""
    config = config or SnapshotConfig()
    path = os.fspath(path)
    snapshot_id = parse_snapshot_file_name(os.path.basename(path))
    if snapshot_id is None:
        raise CorruptSnapshotError(f"{path}: not a snapshot file name (<20-digit offset>-<10-digit epoch>.checkpoint)")
    with open(path, "rb") as file:
        data = file.read(config.max_snapshot_bytes + 1)
    if len(data) > config.max_snapshot_bytes:
        raise CorruptSnapshotError(f"{path}: larger than max_snapshot_bytes={config.max_snapshot_bytes}")
    return parse_snapshot(data, snapshot_id, path)


def latest_valid_snapshot(
    directory: str | os.PathLike[str], config: SnapshotConfig | None = None
) -> SnapshotContents | None:
    """The newest snapshot that verifies; corrupt ones are logged and skipped
    (left on disk for the operator)."""
    for snapshot_id in reversed(list_snapshots(directory)):
        try:
            return read_snapshot(snapshot_path(directory, snapshot_id), config)
        except CorruptSnapshotError as exc:
            _log.error(Event.SNAPSHOT_CORRUPT, end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch, error=str(exc))
    return None


# --------------------------------------------------------------------------
# Chunked transfer (FetchSnapshot)
# --------------------------------------------------------------------------


def snapshot_size_bytes(directory: str | os.PathLike[str], snapshot_id: SnapshotId) -> int:
    try:
        return os.stat(snapshot_path(directory, snapshot_id)).st_size
    except FileNotFoundError:
        raise UnknownSnapshotError(f"no snapshot {snapshot_id}") from None


def read_chunk(directory: str | os.PathLike[str], snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
    """Raw bytes [position, position + max_bytes) of a completed snapshot, for a
    FetchSnapshot response. Empty at the end. Unaligned to batches, as in Kafka."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    try:
        fd = os.open(snapshot_path(directory, snapshot_id), os.O_RDONLY)
    except FileNotFoundError:
        raise UnknownSnapshotError(f"no snapshot {snapshot_id}") from None
    try:
        size = os.fstat(fd).st_size
        if not 0 <= position <= size:
            raise SnapshotPositionError(f"position {position} outside snapshot {snapshot_id} of {size} bytes")
        wanted = min(max_bytes, size - position)
        chunks: list[bytes] = []
        read = 0
        # Bounded: each round reads at least one byte or stops.
        while read < wanted:
            chunk = os.pread(fd, wanted - read, position + read)
            if not chunk:
                break
            chunks.append(chunk)
            read += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class SnapshotReceiver:
    """Writes a snapshot fetched chunk by chunk from a leader. Chunks must come
    in order (`position` = bytes received so far); `finish()` verifies the whole
    file and only then renames it into place."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        snapshot_id: SnapshotId,
        size_bytes: int,
        config: SnapshotConfig | None = None,
    ) -> None:
        self._config = config or SnapshotConfig()
        if not 0 < size_bytes <= self._config.max_snapshot_bytes:
            raise ValueError(f"snapshot size {size_bytes} outside (0, {self._config.max_snapshot_bytes}]")
        self._directory = os.fspath(directory)
        self._snapshot_id = snapshot_id
        self._size_bytes = size_bytes
        self._path = snapshot_path(self._directory, snapshot_id)
        self._part_path = self._path + ".part"
        if os.path.exists(self._path):
            raise SnapshotExistsError(f"snapshot {self._path} already exists")
        self._fd: int | None = os.open(self._part_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._received_bytes = 0
        self._done = False

    @property
    def position(self) -> int:
        """Where the next chunk must start (the next FetchSnapshot position)."""
        return self._received_bytes

    @property
    def complete(self) -> bool:
        return self._received_bytes == self._size_bytes

    def write(self, position: int, data: bytes) -> None:
        if self._fd is None:
            raise ValueError(f"receiver for {self._path} is closed")
        if position != self._received_bytes:
            raise SnapshotPositionError(f"chunk at {position}, expected {self._received_bytes}")
        if self._received_bytes + len(data) > self._size_bytes:
            raise SnapshotPositionError(
                f"chunk of {len(data)} bytes at {position} overruns the announced size {self._size_bytes}"
            )
        _pwrite_all(self._fd, data, position)
        self._received_bytes += len(data)

    def finish(self) -> SnapshotContents:
        """Verifies, fsyncs, renames into place; returns the verified contents.
        A failed verification deletes the partial file and raises CorruptSnapshotError."""
        if self._fd is None:
            raise ValueError(f"receiver for {self._path} is closed")
        try:
            if not self.complete:
                raise CorruptSnapshotError(
                    f"{self._part_path}: received {self._received_bytes} of {self._size_bytes} bytes"
                )
            data = _read_all(self._fd, self._size_bytes)
            contents = parse_snapshot(data, self._snapshot_id, self._part_path)
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.rename(self._part_path, self._path)
            _fsync_directory(self._directory)
        except BaseException:
            self.abort()
            raise
        self._done = True
        _log.info(
            Event.SNAPSHOT_RECEIVED,
            directory=self._directory,
            end_offset=self._snapshot_id.end_offset,
            epoch=self._snapshot_id.epoch,
            size_bytes=self._size_bytes,
        )
        return contents

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._done:
            try:
                os.unlink(self._part_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> SnapshotReceiver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()


def _read_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    read = 0
    while read < size:
        chunk = os.pread(fd, size - read, read)
        if not chunk:
            raise CorruptSnapshotError(f"file shorter than {size} bytes")
        chunks.append(chunk)
        read += len(chunk)
    return b"".join(chunks)
