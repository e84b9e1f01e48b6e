"""The durable, append-only local copy of the __cluster_metadata log.

Owns: segment files (Kafka naming: 20-digit zero-padded base offset + `.log`,
plain concatenated record batches v2), crash recovery, the in-memory batch
index, and the leader-epoch cache (epoch -> first offset) that Raft's
divergence check needs.

Rules kept here:
- Durable before acknowledged: `append*` and `truncate_to` return only after
  the bytes are written and `os.fsync`ed; a new segment's directory entry is
  fsynced before data goes into it. Group commit is the caller's choice: all
  values of one `append` call become one batch and cost one fsync.
- A failed write or fsync poisons the log (`LogFailedError` from then on).
  After a failed fsync the kernel may have dropped the dirty pages and a retry
  can "succeed" without the data, so the only safe continuation is to reopen
  and let recovery decide what is on disk.
- Recovery verifies every batch (CRC, offsets contiguous across segments,
  epochs non-decreasing) and tells a torn write from corruption with the
  recovery point R (`recovery-point` file, see recovery_point.py: every batch
  below offset R was fsynced). A bad batch at the end of the last segment,
  with nothing valid after it, whose base offset is >= R is a torn write of
  an append that was never acknowledged: it is cut off, fsynced and logged
  (`storage.torn_tail_truncated`). A bad batch below R, a log that ends
  before R, and anything else that does not verify is `CorruptLogError`
  (naming the file, byte position and base offset): truncating there could
  drop acknowledged data, so the node refuses to start and the operator runs
  `kraftwerk storage recover` (`MetadataLog.repair`). A log without the file
  (written before it existed), or whose slots are both torn, is recovered by
  the torn-tail rule alone, as before, and gets the file on open.
- The recovery point is never ahead of the durable data:
  - raised (a pwrite, no fsync: the commit path stays one fsync) only after
    the data fsync in `_write`, to the new end offset;
  - lowered durably (both slots written and fsynced) *before* any data goes:
    `truncate_to` lowers it to the new end first, `reset_to` to the reset
    offset first (and raises it to that offset once the reset is done);
    `delete_before` leaves the end alone and so the point too; a reset that
    recovery finishes discarded the log on purpose, so the point is not
    checked against it;
  - set to the end on every open, after recovery fsynced the last segment
    (a process crash may leave unfsynced but complete batches in the page
    cache; they are made durable before they count);
  - fsynced on its own at segment roll and close; a raise the kernel has not
    written back when the power goes only makes recovery more lenient.
  Its I/O goes to `os` directly, not through `file_ops`: a failure there is
  a failure of the write path all the same (the log is poisoned), and the
  fault-injection layer keeps counting only the data's own system calls.
- `repair` (the node stopped, the lock held throughout) lowers the point to
  the last good batch's end, deletes later segments newest first, cuts the
  damaged one and opens the log as a node would; a cut below the log start
  becomes a pending reset to it, which that open finishes.
- Synchronous plain-fd I/O (pread/pwrite, no buffered file objects) and no
  thread-affine state: the trio shell calls each method through
  `trio.to_thread.run_sync`, possibly on a different worker thread each time.
  A plain `threading.Lock` serialises calls; results are materialised before
  the lock is released, so no iterator outlives it.
- Bounded: a batch is at most `max_batch_bytes` and `max_records_per_batch`;
  a read returns at most `max_bytes` (at least one whole batch, so a reader
  always makes progress).
- The log start offset is logical, as in Kafka: after a snapshot it is the
  snapshot's end offset, which need not be a segment boundary, and an empty
  log that starts at a follower's installed snapshot must still know that
  snapshot's epoch. Segment names cannot carry either, so both live in a
  small `log-start-offset` file (JSON, replaced atomically: temp file, fsync,
  rename, fsync directory). The file is the commit point: it is written
  *before* any segment is deleted, and recovery finishes a deletion or reset
  that a crash interrupted. Without the file the log starts at its first
  segment's base offset (0 for a log that never lost a prefix).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol

from protocol.errors import DecodeError
from protocol.record_batch import (
    DEFAULT_MAX_BATCH_BYTES,
    MAGIC,
    MAGIC_OFFSET,
    RecordBatch,
    decode_batch,
    decode_batches,
    encode_batch,
    encode_record_batch,
    peek_batch_length,
)
from server.observability import Event, get_logger
from server.values import EpochEndOffset, EpochEntry, LeaderEpoch, Offset, end_offset_for_epoch_in
from server.storage.recovery_point import (
    RECOVERY_POINT_FILE_NAME,
    RecoveryPoint,
    RecoveryPointFile,
    lower_recovery_point,
    read_recovery_point,
)

_log = get_logger("storage.log")

SEGMENT_SUFFIX = ".log"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
LOCK_FILE_NAME = ".lock"
LOG_START_FILE_NAME = "log-start-offset"
_LOG_START_VERSION = 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    # Roll to a new segment once the active one would pass this size. Segments
    # are the unit of future snapshot-based deletion, so small is fine.
    segment_bytes: int = 1024 * 1024
    # KRaft's own cap on a batch (KafkaRaftClient MAX_BATCH_SIZE_BYTES).
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    # The controller's cap on records per batch (QuorumController MAX_RECORDS_PER_BATCH).
    max_records_per_batch: int = 10_000
    # What `read` returns when the caller gives no `max_bytes`.
    default_read_bytes: int = DEFAULT_MAX_BATCH_BYTES

    def __post_init__(self) -> None:
        for name in ("segment_bytes", "max_batch_bytes", "max_records_per_batch", "default_read_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"LogConfig.{name} must be positive")


# The way out an operator is told about when the log does not verify.
RECOVER_HINT = (
    "run `kraftwerk storage recover --config FILE` to truncate the log to the last good batch "
    "(in a quorum the node then refetches the rest from the leader; a single controller loses those records)"
)


class CorruptLogError(Exception):
    """The on-disk log does not verify somewhere recovery must not truncate.

    When the damage has a place, `path`, `position` (byte) and `offset` (the
    base offset the bad batch has or should have) say where the last good
    batch ends; `MetadataLog.repair` cuts there. They are None otherwise.
    """

    def __init__(
        self, message: str, *, path: str | None = None, position: int | None = None, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.position = position
        self.offset = offset


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What `MetadataLog.repair` found and did (or would do, without `apply`)."""

    directory: str
    # The CorruptLogError message recovery gave, or None if the log was fine.
    problem: str | None
    # The log keeps offsets below this (the last good batch's end).
    cut_offset: int | None = None
    # The log had been flushed up to here: at least [cut_offset, this) is lost.
    recovery_point: int | None = None
    removed_bytes: int = 0
    # Segment files deleted whole, and the one cut short (with its new size).
    removed_segments: tuple[str, ...] = ()
    cut_segment: str | None = None
    cut_position: int | None = None
    # The cut fell below the log start (a snapshot's end): the log restarts empty there.
    reset_to_start: int | None = None
    applied: bool = False
    end_offset: int | None = None


