"""A consumer-group rebalance runner for Streams members, on trio, in-process.

Owns: the group coordinator's side of eager rebalances (join round with a
deadline, leader election, the leader's assignment, sync round), one trio task
per member running the pure member side of `streams.assignor`, and the
fault injection the KIP-268 test plan asks for: rolling bounces, a member
crashing mid-rebalance (at join or at sync), a member joining late.

Rules kept here:
- Deterministic: the order of events comes from one seeded `random.Random`
  (distinct join delays per round); time is trio's clock, which the callers
  run as `MockClock(autojump_threshold=0)`, so deadlines cost no wall time.
- The leader is kept while it stays in the group; otherwise the first member
  to join the round becomes leader, as Kafka's group coordinator does.
- A bounce is one stop and one restart of a member with fresh in-memory state
  (Streams does not send LeaveGroup on close, so the restart's JoinGroup is
  the one rebalance a bounce costs).
- Every loop is bounded: rebalances per step (`max_rebalances_per_step`) and
  every wait (`rebalance_timeout_ms`, `session_timeout_ms`).
- What it records is what members report after decoding their own
  assignment, not what the leader meant to send: the partition invariant is
  checked on the members' view after each completed rebalance.
"""

from __future__ import annotations

import random
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import AsyncIterator

import structlog
import trio

from protocol.streams import TaskId
from streams.assignor import (
    AssignmentOutcome,
    MemberConfig,
    MemberState,
    assign,
    build_subscription,
    initial_member_state,
    on_assignment,
)

log = structlog.get_logger(component="streams")


class StreamsEvent(StrEnum):
    """The runner's log event names. streams/ is client-side and never imports
    server/, so its events live here rather than in `server.observability.Event`."""

    LEADER_FAILED = "streams.leader_failed"
    REBALANCE_INCOMPLETE = "streams.rebalance_incomplete"

CRASH_AT_JOIN = "join"
CRASH_AT_SYNC = "sync"


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    partitions: int
    rebalance_timeout_ms: int = 30_000
    session_timeout_ms: int = 10_000
    # Members answer a join prompt after a seeded delay below this bound.
    join_delay_ms_max: int = 5_000
    max_rebalances_per_step: int = 32
    member_inbox_size: int = 8


@dataclass(slots=True)
class RunReport:
    rebalances: int = 0
    completed_rebalances: int = 0
    bounces: int = 0
    probes: int = 0
    leader_triggers: int = 0
    failures: list[str] = field(default_factory=list)
    invariant_violations: list[str] = field(default_factory=list)
    lost_assignments: list[str] = field(default_factory=list)
    unsettled_steps: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    # Version of the regular assignments in the last completed rebalance.
    last_assignment_version: int = 0

    @property
    def clean(self) -> bool:
        return not (self.failures or self.invariant_violations or self.lost_assignments or self.unsettled_steps)


# Messages between the coordinator and member tasks.
@dataclass(frozen=True, slots=True)
class _JoinPrompt:
    generation: int
    delay_ms: int


@dataclass(frozen=True, slots=True)
class _SyncPrompt:
    generation: int
    assignment: bytes


@dataclass(frozen=True, slots=True)
class _JoinReply:
    member_id: str
    incarnation: int
    generation: int
    subscription: bytes


@dataclass(frozen=True, slots=True)
class _SyncReply:
    member_id: str
    incarnation: int
    generation: int
    outcome: AssignmentOutcome


@dataclass(slots=True)
class _Member:
    member_id: str
    incarnation: int
    config: MemberConfig
    process_id: uuid.UUID
    inbox: trio.MemorySendChannel
    scope: trio.CancelScope | None = None
    alive: bool = True
    # Fault injected into this incarnation's next rebalance.
    crash_at: str | None = None
    late: bool = False
    # Coordinator's copy of what the member last reported.
    state: MemberState | None = None
    tasks: tuple[TaskId, ...] = ()


