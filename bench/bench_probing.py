"""KIP-268 version probing: rebalances and wall time to upgrade a 100-member
Streams group by rolling bounce, against the theoretical minimum.

Runs the in-process group rebalance runner (streams/runner.py) on
trio's MockClock (autojump): rebalance and session timeouts and the seeded
join delays advance virtual time only, so "wall s" is the CPU cost of the
simulation (codecs, assignor, trio scheduling) and "virtual s" is the group
time the modelled coordinator would have spent (join delays up to
--join-delay-ms per rebalance, no broker or network).

Scenarios (each --seeds times; the table shows min / median / max):
  2.0 -> post-2.0   one rolling bounce, version probing (simulated v4), with
                    the first leader bounced first, last, or at a seeded position.
  1.1 -> 2.0        two rolling bounces with upgrade.from (pre-2.0 format).
Theoretical minimum: members + 1 rebalances for one rolling bounce (one per
bounce plus the final switch to the new version), 2 x members for two (the
pre-2.0 formats carry no supported version, so there is no switch-up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio  # noqa: E402
import trio.testing  # noqa: E402

from bench._common import command_line, markdown_table  # noqa: E402
from streams.matrix import (  # noqa: E402
    LEADER_FIRST,
    LEADER_LAST,
    LEADER_RANDOM,
    expected_bounces,
    run_cell,
)

SCENARIOS = [
    ("2.0", "post-2.0", LEADER_FIRST),
    ("2.0", "post-2.0", LEADER_LAST),
    ("2.0", "post-2.0", LEADER_RANDOM),
    ("1.1", "2.0", LEADER_RANDOM),
]


def run_once(old: str, new: str, members: int, seed: int, position: str):
    async def main():
        start = trio.current_time()
        result = await run_cell(old, new, members=members, seed=seed, leader_position=position)
        return result, trio.current_time() - start

    wall_start = time.perf_counter()
    result, virtual_s = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return result, time.perf_counter() - wall_start, virtual_s


def spread(values: list[float], fmt: str) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    if low == high:
        return format(low, fmt)
    return f"{format(low, fmt)} / {format(mid, fmt)} / {format(high, fmt)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5, help="runs per scenario (seeds 0..N-1)")
    parser.add_argument("--quick", action="store_true", help="20 members, 2 seeds")
    args = parser.parse_args(argv)
    members, seeds = (20, 2) if args.quick else (args.members, args.seeds)

    print(command_line())
    print(f"{members} members, {2 * members} partitions, seeds 0..{seeds - 1}; min / median / max over seeds")
    rows = []
    all_ok = True
    for old, new, position in SCENARIOS:
        results, walls, virtuals = [], [], []
        for seed in range(seeds):
            result, wall_s, virtual_s = run_once(old, new, members, seed, position)
            results.append(result)
            walls.append(wall_s)
            virtuals.append(virtual_s)
        bounces = expected_bounces(old, new)
        # One rebalance per bounce, plus the switch-up rebalance a single
        # probing bounce may need; v1/v2 cannot trigger one, so two bounces
        # with upgrade.from need none.
        minimum = bounces * members + (1 if bounces == 1 else 0)
        rebalances = [r.rebalances for r in results]
        ok = all(r.ok for r in results)
        all_ok &= ok
        rows.append([
            f"{old} -> {'post-2.0 (v4)' if new == 'post-2.0' else new}",
            position,
            bounces,
            spread([float(r) for r in rebalances], ".0f"),
            minimum,
            spread([r / minimum for r in rebalances], ".2f"),
            spread([float(r.probes) for r in results], ".0f"),
            spread([float(r.leader_triggers) for r in results], ".0f"),
            spread(walls, ".2f"),
            spread([w * 1000 / r for w, r in zip(walls, rebalances)], ".1f"),
            spread(virtuals, ".0f"),
            "yes" if ok else "NO",
        ])
    print(markdown_table(
        ["upgrade", "first leader bounced", "rolling bounces", "rebalances", "minimum", "ratio",
         "probes", "leader triggers", "wall s", "wall ms / rebalance", "virtual s", "clean"],
        rows))
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
