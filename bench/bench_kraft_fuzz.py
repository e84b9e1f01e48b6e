"""KRaft under fuzzed frames: the core in-process, then a live 3-voter quorum over loopback.

Two measurements, one command line, each printing what it did:

  core   structure-aware requests and mutated encodings (tests/fuzz/kraft_inputs.py)
         driven into one in-memory `RaftCore` per 100 inputs, cycling through the
         roles of tests/fuzz/kraft_harness.py, exactly as the driver does it
         (decode, validate.check_request, core.handle_request, Ready/advance with
         every outbound body encoded), with the harness's invariants checked after
         every input. Reports inputs/s (generation included, and generation alone).
  live   three real `kraftwerk controller` processes (cli/local_cluster.py, fsync
         on). Once they have a leader and a first commit, `--frames` fuzzed request
         frames (Kafka request header, structure-aware bodies aimed at each node with
         the real cluster id and voter ids, mutated bodies, mutated headers, lying
         sizes; tests/fuzz/kraft_live.py) go to all three nodes on
         `--connections` connections per node, as fast as they are taken. Then:
         every node alive; every node names the same leader; an UpdateFeatures
         group.version flip commits; every node's log has no error-level line or
         traceback; SIGTERM all (every exit status 0), start all, leader + commit
         again. Reports frames/s, the refusal counts the nodes logged, the outcome.

Timing targets live here, never in tests. The outcome is what matters: the exit
status is 0 only if every check held.

Run: .venv/bin/python bench/bench_kraft_fuzz.py [--frames 100000] [--core-inputs 20000]
        [--connections 8] [--seed N] [--dir PATH] [--skip-core] [--skip-live]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import trio  # noqa: E402

import _common as common  # noqa: E402
from protocol.registry import API_MESSAGES  # noqa: E402
from fuzz.kraft_harness import CLUSTER_ID, ROLES, build_node, encode_body  # noqa: E402
from fuzz.kraft_inputs import Aim, RandomChooser, draw_body, mutate, pick_api  # noqa: E402
from fuzz.kraft_live import BlastStats, LiveTarget, blast  # noqa: E402

INPUTS_PER_NODE = 100
LIVE_TIME_LIMIT_S = 1800.0
LEADER_TIMEOUT_S = 60.0
COMMIT_TIMEOUT_S = 60.0
GROUP_VERSION = "group.version"
UPGRADE, SAFE_DOWNGRADE = 1, 2
NOT_CONTROLLER = 41


# --------------------------------------------------------------------------
# core (in-process)
# --------------------------------------------------------------------------

def generate_inputs(count: int, seed: int) -> float:
    """Seconds to draw `count` inputs without delivering them (to subtract from the core rate)."""
    chooser = RandomChooser(random.Random(seed))
    aim = Aim(CLUSTER_ID, (1, 2, 3), 1, epochs=(5,), end_offsets=(16,))
    started = time.perf_counter()
    for _ in range(count):
        api_key, version = pick_api(chooser)
        encoded = encode_body(api_key, "request", version, draw_body(chooser, API_MESSAGES[api_key][0], version, aim))
        if chooser.integer(0, 1):
            mutate(chooser, encoded)
    return time.perf_counter() - started


def run_core(count: int, seed: int) -> dict:
    chooser = RandomChooser(random.Random(seed))
    outcomes: Counter = Counter()
    failures: list[str] = []
    node = None
    started = time.perf_counter()
    for index in range(count):
        if index % INPUTS_PER_NODE == 0:
            node = build_node(ROLES[(index // INPUTS_PER_NODE) % len(ROLES)], seed=index)
        core = node.core
        aim = Aim(CLUSTER_ID, (1, 2, 3), node.node_id, epochs=(core.epoch,),
                  end_offsets=(core.end_offset, core.high_watermark))
        api_key, version = pick_api(chooser)
        encoded = encode_body(api_key, "request", version, draw_body(chooser, API_MESSAGES[api_key][0], version, aim))
        try:
            if chooser.integer(0, 1):
                outcome = node.deliver_bytes(api_key, version, mutate(chooser, encoded))
            else:
                outcome = node.deliver(api_key, version, API_MESSAGES[api_key][0].decode(version, encoded))
            outcomes[outcome.kind] += 1
        except Exception as exc:  # a finding: recorded with the node's trace, then a fresh node
            outcomes["FAILED"] += 1
            if len(failures) < 5:
                failures.append(f"{type(exc).__name__}: {exc}\n    " + "\n    ".join(node.trace[-4:]))
            node = build_node(ROLES[index % len(ROLES)], seed=index)
    elapsed = time.perf_counter() - started
    return {"inputs": count, "elapsed_s": elapsed, "outcomes": outcomes, "failures": failures}


# --------------------------------------------------------------------------
# live quorum
# --------------------------------------------------------------------------

def update_group_version(conn: common.Conn, level: int) -> int:
    body = {"timeout_ms": 30_000, "validate_only": False, "feature_updates": [{
        "feature": GROUP_VERSION, "max_version_level": level, "allow_downgrade": level == 0,
        "upgrade_type": UPGRADE if level else SAFE_DOWNGRADE}]}
    reply, _ = conn.call(57, 1, body)
    codes = [reply.error_code] + [r.error_code for r in reply.results or []]
    return next((code for code in codes if code), 0)


def commit_flip(quorum: common.Quorum, level: int) -> tuple[int, float]:
    """group.version moved to `level` through whichever node leads: (leader id, seconds)."""
    started = time.monotonic()
    deadline = started + COMMIT_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        leader = quorum.find_active(LEADER_TIMEOUT_S)
        try:
            with common.Conn(quorum.port(leader), "bench-kraft-fuzz") as conn:
                code = update_group_version(conn, level)
        except OSError as exc:
            last = exc
            continue
        if code == 0:
            return leader, time.monotonic() - started
        last = code
        if code != NOT_CONTROLLER:
            raise RuntimeError(f"UpdateFeatures group.version={level} failed with {code}")
        time.sleep(common.LEADER_POLL_S)
    raise RuntimeError(f"no commit of group.version={level} within {COMMIT_TIMEOUT_S} s (last: {last})")


def leaders_named(quorum: common.Quorum) -> dict[int, int]:
    """Each live node's view of the active controller (Metadata v12)."""
    views = {}
    for node_id in quorum.alive():
        with common.Conn(quorum.port(node_id), "bench-kraft-fuzz") as conn:
            views[node_id] = common.metadata_controller_id(conn)
    return views


