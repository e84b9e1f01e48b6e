"""The controller loop: the only code that changes controller state, with group commit.

Owns: the bounded command queue and the commit rule
    command(speculative state) -> (records, response)
    records replayed at once into the *speculative* state (what the next
      command sees), and queued for the next append
    queued records appended as ONE batch, fsynced        (in a worker thread)
    the same records replayed into the *committed* state (what readers see)
    only then the response handed back.

Two states, one writer each: the command task is the only writer of the
speculative state, the committer task the only writer of the committed state
(`self.state`). Readers (ApiVersions, Metadata, snapshots, ...) only ever see
durable state. Both are built by the same `replay`.

Group commit: records proposed while an fsync is in flight wait for it and go
into the next batch together (bounded by `max_batch_records`), so many
concurrent writers share one fsync. A command that writes nothing still
answers only after everything before it is durable, so a reply never
reflects state that could still be lost. `group_commit=False` gives the
one-command-one-fsync behaviour, for comparison in benchmarks.

Rules kept here:
- A command is a pure function of (state, heartbeat tracker, next offset,
  now); it never awaits and never mutates anything.
- A failed append is fatal: the loop raises and takes the node down (the
  states would no longer match the log; Kafka's controller does the same).
- The queue is bounded (`queue_max_commands`): submitters wait when the
  controller is saturated rather than growing memory.
"""

from __future__ import annotations

import time
from typing import Callable

import trio

from protocol.records import encode_metadata_record
from server.controller.commands import ControllerResult
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.observability import Event, get_logger

Command = Callable[[ControllerState, BrokerHeartbeatTracker, int, int], ControllerResult]

log = get_logger("controller")

DEFAULT_MAX_BATCH_RECORDS = 10_000


def monotonic_ms() -> int:
    """Trio's clock in ms: virtual under MockClock, so session timeouts are testable."""
    return int(trio.current_time() * 1000)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def copy_state(state: ControllerState) -> ControllerState:
    """An independent, equal copy, built by the snapshot round trip (exact by its tests)."""
    return load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, state.cluster_id)


class _Reply:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: ControllerResult | None = None
        self.error: BaseException | None = None

    def resolve(self, result: ControllerResult) -> None:
        self.result = result
        self.event.set()


class _Entry:
    """One command's outcome waiting to become durable."""

    __slots__ = ("result", "reply", "base_offset")

    def __init__(self, result: ControllerResult, reply: _Reply, base_offset: int | None) -> None:
        self.result = result
        self.reply = reply
        self.base_offset = base_offset  # None: writes nothing, waits for those before it


class ControllerLoop:
    def __init__(
        self,
        metadata_log,
        state: ControllerState,
        tracker: BrokerHeartbeatTracker,
        leader_epoch: int,
        queue_max_commands: int,
        on_commit: Callable[[ControllerResult, int], None] | None = None,
        group_commit: bool = True,
        max_batch_records: int = DEFAULT_MAX_BATCH_RECORDS,
    ) -> None:
        self.metadata_log = metadata_log
        self.state = state  # committed: what readers see
        self._speculative = copy_state(state)
        self.tracker = tracker
        self.leader_epoch = leader_epoch
        self.group_commit = group_commit
        self.max_batch_records = max_batch_records
        self._send, self._receive = trio.open_memory_channel(queue_max_commands)
        self._on_commit = on_commit
        self._pending: list[_Entry] = []
        self._in_flight = 0  # entries taken by the committer and not yet resolved
        self._work = trio.Event()
        self._next_offset = metadata_log.end_offset
        # Counters for benchmarks, metrics and the snapshot interval.
        self.appended_bytes = 0
        self.appends = 0
        self.committed_records = 0

    async def submit(self, command: Command) -> ControllerResult:
        """Runs `command` on the loop; returns once its records are durable and applied."""
        reply = _Reply()
        await self._send.send((command, reply))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.result

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._committer)
            task_status.started()
            await self._run_commands()

    # -- the command task: sole writer of the speculative state -----------------
    async def _run_commands(self) -> None:
        async for command, reply in self._receive:
            try:
                result = command(self._speculative, self.tracker, self._next_offset, monotonic_ms())
            except Exception as exc:  # a bug in one command must not stop the controller
                log.exception(Event.CONTROLLER_COMMAND_FAILED, error=repr(exc))
                reply.error = exc
                reply.event.set()
                continue
            if result.heartbeat is not None:
                # Volatile liveness, not in the log: it takes effect at once.
                result.heartbeat.apply(self.tracker)
            if result.records:
                base_offset = self._next_offset
                for index, item in enumerate(result.records):
                    self._speculative.replay(item, base_offset + index)
                self._next_offset += len(result.records)
                self._pending.append(_Entry(result, reply, base_offset))
                self._work.set()
            elif self._pending or self._in_flight:
                # Writes nothing, but must not answer before earlier records are durable.
                self._pending.append(_Entry(result, reply, None))
                self._work.set()
            else:
                reply.resolve(result)
            if not self.group_commit:
                await reply.event.wait()

    # -- the committer task: sole writer of the committed state -----------------
    async def _committer(self) -> None:
        while True:
            await self._work.wait()
            self._work = trio.Event()
            while self._pending:
                batch = self._take_batch()
                self._in_flight = len(batch)
                try:
                    await self._commit(batch)
                finally:
                    self._in_flight = 0

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
        values = [encode_metadata_record(item) for entry in batch for item in entry.result.records]
        if values:
            # Not caught: a failed append leaves the states unknown, so the node must stop.
            base_offset, last_offset = await trio.to_thread.run_sync(
                self.metadata_log.append, values, self.leader_epoch, wall_clock_ms()
            )
            first = next(entry.base_offset for entry in batch if entry.base_offset is not None)
            if base_offset != first:
                raise RuntimeError(f"log appended at {base_offset}, expected {first}: the log changed under "
                                   "the controller")
            self.appended_bytes += sum(len(value) for value in values)
            self.appends += 1
            self.committed_records += len(values)
            log.debug(Event.RECORDS_COMMITTED, base_offset=base_offset, last_offset=last_offset,
                      records=len(values), commands=len(batch))
        for entry in batch:
            if entry.base_offset is not None:
                for index, item in enumerate(entry.result.records):
                    self.state.replay(item, entry.base_offset + index)
                if self._on_commit is not None:
                    self._on_commit(entry.result, entry.base_offset)
            entry.reply.resolve(entry.result)
