"""SimLog (ends cached as attributes) answers every question exactly like MemoryRaftLog.

Random sequences of appends, truncations, flushes, crashes, snapshots and
snapshot installs are applied to both logs; after every operation the whole
read side the core uses must agree.
"""

from __future__ import annotations

import random

import pytest

from server.raft.log import Batch, MemoryRaftLog
from server.values import SnapshotId

from .simlog import SimLog


def assert_same(memory: MemoryRaftLog, sim: SimLog, context: str) -> None:
    assert (sim.start_offset, sim.end_offset, sim.last_epoch, sim.flushed_end_offset) == (
        memory.start_offset, memory.end_offset, memory.last_epoch, memory.flushed_end_offset), context
    assert sim.batches == memory.batches and sim.snapshot_id == memory.snapshot_id, context
    for offset in range(memory.start_offset, memory.end_offset + 1):
        assert sim.epoch_before(offset) == memory.epoch_before(offset), (context, offset)
        for max_bytes in (0, 1, 100, 300, 1 << 30):
            assert sim.read(offset, max_bytes) == memory.read(offset, max_bytes), (context, offset, max_bytes)
    for epoch in range(0, memory.last_epoch + 2):
        assert sim.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch), (context, epoch)


def step(rng: random.Random, logs: tuple[MemoryRaftLog, SimLog]) -> str:
    memory = logs[0]
    roll = rng.random()
    if roll < 0.5:
        epoch = memory.last_epoch + rng.choice((0, 0, 0, 1, 2))
        batch = Batch(memory.end_offset, epoch, tuple(b"x" * rng.randrange(1, 20) for _ in range(rng.randrange(1, 4))))
        operation = ("append", batch)
    elif roll < 0.62 and memory.end_offset > memory.start_offset:
        operation = ("truncate_to", rng.randrange(memory.start_offset, memory.end_offset + 1))
    elif roll < 0.75:
        operation = ("flush",)
    elif roll < 0.85:
        operation = ("crash",)
    elif roll < 0.93:
        # A snapshot at a durable batch boundary.
        boundaries = [batch.next_offset for batch in memory.batches if batch.next_offset <= memory.flushed_end_offset]
        if not boundaries:
            return "skip"
        end = rng.choice(boundaries)
        operation = ("create_snapshot", SnapshotId(end, memory.epoch_before(end)), b"snap")
    else:
        end = memory.end_offset + rng.randrange(0, 5)
        operation = ("install_snapshot", SnapshotId(end, memory.last_epoch + rng.randrange(0, 2)), b"snap")
    for log in logs:
        getattr(log, operation[0])(*operation[1:])
    return repr(operation)


@pytest.mark.parametrize("seed", range(40))
def test_simlog_matches_memory_raft_log(seed):
    rng = random.Random(seed)
    logs = (MemoryRaftLog(), SimLog())
    for index in range(120):
        context = f"seed {seed} step {index}: {step(rng, logs)}"
        assert_same(*logs, context)
