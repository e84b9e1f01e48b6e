"""Run simulator seeds from the command line (replay one, or a nightly-style sweep).

    .venv/bin/python -m tests.sim.run --seed 1234          # replay one seed, print what happened
    .venv/bin/python -m tests.sim.run --seeds 100000       # sweep seeds 0..99999 (failures by invariant)

Disk loss: a static-voter Raft quorum (no KIP-853 directory ids) is only safe
when the node that lost its disk cannot have cast a vote that is still in
flight and the committed data survives on a majority of the other voters, so
the simulator wipes a voter only in that state (observers any time).
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.sim.cluster import InvariantViolation, Simulation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay one seed")
    parser.add_argument("--seeds", type=int, default=1000, help="number of seeds to sweep")
    parser.add_argument("--first", type=int, default=0, help="first seed of the sweep")
    args = parser.parse_args(argv)
    if args.seed is not None:
        simulation = Simulation(args.seed)
        print(f"seed {args.seed}: {simulation.config}")
        status = 0
        try:
            simulation.run()
        except InvariantViolation as exc:
            print(exc)
            status = 1
        else:
            print(f"ok: {simulation.event_count} events, {simulation.now} ms simulated, "
                  f"{len(simulation.committed)} committed entries")
        if simulation.hostile is not None:
            hostile = simulation.hostile
            print(f"hostile node ({hostile.identity}, claims id {hostile.claimed_id}) active "
                  f"{hostile.start_ms}-{hostile.stop_ms} ms")
        for name, count in sorted(simulation.stats.items()):
            print(f"  {name}: {count}")
        return status
    started = time.perf_counter()
    failures: dict[str, list[int]] = {}
    for seed in range(args.first, args.first + args.seeds):
        try:
            Simulation(seed).run()
        except InvariantViolation as exc:
            failures.setdefault(exc.invariant, []).append(seed)
            print(exc, file=sys.stderr)
    elapsed = time.perf_counter() - started
    failed = sum(len(seeds) for seeds in failures.values())
    print(f"{args.seeds} seeds, {failed} failed, {elapsed:.1f} s ({args.seeds / elapsed:.0f} seeds/s)")
    for invariant, seeds in sorted(failures.items()):
        print(f"  {invariant}: {' '.join(map(str, seeds))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
