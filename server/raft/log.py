"""What the Raft core sees of the replicated log, and an in-memory log for the simulator.

Owns: the `Batch` value type, the `RaftLog` protocol (the read side the core
needs; its `SnapshotId` and `EpochEndOffset` come from `server/values.py`,
shared with the storage log), the records codecs that turn batches into a Fetch
response's `records` field, and `MemoryRaftLog`, a log whose tail is volatile
until `flush` (so a simulated kill -9 loses exactly the unflushed writes).

Rules kept here:
- The core only reads a `RaftLog`; every mutation (append, truncate, install a
  snapshot, delete a prefix) is done by the driver, from `Ready`.
- Epoch semantics follow KRaft: an empty log has last epoch 0; after a
  snapshot, the snapshot's (end offset, epoch) is the boundary below the first
  entry; `end_offset_for_epoch` answers the divergence question with the rule
  `server/storage/log.py` uses too (`server.values.end_offset_for_epoch_in`:
  largest epoch <= the asked one, and where it ends).
- Batches are never split: a read returns whole batches, at least one if any
  exist at `from_offset`, so a fetcher always makes progress.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from protocol.record_batch import (ATTRIBUTES_OFFSET, CONTROL_BIT, control_record_type, decode_batch,
                                   decode_batches, encode_batch, peek_batch_length)
from server.values import EpochEndOffset, EpochEntry, LeaderEpoch, Offset, SnapshotId, end_offset_for_epoch_in


class Batch(NamedTuple):
    """One batch of the metadata log: consecutive offsets written by one leader in one epoch."""

    base_offset: Offset
    epoch: LeaderEpoch
    values: tuple[bytes, ...]
    # A KRaft control batch (LeaderChange, ...) carries its ControlRecordType id.
    control_type: int | None = None
    timestamp_ms: int = 0

    @property
    def next_offset(self) -> Offset:
        return self.base_offset + len(self.values)

    @property
    def size_bytes(self) -> int:
        # An estimate good enough for fetch size budgets (61-byte header + ~8 per record).
        return 61 + sum(len(value) + 8 for value in self.values)


class RaftLog(Protocol):
    """The read side of the log, as the core needs it (the driver owns writes)."""

    @property
    def start_offset(self) -> Offset: ...

    @property
    def end_offset(self) -> Offset: ...

    @property
    def last_epoch(self) -> LeaderEpoch: ...

    def epoch_before(self, offset: Offset) -> LeaderEpoch:
        """Epoch of the entry at `offset - 1` (snapshot epoch at the log start, 0 at offset 0)."""
        ...

    def end_offset_for_epoch(self, epoch: LeaderEpoch) -> EpochEndOffset | None: ...

    def read(self, from_offset: Offset, max_bytes: int) -> list[Batch]: ...

    def control_batches(self, from_offset: Offset) -> Iterator[Batch]:
        """The control batches from `from_offset` on (what the voter history is read from
        at start-up), without decoding the data batches between them."""
        ...

    def latest_snapshot_id(self) -> SnapshotId | None: ...

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None: ...

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes | None: ...


# What reads a snapshot: (position, max_bytes) -> bytes (b"" or None past its end).
SnapshotReader = Callable[[int, int], "bytes | None"]
# A snapshot's leading control batches are small; a longer one is not a snapshot of ours.
MAX_SNAPSHOT_CONTROL_BATCH_BYTES = 1 << 20


class RecordsCodec(Protocol):
    """Turns batches into the Fetch `records` field and back, and finds the control records
    (type, value) at the head of a snapshot (the voters it carries, KIP-853)."""

    def encode(self, batches: Sequence[Batch]) -> object: ...

    def decode(self, records: object) -> list[Batch]: ...

    def snapshot_control_records(self, read: SnapshotReader, size: int) -> list[tuple[int, bytes]]: ...


class PassThroughRecordsCodec:
    """For the simulator: the `records` field carries the Batch tuples themselves (not wire-valid)."""

    def encode(self, batches: Sequence[Batch]) -> object:
        return tuple(batches)

    def decode(self, records: object) -> list[Batch]:
        if not records:
            return []
        return list(records)  # type: ignore[arg-type]

    def snapshot_control_records(self, read: SnapshotReader, size: int) -> list[tuple[int, bytes]]:
        return []  # the simulator's snapshots are its own (tests/sim)


class WireRecordsCodec:
    """Record batch v2 (CRC-32C), exactly what a real leader puts in a Fetch response."""

    def encode(self, batches: Sequence[Batch]) -> object:
        return b"".join(
            encode_batch(batch.base_offset, batch.epoch, batch.values, batch.timestamp_ms, batch.control_type)
            for batch in batches
        )

    def decode(self, records: object) -> list[Batch]:
        if not records:
            return []
        if not isinstance(records, (bytes, bytearray, memoryview)):
            raise TypeError(f"records must be bytes, not {type(records).__name__}")
        return [
            Batch(b.base_offset, b.leader_epoch, tuple(v or b"" for v in b.values), b.control_type, b.base_timestamp_ms)
            for b in decode_batches(records, allow_partial_tail=True)
        ]

    def snapshot_control_records(self, read: SnapshotReader, size: int) -> list[tuple[int, bytes]]:
        return snapshot_control_records(read, size)


def snapshot_control_records(read: SnapshotReader, size: int) -> list[tuple[int, bytes]]:
    """The (control type, value) of every record in the control batches a snapshot file
    starts with (SnapshotHeader, KRaftVersion, Voters), each record's own type."""
    out: list[tuple[int, bytes]] = []
    position = 0
    # Bounded: each round moves past one batch of at least the header's size, or stops.
    while position < size:
        head = read(position, ATTRIBUTES_OFFSET + 2) or b""
        if len(head) < ATTRIBUTES_OFFSET + 2 or not head[ATTRIBUTES_OFFSET + 1] & CONTROL_BIT:
            break  # the first data batch (up to max_batch_bytes): the control records are behind us
        length = peek_batch_length(head, 0, max_batch_bytes=MAX_SNAPSHOT_CONTROL_BATCH_BYTES)
        if length is None:
            break
        data = read(position, length) or b""
        batch, _ = decode_batch(data, 0, max_batch_bytes=MAX_SNAPSHOT_CONTROL_BATCH_BYTES)
        if not batch.is_control:
            break
        out.extend((control_record_type(record), record.value or b"") for record in batch.records)
        position += length
    return out


