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

With --rounds N every cell is measured N times, the two servers alternating case by
case and round by round, and the tables give each cell's median round (by req/s) and
the median of the per-round ratios: machine drift then hits both servers alike. The
load average is printed at the start and the end.

Run: .venv/bin/python bench/bench_server.py [--duration-s 5] [--warmup-s 1] [--rounds 1]
         [--case LABEL ...] [--json PATH] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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
SERVERS = ("kraftwerk", "canned")
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


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_us_per_request(r: dict) -> float:
    return r["server_cpu_s"] / r["count"] * 1e6


def _ratio(ours: float, floor: float) -> float | None:
    # None when the floor's figure is 0: a cell too short for /proc's CPU ticks (10 ms).
    return ours / floor if floor else None


def _ratios(ours: dict, floor: dict) -> dict:
    """ours / floor for one round of one case."""
    return {"rate": _ratio(ours["rate"], floor["rate"]), "p50": _ratio(ours["p50_us"], floor["p50_us"]),
            "p99": _ratio(ours["p99_us"], floor["p99_us"]),
            "cpu_per_request": _ratio(_cpu_us_per_request(ours), _cpu_us_per_request(floor))}


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _median_round(rounds: list[dict]) -> dict:
    """The round whose req/s is the median (the lower middle one for an even count)."""
    return sorted(rounds, key=lambda r: r["rate"])[(len(rounds) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=5.0, help="measured seconds per case and server")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds before each case")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS_PER_CASE, help="cap per case")
    parser.add_argument("--rounds", type=int, default=1, help="measurements per cell (medians reported)")
    parser.add_argument("--case", action="append", choices=[label for label, _, _ in CASES],
                        help="run only this case (repeatable; default: all)")
    parser.add_argument("--json", default=None, help="also write the results as JSON to this file")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    loadgen.add_process_arguments(parser)
    args = parser.parse_args(argv)
    if args.loadgen:
        return run_loadgen(args)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    cases = [case for case in CASES if args.case is None or case[0] in args.case]

    load_start = _load()
    request = common.api_versions_v3_request(12345)
    same_as_kafka_python = common.check_against_kafka_python(request, 12345)
    if same_as_kafka_python is False:
        raise SystemExit("the request frame differs from what kafka-python encodes")
    if args.dir is not None:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = common.work_dir(args.dir, "bench_server_")
    results: dict[tuple[str, str], list[dict]] = {(label, name): [] for label, _, _ in cases for name in SERVERS}
    try:
        with common.kraftwerk_controller(work) as (kraftwerk, kraftwerk_port):
            response = capture_response(kraftwerk_port)
            with common.canned_server(work, response) as (canned, canned_port):
                if capture_response(canned_port) != response:
                    raise SystemExit("the canned server's answer differs from kraftwerk's")
                servers = {"kraftwerk": (kraftwerk, kraftwerk_port), "canned": (canned, canned_port)}
                for round_index in range(args.rounds):
                    for label, connections, depth in cases:
                        # Interleaved per case (and the order flipped every round), so drift
                        # in the machine hits both servers alike.
                        order = SERVERS if round_index % 2 == 0 else SERVERS[::-1]
                        for name in order:
                            process, port = servers[name]
                            results[(label, name)].append(run_case(port, process.pid, connections, depth, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = _load()

    print(f"$ {common.command_line()}")
    print(f"Load average (1, 5, 15 min) at start {load_start}, at end {load_end}.")
    print(f"ApiVersions v3 (kafka-python 3.0.12 request, {len(request)} B; response {len(response)} B), "
          f"127.0.0.1, closed loop, {args.warmup_s:g} s warm-up + {args.duration_s:g} s per cell, "
          f"{args.rounds} round(s) per cell{' (median round shown)' if args.rounds > 1 else ''}; "
          f"request identical to kafka-python's encoding: "
          f"{'yes' if same_as_kafka_python else 'not checked (kafka-python absent)'}.")
    print(f"Machine: {os.cpu_count()} CPUs, nothing pinned; the load generator (one Python process) shares "
          f"them with the server, so req/s and latency include its cost; server CPU/req does not.")
    print("CPU % is of one CPU (200 % = the whole machine); 'other processes' is everything else that ran "
          "during the cell (other work on the machine competes with both server and load generator).\n")
    rows = []
    summary: dict[str, dict] = {}
    for label, _, _ in cases:
        for name in SERVERS:
            r = _median_round(results[(label, name)])
            rows.append([label, name, r["count"], f"{r['rate']:,.0f}", f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}",
                         f"{_cpu_us_per_request(r):.1f}",
                         f"{r['server_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['loadgen_cpu_s'] / r['elapsed_s'] * 100:.0f}",
                         f"{r['other_cpu_s'] / r['elapsed_s'] * 100:.0f}"])
    print(common.markdown_table(["case", "server", "requests", "req/s", "p50 µs", "p99 µs", "server CPU µs/req",
                                 "server CPU %", "loadgen CPU %", "other processes CPU %"], rows))
    print()
    ratio_rows = []
    for label, _, _ in cases:
        per_round = [_ratios(ours, floor)
                     for ours, floor in zip(results[(label, "kraftwerk")], results[(label, "canned")])]
        medians = {key: _median([r[key] for r in per_round]) for key in per_round[0]}
        summary[label] = {"ratios": medians, "ratios_per_round": per_round}
        ratio_rows.append([label] + [_shown(medians[key]) for key in ("rate", "p50", "p99", "cpu_per_request")]
                          + ([" / ".join(_shown(r["rate"]) for r in per_round)] if args.rounds > 1 else []))
    print("kraftwerk / canned floor (throughput: higher is better; latency and CPU: lower is better)"
          + ("; medians of the per-round ratios" if args.rounds > 1 else "") + "\n")
    print(common.markdown_table(["case", "req/s ratio", "p50 ratio", "p99 ratio", "server CPU/req ratio"]
                                + (["req/s ratio per round"] if args.rounds > 1 else []), ratio_rows))
    if args.json:
        document = {
            "command": common.command_line(),
            "load_average_start": load_start,
            "load_average_end": load_end,
            "request_bytes": len(request),
            "response_bytes": len(response),
            "same_request_as_kafka_python": same_as_kafka_python,
            "warmup_s": args.warmup_s,
            "duration_s": args.duration_s,
            "rounds": args.rounds,
            "cases": [
                {"case": label, "connections": connections, "depth": depth,
                 "servers": {name: results[(label, name)] for name in SERVERS},
                 **summary[label]}
                for label, connections, depth in cases
            ],
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