def wait_agreed_leader(quorum: common.Quorum) -> int:
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    views: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            views = leaders_named(quorum)
        except OSError:
            views = {}
        if len(views) == len(quorum.specs) and len(set(views.values())) == 1 and min(views.values()) > 0:
            return next(iter(views.values()))
        time.sleep(common.LEADER_POLL_S)
    raise RuntimeError(f"the nodes do not agree on a leader within {LEADER_TIMEOUT_S} s: {views}")


def log_findings(quorum: common.Quorum) -> dict[int, dict]:
    """Per node: refusals by event/error, error-level lines, tracebacks (from its JSON log)."""
    found = {}
    for node_id, spec in quorum.specs.items():
        refused: Counter = Counter()
        errors: list[str] = []
        tracebacks = 0
        text = spec.log_path.read_text(errors="replace") if spec.log_path.exists() else ""
        for line in text.splitlines():
            if "Traceback" in line:
                tracebacks += 1
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("event", "").endswith("_refused"):
                refused[f"{entry['event']}:{entry.get('error')}"] += 1
            if entry.get("level") in ("error", "critical") and len(errors) < 5:
                errors.append(line[:300])
        found[node_id] = {"refused": refused, "errors": errors, "tracebacks": tracebacks,
                          "log_lines": text.count("\n")}
    return found


