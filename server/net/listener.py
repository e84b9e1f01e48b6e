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
  a task. The answers of one received chunk that are ready together leave in
  one send. A chunk's whole frames are taken at once where no per-frame limit
  applies (`FrameDecoder.take_frames`), and the node's views the dispatcher
  judges them by are read once per synchronous stretch (`NodeViews`). A chunk
  that is exactly one whole frame (a client waiting for each answer) is served
  without the decoder, under the same limits.
- Hardening: connections over `max.connections` / `max.connections.per.ip`
  are closed at accept; a TLS handshake must finish within
  `kraftwerk.ssl.handshake.timeout.ms`; a frame whose first byte arrived must be
  complete within `kraftwerk.request.receive.timeout.ms` (slowloris); a frame may be
  at most `sasl.server.max.receive.size` bytes until a SASL client has
  authenticated; with `queued.max.request.bytes` set, a frame's declared size is
  reserved from the node's pool before its body is read, and the connection is not
  read while it cannot be (Kafka mutes the channel); an async request unanswered
  after `kraftwerk.request.timeout.ms` closes its connection (the handlers' error
  shapes differ per API, so kraftwerk does not invent a response).
- A graceful close (`Connection.close`, `ConnectionRegistry.close_stale`) never drops
  a frame it has read: the connection keeps serving until no request is between
  "read" and "written" and no byte of a frame is buffered, and ends at that moment.
- The requests of one connection that a task answers start in request order: each
  such task takes its first step before the next frame is dispatched (a scheduling
  round after starting it, when more frames of the chunk follow), so whatever its
  synchronous start does (a SASL step, a command handed to the controller loop)
  happens in the order the client sent the requests, as Kafka processes them. Answers
  are written straight to a plain TCP socket when it takes them at once
  (server/net/direct_io.py), which yields to no other task; requests are read
  straight from it, and after the reader wrote answers itself the read's checkpoint
  comes before the read (`_receiver`): a client whose next request arrives while
  other connections are served is read without a wait. An answer still being
  produced that is next in line, with nothing queued before it, is handed over by
  the writer to the task that completes it (`PendingResponse.set`): written in that
  task's step, not in a wake-up of the writer; the writer takes it back whenever
  order, a partial write, a close or the request timeout needs it.
- Each connection remembers the API version ranges ApiVersions told it
  (`Connection.advertised`): what the dispatcher judges its requests by after a
  metadata.version change, and what decides whether the change closes it.
"""

from __future__ import annotations

import itertools
import math
import ssl
import struct
from dataclasses import replace
from typing import TYPE_CHECKING

import trio
from prometheus_client import CollectorRegistry

from server.config import SASL_PROTOCOLS, TLS_PROTOCOLS, Listener, ServerConfig
from server.net.direct_io import read_now, send_all_now, write_now
from server.net.framing import SIZE_PREFIX_BYTES, FrameDecoder, FrameError
from server.net.limits import NetLimits
from server.security.tls import certificate_principal_name, server_ssl_context
from server.security.model import ANONYMOUS, KafkaPrincipal
from server.security.sasl import new_sasl_session
from server.observability import Event, get_logger

if TYPE_CHECKING:
    from server.dispatch import Dispatcher

RECEIVE_CHUNK_BYTES = 65536
_SIZE = struct.Struct(">i")
# What the writer's wait beside a handed-over answer saw when the reader closed the channel.
_END_OF_RESPONSES = object()

log = get_logger("net")


class CloseConnection(Exception):
    """Raised by the dispatcher: stop serving this connection (already logged)."""


class ListenerBindError(OSError):
    """A listener could not bind its address (in use, not local, not permitted): the node
    cannot serve. One line for the operator, naming the address; `errno` is the cause's."""

    def __init__(self, listener: str, host: str, port: int, cause: OSError) -> None:
        reason = (cause.strerror or str(cause)).lower()
        super().__init__(cause.errno, reason)
        self.listener, self.host, self.port, self.reason = listener, host, port, reason

    def __str__(self) -> str:
        return f"cannot listen on {self.host}:{self.port} (listener {self.listener}): {self.reason}"


