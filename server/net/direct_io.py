"""Writing and reading a plain TCP socket without trio's scheduling rounds.

Owns: `write_now` (as much of a payload as the socket takes at once),
`send_all_now` (that, then trio's `send_all` for any rest) and `read_now` (what
the socket holds now, or None). trio's `send_all`
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
A direct read reports what trio's `receive_some` would: a socket another task
closed is `ClosedResourceError`, any other failure `BrokenResourceError`. When
to wait and when to yield around a read is the caller's choice (the listener's
reader and a peer's read loop choose differently).
"""

from __future__ import annotations

import errno
import os

import trio

# The errnos of a descriptor another task closed: trio reports that as ClosedResourceError.
_CLOSED_SOCKET_ERRNOS = frozenset((errno.EBADF, errno.ENOTSOCK))


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


def read_now(sock: trio.socket.SocketType, max_bytes: int) -> bytes | None:
    """At most `max_bytes` read straight from `sock` (b"" at the end of the stream), or
    None when nothing is there yet. The descriptor is read in the same synchronous step
    as the read: a socket closed meanwhile (fileno -1) fails here rather than reaching a
    reused one."""
    try:
        return os.read(sock.fileno(), max_bytes)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno in _CLOSED_SOCKET_ERRNOS:
            raise trio.ClosedResourceError("this socket was already closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