def run_live(args) -> tuple[bool, dict]:
    work = common.work_dir(args.dir, "bench-kraft-fuzz-")
    report: dict = {"work": str(work)}
    quorum = common.Quorum(work, 3, "3.8-IV0")
    ok = True
    try:
        quorum.start_all()
        leader = quorum.find_active(LEADER_TIMEOUT_S)
        commit_flip(quorum, 1)
        with common.Conn(quorum.port(leader), "bench-kraft-fuzz") as conn:
            view = common.describe_quorum(conn)
        epoch, high_watermark = view.leader_epoch, view.high_watermark
        report["before"] = {"leader": leader, "epoch": epoch, "high_watermark": high_watermark}
        targets = [LiveTarget(node_id, quorum.port(node_id),
                              Aim(quorum.cluster_id, (1, 2, 3), node_id, epochs=(epoch,),
                                  end_offsets=(high_watermark,)))
                   for node_id in sorted(quorum.specs)]
        cpu_before = {node_id: common.process_cpu_s(quorum.pid(node_id)) for node_id in quorum.specs}
        busy_before = common.machine_busy_s()
        stats: BlastStats = trio.run(blast, targets, args.frames, args.connections, args.seed, LIVE_TIME_LIMIT_S)
        report["blast"] = stats
        report["busy_s"] = common.machine_busy_s() - busy_before
        report["server_cpu_s"] = {node_id: common.process_cpu_s(quorum.pid(node_id)) - cpu_before[node_id]
                                  for node_id in quorum.specs if node_id in quorum.alive()}
        # -- the checks --------------------------------------------------------------
        alive = sorted(quorum.alive())
        report["alive_after_blast"] = alive
        if alive != sorted(quorum.specs):
            ok = False
            report["outcome"] = f"nodes died: alive {alive}"
            return ok, report
        report["leader_after_blast"] = wait_agreed_leader(quorum)
        leader, seconds = commit_flip(quorum, 0)
        report["commit_after_blast"] = {"leader": leader, "seconds": round(seconds, 3)}
        with common.Conn(quorum.port(leader), "bench-kraft-fuzz") as conn:
            view = common.describe_quorum(conn)
        report["after"] = {"leader": leader, "epoch": view.leader_epoch, "high_watermark": view.high_watermark}
        # -- restart everything ---------------------------------------------------------
        exits = {}
        for node_id, process in quorum.processes.items():
            quorum._lc.stop_controller(process)
            exits[node_id] = process.process.returncode
        report["exit_codes"] = exits
        if any(code != 0 for code in exits.values()):
            ok = False
        quorum.start_all()
        report["leader_after_restart"] = wait_agreed_leader(quorum)
        leader, seconds = commit_flip(quorum, 1)
        report["commit_after_restart"] = {"leader": leader, "seconds": round(seconds, 3)}
    except Exception as exc:
        ok = False
        report["outcome"] = f"{type(exc).__name__}: {exc}"
    finally:
        quorum.stop_all()
        report["logs"] = log_findings(quorum)
    if any(found["errors"] or found["tracebacks"] for found in report["logs"].values()):
        ok = False
    report.setdefault("outcome", "ok" if ok else "FAILED (see exit codes / logs)")
    return ok, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="fuzzed frames sent to the live quorum")
    parser.add_argument("--core-inputs", type=int, default=20_000, help="fuzzed inputs driven into the core")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections per node")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--skip-core", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args(argv)
    os.chdir(common.REPO)  # local_cluster runs `python -m cli.main` from the current directory
    print(f"command: {common.command_line()}")
    print(f"uptime: {os.popen('uptime').read().strip()}")
    ok = True
    if not args.skip_core:
        generation_s = generate_inputs(args.core_inputs, args.seed)
        core = run_core(args.core_inputs, args.seed)
        rate = core["inputs"] / core["elapsed_s"]
        print(f"\n## core (in-process): {core['inputs']} inputs in {core['elapsed_s']:.1f} s = {rate:.0f} inputs/s "
              f"(generation alone {core['inputs'] / generation_s:.0f}/s; outcomes {dict(core['outcomes'])})")
        for failure in core["failures"]:
            print(f"  FINDING {failure}")
        ok = ok and not core["failures"]
    if not args.skip_live:
        live_ok, report = run_live(args)
        stats = report.get("blast")
        print(f"\n## live 3-voter quorum: {stats.summary() if stats else 'no blast'}")
        print(f"  machine busy {report.get('busy_s', 0):.1f} CPU-s; server CPU-s {report.get('server_cpu_s')}")
        for key in ("before", "alive_after_blast", "leader_after_blast", "commit_after_blast", "after", "exit_codes",
                    "leader_after_restart", "commit_after_restart", "outcome"):
            print(f"  {key}: {report.get(key)}")
        for node_id, found in report.get("logs", {}).items():
            print(f"  node {node_id}: {found['log_lines']} log lines, tracebacks {found['tracebacks']}, "
                  f"refused {dict(found['refused'])}")
            for line in found["errors"]:
                print(f"    ERROR {line}")
        print(f"  work dir: {report['work']}")
        ok = ok and live_ok
    print(f"\nuptime: {os.popen('uptime').read().strip()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
