"""The trio TCP listener: the only code in kraftwerk that touches sockets.

Owns: accepting connections, reading frames (`FrameDecoder`), handing each
request to the dispatcher, and writing responses back *in request order*
while later requests on the same connection are already being worked on
(pipelining).

Rules kept here:
- Bounded: at most `connection_max_in_flight_requests` requests per
  connection are between "read" and "written"; the reader stops reading
  when the bound is reached, so a client cannot queue unbounded work.
- A connection's failure never touches another: every problem (bad frame,
  unknown API, decode error, idle timeout, reset) is logged with a stable
  event name and ends *that* connection only.
- Responses that are ready synchronously (reads of controller state) skip
  task creation entirely; only requests that wait for the controller loop get
  a task.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import trio

from server.net.framing import FrameDecoder, FrameError
from server.security.model import ANONYMOUS, KafkaPrincipal
from server.observability import Event, get_logger

if TYPE_CHECKING:
    from server.dispatch import Dispatcher

RECEIVE_CHUNK_BYTES = 65536

log = get_logger("net")


class CloseConnection(Exception):
    """Raised by the dispatcher: stop serving this connection (already logged)."""


class PendingResponse:
    """A response that a task is still producing; the writer waits on it in order."""

    __slots__ = ("event", "payload")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.payload: bytes | None = None  # None after the event = close the connection

    def set(self, payload: bytes | None) -> None:
        self.payload = payload
        self.event.set()


class Connection:
    __slots__ = ("connection_id", "peer", "stream", "client_software", "cancel_scope", "closing", "in_flight",
                 "max_in_flight", "principal", "listener_name", "security_protocol", "sasl")

    def __init__(self, connection_id: int, peer: str, stream: trio.abc.Stream, *,
                 listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT") -> None:
        self.connection_id = connection_id
        self.peer = peer
        self.stream = stream
        # Who the client is (issue 8): User:ANONYMOUS until TLS or SASL says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        # The SASL exchange on a SASL_* listener (server.security.sasl); None elsewhere.
        # Until it has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
        # are served (the dispatcher enforces it).
        self.sasl = None
        # (name, version) from ApiVersions v3+, for logs.
        self.client_software: tuple[str, str] | None = None
        # Set while the connection is served: cancelling it ends the connection.
        self.cancel_scope: trio.CancelScope | None = None
        # A graceful close was asked for: end once every request read so far is answered.
        self.closing = False
        self.in_flight: trio.Semaphore | None = None
        self.max_in_flight = 0

    @property
    def host(self) -> str:
        """The client's address without the port (what ACLs name as the host)."""
        return self.peer.rpartition(":")[0] or self.peer

    @property
    def authenticated(self) -> bool:
        """True unless this is a SASL listener whose exchange has not completed."""
        return self.sasl is None or self.sasl.authenticated

    @property
    def idle(self) -> bool:
        """No request is between "read" and "written"."""
        return self.in_flight is None or self.in_flight.value == self.max_in_flight

    def close(self) -> None:
        """Ends the connection gracefully: at once if no request is in flight, otherwise
        right after the last answer is written. Requests that arrive meanwhile are not
        served (the client sees the connection close and retries elsewhere or later)."""
        self.closing = True
        if self.idle and self.cancel_scope is not None:
            self.cancel_scope.cancel()

    def close_if_done(self) -> None:
        if self.closing and self.idle and self.cancel_scope is not None:
            self.cancel_scope.cancel()


class ConnectionRegistry:
    """The connections a listener is serving, so a node can close them all at once
    (a broker does after a metadata.version change, so that clients reconnect and
    see the new ApiVersions: KIP-778)."""

    def __init__(self) -> None:
        self._open: dict[int, Connection] = {}
        self.closed_by_request = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, conn: Connection) -> None:
        self._open[conn.connection_id] = conn

    def discard(self, conn: Connection) -> None:
        self._open.pop(conn.connection_id, None)

    def close_all(self) -> int:
        """Closes every open connection gracefully (see Connection.close); returns how many."""
        conns = list(self._open.values())
        for conn in conns:
            conn.close()
        self.closed_by_request += len(conns)
        return len(conns)


