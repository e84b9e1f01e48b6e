"""The version-probing assignor of KIP-268, member side and leader side.

Owns: which Streams release speaks which metadata version, what `upgrade.from`
means, the member's choice of subscription version and its reaction to an
assignment, and the leader's assignment (or its probing answer).

Rules kept here (pure: no I/O, no clock, no randomness; every function maps
values to values):
- A member sends its latest version, or with `upgrade.from` the old format
  (v1 for "0.10.0", v2 for "0.10.1" ... "1.1"); with `upgrade.from` its version
  is pinned for the whole run (that is the first of the two rolling bounces).
- A leader that meets a subscription newer than it understands does not fail
  if it is a probing release (2.0 on): the senders of newer subscriptions get
  the empty probing assignment (used == supported == the leader's latest);
  every other member gets a regular assignment of all tasks (KIP-268: "for all
  other instances the leader sends a regular Assignment in version X back").
  Pre-2.0 leaders cannot probe: they fail, which `upgrade.from` prevents.
- Regular assignments are encoded at the lowest version any member used.
- A member that receives the probing answer downgrades in memory to the
  leader's latest version and asks to rejoin; a member that sees a leader
  supporting more than it uses upgrades in memory (for the next rebalance).
- When every member, the leader included, supports a version above the one in
  use, the leader (and only the leader) asks for one more rebalance: the
  "leader bounced last" case.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping, Sequence

from protocol.errors import DecodeError, EncodeError
from protocol.streams import assignment_info as ai
from protocol.streams import subscription_info as si
from protocol.streams import (
    EARLIEST_PROBEABLE_VERSION,
    UNKNOWN_SUPPORTED_VERSION,
    AssignmentInfo,
    HostInfo,
    SubscriptionInfo,
    TaskId,
    TopicPartition,
    UnknownVersion,
)

# Release -> latest metadata version its code speaks. "post-2.0" is the KIP's
# simulated future release whose format is version 4.
RELEASE_METADATA_VERSION: Mapping[str, int] = MappingProxyType({
    "0.10.0": 1,
    "0.10.1": 2,
    "0.10.2": 2,
    "0.11.0": 2,
    "1.0": 2,
    "1.1": 2,
    "2.0": 3,
    "post-2.0": 4,
})
RELEASES: tuple[str, ...] = tuple(RELEASE_METADATA_VERSION)

# `upgrade.from` value -> the version a 2.0+ member sends while it is set.
UPGRADE_FROM_VERSION: Mapping[str, int] = MappingProxyType({
    "0.10.0": 1,
    "0.10.1": 2,
    "0.10.2": 2,
    "0.11.0": 2,
    "1.0": 2,
    "1.1": 2,
})
# Pre-2.0 releases only get the KAFKA-6054 backport: the one value "0.10.0".
PRE_2_0_UPGRADE_FROM: frozenset[str] = frozenset({"0.10.0"})


@dataclass(frozen=True, slots=True)
class MemberConfig:
    """The code a member runs and its `upgrade.from` setting."""

    release: str
    upgrade_from: str | None = None

    def __post_init__(self) -> None:
        if self.release not in RELEASE_METADATA_VERSION:
            raise ValueError(f"unknown Streams release {self.release!r}")
        if self.upgrade_from is None:
            return
        allowed = UPGRADE_FROM_VERSION if self.probing_capable else PRE_2_0_UPGRADE_FROM
        if self.release == "0.10.0" or self.upgrade_from not in allowed:
            raise ValueError(f"release {self.release} does not accept upgrade.from={self.upgrade_from!r}")

    @property
    def latest_version(self) -> int:
        return RELEASE_METADATA_VERSION[self.release]

    @property
    def probing_capable(self) -> bool:
        return self.latest_version >= EARLIEST_PROBEABLE_VERSION

    @property
    def upgrade_mode(self) -> bool:
        return self.upgrade_from is not None


@dataclass(frozen=True, slots=True)
class MemberState:
    """What a member remembers between rebalances (in memory only: a bounce
    starts again from `initial_member_state`)."""

    config: MemberConfig
    used_version: int


def initial_member_state(config: MemberConfig) -> MemberState:
    if config.upgrade_from is not None:
        return MemberState(config, UPGRADE_FROM_VERSION[config.upgrade_from])
    # Optimistic: a fresh member does not know what the leader understands.
    return MemberState(config, config.latest_version)


def build_subscription(state: MemberState, process_id: uuid.UUID, prev_tasks: Sequence[TaskId] = (),
                       user_endpoint: str | None = None) -> bytes:
    version = state.used_version
    latest = state.config.latest_version if version >= EARLIEST_PROBEABLE_VERSION else UNKNOWN_SUPPORTED_VERSION
    return si.encode(SubscriptionInfo(
        version=version,
        latest_supported_version=latest,
        process_id=process_id,
        prev_tasks=tuple(sorted(prev_tasks)),
        user_endpoint=user_endpoint if version >= 2 else None,
    ))


@dataclass(frozen=True, slots=True)
class AssignmentOutcome:
    """A member's reaction to the assignment it received."""

    state: MemberState
    active_tasks: tuple[TaskId, ...]
    rejoin: bool = False
    probed: bool = False
    # Set when the member could not use the assignment (old code meeting a
    # newer version, malformed bytes): the outcome KIP-268 must rule out.
    failure: str | None = None


