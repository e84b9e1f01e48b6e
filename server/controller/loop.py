"""The controller loop on top of the Raft quorum: commands, group commit, replay.

Owns: the bounded command queue, becoming and ceasing to be the *active*
controller (the Raft leader), and the commit rule
    command(speculative state) -> (records, response)
    records replayed at once into the *speculative* state (what the next
      command sees) and queued for the next proposal
    queued records proposed to the quorum as ONE batch
    once the quorum commits it, the replay task replays it into the
      *committed* state (what readers see)
    only then the response handed back.

Tasks and their single writers:
- the command task: the only writer of the speculative state;
- the committer: proposes batches and waits for their commit;
- the replay task (`Replayer`, server/controller/replayer.py, shared with the
  broker): the only writer of the committed state (`self.state`). It replays
  every committed batch, on the leader and on standbys alike, and loads
  snapshots installed from the leader: the same `replay` path as start-up. It
  answers the in-flight commands once their batch is replayed.
- the leadership task: activates the controller once this node leads and has
  replayed everything committed before its epoch (writing the bootstrap
  records on a brand-new cluster), and deactivates it when leadership ends.

Group commit: records proposed while a batch is in flight wait for it and go
into the next batch together (bounded by `max_batch_records`). A command that
writes nothing still answers only after everything before it is committed.
`group_commit=False` gives one proposal per command, for comparison.

Rules kept here:
- A command is a pure function of (state, heartbeat tracker, next offset,
  now); it never awaits and never mutates anything.
- A standby answers every command with `NotControllerError` (NOT_CONTROLLER on
  the wire); so does a leader that lost its leadership mid-commit (the outcome
  is then unknown, as in Kafka: clients retry against the new leader).
- A node whose metadata log went offline after a disk failure (the Raft
  driver's `storage_offline`) answers `ControllerStorageError` instead
  (KAFKA_STORAGE_ERROR on the wire, retriable): the command in flight when the
  disk failed, those queued behind it, and every command until the disk is
  back. The committed state stays what it was, so reads go on.
- KIP-778: replaying a finalized level this node's software cannot run is
  fatal (the replayer's check); an active controller resigns first.
- While a metadata transaction is open in the speculative state (KIP-868; the
  ZooKeeper migration's copy), only commands submitted as `transactional` run;
  the others are held, in order, until the transaction ends or is aborted, so no
  unrelated record lands inside it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, Callable, NamedTuple

import trio

from protocol.records import MetadataRecord, encode_metadata_record
from server.controller.commands import ControllerResult
from server.controller.replayer import Replayer, paused_gc
# Re-exported: a node stopped by the replayer's KIP-778 check is reported as a stop
# of its controller loop, which is where callers look for it.
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.observability import Event, get_logger
from server.raft.driver import CommittedBatch, NotLeaderError, RaftDriver, StorageFailedError

Command = Callable[[ControllerState, BrokerHeartbeatTracker, int, int], ControllerResult]

log = get_logger("controller")

DEFAULT_MAX_BATCH_RECORDS = 10_000


def monotonic_ms() -> int:
    """Trio's clock in ms: virtual under MockClock, so session timeouts are testable."""
    return int(trio.current_time() * 1000)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def copy_state(state: ControllerState) -> ControllerState:
    """An independent, equal copy, an open metadata transaction included (a leader that
    takes over in the middle of one must be able to abort it)."""
    return state.copy()