async def open_listeners(name: str, host: str, port: int) -> list[trio.SocketListener]:
    """trio's listeners on host:port; a bind failure is logged once and raised as
    ListenerBindError (start-up cannot go on without the port: the operator gets one
    line naming the address, not a traceback)."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        error = ListenerBindError(name, host, port, exc)
        log.error(Event.LISTENER_BIND_FAILED, listener=name, host=host, port=port, error=error.reason)
        raise error from exc


class PendingResponse:
    """A response that a task is still producing; the writer waits on it in order.

    When it is the next answer the connection owes and the writer has nothing else to
    write, the writer hands it over (`deliver`) instead of waiting for it: `set` then
    writes it to the socket in the completing task's own step (the Raft driver's for a
    Fetch answer, the handler's for a write), with no wake-up of the writer. What the
    socket does not take at once, and a close, go back to the writer."""

    __slots__ = ("event", "payload", "created_at", "deliver", "written")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.payload: bytes | None = None  # None after the event = close the connection
        # When the request was read: kraftwerk.request.timeout.ms counts from here.
        self.created_at = trio.current_time()
        # Set by the writer while the answer is handed over to its completer.
        self.deliver = None
        # The whole answer left through `deliver` (its token is back).
        self.written = False

    def set(self, payload: bytes | None) -> None:
        self.payload = payload
        deliver = self.deliver
        if deliver is not None:
            self.deliver = None
            deliver(self)
        self.event.set()


# Why a graceful close was asked for (Connection.close_reason).
CLOSE_REQUESTED = "requested"
CLOSE_STALE_API_VERSIONS = "stale_api_versions"
# A close because a metadata.version change narrowed what a connection's ApiVersions
# answer offered waits until the connection has been idle this long: the client reads
# its last answer well before the end of the stream reaches it (kafka-python drops an
# answer that arrives in the same read as the EOF), and a client that keeps sending is
# never cut off between two requests. Its requests meanwhile are judged by what it was
# told (UNSUPPORTED_VERSION for a version the change gated away).
STALE_CLOSE_LINGER_S = 0.5


class Connection:
    __slots__ = ("connection_id", "peer", "host", "stream", "client_software", "cancel_scope", "closing",
                 "close_reason", "in_flight", "max_in_flight", "principal", "listener_name", "security_protocol",
                 "sasl", "advertised", "renegotiates", "decoder", "holding_frames")

    def __init__(self, connection_id: int, peer: str, stream: trio.abc.Stream, *,
                 listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT") -> None:
        self.connection_id = connection_id
        self.peer = peer
        # The client's address without the port (what ACLs name as the host); every
        # request's context carries it, so it is split once.
        self.host = peer.rpartition(":")[0] or peer
        self.stream = stream
        # Who the client is: User:ANONYMOUS until TLS or SASL says otherwise.
        self.principal: KafkaPrincipal = ANONYMOUS
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        # The SASL exchange on a SASL_* listener (server.security.sasl); None elsewhere.
        # Until it has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
        # are served (the dispatcher enforces it).
        self.sasl = None
        # (name, version) from ApiVersions v3+, for logs.
        self.client_software: tuple[str, str] | None = None
        # The {api_key: (min, max)} the last successful ApiVersions on this connection
        # listed; None until the client asked. A request inside these ranges that a later
        # metadata.version change gated away is answered UNSUPPORTED_VERSION, not closed.
        self.advertised: dict[int, tuple[int, int]] | None = None
        # The client is a kraftwerk node (server/net/peer.py): it asks ApiVersions again
        # on this live connection after a metadata.version change (KIP-778), so a change
        # never closes it.
        self.renegotiates = False
        # Set while the connection is served: cancelling it ends the connection.
        self.cancel_scope: trio.CancelScope | None = None
        # A graceful close was asked for: end once every request read so far is answered.
        self.closing = False
        self.close_reason: str | None = None
        self.in_flight: _Tokens | None = None
        self.max_in_flight = 0
        # The reader's FrameDecoder: bytes of a frame in it are a request already read.
        self.decoder: FrameDecoder | None = None
        # The reader waits for an in-flight token with frames it has taken out of the
        # decoder: requests read, not counted anywhere else.
        self.holding_frames = False

    @property
    def authenticated(self) -> bool:
        """True unless this is a SASL listener whose exchange has not completed."""
        return self.sasl is None or self.sasl.authenticated

    @property
    def idle(self) -> bool:
        """No request is between "read" and "written", and no part of one is buffered."""
        if self.holding_frames or (self.in_flight is not None and self.in_flight.value != self.max_in_flight):
            return False
        return self.decoder is None or self.decoder.buffered_bytes == 0

    def close(self, reason: str = CLOSE_REQUESTED) -> None:
        """Ends the connection gracefully: at once if it is idle, otherwise at the first
        moment it is. Requests read meanwhile are served like any other (a frame read is
        never dropped unanswered); only a client that keeps requests in flight all the
        time keeps the connection open."""
        self.closing = True
        self.close_reason = reason
        self.close_if_done()

    def remember_advertised(self, ranges: dict[int, tuple[int, int]]) -> None:
        """ApiVersions told this client `ranges` (kept by reference: the node replaces,
        never mutates, its advertised table). A close pending because an earlier answer
        went stale is called off: the client knows the current versions now."""
        self.advertised = ranges
        self.call_off_stale_close()

    def call_off_stale_close(self) -> bool:
        """Cancels a close pending only because this connection's ApiVersions answer
        went stale; True if there was one."""
        if self.closing and self.close_reason == CLOSE_STALE_API_VERSIONS:
            self.closing = False
            self.close_reason = None
            if self.cancel_scope is not None:
                self.cancel_scope.deadline = math.inf
            return True
        return False

    def close_if_done(self) -> None:
        """Ends a closing connection once it is idle (a stale-answer close: once it has
        been idle for STALE_CLOSE_LINGER_S)."""
        if not (self.closing and self.idle and self.cancel_scope is not None):
            return
        if self.close_reason != CLOSE_STALE_API_VERSIONS:
            self.cancel_scope.cancel()
        elif self.cancel_scope.deadline == math.inf:
            self.cancel_scope.deadline = trio.current_time() + STALE_CLOSE_LINGER_S

    def receiving(self) -> None:
        """Bytes arrived: a lingering stale-answer close waits for the next idle moment."""
        if self.closing and self.close_reason == CLOSE_STALE_API_VERSIONS and self.cancel_scope is not None:
            self.cancel_scope.deadline = math.inf


def within(told: dict[int, tuple[int, int]], current: dict[int, tuple[int, int]]) -> bool:
    """Whether every version in `told` is still in `current`."""
    for api_key, (low, high) in told.items():
        now = current.get(api_key)
        if now is None or now[0] > low or now[1] < high:
            return False
    return True


class ConnectionRegistry:
    """The connections a node's listeners are serving, so a node can close those a
    metadata.version change left with a stale ApiVersions answer (KIP-778: clients
    reconnect and ask again)."""

    def __init__(self) -> None:
        # By identity, not connection id: each listener numbers its connections from 1,
        # and one registry holds every listener's.
        self._open: set[Connection] = set()
        self.closed_by_request = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, conn: Connection) -> None:
        self._open.add(conn)

    def discard(self, conn: Connection) -> None:
        self._open.discard(conn)

    def close_all(self) -> int:
        """Closes every open connection gracefully (see Connection.close); returns how many."""
        conns = list(self._open)
        for conn in conns:
            conn.close()
        self.closed_by_request += len(conns)
        return len(conns)

    def close_stale(self, current: dict[int, tuple[int, int]]) -> int:
        """After a metadata.version change: closes, gracefully and after a linger
        (STALE_CLOSE_LINGER_S of idleness), each connection whose ApiVersions answer
        offered a version `current` (the node's advertised ranges now) no longer allows;
        returns how many it asked to close. Left open: connections that never asked
        (they are judged by the current ranges anyway), whose answer is still within
        the current ranges (an upgrade only adds versions: everything the client may
        send is still served, and closing would only race with its next request), or
        whose client renegotiates on its own. A pending stale close whose connection is
        within the current ranges again (the level moved back) is called off."""
        closed = called_off = 0
        for conn in list(self._open):
            told = conn.advertised
            if told is None or conn.renegotiates:
                continue
            if not within(told, current):
                if not conn.closing:
                    conn.close(CLOSE_STALE_API_VERSIONS)
                    closed += 1
            elif conn.call_off_stale_close():
                called_off += 1
        self.closed_by_request += closed
        if closed or called_off:
            log.info(Event.STALE_CONNECTIONS_CLOSING, connections=closed, called_off=called_off,
                     open_connections=len(self._open))
        return closed


class NodeViews:
    """What the dispatcher judges requests by that only the node's state decides (the
    API versions advertised now; whether reads wait for the read barrier), read from
    the node at most once per synchronous stretch of requests — the frames of one
    received chunk, up to the reader's next await — instead of once per request.
    Between two checkpoints the node's state is changed only by an answers-later
    handler (the Raft driver takes the request in place; the sync handlers only read,
    and async ones only start a task), so the dispatcher drops what it read after
    one; the reader drops it at each receive and each await of its own (`clear`).
    Also kept: the validity token of the last answer memo used (the dispatcher's
    `ApiSpec.answer_memo`s), read from the node the same way."""

    __slots__ = ("ranges", "barrier_needed", "memo", "memo_token")

    def __init__(self) -> None:
        self.ranges: dict[int, tuple[int, int]] | None = None
        self.barrier_needed: bool | None = None
        self.memo = None
        self.memo_token = None

    def clear(self) -> None:
        self.ranges = None
        self.barrier_needed = None
        self.memo = None
        self.memo_token = None


class _Tokens:
    """A connection's in-flight tokens: taken by the reader one per request read (it
    decrements `value` itself while one is free, else awaits `take`), given back
    (several at once) by whoever wrote the answers. Only the reader ever waits for one,
    so this is a counter and a parking lot, cheaper per request than a trio.Semaphore
    (no checkpoint when a token is free, one wake-up per bulk give)."""

    __slots__ = ("value", "_lot", "_waiting")

    def __init__(self, count: int) -> None:
        self.value = count
        self._lot = trio.lowlevel.ParkingLot()
        # The reader is parked in `take` (a flag: asking the lot is a Python-level call).
        self._waiting = False

    async def take(self) -> None:
        while not self.value:
            self._waiting = True
            try:
                await self._lot.park()
            finally:
                self._waiting = False
        self.value -= 1

    def give(self, count: int = 1) -> None:
        self.value += count
        if self._waiting:
            self._lot.unpark_all()


class _Outbox:
    """Shared by a connection's reader and writer: how many answers the writer
    still has to write. While it is zero the reader writes ready answers itself
    (saving two task switches per request); otherwise it queues them behind the
    writer's, which keeps responses in request order and means the two tasks
    never send at the same time."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        self.queued = 0


