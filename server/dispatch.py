"""From a request frame to a response frame: header rules, routing, errors.

Owns: the decision of what happens to each frame (Kafka's `SocketServer` /
`RequestContext` behaviour, FACTS.md §1 and §3):
- ApiVersions in any version is answered; a version above the highest we
  serve gets a v0 body with UNSUPPORTED_VERSION listing ApiVersions' own range
  (KIP-511).
- An unknown API key, or a version of another API that we do not serve,
  closes the connection without a response, with a log line.
- A version above what the finalized metadata.version allows (KIP-778 gating,
  server/gating.py) is judged by what *this connection* was told: inside the
  ranges its ApiVersions answer listed (`Connection.advertised`; a connection
  that never asked is judged by the current ranges), the request is answered
  with UNSUPPORTED_VERSION in its API's own response shape — a client that
  used a version it was offered a moment earlier gets an error, not a closed
  socket; outside them, the connection closes as for any version never
  advertised.
- A body that does not decode closes the connection, with a log line.
- What is served, and how, is the node's table from the API catalog
  (server/api/catalog.py): versions, handler and its kind, whether it may come
  before SASL authentication, the ACL rule, the error response.
- A handler that raises `ApiError(code, message)` is answered with its API's own
  error response (the catalog entry's `error_response`), whatever its kind.
- Handlers return a response dict; sync handlers are answered inline, async
  ones (those that wait for the controller loop) get a task and a
  `PendingResponse` slot so responses still leave in request order. The
  KRaft RPCs answer later without a task: their handler hands the request to
  the Raft driver and the driver's answer fills the slot (a task per Fetch
  was a good part of the leader's CPU per commit).
- Per request only what the request itself decides is worked out: what follows
  from its API key and version (the API, header version, decoder, request
  counter, whether the version is gated under the node's advertised table) is
  resolved once per (key, version) (`_Route`) and re-judged when the node hands
  out another table; the node's views are read once per synchronous stretch of
  a connection's requests when the reader passes its `NodeViews`.
- An API with an answer memo (ApiVersions: `ApiSpec.answer_memo`) answers a request
  whose bytes after the correlation id it has answered before, under the same
  advertised table and served body, from the memo, after the same checks (route,
  gating, SASL state, read barrier) and without decoding; everything else, invalid
  requests included, is decoded and handled, and teaches the memo its answer.
"""

from __future__ import annotations

import struct
from io import BytesIO
from time import perf_counter
from typing import TYPE_CHECKING

import trio

from protocol.api_keys import ApiKey
from protocol.errors import DecodeError, ErrorCode
from protocol.header import REQUEST_HEADER, encode_response_header, peek_api
from protocol.registry import api_name
from server.api.context import RequestContext
from server.api.errors import ApiError
from server.gating import gated_version_message
from server.net.listener import CloseConnection, Connection, NodeViews, PendingResponse
from server.observability import Event, get_logger

if TYPE_CHECKING:
    from server.api.catalog import ServedApi
    from server.nodes.controller import ControllerNode


log = get_logger("net")

_SIZE = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_SIZE_CORRELATION_NO_TAGS = struct.Struct(">iiB")  # response header v1 without tagged fields
_INT16 = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")


def read_request_header(frame: bytes, header_version: int) -> tuple[str | None, int]:
    """(client id, offset of the body) of a request frame (without its size prefix),
    failing with DecodeError exactly where `REQUEST_HEADER.decode` does. The usual
    header (v1 or v2: api key, version, correlation id, a nullable client id, for v2
    no tagged fields) is read in place; anything else goes through the declaration,
    which also words the errors."""
    if header_version >= 1 and len(frame) >= 10:
        size = _INT16.unpack_from(frame, 8)[0]
        position = -1
        client_id = None
        if size == -1:
            position = 10
        elif 0 <= size <= len(frame) - 10:
            try:
                client_id = frame[10:10 + size].decode("utf-8")
                position = 10 + size
            except UnicodeDecodeError:
                pass
        if position >= 0 and header_version == 2:
            position = position + 1 if position < len(frame) and frame[position] == 0 else -1
        if position >= 0:
            return client_id, position
    stream = BytesIO(frame)
    header = REQUEST_HEADER.decode(header_version, stream)
    return header.client_id, stream.tell()