class GroupRunner:
    """Drive with `open_group_runner`; every public method settles the group
    (runs rebalances until no member asks for another) before returning."""

    def __init__(self, config: RunnerConfig, seed: int, nursery: trio.Nursery) -> None:
        self.config = config
        self.random = random.Random(seed)
        self.report = RunReport()
        self.tasks = tuple(TaskId(0, p) for p in range(config.partitions))
        self._nursery = nursery
        self._members: dict[str, _Member] = {}
        self._leader: str | None = None
        self._generation = 0
        self._incarnations = 0
        self._send, self._receive = trio.open_memory_channel(4 * 1024)
        # Members that missed a join deadline, and those whose late JoinGroup
        # has since arrived: either way another generation must follow.
        self._late_joiners: set[str] = set()
        self._late_arrived: set[str] = set()

    # -- public steps -----------------------------------------------------
    @property
    def leader(self) -> str | None:
        return self._leader

    def members(self) -> dict[str, tuple[MemberConfig, int, tuple[TaskId, ...]]]:
        """member id -> (config, used version, active tasks) for live members."""
        return {m.member_id: (m.config, m.state.used_version, m.tasks)
                for m in self._members.values() if m.alive}

    async def start(self, member_id: str, config: MemberConfig, *, late: bool = False) -> None:
        await self._spawn(member_id, config, late=late)
        await self._settle("join")

    async def bounce(self, member_id: str, config: MemberConfig) -> None:
        """Stop the member and start it again with `config` (a rolling-bounce step)."""
        self._stop(member_id)
        self.report.bounces += 1
        await self._spawn(member_id, config)
        await self._settle("join")

    def crash_during_next_rebalance(self, member_id: str, at: str) -> None:
        if at not in (CRASH_AT_JOIN, CRASH_AT_SYNC):
            raise ValueError(f"crash point must be join or sync, not {at!r}")
        self._members[member_id].crash_at = at

    def join_late_in_next_rebalance(self, member_id: str) -> None:
        self._members[member_id].late = True

    async def restart(self, member_id: str, config: MemberConfig) -> None:
        """Start a crashed member again (a bounce of a member that is already gone)."""
        if self._members.get(member_id) is not None and self._members[member_id].alive:
            raise ValueError(f"{member_id} is still running")
        await self._spawn(member_id, config)
        await self._settle("join")

    async def rebalance_now(self, reason: str) -> None:
        await self._settle(reason)

    # -- member tasks -----------------------------------------------------
    async def _spawn(self, member_id: str, config: MemberConfig, late: bool = False) -> None:
        self._incarnations += 1
        inbox_send, inbox_receive = trio.open_memory_channel(self.config.member_inbox_size)
        member = _Member(member_id, self._incarnations, config, uuid.UUID(int=self.random.getrandbits(128)),
                         inbox_send, late=late, state=initial_member_state(config))
        self._members[member_id] = member
        await self._nursery.start(self._member_main, member, inbox_receive)

    def _stop(self, member_id: str) -> None:
        member = self._members[member_id]
        member.alive = False
        if member.scope is not None:
            member.scope.cancel()
        if self._leader == member_id:
            self._leader = None

    async def _member_main(self, member: _Member, inbox: trio.MemoryReceiveChannel,
                           task_status=trio.TASK_STATUS_IGNORED) -> None:
        # The member's state lives here; the coordinator only sees replies.
        state = member.state
        tasks: tuple[TaskId, ...] = ()
        with trio.CancelScope() as scope:
            member.scope = scope
            task_status.started()
            async with inbox:
                async for message in inbox:
                    if isinstance(message, _JoinPrompt):
                        await trio.sleep(message.delay_ms / 1000)
                        if member.crash_at == CRASH_AT_JOIN:
                            break
                        subscription = build_subscription(state, member.process_id, tasks,
                                                          f"{member.member_id}:9092")
                        await self._send.send(_JoinReply(member.member_id, member.incarnation,
                                                         message.generation, subscription))
                    elif isinstance(message, _SyncPrompt):
                        if member.crash_at == CRASH_AT_SYNC:
                            break
                        outcome = on_assignment(state, message.assignment)
                        state, tasks = outcome.state, outcome.active_tasks
                        await self._send.send(_SyncReply(member.member_id, member.incarnation,
                                                         message.generation, outcome))
        member.alive = False

    # -- coordinator ------------------------------------------------------
    def _live(self) -> list[_Member]:
        return [m for m in self._members.values() if m.alive]

    async def _settle(self, reason: str) -> None:
        for _ in range(self.config.max_rebalances_per_step):
            reason = await self._rebalance(reason)
            if reason is None:
                return
        self.report.unsettled_steps += 1
        self.report.failures.append(f"group did not settle within {self.config.max_rebalances_per_step} rebalances")

    async def _rebalance(self, reason: str) -> str | None:
        """One generation; returns why another is needed, or None when settled."""
        self._generation += 1
        generation = self._generation
        self.report.rebalances += 1
        self.report.reasons[reason] = self.report.reasons.get(reason, 0) + 1
        prompted = self._live()
        # Distinct delays make the join order (and so the leader) a pure
        # function of the seed; a late member answers after the deadline.
        delays = self.random.sample(range(1, self.config.join_delay_ms_max), len(prompted))
        for member, delay in zip(prompted, delays):
            if member.late:
                member.late = False
                delay = self.config.rebalance_timeout_ms + delay
            # An undeliverable prompt (the member just died) simply goes
            # unanswered, like a JoinGroup that never comes.
            self._deliver(member, _JoinPrompt(generation, delay))

        joined: dict[str, bytes] = {}
        with trio.move_on_after(self.config.rebalance_timeout_ms / 1000):
            while len(joined) < len(prompted):
                message = await self._receive.receive()
                if self._is_current_join(message, generation):
                    joined[message.member_id] = message.subscription
                else:
                    self._note_stale(message)
        for member in prompted:
            if member.member_id not in joined and member.alive:
                # Missed the deadline: out of this generation; its JoinGroup,
                # when it comes, starts the next one.
                self._late_joiners.add(member.member_id)
        if not joined:
            if self._late_joiners or self._late_arrived:
                return await self._await_late_joiners()
            return None

        if self._leader not in joined:
            self._leader = next(iter(joined))
        leader = self._members[self._leader]
        decision = assign(leader.config, joined, self.tasks)
        if decision.failure is not None:
            self.report.failures.append(f"generation {generation}: {decision.failure}")
            log.warning(StreamsEvent.LEADER_FAILED, generation=generation, failure=decision.failure)
            return None
        self.report.probes += len(decision.probed_members)

        synced: dict[str, AssignmentOutcome] = {}
        for member_id, assignment in decision.assignments.items():
            self._deliver(self._members[member_id], _SyncPrompt(generation, assignment))
        with trio.move_on_after(self.config.session_timeout_ms / 1000):
            while len(synced) < len(decision.assignments):
                message = await self._receive.receive()
                if (isinstance(message, _SyncReply) and message.generation == generation
                        and self._is_current_incarnation(message)):
                    synced[message.member_id] = message.outcome
                else:
                    self._note_stale(message)

        for member_id, outcome in synced.items():
            member = self._members[member_id]
            member.state, member.tasks = outcome.state, outcome.active_tasks
            if outcome.failure is not None:
                self.report.failures.append(f"generation {generation}: {member_id}: {outcome.failure}")
        if len(synced) < len(decision.assignments):
            # A member took its assignment to the grave: the session timeout
            # removes it and the generation's work must be redistributed.
            for member_id in decision.assignments:
                if member_id not in synced:
                    self._stop(member_id)
            log.info(StreamsEvent.REBALANCE_INCOMPLETE, generation=generation)
            return "member-failed"

        self.report.completed_rebalances += 1
        if len(decision.probed_members) < len(joined):
            self.report.last_assignment_version = decision.encoded_version
        self._check_invariants(generation, synced, decision.probed_members)
        if any(outcome.rejoin for outcome in synced.values()):
            return "probe-rejoin"
        if decision.trigger_rebalance:
            self.report.leader_triggers += 1
            return "leader-trigger"
        if self._late_joiners or self._late_arrived:
            return await self._await_late_joiners()
        return None

    async def _await_late_joiners(self) -> str | None:
        # A late member's JoinGroup is already on its way; wait for it (bounded).
        with trio.move_on_after(2 * self.config.rebalance_timeout_ms / 1000):
            while self._late_joiners:
                self._note_stale(await self._receive.receive())
        self._late_joiners.clear()
        self._late_arrived.clear()
        return "late-join"

    def _note_stale(self, message) -> None:
        if (isinstance(message, _JoinReply) and self._is_current_incarnation(message)
                and message.member_id in self._late_joiners):
            self._late_joiners.discard(message.member_id)
            self._late_arrived.add(message.member_id)

    def _is_current_incarnation(self, message) -> bool:
        member = self._members.get(message.member_id)
        return member is not None and member.alive and member.incarnation == message.incarnation

    def _is_current_join(self, message, generation: int) -> bool:
        return (isinstance(message, _JoinReply) and message.generation == generation
                and self._is_current_incarnation(message))

    def _deliver(self, member: _Member, message) -> bool:
        try:
            member.inbox.send_nowait(message)
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            return False

    def _check_invariants(self, generation: int, synced: dict[str, AssignmentOutcome],
                          probed: tuple[str, ...]) -> None:
        owners: dict[TaskId, list[str]] = {}
        for member_id, outcome in synced.items():
            for task in outcome.active_tasks:
                owners.setdefault(task, []).append(member_id)
        for task in self.tasks:
            holders = owners.get(task, [])
            if len(holders) != 1:
                self.report.invariant_violations.append(
                    f"generation {generation}: task {task.topic_group_id}_{task.partition} held by {holders}")
        unknown = set(owners) - set(self.tasks)
        if unknown:
            self.report.invariant_violations.append(f"generation {generation}: unknown tasks {sorted(unknown)}")
        if self.config.partitions >= len(synced):
            for member_id, outcome in synced.items():
                if not outcome.active_tasks and member_id not in probed:
                    self.report.lost_assignments.append(f"generation {generation}: {member_id} got no tasks")


@asynccontextmanager
async def open_group_runner(config: RunnerConfig, seed: int) -> AsyncIterator[GroupRunner]:
    async with trio.open_nursery() as nursery:
        runner = GroupRunner(config, seed, nursery)
        try:
            yield runner
        finally:
            nursery.cancel_scope.cancel()
