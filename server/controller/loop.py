"""The single-writer controller loop: the only task that changes controller state.

Owns: the bounded command queue, and the commit rule
    command(state) -> (records, response)
    append records as ONE batch, fsync            (in a worker thread)
    replay the records into the state             (back on the trio thread)
    only then hand the response back.
Handlers submit commands and wait; readers (ApiVersions, Metadata, ...) read
the state directly, and because replay happens synchronously after the
fsync, they only ever see durable state.

Rules kept here:
- A command is a pure function of (state, heartbeat tracker, next offset,
  now); it never awaits and never mutates anything.
- A failed append is fatal: the state would no longer match the log, so the
  loop raises and takes the node down (Kafka's controller does the same).
- The queue is bounded (`controller_queue_max_commands`): submitters wait
  when the controller is saturated rather than growing memory.
"""

from __future__ import annotations

import time
from typing import Callable

import trio

from protocol.records import encode_metadata_record
from server.controller.commands import ControllerResult, apply_result
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.observability import Event, get_logger

Command = Callable[[ControllerState, BrokerHeartbeatTracker, int, int], ControllerResult]

log = get_logger("controller")


def monotonic_ms() -> int:
    """Trio's clock in ms: virtual under MockClock, so session timeouts are testable."""
    return int(trio.current_time() * 1000)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class _Reply:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: ControllerResult | None = None
        self.error: BaseException | None = None


class ControllerLoop:
    def __init__(
        self,
        metadata_log,
        state: ControllerState,
        tracker: BrokerHeartbeatTracker,
        leader_epoch: int,
        queue_max_commands: int,
        on_commit: Callable[[ControllerResult, int], None] | None = None,
    ) -> None:
        self.metadata_log = metadata_log
        self.state = state
        self.tracker = tracker
        self.leader_epoch = leader_epoch
        self._send, self._receive = trio.open_memory_channel(queue_max_commands)
        self._on_commit = on_commit
        # Record bytes appended since start (drives the snapshot interval).
        self.appended_bytes = 0

    async def submit(self, command: Command) -> ControllerResult:
        """Runs `command` on the loop; returns once its records are durable and applied."""
        reply = _Reply()
        await self._send.send((command, reply))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.result

    async def append_and_apply(self, result: ControllerResult) -> int:
        """Appends a result's records (one batch, fsynced) and replays them."""
        values = [encode_metadata_record(item) for item in result.records]
        base_offset, last_offset = await trio.to_thread.run_sync(
            self.metadata_log.append, values, self.leader_epoch, wall_clock_ms()
        )
        self.appended_bytes += sum(len(value) for value in values)
        apply_result(self.state, self.tracker, result, base_offset)
        log.debug(Event.RECORDS_COMMITTED, base_offset=base_offset, last_offset=last_offset,
                  records=[item.name for item in result.records])
        if self._on_commit is not None:
            self._on_commit(result, base_offset)
        return base_offset

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for command, reply in self._receive:
            try:
                result = command(self.state, self.tracker, self.metadata_log.end_offset, monotonic_ms())
            except Exception as exc:  # a bug in one command must not stop the controller
                log.exception(Event.CONTROLLER_COMMAND_FAILED, error=repr(exc))
                reply.error = exc
                reply.event.set()
                continue
            if result.records:
                # Not caught: a failed append or replay leaves the state unknown,
                # so the loop (and the node) must stop.
                await self.append_and_apply(result)
            elif result.heartbeat is not None:
                result.heartbeat.apply(self.tracker)
            reply.result = result
            reply.event.set()
