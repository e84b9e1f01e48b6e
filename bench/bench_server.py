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
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import _loadgen as loadgen  # noqa: E402

CASES = [  # (label, connections, requests in flight per connection)
    ("1 conn", 1, 1),
    ("64 conns", 64, 1),
    ("1 conn x32 pipelined", 1, 32),
]
MAX_REQUESTS_PER_CASE = 5_000_000


# --------------------------------------------------------------------------
# load generator (runs in its own process: `bench_server.py --loadgen ...`)
# --------------------------------------------------------------------------

def run_loadgen(args) -> int:
    steps = loadgen.steps(lambda: common.connect(args.port), args)
    json.dump(loadgen.measure(steps, args.server_pid), sys.stdout)
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
                            timeout=args.warmup_s + args.duration_s + loadgen.DRAIN_TIMEOUT_S + 30)
    if result.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{result.stderr}")
    return json.loads(result.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=5.0, help="measured seconds per case and server")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds before each case")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS_PER_CASE, help="cap per case")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    loadgen.add_process_arguments(parser)
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
            rows.append([label, name, r["count"], f"{r['rate']:,.0f}", f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}",
                         f"{r['server_cpu_s'] / r['count'] * 1e6:.1f}",
                         f"{r['server_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['loadgen_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['other_cpu_s'] / r['elapsed_s'] * 100:.0f}"])
    print(common.markdown_table(["case", "server", "requests", "req/s", "p50 µs", "p99 µs", "server CPU µs/req",
                                 "server CPU %", "loadgen CPU %", "other processes CPU %"], rows))
    print()
    ratio_rows = []
    for label, _, _ in CASES:
        k, c = results[(label, "kraftwerk")], results[(label, "canned")]
        k_cpu = k["server_cpu_s"] / k["count"]
        c_cpu = c["server_cpu_s"] / c["count"]
        ratio_rows.append([label, f"{k['rate'] / c['rate']:.2f}", f"{k['p50_us'] / c['p50_us']:.2f}",
                           f"{k['p99_us'] / c['p99_us']:.2f}", f"{k_cpu / c_cpu:.2f}"])
    print("kraftwerk / canned floor (throughput: higher is better; latency and CPU: lower is better)\n")
    print(common.markdown_table(["case", "req/s ratio", "p50 ratio", "p99 ratio", "server CPU/req ratio"],
                                ratio_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
