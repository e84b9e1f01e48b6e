"""How long `kraftwerk cluster up` takes to stop on SIGTERM (what `docker stop`, systemd and
CI send), against the floor of the same process tree with no node work in it.

Per run, real processes on 127.0.0.1:

  ours        `kraftwerk cluster up --controllers C --brokers B` (own session), waited for
              until it prints "Press Ctrl-C to stop." (every broker unfenced); then SIGTERM
              to that process alone, as `docker stop` sends it, and the time to its exit.
              From the nodes' own logs (wall clock): when the last broker and the last
              controller logged `server.stopped`, i.e. the two waves of the stop (brokers'
              controlled shutdown first, then the controllers). Afterwards no process may
              name the cluster's directory in its arguments (a node left behind fails the run).
  bare        one Python process that exits on SIGTERM: the interpreter's and the kernel's
              share of any stop (signal delivery, exit, reaping).
  bare tree   a Python parent with C + B bare Python children in sessions of their own,
              stopped as `cluster up` stops its nodes (SIGTERM to the B "brokers", wait for
              them, then to the C "controllers", wait): the floor of the orchestration with
              the protocol work (controlled shutdown, resignation, log close) taken out.

Medians over the runs (min and max beside them). Timing targets live here, never in tests;
the goal for 3 + 3 is under 5 s.

Run: .venv/bin/python bench/bench_shutdown.py [--runs 5] [--controllers 3] [--brokers 3]
         [--json FILE] [--dir DIR --keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
from cli import local_cluster as lc  # noqa: E402

UP_TIMEOUT_S = 180.0
EXIT_TIMEOUT_S = 60.0
POLL_S = 0.01  # polling another process's output: there is nothing on it to wait on
READY_LINE = "Press Ctrl-C to stop."

# A process that exits 0 on SIGTERM as soon as it can, and says when it is ready.
BARE = ("import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    signal.pause()\n")

# The bare tree: argv[1] "brokers", argv[2] "controllers"; stops them in two waves on SIGTERM.
BARE_TREE = ("import signal, subprocess, sys\n"
             "def start():\n"
             "    child = subprocess.Popen([sys.executable, '-c', BARE], stdout=subprocess.PIPE, text=True,\n"
             "                             start_new_session=True)\n"
             "    child.stdout.readline()\n"
             "    return child\n"
             "brokers = [start() for _ in range(int(sys.argv[1]))]\n"
             "controllers = [start() for _ in range(int(sys.argv[2]))]\n"
             "def stop(*_):\n"
             "    for wave in (brokers, controllers):\n"
             "        for child in wave:\n"
             "            child.send_signal(signal.SIGTERM)\n"
             "        for child in wave:\n"
             "            child.wait(30)\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             "print('ready', flush=True)\n"
             "while True:\n"
             "    signal.pause()\n")


class BenchError(RuntimeError):
    """A step did not happen within its bound; the message says which, with the evidence."""


def processes_mentioning(text: str) -> list[int]:
    """Running processes (zombies aside) whose arguments name `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            command = Path("/proc", entry, "cmdline").read_bytes()
            state = Path("/proc", entry, "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in command and state != "Z":
            found.append(int(entry))
    return found


def _iso_to_epoch_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _last_stopped_s(logs: list[Path], since_epoch_s: float) -> float | None:
    """Seconds from `since_epoch_s` to the last `server.stopped` among these logs."""
    stamps = []
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if '"server.stopped"' in line:
                try:
                    stamps.append(_iso_to_epoch_s(json.loads(line)["timestamp"]))
                except (ValueError, KeyError):
                    continue
    return max(stamps) - since_epoch_s if stamps else None


def kill_tree(process: subprocess.Popen, pids: list[int]) -> None:
    """After a failed run: the process and every node it reported."""
    for pid in [process.pid, *pids]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass


def run_ours(work: Path, controllers: int, brokers: int) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    cluster_dir = work / "cluster"
    out_path = work / "up.out"
    argv = lc.CLI + ["cluster", "up", "--controllers", str(controllers), "--brokers", str(brokers),
                     "--dir", str(cluster_dir), "--base-port", str(lc.free_port_run(controllers)),
                     "--broker-base-port", str(lc.free_port_run(max(brokers, 1)))]
    started = time.monotonic()
    with out_path.open("w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=common.REPO,
                                   start_new_session=True)
    pids: list[int] = []
    try:
        # Bounded by UP_TIMEOUT_S; the output is all there is to watch.
        while READY_LINE not in out_path.read_text():
            if process.poll() is not None:
                raise BenchError(f"cluster up exited with {process.returncode}:\n{out_path.read_text()[-3000:]}")
            if time.monotonic() - started > UP_TIMEOUT_S:
                raise BenchError(f"cluster up not ready within {UP_TIMEOUT_S:.0f} s:\n{out_path.read_text()[-3000:]}")
            time.sleep(POLL_S)
        up_s = time.monotonic() - started
        pids = [int(pid) for pid in re.findall(r"\(pid (\d+),", out_path.read_text())]
        signalled_epoch_s = time.time()
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(EXIT_TIMEOUT_S)
        stop_s = time.monotonic() - signalled
    except BaseException:
        kill_tree(process, pids)
        raise
    left = processes_mentioning(str(cluster_dir))
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return {
        "up_s": round(up_s, 3),
        "stop_s": round(stop_s, 4),
        "exit_code": code,
        "nodes": len(pids),
        "left_behind": len(left),
        "brokers_stopped_s": _rounded(_last_stopped_s(sorted(cluster_dir.glob("broker-*.log")), signalled_epoch_s)),
        "controllers_stopped_s": _rounded(_last_stopped_s(sorted(cluster_dir.glob("controller-*.log")),
                                                          signalled_epoch_s)),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def run_floor(argv: list[str]) -> dict:
    """SIGTERM -> exit of a process that prints "ready" once it handles SIGTERM."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # readline blocks until the line or EOF; the wait below is bounded.
        if process.stdout.readline().strip() != "ready":
            raise BenchError(f"{argv[:3]} did not get ready (exit {process.poll()})")
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(EXIT_TIMEOUT_S)
        return {"stop_s": round(time.monotonic() - signalled, 4), "exit_code": code}
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(EXIT_TIMEOUT_S)
        process.stdout.close()


def summary(samples: list[float]) -> dict | None:
    if not samples:
        return None
    return {"median_s": round(statistics.median(samples), 4), "min_s": round(min(samples), 4),
            "max_s": round(max(samples), 4), "runs": len(samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each (default: %(default)s)")
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--dir", help="work directory (default: a new one under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.runs < 1 or not 1 <= args.controllers <= 9 or not 0 <= args.brokers <= 50:
        parser.error("--runs >= 1, --controllers 1-9, --brokers 0-50")
    work = Path(args.dir) if args.dir else common.work_dir(None, "bench-shutdown-")
    work.mkdir(parents=True, exist_ok=True)
    print(f"    {common.command_line()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; work dir {work}")
    ours, bare, tree = [], [], []
    try:
        for run in range(args.runs):
            result = run_ours(work / f"run-{run}", args.controllers, args.brokers)
            ours.append(result)
            print(f"run {run}: cluster up {json.dumps(result)}", flush=True)
            bare.append(run_floor([common.PYTHON, "-c", BARE]))
            tree.append(run_floor([common.PYTHON, "-c", f"BARE = {BARE!r}\n" + BARE_TREE,
                                   str(args.brokers), str(args.controllers)]))
            print(f"run {run}: bare {json.dumps(bare[-1])}, bare tree {json.dumps(tree[-1])}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    size = f"{args.controllers}+{args.brokers}"
    results = {
        "size": size,
        "ours": summary([r["stop_s"] for r in ours]),
        "ours_brokers_stopped": summary([r["brokers_stopped_s"] for r in ours if r["brokers_stopped_s"] is not None]),
        "ours_controllers_stopped": summary([r["controllers_stopped_s"] for r in ours
                                             if r["controllers_stopped_s"] is not None]),
        "ours_up": summary([r["up_s"] for r in ours]),
        "bare": summary([r["stop_s"] for r in bare]),
        "bare_tree": summary([r["stop_s"] for r in tree]),
        "runs": ours,
        "exit_codes": sorted({r["exit_code"] for r in ours + bare + tree}),
        "left_behind": sum(r["left_behind"] for r in ours),
    }
    rows = [
        [f"`cluster up` {size}: SIGTERM -> exit", *_cells(results["ours"])],
        ["  of which: last broker stopped", *_cells(results["ours_brokers_stopped"])],
        ["  of which: last controller stopped", *_cells(results["ours_controllers_stopped"])],
        [f"floor: bare tree {size} (two waves, no node work)", *_cells(results["bare_tree"])],
        ["floor: one bare Python process", *_cells(results["bare"])],
    ]
    print()
    print(common.markdown_table(["SIGTERM -> exit", "median s", "min s", "max s", "runs"], rows))
    print(f"\n`cluster up` {size} ready (every broker unfenced) in a median {results['ours_up']['median_s']} s; "
          f"exit codes {results['exit_codes']}; processes left behind: {results['left_behind']}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": common.command_line(), "results": results}, indent=2))
    return 0 if results["exit_codes"] == [0] and results["left_behind"] == 0 else 1


def _cells(stats: dict | None) -> list[object]:
    if stats is None:
        return ["-", "-", "-", 0]
    return [f"{stats['median_s']:.3f}", f"{stats['min_s']:.3f}", f"{stats['max_s']:.3f}", stats["runs"]]


if __name__ == "__main__":
    sys.exit(main())
