"""Outbound connections from one node to another, for controller-to-controller RPCs.

Owns: `PeerConnection`, a long-lived, self-healing connection to one peer
that pipelines requests (many in flight, answers matched by correlation id),
negotiates API versions on every (re)connect, and reconnects with bounded,
jittered exponential backoff.

Rules kept here:
- A request never waits forever: callers give a timeout; when the
  connection drops, every waiting request fails at once with
  `PeerUnavailable`, and the next request waits for the reconnect (bounded by
  its own timeout).
- In-flight requests are bounded (`max_in_flight_requests`); callers wait for a
  slot rather than queue without limit.
- `try_submit` sends without a task when nothing would wait (the Raft driver's
  fetches: a task per request cost scheduling rounds on every commit); its answer
  arrives by callback, exactly once, with the same bounds (timeout, drop).
- The random source for jitter is injected, so tests are reproducible.
- Frames are the declarations' bytes: `RequestEncoder` only reuses what it encoded
  with them (headers; the last Fetch body, with the new offset written in).
"""

from __future__ import annotations

import itertools
import math
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import trio

from protocol.errors import DecodeError, ErrorCode
from protocol.frames import decode_response
from protocol.header import REQUEST_HEADER, request_header_version
from protocol.registry import API_MESSAGES, api_name
from server.net.connect import ConnectError, open_client_stream
from server.net.direct_io import read_now, write_now
from server.net.framing import FrameDecoder, FrameError
from server.security.client_config import ClientSecurity
from server.observability import Event, get_logger

log = get_logger("net.peer")

RESPONSE_MAX_BYTES = 100 * 1024 * 1024
RECEIVE_CHUNK_BYTES = 65536
_INT32 = struct.Struct(">i")
SOFTWARE_NAME = "kraftwerk"
SOFTWARE_VERSION = "0.1.0"