async def _wait_answer(conn: Connection, pending: PendingResponse, timeout_s: float) -> bool:
    """Waits for an async request's answer; False (logged) when it took longer than
    kraftwerk.request.timeout.ms since the request was read."""
    if not pending.event.is_set():
        with trio.move_on_at(pending.created_at + timeout_s):
            await pending.event.wait()
        if not pending.event.is_set():
            log.warning(Event.REQUEST_TIMED_OUT, connection=conn.connection_id, peer=conn.peer,
                        timeout_ms=round(timeout_s * 1000))
            return False
    return True


async def _writer(conn: Connection, responses: trio.MemoryReceiveChannel, done: trio.Event,
                  in_flight: _Tokens, outbox: _Outbox, close_connection, request_timeout_s: float = math.inf,
                  on_timeout=None) -> None:
    """Writes queued responses in request order, coalescing ready ones.

    Releases one `in_flight` token per response once it has been sent. When it
    stops for any reason (a handler asked to close, the peer went away, or the
    reader closed the channel and everything was flushed) it ends the whole
    connection, so a reader blocked on a token or a socket read never lingers.

    An answer still being produced that is next in line, with nothing before it to
    write, is handed over to its completer on a plain TCP stream (`PendingResponse`):
    the writer then waits for the next queued response instead, and takes the answer
    back (waiting for it as before) when one comes first, when the socket did not take
    all of it, when it closes the connection, or at its request timeout. So the usual
    answer of a waiting client or a parked Fetch costs the writer no wake-up, and
    leaves in the very step that produced it."""
    stream = conn.stream
    direct = stream.__class__ is trio.SocketStream
    # The answer handed over (None: none), and the scope of the wait beside it.
    handed: PendingResponse | None = None
    wait_scope: trio.CancelScope | None = None

    def left(count: int) -> None:
        # `count` answers left: their tokens go back, and a closing connection may end.
        in_flight.give(count)
        outbox.queued -= count
        conn.close_if_done()

    async def send(chunks: list[bytes]) -> None:
        await send_all_now(stream, chunks[0] if len(chunks) == 1 else b"".join(chunks))
        left(len(chunks))

    async def answered(slot: PendingResponse) -> bool:
        """Waits for `slot`'s answer; False (after `on_timeout`) at the request timeout."""
        if await _wait_answer(conn, slot, request_timeout_s):
            return True
        if on_timeout is not None:
            on_timeout()
        return False

    def deliver(slot: PendingResponse) -> None:
        # In the completer's task, while this writer waits for its next response: no
        # other task writes to the stream now (the reader writes only with nothing queued,
        # and this answer is). Never raises into the completer.
        payload = slot.payload
        if payload is not None:
            try:
                sent = write_now(stream, payload)
            except trio.BrokenResourceError:
                sent = 0  # the writer's own send reports it
            if sent == len(payload):
                slot.written = True
                left(1)
                return
            if sent:
                slot.payload = payload[sent:]
        # The rest, or the close, is the writer's: wake it.
        if wait_scope is not None:
            wait_scope.cancel()

    async def take_back(slot: PendingResponse) -> bool:
        """Waits for a handed-over answer and writes what `deliver` did not; False
        when the connection is to end (closed by the handler, or timed out)."""
        slot.deliver = None
        if slot.written:
            return True
        if not await answered(slot):
            return False
        if slot.written:
            return True
        if slot.payload is None:
            return False
        await send([slot.payload])
        return True

    try:
        while True:
            if handed is None:
                try:
                    item = await responses.receive()
                except trio.EndOfChannel:
                    return
            else:
                item = None
                with trio.CancelScope(deadline=handed.created_at + request_timeout_s) as wait_scope:
                    try:
                        item = await responses.receive()
                    except trio.EndOfChannel:
                        item = _END_OF_RESPONSES
                wait_scope = None
                slot, handed = handed, None
                if not await take_back(slot):
                    return
                if item is None:
                    continue
                if item is _END_OF_RESPONSES:
                    return
            if item.__class__ is PendingResponse:
                if not item.event.is_set() and direct:
                    item.deliver = deliver
                    handed = item
                    continue
                if not await answered(item):
                    return
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
                        if direct:
                            nxt.deliver = deliver
                            handed = nxt
                            break
                        if not await answered(nxt):
                            return
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
        if handed is not None:
            handed.deliver = None
        done.set()
        close_connection()


