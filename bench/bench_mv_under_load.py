"""metadata.version changes under load: what 8 admin clients see while MV moves.

A real cluster of 3 controllers and 3 brokers (cli/upgrade_story.py `LocalCluster`,
real `kraftwerk controller|broker` processes on 127.0.0.1, metadata.version 3.7-IV4).
--clients worker processes, each one kafka-python `KafkaAdminClient` bootstrapped
from the three brokers, loop through describe_features, describe_cluster,
describe_configs (a TOPIC resource), create_topics and delete_topics (a topic of
their own), recording every call's start, end and outcome. Meanwhile a driver (one
more kafka-python admin client, through the brokers) moves metadata.version up
(3.7-IV4 -> 3.9-IV0) and down again (SAFE_DOWNGRADE) --moves times, with
--quiet-s of calm before and after each move, and waits after each move until
every broker logged a new `broker.api_versions_renegotiated` at the new level.

Reported: calls, client-visible errors (each one listed with its exception),
connections the clients' kafka-python saw close, the brokers'
`broker.client_connections_closed` events, the longest stall (the longest gap
between consecutive answers of one client) and p50/p99 call latency, each split
into "during MV moves" (a call or gap overlapping [move sent, every broker
renegotiated + --settle-s]) and "quiet".

Clients are processes (this file run with --worker): 8 kafka-python clients in one
interpreter would measure the GIL, not the cluster. Their clocks agree: Linux's
CLOCK_MONOTONIC (time.monotonic) is system-wide.

Timing targets live here, never in tests. Every wait is bounded (--budget-s for
the whole run; a worker stops at its stop file or at the deadline it was given);
every process started is stopped by its own pid.

Run: .venv/bin/python bench/bench_mv_under_load.py [--moves 10] [--clients 8] [--quiet-s 3]
     [--settle-s 1] [--budget-s 600] [--dir PATH] [--keep] [--log-level debug]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from protocol.registry import api_name  # noqa: E402

MV = "metadata.version"
LOW, HIGH = "3.7-IV4", "3.9-IV0"
BROKERS = [101, 102, 103]
CONFIG_TOPIC = "mv-bench-configs"
REQUEST_TIMEOUT_MS = 30_000
RENEGOTIATION_TIMEOUT_S = 60.0
POLL_S = 0.05  # the brokers' log files: there is nothing to wait on but reading again
WORKER_START_TIMEOUT_S = 60.0
OPS = ("describe_features", "describe_cluster", "describe_configs", "create_topic", "delete_topic")


# --------------------------------------------------------------------------
# a client: one process, one KafkaAdminClient, one loop
# --------------------------------------------------------------------------

class _CountingSensor:
    """Stands in for one of kafka-python's connection sensors: counts, then records."""

    def __init__(self, sensor, counts: Counter, name: str) -> None:
        self._sensor, self._counts, self._name = sensor, counts, name

    def record(self, *args, **kwargs):
        self._counts[self._name] += 1
        return self._sensor.record(*args, **kwargs)


def _count_connection_events(admin, counts: Counter) -> None:
    """Counts the connections kafka-python opens and closes from now on (its manager
    looks its sensors up at each event, so replacing them catches every later one)."""
    sensors = getattr(admin._manager, "_sensors", None)
    if sensors is None:
        return
    sensors.connection_created = _CountingSensor(sensors.connection_created, counts, "created")
    sensors.connection_closed = _CountingSensor(sensors.connection_closed, counts, "closed")


