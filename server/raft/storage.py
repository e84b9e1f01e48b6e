"""The Raft core's log, backed by the real metadata log and snapshot files.

Owns: `MetadataRaftLog`, the `RaftLog` the core reads (over `MetadataLog` and
the `.checkpoint` files in the same directory), the application of a Ready's
log operations (truncate, append, install a snapshot) and of compaction, an
in-memory cache of the log tail, and `StoredRecordsCodec`, which carries a
batch's stored bytes through the core so a leader serves Fetch with the bytes
it wrote and a follower appends exactly the bytes it fetched.

Rules kept here:
- Mutations are async and run their blocking file I/O in a worker thread
  (`trio.to_thread`); only the driver task calls them, never between the
  core's `ready()` and `advance()` from anywhere else, so the core never sees
  the log change in the middle of a step.
- `apply` (a follower's or observer's Ready) is durable when it returns:
  MetadataLog fsyncs. Consecutive appends of one Ready are written with one
  `append_raw` (one fsync). A small append (the steady state: what the leader
  just committed) is written on the event loop itself: the loop stalls for one
  fsync, but a worker-thread round trip cost more CPU than the fsync takes
  (measured: ~300 µs per append on a 2-core machine running three
  controllers), and a follower's next step waits for that fsync anyway (a
  follower whose disk stalls stalls with it; it could not acknowledge
  meanwhile). The leader's writes stay in a worker thread: its disk must not
  stall the commits its followers' copies can make.
  Catch-up appends (large) still go to a worker thread.
- A leader may send before its own fsync (KRaft does), so its appends are
  *staged*: `stage` puts them in memory at once (no worker thread on the
  commit path) and the log answers the core as if they were written (end
  offset, epochs, reads from the tail); `write_staged` then writes and fsyncs
  everything staged in one worker-thread call. `flushed_end_offset` (the
  MetadataLog's end) is all the core may count as durable. At most one
  `write_staged` runs at a time, and `apply`, `flush` and `compact` wait for
  it, so the MetadataLog sees one writer and staged batches land in order.
- An installed snapshot is written to its `.checkpoint` file (verified,
  fsynced, renamed) *before* the log is reset to it: a crash in between
  leaves a snapshot past the log end, which start-up recovery finishes.
- The read side the core calls is synchronous (the core is sans-I/O and
  cannot await). The steady state is served from the tail cache (what was
  just appended); only a fetch from further back, or a snapshot chunk, reads
  the disk on the event loop, bounded by the fetch/chunk size.
- The tail cache only ever holds a contiguous run of whole batches ending at
  the log end, and is bounded in bytes.
- After a failed write or fsync (the MetadataLog is then unusable) `reopen`
  is the way back: it waits for the background writer, first checks that the
  disk takes a write again (a `DISK_PROBE_BYTES` file written and fsynced
  through the log's own file operations, then removed: reopening a log whose
  disk is still full would only fail again at the next append), reopens the
  MetadataLog (its recovery cuts a torn tail), then cuts whatever lies past
  the end this process last saw fsynced (a failed fsync may leave whole
  batches in the page cache that a later fsync "succeeds" without writing,
  and this node never acknowledged them), and drops the staged tail and the
  cache: what the core sees afterwards is exactly what is on disk.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import trio

from protocol.record_batch import (ATTRIBUTES_OFFSET, CONTROL_BIT, HEADER_BYTES, decode_batch, encode_batch,
                                   peek_batch_length)
from server.observability import get_logger
from server.raft.core import Append, InstallSnapshot, LogOp, TruncateTo
from server.raft.log import Batch, snapshot_control_records
from server.storage.log import MetadataLog
from server.storage.snapshot import SnapshotConfig, SnapshotReceiver, delete_snapshots_before, latest_snapshot
from server.storage.snapshot import UnknownSnapshotError, read_chunk, snapshot_path
from server.values import EpochEndOffset, EpochEntry, LeaderEpoch, SnapshotId, end_offset_for_epoch_in

_log = get_logger("raft.storage")

DEFAULT_TAIL_CACHE_BYTES = 8 * 1024 * 1024
# How much of the log one step of the start-up walk over batch headers reads.
CONTROL_SCAN_BYTES = 4 * 1024 * 1024
# Where a record batch's lastOffsetDelta (int32) sits (Kafka's DefaultRecordBatch).
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
# Appends up to this size are written and fsynced on the event loop (see above).
INLINE_APPEND_MAX_BYTES = 64 * 1024
# What `reopen` writes to check that the disk takes writes again: what an inline append may take.
DISK_PROBE_BYTES = INLINE_APPEND_MAX_BYTES
DISK_PROBE_FILE_NAME = ".disk-probe"


class StoredBatch(Batch):
    """A `Batch` that also carries its encoded bytes (`raw`), as stored or as fetched.

    A plain subclass (not a new NamedTuple) so the core handles it as a Batch;
    the bytes ride along in the instance dict.
    """

    raw: bytes


def stored_batch(batch: Batch, raw: bytes) -> StoredBatch:
    result = StoredBatch(*batch)
    result.raw = raw
    return result


def raw_bytes(batch: Batch) -> bytes:
    """The batch's wire bytes: the stored ones if it has them, else freshly encoded."""
    raw = getattr(batch, "raw", None)
    if raw is not None:
        return raw
    return encode_batch(batch.base_offset, batch.epoch, batch.values, batch.timestamp_ms, batch.control_type)