def _receiver(stream: trio.abc.ReceiveStream):
    """`receive(answered)`: one read of at most RECEIVE_CHUNK_BYTES from `stream`, a
    checkpoint like `receive_some`. A plain TCP stream is read straight from its socket.
    `answered`: the reader has just written answers itself, so the client's next request
    is on its way; then the checkpoint comes *before* the read: the other ready tasks
    run first, by which time that request has often arrived and the read finds it
    instead of failing and waiting for the socket (a failed read, an epoll
    registration and a wake-up per request, the largest cost of one-request chunks).
    Otherwise (an answer still being worked on) it reads first, as `receive_some` does,
    and yields after a read that did not wait. Other streams (TLS, in-memory) use
    `receive_some`."""
    if stream.__class__ is not trio.SocketStream:
        receive_some = stream.receive_some

        async def receive(answered: bool) -> bytes:
            return await receive_some(RECEIVE_CHUNK_BYTES)
        return receive
    sock = stream.socket
    checkpoint = trio.lowlevel.checkpoint
    checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
    cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
    wait_readable = trio.lowlevel.wait_readable

    async def receive_direct(answered: bool) -> bytes:
        if answered:
            await checkpoint()
        else:
            await checkpoint_if_cancelled()
        waited = answered
        while True:
            data = read_now(sock, RECEIVE_CHUNK_BYTES)
            if data is not None:
                if not waited:
                    # Shielded: the bytes are read, a cancellation now would drop them.
                    await cancel_shielded_checkpoint()
                return data
            await wait_readable(sock.fileno())
            waited = True
    return receive_direct