def worker(index: int, bootstrap: str, deadline: float, stop_file: Path, out: Path, ready: Path) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"mv-bench-{index}",
                             request_timeout_ms=REQUEST_TIMEOUT_MS)
    connections: Counter = Counter()
    _count_connection_events(admin, connections)
    own_topic = f"mv-bench-{index}"
    calls = []
    topic_exists = False
    ready.write_text("ready")
    try:
        for step in range(10_000_000):  # bounded by the stop file and the deadline
            if stop_file.exists() or time.monotonic() > deadline:
                break
            op = OPS[step % len(OPS)]
            started = time.monotonic()
            error = None
            try:
                if op == "describe_features":
                    answer = admin.describe_features()
                    if MV not in answer:
                        raise AssertionError(f"no {MV} in {answer}")
                elif op == "describe_cluster":
                    answer = admin.describe_cluster()
                    if len(answer["brokers"]) != len(BROKERS):
                        raise AssertionError(f"brokers {answer['brokers']}")
                elif op == "describe_configs":
                    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, CONFIG_TOPIC)])
                elif op == "create_topic":
                    admin.create_topics([NewTopic(own_topic, 1, 1)])
                    topic_exists = True
                else:
                    admin.delete_topics([own_topic])
                    topic_exists = False
            except Exception as exc:  # every exception is the measurement
                error = f"{type(exc).__name__}: {exc}"[:500]
            calls.append({"client": index, "op": op, "start": started, "end": time.monotonic(), "error": error,
                          "wall": time.time()})
    finally:
        out.write_text(json.dumps({"calls": calls, "connections": dict(connections),
                                   "topic_left": topic_exists}))
        admin.close()
    return 0


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------

def renegotiation_counts(cluster, name: str) -> dict[int, int]:
    return {b: sum(1 for e in cluster.renegotiations(b) if e.get("metadata_version") == name) for b in BROKERS}