def _base_offset(batch: Batch) -> int:
    return batch.base_offset


@dataclass
class MemoryRaftLog:
    """An in-memory `RaftLog` with a durable prefix and a volatile tail.

    `flushed_end_offset` marks what survives `crash()`. Truncation and snapshot
    installation are durable at once (the real log fsyncs them too).
    """

    batches: list[Batch] = field(default_factory=list)
    snapshot_id: SnapshotId | None = None
    snapshot_data: bytes = b""
    flushed_end_offset: int = 0

    # -- RaftLog ------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.snapshot_id.end_offset if self.snapshot_id else 0

    @property
    def end_offset(self) -> int:
        if self.batches:
            return self.batches[-1].next_offset
        return self.start_offset

    @property
    def last_epoch(self) -> int:
        if self.batches:
            return self.batches[-1].epoch
        return self.snapshot_id.epoch if self.snapshot_id else 0

    def epoch_before(self, offset: int) -> int:
        assert self.start_offset <= offset <= self.end_offset, (offset, self.start_offset, self.end_offset)
        if offset == self.start_offset:
            return self.snapshot_id.epoch if self.snapshot_id else 0
        index = self._batch_index(offset - 1)
        return self.batches[index].epoch

    def _epoch_starts(self) -> list[EpochEntry]:
        starts: list[EpochEntry] = []
        if self.snapshot_id is not None:
            starts.append(EpochEntry(self.snapshot_id.epoch, self.snapshot_id.end_offset))
        for batch in self.batches:
            if not starts or batch.epoch > starts[-1].epoch:
                starts.append(EpochEntry(batch.epoch, batch.base_offset))
        return starts

    def end_offset_for_epoch(self, epoch: LeaderEpoch) -> EpochEndOffset | None:
        return end_offset_for_epoch_in(self._epoch_starts(), self.end_offset, epoch)

    def control_batches(self, from_offset: int) -> Iterator[Batch]:
        return iter([batch for batch in self.batches
                     if batch.control_type is not None and batch.next_offset > from_offset])

    def read(self, from_offset: int, max_bytes: int) -> list[Batch]:
        if from_offset >= self.end_offset or not self.batches:
            return []
        out: list[Batch] = []
        budget = 0
        for batch in self.batches[self._batch_index(from_offset):]:
            if out and budget + batch.size_bytes > max_bytes:
                break
            out.append(batch)
            budget += batch.size_bytes
        return out

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self.snapshot_id

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        return len(self.snapshot_data) if snapshot_id == self.snapshot_id else None

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes | None:
        if snapshot_id != self.snapshot_id:
            return None
        return self.snapshot_data[position : position + max_bytes]

    # -- driver side ----------------------------------------------------------

    def _batch_index(self, offset: int) -> int:
        batches = self.batches
        # Most lookups are at the tail (the next fetch, the last epoch).
        index = len(batches) - 1
        if index >= 0 and batches[index].base_offset > offset:
            index = bisect_right(batches, offset, key=_base_offset) - 1
        assert index >= 0 and self.batches[index].base_offset <= offset < self.batches[index].next_offset, offset
        return index

    def append(self, batch: Batch) -> None:
        assert batch.base_offset == self.end_offset, (batch.base_offset, self.end_offset)
        assert batch.epoch >= self.last_epoch, (batch.epoch, self.last_epoch)
        assert batch.values
        self.batches.append(batch)

    def truncate_to(self, offset: int) -> None:
        """Drops every batch holding an offset >= `offset` (batches are whole)."""
        assert offset >= self.start_offset, (offset, self.start_offset)
        while self.batches and self.batches[-1].next_offset > offset:
            self.batches.pop()
        self.flushed_end_offset = min(self.flushed_end_offset, self.end_offset)

    def flush(self) -> int:
        self.flushed_end_offset = self.end_offset
        return self.flushed_end_offset

    def crash(self) -> None:
        """A kill -9: the unflushed tail is gone."""
        keep = self.flushed_end_offset
        while self.batches and self.batches[-1].next_offset > keep:
            self.batches.pop()
        self.flushed_end_offset = self.end_offset

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Records a snapshot of [0, end_offset) and deletes the log prefix it covers."""
        assert self.start_offset <= snapshot_id.end_offset <= self.flushed_end_offset
        assert self.epoch_before(snapshot_id.end_offset) == snapshot_id.epoch
        self.snapshot_id = snapshot_id
        self.snapshot_data = data
        self.batches = [batch for batch in self.batches if batch.base_offset >= snapshot_id.end_offset]
        # Batches are whole, so a batch straddling the snapshot end stays readable from its start.
        assert not self.batches or self.batches[0].base_offset == snapshot_id.end_offset

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """A follower replaces its whole log with a snapshot fetched from the leader."""
        self.snapshot_id = snapshot_id
        self.snapshot_data = data
        self.batches = []
        self.flushed_end_offset = snapshot_id.end_offset

    def entries(self) -> list[tuple[int, int, bytes, int | None]]:
        """(offset, epoch, value, control type) for every entry the log holds."""
        out = []
        for batch in self.batches:
            for index, value in enumerate(batch.values):
                out.append((batch.base_offset + index, batch.epoch, value, batch.control_type))
        return out
