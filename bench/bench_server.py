"""ApiVersions round trips: kraftwerk against a canned-response floor.

Starts two subprocesses on 127.0.0.1: a formatted `kraftwerk controller` and
bench/canned_server.py (trio, answers every frame with kraftwerk's own
captured ApiVersions v3 response, correlation id patched: same runtime and
response size, no protocol work). A third process, the load generator,
sends ApiVersions v3 requests exactly as kafka-python 3.0.12 encodes them,
closed loop, in three shapes:
  1 conn         one connection, one request at a time (latency-bound);
  64 conns       64 connections, each one request at a time;
  1 conn x32     one connection, 32 requests in flight (pipelined).
Each case runs a warm-up and then a fixed duration (bounded also by a
request count). Reported: round trips/s, p50/p99 latency in µs seen by the
load generator, and the server's CPU µs per request (from /proc, over the
measured window only): the CPU figure is the one least disturbed by the load
generator sharing the machine's cores. Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_server.py [--duration-s 5] [--warmup-s 1] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402

CASES = [  # (label, connections, requests in flight per connection)
    ("1 conn", 1, 1),
    ("64 conns", 64, 1),
    ("1 conn x32 pipelined", 1, 32),
]
MAX_REQUESTS_PER_CASE = 5_000_000
DRAIN_TIMEOUT_S = 10.0
RECEIVE_CHUNK_BYTES = 262144


# --------------------------------------------------------------------------
# load generator (runs in its own process: `bench_server.py --loadgen ...`)
# --------------------------------------------------------------------------

class _Conn:
    __slots__ = ("sock", "sent_at", "buffer", "next_correlation", "expected_correlation")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent_at: deque[float] = deque()
        self.buffer = bytearray()
        self.next_correlation = 0
        self.expected_correlation = 0


def _loadgen_blocking(port: int, warmup_s: float, duration_s: float, max_requests: int):
    """One connection, one request at a time: plain blocking socket, least client overhead."""
    sock = common.connect(port)
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


def _loadgen_multiplexed(port: int, connections: int, depth: int, warmup_s: float, duration_s: float,
                         max_requests: int):
    """Many connections and/or many requests in flight: one epoll loop, non-blocking sockets."""
    selector = selectors.DefaultSelector()
    template = common.api_versions_v3_request(0)
    conns = []
    for _ in range(connections):
        sock = common.connect(port)
        sock.setblocking(False)
        conn = _Conn(sock)
        conns.append(conn)
        selector.register(sock, selectors.EVENT_READ, conn)
    clock = time.perf_counter
    latencies: list[float] = []
    response_bytes = 0

    def send(conn: _Conn, count: int, now: float) -> None:
        out = bytearray(template * count)
        for index in range(count):
            conn.next_correlation += 1
            common.set_correlation(memoryview(out)[index * len(template):], conn.next_correlation)
            conn.sent_at.append(now)
        written = conn.sock.send(out)  # a few KB at most: normally fits the socket buffer at once
        if written < len(out):
            conn.sock.setblocking(True)
            conn.sock.sendall(memoryview(out)[written:])
            conn.sock.setblocking(False)

    now = clock()
    measure_from = now + warmup_s
    end = measure_from + duration_s
    for conn in conns:
        send(conn, depth, now)
    started = None
    stopping = False
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
            conn: _Conn = key.data
            data = conn.sock.recv(RECEIVE_CHUNK_BYTES)
            if not data:
                raise RuntimeError("server closed a connection")
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


def run_loadgen(args) -> int:
    if args.connections == 1 and args.depth == 1:
        steps = _loadgen_blocking(args.port, args.warmup_s, args.duration_s, args.max_requests)
    else:
        steps = _loadgen_multiplexed(args.port, args.connections, args.depth, args.warmup_s, args.duration_s,
                                     args.max_requests)
    for step, value in steps:
        if step == "start":
            started = value
            server_cpu_start = common.process_cpu_s(args.server_pid)
            machine_start = common.machine_busy_s()
            own_cpu_start = time.process_time()
        else:
            finished, latencies, response_bytes = value
            server_cpu = common.process_cpu_s(args.server_pid) - server_cpu_start
            machine_busy = common.machine_busy_s() - machine_start
            own_cpu = time.process_time() - own_cpu_start
    elapsed = finished - started
    json.dump({
        "requests": len(latencies),
        "elapsed_s": elapsed,
        "rps": len(latencies) / elapsed,
        "p50_us": common.percentile(latencies, 0.50) * 1e6,
        "p99_us": common.percentile(latencies, 0.99) * 1e6,
        "server_cpu_s": server_cpu,
        "loadgen_cpu_s": own_cpu,
        "other_cpu_s": max(0.0, machine_busy - server_cpu - own_cpu),
        "response_bytes": response_bytes,
    }, sys.stdout)
    return 0


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------

def capture_response(port: int) -> bytes:
    """kraftwerk's ApiVersions v3 answer to kafka-python's request, correlation id 0."""
    with common.connect(port) as sock:
        sock.sendall(common.api_versions_v3_request(0))
        return common.recv_frame(sock)


def run_case(port: int, server_pid: int, connections: int, depth: int, args) -> dict:
    command = [common.PYTHON, str(Path(__file__).resolve()), "--loadgen", "--port", str(port),
               "--server-pid", str(server_pid), "--connections", str(connections), "--depth", str(depth),
               "--warmup-s", str(args.warmup_s), "--duration-s", str(args.duration_s),
               "--max-requests", str(args.max_requests)]
    result = subprocess.run(command, capture_output=True, text=True,
                            timeout=args.warmup_s + args.duration_s + DRAIN_TIMEOUT_S + 30)
    if result.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{result.stderr}")
    return json.loads(result.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=5.0, help="measured seconds per case and server")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds before each case")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS_PER_CASE, help="cap per case")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--connections", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loadgen:
        return run_loadgen(args)

    request = common.api_versions_v3_request(12345)
    same_as_kafka_python = common.check_against_kafka_python(request, 12345)
    if same_as_kafka_python is False:
        raise SystemExit("the request frame differs from what kafka-python encodes")
    work = common.work_dir(args.dir, "bench_server_")
    results: dict[tuple[str, str], dict] = {}
    try:
        with common.kraftwerk_controller(work) as (kraftwerk, kraftwerk_port):
            response = capture_response(kraftwerk_port)
            with common.canned_server(work, response) as (canned, canned_port):
                if capture_response(canned_port) != response:
                    raise SystemExit("the canned server's answer differs from kraftwerk's")
                for label, connections, depth in CASES:
                    # Interleaved per case, so drift in the machine hits both servers alike.
                    for name, process, port in (("kraftwerk", kraftwerk, kraftwerk_port),
                                                ("canned", canned, canned_port)):
                        results[(label, name)] = run_case(port, process.pid, connections, depth, args)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    print(f"$ {common.command_line()}")
    print(f"ApiVersions v3 (kafka-python 3.0.12 request, {len(request)} B; response {len(response)} B), "
          f"127.0.0.1, closed loop, {args.warmup_s:g} s warm-up + {args.duration_s:g} s per cell; "
          f"request identical to kafka-python's encoding: "
          f"{'yes' if same_as_kafka_python else 'not checked (kafka-python absent)'}.")
    print(f"Machine: {os.cpu_count()} CPUs, nothing pinned; the load generator (one Python process) shares "
          f"them with the server, so req/s and latency include its cost; server CPU/req does not.")
    print("CPU % is of one CPU (200 % = the whole machine); 'other processes' is everything else that ran "
          "during the cell (other work on the machine competes with both server and load generator).\n")
    rows = []
    for label, _, _ in CASES:
        for name in ("kraftwerk", "canned"):
            r = results[(label, name)]
            rows.append([label, name, r["requests"], f"{r['rps']:,.0f}", f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}",
                         f"{r['server_cpu_s'] / r['requests'] * 1e6:.1f}",
                         f"{r['server_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['loadgen_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['other_cpu_s'] / r['elapsed_s'] * 100:.0f}"])
    print(common.markdown_table(["case", "server", "requests", "req/s", "p50 µs", "p99 µs", "server CPU µs/req",
                                 "server CPU %", "loadgen CPU %", "other processes CPU %"], rows))
    print()
    ratio_rows = []
    for label, _, _ in CASES:
        k, c = results[(label, "kraftwerk")], results[(label, "canned")]
        k_cpu = k["server_cpu_s"] / k["requests"]
        c_cpu = c["server_cpu_s"] / c["requests"]
        ratio_rows.append([label, f"{k['rps'] / c['rps']:.2f}", f"{k['p50_us'] / c['p50_us']:.2f}",
                           f"{k['p99_us'] / c['p99_us']:.2f}", f"{k_cpu / c_cpu:.2f}"])
    print("kraftwerk / canned floor (throughput: higher is better; latency and CPU: lower is better)\n")
    print(common.markdown_table(["case", "req/s ratio", "p50 ratio", "p99 ratio", "server CPU/req ratio"],
                                ratio_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
