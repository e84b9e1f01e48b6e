"""Fuzzed KRaft frames against live controllers over loopback, as fast as they are taken.

Owns: `blast`, which sends `frames` request frames drawn by `kraft_inputs.fuzz_frame`
(structure-aware requests aimed at each node, mutated bodies, mutated headers, lying
sizes) to every target on many connections at once, reading and counting whatever
comes back, and `BlastStats`, what happened. The checks that the quorum survived are
the caller's (bench/bench_kraft_fuzz.py, tests/e2e/test_kraft_fuzz_live.py): they
know how their processes were started.

Rules kept here:
- Only 127.0.0.1. Every connection sends a bounded number of frames, then half-closes
  and reads until the server closes or `DRAIN_TIMEOUT_S` passes; a frame under a lying
  size ends its connection (everything after it would be read as its body).
- Each connection draws from its own `random.Random(f"{seed}/{index}")`, so a seed
  names the frames each connection sent (their interleaving is the scheduler's).
- Bounded in frames and in time (`time_limit_s`); a refused connect is counted, not
  retried in a loop.
"""

from __future__ import annotations

import random
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

import trio

from .kraft_inputs import Aim, RandomChooser, fuzz_frame

HOST = "127.0.0.1"
MAX_FRAMES_PER_CONNECTION = 400
DRAIN_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 5.0
READ_CHUNK_BYTES = 65536

_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class LiveTarget:
    node_id: int
    port: int
    aim: Aim


@dataclass
class BlastStats:
    frames_sent: int = 0
    bytes_sent: int = 0
    responses: int = 0
    connections: int = 0
    closed_by_server: int = 0  # a send failed: the server had ended the connection
    drain_timeouts: int = 0  # the server neither answered nor closed within DRAIN_TIMEOUT_S of our EOF
    connect_failures: int = 0
    elapsed_s: float = 0.0
    kinds: Counter = field(default_factory=Counter)
    per_node_frames: Counter = field(default_factory=Counter)

    @property
    def frames_per_s(self) -> float:
        return self.frames_sent / self.elapsed_s if self.elapsed_s else 0.0

    def summary(self) -> str:
        return (f"{self.frames_sent} frames ({self.bytes_sent / 1e6:.1f} MB) in {self.elapsed_s:.1f} s = "
                f"{self.frames_per_s:.0f} frames/s; {self.responses} responses; {self.connections} connections, "
                f"{self.closed_by_server} closed by the server mid-send, {self.drain_timeouts} drain timeouts, "
                f"{self.connect_failures} connect failures; kinds {dict(self.kinds)}")


class _Budget:
    """The frames left to send, shared by every connection."""

    def __init__(self, frames: int, deadline: float) -> None:
        self.left = frames
        self.deadline = deadline

    def take(self) -> bool:
        if self.left <= 0 or time.monotonic() >= self.deadline:
            return False
        self.left -= 1
        return True


async def _count_responses(stream: trio.SocketStream, stats: BlastStats, done: trio.Event) -> None:
    """Reads until EOF, counting whole response frames (the bytes themselves are not checked)."""
    buffer = bytearray()
    try:
        while True:
            chunk = await stream.receive_some(READ_CHUNK_BYTES)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 4:
                size = _SIZE.unpack_from(buffer)[0]
                if size < 0 or len(buffer) < 4 + size:
                    break
                del buffer[:4 + size]
                stats.responses += 1
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        done.set()


async def _connection(target: LiveTarget, chooser: RandomChooser, budget: _Budget, stats: BlastStats) -> bool:
    """One connection's life; False once the target refuses connections."""
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(HOST, target.port)
    except (OSError, trio.TooSlowError):
        stats.connect_failures += 1
        return False
    stats.connections += 1
    async with stream, trio.open_nursery() as nursery:
        drained = trio.Event()
        nursery.start_soon(_count_responses, stream, stats, drained)
        for correlation_id in range(chooser.integer(1, MAX_FRAMES_PER_CONNECTION)):
            if not budget.take():
                break
            frame = fuzz_frame(chooser, target.aim, correlation_id)
            try:
                await stream.send_all(frame.frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                stats.closed_by_server += 1
                budget.left += 1  # not sent: another connection sends one in its place
                break
            stats.frames_sent += 1
            stats.bytes_sent += len(frame.frame)
            stats.kinds[frame.kind] += 1
            stats.per_node_frames[target.node_id] += 1
            if frame.kind == "lying_size":
                break
        try:
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        with trio.move_on_after(DRAIN_TIMEOUT_S) as scope:
            await drained.wait()
        if scope.cancelled_caught:
            stats.drain_timeouts += 1
        nursery.cancel_scope.cancel()
    return True


async def _worker(target: LiveTarget, index: int, seed: int, budget: _Budget, stats: BlastStats) -> None:
    chooser = RandomChooser(random.Random(f"{seed}/{target.node_id}/{index}"))
    while budget.left > 0 and time.monotonic() < budget.deadline:
        if not await _connection(target, chooser, budget, stats):
            return


async def blast(targets: list[LiveTarget], frames: int, connections_per_node: int, seed: int,
                time_limit_s: float) -> BlastStats:
    """Sends `frames` fuzzed frames spread over `connections_per_node` concurrent connections
    to each target; returns when they are sent (and their connections drained) or the time is up."""
    stats = BlastStats()
    started = time.monotonic()
    budget = _Budget(frames, started + time_limit_s)
    async with trio.open_nursery() as nursery:
        for target in targets:
            for index in range(connections_per_node):
                nursery.start_soon(_worker, target, index, seed, budget, stats)
    stats.elapsed_s = time.monotonic() - started
    return stats