class _Route:
    """What the dispatcher resolves once per (API key, version) a client used: the API,
    its header version, request decoder and request counter, and whether the version
    is gated under the node's advertised table `ranges` (re-judged whenever the node
    hands out another table: it replaces, never mutates, it on a metadata.version
    change). Only versions the protocol declares for a served API get one, so there
    are boundedly many."""

    __slots__ = ("api", "version", "header_version", "decode", "count", "served", "ranges", "gated", "memo",
                 "read_token", "response_header_version")

    def __init__(self, api: "ServedApi", version: int, count, node, memoize: bool) -> None:
        self.api = api
        self.version = version
        self.header_version = api.request_header_versions[version]
        self.response_header_version = api.response_header_versions[version]
        self.decode = _decoder(api, version)
        self.count = count
        # Whole answers by request bytes (the API's memo, see ApiSpec.answer_memo), for a
        # sync API whose answer no authorizer rule decides, served by the very handler the
        # memo stands for (not one a node put in its place); None: every request is handled.
        spec = api.spec
        factory = spec.answer_memo
        self.memo = (factory(api.response, version) if memoize and factory is not None and not api.is_async
                     and not api.answers_later and api.rule.operation is None
                     and api.handler in (spec.controller, spec.broker, spec.zk_broker) else None)
        # The node's current token for the memo's entries, read without a lookup per request.
        self.read_token = None if self.memo is None else self.memo.token_reader(node)
        # Served by the software (else answered UNSUPPORTED_VERSION once decoded).
        self.served = api.min_version <= version <= api.max_version
        self.ranges: dict | None = None
        self.gated = True

    def judge(self, ranges: dict[int, tuple[int, int]]) -> None:
        allowed = ranges.get(self.api.api_key)
        # Gated: not served at all, or served by the software but not at this finalized
        # metadata.version (KIP-778), whether or not this connection was offered it.
        self.gated = not self.served or allowed is None or not allowed[0] <= self.version <= allowed[1]
        self.ranges = ranges


def _decoder(api: "ServedApi", version: int):
    """(frame, body offset) -> the decoded request body; DecodeError on bad bytes."""
    fast = api.spec.request_decoder
    if fast is not None:
        return fast(api.request, version)
    message = api.request

    def decode(frame: bytes, offset: int):
        stream = BytesIO(frame)
        stream.seek(offset)
        return message.decode(version, stream)
    return decode