def _stored_size(batch: Batch) -> int:
    """Bytes `batch` takes in the log (its stored bytes, or roughly its values' size)."""
    raw = getattr(batch, "raw", None)
    return len(raw) if raw is not None else sum(len(value) for value in batch.values)


def decode_stored(data: bytes | bytearray | memoryview, max_batch_bytes: int = 1 << 31) -> list[StoredBatch]:
    """Whole verified batches of `data` with their bytes; an incomplete last batch is dropped
    (a leader may cut a Fetch response short)."""
    out: list[StoredBatch] = []
    view = memoryview(data)
    position = 0
    # Bounded: each round consumes one batch of at least HEADER_BYTES, or stops.
    while position < len(view):
        size = peek_batch_length(view, position, max_batch_bytes=max_batch_bytes)
        if size is None or position + size > len(view):
            break
        decoded, end = decode_batch(view, position, max_batch_bytes=max_batch_bytes)
        batch = Batch(decoded.base_offset, decoded.leader_epoch, tuple(v or b"" for v in decoded.values),
                      decoded.control_type, decoded.base_timestamp_ms)
        out.append(stored_batch(batch, bytes(view[position:end])))
        position = end
    return out


class StoredRecordsCodec:
    """Record batch v2 on the wire, passing stored bytes through untouched.

    A leader's read returns `StoredBatch`es, so Fetch responses carry the
    exact bytes of the log (headers and timestamps included, no re-encoding);
    a follower's decoded batches keep their bytes for `append_raw`.
    """

    def encode(self, batches: Sequence[Batch]) -> object:
        return b"".join(raw_bytes(batch) for batch in batches)

    def decode(self, records: object) -> list[Batch]:
        if not records:
            return []
        if not isinstance(records, (bytes, bytearray, memoryview)):
            raise TypeError(f"records must be bytes, not {type(records).__name__}")
        return list(decode_stored(records))

    def snapshot_control_records(self, read, size: int) -> list[tuple[int, bytes]]:
        return snapshot_control_records(read, size)


@dataclass(slots=True)
class AppliedOps:
    """What applying a Ready's log operations did, for the driver's events."""

    appended_batches: int = 0
    truncated_to: list[int] = field(default_factory=list)
    installed: list[SnapshotId] = field(default_factory=list)