def _setting(config, name: str):
    # Stand-in nodes of some tests carry a config with the pre-issue-8 fields only.
    return getattr(config, name, ServerConfig.__dataclass_fields__[name].default)


async def serve_connection(conn: Connection, dispatcher: "Dispatcher", limits: NetLimits | None = None) -> None:
    config = dispatcher.config
    decoder = FrameDecoder(config.socket_request_max_bytes)
    # The frame cap follows the SASL state: small until the client has authenticated.
    capped_for_sasl = False
    if not conn.authenticated:
        decoder.set_max_frame_bytes(_setting(config, "sasl_server_max_receive_size"), "sasl.server.max.receive.size")
        capped_for_sasl = True
    pool = limits.memory if limits is not None and limits.memory.bounded else None
    reserved = 0  # bytes of the pool held for the frame being received
    receive_timeout_ms = _setting(config, "request_receive_timeout_ms")
    receive_timeout_s = receive_timeout_ms / 1000
    frame_deadline = math.inf  # when the frame being received must be complete
    idle_seconds = config.connections_max_idle_ms / 1000
    send_channel, receive_channel = trio.open_memory_channel(config.connection_max_in_flight_requests)
    writer_done = trio.Event()
    # One token per request between "taken off the connection" and "written":
    # the reader takes a token before dispatching; whoever writes the answer
    # returns it. With no token left the reader stops reading.
    in_flight = _Tokens(config.connection_max_in_flight_requests)
    outbox = _Outbox()
    views = NodeViews()
    stream = conn.stream
    receive = _receiver(stream)
    reason = "eof"

    async def write_directly(chunks: list[bytes], may_close: bool = True) -> None:
        await send_all_now(stream, chunks[0] if len(chunks) == 1 else b"".join(chunks))
        in_flight.give(len(chunks))
        if may_close and conn.closing:
            conn.close_if_done()

    def release_memory() -> None:
        nonlocal reserved
        if reserved:
            pool.release(reserved)
            reserved = 0
            if limits is not None:
                limits.memory_reserved.set(pool.reserved_bytes)

    def count_timeout() -> None:
        if limits is not None:
            limits.timeouts.labels("request").inc()

    conn.in_flight = in_flight
    conn.max_in_flight = config.connection_max_in_flight_requests
    conn.decoder = decoder
    async with trio.open_nursery() as nursery:
        conn.cancel_scope = nursery.cancel_scope
        conn.close_if_done()
        nursery.start_soon(_writer, conn, receive_channel, writer_done, in_flight, outbox,
                           nursery.cancel_scope.cancel, _setting(config, "request_timeout_ms") / 1000, count_timeout)
        # One idle scope for the whole connection, its deadline pushed forward
        # at most once a second: the timeout fires between idle and idle+1 s
        # after the last request, without a new scope per read. Only this loop
        # moves it, so a local copy saves reading it back per chunk.
        # The run's clock, read per chunk through its bound method (trio.current_time()
        # looks the runner up first).
        clock_now = trio.lowlevel.current_clock().current_time
        idle_deadline = clock_now() + idle_seconds + 1
        idle = trio.CancelScope(deadline=idle_deadline)
        # Whether part of a frame is buffered: read at the end of each chunk's work,
        # nothing changes it before the next receive.
        in_frame = False
        # Whether the reader wrote answers itself since the last receive (see _receiver).
        answered = False
        try:
            with idle:
                while True:
                    if in_frame:
                        # Part of a frame is here: the rest must follow in time (slowloris).
                        with trio.move_on_at(frame_deadline) as receive_scope:
                            data = await receive(answered)
                        if receive_scope.cancelled_caught:
                            reason = "receive_timeout"
                            log.warning(Event.REQUEST_RECEIVE_TIMEOUT, connection=conn.connection_id,
                                        peer=conn.peer, buffered_bytes=decoder.buffered_bytes,
                                        timeout_ms=receive_timeout_ms)
                            if limits is not None:
                                limits.timeouts.labels("receive").inc()
                            break
                    else:
                        data = await receive(answered)
                    answered = False
                    if not data:
                        if in_frame:
                            reason = "disconnected_mid_request"
                            log.warning(Event.DISCONNECTED_MID_REQUEST, connection=conn.connection_id,
                                        peer=conn.peer, buffered_bytes=decoder.buffered_bytes)
                        break
                    now = clock_now()
                    if idle_deadline - now < idle_seconds:
                        idle_deadline = idle.deadline = now + idle_seconds + 1
                    if conn.closing:
                        conn.receiving()
                    if (not in_frame and pool is None and not capped_for_sasl and in_flight.value
                            and not outbox.queued and len(data) >= SIZE_PREFIX_BYTES
                            and _SIZE.unpack_from(data)[0] == len(data) - SIZE_PREFIX_BYTES
                            and len(data) - SIZE_PREFIX_BYTES <= decoder.max_frame_bytes):
                        # The usual chunk of a client waiting for each answer: exactly one
                        # whole frame, nothing buffered before it, a token free, nothing
                        # queued. Served without the decoder; the same limits hold.
                        in_flight.value -= 1
                        # bytes (some streams hand out bytearrays; bytes() of bytes is no copy).
                        # No views: a stretch of one request reads the node directly.
                        item = dispatcher.dispatch(conn, bytes(data[SIZE_PREFIX_BYTES:]), nursery)
                        if item.__class__ is bytes:
                            await send_all_now(stream, item)
                            answered = True
                            # The token back; only this task (the reader) ever waits for one.
                            in_flight.value += 1
                            if conn.closing:
                                conn.close_if_done()
                        else:
                            outbox.queued += 1
                            try:
                                send_channel.send_nowait(item)
                            except trio.WouldBlock:  # cannot happen with the token bound; be safe
                                await send_channel.send(item)
                        continue
                    frame_started_now = not in_frame
                    task_started = False  # the receive was a scheduling round of its own
                    decoder.receive_data(data)
                    views.clear()
                    ready: list[bytes] = []
                    while True:
                        if capped_for_sasl and conn.authenticated:
                            decoder.set_max_frame_bytes(config.socket_request_max_bytes, "socket.request.max.bytes")
                            capped_for_sasl = False
                        if pool is None and not capped_for_sasl:
                            # No limit to apply between frames: every whole frame at once.
                            frames = decoder.take_frames()
                            if not frames:
                                break
                        else:
                            if pool is not None and not reserved:
                                size = decoder.pending_frame_size()
                                if size is None:
                                    break
                                if not pool.fits_ever(size):
                                    raise FrameError(f"frame of {size} bytes exceeds queued.max.request.bytes="
                                                     f"{pool.capacity_bytes}")
                                if not pool.try_reserve(size):
                                    # Mute: read nothing more from this connection until the
                                    # pool has room (answers already made go out first).
                                    if ready:
                                        await write_directly(ready)
                                        ready = []
                                        views.clear()
                                    log.info(Event.REQUEST_MEMORY_EXHAUSTED, connection=conn.connection_id,
                                             peer=conn.peer, frame_bytes=size, reserved_bytes=pool.reserved_bytes,
                                             pool_bytes=pool.capacity_bytes)
                                    await pool.reserve(size)
                                    views.clear()
                                    # The wait was the server's, not the client's.
                                    frame_deadline = trio.current_time() + receive_timeout_s
                                reserved = size
                                limits.memory_reserved.set(pool.reserved_bytes)
                            frame = decoder.next_frame()
                            if frame is None:
                                break
                            frames = (frame,)
                        frame_started_now = True  # whatever remains is a new frame
                        for frame in frames:
                            if task_started:
                                # The last frame's task takes its first step before this
                                # frame is dispatched (trio runs the tasks of one scheduling
                                # round in either order).
                                task_started = False
                                await trio.lowlevel.checkpoint()
                                views.clear()
                            # A closing connection still answers this frame: it has been read.
                            try:
                                if in_flight.value:
                                    in_flight.value -= 1
                                else:
                                    if ready:  # they hold tokens: write them before waiting for more
                                        # The frame in hand is not in the decoder any more, so
                                        # the connection may look idle: no graceful close here.
                                        await write_directly(ready, may_close=False)
                                        ready = []
                                        views.clear()
                                    # Frames read but not yet holding a token are in no
                                    # count the idle check sees: they keep it busy meanwhile.
                                    conn.holding_frames = True
                                    await in_flight.take()
                                    conn.holding_frames = False
                                    views.clear()
                                    frame_deadline = trio.current_time() + receive_timeout_s
                                item = dispatcher.dispatch(conn, frame, nursery, views)
                            finally:
                                # Decoded (or refused): its bytes are no longer held.
                                if reserved:
                                    release_memory()
                            if item.__class__ is bytes and not outbox.queued:
                                ready.append(item)
                                continue
                            if ready:
                                # Nothing is queued, so these answers come first.
                                await write_directly(ready)
                                ready = []
                                views.clear()
                            outbox.queued += 1
                            task_started = item.__class__ is not bytes
                            try:
                                send_channel.send_nowait(item)
                            except trio.WouldBlock:  # cannot happen with the token bound; be safe
                                await send_channel.send(item)
                                views.clear()
                    if ready:
                        # write_directly, inlined: this is the path of every chunk.
                        await send_all_now(stream, ready[0] if len(ready) == 1 else b"".join(ready))
                        answered = True
                        in_flight.give(len(ready))
                        if conn.closing:
                            conn.close_if_done()
                    in_frame = decoder.in_frame
                    if frame_started_now and in_frame:
                        frame_deadline = trio.current_time() + receive_timeout_s
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
            release_memory()
        if reason in ("eof", "disconnected_mid_request"):
            # Let the writer flush answers to requests that arrived before EOF
            # (a client may half-close after its last request), but bounded.
            with trio.move_on_after(idle_seconds):
                await writer_done.wait()
        nursery.cancel_scope.cancel()
    log.debug(Event.CONNECTION_CLOSED, connection=conn.connection_id, peer=conn.peer, reason=reason)