class RequestEncoder:
    """Request frames of one client id. Each (API key, version)'s header is encoded once:
    in every request header version the correlation id is the int32 right after the
    int16 key and version, so a frame is that header with the id written in, then the
    body (the same bytes as `protocol.frames.encode_request`). A follower sends two
    Fetches per commit; encoding each from scratch took about three times as long."""

    def __init__(self, client_id: str | None) -> None:
        self._client_id = client_id
        self._headers: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        # (fields other than the fetch offset, encoded body, where the offset is in it)
        # of the last Fetch encoded (see `_fetch_body`).
        self._fetch: tuple[tuple, bytes, int] | None = None

    def encode(self, api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
        parts = self._headers.get((api_key, version))
        if parts is None:
            request_message = API_MESSAGES[api_key][0]
            header = REQUEST_HEADER.encode(request_header_version(request_message, version), {
                "request_api_key": api_key, "request_api_version": version,
                "correlation_id": 0, "client_id": self._client_id})
            parts = (header[:4], header[8:])
            # Bounded by the APIs and versions a node speaks.
            self._headers[(api_key, version)] = parts
        encoded = self._fetch_body(version, body) if api_key == _FETCH_KEY else None
        if encoded is None:
            encoded = API_MESSAGES[api_key][0].encode(version, body)
        return b"".join((_INT32.pack(4 + len(parts[0]) + len(parts[1]) + len(encoded)), parts[0],
                         _INT32.pack(correlation_id), parts[1], encoded))

    def _fetch_body(self, version: int, body: dict) -> bytes | None:
        """A follower's Fetch body, or None to encode it the general way. The Raft core's
        Fetches (server/raft/messages.py `fetch_request`: one topic, one partition) differ
        from one to the next in the fetch offset alone until the epoch or the log's last
        epoch changes, and the offset is a fixed-width int64: the last such body is kept
        with the offset's position and written with the new offset (the same bytes as the
        declaration's encoder: tests/raft/test_peer_frames.py)."""
        key = _fetch_key(version, body)
        if key is None:
            return None
        offset = body["topics"][0]["partitions"][0]["fetch_offset"]
        if offset.__class__ is not int or not _INT64_MIN <= offset <= _INT64_MAX:
            return None
        cached = self._fetch
        if cached is None or cached[0] != key:
            cached = _fetch_template(version, body, key)
            if cached is None:
                return None
            self._fetch = cached
        template, position = cached[1], cached[2]
        return b"".join((template[:position], _INT64.pack(offset), template[position + 8:]))


_FETCH_KEY = 1
_INT64 = struct.Struct(">q")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_FETCH_FIELDS = frozenset(("cluster_id", "_unknown_tagged_fields", "replica_id", "replica_state", "max_wait_ms",
                           "min_bytes", "max_bytes", "topics"))
_FETCH_TOPIC_FIELDS = frozenset(("topic", "topic_id", "partitions"))
_FETCH_PARTITION_FIELDS = frozenset(("partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch",
                                     "log_start_offset", "partition_max_bytes", "replica_directory_id"))
_REPLICA_STATE_FIELDS = frozenset(("replica_id", "replica_epoch"))
# Distinct in each of their 8 bytes, so the two encodings differ exactly at the offset.
_PROBE_OFFSETS = (0x0102030405060708, 0x1112131415161718)


def _fetch_key(version: int, body: dict) -> tuple | None:
    """Everything of a Fetch body but its fetch offset, as a hashable value (equal keys:
    equal encodings but for the offset), or None for any other shape than the core's."""
    if body.__class__ is not dict or body.keys() != _FETCH_FIELDS:
        return None
    topics, state = body["topics"], body["replica_state"]
    if topics.__class__ is not list or len(topics) != 1 or state.__class__ is not dict \
            or state.keys() != _REPLICA_STATE_FIELDS:
        return None
    topic = topics[0]
    if topic.__class__ is not dict or topic.keys() != _FETCH_TOPIC_FIELDS:
        return None
    partitions = topic["partitions"]
    if partitions.__class__ is not list or len(partitions) != 1:
        return None
    partition = partitions[0]
    if partition.__class__ is not dict or partition.keys() != _FETCH_PARTITION_FIELDS:
        return None
    tagged = body["_unknown_tagged_fields"]
    if tagged.__class__ is not list or any(item.__class__ is not tuple for item in tagged):
        return None
    key = (version, body["cluster_id"], tuple(tagged), body["replica_id"], state["replica_id"],
           state["replica_epoch"], body["max_wait_ms"], body["min_bytes"], body["max_bytes"], topic["topic"],
           topic["topic_id"], partition["partition"], partition["current_leader_epoch"],
           partition["last_fetched_epoch"], partition["log_start_offset"], partition["partition_max_bytes"],
           partition["replica_directory_id"])
    # Only values whose equality means equal bytes (no floats or subclasses that compare
    # equal yet encode differently).
    if any(value.__class__ not in _KEY_TYPES for value in key if value.__class__ is not tuple):
        return None
    return key


_KEY_TYPES = frozenset((int, str, uuid.UUID, type(None)))


def _fetch_template(version: int, body: dict, key: tuple) -> tuple[tuple, bytes, int] | None:
    """(key, body encoded with a probe offset, the offset's position), or None when the
    offset cannot be located (then the body is encoded the general way)."""
    request = API_MESSAGES[_FETCH_KEY][0]
    partition = body["topics"][0]["partitions"][0]
    encodings = []
    for probe in _PROBE_OFFSETS:
        probed = {**body, "topics": [{**body["topics"][0], "partitions": [{**partition, "fetch_offset": probe}]}]}
        encodings.append(request.encode(version, probed))
    first, second = encodings
    if len(first) != len(second):
        return None
    differing = [index for index in range(len(first)) if first[index] != second[index]]
    if len(differing) != 8 or differing[-1] - differing[0] != 7:
        return None
    position = differing[0]
    if first[position:position + 8] != _INT64.pack(_PROBE_OFFSETS[0]):
        return None
    return key, first, position


def chunk_reader(stream: trio.abc.ReceiveStream):
    """`receive()`: one read of at most RECEIVE_CHUNK_BYTES from `stream` (b"" at its end),
    a checkpoint like `receive_some`. A plain TCP stream is read straight from its socket
    and waited on first: a peer's answer comes a round trip after the request, so a read
    straight after the last answer almost always fails (a system call and an exception,
    then the wait anyway); trio's `receive_some` adds five frames and two context managers
    to every answer. The wait is the checkpoint, and nothing yields between the read and
    its return, so a cancellation never drops bytes read. Other streams (TLS, in-memory)
    use `receive_some`."""
    if stream.__class__ is not trio.SocketStream:
        receive_some = stream.receive_some

        async def receive() -> bytes:
            return await receive_some(RECEIVE_CHUNK_BYTES)
        return receive
    sock = stream.socket
    wait_readable = trio.lowlevel.wait_readable

    async def receive_direct() -> bytes:
        # Bounded: every round waits for the socket to be readable; a read then finds
        # nothing only after a spurious wake-up.
        while True:
            if sock.fileno() < 0:
                raise trio.ClosedResourceError("this socket was already closed")
            # Closing the stream (trio's aclose) wakes this wait with ClosedResourceError.
            await wait_readable(sock)
            data = read_now(sock, RECEIVE_CHUNK_BYTES)
            if data is not None:
                return data
    return receive_direct


class PeerUnavailable(Exception):
    """The peer could not be reached, or the connection dropped mid-request."""


@dataclass(frozen=True, slots=True)
class PeerAddress:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    initial_ms: int = 50
    max_ms: int = 1_000
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay_ms(self, attempt: int, rng: random.Random) -> float:
        base = min(self.max_ms, self.initial_ms * self.multiplier ** attempt)
        return base * (1 + self.jitter * (2 * rng.random() - 1))


async def _acquire(resource: trio.Lock | trio.Semaphore) -> None:
    """Acquires `resource` with no scheduling round when it is free (trio's `acquire`
    always yields once; on the commit path every round counts)."""
    try:
        resource.acquire_nowait()
    except trio.WouldBlock:
        await resource.acquire()


class _Waiter:
    __slots__ = ("event", "payload", "error", "api_key", "version", "on_response", "body", "decoded")

    def __init__(self, api_key: int, version: int, on_response: Callable[[dict], None] | None = None) -> None:
        self.event = trio.Event()
        self.payload: bytes | None = None
        self.error: Exception | None = None
        self.api_key = api_key
        self.version = version
        self.on_response = on_response
        self.body: dict | None = None
        self.decoded = False


class _Submitted:
    """A request sent by `try_submit`: no task waits for it; `on_done` is its answer."""

    __slots__ = ("api_key", "version", "on_done", "deadline")

    def __init__(self, api_key: int, version: int, on_done: Callable[[dict | None], None], deadline: float) -> None:
        self.api_key = api_key
        self.version = version
        self.on_done = on_done
        self.deadline = deadline


class PeerConnection:
    def __init__(
        self,
        address: PeerAddress,
        client_id: str,
        rng: random.Random,
        max_in_flight_requests: int = 64,
        backoff: BackoffPolicy = BackoffPolicy(),
        connect_timeout_s: float = 5.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = address
        # How to connect (TLS, SASL); None is PLAINTEXT. Set by the node before run()
        # (the Raft driver creates the peers): ClientSecurity.for_node(config).
        self.security: ClientSecurity | None = security
        self._ssl_context = None
        self._client_id = client_id
        self._encoder = RequestEncoder(client_id)
        self._rng = rng
        self._backoff = backoff
        self._connect_timeout_s = connect_timeout_s
        self._slots = trio.Semaphore(max_in_flight_requests)
        self._correlation = itertools.count(1)
        self._pending: dict[int, _Waiter | _Submitted] = {}
        self._stream: trio.abc.Stream | None = None
        # The connection's nursery (its read loop's), for the rest of a submitted request
        # the socket did not take at once.
        self._nursery: trio.Nursery | None = None
        # Submitted requests by correlation id, and when the expiry task wakes next: a
        # submit wakes it only for a deadline before that.
        self._submitted: dict[int, _Submitted] = {}
        self._expiry_at = math.inf
        self._expiry_wakeup = trio.Event()
        self._connected = trio.Event()
        # Set (and replaced) when a connect attempt fails: wakes the requests that
        # asked to fail fast while they waited for a reconnect.
        self._connect_failed = trio.Event()
        # Set when the peer was heard from while disconnected: the reconnect waiting out
        # its backoff tries now (see note_alive).
        self._heard = trio.Event()
        # One sender at a time. A semaphore, not a Lock: a submitted request's rest (the bytes
        # the socket did not take at once) is sent by a task other than the one that took it.
        self._send_lock = trio.Semaphore(1)
        self.api_versions: dict[int, tuple[int, int]] = {}
        # The peer's SupportedFeatures from its last ApiVersions answer (kept across
        # disconnects: the last thing we knew), None until first connected.
        self.supported_features: dict[str, tuple[int, int]] | None = None
        self.finalized_features: dict[str, int] = {}
        # The FinalizedFeaturesEpoch of the last answer: the offset of the last metadata
        # record the peer had replayed when it answered (-1: not told). It says whether an
        # answer already reflects a record this node has replayed itself.
        self.finalized_features_epoch = -1
        # True from a failed connect attempt until the next successful one: requests that
        # ask to fail fast are refused at once then, instead of waiting for a reconnect.
        self.unreachable = False
        self.connects = 0  # successful connects, for tests and metrics
        self.negotiations = 0  # ApiVersions exchanges (connects and renegotiations)
        self._last_security_error: str | None = None

    @property
    def connected(self) -> bool:
        return self._stream is not None

    async def wait_connected(self) -> None:
        """Returns once connected and versions are negotiated (callers bound the wait)."""
        await self._connected.wait()

    # -- the connection task ---------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keeps the connection up until cancelled."""
        task_status.started()
        attempt = 0
        if self.security is not None and self.security.uses_tls and self._ssl_context is None:
            # Built once: loading keys and CAs on every reconnect would be wasted work.
            self._ssl_context = self.security.ssl_context()
        while True:
            try:
                stream = await open_client_stream(self.address.host, self.address.port, self.security,
                                                  timeout_s=self._connect_timeout_s, client_id=self._client_id,
                                                  ssl_context=self._ssl_context)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                self.unreachable = True
                self._connect_failed.set()
                self._connect_failed = trio.Event()
                delay_ms = self._backoff.delay_ms(attempt, self._rng)
                attempt += 1
                if isinstance(exc, ConnectError):
                    # TLS or SASL refused us: not a peer that is merely down, but a
                    # configuration the operator must fix. Said loudly, once per new reason.
                    if str(exc) != self._last_security_error:
                        self._last_security_error = str(exc)
                        log.warning(Event.PEER_AUTHENTICATION_FAILED, peer=self.address.node_id, error=str(exc),
                                    retry_in_ms=round(delay_ms))
                else:
                    log.debug(Event.PEER_CONNECT_FAILED, peer=self.address.node_id, error=str(exc),
                              retry_in_ms=round(delay_ms))
                attempt = await self._back_off(delay_ms, attempt)
                continue
            try:
                async with trio.open_nursery() as nursery:
                    self._stream = stream
                    self._nursery = nursery
                    nursery.start_soon(self._read_loop, stream)
                    nursery.start_soon(self._expire_submitted)
                    with trio.fail_after(self._connect_timeout_s):
                        await self._negotiate()
                    attempt = 0
                    self.unreachable = False
                    self._last_security_error = None
                    self.connects += 1
                    self._connected.set()
                    log.debug(Event.PEER_CONNECTED, peer=self.address.node_id)
                    # The read loop ends when the peer goes away; that ends the nursery.
            except* (PeerUnavailable, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                     OSError) as group:
                log.debug(Event.PEER_DISCONNECTED, peer=self.address.node_id,
                          error="; ".join(str(e) for e in group.exceptions))
            finally:
                self._stream = None
                self._nursery = None
                self._connected = trio.Event()
                self._fail_pending(PeerUnavailable(f"connection to node {self.address.node_id} lost"))
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            delay_ms = self._backoff.delay_ms(attempt, self._rng)
            attempt += 1
            attempt = await self._back_off(delay_ms, attempt)

    async def _back_off(self, delay_ms: float, attempt: int) -> int:
        """Sleeps `delay_ms` before the next connect attempt, or less if the peer is heard
        from meanwhile (then at least the backoff's initial delay, and the backoff starts
        over). Returns the attempt count to go on with."""
        started = trio.current_time()
        heard = False
        with trio.move_on_after(delay_ms / 1000):
            await self._heard.wait()
            heard = True
        self._heard = trio.Event()
        if not heard:
            return attempt
        await trio.sleep_until(started + self._backoff.initial_ms / 1000)
        return 0

    async def move_to(self, address: PeerAddress) -> None:
        """The peer is reached elsewhere now (its listener moved: KIP-853's UpdateRaftVoter).
        The current connection is closed, and `run` connects to the new address at once."""
        if address == self.address:
            return
        self.address = address
        stream = self._stream
        if stream is not None:
            await stream.aclose()  # the read loop ends; `run` reconnects, to the new address
        self.note_alive()

    def note_alive(self) -> None:
        """The peer is known to be up (it just sent this node a request, or the quorum
        elected it). A peer that restarted while this node's reconnects backed off (up to
        the backoff's maximum) is reconnected to now, and requests that fail fast wait
        for that attempt instead of failing on the last one's result."""
        if self._stream is None:
            self.unreachable = False
            self._heard.set()

    async def _negotiate(self) -> None:
        request = API_MESSAGES[18][0]
        response = await self._exchange(18, request.version_range[1], {
            "client_software_name": SOFTWARE_NAME, "client_software_version": SOFTWARE_VERSION})
        if response.error_code != ErrorCode.NONE:
            raise PeerUnavailable(f"ApiVersions to node {self.address.node_id} failed: {response.error_code}")
        # Item access, not attributes: a decoded Container's attribute is a failed
        # lookup first (~0.4 us), and an answer lists ~80 APIs; a broker asks every
        # controller again at each metadata.version change.
        self.api_versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response.api_keys}
        self.supported_features = {f["name"]: (f["min_version"], f["max_version"])
                                   for f in response.supported_features or ()}
        self.finalized_features = {f["name"]: f["max_version_level"] for f in response.finalized_features or ()}
        self.finalized_features_epoch = response.finalized_features_epoch
        self.negotiations += 1

    async def renegotiate(self, timeout_s: float) -> bool:
        """Asks for the peer's ApiVersions again on the live connection. KIP-778: after a
        metadata.version change the peer accepts other versions, and a node must learn them
        without reconnecting. False when not connected or the peer did not answer in time."""
        if self._stream is None:
            return False
        try:
            with trio.fail_after(timeout_s):
                async with self._slots:
                    await self._negotiate()
        except (PeerUnavailable, trio.TooSlowError):
            return False
        return True

    def adopt_negotiation(self, other: "PeerConnection") -> bool:
        """Takes the ApiVersions answer another connection to the same node got, when it
        is at least as new as this connection's (by FinalizedFeaturesEpoch): the versions
        and features a node answers are the node's, not the connection's. So a broker that
        renegotiates after a metadata.version change asks each controller once, not once
        per connection. False, and nothing taken: another address, no answer, an older
        one, or this connection is down (its reconnect negotiates anew)."""
        if self._stream is None or other.address != self.address or not other.api_versions \
                or other.finalized_features_epoch < self.finalized_features_epoch:
            return False
        self.api_versions = dict(other.api_versions)
        supported = other.supported_features
        self.supported_features = dict(supported) if supported is not None else None
        self.finalized_features = dict(other.finalized_features)
        self.finalized_features_epoch = other.finalized_features_epoch
        return True

    async def _read_loop(self, stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder(RESPONSE_MAX_BYTES)
        receive = chunk_reader(stream)
        try:
            while True:
                data = await receive()
                if not data:
                    raise PeerUnavailable(f"node {self.address.node_id} closed the connection")
                decoder.receive_data(data)
                while (payload := decoder.next_frame()) is not None:
                    if len(payload) < 4:
                        raise PeerUnavailable("response shorter than its header")
                    correlation_id = int.from_bytes(payload[:4], "big", signed=True)
                    waiter = self._pending.pop(correlation_id, None)
                    if waiter is None:
                        raise PeerUnavailable(f"unexpected correlation id {correlation_id}")
                    if isinstance(waiter, _Submitted):
                        self._answer_submitted(correlation_id, waiter, payload)
                        continue
                    waiter.payload = payload
                    if waiter.on_response is not None:
                        self._deliver_early(waiter)
                    waiter.event.set()
        except FrameError as exc:
            raise PeerUnavailable(str(exc)) from None

    def _decode(self, api_key: int, version: int, payload: bytes) -> dict | None:
        """The body of a response payload, or None (logged) when it does not decode: the
        one place a peer's undecodable answer is reported, whichever path asked."""
        try:
            return decode_response(api_key, version, payload)[1]
        except DecodeError as exc:
            log.warning(Event.PEER_BAD_RESPONSE, peer=self.address.node_id, api=api_name(api_key), error=str(exc))
            return None

    def _deliver_early(self, waiter: _Waiter) -> None:
        # From the read loop, so the response reaches its consumer without waking the
        # requesting task first; the task reports an undecodable answer to its caller.
        waiter.body = self._decode(waiter.api_key, waiter.version, waiter.payload)
        waiter.decoded = True
        if waiter.body is not None:
            waiter.on_response(waiter.body)

    def _fail_pending(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for correlation_id, waiter in pending.items():
            if isinstance(waiter, _Submitted):
                self._answer_submitted(correlation_id, waiter, None)
            else:
                waiter.error = error
                waiter.event.set()

    # -- requests without a task -------------------------------------------------------
    def try_submit(self, api_key: int, version: int, body: dict, timeout_s: float,
                   on_done: Callable[[dict | None], None]) -> bool:
        """Sends one request now, without a task, when nothing would wait: connected and
        negotiated, a free slot, nothing else being sent, a plain TCP stream. Then
        `on_done(body)` is called exactly once: from the read loop with the decoded
        response, or with None when the response is undecodable, the connection drops or
        `timeout_s` passes. It must not raise. False: nothing was sent (use `request`)."""
        stream = self._stream
        if stream is None or not self._connected.is_set() or self._send_lock.value == 0 \
                or not isinstance(stream, trio.SocketStream):
            return False
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            return False
        correlation_id = next(self._correlation)
        try:
            data = self._encoder.encode(api_key, version, correlation_id, body)
        except BaseException:
            self._slots.release()
            raise
        try:
            # A short write leaves the rest to a task.
            sent = write_now(stream, data)
        except trio.BrokenResourceError:
            # Broken: the read loop ends the connection; `request` reports it the usual way.
            self._slots.release()
            return False
        submitted = _Submitted(api_key, version, on_done, trio.current_time() + timeout_s)
        self._pending[correlation_id] = submitted
        self._submitted[correlation_id] = submitted
        if sent < len(data):
            self._send_lock.acquire_nowait()
            self._nursery.start_soon(self._send_rest, stream, memoryview(data)[sent:])
        if submitted.deadline < self._expiry_at:
            self._expiry_wakeup.set()
        return True

    async def _send_rest(self, stream: trio.SocketStream, rest: memoryview) -> None:
        try:
            await stream.send_all(rest)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the read loop ends the connection; its pending requests fail then
        finally:
            self._send_lock.release()

    def _answer_submitted(self, correlation_id: int, submitted: _Submitted, payload: bytes | None) -> None:
        if self._submitted.pop(correlation_id, None) is None:
            return  # already answered (expired)
        self._pending.pop(correlation_id, None)
        self._slots.release()
        body = None if payload is None else self._decode(submitted.api_key, submitted.version, payload)
        submitted.on_done(body)

    async def _expire_submitted(self) -> None:
        """Answers None to submitted requests past their deadline. Sleeps until the
        earliest deadline, and with none pending until a submit wakes it: an idle
        connection (a broker holds several per controller) sets no timer at all."""
        # Bounded: each round sleeps until a deadline or a wake-up.
        while True:
            now = trio.current_time()
            earliest = math.inf
            for correlation_id, submitted in list(self._submitted.items()):
                if submitted.deadline <= now:
                    self._answer_submitted(correlation_id, submitted, None)
                elif submitted.deadline < earliest:
                    earliest = submitted.deadline
            self._expiry_at = earliest
            with trio.move_on_at(earliest):
                await self._expiry_wakeup.wait()
            self._expiry_wakeup = trio.Event()

    # -- requests ----------------------------------------------------------------
    def choose_version(self, api_key: int) -> int:
        ours = API_MESSAGES[api_key][0].version_range
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise PeerUnavailable(f"node {self.address.node_id} does not serve {api_name(api_key)}")
        version = min(ours[1], theirs[1])
        if version < max(ours[0], theirs[0]):
            raise PeerUnavailable(f"no common version of {api_name(api_key)} with node {self.address.node_id}")
        return version

    async def request(self, api_key: int, body: dict, timeout_s: float, version: int | None = None,
                      on_response: Callable[[dict], None] | None = None, fail_fast: bool = False):
        """Sends one request and returns the decoded response body. `on_response(body)`,
        if given, is called from the connection's read loop as soon as the response is
        decoded (before this returns it); it must not raise. With `fail_fast`, a peer
        whose last connect attempt failed raises PeerUnavailable at once rather than
        being waited for (callers that have somewhere else to ask); a connection that
        dropped, or a peer just heard from (`note_alive`), gets its next attempt waited
        for, and a failure of that attempt raises too."""
        with trio.fail_after(timeout_s):
            # No wait where it would not block: a trio wait on a set event still costs a
            # scheduling round.
            if not self._connected.is_set():
                if fail_fast:
                    await self._wait_connected_or_failed()
                else:
                    await self._connected.wait()
            await _acquire(self._slots)
            try:
                if version is None:
                    version = self.choose_version(api_key)
                return await self._exchange(api_key, version, body, on_response)
            finally:
                self._slots.release()

    async def _wait_connected_or_failed(self) -> None:
        """Until connected; raises PeerUnavailable once a connect attempt fails (at once
        if the last one did). A connection that just dropped gets its reconnect attempt."""
        while not self._connected.is_set():
            if self.unreachable:
                raise PeerUnavailable(f"node {self.address.node_id} is unreachable (its last connect attempt failed)")
            failed = self._connect_failed
            async with trio.open_nursery() as nursery:
                async def wait_then_cancel(event: trio.Event) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()
                nursery.start_soon(wait_then_cancel, self._connected)
                nursery.start_soon(wait_then_cancel, failed)

    async def _exchange(self, api_key: int, version: int, body: dict,
                        on_response: Callable[[dict], None] | None = None):
        stream = self._stream
        if stream is None:
            raise PeerUnavailable(f"not connected to node {self.address.node_id}")
        correlation_id = next(self._correlation)
        data = self._encoder.encode(api_key, version, correlation_id, body)
        waiter = _Waiter(api_key, version, on_response)
        self._pending[correlation_id] = waiter
        try:
            await _acquire(self._send_lock)
            try:
                await stream.send_all(data)
            finally:
                self._send_lock.release()
            await waiter.event.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise PeerUnavailable(f"connection to node {self.address.node_id} lost: {exc}") from None
        finally:
            self._pending.pop(correlation_id, None)
        if waiter.error is not None:
            raise waiter.error
        body = waiter.body if waiter.decoded else self._decode(api_key, version, waiter.payload)
        if body is None:
            raise PeerUnavailable(f"undecodable {api_name(api_key)} response from node {self.address.node_id}")
        return body
