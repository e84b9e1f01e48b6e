"""The simulator's in-memory Raft log: `MemoryRaftLog` with its ends kept as attributes.

Owns: `SimLog`. The core reads `start_offset`, `end_offset` and `last_epoch` on
nearly every message, and `read` on every Fetch; `MemoryRaftLog` derives the
ends from its batch list each time and sums every batch's size on every read,
which together were a tenth of a simulated run. `SimLog` stores the ends and
the running total of batch sizes, and updates them in every mutation.

Rules kept here:
- The same semantics as `MemoryRaftLog` (tests/sim/test_simlog.py compares
  the two over random operation sequences); only derived values are cached.
- Every method that changes `batches` or `snapshot_id` ends by recomputing what
  it invalidated, and none reads a cached value after changing the batches.
"""

from __future__ import annotations

from bisect import bisect_right

from server.raft.log import Batch, MemoryRaftLog
from server.values import SnapshotId


class SimLog(MemoryRaftLog):
    # Plain class attributes shadow MemoryRaftLog's properties, so instance
    # attributes of these names can be set (SimLog is not itself a dataclass).
    start_offset = 0
    end_offset = 0
    last_epoch = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # _size_through[i]: the summed size_bytes of batches[0..i].
        self._size_through: list[int] = []
        self._recompute_sizes()
        self._recompute_ends()

    def _recompute_sizes(self) -> None:
        total = 0
        sizes = self._size_through
        sizes.clear()
        for batch in self.batches:
            total += batch.size_bytes
            sizes.append(total)

    def _recompute_ends(self) -> None:
        snapshot = self.snapshot_id
        self.start_offset = snapshot.end_offset if snapshot else 0
        if self.batches:
            last = self.batches[-1]
            self.end_offset = last.base_offset + len(last.values)
            self.last_epoch = last.epoch
        else:
            self.end_offset = self.start_offset
            self.last_epoch = snapshot.epoch if snapshot else 0

    def read(self, from_offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one holding `from_offset`, at least one, within `max_bytes` after the first."""
        if from_offset >= self.end_offset or not self.batches:
            return []
        first = self._batch_index(from_offset)
        sizes = self._size_through
        before = sizes[first - 1] if first else 0
        last = bisect_right(sizes, before + max_bytes, lo=first) - 1
        return self.batches[first:max(first, last) + 1]

    def append(self, batch: Batch) -> None:
        super().append(batch)
        sizes = self._size_through
        sizes.append((sizes[-1] if sizes else 0) + batch.size_bytes)
        self.end_offset = batch.base_offset + len(batch.values)
        self.last_epoch = batch.epoch

    def truncate_to(self, offset: int) -> None:
        assert offset >= self.start_offset, (offset, self.start_offset)
        batches = self.batches
        while batches and batches[-1].next_offset > offset:
            batches.pop()
        del self._size_through[len(batches):]
        self._recompute_ends()
        self.flushed_end_offset = min(self.flushed_end_offset, self.end_offset)

    def crash(self) -> None:
        keep = self.flushed_end_offset
        batches = self.batches
        while batches and batches[-1].next_offset > keep:
            batches.pop()
        del self._size_through[len(batches):]
        self._recompute_ends()
        self.flushed_end_offset = self.end_offset

    def flush(self) -> int:
        self.flushed_end_offset = self.end_offset
        return self.flushed_end_offset

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        super().create_snapshot(snapshot_id, data)
        self._recompute_sizes()
        self._recompute_ends()

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        super().install_snapshot(snapshot_id, data)
        self._recompute_sizes()
        self._recompute_ends()
