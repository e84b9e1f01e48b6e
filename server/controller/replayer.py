"""The replayer: the only writer of a node's committed metadata image.

Owns: the committed `ControllerState` of a controller or a broker, how far the
metadata log has been replayed into it, and the snapshots taken on the way. It
reads every committed batch from the Raft driver (`committed_reader`) and
replays its records with `ControllerState.replay` — the same path as
start-up, so leaders, standbys, brokers and restarts build the same image —
and loads snapshots the driver installed from the leader.

Snapshots, at batch boundaries only (a batch commits atomically, so no
committed state lies inside one, and a fetcher continues right after it):
- just before a batch that changes `metadata.version`: a rollback point, the
  log is kept (KIP-778);
- just after a lossy downgrade: the image at the new level, and the log
  before it goes, so that older software never reads records it cannot;
- every `snapshot_interval_bytes` of replayed records (None: never), which
  lets the driver drop the log prefix.

Listeners are told in the replay task, right after a batch was replayed:
`on_commit(records, base_offset)` (metrics, logs, metadata.version changes)
and `on_batch_replayed(batch)`, through which the controller loop answers
the commands whose records the batch holds without a task switch.

Rules kept here:
- One task (`run`) writes the image; snapshots are written from that task,
  so the image cannot change while one is written.
- No await and no copy per record: this is the commit path of every write. Large
  batches decode and replay with the cyclic collector paused (`paused_gc`); while a
  metadata transaction that began with a large batch is open (the migration's copy),
  the collector stays off until it ends (`_hold_collector`).
- KIP-778: with `stop_on_unsupported_level`, replaying a finalized level this
  node's software cannot run stops the node (`UnsupportedFinalizedLevelError`),
  resigning first if it leads. A broker passes False: its lifecycle decides
  (it may not be a member yet).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import trio

from protocol.record_batch import ControlRecordType
from protocol.records import MetadataRecord, decode_metadata_record
from server.collector import CollectorHold, collector_paused
from server.controller.features import (
    METADATA_VERSION,
    NodeFeatures,
    find_metadata_version,
    is_lossless_downgrade,
    unsupported_finalized_levels,
)
from server.controller.snapshot import load_snapshot, write_controller_snapshot
from server.controller.state import ControllerState
from server.observability import Event, get_logger
from server.raft.driver import CommittedBatch, DriverStopped, RaftDriver, SnapshotLoaded
from server.storage.snapshot import read_snapshot
from server.voters import decode_kraft_version_record

log = get_logger("controller")
snapshot_log = get_logger("snapshot")


# Batches from this many records replay with the cyclic collector paused (see `paused_gc`).
GC_PAUSE_MIN_RECORDS = 1_000


@contextmanager
def paused_gc(records: int) -> Iterator[None]:
    """Defers cyclic garbage collection to the end of a large batch. Decoding and
    replaying allocate several container objects per record, so the collector runs every
    ~100 records, and its older generations walk the whole image: at 100k partitions it
    cost two to three times the replay itself. Replay makes no reference cycles, so one
    collection after the batch finds the same garbage. Small batches (the usual writes)
    are left alone."""
    if records < GC_PAUSE_MIN_RECORDS:
        yield
        return
    with collector_paused():
        yield


class UnsupportedFinalizedLevelError(Exception):
    """KIP-778: the quorum finalized a level this node's software cannot run."""


