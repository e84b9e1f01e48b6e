"""The pure version-probing assignor: member and leader rules of KIP-268."""

from __future__ import annotations

import uuid

import pytest

from protocol.streams import assignment_info as ai
from protocol.streams import subscription_info as si
from protocol.streams import AssignmentInfo, TaskId
from streams.assignor import (
    MemberConfig,
    assign,
    build_subscription,
    initial_member_state,
    on_assignment,
)

TASKS = tuple(TaskId(0, p) for p in range(6))


def sub(release, upgrade_from=None, used=None):
    state = initial_member_state(MemberConfig(release, upgrade_from))
    if used is not None:
        state = type(state)(state.config, used)
    return build_subscription(state, uuid.uuid4(), (), "host:9092")


def versions_of(decision):
    return {m: ai.decode(b).version for m, b in decision.assignments.items()}


@pytest.mark.parametrize("release,upgrade_from,version", [
    ("2.0", None, 3), ("post-2.0", None, 4), ("2.0", "0.10.0", 1), ("2.0", "1.1", 2),
    ("post-2.0", "0.10.2", 2), ("1.1", "0.10.0", 1), ("1.1", None, 2), ("0.10.0", None, 1),
])
def test_member_sends_latest_or_the_upgrade_from_format(release, upgrade_from, version):
    state = initial_member_state(MemberConfig(release, upgrade_from))
    assert state.used_version == version
    assert si.decode(build_subscription(state, uuid.uuid4())).version == version


@pytest.mark.parametrize("release,upgrade_from", [
    ("1.1", "0.10.1"), ("0.10.0", "0.10.0"), ("2.0", "2.0"), ("2.0", "0.9"), ("3.0", None),
])
def test_invalid_upgrade_from_is_rejected(release, upgrade_from):
    with pytest.raises(ValueError):
        MemberConfig(release, upgrade_from)


def test_leader_probes_newer_subscriptions_and_assigns_the_rest():
    subs = {"a": sub("2.0"), "b": sub("post-2.0"), "c": sub("2.0")}
    decision = assign(MemberConfig("2.0"), subs, TASKS)
    assert decision.failure is None
    assert decision.probed_members == ("b",)
    probe = ai.decode(decision.assignments["b"])
    assert probe == AssignmentInfo(3, 3)
    owned = [t for m in ("a", "c") for t in ai.decode(decision.assignments[m]).active_tasks]
    assert sorted(owned) == list(TASKS)
    assert versions_of(decision) == {"a": 3, "b": 3, "c": 3}
    assert not decision.trigger_rebalance


def test_member_downgrades_on_probe_and_upgrades_when_the_leader_does():
    state = initial_member_state(MemberConfig("post-2.0"))
    outcome = on_assignment(state, ai.encode(AssignmentInfo(3, 3)))
    assert outcome.rejoin and outcome.probed and outcome.failure is None
    assert outcome.state.used_version == 3
    assert outcome.active_tasks == ()
    # A regular v3 assignment from a v3 leader leaves the downgrade in place.
    same = on_assignment(outcome.state, ai.encode(AssignmentInfo(3, 3, (TaskId(0, 1),))))
    assert same.state.used_version == 3 and not same.rejoin and same.active_tasks == (TaskId(0, 1),)
    # The leader now supports 4: use it from the next rebalance, without rejoining.
    up = on_assignment(same.state, ai.encode(AssignmentInfo(3, 4, (TaskId(0, 1),))))
    assert up.state.used_version == 4 and not up.rejoin and up.active_tasks == (TaskId(0, 1),)


def test_regular_lower_assignment_is_not_mistaken_for_a_probe():
    state = initial_member_state(MemberConfig("post-2.0"))
    outcome = on_assignment(state, ai.encode(AssignmentInfo(3, 4, (TaskId(0, 2),))))
    assert not outcome.rejoin and outcome.state.used_version == 4


def test_leader_encodes_at_the_lowest_version_used():
    subs = {"a": sub("2.0", "0.10.0"), "b": sub("1.1", "0.10.0"), "c": sub("2.0"), "d": sub("post-2.0", "1.1")}
    decision = assign(MemberConfig("post-2.0", "0.10.0"), subs, TASKS)
    assert set(versions_of(decision).values()) == {1}
    assert not decision.trigger_rebalance
    subs = {"a": sub("2.0"), "b": sub("1.1")}
    assert set(versions_of(assign(MemberConfig("2.0", "1.1"), subs, TASKS)).values()) == {2}


def test_leader_bounced_last_triggers_one_more_rebalance():
    # Upgraded members downgraded to 3 (they support 4); the new leader sends 4.
    subs = {"leader": sub("post-2.0"), "a": sub("post-2.0", used=3), "b": sub("post-2.0", used=3)}
    decision = assign(MemberConfig("post-2.0"), subs, TASKS)
    assert decision.encoded_version == 3 and decision.trigger_rebalance
    # Next round everyone uses 4: no further trigger.
    subs = {m: sub("post-2.0") for m in ("leader", "a", "b")}
    decision = assign(MemberConfig("post-2.0"), subs, TASKS)
    assert decision.encoded_version == 4 and not decision.trigger_rebalance
    # While any member only supports 3 there is nothing to switch up to.
    subs = {"leader": sub("post-2.0"), "a": sub("2.0")}
    assert not assign(MemberConfig("post-2.0"), subs, TASKS).trigger_rebalance


def test_pre_2_0_leader_fails_on_a_newer_subscription():
    decision = assign(MemberConfig("1.1"), {"a": sub("1.1"), "b": sub("2.0")}, TASKS)
    assert decision.failure and "unknown version 3" in decision.failure


def test_old_member_fails_on_a_newer_assignment():
    outcome = on_assignment(initial_member_state(MemberConfig("1.1")), ai.encode(AssignmentInfo(3, 3)))
    assert outcome.failure == "AssignmentInfo: unknown version 3 (sender supports up to 3)"
