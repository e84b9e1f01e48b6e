"""Commit latency of two checkouts of kraftwerk, measured side by side in one run.

This machine's speed drifts by up to 2x between minutes (shared VM), so two
separate runs of bench_quorum.py cannot tell a 10 % change from noise. Here
two 3-voter quorums run at once, one started from checkout A's code and one
from checkout B's (each process's working directory decides which `server`
package it imports), and blocks of commits alternate between them (A B, B A,
...). Each block reports its p50 latency and the CPU per commit of the
leader, the followers (mean) and this client; the verdict is the median of
the per-block B/A ratios, so drift hits both sides alike.

A commit is UpdateFeatures flipping group.version 0 <-> 1 (one record), as in
`bench_quorum.py latency`.

Run: .venv/bin/python bench/bench_quorum_ab.py A_DIR B_DIR [--blocks 20] [--per-block 200]
     (e.g. A_DIR = `git worktree add /tmp/base <rev>` with a .venv symlink, B_DIR = .)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
import bench_quorum as bq  # noqa: E402

WARMUP_COMMITS = 100
MAX_BLOCKS = 200
MAX_PER_BLOCK = 10_000


def block(quorum: common.Quorum, leader: int, conn: common.Conn, flip: bq.Flip, count: int) -> tuple:
    """(p50 µs, leader CPU µs, mean follower CPU µs, client CPU µs) per commit over `count` commits."""
    pids = {node: quorum.pid(node) for node in quorum.specs}
    before = {node: common.process_cpu_s(pid) for node, pid in pids.items()}
    mine_before = os.times()
    samples = sorted(flip.commit(conn) for _ in range(count))
    mine_after = os.times()
    used = {node: common.process_cpu_s(pid) - before[node] for node, pid in pids.items()}
    followers = [cpu for node, cpu in used.items() if node != leader]
    client = (mine_after.user + mine_after.system) - (mine_before.user + mine_before.system)
    return (samples[count // 2] / 1000, used[leader] / count * 1e6,
            sum(followers) / len(followers) / count * 1e6, client / count * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a_dir")
    parser.add_argument("b_dir")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=200)
    parser.add_argument("--dir", default=None, help="parent of the temporary work directories (the disk measured)")
    args = parser.parse_args(argv)
    if not 1 <= args.blocks <= MAX_BLOCKS or not 10 <= args.per_block <= MAX_PER_BLOCK:
        parser.error(f"--blocks must be in 1..{MAX_BLOCKS} and --per-block in 10..{MAX_PER_BLOCK}")
    sides = {"A": Path(args.a_dir).resolve(), "B": Path(args.b_dir).resolve()}
    results: dict[str, list[tuple]] = {"A": [], "B": []}
    works = []
    cwd = os.getcwd()
    try:
        with ExitStack() as stack:
            running = {}
            for name, directory in sides.items():
                work = common.work_dir(args.dir, f"bench_quorum_ab_{name}_")
                works.append(work)
                os.chdir(directory)  # the controllers import `server` from here
                quorum, leader = stack.enter_context(common.kraftwerk_quorum(work, bq.VOTERS, "3.8-IV0", {}))
                conn = stack.enter_context(common.Conn(quorum.port(leader), "bench-quorum-ab"))
                flip = bq.Flip(bq.GROUP_VERSION, 0, 1, 0)
                for _ in range(WARMUP_COMMITS):
                    flip.commit(conn)
                running[name] = (quorum, leader, conn, flip)
            os.chdir(cwd)
            for index in range(args.blocks):
                for name in ("A", "B") if index % 2 == 0 else ("B", "A"):
                    results[name].append(block(*running[name], args.per_block))
    finally:
        os.chdir(cwd)
        for work in works:
            shutil.rmtree(work, ignore_errors=True)

    print(f"$ {common.command_line()}")
    print(f"A = {sides['A']}, B = {sides['B']}: two 3-voter quorums of real processes (fsync on, 127.0.0.1) "
          f"running at once; {args.blocks} alternating blocks of {args.per_block} UpdateFeatures commits "
          f"(group.version flips) each; CPU from /proc (10 ms ticks). {os.cpu_count()} CPUs.\n")
    labels = ("p50 µs", "leader CPU µs/commit", "follower CPU µs/commit", "client CPU µs/commit")
    rows = []
    for column, label in enumerate(labels):
        a = statistics.median(r[column] for r in results["A"])
        b = statistics.median(r[column] for r in results["B"])
        ratios = [rb[column] / ra[column] for ra, rb in zip(results["A"], results["B"]) if ra[column]]
        rows.append([label, f"{a:,.0f}", f"{b:,.0f}", f"{statistics.median(ratios):.3f}" if ratios else "-"])
    print(common.markdown_table(["median of blocks", "A", "B", "B/A (median of per-block ratios)"], rows))
    p50_ratios = [rb[0] / ra[0] for ra, rb in zip(results["A"], results["B"])]
    print("\nper-block B/A p50: " + " ".join(f"{r:.2f}" for r in p50_ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
