"""Prometheus metrics over HTTP, served by trio from one node's own registry.

Owns: a minimal HTTP/1.1 responder for `GET /metrics` (text exposition format from
prometheus-client's `generate_latest`). Kafka exposes these metrics over JMX; a
Prometheus endpoint is what operators scrape today.

Rules kept here:
- No threads (prometheus-client's own server runs one per node): a trio task per
  connection, like the Kafka listener, so a test can run many nodes in one process.
- Hostile input is bounded: the request head may be at most `MAX_REQUEST_HEAD_BYTES`
  and must arrive within `REQUEST_TIMEOUT_S`; anything else closes the connection.
- Each scrape calls `refresh()` first, so gauges derived from the node's state (a
  migration's write-behind lag, the finalized features) are current when read.
- Nothing a scraper sends, and no failure while rendering, can stop the node: a
  failing `refresh()` is a 500 and a log line, never an exception in the node's
  nursery.
"""

from __future__ import annotations

from typing import Callable

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.net.listener import open_listeners
from server.observability import Event, get_logger

log = get_logger("metrics")

MAX_REQUEST_HEAD_BYTES = 8192
REQUEST_TIMEOUT_S = 5.0


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + body


def complete_head(buffered: bytes) -> bytes | None:
    """The request head in `buffered` once it is complete (up to and including the
    blank line), None while more is needed. Raises ValueError when the head is, or
    must become, longer than MAX_REQUEST_HEAD_BYTES (sans-I/O, tested directly)."""
    end = buffered.find(b"\r\n\r\n")
    if end < 0:
        if len(buffered) > MAX_REQUEST_HEAD_BYTES:
            raise ValueError("request head too long")
        return None
    if end + 4 > MAX_REQUEST_HEAD_BYTES:
        raise ValueError("request head too long")
    return buffered[:end + 4]


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    buffered = b""
    # Bounded: every round adds at least one byte, and a head longer than
    # MAX_REQUEST_HEAD_BYTES ends the loop.
    while True:
        try:
            head = complete_head(buffered)
        except ValueError:
            return None
        if head is not None:
            return head
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buffered += chunk


def answer(head: bytes, registry: CollectorRegistry, refresh: Callable[[], None] | None) -> bytes:
    """The response to one request head (sans-I/O, tested directly)."""
    request_line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/1."):
        return _response("400 Bad Request", b"bad request\n")
    method, target = request_line[0], request_line[1].split(b"?", 1)[0]
    if method != b"GET":
        return _response("405 Method Not Allowed", b"only GET\n")
    if target not in (b"/metrics", b"/"):
        return _response("404 Not Found", b"see /metrics\n")
    try:
        if refresh is not None:
            refresh()
        body = generate_latest(registry)
    except Exception as exc:  # noqa: BLE001 - a scrape must never stop the node
        log.warning(Event.METRICS_SCRAPE_FAILED, error=repr(exc))
        return _response("500 Internal Server Error", b"metrics unavailable; see the node's log\n")
    return _response("200 OK", body, CONTENT_TYPE_LATEST)


async def serve_metrics(registry: CollectorRegistry, host: str, port: int,
                        refresh: Callable[[], None] | None = None, *,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serves `registry` on http://host:port/metrics until cancelled; reports the bound port."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                head = await _read_head(stream)
                if head is not None:
                    await stream.send_all(answer(head, registry, refresh))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the scraper went away; nothing of ours is affected
        finally:
            await trio.aclose_forcefully(stream)

    listeners = await open_listeners("metrics", host, port)
    bound = listeners[0].socket.getsockname()[1]
    log.info(Event.METRICS_SERVING, host=host, port=bound)
    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)