def wait_renegotiated(cluster, name: str, before: dict[int, int]) -> None:
    deadline = time.monotonic() + RENEGOTIATION_TIMEOUT_S
    while renegotiation_counts(cluster, name) != {b: before[b] + 1 for b in BROKERS}:
        now = renegotiation_counts(cluster, name)
        if any(now[b] > before[b] + 1 for b in BROKERS):
            raise RuntimeError(f"a broker renegotiated more than once at {name}: {before} -> {now}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"brokers did not renegotiate at {name} within {RENEGOTIATION_TIMEOUT_S} s: {now}")
        time.sleep(POLL_S)


def move(admin, cluster, target: str, downgrade: bool) -> dict:
    """One UpdateFeatures through a broker, then the wait for every broker to renegotiate.
    An exception from the call is the driver's own client-visible error: it is recorded,
    and the controllers are asked whether the change was applied anyway (a lost answer)."""
    from kafka.admin import UpdateFeatureType

    from server.controller.features import metadata_version_from_name

    level = metadata_version_from_name(target).level
    before = renegotiation_counts(cluster, target)
    started = time.monotonic()
    update = (UpdateFeatureType.SAFE_DOWNGRADE, level) if downgrade else level
    error = None
    try:
        result = admin.update_features({MV: update})
        if result != {MV: "OK"}:
            raise RuntimeError(f"update_features to {target} answered {result}")
    except Exception as exc:  # the measurement: what the driver's client saw
        error = f"{type(exc).__name__}: {exc}"[:300]
    acknowledged = time.monotonic()
    applied = cluster.any_controller_view().finalized.get(MV) == level
    if error is not None and not applied:
        raise RuntimeError(f"move to {target} failed and was not applied: {error}")
    wait_renegotiated(cluster, target, before)
    return {"target": target, "start": started, "acknowledged": acknowledged, "renegotiated": time.monotonic(),
            "error": error, "wall": time.time()}


def overlaps(start: float, end: float, windows: list[tuple[float, float]]) -> bool:
    return any(start <= w_end and end >= w_start for w_start, w_end in windows)


def summarise(calls: list[dict], windows: list[tuple[float, float]]) -> dict:
    by_client: dict[int, list[dict]] = {}
    for call in calls:
        by_client.setdefault(call["client"], []).append(call)
    gaps = {"during": [], "quiet": []}
    for own in by_client.values():
        ends = sorted(c["end"] for c in own)
        for previous, following in zip(ends, ends[1:]):
            gaps["during" if overlaps(previous, following, windows) else "quiet"].append(
                (following - previous, previous))
    latency = {"during": [], "quiet": []}
    for call in calls:
        latency["during" if overlaps(call["start"], call["end"], windows) else "quiet"].append(
            call["end"] - call["start"])
    return {"gaps": gaps, "latency": latency}


def run(args: argparse.Namespace) -> int:
    from kafka.admin import KafkaAdminClient, NewTopic

    from cli.upgrade_story import LocalCluster, log_events, node_view

    budget_deadline = time.monotonic() + args.budget_s
    work = common.work_dir(args.dir, "bench-mv-under-load-")
    cluster = LocalCluster(work / "cluster", controllers=3, brokers=len(BROKERS), metadata_version=LOW,
                           extra={"log.level": args.log_level})
    workers: list[subprocess.Popen] = []
    stop_file = work / "stop"
    load_before = os.getloadavg()
    moves: list[dict] = []
    driver_error = None
    ranges: dict[str, dict[int, tuple[int, int]]] = {}
    try:
        cluster.bring_up()
        admin = KafkaAdminClient(bootstrap_servers=cluster.broker_addresses, client_id="mv-bench-driver",
                                 request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            admin.create_topics([NewTopic(CONFIG_TOPIC, 1, 1)])
            worker_deadline = budget_deadline + 30.0  # the workers' own bound, past the driver's
            for index in range(args.clients):
                workers.append(subprocess.Popen(
                    [common.PYTHON, __file__, "--worker", str(index), "--bootstrap", cluster.broker_addresses,
                     "--deadline", repr(worker_deadline), "--stop-file", str(stop_file),
                     "--out", str(work / f"client-{index}.json"), "--ready", str(work / f"client-{index}.ready")],
                    cwd=common.REPO, stdout=open(work / f"client-{index}.log", "wb"), stderr=subprocess.STDOUT))
            ready_deadline = time.monotonic() + WORKER_START_TIMEOUT_S
            while not all((work / f"client-{i}.ready").exists() for i in range(args.clients)):
                if time.monotonic() > ready_deadline or any(w.poll() is not None for w in workers):
                    raise RuntimeError(f"clients did not start; see {work}/client-*.log")
                time.sleep(POLL_S)
            ranges[LOW] = node_view(cluster.address(BROKERS[0])).api_ranges
            time.sleep(args.quiet_s)  # a quiet baseline: the clients' load with MV still
            for number in range(args.moves):
                if time.monotonic() + RENEGOTIATION_TIMEOUT_S > budget_deadline:
                    driver_error = f"budget: stopped after {number} of {args.moves} moves"
                    break
                up = number % 2 == 0
                moves.append(move(admin, cluster, HIGH if up else LOW, downgrade=not up))
                if HIGH not in ranges:
                    ranges[HIGH] = node_view(cluster.address(BROKERS[0])).api_ranges
                time.sleep(args.quiet_s)  # quiet between moves, so "quiet" has samples of its own
        except Exception as exc:  # report what happened with what was measured so far
            driver_error = f"{type(exc).__name__}: {exc}"
        finally:
            admin.close()
        stop_file.write_text("stop")
        for process in workers:
            try:
                process.wait(timeout=REQUEST_TIMEOUT_MS / 1000 + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        closes = {b: log_events(cluster.spec(b).log_path, "broker.client_connections_closed") for b in BROKERS}
    finally:
        for process in workers:
            common.stop(process)
        cluster.stop_all()
    load_after = os.getloadavg()

    calls, connections, topics_left = [], Counter(), 0
    for index in range(args.clients):
        path = work / f"client-{index}.json"
        if not path.exists():
            print(f"client {index} wrote no results; see {work}/client-{index}.log")
            continue
        data = json.loads(path.read_text())
        calls += data["calls"]
        connections.update(data["connections"])
        topics_left += bool(data["topic_left"])
    windows = [(m["start"], m["renegotiated"] + args.settle_s) for m in moves]
    summary = summarise(calls, windows)
    errors = [c for c in calls if c["error"]]
    t0 = min((c["start"] for c in calls), default=0.0)

    print(f"`{common.command_line()}`\n")
    print(f"load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f}; "
          f"{os.cpu_count()} CPUs; work dir {work}\n")
    if driver_error:
        print(f"**driver stopped: {driver_error}**\n")
    move_rows = [[i + 1, m["target"], f"{(m['acknowledged'] - m['start']) * 1000:.0f}",
                  f"{(m['renegotiated'] - m['start']) * 1000:.0f}",
                  "OK" if m["error"] is None else f"applied, but the driver got {m['error']}"]
                 for i, m in enumerate(moves)]
    print(common.markdown_table(["move", "to", "answered ms", "all brokers renegotiated ms", "driver saw"], move_rows))
    print()
    rows = []
    for phase in ("during", "quiet"):
        lat = summary["latency"][phase]
        gaps = summary["gaps"][phase]
        longest = max(gaps, default=(float("nan"), 0.0))
        phase_errors = sum(1 for c in errors if overlaps(c["start"], c["end"], windows) == (phase == "during"))
        rows.append([phase + (" MV moves" if phase == "during" else ""), len(lat), phase_errors,
                     f"{common.percentile(lat, 0.5) * 1000:.1f}", f"{common.percentile(lat, 0.99) * 1000:.1f}",
                     f"{max(lat, default=float('nan')) * 1000:.0f}",
                     f"{longest[0] * 1000:.0f} (at +{longest[1] - t0:.1f} s)"])
    print(common.markdown_table(["phase", "calls", "errors", "p50 ms", "p99 ms", "max ms", "longest stall ms"], rows))
    print()
    per_op = Counter(c["op"] for c in calls)
    print("calls per op: " + ", ".join(f"{op} {per_op[op]}" for op in OPS))
    print(f"clients' kafka-python connections: opened {connections['created']}, closed {connections['closed']} "
          f"after start-up ({args.clients} clients)")
    closed_events = sum(len(v) for v in closes.values())
    closed_conns = sum(e.get("connections") or 0 for v in closes.values() for e in v)
    print(f"brokers' broker.client_connections_closed events: {closed_events} "
          f"({closed_conns} connections closed by brokers)")
    print(f"topics left behind by clients stopped mid-cycle: {topics_left}")
    if len(ranges) == 2:
        changed = sorted(k for k in set(ranges[LOW]) | set(ranges[HIGH]) if ranges[LOW].get(k) != ranges[HIGH].get(k))
        print(f"broker ApiVersions ranges that differ between {LOW} and {HIGH}: " + (", ".join(
            f"{api_name(k)} {ranges[LOW].get(k)} -> {ranges[HIGH].get(k)}" for k in changed) or "none"))
    print(f"\nclient-visible errors: {len(errors)}")
    previous_error: dict[int, dict] = {}
    for c in sorted(errors, key=lambda c: c["start"]):
        phase = "during a move" if overlaps(c["start"], c["end"], windows) else "quiet"
        follow_on = ""
        earlier = previous_error.get(c["client"])
        if (c["op"] == "create_topic" and "TopicAlreadyExists" in c["error"] and earlier
                and earlier["op"] == "delete_topic"):
            follow_on = " [follows this client's failed delete_topic just before]"
        previous_error[c["client"]] = c
        wall = time.strftime("%H:%M:%S", time.gmtime(c["wall"])) + f"{c['wall'] % 1:.3f}"[1:]
        print(f"- client {c['client']} {c['op']} at +{c['start'] - t0:.2f} s ({wall}Z, {phase}, "
              f"{(c['end'] - c['start']) * 1000:.0f} ms): {c['error'][:300]}{follow_on}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if driver_error else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=10, help="metadata.version moves (up, down, up, ...)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--quiet-s", type=float, default=3.0, help="calm before the first move and after each")
    parser.add_argument("--settle-s", type=float, default=1.0,
                        help="how long after the last broker renegotiated a move still counts as 'during'")
    parser.add_argument("--budget-s", type=float, default=600.0, help="no move starts after this")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    parser.add_argument("--log-level", default="info", help="the nodes' log.level (debug: every request and close)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--stop-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker(args.worker, args.bootstrap, args.deadline, args.stop_file, args.out, args.ready)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
