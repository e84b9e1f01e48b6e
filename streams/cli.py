"""`kraftwerk probe-matrix`: KIP-268's upgrade matrix, measured.

Owns: the subcommand's arguments and its output (the table, then one line per
cell with the measured numbers). The lead wires it into `cli/main.py`:

    probe = sub.add_parser("probe-matrix", help="...")
    streams_cli.add_arguments(probe)
    ...  return streams_cli.run(args)

Exit status 0 when every cell reached the new version with the expected
number of rolling bounces, no member failed and every partition was assigned
exactly once after every completed rebalance; 1 otherwise.
"""

from __future__ import annotations

import argparse

from streams.matrix import (
    LEADER_FIRST,
    LEADER_LAST,
    LEADER_RANDOM,
    expected_bounces,
    format_matrix,
    run_matrix,
)


def _position(text: str) -> str | int:
    if text in (LEADER_FIRST, LEADER_LAST, LEADER_RANDOM):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"leader position must be first, last, random or an index: {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError("leader position must not be negative")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=int, default=4, help="group size (default 4)")
    parser.add_argument("--partitions", type=int, default=None, help="input partitions (default 2 x members)")
    parser.add_argument("--seed", type=int, default=0, help="seed for join order and bounce order")
    parser.add_argument("--leader-position", type=_position, default=LEADER_RANDOM,
                        help="where the first leader sits in the bounce order: first, last, random or an index")
    parser.add_argument("--details", action="store_true", help="print one line per cell with every measure")


def run(args: argparse.Namespace) -> int:
    if args.members < 1:
        print("probe-matrix: --members must be at least 1")
        return 2
    if isinstance(args.leader_position, int) and args.leader_position >= args.members:
        print("probe-matrix: --leader-position index must be below --members")
        return 2
    results = run_matrix(members=args.members, partitions=args.partitions, seed=args.seed,
                         leader_position=args.leader_position)
    print(f"KIP-268 upgrade matrix: {args.members} members, seed {args.seed}, "
          f"leader position {args.leader_position}; cell = rolling bounces needed b / rebalances r")
    print(format_matrix(results))
    bad = [r for r in results if not r.ok]
    if args.details or bad:
        print()
        print("from      to             expect  bounces  rebalances  probes  triggers  failures  lost  "
              "violations  leader@")
        for r in results:
            print(f"{r.old:<9} {r.new:<14} {expected_bounces(r.old, r.new):>6}  {r.bounces_needed:>7}  "
                  f"{r.rebalances:>10}  {r.probes:>6}  {r.leader_triggers:>8}  {len(r.failures):>8}  "
                  f"{len(r.lost_assignments):>4}  {len(r.invariant_violations):>10}  {r.leader_position:>7}")
        for r in bad:
            for line in (*r.failures, *r.invariant_violations, *r.lost_assignments)[:5]:
                print(f"  {r.old} -> {r.new}: {line}")
    print(f"{len(results) - len(bad)}/{len(results)} cells ok")
    return 0 if not bad else 1
