"""Directed safety tests: every invariant checker of the simulator catches the violation it exists for.

A table of scenarios in the style of etcd raft's data-driven tests: each row
names a deliberately broken core (a `RaftCore` subclass whose breakage is
dormant until the scenario arms it on one node), which node runs it armed, and
the invariant the checker must name. The scenario runs a quiet three-voter
cluster until the leader has committed, arms the breakage, keeps proposing,
and expects `InvariantViolation` with that invariant. Each row also runs
unarmed, which must pass: the violation comes from the breakage, not from the
scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from server.raft.core import Append, RaftCore, Role, TruncateTo
from server.raft.quorum_state import QuorumState
from server.raft.validate import INT32_MAX

from .cluster import (
    CONSISTENT_COMMITTED_DATA,
    EPOCH_IN_RANGE,
    LIVENESS,
    MAJORITY_REACHED_HIGH_WATERMARK,
    MONOTONIC_EPOCH,
    MONOTONIC_HIGH_WATERMARK,
    NO_CRASH,
    QUORUM_STATE_TRANSITION,
    SINGLE_LEADER,
    InvariantViolation,
    SimConfig,
    Simulation,
)

QUIET = dict(faults=(), drop_rate=0.0, duplicate_rate=0.0, jitter_rate=0.0)


class BrokenCore(RaftCore):
    """A core whose breakage (in a subclass) acts only once `armed` is set on the instance."""

    armed = False


class RecklessLeader(BrokenCore):
    """Reports everything it has written as committed, acknowledged or not."""

    @property
    def leader_high_watermark(self) -> int | None:
        real = super().leader_high_watermark
        if self.armed and real is not None:
            return max(real, self.end_offset)
        return real


class OverwritingLeader(BrokenCore):
    """Writes its next record over its last committed entry."""

    def ready(self):
        ready = super().ready()
        appends = [op for op in ready.log_ops if isinstance(op, Append)]
        if self.armed and self.role is Role.LEADER and appends:
            self.armed = False
            offset = self.high_watermark - 1
            batch = appends[0].batch._replace(base_offset=offset, values=(b"overwritten",))
            ready.log_ops = [TruncateTo(offset), Append(batch)]
        return ready


class BackwardsEpoch(BrokenCore):
    """Persists an epoch below the one it already persisted."""

    def ready(self):
        ready = super().ready()
        if self.armed:
            self.armed = False
            ready.quorum_state = QuorumState(epoch=self.epoch - 1)
        return ready


class UnpersistedEpoch(BrokenCore):
    """Runs an epoch ahead in memory without persisting it."""

    @property
    def quorum_state(self) -> QuorumState:
        state = super().quorum_state
        return QuorumState(epoch=state.epoch + 1) if self.armed else state


class OverflowingEpoch(BrokenCore):
    """Persists an epoch past int32 (what unchecked epoch arithmetic at MAX_EPOCH would do)."""

    def ready(self):
        ready = super().ready()
        if self.armed:
            self.armed = False
            ready.quorum_state = QuorumState(epoch=INT32_MAX + 1)
        return ready


class Usurper(BrokenCore):
    """A follower that reports itself as the leader of its leader's epoch."""

    @property
    def quorum_state(self) -> QuorumState:
        state = super().quorum_state
        if self.armed:
            return QuorumState(epoch=state.epoch, leader_id=self.config.node_id, voted_id=state.voted_id)
        return state


class Misinformed(BrokenCore):
    """A follower that believes another voter leads its leader's epoch (what a forged BeginQuorumEpoch does)."""

    @property
    def quorum_state(self) -> QuorumState:
        state = super().quorum_state
        if self.armed and state.leader_id is not None:
            other = min(voter for voter in self.config.voters if voter not in (state.leader_id, self.config.node_id))
            return QuorumState(epoch=state.epoch, leader_id=other, voted_id=state.voted_id)
        return state


class LeaderSwitcher(BrokenCore):
    """A follower that persists a second leader for its epoch."""

    def ready(self):
        ready = super().ready()
        if self.armed:
            self.armed = False
            state = self.quorum_state
            other = min(voter for voter in self.config.voters if voter not in (state.leader_id, self.config.node_id))
            ready.quorum_state = QuorumState(epoch=state.epoch, leader_id=other)
        return ready


class ForgetfulFollower(BrokenCore):
    """Lowers its high watermark."""

    def advance(self, ready, flushed_end_offset: int, now_ms: int) -> None:
        super().advance(ready, flushed_end_offset, now_ms)
        if self.armed and self.high_watermark > 0:
            self.armed = False
            self.high_watermark -= 1