def _peer_of(stream: trio.SocketStream) -> str:
    try:
        address = stream.socket.getpeername()
        return f"{address[0]}:{address[1]}"
    except OSError:
        return "unknown"


async def _close_quietly(stream: trio.abc.AsyncResource) -> None:
    with trio.move_on_after(1):
        await stream.aclose()


async def serve_listener(dispatcher: "Dispatcher", host: str, port: int, *,
                         registry: ConnectionRegistry | None = None, listener: Listener | None = None,
                         limits: NetLimits | None = None,
                         task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listens on host:port; reports the bound listeners through task_status. Open
    connections are kept in `registry` when one is given.

    `listener` gives the name and security protocol (default: the node's first
    listener's); `limits` the node's shared connection and memory limits (default:
    limits of this listener alone, from the config)."""
    config: ServerConfig = dispatcher.config
    listener = replace(listener or config.listener, host=host, port=port)
    protocol = listener.security_protocol
    ssl_context: ssl.SSLContext | None = None
    if protocol in TLS_PROTOCOLS:
        ssl_context = server_ssl_context(config.ssl_for(listener.name))
    # Only a SASL_* listener opens a SASL exchange on each connection.
    sasl_session_factory = new_sasl_session if protocol in SASL_PROTOCOLS else None
    if limits is None:
        limits = NetLimits.from_config(config, CollectorRegistry())
    handshake_timeout_s = config.ssl_handshake_timeout_ms / 1000
    listeners = await open_listeners(listener.name, host, port)
    ids = itertools.count(1)
    metrics = dispatcher.metrics

    async def handler(stream: trio.SocketStream) -> None:
        peer = _peer_of(stream)
        client_host = peer.rpartition(":")[0] or peer
        refusal = limits.connections.try_acquire(client_host)
        if refusal is not None:
            log.warning(Event.CONNECTION_REFUSED, listener=listener.name, peer=peer, reason=refusal)
            limits.refused.labels(refusal.partition("=")[0]).inc()
            await _close_quietly(stream)
            return
        conn_stream: trio.abc.Stream = stream
        try:
            principal = ANONYMOUS
            if ssl_context is not None:
                tls = trio.SSLStream(stream, ssl_context, server_side=True)
                try:
                    with trio.fail_after(handshake_timeout_s):
                        await tls.do_handshake()
                except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, OSError) as exc:
                    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
                    log.warning(Event.TLS_HANDSHAKE_FAILED, listener=listener.name, peer=peer,
                                error=("timed out" if isinstance(exc, trio.TooSlowError) else
                                       f"{cause.__class__.__name__}: {cause}"))
                    limits.handshake_failures.labels(listener.name).inc()
                    return
                conn_stream = tls
                if protocol == "SSL":
                    # Kafka's DEFAULT principal mapping: the certificate's subject DN.
                    name = certificate_principal_name(tls.getpeercert())
                    if name is not None:
                        principal = KafkaPrincipal("User", name)
            conn = Connection(next(ids), peer, conn_stream, listener_name=listener.name, security_protocol=protocol)
            conn.principal = principal
            if sasl_session_factory is not None:
                conn.sasl = sasl_session_factory(dispatcher.node, listener.name)
            metrics.connections.inc()
            log.debug(Event.CONNECTION_OPENED, connection=conn.connection_id, peer=peer, listener=listener.name,
                      security_protocol=protocol, principal=str(principal))
            if registry is not None:
                registry.add(conn)
            try:
                await serve_connection(conn, dispatcher, limits)
            except Exception:  # a bug in our code: log it, keep every other connection alive
                log.exception(Event.HANDLER_FAILED, connection=conn.connection_id, peer=peer)
            finally:
                if registry is not None:
                    registry.discard(conn)
                metrics.connections.dec()
        finally:
            limits.connections.release(client_host)
            await _close_quietly(conn_stream)
            if conn_stream is not stream:
                await _close_quietly(stream)

    task_status.started(listeners)
    await trio.serve_listeners(handler, listeners)


async def serve_node_listeners(dispatcher: "Dispatcher", *, registry: ConnectionRegistry | None = None,
                               limits: NetLimits | None = None,
                               task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serves every listener of the node's config with one shared `limits`; reports
    {listener name: bound port} once all are listening (port 0 binds a free port)."""
    config: ServerConfig = dispatcher.config
    if limits is None:
        limits = NetLimits.from_config(config, dispatcher.metrics.registry)
    bound: dict[str, int] = {}
    async with trio.open_nursery() as nursery:
        for item in config.listeners:
            sockets = await nursery.start(
                lambda task_status, item=item: serve_listener(dispatcher, item.host, item.port, registry=registry,
                                                              listener=item, limits=limits, task_status=task_status))
            bound[item.name] = sockets[0].socket.getsockname()[1]
            log.info(Event.LISTENER_STARTED, listener=item.name, security_protocol=item.security_protocol, host=item.host,
                     port=bound[item.name])
        task_status.started(bound)