def on_assignment(state: MemberState, data: bytes) -> AssignmentOutcome:
    config = state.config
    try:
        info = ai.decode(data, config.latest_version)
    except DecodeError as exc:
        return AssignmentOutcome(state, (), failure=f"malformed assignment: {exc}")
    if isinstance(info, UnknownVersion):
        return AssignmentOutcome(state, (), failure=str(info))
    if info.version > state.used_version:
        # The leader must never answer above what this member sent.
        return AssignmentOutcome(state, (), failure=(
            f"assignment version {info.version} above subscription version {state.used_version}"))
    if config.upgrade_mode or not config.probing_capable:
        return AssignmentOutcome(state, info.active_tasks)
    leader_latest = info.latest_supported_version
    if (info.version < state.used_version and info.version >= EARLIEST_PROBEABLE_VERSION
            and info.version == leader_latest):
        # The probing answer: the leader could not read our subscription.
        # Downgrade in memory and rejoin at once with a version it reads.
        return AssignmentOutcome(replace(state, used_version=leader_latest), (), rejoin=True, probed=True)
    if leader_latest > state.used_version:
        # The leader has been upgraded: use more from the next rebalance on.
        state = replace(state, used_version=min(config.latest_version, leader_latest))
    return AssignmentOutcome(state, info.active_tasks)


@dataclass(frozen=True, slots=True)
class LeaderDecision:
    """What the leader hands back to the coordinator for one generation."""

    assignments: Mapping[str, bytes]
    encoded_version: int = 0
    probed_members: tuple[str, ...] = ()
    trigger_rebalance: bool = False
    failure: str | None = None

    @property
    def probing(self) -> bool:
        return bool(self.probed_members)


def balanced_tasks(member_ids: Sequence[str], tasks: Sequence[TaskId]) -> dict[str, tuple[TaskId, ...]]:
    """Round-robin over sorted members and tasks: sizes differ by at most one."""
    members = sorted(member_ids)
    result: dict[str, list[TaskId]] = {member: [] for member in members}
    for index, task in enumerate(sorted(tasks)):
        result[members[index % len(members)]].append(task)
    return {member: tuple(owned) for member, owned in result.items()}


def assign(leader: MemberConfig, subscriptions: Mapping[str, bytes], tasks: Sequence[TaskId],
           topic: str = "streams-input") -> LeaderDecision:
    """The leader's side of one rebalance; `subscriptions` in join order."""
    decoded: dict[str, SubscriptionInfo] = {}
    future: list[str] = []
    for member_id, data in subscriptions.items():
        try:
            info = si.decode(data, leader.latest_version)
        except DecodeError as exc:
            return LeaderDecision({}, failure=f"leader: malformed subscription from {member_id}: {exc}")
        if isinstance(info, UnknownVersion):
            if not leader.probing_capable:
                # Pre-2.0 code throws here; upgrade.from exists to avoid it.
                return LeaderDecision({}, failure=f"leader {leader.release}: {info} from {member_id}")
            future.append(member_id)
        else:
            decoded[member_id] = info

    assignments: dict[str, bytes] = {}
    for member_id in future:
        assignments[member_id] = ai.encode(ai.probing_assignment(leader.latest_version))
    if not decoded:
        return LeaderDecision(assignments, leader.latest_version, tuple(future))

    min_used = min(info.version for info in decoded.values())
    latest_field = leader.latest_version if min_used >= EARLIEST_PROBEABLE_VERSION else UNKNOWN_SUPPORTED_VERSION
    owned = balanced_tasks(list(decoded), tasks)
    by_host: tuple = ()
    if min_used >= 2:
        hosts = []
        for member_id in sorted(decoded):
            endpoint = decoded[member_id].user_endpoint
            if endpoint and ":" in endpoint:
                host, port = endpoint.rsplit(":", 1)
                hosts.append((HostInfo(host, int(port)),
                              tuple(TopicPartition(topic, t.partition) for t in owned[member_id])))
        by_host = tuple(hosts)
    try:
        for member_id in decoded:
            assignments[member_id] = ai.encode(AssignmentInfo(min_used, latest_field, owned[member_id], (), by_host))
    except EncodeError as exc:
        return LeaderDecision({}, failure=f"leader: cannot encode assignment: {exc}")

    trigger = False
    if leader.probing_capable and not future:
        supported = [info.latest_supported_version for info in decoded.values()]
        if all(v >= EARLIEST_PROBEABLE_VERSION for v in supported):
            trigger = min(min(supported), leader.latest_version) > min_used
    return LeaderDecision(assignments, min_used, tuple(future), trigger)