class LogFailedError(Exception):
    """An earlier write or fsync failed; the log must be closed and reopened."""


class LogClosedError(Exception):
    """The log was used after `close()`."""


class OffsetOutOfRangeError(ValueError):
    """A read or truncation named an offset outside [start_offset, end_offset]."""


class BatchRejectedError(ValueError):
    """An append broke a bound or an ordering rule (size, count, offsets, epochs)."""


@dataclass(slots=True)
class _Segment:
    base_offset: int
    path: str
    size_bytes: int = 0
    next_offset: int = 0
    # One entry per batch, in file order: its base offset and byte position.
    # array('q') keeps this at 16 bytes a batch instead of ~100 for tuples.
    batch_offsets: array = field(default_factory=lambda: array("q"))
    batch_positions: array = field(default_factory=lambda: array("q"))


class _LogStart(NamedTuple):
    """What the `log-start-offset` file records."""

    start_offset: int
    # Epoch of the record at start_offset - 1 (the snapshot's epoch), so an
    # empty log still reports the right last epoch.
    epoch: int
    # True only while `reset_to` runs: recovery then finishes the reset.
    reset_pending: bool = False


class _PendingBatch(NamedTuple):
    base_offset: int
    next_offset: int
    leader_epoch: int
    data: bytes


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def _lock_directory(directory: str) -> int:
    """Takes the log's exclusive advisory lock; returns its fd (closing it unlocks).

    Two processes appending to one log would interleave batches with clashing
    offsets. The kernel drops the lock when the process dies, so a kill -9
    never leaves a stale lock behind.
    """
    lock_fd = os.open(os.path.join(directory, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise RuntimeError(f"metadata log {directory} is locked by another process") from None
    return lock_fd


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileOps(Protocol):
    """The write-path system calls the log makes (`os` itself by default). Tests
    pass a layer that fails them on demand (ENOSPC, EIO) to check what a node
    does when its disk fails; reads and recovery use `os` directly."""

    def pwrite(self, fd: int, data: bytes | memoryview, position: int, /) -> int: ...

    def fsync(self, fd: int, /) -> None: ...

    def ftruncate(self, fd: int, length: int, /) -> None: ...


def _truncate_file(path: str, size: int) -> None:
    """Cuts a segment file to `size` bytes, durably (recovery and repair: the log is not open)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, position: int, file_ops: FileOps = os) -> None:
    view = memoryview(data)
    written = 0
    # Each round writes at least one byte or raises, so this ends within
    # len(data) rounds.
    while written < len(view):
        count = file_ops.pwrite(fd, view[written:], position + written)
        if count <= 0:
            raise OSError(f"pwrite wrote {count} bytes")
        written += count


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = os.pread(fd, remaining, position + size - remaining)
        if not chunk:
            raise CorruptLogError(f"segment shorter than its index: wanted {size} bytes at {position}")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class MetadataLog:
    """See the module docstring. Create with `MetadataLog.open(directory)`."""

    def __init__(self, directory: str, config: LogConfig, lock_fd: int, file_ops: FileOps | None = None) -> None:
        # Use `open`; the constructor only sets up empty state.
        self._directory = directory
        self._config = config
        self._file_ops: FileOps = os if file_ops is None else file_ops
        self._lock_fd: int | None = lock_fd
        self._mutex = threading.Lock()
        self._segments: list[_Segment] = []
        self._active_fd: int | None = None
        self._epochs: list[EpochEntry] = []
        self._failure: BaseException | None = None
        self._start_offset = 0
        # Epoch of the record just before the log start, when the
        # log-start-offset file says so (None: unknown, treated as 0).
        self._epoch_before_start: int | None = None
        # Open once recovery succeeded; see recovery_point.py.
        self._recovery_point: RecoveryPointFile | None = None
        # What the file said at start-up (None: no file, or no slot verified).
        self._recorded_point: RecoveryPoint | None = None

    # ------------------------------------------------------------------
    # Opening and recovery
    # ------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str], config: LogConfig | None = None,
             file_ops: FileOps | None = None) -> MetadataLog:
        """Opens (creating if needed) the log in `directory` and recovers it.
        `file_ops` carries the write path's system calls (default: `os`)."""
        config = config or LogConfig()
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            _fsync_directory(os.path.dirname(os.path.abspath(directory)))
        log = cls(directory, config, _lock_directory(directory), file_ops)
        try:
            log._recover()
        except BaseException:
            log._close_fds()
            raise
        return log

    @classmethod
    def repair(cls, directory: str | os.PathLike[str], config: LogConfig | None = None, *,
               apply: bool) -> RepairReport:
        """Truncates a log that recovery refuses to its last good batch (what
        `kraftwerk storage recover` runs; the node must be stopped).

        Without `apply` it only says what it would remove. With it, the
        recovery point goes down first (durably), then every segment after the
        damaged one is deleted (newest first) and the damaged one is cut at the
        end of its last good batch; the log is then opened as a node would, so
        the report's `end_offset` is what the node starts with. A cut below the
        log start (a snapshot's end) resets the log to start empty there.
        A `CorruptLogError` that names no place to cut is raised as is.
        """
        config = config or LogConfig()
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"metadata log directory {directory} does not exist")
        lock_fd = _lock_directory(directory)
        try:
            damaged = cls(directory, config, lock_fd)
            try:
                damaged._recover()
            except CorruptLogError as exc:
                if exc.path is None:
                    raise
                plan = damaged._plan_repair(exc)
            else:
                return RepairReport(directory, None, end_offset=damaged.end_offset)
            finally:
                damaged._lock_fd = None  # the lock stays held for the whole repair
                damaged._close_fds()
            if not apply:
                return plan
            repaired = cls(directory, config, lock_fd)
            repaired._apply_repair(plan)
            _log.warning(Event.STORAGE_RECOVERED, directory=directory, cut_offset=plan.cut_offset,
                         recovery_point=plan.recovery_point, bytes_removed=plan.removed_bytes,
                         segments_removed=len(plan.removed_segments), cut_segment=plan.cut_segment,
                         cut_position=plan.cut_position, reset_to_start=plan.reset_to_start,
                         problem=plan.problem)
            try:
                repaired._recover()
                return replace(plan, applied=True, end_offset=repaired.end_offset)
            finally:
                repaired._lock_fd = None
                repaired._close_fds()
        finally:
            os.close(lock_fd)

    def _apply_repair(self, plan: RepairReport) -> None:
        """Carries out `repair`'s plan in an order a crash cannot turn into a
        worse log: the recovery point first, then the newest data first."""
        assert plan.cut_offset is not None
        new_end = plan.reset_to_start if plan.reset_to_start is not None else plan.cut_offset
        lower_recovery_point(self._directory, new_end)
        if plan.reset_to_start is not None:
            # Recorded as a pending reset: the recovery that follows finishes it
            # exactly as it finishes a `reset_to` that a crash interrupted.
            recorded = self._read_log_start()
            assert recorded is not None
            self._write_log_start(recorded._replace(reset_pending=True))
            return
        for path in reversed(plan.removed_segments):
            os.unlink(path)
        if plan.removed_segments:
            _fsync_directory(self._directory)
        if plan.cut_segment is not None:
            assert plan.cut_position is not None
            _truncate_file(plan.cut_segment, plan.cut_position)

    def _plan_repair(self, problem: CorruptLogError) -> RepairReport:
        assert problem.path is not None and problem.position is not None and problem.offset is not None
        names = sorted(name for name in os.listdir(self._directory) if _SEGMENT_NAME.match(name))
        damaged_name = os.path.basename(problem.path)
        doomed = [os.path.join(self._directory, name) for name in names if name > damaged_name]
        cut_segment: str | None = problem.path
        cut_position: int | None = problem.position
        if problem.position == 0 and names and damaged_name != names[0]:
            doomed.insert(0, problem.path)  # nothing good in it: it goes whole
            cut_segment = cut_position = None
        removed_bytes = sum(os.path.getsize(path) for path in doomed)
        if cut_segment is not None:
            removed_bytes += max(os.path.getsize(cut_segment) - problem.position, 0)
        recorded = self._read_log_start()
        reset_to_start = None
        if recorded is not None and recorded.start_offset > problem.offset:
            # The good data ends below the snapshot the log starts at: keep
            # the snapshot, start the log empty at its end.
            reset_to_start = recorded.start_offset
        return RepairReport(
            directory=self._directory,
            problem=str(problem),
            cut_offset=problem.offset,
            recovery_point=self._recorded_point.offset if self._recorded_point is not None else None,
            removed_bytes=removed_bytes,
            removed_segments=tuple(doomed),
            cut_segment=cut_segment,
            cut_position=cut_position,
            reset_to_start=reset_to_start,
            end_offset=reset_to_start if reset_to_start is not None else problem.offset,
        )

    def _recover(self) -> None:
        stored_point = read_recovery_point(self._directory)
        self._recorded_point = stored_point.point
        if stored_point.exists and stored_point.point is None:
            # Both slots torn: only a crash during two writes can do that. The
            # point is unknown, and assuming one could call a torn write corruption.
            _log.warning(Event.STORAGE_RECOVERY_POINT_UNREADABLE, directory=self._directory,
                         file=RECOVERY_POINT_FILE_NAME)
        recorded = self._read_log_start()
        if recorded is not None and recorded.reset_pending:
            self._finish_reset(recorded)
            recorded = recorded._replace(reset_pending=False)
            # The whole log was discarded on purpose: nothing the point
            # vouched for is meant to be there any more.
            self._recorded_point = None
        names = sorted(name for name in os.listdir(self._directory) if _SEGMENT_NAME.match(name))
        if not names:
            base_offset = recorded.start_offset if recorded is not None else 0
            self._segments = [self._create_segment(base_offset)]
        else:
            expected_offset: int | None = None
            for index, name in enumerate(names):
                base_offset = int(name[:20])
                if expected_offset is not None and base_offset != expected_offset:
                    path = os.path.join(self._directory, name)
                    raise CorruptLogError(
                        f"{path}: segment starts at offset {base_offset}, but the previous segment ends at "
                        f"{expected_offset} (missing or overlapping data); {RECOVER_HINT}",
                        path=path,
                        position=0,
                        offset=expected_offset,
                    )
                segment = self._recover_segment(base_offset, name, is_last=index == len(names) - 1)
                self._segments.append(segment)
                expected_offset = segment.next_offset
        active = self._segments[-1]
        if self._recorded_point is not None and self.end_offset < self._recorded_point.offset:
            raise CorruptLogError(
                f"{active.path}: the log ends at offset {self.end_offset} (byte {active.size_bytes} of its last "
                f"segment), but it had been flushed up to offset {self._recorded_point.offset} "
                f"({RECOVERY_POINT_FILE_NAME}): acknowledged data is missing; {RECOVER_HINT}",
                path=active.path,
                position=active.size_bytes,
                offset=self.end_offset,
            )
        self._apply_log_start(recorded)
        self._active_fd = os.open(active.path, os.O_RDWR)
        # Whatever recovery accepted becomes durable before the recovery point
        # counts it: a killed process can leave complete, never-fsynced batches
        # in the page cache. Earlier segments were fsynced before each roll.
        os.fsync(self._active_fd)
        self._recovery_point = RecoveryPointFile.open(self._directory, self.end_offset, self._recorded_point)
        _log.info(
            Event.STORAGE_LOG_OPENED,
            directory=self._directory,
            segments=len(self._segments),
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            last_epoch=self.last_epoch,
            recovery_point=self._recorded_point.offset if self._recorded_point is not None else None,
        )

    def _recover_segment(self, base_offset: int, name: str, *, is_last: bool) -> _Segment:
        path = os.path.join(self._directory, name)
        with open(path, "rb") as file:
            data = file.read()
        segment = _Segment(base_offset=base_offset, path=path, next_offset=base_offset)
        # Recovery accepts batches up to the larger of the configured and the
        # protocol cap, so lowering max_batch_bytes never makes old data unreadable.
        cap = max(self._config.max_batch_bytes, DEFAULT_MAX_BATCH_BYTES)
        position = 0
        while position < len(data):
            try:
                batch, next_position = decode_batch(data, position, max_batch_bytes=cap)
            except DecodeError as exc:
                self._handle_bad_batch(segment, data, position, str(exc), is_last=is_last)
                break
            self._check_order(path, position, batch, segment.next_offset)
            segment.batch_offsets.append(batch.base_offset)
            segment.batch_positions.append(position)
            segment.next_offset = batch.next_offset
            self._note_epoch(batch.leader_epoch, batch.base_offset)
            position = next_position
        segment.size_bytes = position
        return segment

    def _check_order(self, path: str, position: int, batch: RecordBatch, expected_offset: int) -> None:
        # The CRC does not cover baseOffset or partitionLeaderEpoch, so these
        # checks are the only guard on them.
        if batch.base_offset != expected_offset:
            raise CorruptLogError(
                f"{path}: batch at byte {position} has base offset {batch.base_offset}, expected {expected_offset}; "
                f"{RECOVER_HINT}",
                path=path,
                position=position,
                offset=expected_offset,
            )
        if self._epochs and batch.leader_epoch < self._epochs[-1].epoch:
            raise CorruptLogError(
                f"{path}: batch at byte {position} (base offset {batch.base_offset}) has leader epoch "
                f"{batch.leader_epoch} after epoch {self._epochs[-1].epoch}; {RECOVER_HINT}",
                path=path,
                position=position,
                offset=expected_offset,
            )

    def _handle_bad_batch(self, segment: _Segment, data: bytes, position: int, reason: str, *, is_last: bool) -> None:
        # The bad batch's own header may be the damaged part, so it is named
        # by the base offset it must have: the end of the good batches before it.
        base_offset = segment.next_offset
        where = dict(path=segment.path, position=position, offset=base_offset)
        if not is_last:
            raise CorruptLogError(
                f"{segment.path}: the record batch at byte {position} of {len(data)}, base offset {base_offset}, "
                f"does not verify ({reason}); later segments exist, so this is not a torn tail; {RECOVER_HINT}",
                **where,
            )
        point = self._recorded_point
        if point is not None and base_offset < point.offset:
            raise CorruptLogError(
                f"{segment.path}: the record batch at byte {position} of {len(data)}, base offset {base_offset}, "
                f"does not verify ({reason}); the log had been flushed up to offset {point.offset} "
                f"({RECOVERY_POINT_FILE_NAME}), so this batch was durable and possibly acknowledged: "
                f"corruption, not a torn write; {RECOVER_HINT}",
                **where,
            )
        valid_at = _find_valid_batch_after(data, position, segment.next_offset)
        if valid_at is not None:
            raise CorruptLogError(
                f"{segment.path}: the record batch at byte {position}, base offset {base_offset}, does not verify "
                f"({reason}) but is followed by a valid batch at byte {valid_at}; refusing to truncate data "
                f"that may have been acknowledged; {RECOVER_HINT}",
                **where,
            )
        removed_bytes = len(data) - position
        _truncate_file(segment.path, position)
        _log.warning(
            Event.STORAGE_TORN_TAIL_TRUNCATED,
            segment=segment.path,
            position=position,
            bytes_removed=removed_bytes,
            end_offset=segment.next_offset,
            reason=reason,
        )

    def _note_epoch(self, leader_epoch: int, base_offset: int) -> None:
        if not self._epochs or leader_epoch > self._epochs[-1].epoch:
            self._epochs.append(EpochEntry(leader_epoch, base_offset))

    def _create_segment(self, base_offset: int) -> _Segment:
        segment = _Segment(
            base_offset=base_offset,
            path=os.path.join(self._directory, segment_file_name(base_offset)),
            next_offset=base_offset,
        )
        fd = os.open(segment.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        _fsync_directory(self._directory)
        return segment

    # ---- the log-start-offset file -------------------------------------

    def _log_start_path(self) -> str:
        return os.path.join(self._directory, LOG_START_FILE_NAME)

    def _read_log_start(self) -> _LogStart | None:
        path = self._log_start_path()
        temporary = path + ".tmp"
        if os.path.exists(temporary):
            # A replacement that never got renamed: the old file (or none) stands.
            os.unlink(temporary)
        try:
            with open(path, "rb") as file:
                raw = file.read(4096)
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
            if data["version"] != _LOG_START_VERSION:
                raise ValueError(f"unknown version {data['version']}")
            recorded = _LogStart(int(data["start_offset"]), int(data["epoch"]), bool(data.get("reset_pending", False)))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptLogError(f"{path} is unreadable ({exc!r}); the log start offset is unknown") from None
        if recorded.start_offset < 0 or recorded.epoch < 0:
            raise CorruptLogError(f"{path}: negative start offset or epoch in {recorded}")
        return recorded

    def _write_log_start(self, recorded: _LogStart) -> None:
        path = self._log_start_path()
        temporary = path + ".tmp"
        data = json.dumps(
            {
                "version": _LOG_START_VERSION,
                "start_offset": recorded.start_offset,
                "epoch": recorded.epoch,
                "reset_pending": recorded.reset_pending,
            }
        ).encode()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        _fsync_directory(self._directory)

    def _finish_reset(self, recorded: _LogStart) -> None:
        """Completes a `reset_to` a crash interrupted: no segment but an empty one
        at the recorded start may survive."""
        names = sorted(name for name in os.listdir(self._directory) if _SEGMENT_NAME.match(name))
        for name in names:
            os.unlink(os.path.join(self._directory, name))
        _fsync_directory(self._directory)
        self._create_segment(recorded.start_offset)
        self._write_log_start(recorded._replace(reset_pending=False))
        _log.warning(
            Event.STORAGE_TRUNCATED,
            directory=self._directory,
            reason="interrupted reset finished at start-up",
            start_offset=recorded.start_offset,
            segments_removed=len(names),
        )

    def _apply_log_start(self, recorded: _LogStart | None) -> None:
        first_base = self._segments[0].base_offset
        if recorded is None:
            self._start_offset = first_base
            return
        if recorded.start_offset < first_base:
            raise CorruptLogError(
                f"{self._log_start_path()} says the log starts at {recorded.start_offset}, but the first "
                f"segment starts at {first_base}: segments are missing"
            )
        if recorded.start_offset > self.end_offset:
            raise CorruptLogError(
                f"{self._log_start_path()} says the log starts at {recorded.start_offset}, beyond its end "
                f"{self.end_offset}: acknowledged data is missing"
            )
        self._start_offset = recorded.start_offset
        self._epoch_before_start = recorded.epoch
        # Finishes a `delete_before` that a crash cut short.
        self._unlink_segments_below(recorded.start_offset)
        self._clip_epochs()

    def _unlink_segments_below(self, offset: int) -> int:
        """Deletes every segment (never the last) wholly below `offset`, oldest
        first so that a crash leaves a gap-free suffix. Returns how many."""
        count = 0
        # Bounded by the number of segments.
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            os.unlink(self._segments[0].path)
            del self._segments[0]
            count += 1
        if count:
            _fsync_directory(self._directory)
        return count

    def _clip_epochs(self) -> None:
        """Drops epoch entries below the log start; the epoch in force at the start
        becomes an entry at the start (what recovery of the remaining batches gives)."""
        start = self._start_offset
        in_force: EpochEntry | None = None
        kept: list[EpochEntry] = []
        for entry in self._epochs:
            if entry.start_offset <= start:
                in_force = entry
            else:
                kept.append(entry)
        if in_force is not None and start < self.end_offset:
            kept.insert(0, EpochEntry(in_force.epoch, start))
        self._epochs = kept

    # ------------------------------------------------------------------
    # State
    # ------------------------------------------------------------------

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def file_ops(self) -> FileOps:
        """The write path's system calls (`os` unless a test injected faults)."""
        return self._file_ops

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def start_offset(self) -> Offset:
        """The first offset the log holds (0 until a snapshot moves it; see `delete_before`)."""
        return self._start_offset

    @property
    def epoch_before_start(self) -> LeaderEpoch | None:
        """Epoch of the record at start_offset - 1 (the snapshot's), if recorded."""
        return self._epoch_before_start

    @property
    def end_offset(self) -> Offset:
        """The offset the next appended record gets (last offset + 1)."""
        return self._segments[-1].next_offset

    @property
    def last_epoch(self) -> LeaderEpoch:
        """Leader epoch of the last batch. An empty log reports the epoch recorded
        for its start (a snapshot's epoch after `reset_to`), else 0 (as Kafka's
        Raft treats a fresh log)."""
        if self._epochs:
            return self._epochs[-1].epoch
        return self._epoch_before_start or 0

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    def segment_base_offsets(self) -> list[Offset]:
        with self._mutex:
            return [segment.base_offset for segment in self._segments]

    def epoch_start_offsets(self) -> list[EpochEntry]:
        """(epoch, first offset of that epoch), ascending; only epochs that have batches."""
        with self._mutex:
            return list(self._epochs)

    def end_offset_for_epoch(self, epoch: LeaderEpoch) -> EpochEndOffset | None:
        """The largest epoch <= `epoch` and the offset where it ends in this log:
        Raft's divergence question, answered by `server.values.end_offset_for_epoch_in`.
        An empty log whose start epoch is recorded (after `reset_to`) answers
        as if that epoch began at the start offset.
        """
        with self._mutex:
            epochs = self._epochs
            if not epochs and self._epoch_before_start is not None:
                epochs = [EpochEntry(self._epoch_before_start, self._start_offset)]
            return end_offset_for_epoch_in(epochs, self.end_offset, epoch)

    # ------------------------------------------------------------------
    # Appending
    # ------------------------------------------------------------------

    def append(
        self,
        values: Sequence[bytes],
        leader_epoch: LeaderEpoch,
        timestamp_ms: int,
        control_type: int | None = None,
    ) -> tuple[Offset, Offset]:
        """Writes `values` as one batch, fsyncs, returns (base_offset, last_offset)."""
        if not values:
            raise BatchRejectedError("append needs at least one value")
        if len(values) > self._config.max_records_per_batch:
            raise BatchRejectedError(
                f"{len(values)} records exceed max_records_per_batch={self._config.max_records_per_batch}"
            )
        with self._mutex:
            self._check_usable()
            self._check_epoch(leader_epoch, self.last_epoch)
            base_offset = self.end_offset
            data = encode_batch(base_offset, leader_epoch, values, timestamp_ms, control_type)
            self._check_size(len(data))
            self._write([_PendingBatch(base_offset, base_offset + len(values), leader_epoch, data)])
            return base_offset, base_offset + len(values) - 1

    def append_raw(self, data: bytes | bytearray | memoryview) -> tuple[Offset, Offset]:
        """Appends complete, already-encoded batches (e.g. from a leader's Fetch
        response, partial tail already dropped). Every batch is verified (CRC,
        bounds), must continue at `end_offset` with no gap, and must not lower
        the epoch. All of them are written with one fsync per touched segment.
        Returns (first base offset, last offset).
        """
        try:
            batches = decode_batches(data, max_batch_bytes=self._config.max_batch_bytes)
        except DecodeError as exc:
            raise BatchRejectedError(f"append_raw: {exc}") from None
        view = memoryview(data)
        pending: list[_PendingBatch] = []
        position = 0
        for batch in batches:
            size = peek_batch_length(view, position, max_batch_bytes=self._config.max_batch_bytes)
            assert size is not None  # decode_batches just read it
            pending.append(
                _PendingBatch(batch.base_offset, batch.next_offset, batch.leader_epoch, bytes(view[position : position + size]))
            )
            position += size
        return self._append_pending(pending, [len(batch.records) for batch in batches])

    def append_batches(self, batches: Iterable[RecordBatch]) -> tuple[Offset, Offset]:
        """Like `append_raw`, for decoded batches (re-encoded byte for byte)."""
        batch_list = list(batches)
        pending = [
            _PendingBatch(batch.base_offset, batch.next_offset, batch.leader_epoch, encode_record_batch(batch))
            for batch in batch_list
        ]
        return self._append_pending(pending, [len(batch.records) for batch in batch_list])

    def append_verified(self, batches: Sequence[tuple[Offset, Offset, int, int, bytes]]) -> tuple[Offset, Offset]:
        """Like `append_raw`, for batches whose bytes were verified whole already (decoded
        by `decode_batch`: a follower's fetched batches) or encoded by this process (a
        leader's own): each is (base offset, next offset, leader epoch, record count,
        bytes). The log's own checks (continuity, epoch, size, records per batch) still
        apply; the bytes are not decoded a second time (on a leader that decode ran in
        the writer thread, holding the GIL against the event loop)."""
        pending = [_PendingBatch(base, end, epoch, data) for base, end, epoch, _, data in batches]
        return self._append_pending(pending, [count for _, _, _, count, _ in batches])

    def _append_pending(self, pending: list[_PendingBatch], record_counts: Sequence[int]) -> tuple[int, int]:
        if not pending:
            raise BatchRejectedError("no batches to append")
        with self._mutex:
            self._check_usable()
            expected_offset = self.end_offset
            epoch = self.last_epoch
            for item, count in zip(pending, record_counts):
                self._check_size(len(item.data))
                if count > self._config.max_records_per_batch:
                    raise BatchRejectedError(
                        f"batch at offset {item.base_offset} has {count} records, "
                        f"above max_records_per_batch={self._config.max_records_per_batch}"
                    )
                if item.base_offset != expected_offset:
                    raise BatchRejectedError(
                        f"batch base offset {item.base_offset} does not continue the log at {expected_offset}"
                    )
                self._check_epoch(item.leader_epoch, epoch)
                expected_offset = item.next_offset
                epoch = item.leader_epoch
            self._write(pending)
            return pending[0].base_offset, pending[-1].next_offset - 1

    def _check_usable(self) -> None:
        if self._lock_fd is None:
            raise LogClosedError(f"metadata log {self._directory} is closed")
        if self._failure is not None:
            raise LogFailedError(
                f"metadata log {self._directory} failed earlier ({self._failure!r}); reopen it"
            ) from self._failure

    def _check_epoch(self, leader_epoch: int, last_epoch: int) -> None:
        if leader_epoch < 0:
            raise BatchRejectedError(f"leader epoch {leader_epoch} is negative")
        if leader_epoch < last_epoch:
            raise BatchRejectedError(f"leader epoch {leader_epoch} is below the log's last epoch {last_epoch}")

    def _check_size(self, size_bytes: int) -> None:
        if size_bytes > self._config.max_batch_bytes:
            raise BatchRejectedError(
                f"batch of {size_bytes} bytes exceeds max_batch_bytes={self._config.max_batch_bytes}"
            )

    def _write(self, pending: list[_PendingBatch]) -> None:
        """Writes batches (rolling segments as needed), fsyncs, then updates the index.

        The in-memory state changes only after the fsync, so a reader never
        sees data that is not durable yet.
        """
        try:
            index = 0
            # Bounded: every round either rolls (at most once per batch) or
            # consumes at least one batch.
            while index < len(pending):
                active = self._segments[-1]
                if active.size_bytes > 0 and active.size_bytes + len(pending[index].data) > self._config.segment_bytes:
                    self._roll(pending[index].base_offset)
                    active = self._segments[-1]
                chunk = [pending[index]]
                chunk_bytes = active.size_bytes + len(pending[index].data)
                index += 1
                while index < len(pending) and chunk_bytes + len(pending[index].data) <= self._config.segment_bytes:
                    chunk.append(pending[index])
                    chunk_bytes += len(pending[index].data)
                    index += 1
                assert self._active_fd is not None
                _pwrite_all(self._active_fd, b"".join(item.data for item in chunk), active.size_bytes,
                            self._file_ops)
                self._file_ops.fsync(self._active_fd)
                for item in chunk:
                    active.batch_offsets.append(item.base_offset)
                    active.batch_positions.append(active.size_bytes)
                    active.size_bytes += len(item.data)
                    active.next_offset = item.next_offset
                    self._note_epoch(item.leader_epoch, item.base_offset)
            # Only now, after the data fsync, may the recovery point count
            # these batches (a pwrite; see recovery_point.py for why no fsync).
            assert self._recovery_point is not None
            self._recovery_point.advance(self.end_offset)
        except OSError as exc:
            self._failure = exc
            _log.error(Event.STORAGE_WRITE_FAILED, directory=self._directory, error=repr(exc))
            raise

    def _roll(self, base_offset: int) -> None:
        path = os.path.join(self._directory, segment_file_name(base_offset))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            # The directory entry must be durable before any acknowledged data
            # lives in the file, or a crash could lose the whole segment.
            _fsync_directory(self._directory)
            # A roll is rare and already pays for an fsync: bound how far the
            # recovery point's unfsynced raises can lag here.
            assert self._recovery_point is not None
            self._recovery_point.sync()
        except BaseException:
            os.close(fd)
            raise
        assert self._active_fd is not None
        os.close(self._active_fd)
        self._active_fd = fd
        self._segments.append(_Segment(base_offset=base_offset, path=path, next_offset=base_offset))
        _log.info(Event.STORAGE_SEGMENT_ROLLED, segment=path, base_offset=base_offset)

    # ------------------------------------------------------------------
    # Reading
    # ------------------------------------------------------------------

    def read(self, start_offset: Offset, max_bytes: int | None = None) -> list[RecordBatch]:
        """Verified batches from the one containing `start_offset` onwards.

        The first batch may begin before `start_offset` (batches are never
        split). At most `max_bytes` (default `config.default_read_bytes`) are
        returned, but always at least one batch if any exist.
        """
        return decode_batches(self.read_raw(start_offset, max_bytes), max_batch_bytes=2**31)

    def read_raw(self, start_offset: Offset, max_bytes: int | None = None) -> bytes:
        """Whole batches as stored, for serving Fetch without re-encoding."""
        budget = self._config.default_read_bytes if max_bytes is None else max_bytes
        with self._mutex:
            self._check_usable()
            if not self.start_offset <= start_offset <= self.end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} outside the log [{self.start_offset}, {self.end_offset}]"
                )
            if start_offset == self.end_offset:
                return b""
            segment_index = bisect_right([segment.base_offset for segment in self._segments], start_offset) - 1
            chunks: list[bytes] = []
            read_bytes = 0
            # Bounded by the number of segments.
            for segment in self._segments[segment_index:]:
                offsets, positions = segment.batch_offsets, segment.batch_positions
                if not offsets:
                    continue
                first = max(bisect_right(offsets, start_offset) - 1, 0)
                begin = positions[first]
                # The last batch whose end still fits the budget; at least one
                # batch overall so the reader always progresses.
                end = begin
                for batch_index in range(first, len(offsets)):
                    batch_end = positions[batch_index + 1] if batch_index + 1 < len(offsets) else segment.size_bytes
                    if read_bytes + (batch_end - begin) > budget and (chunks or end > begin):
                        break
                    end = batch_end
                if end > begin:
                    chunks.append(self._read_segment_bytes(segment, begin, end - begin))
                    read_bytes += end - begin
                if end < segment.size_bytes or read_bytes >= budget:
                    break
            return b"".join(chunks)

    def _read_segment_bytes(self, segment: _Segment, position: int, size: int) -> bytes:
        fd = os.open(segment.path, os.O_RDONLY)
        try:
            return _pread_exact(fd, size, position)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------
    # Truncation
    # ------------------------------------------------------------------

    def truncate_to(self, offset: Offset) -> Offset:
        """Removes every batch holding an offset >= `offset`; fsyncs; returns the new end offset.

        Batches are atomic, so if `offset` falls inside a batch that whole
        batch goes and the new end is its base offset (<= `offset`). Raft
        truncates to epoch boundaries, which are batch boundaries.
        """
        with self._mutex:
            self._check_usable()
            if offset >= self.end_offset:
                return self.end_offset
            if offset < self.start_offset:
                raise OffsetOutOfRangeError(f"cannot truncate to {offset}, below the log start {self.start_offset}")
            old_end = self.end_offset
            try:
                # Durably below the new end before any byte goes, or a crash
                # midway would leave the point ahead of the data (a false
                # corruption at the next start).
                assert self._recovery_point is not None
                self._recovery_point.lower(self._batch_base_at(offset))
                self._truncate_locked(offset)
            except OSError as exc:
                self._failure = exc
                _log.error(Event.STORAGE_TRUNCATE_FAILED, directory=self._directory, error=repr(exc))
                raise
            _log.info(Event.STORAGE_TRUNCATED, directory=self._directory, requested_offset=offset,
                      old_end_offset=old_end, end_offset=self.end_offset)
            return self.end_offset

    def _truncate_locked(self, offset: int) -> None:
        keep_index = bisect_right([segment.base_offset for segment in self._segments], offset) - 1
        doomed = self._segments[keep_index + 1 :]
        if doomed:
            assert self._active_fd is not None
            os.close(self._active_fd)
            self._active_fd = None
            # Newest first, and the directory fsynced before the kept segment
            # is cut: if we crash midway, what remains is still a gap-free
            # prefix (a resurrected later segment next to an already-cut
            # earlier one would be a gap recovery rejects).
            for segment in reversed(doomed):
                os.unlink(segment.path)
            _fsync_directory(self._directory)
            del self._segments[keep_index + 1 :]
            self._active_fd = os.open(self._segments[-1].path, os.O_RDWR)
        segment = self._segments[-1]
        offsets, positions = segment.batch_offsets, segment.batch_positions
        # Offsets are contiguous and offset lies in [segment base, end), so the
        # last batch starting at or before `offset` is the one holding it.
        cut_index = bisect_right(offsets, offset) - 1
        assert 0 <= cut_index < len(offsets), (offset, segment.base_offset, segment.next_offset)
        position = positions[cut_index]
        assert self._active_fd is not None
        self._file_ops.ftruncate(self._active_fd, position)
        self._file_ops.fsync(self._active_fd)
        segment.next_offset = offsets[cut_index]
        segment.size_bytes = position
        del offsets[cut_index:]
        del positions[cut_index:]
        while self._epochs and self._epochs[-1].start_offset >= self.end_offset:
            self._epochs.pop()

    # ------------------------------------------------------------------
    # Prefix deletion and reset (snapshots)
    # ------------------------------------------------------------------

    def is_batch_boundary(self, offset: Offset) -> bool:
        """True if a batch starts at `offset`, or `offset` is the log's end (or below its start)."""
        with self._mutex:
            if offset >= self.end_offset or offset <= self._start_offset:
                return True
            return self._batch_base_at(offset) == offset

    def delete_before(self, offset: Offset) -> Offset:
        """Moves the log start up to `offset` (a snapshot's end offset) and deletes
        every segment wholly below it; returns the new start offset.

        Nothing at or above `offset` is ever deleted. An `offset` inside a batch
        is rounded down to that batch's base offset, because batches are atomic
        and a follower must be able to fetch from the start. An offset at or
        below the current start changes nothing. The new start (and the epoch
        of the record before it) is made durable first, so a crash midway
        leaves either the old log or the new start, never a gap.
        """
        with self._mutex:
            self._check_usable()
            if offset > self.end_offset:
                raise OffsetOutOfRangeError(f"cannot delete before {offset}, beyond the log end {self.end_offset}")
            if offset <= self._start_offset:
                return self._start_offset
            if offset < self.end_offset:
                offset = self._batch_base_at(offset)
                if offset <= self._start_offset:
                    return self._start_offset
            epoch = self._epoch_at(offset - 1)
            old_start = self._start_offset
            try:
                self._write_log_start(_LogStart(offset, epoch))
                removed = self._unlink_segments_below(offset)
            except OSError as exc:
                self._failure = exc
                _log.error(Event.STORAGE_TRUNCATE_FAILED, directory=self._directory, error=repr(exc))
                raise
            self._start_offset = offset
            self._epoch_before_start = epoch
            self._clip_epochs()
            _log.info(Event.STORAGE_TRUNCATED, directory=self._directory, reason="prefix deleted",
                      old_start_offset=old_start, start_offset=offset, segments_removed=removed)
            return offset

    def reset_to(self, offset: Offset, epoch: LeaderEpoch) -> None:
        """Discards the whole log; it then starts, empty, at `offset` with last
        epoch `epoch`. A follower does this when it installs a leader's snapshot
        whose end lies beyond (or diverges from) its own log.

        The intent is recorded first (`reset_pending`), so a crash at any point
        is finished by recovery instead of leaving a half-deleted log.
        """
        if offset < 0 or epoch < 0:
            raise ValueError(f"reset_to({offset}, {epoch}): offset and epoch must not be negative")
        with self._mutex:
            self._check_usable()
            try:
                # Down to the reset offset before anything goes (a crash midway
                # is finished by recovery at that offset), up to it once done.
                assert self._recovery_point is not None
                self._recovery_point.lower(offset)
                self._write_log_start(_LogStart(offset, epoch, reset_pending=True))
                assert self._active_fd is not None
                os.close(self._active_fd)
                self._active_fd = None
                for segment in self._segments:
                    os.unlink(segment.path)
                _fsync_directory(self._directory)
                self._segments = [self._create_segment(offset)]
                self._active_fd = os.open(self._segments[0].path, os.O_RDWR)
                self._write_log_start(_LogStart(offset, epoch))
                self._recovery_point.reset(offset)
            except OSError as exc:
                self._failure = exc
                _log.error(Event.STORAGE_TRUNCATE_FAILED, directory=self._directory, error=repr(exc))
                raise
            self._start_offset = offset
            self._epoch_before_start = epoch
            self._epochs = []
            _log.info(Event.STORAGE_TRUNCATED, directory=self._directory, reason="reset to snapshot",
                      start_offset=offset, epoch=epoch)

    def _batch_base_at(self, offset: int) -> int:
        """Base offset of the batch holding `offset` (start <= offset < end)."""
        segment_index = bisect_right([segment.base_offset for segment in self._segments], offset) - 1
        segment = self._segments[segment_index]
        batch_index = bisect_right(segment.batch_offsets, offset) - 1
        return segment.batch_offsets[batch_index]

    def _epoch_at(self, offset: int) -> int:
        """Leader epoch of the batch holding `offset` (start <= offset < end)."""
        index = bisect_right([entry.start_offset for entry in self._epochs], offset) - 1
        if index < 0:
            return self._epoch_before_start or 0
        return self._epochs[index].epoch

    # ------------------------------------------------------------------
    # Closing
    # ------------------------------------------------------------------

    def close(self) -> None:
        with self._mutex:
            if self._recovery_point is not None and self._lock_fd is not None:
                try:
                    self._recovery_point.sync()
                except OSError as exc:
                    # Safe to go on: an unsynced point can only lag the data.
                    _log.warning(Event.STORAGE_WRITE_FAILED, directory=self._directory,
                                 file=RECOVERY_POINT_FILE_NAME, error=repr(exc))
            self._close_fds()

    def reopen(self) -> None:
        """Closes the log and opens it again in place, rebuilding everything in memory
        from what recovery finds on disk: the way back after a failed write or fsync
        (see the rules above). Whoever holds this object keeps a valid log. If opening
        fails, the log stays closed (`LogClosedError`) and `reopen` may be tried again."""
        with self._mutex:
            self._close_fds()
            fresh = type(self).open(self._directory, self._config, self._file_ops)
            # Adopt the recovered state wholesale (every field `open` sets), keeping the
            # mutex other threads may be waiting on.
            for name, value in vars(fresh).items():
                if name != "_mutex":
                    setattr(self, name, value)

    def _close_fds(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None
        if self._recovery_point is not None:
            self._recovery_point.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd releases the flock
            self._lock_fd = None

    def __enter__(self) -> MetadataLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _find_valid_batch_after(data: bytes, position: int, expected_offset: int) -> int | None:
    """Byte position of a verifying batch after a bad one at `position`, or None.

    The bad batch's own length field may be the corrupt part, so batch
    boundaries after it are unknown: try every later position whose magic byte
    is 2. A real later batch must also continue the offsets, so its base
    offset lies in [expected_offset, expected_offset + bytes skipped]; that
    cheap filter keeps the CRC checks (the expensive part) to a handful.
    """
    search_from = position + 1 + MAGIC_OFFSET
    magic_byte = bytes((MAGIC,))
    limit = len(data)
    # Bounded: each round advances `hit` by at least one byte.
    hit = data.find(magic_byte, search_from)
    while hit != -1:
        start = hit - MAGIC_OFFSET
        base_offset = int.from_bytes(data[start : start + 8], "big", signed=True)
        if expected_offset <= base_offset <= expected_offset + (start - position):
            try:
                decode_batch(data, start, max_batch_bytes=limit)
                return start
            except DecodeError:
                pass
        hit = data.find(magic_byte, hit + 1)
    return None
