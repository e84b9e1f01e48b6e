"""The closed-loop ApiVersions load generators shared by bench_server.py and bench_security.py.

Owns: `blocking` (one connection, one request at a time), `multiplexed` (many connections
and/or many requests in flight on one epoll loop), `steps` (the one of them a load-generator
process's arguments ask for), `add_process_arguments` (those hidden arguments, for the
benchmark that starts itself as its own load generator) and `measure` (runs either and
accounts server, own and other CPU over the measured window only). Both generators take `dial`, a
callable returning a connected blocking socket — plain TCP, or already TLS-wrapped and
SASL-authenticated — so the same loop measures every security protocol. Each generator
yields ("start", t) when the warm-up ends and ("done", (finished, latencies, response_bytes)).
"""

from __future__ import annotations

import argparse
import selectors
import socket
import ssl
import time
from collections import deque
from typing import Callable

import _common as common

DRAIN_TIMEOUT_S = 10.0
RECEIVE_CHUNK_BYTES = 262144
# Bound on reads per readable event: a TLS socket can hold many decrypted records.
MAX_READS_PER_EVENT = 1024


class Conn:
    __slots__ = ("sock", "sent_at", "buffer", "next_correlation", "expected_correlation")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent_at: deque[float] = deque()
        self.buffer = bytearray()
        self.next_correlation = 0
        self.expected_correlation = 0


def blocking(dial: Callable[[], socket.socket], warmup_s: float, duration_s: float, max_requests: int):
    """One connection, one request at a time: a blocking socket, least client overhead."""
    sock = dial()
    request = bytearray(common.api_versions_v3_request(0))
    latencies: list[float] = []
    clock = time.perf_counter
    measure_from = clock() + warmup_s
    end = measure_from + duration_s
    correlation = 0
    response_bytes = 0
    started = None
    while True:
        correlation += 1
        common.set_correlation(request, correlation)
        sent = clock()
        if started is None and sent >= measure_from:
            started = sent
            yield "start", sent
        if sent >= end or len(latencies) >= max_requests:
            break
        sock.sendall(request)
        response = common.recv_frame(sock)
        done = clock()
        if common.response_correlation(response) != correlation:
            raise RuntimeError("correlation id mismatch")
        response_bytes = len(response)
        if started is not None:
            latencies.append(done - sent)
    sock.close()
    yield "done", (clock(), latencies, response_bytes)


def send_nonblocking(sock: socket.socket, data: bytearray) -> None:
    """A few KB at most: normally written at once; otherwise finish it blocking."""
    try:
        written = sock.send(data)
    except (BlockingIOError, ssl.SSLWantWriteError):
        written = 0
    if written < len(data):
        sock.setblocking(True)
        sock.sendall(memoryview(data)[written:])
        sock.setblocking(False)


def read_available(sock: socket.socket) -> bytes:
    """What one readable event delivers. A TLS socket may hold a partial record (nothing
    yet) or, after one read, more decrypted bytes (`pending()`)."""
    chunks = []
    for _ in range(MAX_READS_PER_EVENT):
        try:
            data = sock.recv(RECEIVE_CHUNK_BYTES)
        except (BlockingIOError, ssl.SSLWantReadError):
            break
        if not data:
            raise RuntimeError("server closed a connection")
        chunks.append(data)
        if not isinstance(sock, ssl.SSLSocket) or not sock.pending():
            break
    return b"".join(chunks)


