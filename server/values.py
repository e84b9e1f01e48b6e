"""The small value types the metadata log, the Raft core and the controller share.

Owns: the `NewType`s for the integers that cross those layers (node ids,
leader and broker epochs, log offsets), the `SnapshotId`, `EpochEntry` and
`EpochEndOffset` tuples, KRaft's end-offset-for-epoch rule over them (both the
storage log and the Raft core's in-memory log answer with it), and
`ZkMigrationState` (the value a ZkMigrationStateRecord holds).

Why here: the lowest layer that needs these is `server/storage/` (segment
log, snapshot files), and `server/raft/`, `server/controller/`,
`server/migration/` and `pipeline/` sit above it. A module at the top of the
`server` package, importing nothing from the project, is below all of them,
so none of them has to import another's package (and its `__init__`) to
name an offset or an epoch.

Rules kept here:
- Only plain values and pure rules over them: no I/O, no imports from the
  project, nothing mutable.
- `NewType` costs nothing at run time (`Offset(5)` is the int 5), so the
  hot paths may use these names freely; they exist for readers and type
  checkers, to keep a broker epoch from being passed as a leader epoch.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple, NewType

# A node's `node.id` (controller or broker; Kafka's brokerId/replicaId/voterId); -1 means "none".
NodeId = NewType("NodeId", int)
# A partition's leader epoch. For the metadata log it is the Raft epoch (a record batch's
# partitionLeaderEpoch); for a topic partition, PartitionRecord's leaderEpoch.
LeaderEpoch = NewType("LeaderEpoch", int)
# The epoch a controller gives a broker registration (the offset of its RegisterBrokerRecord).
BrokerEpoch = NewType("BrokerEpoch", int)
# A position in the metadata log: the offset of a record, or an exclusive end (the next offset).
Offset = NewType("Offset", int)


class SnapshotId(NamedTuple):
    """A snapshot covers offsets [0, end_offset); `epoch` is the leader epoch of offset end_offset - 1."""

    end_offset: Offset
    epoch: LeaderEpoch


class EpochEntry(NamedTuple):
    """Where an epoch begins in a log: the base offset of its first batch."""

    epoch: LeaderEpoch
    start_offset: Offset


class EpochEndOffset(NamedTuple):
    """KRaft's divergence answer: the largest epoch <= the one asked, and the offset where it ends."""

    epoch: LeaderEpoch
    end_offset: Offset


def end_offset_for_epoch_in(epochs: Sequence[EpochEntry], end_offset: Offset, epoch: LeaderEpoch) -> EpochEndOffset | None:
    """KRaft's endOffsetForEpoch over a log's epochs (ascending) that ends at `end_offset`.

    - `epoch` is the last epoch: (epoch, end_offset).
    - an older epoch the log knows: (epoch, start offset of the next epoch).
    - between known epochs: (largest known epoch below it, start of the next).
    - below every known epoch: (epoch, start offset of the first known epoch).
    - above the last epoch, or no epochs: None (the log cannot say).
    """
    if not epochs or epoch > epochs[-1].epoch:
        return None
    if epoch == epochs[-1].epoch:
        return EpochEndOffset(epoch, end_offset)
    index = bisect_right([entry.epoch for entry in epochs], epoch)
    next_start = epochs[index].start_offset
    if index == 0:
        return EpochEndOffset(epoch, next_start)
    return EpochEndOffset(epochs[index - 1].epoch, next_start)


class ZkMigrationState(IntEnum):
    """ZkMigrationStateRecord.ZkMigrationState, with Kafka's values.

    Kafka's ZK (4) is never persisted, so it is not a member: a record that
    carries it (or any other value) is refused at replay.
    """

    NONE = 0
    MIGRATION = 1
    PRE_MIGRATION = 2
    POST_MIGRATION = 3
