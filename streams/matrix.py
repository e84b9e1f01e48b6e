"""KIP-268's upgrade test matrix, each cell measured by the rebalance runner.

Owns: the list of cells (from release x to release, the KIP's table including
"post-2.0 (simulated metadata version 4)"), the upgrade plan for each cell
(one rolling bounce, or two with `upgrade.from` for the pre-2.0 formats), the
run of one cell on a virtual clock, and the table's text.

Rules kept here:
- The plan is KIP-268's: a pre-2.0 format (v1, v2) has no supported-version
  field, so a metadata change from it takes a first bounce with
  `upgrade.from=<old release>` (new code, old format) and a second without;
  from 2.0 on one bounce suffices (version probing); no metadata change at
  all (0.10.1 -> 1.1: both v2) is one plain bounce.
- A cell is measured, not asserted: the runner reports bounces, rebalances,
  failures and lost assignments; tests compare them with `expected_bounces`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import trio
import trio.testing

from streams.assignor import RELEASE_METADATA_VERSION, RELEASES, MemberConfig
from streams.runner import RunnerConfig, open_group_runner

FROM_RELEASES: tuple[str, ...] = RELEASES[:-1]          # 0.10.0 ... 2.0
TO_RELEASES: tuple[str, ...] = RELEASES[1:]             # 0.10.1 ... post-2.0

LEADER_FIRST = "first"
LEADER_LAST = "last"
LEADER_RANDOM = "random"


def cells() -> list[tuple[str, str]]:
    """Every (from, to) of the KIP's table: each later release."""
    return [(old, new) for i, old in enumerate(RELEASES) for new in RELEASES[i + 1:]]


def expected_bounces(old: str, new: str) -> int:
    old_version, new_version = RELEASE_METADATA_VERSION[old], RELEASE_METADATA_VERSION[new]
    if old_version < new_version and old_version < 3:
        return 2
    return 1


def upgrade_plan(old: str, new: str) -> list[MemberConfig]:
    """The config every member gets in each rolling bounce."""
    if expected_bounces(old, new) == 2:
        return [MemberConfig(new, upgrade_from=old), MemberConfig(new)]
    return [MemberConfig(new)]


@dataclass(frozen=True, slots=True)
class CellResult:
    old: str
    new: str
    members: int
    leader_position: int          # 0-based index of the first leader in the bounce order
    bounces_planned: int
    bounces_needed: int           # rolling bounces after which the group used the new version
    rebalances: int               # during the upgrade (forming the group not counted)
    probes: int
    leader_triggers: int
    failures: tuple[str, ...]
    invariant_violations: tuple[str, ...]
    lost_assignments: tuple[str, ...]
    final_version: int

    @property
    def target_version(self) -> int:
        return RELEASE_METADATA_VERSION[self.new]

    @property
    def ok(self) -> bool:
        return (self.bounces_needed == expected_bounces(self.old, self.new) and not self.failures
                and not self.invariant_violations and not self.lost_assignments
                and self.final_version == self.target_version)


def bounce_order(member_ids: list[str], leader: str, position: str | int, rng: random.Random) -> list[str]:
    others = [m for m in member_ids if m != leader]
    rng.shuffle(others)
    if position == LEADER_FIRST:
        index = 0
    elif position == LEADER_LAST:
        index = len(others)
    elif position == LEADER_RANDOM:
        index = rng.randrange(len(others) + 1)
    else:
        index = int(position)
    return others[:index] + [leader] + others[index:]


def group_version(runner) -> int | None:
    """The version every member uses, if they agree and the last assignment did too."""
    used = {version for _, version, _ in runner.members().values()}
    if len(used) == 1 and runner.report.last_assignment_version in used:
        return used.pop()
    return None


async def run_cell(old: str, new: str, *, members: int = 4, partitions: int | None = None, seed: int = 0,
                   leader_position: str | int = LEADER_RANDOM, plan: list[MemberConfig] | None = None) -> CellResult:
    partitions = partitions if partitions is not None else 2 * members
    rng = random.Random(seed)
    plan = plan if plan is not None else upgrade_plan(old, new)
    config = RunnerConfig(partitions=partitions)
    async with open_group_runner(config, seed=rng.getrandbits(32)) as runner:
        ids = [f"m{index:03d}" for index in range(members)]
        for member_id in ids:
            await runner.start(member_id, MemberConfig(old))
        leader = runner.leader
        order = bounce_order(ids, leader, leader_position, rng)
        # The upgrade is measured from here on.
        formed_rebalances = runner.report.rebalances
        bounces_needed = 0
        for round_index, member_config in enumerate(plan, start=1):
            for member_id in order:
                await runner.bounce(member_id, member_config)
            if not bounces_needed and group_version(runner) == RELEASE_METADATA_VERSION[new] \
                    and all(cfg == plan[-1] for cfg, _, _ in runner.members().values()):
                bounces_needed = round_index
        report = runner.report
        return CellResult(
            old=old, new=new, members=members, leader_position=order.index(leader),
            bounces_planned=len(plan), bounces_needed=bounces_needed,
            rebalances=report.rebalances - formed_rebalances, probes=report.probes,
            leader_triggers=report.leader_triggers, failures=tuple(report.failures),
            invariant_violations=tuple(report.invariant_violations),
            lost_assignments=tuple(report.lost_assignments),
            final_version=group_version(runner) or 0,
        )


def run_cell_sync(old: str, new: str, **kwargs) -> CellResult:
    """`run_cell` on a virtual clock: rebalance timeouts cost no wall time."""
    async def main() -> CellResult:
        return await run_cell(old, new, **kwargs)
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def run_matrix(**kwargs) -> list[CellResult]:
    return [run_cell_sync(old, new, **kwargs) for old, new in cells()]


def _label(release: str) -> str:
    return "post-2.0 (v4)" if release == "post-2.0" else release


def format_cell(result: CellResult) -> str:
    status = "ok" if result.ok else ("FAIL" if result.failures else "BAD")
    return f"{result.bounces_needed}b/{result.rebalances}r {status}"


def format_matrix(results: list[CellResult]) -> str:
    """The KIP's table: rows from-release, columns to-release, each cell
    'bounces needed b / rebalances r status'."""
    by_cell = {(r.old, r.new): r for r in results}
    header = ["from \\ to"] + [_label(r) for r in TO_RELEASES]
    rows = [header]
    for old in FROM_RELEASES:
        row = [_label(old)]
        for new in TO_RELEASES:
            result = by_cell.get((old, new))
            row.append(format_cell(result) if result else "")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