class ShrinkingLeader(BrokenCore):
    """A leader whose high watermark goes back by one."""

    @property
    def leader_high_watermark(self) -> int | None:
        real = super().leader_high_watermark
        return real - 1 if self.armed and real else real


class CrashingLeader(BrokenCore):
    """Raises on the next request (a message must never crash a node)."""

    def handle_request(self, *args, **kwargs):
        if self.armed:
            raise KeyError("deliberate crash")
        return super().handle_request(*args, **kwargs)


@dataclass(frozen=True)
class Case:
    name: str
    core: type[BrokenCore]
    target: str  # "leader" or "follower": the node that runs the armed core
    invariant: str
    isolate_leader: bool = False


CASES = [
    Case("leader commits without a majority", RecklessLeader, "leader", MAJORITY_REACHED_HIGH_WATERMARK,
         isolate_leader=True),
    Case("leader overwrites a committed entry", OverwritingLeader, "leader", CONSISTENT_COMMITTED_DATA),
    Case("persisted epoch goes backwards", BackwardsEpoch, "follower", MONOTONIC_EPOCH),
    Case("in-memory epoch is not the persisted one", UnpersistedEpoch, "follower", MONOTONIC_EPOCH),
    Case("epoch overflows int32", OverflowingEpoch, "follower", EPOCH_IN_RANGE),
    Case("two leaders in one epoch", Usurper, "follower", SINGLE_LEADER),
    Case("a follower believes a second leader of the epoch", Misinformed, "follower", SINGLE_LEADER),
    Case("a second leader persisted for an epoch", LeaderSwitcher, "follower", QUORUM_STATE_TRANSITION),
    Case("follower high watermark goes backwards", ForgetfulFollower, "follower", MONOTONIC_HIGH_WATERMARK),
    Case("leader high watermark goes backwards", ShrinkingLeader, "leader", MONOTONIC_HIGH_WATERMARK),
    Case("a message crashes the leader", CrashingLeader, "leader", NO_CRASH),
]


def run_case(case: Case, armed: bool, hostile: str | None = None) -> Simulation:
    class Cluster(Simulation):
        core_class = case.core

    sim = Cluster(1, SimConfig(**QUIET, hostile=hostile))
    sim.run_until(500)
    leader = sim.current_leader()
    assert leader is not None
    for _ in range(5):
        sim.propose(leader)
        sim.run_until(sim.now + 20)
    sim.run_until(sim.now + 200)
    assert sim.committed_hw >= 6, "the scenario needs committed entries before the breakage"
    if case.isolate_leader:
        sim.isolate(leader.node_id, 10_000)
    target = leader if case.target == "leader" else next(node for node in sim.up() if node is not leader)
    target.core.armed = armed
    for _ in range(5):
        if leader.core is not None and leader.core.role is Role.LEADER:
            sim.propose(leader)
        sim.run_until(sim.now + 50)
    sim.check_invariants()
    return sim


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_checker_names_the_broken_invariant(case):
    with pytest.raises(InvariantViolation) as caught:
        run_case(case, armed=True)
    assert caught.value.invariant == case.invariant, str(caught.value)
    assert f"[{case.invariant}]" in str(caught.value)
    assert "replay: .venv/bin/python -m tests.sim.run --seed 1" in str(caught.value)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_same_scenario_unbroken_passes(case):
    run_case(case, armed=False)


def test_with_a_hostile_node_a_self_declared_second_leader_is_still_caught():
    case = next(case for case in CASES if case.core is Usurper)
    with pytest.raises(InvariantViolation) as caught:
        run_case(case, armed=True, hostile="own")
    assert caught.value.invariant == SINGLE_LEADER


def test_with_a_hostile_node_a_forged_leader_belief_is_not_a_safety_violation():
    """A forged BeginQuorumEpoch can make a node believe anything (no unauthenticated
    peer can tell); only nodes that actually lead count toward SingleLeader then."""
    case = next(case for case in CASES if case.core is Misinformed)
    run_case(case, armed=True, hostile="own")


def test_a_quorum_that_never_elects_fails_liveness():
    class Mute(BrokenCore):
        armed = True

        def tick(self, now_ms: int) -> None:
            self._check_not_in_ready()

    class Cluster(Simulation):
        core_class = Mute

    with pytest.raises(InvariantViolation) as caught:
        Cluster(1, SimConfig(**QUIET, fault_duration_ms=300)).run()
    assert caught.value.invariant == LIVENESS
