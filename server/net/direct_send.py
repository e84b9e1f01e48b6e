"""Writing small answers to a plain TCP socket without a scheduling round.

Owns: `write_now` (as much of a payload as the socket takes at once) and
`send_all_now` (that, then trio's `send_all` for any rest). trio's `send_all`
ends every send with a checkpoint, a full pass of the scheduler; for the
answers a controller sends most (an ApiVersions answer, a Fetch answer, a
client's reply) that pass is a measurable share of the whole request's cost.
The socket is non-blocking (trio's), so a write never waits: what it does not
take goes through `send_all`, which waits for room.

Rules kept here: only a `trio.SocketStream` is written directly (TLS and
in-memory streams always go through `send_all`); the descriptor is read from
the stream at each write, in the same synchronous step as the write, so a
stream closed by another task (fileno -1) fails the write rather than reaching
a descriptor the process has since reused; a write error is the stream's
`BrokenResourceError`, as `send_all` raises it. Callers keep trio's rule of one
sender per stream at a time: a direct write bypasses `send_all`'s check.
"""

from __future__ import annotations

import os

import trio


def write_now(stream: trio.abc.SendStream, data) -> int:
    """Bytes of `data` the socket took at once (0: full, or not a plain TCP stream)."""
    if stream.__class__ is not trio.SocketStream:
        return 0
    try:
        return os.write(stream.socket.fileno(), data)
    except BlockingIOError:
        return 0
    except OSError as exc:
        raise trio.BrokenResourceError(f"socket write failed: {exc}") from exc


async def send_all_now(stream: trio.abc.SendStream, data: bytes) -> None:
    """`stream.send_all(data)`, without its scheduling round when the socket takes it all."""
    sent = write_now(stream, data)
    if sent < len(data):
        await stream.send_all(memoryview(data)[sent:] if sent else data)