class Dispatcher:
    def __init__(self, node: "ControllerNode", served: "dict[int, ServedApi]") -> None:
        self.node = node
        self.config = node.config
        self.metrics = node.metrics
        self.served = served
        # By the frame's first four bytes (API key and version, as sent).
        self._routes: dict[bytes, _Route] = {}
        # structlog's lazy proxy binds on every call even when the level filters
        # the event out, so the per-request debug line is guarded by a flag.
        self._log_requests = node.config.log_level.lower() == "debug"
        # Fixed for the node's life (it reads the committed image itself on each check);
        # a node without one (test harnesses, ZooKeeper-mode brokers) authorizes nothing.
        self.authorizer = getattr(node, "authorizer", None)

    # -- encoding -----------------------------------------------------------
    def encode_response(self, api: "ServedApi", version: int, correlation_id: int, body: dict) -> bytes:
        header_version = api.response_header_versions[version]
        if body.__class__ is bytes:
            # Pre-encoded (cached) body: size, correlation id, the header's empty tagged
            # fields (v1), body, in one concatenation.
            if header_version == 0:
                return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body
            return _SIZE_CORRELATION_NO_TAGS.pack(len(body) + 5, correlation_id, 0) + body
        stream = BytesIO()
        stream.write(b"\x00\x00\x00\x00")
        stream.write(encode_response_header(correlation_id, header_version))
        api.response.encode_into(version, body, stream)
        payload = stream.getbuffer()
        _SIZE.pack_into(payload, 0, len(payload) - 4)
        del payload
        return stream.getvalue()

    # -- routing --------------------------------------------------------------
    def _route(self, conn: Connection, frame: bytes) -> "_Route | bytes":
        """The route of a frame whose API key and version were not seen before (a
        frame at least 8 bytes long), or the answer / CloseConnection for one that
        gets none."""
        api_key, version = peek_api(frame)
        api = self.served.get(api_key)
        if api is None:
            log.warning(Event.UNKNOWN_API, connection=conn.connection_id, peer=conn.peer, api_key=api_key,
                        api_version=version)
            self.metrics.request_errors.labels("unknown_api").inc()
            raise CloseConnection()
        if not api.min_version <= version <= api.max_version:
            if api_key == ApiKey.API_VERSIONS:
                return self._api_versions_unsupported(conn, frame, version)
            low, high = api.request.version_range
            if not low <= version <= high:
                # Beyond what the protocol declares: no response of that version can be
                # encoded, so the connection is closed (Kafka's brokers close it too).
                log.warning(Event.UNSUPPORTED_VERSION, connection=conn.connection_id, peer=conn.peer,
                            api=api_name(api_key), api_version=version,
                            served=f"{api.min_version}-{api.max_version}", outcome="closed")
                self.metrics.request_errors.labels("unsupported_version").inc()
                raise CloseConnection()
            # A version the protocol declares but this node never serves: answered, once
            # decoded, with UNSUPPORTED_VERSION in that version's own response.
        # Not while requests are logged one by one: a memoized answer skips the header read
        # that gives the line its client id.
        route = _Route(api, version, self.metrics.requests.labels(api.name, str(version)), self.node,
                       not self._log_requests)
        self._routes[frame[:4]] = route
        return route

    # -- the entry point ------------------------------------------------------
    def dispatch(self, conn: Connection, frame: bytes, nursery: trio.Nursery, views: NodeViews | None = None):
        """The answer to one request frame: its bytes, a PendingResponse to wait for, or
        CloseConnection. `views`: the reader's NodeViews of its current synchronous
        stretch (None: read from the node)."""
        if len(frame) < 8:
            log.warning(Event.REQUEST_DECODE_FAILED, connection=conn.connection_id, peer=conn.peer,
                        error="request shorter than the fixed header", frame_bytes=len(frame))
            self.metrics.request_errors.labels("decode").inc()
            raise CloseConnection()
        route = self._routes.get(frame[:4])
        if route is None:
            route = self._route(conn, frame)
            if route.__class__ is bytes:
                return route
        api = route.api
        version = route.version
        if views is None:
            ranges = self.node.advertised_ranges()
        else:
            ranges = views.ranges
            if ranges is None:
                ranges = views.ranges = self.node.advertised_ranges()
        if ranges is not route.ranges:
            route.judge(ranges)
        sasl = conn.sasl
        if sasl is not None and not sasl.authenticated and not api.before_authentication:
            # Kafka's SaslServerAuthenticator: anything but these before the SASL exchange
            # has completed is a protocol violation; the connection is closed.
            log.warning(Event.SASL_REQUEST_BEFORE_AUTHENTICATION, connection=conn.connection_id, peer=conn.peer,
                        api=api_name(api.api_key), api_version=version)
            self.metrics.request_errors.labels("unauthenticated").inc()
            raise CloseConnection()
        barrier_needed = None
        memo = route.memo
        if memo is not None and not route.gated:
            # A request whose bytes this node has answered before, under the same tables:
            # the same answer, without decoding it (what the handler does to the
            # connection, the memo repeats). Only where it would be answered now.
            barrier_needed = api.reads_image and self._read_barrier_needed(views)
            if not barrier_needed:
                if views is None:
                    token = route.read_token()
                elif views.memo is memo:
                    token = views.memo_token
                else:
                    token = views.memo_token = route.read_token()
                    views.memo = memo
                answer = memo.recall(frame, conn, ranges, token)
                if answer is not None:
                    route.count.value += 1
                    if route.response_header_version == 0:
                        return _SIZE_AND_CORRELATION.pack(len(answer) + 4, _CORRELATION.unpack_from(frame, 4)[0]) \
                            + answer
                    return _SIZE_CORRELATION_NO_TAGS.pack(len(answer) + 5, _CORRELATION.unpack_from(frame, 4)[0],
                                                          0) + answer
        # After the memo: its answers are never timed (it is off while requests are logged).
        started = perf_counter()
        try:
            client_id, body_offset = read_request_header(frame, route.header_version)
            request = route.decode(frame, body_offset)
        except DecodeError as exc:
            log.warning(Event.REQUEST_DECODE_FAILED, connection=conn.connection_id, peer=conn.peer,
                        api=api_name(api.api_key), api_version=version, error=str(exc))
            self.metrics.request_errors.labels("decode").inc()
            raise CloseConnection() from None
        correlation_id = _CORRELATION.unpack_from(frame, 4)[0]
        if route.gated:
            return self._refuse_gated(conn, api, version, correlation_id, request)
        ctx = RequestContext(api.api_key, version, correlation_id, client_id, conn, self.node)
        route.count.value += 1
        authorizer = self.authorizer
        if authorizer is not None:
            # Refused requests are answered here with the API's own error shape
            # (CLUSTER_AUTHORIZATION_FAILED, ...): the rule is the API's catalog entry's.
            refusal = authorizer.check_request(ctx, api, request)
            if refusal is not None:
                return self.encode_response(api, version, correlation_id, refusal)
        if api.answers_later:
            slot = PendingResponse()
            try:
                api.handler(ctx, request, _Answer(self, api, ctx, slot, started))
            except ApiError as exc:
                if not slot.event.is_set():
                    self.complete(api, ctx, slot, started,
                                  api.error_response(request, version, exc.code, exc.message))
            finally:
                if views is not None:  # the Raft driver may have moved (leader, epoch)
                    views.clear()
            return slot
        if api.is_async:
            slot = PendingResponse()
            nursery.start_soon(self._run_async, api, ctx, request, slot, started)
            return slot
        if barrier_needed is None:  # (else read above, in this synchronous step)
            barrier_needed = api.reads_image and self._read_barrier_needed(views)
        if barrier_needed:
            # Not the leader: answered once this node's image has caught up with it.
            slot = PendingResponse()
            nursery.start_soon(self._run_after_read_barrier, api, ctx, request, slot, started)
            return slot
        # Answered now, in this synchronous step: the table judged by is the node's current one.
        ctx.advertised = ranges
        try:
            try:
                body = api.handler(ctx, request)
            except ApiError as exc:
                body = api.error_response(request, version, exc.code, exc.message)
            payload = self.encode_response(api, version, correlation_id, body)
            if memo is not None:
                memo.learn(frame, request, body, ranges, self.node)
        except CloseConnection:
            raise
        except Exception as exc:  # a bug: log and close this connection only
            log.exception(Event.HANDLER_FAILED, connection=conn.connection_id, api=api.name,
                          api_version=version, error=repr(exc))
            raise CloseConnection() from None
        if self._log_requests:
            log.debug(Event.REQUEST, api=api.name, api_version=version, correlation_id=correlation_id,
                      client_id=client_id, latency_us=round((perf_counter() - started) * 1e6, 1))
        return payload

    def _read_barrier_needed(self, views: NodeViews | None) -> bool:
        """Whether a read must wait for this node's image to catch up (not the leader
        yet); read once per synchronous stretch when the reader passes its views."""
        if views is None:
            return self.node.read_barrier_needed()
        needed = views.barrier_needed
        if needed is None:
            needed = views.barrier_needed = self.node.read_barrier_needed()
        return needed

    async def _run_async(self, api: "ServedApi", ctx: RequestContext, request, slot: PendingResponse,
                         started: float) -> None:
        try:
            try:
                body = await api.handler(ctx, request)
            except ApiError as exc:
                body = api.error_response(request, ctx.api_version, exc.code, exc.message)
        except CloseConnection:
            slot.set(None)
            return
        except Exception as exc:
            log.exception(Event.HANDLER_FAILED, connection=ctx.connection.connection_id, api=api.name,
                          api_version=ctx.api_version, error=repr(exc))
            slot.set(None)
            return
        self.complete(api, ctx, slot, started, body)

    async def _run_after_read_barrier(self, api: "ServedApi", ctx: RequestContext, request, slot: PendingResponse,
                                      started: float) -> None:
        await self.node.read_barrier()
        try:
            try:
                body = api.handler(ctx, request)
            except ApiError as exc:
                body = api.error_response(request, ctx.api_version, exc.code, exc.message)
        except CloseConnection:
            slot.set(None)
            return
        except Exception as exc:  # a bug: log and close this connection only
            log.exception(Event.HANDLER_FAILED, connection=ctx.connection.connection_id, api=api.name,
                          api_version=ctx.api_version, error=repr(exc))
            slot.set(None)
            return
        self.complete(api, ctx, slot, started, body)

    def complete(self, api: "ServedApi", ctx: RequestContext, slot: PendingResponse, started: float, body) -> None:
        """Encodes `body` into `slot` (None, closing the connection, if it cannot be encoded)."""
        try:
            payload = self.encode_response(api, ctx.api_version, ctx.correlation_id, body)
        except Exception as exc:
            log.exception(Event.HANDLER_FAILED, connection=ctx.connection.connection_id, api=api.name,
                          api_version=ctx.api_version, error=repr(exc))
            slot.set(None)
            return
        if self._log_requests:
            log.debug(Event.REQUEST, api=api.name, api_version=ctx.api_version,
                      correlation_id=ctx.correlation_id, client_id=ctx.client_id,
                      latency_us=round((perf_counter() - started) * 1e6, 1))
        slot.set(payload)

    def _refuse_gated(self, conn: Connection, api: "ServedApi", version: int, correlation_id: int,
                      request) -> bytes:
        """UNSUPPORTED_VERSION, encoded in that API and version, for a version this node
        does not allow now: one its software never serves, or one the finalized
        metadata.version gates away (told to this connection before a change, or never)."""
        allowed = self.node.advertised_ranges().get(api.api_key)
        if api.min_version <= version <= api.max_version:
            message = gated_version_message(api.api_key, api.name, version)
            log.info(Event.GATED_VERSION, connection=conn.connection_id, peer=conn.peer, api=api.name,
                     api_version=version, allowed="none" if allowed is None else f"{allowed[0]}-{allowed[1]}",
                     outcome="unsupported_version")
            self.metrics.request_errors.labels("gated_version").inc()
        else:
            message = (f"{api.name} v{version} is not supported by this node (it serves "
                       f"v{api.min_version}-{api.max_version}); ask ApiVersions and use a version it lists")
            log.warning(Event.UNSUPPORTED_VERSION, connection=conn.connection_id, peer=conn.peer, api=api.name,
                        api_version=version, served=f"{api.min_version}-{api.max_version}",
                        outcome="unsupported_version")
            self.metrics.request_errors.labels("unsupported_version").inc()
        body = api.error_response(request, version, ErrorCode.UNSUPPORTED_VERSION, message)
        try:
            return self.encode_response(api, version, correlation_id, body)
        except Exception as exc:  # a bug in an error builder: log and close this connection only
            log.exception(Event.HANDLER_FAILED, connection=conn.connection_id, api=api.name,
                          api_version=version, error=repr(exc))
            raise CloseConnection() from None

    def _api_versions_unsupported(self, conn: Connection, frame: bytes, version: int) -> bytes:
        """KIP-511: answer an unknown ApiVersions version with a v0 body and error 35."""
        api = self.served[ApiKey.API_VERSIONS]
        try:
            # The header of an unknown future version is assumed to be the
            # newest we know (v2); only the correlation id is needed.
            header = REQUEST_HEADER.decode(2, BytesIO(frame))
            correlation_id = header.correlation_id
        except DecodeError:
            correlation_id = struct.unpack_from(">i", frame, 4)[0]
        log.info(Event.UNSUPPORTED_VERSION, connection=conn.connection_id, peer=conn.peer,
                 api="ApiVersions", api_version=version, served=f"{api.min_version}-{api.max_version}")
        body = {
            "error_code": ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": api.min_version,
                          "max_version": api.max_version}],
        }
        return self.encode_response(api, 0, correlation_id, body)


class _Answer:
    """The `answer(body)` an answers-later handler calls (once; later calls are ignored)."""

    __slots__ = ("_dispatcher", "_api", "_ctx", "_slot", "_started")

    def __init__(self, dispatcher: Dispatcher, api: "ServedApi", ctx: RequestContext, slot: PendingResponse,
                 started: float) -> None:
        self._dispatcher = dispatcher
        self._api = api
        self._ctx = ctx
        self._slot = slot
        self._started = started

    def __call__(self, body) -> None:
        if not self._slot.event.is_set():
            self._dispatcher.complete(self._api, self._ctx, self._slot, self._started, body)