class NotControllerError(Exception):
    """This node is not the active controller (now, or any more)."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"not the active controller (leader: {leader_id})")
        self.leader_id = leader_id


class ControllerStorageError(NotControllerError):
    """This node's metadata log is offline after a disk failure (ENOSPC, EIO): no
    writes until the disk is back (KAFKA_STORAGE_ERROR, retriable). A
    NotControllerError, so callers that only know that one still step aside."""

    def __init__(self, leader_id: int | None, reason: str | None) -> None:
        super().__init__(leader_id)
        self.reason = reason
        self.args = (f"this controller's metadata log is offline after a disk failure ({reason}); "
                     f"retry (leader: {leader_id})",)


class WritesBlockedError(Exception):
    """The active controller refuses new operator writes for now (KIP-866: ZooKeeper is
    too far behind or unreachable during a migration's dual writes). Retriable."""


class _Reply:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: ControllerResult | None = None
        self.error: BaseException | None = None

    def resolve(self, result: ControllerResult) -> None:
        self.result = result
        self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()


class _Entry:
    """One command's outcome waiting to be committed."""

    __slots__ = ("result", "reply", "base_offset")

    def __init__(self, result: ControllerResult, reply: _Reply, base_offset: int | None) -> None:
        self.result = result
        self.reply = reply
        self.base_offset = base_offset  # None: writes nothing, waits for those before it


class _RaftAppend(NamedTuple):
    append: Callable[[], Awaitable[Any]]


class ControllerLoop:
    def __init__(
        self,
        driver: RaftDriver,
        replayer: Replayer,
        tracker: BrokerHeartbeatTracker,
        queue_max_commands: int,
        bootstrap_records: Callable[[], list[MetadataRecord] | None] = lambda: None,
        group_commit: bool = True,
        max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
    ) -> None:
        self.driver = driver
        # The replay task: the only writer of the committed state. It answers in-flight
        # commands as soon as their batch is replayed.
        self.replayer = replayer
        replayer.serve_commands(self._answer_replayed)
        self._speculative: ControllerState | None = None
        self.tracker = tracker
        self.group_commit = group_commit
        self.max_batch_records = max_batch_records
        self._bootstrap_records = bootstrap_records
        self._send, self._receive = trio.open_memory_channel(queue_max_commands)
        self._pending: list[_Entry] = []
        self._in_flight: list[_Entry] = []
        # (epoch, end offset) of the in-flight batch once proposed: the replay task answers
        # its commands as soon as it has replayed that batch (see `_answer_replayed`).
        self._in_flight_mark: tuple[int, int] | None = None
        # Commands that arrived while a transaction was open (see the module's rules).
        self._held: list[tuple[Command, _Reply]] = []
        self._work = trio.Event()
        # Set (and renewed) each time the committer has nothing queued or in flight.
        self._quiet = trio.Event()
        self._next_offset = 0
        self.active = False
        self.active_epoch = -1
        self._activated = trio.Event()
        self._deactivated = trio.Event()
        self._deactivated.set()
        # Counters for benchmarks and metrics.
        self.proposals = 0
        self.committed_records = 0

    # -- API ----------------------------------------------------------------------
    async def submit(self, command: Command, *, transactional: bool = False) -> ControllerResult:
        """Runs `command` on the active controller; returns once its records are committed
        and replayed. Raises NotControllerError on a standby. A `transactional` command
        may run inside an open metadata transaction; others wait until it closes."""
        if not self.active:
            raise self._inactive_error()
        reply = _Reply()
        try:
            # No scheduling round when there is room: the reply is awaited next anyway.
            self._send.send_nowait((command, reply, transactional))
        except trio.WouldBlock:
            await self._send.send((command, reply, transactional))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.result

    async def raft_append(self, append: Callable[[], Awaitable[Any]]) -> Any:
        """Runs `append` (a record the Raft layer writes itself: a voter change, KIP-853)
        between commands, when every record the loop predicted an offset for is committed,
        and continues from the log's end after it. Commands compute offsets (broker epochs
        are record offsets), so nothing else may land in the log between their records."""
        if not self.active:
            return await append()
        reply = _Reply()
        await self._send.send((_RaftAppend(append), reply, False))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.result

    async def wait_active(self) -> None:
        await self._activated.wait()

    async def wait_inactive(self) -> None:
        """Until this node is not (or no longer) the active controller."""
        await self._deactivated.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.replayer.run)
            nursery.start_soon(self._follow_leadership)
            nursery.start_soon(self._committer)
            task_status.started()
            await self._run_commands()

    # -- the committed state, kept by the replayer -------------------------------------
    @property
    def state(self) -> ControllerState:
        """The committed state: what readers see (replaced when a snapshot is loaded)."""
        return self.replayer.state

    @property
    def replayed_end_offset(self) -> int:
        return self.replayer.replayed_end_offset

    async def wait_replayed(self, end_offset: int) -> None:
        """Until everything below `end_offset` is in the committed state."""
        await self.replayer.wait_replayed(end_offset)

    def _answer_replayed(self, item: CommittedBatch) -> None:
        """Answers the in-flight commands once their batch is replayed, from the replay task
        itself: the committer, which also answers them after `wait_replayed`, would add a
        task switch to every write's reply. The batch is ours only if it carries the epoch
        it was proposed in (a later leader may have written other records at its offsets)."""
        mark = self._in_flight_mark
        if mark is None or item.epoch != mark[0] or item.next_offset != mark[1]:
            return
        self._in_flight_mark = None
        for entry in self._in_flight:
            entry.reply.resolve(entry.result)

    # -- the leadership task ---------------------------------------------------------------
    async def _follow_leadership(self) -> None:
        while True:
            driver = self.driver
            leading = driver.is_leader and driver.leader_ready
            if leading and not self.active:
                await self._activate(driver.epoch)
            elif self.active and (not driver.is_leader or driver.epoch != self.active_epoch):
                self._deactivate()
            await driver.wait_role_changed()

    async def _activate(self, epoch: int) -> None:
        driver = self.driver
        # Everything committed before this epoch must be in the committed state first.
        await self.replayer.wait_replayed(driver.high_watermark)
        if not (driver.is_leader and driver.epoch == epoch):
            return
        if self.state.metadata_version is None:
            records = self._bootstrap_records()
            if records:
                try:
                    base, proposed_epoch = await driver.propose([encode_metadata_record(r) for r in records])
                    await driver.wait_committed(base + len(records) - 1, proposed_epoch)
                except NotLeaderError:
                    return
                await self.replayer.wait_replayed(base + len(records))
                log.info(Event.BOOTSTRAPPED, metadata_version=self.state.metadata_version,
                         features=dict(self.state.finalized_levels))
        self._speculative = copy_state(self.state)
        self._next_offset = driver.next_offset
        self.tracker.activate(self.state, monotonic_ms())
        self.active_epoch = epoch
        self.active = True
        self._deactivated = trio.Event()
        self._activated.set()
        log.info(Event.CONTROLLER_ACTIVATED, epoch=epoch, next_offset=self._next_offset)

    def _inactive_error(self) -> NotControllerError:
        """What a command gets while this node is not the active controller."""
        driver = self.driver
        if driver.storage_offline:
            return ControllerStorageError(driver.leader_id, driver.storage_error)
        return NotControllerError(driver.leader_id)

    def _deactivate(self) -> None:
        self.active = False
        self._activated = trio.Event()
        self._deactivated.set()
        self._speculative = None
        error = self._inactive_error()
        pending, self._pending = self._pending, []
        for entry in pending:
            entry.reply.fail(error)
        held, self._held = self._held, []
        for _, reply in held:
            reply.fail(error)
        self._quiet.set()
        self._quiet = trio.Event()
        log.info(Event.CONTROLLER_DEACTIVATED, epoch=self.active_epoch, leader_id=self.driver.leader_id)

    # -- the command task: sole writer of the speculative state ------------------------------
    async def _run_commands(self) -> None:
        async for command, reply, transactional in self._receive:
            if isinstance(command, _RaftAppend):
                await self._run_raft_append(command, reply)
                continue
            if not self.active:
                reply.fail(self._inactive_error())
                continue
            if self._speculative.in_transaction and not transactional:
                self._held.append((command, reply))
                continue
            self._execute(command, reply)
            if transactional and not self._speculative.in_transaction:
                # The transaction ended (or was aborted): run what waited for it, in order,
                # until one of them opens another.
                while self._held and self.active and not self._speculative.in_transaction:
                    held_command, held_reply = self._held.pop(0)
                    self._execute(held_command, held_reply)
            if not self.group_commit:
                await reply.event.wait()

    async def _run_raft_append(self, command: _RaftAppend, reply: _Reply) -> None:
        # Bounded: the committer empties the queue (or deactivation fails it) without us.
        while self.active and (self._pending or self._in_flight):
            await self._quiet.wait()
        try:
            result = await command.append()
        except Exception as exc:  # the driver's own errors (not leader, stopped) go to the caller
            reply.fail(exc)
            return
        finally:
            if self.active:
                self._next_offset = self.driver.next_offset
        reply.resolve(result)

    def _execute(self, command: Command, reply: _Reply) -> None:
        try:
            result = command(self._speculative, self.tracker, self._next_offset, monotonic_ms())
        except Exception as exc:  # a bug in one command must not stop the controller
            log.exception(Event.CONTROLLER_COMMAND_FAILED, error=repr(exc))
            reply.fail(exc)
            return
        if result.heartbeat is not None:
            # Volatile liveness, not in the log: it takes effect at once.
            result.heartbeat.apply(self.tracker)
        if result.records:
            base_offset = self._next_offset
            with paused_gc(len(result.records)):
                for index, item in enumerate(result.records):
                    self._speculative.replay(item, base_offset + index)
            self._next_offset += len(result.records)
            self._pending.append(_Entry(result, reply, base_offset))
            self._work.set()
        elif self._pending or self._in_flight:
            # Writes nothing, but must not answer before earlier records are committed.
            self._pending.append(_Entry(result, reply, None))
            self._work.set()
        else:
            reply.resolve(result)

    # -- the committer ---------------------------------------------------------------------
    async def _committer(self) -> None:
        while True:
            await self._work.wait()
            self._work = trio.Event()
            while self._pending and self.active:
                self._in_flight = self._take_batch()
                try:
                    await self._commit(self._in_flight)
                except NotLeaderError as exc:
                    if isinstance(exc, StorageFailedError):
                        # This node could not make the batch durable: never "committed" here.
                        error = ControllerStorageError(self.driver.leader_id, exc.reason)
                    else:
                        error = NotControllerError(self.driver.leader_id)
                    for entry in self._in_flight:
                        entry.reply.fail(error)
                    if self.active:
                        self._deactivate()
                finally:
                    self._in_flight = []
                    self._in_flight_mark = None
            if not self._pending:
                self._quiet.set()
                self._quiet = trio.Event()

    def _take_batch(self) -> list[_Entry]:
        """Everything queued, up to `max_batch_records` records (at least one entry)."""
        taken: list[_Entry] = []
        records = 0
        while self._pending:
            entry = self._pending[0]
            size = len(entry.result.records)
            if taken and records + size > self.max_batch_records:
                break
            taken.append(self._pending.pop(0))
            records += size
        return taken

    async def _commit(self, batch: list[_Entry]) -> None:
        with paused_gc(sum(len(entry.result.records) for entry in batch)):
            values = []
            for entry in batch:
                encoded = entry.result.values
                if encoded is not None and len(encoded) == len(entry.result.records):
                    values.extend(encoded)  # encoded ahead by the command (the migration's copy)
                else:
                    values.extend([encode_metadata_record(item) for item in entry.result.records])
        if values:
            if all(entry.result.records_as_decoded for entry in batch if entry.result.records):
                # Our replay task may replay these objects instead of decoding the batch again
                # (only this batch, at this epoch and offset: see Replayer.expect_own_batch).
                first = next(entry.base_offset for entry in batch if entry.base_offset is not None)
                self.replayer.expect_own_batch(
                    self.active_epoch, first, [item for entry in batch for item in entry.result.records], values)
            base_offset, epoch = await self.driver.propose(values)
            first = next(entry.base_offset for entry in batch if entry.base_offset is not None)
            if base_offset != first:
                # Our speculative offsets no longer match the log: nothing we answered is
                # wrong yet, but nothing more may be; step down and let a fresh activation fix it.
                log.error(Event.CONTROLLER_COMMAND_FAILED, error="proposal offset mismatch",
                          expected=first, got=base_offset)
                raise NotLeaderError(self.driver.leader_id, self.driver.epoch)
            last_offset = base_offset + len(values) - 1
            self._in_flight_mark = (epoch, last_offset + 1)
            await self.driver.wait_committed(last_offset, epoch)
            await self.replayer.wait_replayed(last_offset + 1)
            self.proposals += 1
            self.committed_records += len(values)
            log.debug(Event.RECORDS_COMMITTED, base_offset=base_offset, last_offset=last_offset,
                      records=len(values), commands=len(batch))
        for entry in batch:
            entry.reply.resolve(entry.result)