class Replayer:
    def __init__(
        self,
        driver: RaftDriver,
        state: ControllerState,
        replay_from_offset: int,
        supported_features: NodeFeatures,
        *,
        node_id: int,
        log_dir: Path,
        on_commit: Callable[[list[MetadataRecord], int], None] | None = None,
        snapshot_interval_bytes: int | None = None,
        stop_on_unsupported_level: bool = True,
    ) -> None:
        self.driver = driver
        self.state = state  # replaced when a snapshot is loaded
        self.supported_features = supported_features
        self.node_id = node_id
        self.log_dir = log_dir
        self.stop_on_unsupported_level = stop_on_unsupported_level
        self.snapshot_interval_bytes = snapshot_interval_bytes
        self._on_commit = on_commit
        self._on_batch_replayed: Callable[[CommittedBatch], None] | None = None
        # Everything below this offset is replayed into `state` (control batches included).
        self.replayed_end_offset = replay_from_offset
        self._replayed = trio.Event()
        # Counters for benchmarks, metrics and the snapshot interval.
        self.replayed_bytes = 0
        self._snapshot_bytes_mark = 0
        # Taken while a large metadata transaction is open (see `_hold_collector`).
        self._collector = CollectorHold()
        # (epoch, base offset, records, their encoded values) of the batch the controller
        # loop is proposing (see `expect_own_batch`), or None.
        self._own_batch: tuple[int, int, list[MetadataRecord], tuple[bytes, ...]] | None = None

    def serve_commands(self, on_batch_replayed: Callable[[CommittedBatch], None]) -> None:
        """Called by the controller loop that proposes on top of this image:
        `on_batch_replayed` answers its in-flight commands."""
        self._on_batch_replayed = on_batch_replayed

    def expect_own_batch(self, epoch: int, base_offset: int, records: list[MetadataRecord],
                         values: list[bytes]) -> None:
        """Called by the active controller's loop just before it proposes `values`, the
        encoding of `records` (built so that they replay as their encoding decodes:
        `ControllerResult.records_as_decoded`), as one batch at `base_offset` in `epoch`.
        When a committed batch has that epoch, that base offset and exactly these values,
        this task replays `records` instead of decoding the bytes it built them from (the
        values are the same objects on the leader, so the comparison costs one identity
        check per record). Any other batch is decoded as always; the expectation is
        dropped once the log reaches its offset."""
        self._own_batch = (epoch, base_offset, records, tuple(values))

    async def wait_replayed(self, end_offset: int) -> None:
        """Until everything below `end_offset` is in the image."""
        while self.replayed_end_offset < end_offset:
            await self._replayed.wait()

    # -- the replay task: sole writer of the image ------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        reader = self.driver.committed_reader(self.replayed_end_offset)
        task_status.started()
        try:
            await self._replay_forever(reader)
        finally:
            self._collector.release(freeze=True)

    async def _replay_forever(self, reader) -> None:
        while True:
            # No yield before replaying on a standby: the driver task that published the
            # high watermark has already sent its next Fetch in the same step (requests
            # leave from the driver task itself), so replaying here delays no commit.
            items = await reader.next()
            for item in items:
                if isinstance(item, SnapshotLoaded):
                    # Read and loaded off the event loop: a large image takes seconds, during
                    # which this node must keep fetching (it may be a voter the quorum counts).
                    self.state = await trio.to_thread.run_sync(
                        _read_and_load, item.path, item.snapshot_id.end_offset, self.state.cluster_id)
                    self.replayed_end_offset = item.snapshot_id.end_offset
                    log.info(Event.RECOVERED_FROM_SNAPSHOT, snapshot_end_offset=item.snapshot_id.end_offset,
                             snapshot_epoch=item.snapshot_id.epoch, last_applied_offset=self.state.last_applied_offset)
                    self._hold_collector(0)
                    continue
                if item.control_type is None:
                    await self._replay_batch(item)
                elif item.control_type == ControlRecordType.KRAFT_VERSION:
                    # The Raft layer's kraft.version (KIP-853): the image reports it.
                    for index, value in enumerate(item.values):
                        self.state.replay_kraft_version(decode_kraft_version_record(value), item.base_offset + index)
                self.replayed_end_offset = item.next_offset
                if self._on_batch_replayed is not None:
                    self._on_batch_replayed(item)
                interval = self.snapshot_interval_bytes
                if interval is not None and self.replayed_bytes - self._snapshot_bytes_mark >= interval \
                        and self.state.last_applied_offset >= 0:
                    self._snapshot_bytes_mark = self.replayed_bytes
                    await self.write_snapshot(item.next_offset, item.epoch, item.timestamp_ms, "interval")
            self._replayed.set()
            self._replayed = trio.Event()
            if self.replayed_end_offset < self.driver.high_watermark:
                # More is committed already, so the next read returns without waiting:
                # catching up on a backlog still lets the driver (fetches, elections) run.
                await trio.lowlevel.checkpoint()

    async def _replay_batch(self, item: CommittedBatch) -> None:
        records = None
        own = self._own_batch
        if own is not None and item.next_offset > own[1]:
            self._own_batch = None  # this batch reaches the expected one's offset: used or stale
            if own[0] == item.epoch and own[1] == item.base_offset and own[3] == item.values:
                records = own[2]
        if records is None:
            with paused_gc(len(item.values)):
                records = [decode_metadata_record(value) for value in item.values]
        state = self.state
        before = state.metadata_version
        changes = before is not None and any(
            r.name == "FeatureLevelRecord" and r.data["name"] == METADATA_VERSION
            and r.data["feature_level"] != before for r in records)
        if changes:
            await self.write_snapshot(item.base_offset, item.epoch, item.timestamp_ms,
                                      "before_metadata_version_change", compact=False)
        with paused_gc(len(records)):
            for index, record in enumerate(records):
                state.replay(record, item.base_offset + index)
        self._hold_collector(len(records))
        after = state.metadata_version
        if changes and after < before and not is_lossless_downgrade(before, after):
            await self.write_snapshot(item.next_offset, item.epoch, item.timestamp_ms, "lossy_downgrade")
        self.replayed_bytes += sum(len(value) for value in item.values)
        if self.stop_on_unsupported_level:
            await self._check_supported(records)
        if self._on_commit is not None:
            self._on_commit(records, item.base_offset)

    def _hold_collector(self, records: int) -> None:
        """Keeps the cyclic collector off from a large batch that leaves a metadata
        transaction open until the transaction ends (committed or aborted), then moves
        what is alive to the permanent generation (`gc.freeze`, as cli/main.py does at
        start-up) and turns the collector back on. The migration's copy is such a
        transaction: every node builds the whole image in it, a few objects per
        partition, and with the collector paused per batch only (`paused_gc`) the young
        generations walked every batch's survivors again and again (7-8 % of a standby's
        time during a 100k-partition copy). The image lives as long as the process;
        reference counting still frees what is dropped, and only cyclic garbage made
        while the transaction was open (seconds) outlives its use, once. A collector
        that was off already (the active controller's copy turns it off: see
        server/migration/driver.py) is left alone."""
        if self.state.in_transaction:
            if records >= GC_PAUSE_MIN_RECORDS:
                self._collector.take()
        else:
            self._collector.release(freeze=True)

    async def _check_supported(self, records: list[MetadataRecord]) -> None:
        if not any(record.name == "FeatureLevelRecord" for record in records):
            return
        reasons = unsupported_finalized_levels(self.state.all_finalized_levels(), self.supported_features)
        if not reasons:
            return
        message = "; ".join(reasons)
        log.critical(Event.CONTROLLER_UNSUPPORTED_FINALIZED_LEVEL, reasons=reasons)
        if self.driver.is_leader:
            await self.driver.resign()
        raise UnsupportedFinalizedLevelError(
            f"the quorum finalized levels this controller cannot run: {message}; stopping (KIP-778). "
            "Run a release that supports them.")

    # -- snapshots ------------------------------------------------------------------------
    async def write_snapshot(self, end_offset: int, epoch: int, timestamp_ms: int, reason: str,
                             compact: bool = True) -> None:
        """Writes the image (covering everything below `end_offset`) as a snapshot; with
        `compact` makes it the quorum's latest, and the driver drops the log before it
        (never this code directly: the Raft core must see it between steps)."""
        state = self.state
        if state.in_transaction or state.last_applied_offset < 0:
            return  # an open metadata transaction could still be aborted: not a snapshot point
        if not self.driver.storage.metadata_log.is_batch_boundary(end_offset):
            # A replica that loaded it would have to fetch from inside a batch (see
            # MetadataRaftLog.compact): never write one.
            return
        try:
            snapshot_id = await trio.to_thread.run_sync(
                write_controller_snapshot, state, self.log_dir, end_offset, epoch, timestamp_ms, None,
                self.driver.snapshot_voter_records(end_offset))
        except OSError as exc:
            # A snapshot is an optimisation and a rollback point, never what makes data
            # durable (the log is): a full or failing disk skips it (the writer removed its
            # partial file) and the next snapshot point tries again.
            snapshot_log.error(Event.SNAPSHOT_WRITE_FAILED, node_id=self.node_id, end_offset=end_offset,
                               epoch=epoch, reason=reason, error=str(exc))
            return
        mv = state.metadata_version
        snapshot_log.info(Event.CONTROLLER_SNAPSHOT_TAKEN, node_id=self.node_id, end_offset=snapshot_id.end_offset,
                          epoch=snapshot_id.epoch, reason=reason,
                          metadata_version=str(find_metadata_version(mv) or mv) if mv is not None else None)
        if not compact:
            return
        try:
            await self.driver.compact(snapshot_id)
        except DriverStopped:
            pass  # shutting down: the snapshot stands; the log prefix goes at the next snapshot


def _read_and_load(path: str, end_offset: int, cluster_id: str) -> ControllerState:
    """A fresh image from the snapshot file at `path` (no state shared with the event loop)."""
    return load_snapshot(read_snapshot(path).records, end_offset, cluster_id)