class MetadataRaftLog:
    """See the module docstring. The MetadataLog stays owned (opened, closed) by the caller."""

    def __init__(self, log: MetadataLog, snapshot_config: SnapshotConfig | None = None,
                 tail_cache_bytes: int = DEFAULT_TAIL_CACHE_BYTES) -> None:
        if tail_cache_bytes < 0:
            raise ValueError("tail_cache_bytes must not be negative")
        self.metadata_log = log
        self.directory = log.directory
        self._snapshot_config = snapshot_config or SnapshotConfig()
        self._latest_snapshot = latest_snapshot(self.directory)
        self._tail_cache_bytes = tail_cache_bytes
        self._cache: list[StoredBatch] = []
        self._cache_offsets: list[int] = []
        self._cached_bytes = 0
        # Leader appends not yet durable in the MetadataLog, contiguous from its end
        # (batches the writer already wrote are skipped by offset, see `_unwritten`).
        self._staged: list[StoredBatch] = []
        # Set while `write_staged` runs (one writer at a time).
        self._writing: trio.Event | None = None
        # While `reopen` has not succeeded yet: the durable end before the failure.
        self._durable_end_before_reopen: int | None = None

    # ------------------------------------------------------------------
    # RaftLog (what the core reads)
    # ------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.metadata_log.start_offset

    @property
    def end_offset(self) -> int:
        """End of the log including staged (not yet durable) leader appends."""
        # Staged batches continue the log in order and leave `_staged` only once
        # written, so the last one (written or not) ends the log. Read on every
        # step of the core: no list is built here.
        staged = self._staged
        return staged[-1].next_offset if staged else self.metadata_log.end_offset

    @property
    def flushed_end_offset(self) -> int:
        """Everything below this offset is written and fsynced."""
        return self.metadata_log.end_offset

    @property
    def last_epoch(self) -> int:
        staged = self._staged  # see end_offset
        return staged[-1].epoch if staged else self.metadata_log.last_epoch

    def _unwritten(self) -> list[StoredBatch]:
        """The staged batches the MetadataLog does not hold yet. The writer thread
        moves the log's end before the driver task drops what it wrote."""
        staged = self._staged
        if not staged:
            return staged
        written_end = self.metadata_log.end_offset
        if staged[0].base_offset >= written_end:
            return staged
        return [batch for batch in staged if batch.base_offset >= written_end]

    def epoch_before(self, offset: int) -> int:
        log = self.metadata_log
        start = log.start_offset
        # The batch holding offset - 1 may be staged. All of `_staged`, not only the
        # unwritten part: the writer thread may move the log's end at any moment, and
        # the list only shrinks in this (the driver's) task.
        for batch in self._staged:
            if batch.base_offset < offset <= batch.next_offset:
                return batch.epoch
        assert start <= offset <= log.end_offset, (offset, start, log.end_offset)
        if offset == start:
            return (log.epoch_before_start or 0) if start > 0 else 0
        entries = log.epoch_start_offsets()
        index = bisect_right([entry.start_offset for entry in entries], offset - 1) - 1
        if index < 0:
            return log.epoch_before_start or 0
        return entries[index].epoch

    def end_offset_for_epoch(self, epoch: LeaderEpoch) -> EpochEndOffset | None:
        # The same epoch list MemoryRaftLog builds, so divergence answers match
        # the simulator's: the snapshot's epoch starts the list.
        log = self.metadata_log
        starts: list[EpochEntry] = []
        start = log.start_offset
        if start > 0 and log.epoch_before_start is not None:
            starts.append(EpochEntry(log.epoch_before_start, start))
        for entry in log.epoch_start_offsets():
            if not starts or entry.epoch > starts[-1].epoch:
                starts.append(entry)
        # All of `_staged` (see epoch_before); a batch both written and staged adds nothing.
        for batch in self._staged:
            if not starts or batch.epoch > starts[-1].epoch:
                starts.append(EpochEntry(batch.epoch, batch.base_offset))
        return end_offset_for_epoch_in(starts, self.end_offset, epoch)

    def control_batches(self, from_offset: int) -> Iterator[Batch]:
        """Control batches of the written log from `from_offset` on: a walk over the batch
        headers that decodes only control batches (start-up reads the voters with it)."""
        offset = max(from_offset, self.start_offset)
        budget = CONTROL_SCAN_BYTES
        # Bounded: every round moves `offset` past at least one whole batch, or stops.
        while offset < self.metadata_log.end_offset:
            data = self.metadata_log.read_raw(offset, budget)
            view = memoryview(data)
            position = 0
            while position + HEADER_BYTES <= len(view):
                size = peek_batch_length(view, position)
                if size is None or position + size > len(view):
                    break
                if view[position + ATTRIBUTES_OFFSET + 1] & CONTROL_BIT:
                    yield decode_stored(view[position:position + size])[0]
                base = int.from_bytes(view[position:position + 8], "big", signed=True)
                delta = int.from_bytes(view[position + LAST_OFFSET_DELTA_OFFSET:position + LAST_OFFSET_DELTA_OFFSET + 4],
                                       "big", signed=True)
                offset = base + delta + 1
                position += size
            if position == 0:
                # One batch larger than the budget: read it whole next time.
                size = peek_batch_length(view, 0) if len(view) >= HEADER_BYTES else None
                if size is None or size <= budget:
                    break  # nothing readable here: read() reports the damage
                budget = size
            else:
                budget = CONTROL_SCAN_BYTES

    def read_cached(self, from_offset: int, max_bytes: int) -> list[Batch] | None:
        """Like `read`, but only from the in-memory tail: None on a miss (no disk I/O),
        so the trio thread can serve the common case without a worker-thread hop."""
        end = self.end_offset
        if from_offset >= end:
            return []
        cache = self._cache
        if (cache and cache[0].base_offset <= from_offset and cache[-1].next_offset == end
                or from_offset >= self.metadata_log.end_offset):
            return self.read(from_offset, max_bytes)
        return None

    def read(self, from_offset: int, max_bytes: int) -> list[Batch]:
        end = self.end_offset
        if from_offset >= end:
            return []
        cache = self._cache
        if cache and cache[0].base_offset <= from_offset and cache[-1].next_offset == end:
            index = bisect_right(self._cache_offsets, from_offset) - 1
            out: list[Batch] = []
            budget = 0
            for batch in cache[index:]:
                if out and budget + len(batch.raw) > max_bytes:
                    break
                out.append(batch)
                budget += len(batch.raw)
            return out
        out: list[Batch] = []
        if from_offset < self.metadata_log.end_offset:
            # Cold read (a follower far behind): bounded by max_bytes, from the page cache mostly.
            out.extend(decode_stored(self.metadata_log.read_raw(from_offset, max_bytes)))
        # Then staged batches not written yet (the tail cache is off or too small), while
        # they continue what was read and fit the budget.
        position = out[-1].next_offset if out else from_offset
        budget = sum(len(batch.raw) for batch in out)  # type: ignore[attr-defined]
        for batch in self._unwritten():
            if batch.next_offset <= position:
                continue
            if batch.base_offset > position or out and budget + len(batch.raw) > max_bytes:
                break
            out.append(batch)
            budget += len(batch.raw)
            position = batch.next_offset
        return out

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._latest_snapshot

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        try:
            return os.stat(snapshot_path(self.directory, snapshot_id)).st_size
        except FileNotFoundError:
            return None

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes | None:
        if max_bytes <= 0:
            return b""
        try:
            return read_chunk(self.directory, snapshot_id, position, max_bytes)
        except UnknownSnapshotError:
            return None

    # ------------------------------------------------------------------
    # Mutations (the driver task only)
    # ------------------------------------------------------------------

    def stage(self, batches: Sequence[Batch]) -> list[StoredBatch]:
        """A leader's appends: part of the log's answers at once, durable only after
        `write_staged` (see the module docstring). No I/O, so no worker thread."""
        stored = [batch if getattr(batch, "raw", None) is not None else stored_batch(batch, raw_bytes(batch))
                  for batch in batches]
        end, epoch = self.end_offset, self.last_epoch
        for batch in stored:
            if batch.base_offset != end or batch.epoch < epoch:
                raise ValueError(f"staged batch at {batch.base_offset} (epoch {batch.epoch}) does not continue "
                                 f"the log at {end} (epoch {epoch})")
            end, epoch = batch.next_offset, batch.epoch
        self._staged.extend(stored)  # type: ignore[arg-type]
        self._cache_add(stored)  # type: ignore[arg-type]
        return stored  # type: ignore[return-value]

    @property
    def has_staged(self) -> bool:
        staged = self._staged
        return bool(staged) and staged[-1].next_offset > self.metadata_log.end_offset

    async def write_staged(self) -> int:
        """Writes and fsyncs everything staged, in one worker-thread call; returns the
        flushed end offset. Waits for a write already running."""
        await self._wait_writer()
        batches = self.begin_write()
        if batches is None:
            return self.flushed_end_offset
        try:
            await trio.to_thread.run_sync(self._append_sync, batches)
        finally:
            self.end_write()
        return self.flushed_end_offset

    def begin_write(self) -> list[StoredBatch] | None:
        """Claims the write of the staged batches not on disk yet, for a caller that runs
        `write_batches(batches)` off the event loop and then calls `end_write()` (from the
        event loop, also when the write failed). None: nothing to write, or a write runs."""
        if self._writing is not None:
            return None
        batches = self._unwritten()
        if not batches:
            self._staged = []
            return None
        self._writing = trio.Event()
        return list(batches)

    def write_batches(self, batches: list[StoredBatch]) -> None:
        """Writes and fsyncs claimed batches (blocking: not on the event loop)."""
        self._append_sync(batches)

    def end_write(self) -> None:
        """Ends the write `begin_write` claimed; what reached the disk leaves the staged tail."""
        writing, self._writing = self._writing, None
        # The log's end moves only after a successful fsync: a failed write trims nothing.
        written_end = self.metadata_log.end_offset
        self._staged = [batch for batch in self._staged if batch.base_offset >= written_end]
        if writing is not None:
            writing.set()

    async def wait_writer(self) -> None:
        """Until no write claimed with `begin_write` (or `write_staged`) runs."""
        await self._wait_writer()

    async def flush(self) -> int:
        """Makes the whole log durable (staged appends included); returns the flushed end."""
        # Bounded: each round writes what was staged before it; nothing stages meanwhile
        # unless the caller (the driver task) does.
        for _ in range(2):
            await self.write_staged()
            if not self.has_staged:
                break
        return self.flushed_end_offset

    async def reopen(self) -> None:
        """Rebuilds the log from disk after a failed write (see the module docstring).
        Raises what reopening raises (OSError while the disk still fails; then the
        MetadataLog stays closed and `reopen` may be tried again)."""
        await self._wait_writer()
        if self._durable_end_before_reopen is None:
            # The MetadataLog moves its end only after a successful fsync (and keeps it
            # after a failed one), so this is the durable end as this process knows it.
            # Kept across failed attempts: one that reopened but could not cut has
            # already replaced the in-memory end with what recovery found.
            self._durable_end_before_reopen = self.metadata_log.end_offset
        latest = await trio.to_thread.run_sync(self._reopen_sync, self._durable_end_before_reopen)
        self._durable_end_before_reopen = None
        self._staged = []
        self._cache_clear()
        self._latest_snapshot = latest

    def _reopen_sync(self, durable_end: int) -> SnapshotId | None:
        log = self.metadata_log
        self._probe_disk_sync()
        log.reopen()
        # Below the log start means a snapshot install (reset) completed on reopen:
        # the snapshot file was durable before the reset began, nothing to cut.
        if log.start_offset <= durable_end < log.end_offset:
            log.truncate_to(durable_end)
        return latest_snapshot(self.directory)

    def _probe_disk_sync(self) -> None:
        """Raises OSError unless DISK_PROBE_BYTES can be written and fsynced in the log's
        directory (through the log's file operations, so injected faults count)."""
        file_ops = self.metadata_log.file_ops
        path = os.path.join(self.directory, DISK_PROBE_FILE_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(bytes(DISK_PROBE_BYTES))
            written = 0
            # Each round writes at least one byte or raises.
            while written < len(view):
                count = file_ops.pwrite(fd, view[written:], written)
                if count <= 0:
                    raise OSError(f"disk probe: pwrite wrote {count} bytes")
                written += count
            file_ops.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)

    async def _wait_writer(self) -> None:
        # Bounded: each wait ends with one write; only the driver task starts writes.
        while self._writing is not None:
            await self._writing.wait()

    async def apply(self, ops: Sequence[LogOp]) -> AppliedOps:
        """Applies a Ready's log operations in order; appends are durable on return.
        Staged leader appends are written first (a former leader's tail)."""
        if self._writing is not None or self._staged:
            await self.flush()
        applied = AppliedOps()
        index = 0
        # Bounded by len(ops): every round consumes at least one operation.
        while index < len(ops):
            op = ops[index]
            if isinstance(op, Append):
                run: list[Batch] = []
                while index < len(ops) and isinstance(ops[index], Append):
                    run.append(ops[index].batch)
                    index += 1
                if sum(_stored_size(batch) for batch in run) <= INLINE_APPEND_MAX_BYTES:
                    stored = self._append_sync(run)
                else:
                    stored = await trio.to_thread.run_sync(self._append_sync, run)
                self._cache_add(stored)
                applied.appended_batches += len(stored)
                continue
            index += 1
            if isinstance(op, TruncateTo):
                await trio.to_thread.run_sync(self.metadata_log.truncate_to, op.offset)
                self._cache_truncate(self.metadata_log.end_offset)
                applied.truncated_to.append(op.offset)
            elif isinstance(op, InstallSnapshot):
                await trio.to_thread.run_sync(self._install_sync, op.snapshot_id, op.data)
                self._cache_clear()
                self._latest_snapshot = op.snapshot_id
                applied.installed.append(op.snapshot_id)
            else:  # pragma: no cover - the core has no other operation
                raise TypeError(f"unknown log operation {op!r}")
        return applied

    async def compact(self, snapshot_id: SnapshotId) -> int:
        """Makes `snapshot_id` (a completed snapshot file of committed state) the latest
        snapshot, moves the log start up to it and deletes older snapshots. Returns the new
        log start (rounded down to a batch boundary, see MetadataLog.delete_before)."""
        if self.snapshot_size(snapshot_id) is None:
            raise ValueError(f"no snapshot file for {snapshot_id} in {self.directory}")
        await self._wait_writer()
        if snapshot_id.end_offset > self.metadata_log.end_offset:
            # A leader may have committed (on its followers' copies) past its own staged tail.
            await self.flush()
        if snapshot_id.end_offset > self.metadata_log.end_offset:
            raise ValueError(f"snapshot {snapshot_id} ends beyond the log end {self.metadata_log.end_offset}")
        if not self.metadata_log.is_batch_boundary(snapshot_id.end_offset):
            # A replica that loads it would fetch from inside a batch, which the leader can only
            # send whole: it could never append it. Batches commit atomically, so no committed
            # state lies inside one anyway.
            raise ValueError(f"snapshot {snapshot_id} ends inside a record batch")
        if snapshot_id.end_offset > self.metadata_log.start_offset:
            epoch = self.epoch_before(snapshot_id.end_offset)
            if epoch != snapshot_id.epoch:
                raise ValueError(f"snapshot {snapshot_id} does not match the log (epoch {epoch} at its end)")
        if self._latest_snapshot is None or snapshot_id > self._latest_snapshot:
            self._latest_snapshot = snapshot_id
        start = await trio.to_thread.run_sync(self.metadata_log.delete_before, snapshot_id.end_offset)
        await trio.to_thread.run_sync(delete_snapshots_before, self.directory, snapshot_id)
        self._cache_drop_below(start)
        return start

    def _append_sync(self, batches: list[Batch]) -> list[StoredBatch]:
        stored = [batch if getattr(batch, "raw", None) is not None else stored_batch(batch, raw_bytes(batch))
                  for batch in batches]
        # Verified already: decoded whole from a Fetch (decode_stored) or encoded here.
        self.metadata_log.append_verified([(batch.base_offset, batch.next_offset, batch.epoch, len(batch.values),
                                            batch.raw) for batch in stored])  # type: ignore[attr-defined]
        return stored  # type: ignore[return-value]

    def _install_sync(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if not os.path.exists(snapshot_path(self.directory, snapshot_id)):
            # Verified in full before the rename; a corrupt transfer raises (and stops the node).
            with SnapshotReceiver(self.directory, snapshot_id, len(data), self._snapshot_config) as receiver:
                receiver.write(0, data)
                receiver.finish()
        self.metadata_log.reset_to(snapshot_id.end_offset, snapshot_id.epoch)
        delete_snapshots_before(self.directory, snapshot_id)

    # -- the tail cache ---------------------------------------------------------

    def _cache_add(self, batches: list[StoredBatch]) -> None:
        if not self._tail_cache_bytes or not batches:
            return
        if self._cache and self._cache[-1].next_offset != batches[0].base_offset:
            self._cache_clear()
        for batch in batches:
            self._cache.append(batch)
            self._cache_offsets.append(batch.base_offset)
            self._cached_bytes += len(batch.raw)
        drop = 0
        # Keep at least the newest batch; drop the oldest beyond the byte bound.
        while len(self._cache) - drop > 1 and self._cached_bytes > self._tail_cache_bytes:
            self._cached_bytes -= len(self._cache[drop].raw)
            drop += 1
        if drop:
            del self._cache[:drop]
            del self._cache_offsets[:drop]

    def _cache_truncate(self, end_offset: int) -> None:
        while self._cache and self._cache[-1].next_offset > end_offset:
            self._cached_bytes -= len(self._cache.pop().raw)
            self._cache_offsets.pop()

    def _cache_drop_below(self, start_offset: int) -> None:
        drop = 0
        while drop < len(self._cache) and self._cache[drop].base_offset < start_offset:
            self._cached_bytes -= len(self._cache[drop].raw)
            drop += 1
        del self._cache[:drop]
        del self._cache_offsets[:drop]

    def _cache_clear(self) -> None:
        self._cache.clear()
        self._cache_offsets.clear()
        self._cached_bytes = 0
