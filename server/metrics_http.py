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
"""

from __future__ import annotations

from typing import Callable

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.observability import Event, get_logger

log = get_logger("metrics")

MAX_REQUEST_HEAD_BYTES = 8192
REQUEST_TIMEOUT_S = 5.0


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + body


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    buffered = bytearray()
    while b"\r\n\r\n" not in buffered:
        if len(buffered) > MAX_REQUEST_HEAD_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buffered += chunk
    return bytes(buffered)


def answer(head: bytes, registry: CollectorRegistry, refresh: Callable[[], None] | None) -> bytes:
    """The response to one request head (sans-I/O, tested directly)."""
    request_line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(request_line) != 3:
        return _response("400 Bad Request", b"bad request\n")
    method, target = request_line[0], request_line[1].split(b"?", 1)[0]
    if method != b"GET":
        return _response("405 Method Not Allowed", b"only GET\n")
    if target not in (b"/metrics", b"/"):
        return _response("404 Not Found", b"see /metrics\n")
    if refresh is not None:
        refresh()
    return _response("200 OK", generate_latest(registry), CONTENT_TYPE_LATEST)


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

    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    log.info(Event.METRICS_SERVING, host=host, port=bound)
    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)
