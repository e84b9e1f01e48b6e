"""The failure scenarios of KIP-268's test plan, driven through the runner on
trio's autojump clock: a member crashing during the upgrade, the leader
bounced last, a late rejoin, and a downgrade with one rolling bounce."""

from __future__ import annotations

import pytest
import trio

from streams.assignor import MemberConfig
from streams.runner import CRASH_AT_JOIN, CRASH_AT_SYNC, RunnerConfig, open_group_runner

OLD, NEW = MemberConfig("2.0"), MemberConfig("post-2.0")
IDS = ["a", "b", "c", "d", "e"]


async def formed(runner, config, ids=IDS):
    for member_id in ids:
        await runner.start(member_id, config)
    assert runner.leader == ids[0]


def versions(runner):
    return {member_id: used for member_id, (_, used, _) in runner.members().items()}


def assert_clean(report):
    assert report.failures == []
    assert report.invariant_violations == []
    assert report.lost_assignments == []


@pytest.mark.parametrize("crash_at", [CRASH_AT_JOIN, CRASH_AT_SYNC])
async def test_member_crashing_during_the_upgrade(crash_at, autojump_clock):
    async with open_group_runner(RunnerConfig(partitions=10), seed=5) as runner:
        await formed(runner, OLD)
        await runner.bounce("b", NEW)
        # "d" dies in the middle of the rebalance that "c"'s bounce starts.
        runner.crash_during_next_rebalance("d", crash_at)
        await runner.bounce("c", NEW)
        assert "d" not in runner.members()
        if crash_at == CRASH_AT_SYNC:
            # Its assignment died with it: the generation did not complete and
            # the session timeout forced another.
            assert runner.report.reasons.get("member-failed") == 1
        completed = runner.report.completed_rebalances
        await runner.restart("d", NEW)
        for member_id in ("e", "a"):
            await runner.bounce(member_id, NEW)
        assert runner.report.completed_rebalances > completed
        assert_clean(runner.report)
        assert set(versions(runner).values()) == {4}
        assert runner.report.last_assignment_version == 4
        owned = sorted(t for _, _, tasks in runner.members().values() for t in tasks)
        assert owned == sorted(runner.tasks)


async def test_leader_bounced_last_triggers_exactly_one_extra_rebalance(autojump_clock):
    async with open_group_runner(RunnerConfig(partitions=10), seed=7) as runner:
        await formed(runner, OLD)
        for member_id in ("b", "c", "d", "e"):
            await runner.bounce(member_id, NEW)
            assert runner.leader == "a"
        # The old leader answered every new member with a probe: all run at 3.
        assert set(versions(runner).values()) == {3}
        assert runner.report.probes == 4 and runner.report.leader_triggers == 0
        before = runner.report.rebalances
        await runner.bounce("a", NEW)
        assert runner.report.leader_triggers == 1
        assert runner.report.reasons.get("leader-trigger") == 1
        # The leader's own bounce, then the one rebalance it triggered.
        assert runner.report.rebalances - before == 2
        assert set(versions(runner).values()) == {4}
        assert runner.report.last_assignment_version == 4
        # Triggered once: a further rebalance changes nothing.
        await runner.rebalance_now("check")
        assert runner.report.leader_triggers == 1
        assert_clean(runner.report)


async def test_leader_not_bounced_last_needs_no_extra_rebalance(autojump_clock):
    """Bounce whoever leads while the leader still runs old code: once a new
    leader leads, the members it upgrades never need the extra rebalance."""
    async with open_group_runner(RunnerConfig(partitions=10), seed=7) as runner:
        await formed(runner, OLD)
        leader_was_new_before_last_bounce = False
        for _ in IDS:
            old = [m for m, (config, _, _) in runner.members().items() if config == OLD]
            leader_is_old = runner.members()[runner.leader][0] == OLD
            if len(old) == 1:
                leader_was_new_before_last_bounce = not leader_is_old
            await runner.bounce(runner.leader if leader_is_old else old[0], NEW)
        # With this seed a new-code member leads before the last bounce (the
        # precondition of this test; the previous test covers the other case).
        assert leader_was_new_before_last_bounce
        assert runner.report.leader_triggers == 0
        assert "leader-trigger" not in runner.report.reasons
        assert set(versions(runner).values()) == {4}
        assert_clean(runner.report)


async def test_downgrade_with_one_rolling_bounce(autojump_clock):
    async with open_group_runner(RunnerConfig(partitions=10), seed=9) as runner:
        await formed(runner, NEW)
        assert runner.report.last_assignment_version == 4
        for member_id in ["c", "a", "e", "b", "d"]:
            await runner.bounce(member_id, OLD)
        assert runner.report.bounces == 5
        assert set(versions(runner).values()) == {3}
        assert runner.report.last_assignment_version == 3
        assert_clean(runner.report)


async def test_member_rejoining_late(autojump_clock):
    async with open_group_runner(RunnerConfig(partitions=10), seed=13) as runner:
        await formed(runner, OLD)
        await runner.bounce("b", NEW)
        runner.join_late_in_next_rebalance("e")
        await runner.bounce("c", NEW)
        # "e" missed the join deadline, was left out of one generation and
        # came back in the next.
        assert runner.report.reasons.get("late-join") == 1
        assert "e" in runner.members()
        for member_id in ("d", "e", "a"):
            await runner.bounce(member_id, NEW)
        assert set(versions(runner).values()) == {4}
        assert_clean(runner.report)


async def test_virtual_time_passes_but_no_wall_time(autojump_clock):
    start = trio.current_time()
    async with open_group_runner(RunnerConfig(partitions=4, rebalance_timeout_ms=60_000), seed=1) as runner:
        await formed(runner, OLD, ["a", "b"])
        runner.crash_during_next_rebalance("b", CRASH_AT_JOIN)
        await runner.rebalance_now("check")
    # The crash cost a full (virtual) rebalance timeout.
    assert trio.current_time() - start >= 60