def multiplexed(dial: Callable[[], socket.socket], connections: int, depth: int, warmup_s: float,
                duration_s: float, max_requests: int):
    """Many connections and/or many requests in flight: one epoll loop, non-blocking sockets."""
    selector = selectors.DefaultSelector()
    template = common.api_versions_v3_request(0)
    conns = []
    for _ in range(connections):
        sock = dial()  # any TLS handshake and SASL exchange happen here, before any timing
        sock.setblocking(False)
        conn = Conn(sock)
        conns.append(conn)
        selector.register(sock, selectors.EVENT_READ, conn)
    clock = time.perf_counter
    latencies: list[float] = []
    response_bytes = 0

    def send(conn: Conn, count: int, now: float) -> None:
        out = bytearray(template * count)
        for index in range(count):
            conn.next_correlation += 1
            common.set_correlation(memoryview(out)[index * len(template):], conn.next_correlation)
            conn.sent_at.append(now)
        send_nonblocking(conn.sock, out)

    now = clock()
    measure_from = now + warmup_s
    end = measure_from + duration_s
    for conn in conns:
        send(conn, depth, now)
    started = None
    stopping = False
    finished_at = None
    drain_deadline = None
    in_flight = connections * depth
    while in_flight:
        events = selector.select(timeout=1.0)
        now = clock()
        if started is None and now >= measure_from:
            started = now
            yield "start", now
        if not stopping and (now >= end or len(latencies) >= max_requests):
            stopping = True
            finished_at = now
            drain_deadline = now + DRAIN_TIMEOUT_S
        if drain_deadline is not None and now > drain_deadline:
            raise RuntimeError(f"{in_flight} responses still missing {DRAIN_TIMEOUT_S} s after the end")
        for key, _ in events:
            conn: Conn = key.data
            data = read_available(conn.sock)
            if not data:
                continue
            buffer = conn.buffer
            buffer += data
            position = 0
            answered = 0
            while len(buffer) - position >= 4:
                size = int.from_bytes(buffer[position:position + 4], "big")
                if len(buffer) - position - 4 < size:
                    break
                conn.expected_correlation += 1
                if common.response_correlation(buffer, position) != conn.expected_correlation:
                    raise RuntimeError("correlation id mismatch")
                sent = conn.sent_at.popleft()
                if started is not None and not stopping:
                    latencies.append(now - sent)
                response_bytes = size + 4
                position += 4 + size
                answered += 1
            del buffer[:position]
            in_flight -= answered
            if answered and not stopping:
                send(conn, answered, now)
                in_flight += answered
    for conn in conns:
        selector.unregister(conn.sock)
        conn.sock.close()
    selector.close()
    if started is None:
        raise RuntimeError("the case ended before the warm-up did")
    yield "done", (finished_at, latencies, response_bytes)


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden arguments a benchmark passes when it runs itself as a load generator."""
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--connections", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, default=1, help=argparse.SUPPRESS)


def steps(dial: Callable[[], socket.socket], args):
    """`blocking` for one connection with one request in flight, else `multiplexed`."""
    if args.connections == 1 and args.depth == 1:
        return blocking(dial, args.warmup_s, args.duration_s, args.max_requests)
    return multiplexed(dial, args.connections, args.depth, args.warmup_s, args.duration_s, args.max_requests)


def measure(steps, server_pid: int) -> dict:
    """Runs a generator's steps; timing and CPU (server, this process, everything else on
    the machine) over the measured window only."""
    for step, value in steps:
        if step == "start":
            started = value
            server_cpu_start = common.process_cpu_s(server_pid)
            machine_start = common.machine_busy_s()
            own_cpu_start = time.process_time()
        else:
            finished, latencies, response_bytes = value
            server_cpu = common.process_cpu_s(server_pid) - server_cpu_start
            machine_busy = common.machine_busy_s() - machine_start
            own_cpu = time.process_time() - own_cpu_start
    elapsed = finished - started
    return {
        "count": len(latencies),
        "elapsed_s": elapsed,
        "rate": len(latencies) / elapsed,
        "p50_us": common.percentile(latencies, 0.50) * 1e6,
        "p99_us": common.percentile(latencies, 0.99) * 1e6,
        "server_cpu_s": server_cpu,
        "loadgen_cpu_s": own_cpu,
        "other_cpu_s": max(0.0, machine_busy - server_cpu - own_cpu),
        "response_bytes": response_bytes,
    }