class _Outbox:
    """Shared by a connection's reader and writer: how many answers the writer
    still has to write. While it is zero the reader writes ready answers itself
    (saving two task switches per request); otherwise it queues them behind the
    writer's, which keeps responses in request order and means the two tasks
    never send at the same time."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = 0


async def _writer(conn: Connection, responses: trio.MemoryReceiveChannel, done: trio.Event,
                  in_flight: trio.Semaphore, outbox: _Outbox, close_connection) -> None:
    """Writes queued responses in request order, coalescing ready ones.

    Releases one `in_flight` token per response once it has been sent. When it
    stops for any reason (a handler asked to close, the peer went away, or the
    reader closed the channel and everything was flushed) it ends the whole
    connection, so a reader blocked on a token or a socket read never lingers."""
    stream = conn.stream

    async def send(chunks: list[bytes]) -> None:
        await stream.send_all(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        for _ in chunks:
            in_flight.release()
        outbox.queued -= len(chunks)
        conn.close_if_done()

    try:
        async for item in responses:
            if item.__class__ is PendingResponse:
                await item.event.wait()
                item = item.payload
                if item is None:
                    return
            chunks = [item]
            # Coalesce whatever else is already ready into one send.
            while True:
                try:
                    nxt = responses.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
                if nxt.__class__ is PendingResponse:
                    if not nxt.event.is_set():
                        await send(chunks)
                        chunks = []
                        await nxt.event.wait()
                    if nxt.payload is None:
                        if chunks:
                            await send(chunks)
                        return
                    chunks.append(nxt.payload)
                else:
                    chunks.append(nxt)
            if chunks:
                await send(chunks)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        done.set()
        close_connection()


async def serve_connection(conn: Connection, dispatcher: "Dispatcher") -> None:
    config = dispatcher.config
    decoder = FrameDecoder(config.socket_request_max_bytes)
    idle_seconds = config.connections_max_idle_ms / 1000
    send_channel, receive_channel = trio.open_memory_channel(config.connection_max_in_flight_requests)
    writer_done = trio.Event()
    # One token per request between "taken off the connection" and "written":
    # the reader takes a token before dispatching; whoever writes the answer
    # returns it. With no token left the reader stops reading.
    in_flight = trio.Semaphore(config.connection_max_in_flight_requests)
    outbox = _Outbox()
    stream = conn.stream
    reason = "eof"

    async def write_directly(chunks: list[bytes]) -> None:
        await stream.send_all(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        for _ in chunks:
            in_flight.release()
        conn.close_if_done()

    conn.in_flight = in_flight
    conn.max_in_flight = config.connection_max_in_flight_requests
    async with trio.open_nursery() as nursery:
        conn.cancel_scope = nursery.cancel_scope
        if conn.closing:
            nursery.cancel_scope.cancel()
        nursery.start_soon(_writer, conn, receive_channel, writer_done, in_flight, outbox,
                           nursery.cancel_scope.cancel)
        # One idle scope for the whole connection, its deadline pushed forward
        # at most once a second: the timeout fires between idle and idle+1 s
        # after the last request, without a new scope per read.
        idle = trio.CancelScope(deadline=trio.current_time() + idle_seconds + 1)
        try:
            with idle:
                while True:
                    data = await stream.receive_some(RECEIVE_CHUNK_BYTES)
                    if not data:
                        if decoder.in_frame:
                            reason = "disconnected_mid_request"
                            log.warning(Event.DISCONNECTED_MID_REQUEST, connection=conn.connection_id,
                                        peer=conn.peer, buffered_bytes=decoder.buffered_bytes)
                        break
                    now = trio.current_time()
                    if idle.deadline - now < idle_seconds:
                        idle.deadline = now + idle_seconds + 1
                    decoder.receive_data(data)
                    ready: list[bytes] = []
                    while True:
                        frame = decoder.next_frame()
                        if frame is None or conn.closing:
                            break
                        try:
                            in_flight.acquire_nowait()
                        except trio.WouldBlock:
                            if ready:  # they hold tokens: write them before waiting for more
                                await write_directly(ready)
                                ready = []
                            await in_flight.acquire()
                        item = dispatcher.dispatch(conn, frame, nursery)
                        if item.__class__ is bytes and outbox.queued == 0:
                            ready.append(item)
                            continue
                        if ready:
                            # Nothing is queued, so these answers come first.
                            await write_directly(ready)
                            ready = []
                        outbox.queued += 1
                        try:
                            send_channel.send_nowait(item)
                        except trio.WouldBlock:  # cannot happen with the token bound; be safe
                            await send_channel.send(item)
                    if ready:
                        await write_directly(ready)
            if idle.cancelled_caught:
                reason = "idle"
                log.info(Event.CONNECTION_IDLE_TIMEOUT, connection=conn.connection_id, peer=conn.peer,
                         idle_ms=config.connections_max_idle_ms)
        except FrameError as exc:
            reason = "frame_rejected"
            log.warning(Event.FRAME_REJECTED, connection=conn.connection_id, peer=conn.peer, error=str(exc))
            nursery.cancel_scope.cancel()
        except CloseConnection:
            reason = "protocol_error"
            nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            reason = "reset"
            nursery.cancel_scope.cancel()
        finally:
            send_channel.close()
        if reason in ("eof", "disconnected_mid_request"):
            # Let the writer flush answers to requests that arrived before EOF
            # (a client may half-close after its last request), but bounded.
            with trio.move_on_after(idle_seconds):
                await writer_done.wait()
        nursery.cancel_scope.cancel()
    log.debug(Event.CONNECTION_CLOSED, connection=conn.connection_id, peer=conn.peer, reason=reason)


async def serve_listener(dispatcher: "Dispatcher", host: str, port: int, *,
                         registry: ConnectionRegistry | None = None,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listens on host:port; reports the bound listeners through task_status. Open
    connections are kept in `registry` when one is given."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    ids = itertools.count(1)
    metrics = dispatcher.metrics

    async def handler(stream: trio.SocketStream) -> None:
        try:
            peer_address = stream.socket.getpeername()
            peer = f"{peer_address[0]}:{peer_address[1]}"
        except OSError:
            peer = "unknown"
        conn = Connection(next(ids), peer, stream)
        metrics.connections.inc()
        log.debug(Event.CONNECTION_OPENED, connection=conn.connection_id, peer=peer)
        if registry is not None:
            registry.add(conn)
        try:
            await serve_connection(conn, dispatcher)
        except Exception:  # a bug in our code: log it, keep every other connection alive
            log.exception(Event.HANDLER_FAILED, connection=conn.connection_id, peer=peer)
        finally:
            if registry is not None:
                registry.discard(conn)
            metrics.connections.dec()
            with trio.move_on_after(1):
                await stream.aclose()

    task_status.started(listeners)
    await trio.serve_listeners(handler, listeners)
