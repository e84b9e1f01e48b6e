"""How a node process meets SIGINT and SIGTERM: `kraftwerk controller`, `kraftwerk broker`
and `kraftwerk broker --zookeeper`.

Owns: `StopSignals` (noting a stop signal from the moment the command starts),
`serve_until_stopped` (running a node under trio until a stop signal or its own end) and
`listener_refusal` (the listener's bind failure found in what the node raised).

Rules kept here:
- SIGTERM is SIGINT: `docker stop`, systemd, Kubernetes and CI send SIGTERM, a terminal
  sends SIGINT; both mean "stop cleanly, then exit 0".
- No stop signal is lost and none kills the process uncleanly: one that arrives while
  the storage opens (before trio runs) is noted and honoured as soon as trio runs.
- A node that does not serve yet has nothing to hand over: it stops at once (a node
  whose start-up has outside effects before it reports serving may finish starting first,
  bounded). A serving node runs its `before_stop` (a broker's controlled shutdown, a
  leader's resignation, each bounded by its own timeout), then it is cancelled.
- What the node reported when it began serving (its port, for the port file) is handed
  on in the same step: a stop never falls between "serving" and "said so".
- A second signal during `before_stop` cuts it short: the operator asked twice.
"""

from __future__ import annotations

import errno
import signal
import threading
from types import MappingProxyType
from typing import Awaitable, Callable

import trio

from server.net.listener import ListenerBindError
from server.observability import Event, get_logger

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# What an operator can do about a listener that cannot bind, by the cause's errno.
BIND_HINTS = MappingProxyType({
    errno.EADDRINUSE: "another process listens there (is this node already running?)",
    errno.EADDRNOTAVAIL: "no interface of this host has that address",
    errno.EACCES: "ports below 1024 need privileges",
})

log = get_logger("server")


class StopSignals:
    """From `with StopSignals() as early:` on, SIGINT and SIGTERM are noted in `received`
    instead of taking Python's defaults (a KeyboardInterrupt at an arbitrary point, or
    death without any clean-up for SIGTERM). The previous handlers come back at exit."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        # Handlers can only be set in the main thread; elsewhere (a test calling a
        # command in-process) the defaults stay.
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._note)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _note(self, number: int, frame) -> None:
        self.received.append(number)


class _StartedRelay:
    """The node's task_status: the moment it reports serving, `on_started(value)` runs
    first (in the node's task, before anything else can run), then the nursery hears."""

    def __init__(self, inner, on_started: Callable[[object], None]) -> None:
        self._inner = inner
        self._on_started = on_started

    def started(self, value=None) -> None:
        self._on_started(value)
        self._inner.started(value)


async def serve_until_stopped(run, before_stop: Callable[[], Awaitable[None]], on_started: Callable[[object], None],
                              early: StopSignals, node_id: int | None = None,
                              finish_starting_s: float = 0.0) -> int | None:
    """Runs `run(task_status=...)` until it returns by itself or a stop signal arrives;
    `on_started(value)` gets what the node reported once it serves (its port). Returns the
    signal's number, or None when the node ended by itself.

    A signal before the node serves stops it at once, unless `finish_starting_s`: then it
    may finish starting for that long first (and hand over as a serving node would)."""
    stopped_by: int | None = None
    serving = trio.Event()

    def started(value) -> None:
        serving.set()
        on_started(value)

    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            async def serve(task_status=trio.TASK_STATUS_IGNORED) -> None:
                await run(task_status=_StartedRelay(task_status, started))
                nursery.cancel_scope.cancel()  # the node ended by itself (a broker's shutdown)

            async def watch() -> None:
                nonlocal stopped_by
                if early.received:
                    stopped_by = early.received[0]
                else:
                    async for number in signals:
                        stopped_by = number
                        break
                log.info(Event.SERVER_STOPPING, node_id=node_id, signal=signal.Signals(stopped_by).name,
                         serving=serving.is_set())
                if not serving.is_set() and finish_starting_s > 0:
                    with trio.move_on_after(finish_starting_s):
                        await serving.wait()
                if serving.is_set():
                    async with trio.open_nursery() as handover:
                        async def cut_short() -> None:
                            async for _ in signals:
                                handover.cancel_scope.cancel()
                                return

                        handover.start_soon(cut_short)
                        await before_stop()
                        handover.cancel_scope.cancel()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await nursery.start(serve)
    log.info(Event.SERVER_STOPPED, node_id=node_id,
             signal=signal.Signals(stopped_by).name if stopped_by is not None else None)
    return stopped_by


def listener_refusal(error: BaseException) -> ListenerBindError | None:
    """The listener's bind failure in `error` (itself or inside exception groups), if any:
    already logged by the listener (net.listener_bind_failed); the caller says it in one
    line and exits non-zero."""
    if isinstance(error, ListenerBindError):
        return error
    if isinstance(error, BaseExceptionGroup):
        matched = error.subgroup(ListenerBindError)
        while isinstance(matched, BaseExceptionGroup):
            matched = matched.exceptions[0]
        return matched
    return None


def refusal_message(refusal: ListenerBindError) -> str:
    """One line for the operator: the address, the cause and, when known, what to do."""
    hint = BIND_HINTS.get(refusal.errno)
    return f"{refusal}; {hint}" if hint else str(refusal)
