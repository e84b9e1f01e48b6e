"""Partition changes: the one place a PartitionChangeRecord is decided, and leadership
that follows the brokers (fencing, controlled shutdown, unfencing, unregistration).

Owns: `build_partition_change` (Kafka's PartitionChangeBuilder without eligible leader
replicas), `leader_and_isr_updates` (the records that take a broker out of every ISR and
leadership, or give leaderless partitions a leader), `default_directory` (where a new
replica's log directory starts) and the read-only views `has_leaderships` / `is_active`.
AlterPartition, the brokers' own ISR changes, is `server/controller/alter_partition.py`,
AssignReplicasToDirs (their log directories) `directory_assignment.py`; the heartbeat,
fencing and unregistration commands (`commands.py`) call `leader_and_isr_updates`. The
state replays the records
(`server/controller/state.py`, `merge_partition_change`).

Rules kept here (Kafka's ReplicationControlManager and PartitionChangeBuilder):
- A leader must be in the (target) ISR and active: registered, not fenced, not in
  controlled shutdown. The current leader is kept while it qualifies; otherwise the
  first qualifying replica in replica order leads; with unclean leader election enabled
  for the topic, the first active replica leads and the ISR shrinks to it (leader
  recovery state RECOVERING); otherwise there is no leader (-1).
- The ISR never becomes empty: taking the last member out keeps it (and the partition
  then has no leader until that broker is back).
- The leader epoch goes up when the leader changes, when replicas leave the replica
  set, and (below metadata.version 3.6-IV0, or during a ZooKeeper migration) when the
  ISR shrinks (KAFKA-15021); the partition epoch goes up on every record.
- A change that changes nothing writes no record. An ongoing reassignment completes
  when the new ISR holds every target replica.
- From metadata.version 3.7-IV2 Directories lists every replica's log directory; it is
  written only when that list changes (a partition without one has every replica
  MIGRATING), and a replica new to the partition starts UNASSIGNED.
- Commands are pure and deterministic: partitions are visited by topic name, then index.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, Mapping, Sequence

from protocol import metadata_records as mr
from protocol.records import MetadataRecord, record
from server.controller import features as ft
from server.controller.state import (
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    NO_LEADER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ControllerState,
    PartitionImage,
    merge_partition_change,
)
from server.values import NodeId

# LeaderRecoveryState values (KIP-704).
RECOVERED = 0
RECOVERING = 1

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
IBP_3_2_IV0 = 3  # leader recovery state (KIP-704)
IBP_3_6_IV0 = 12  # no leader epoch bump when the ISR shrinks (KAFKA-15021)


def partition_change_record_version(mv_level: int) -> int:
    """Kafka's MetadataVersion.partitionChangeRecordVersion."""
    if mv_level >= ft.IBP_4_0_IV1:
        return 2
    if ft.directory_assignment_supported(mv_level):
        return 1
    return 0


def is_active(state: ControllerState, broker_id: NodeId) -> bool:
    """Kafka's ClusterControlManager.isActive: registered, unfenced, not shutting down."""
    registration = state.broker(broker_id)
    return registration is not None and not registration.fenced and not registration.in_controlled_shutdown


def default_directory(state: ControllerState, broker_id: NodeId) -> uuid.UUID:
    """Kafka's ClusterControlManager.defaultDir: where a new replica on `broker_id` lives
    as far as the controller knows. A broker with one log directory gets it; one with
    several chooses itself and reports the choice with AssignReplicasToDirs
    (UNASSIGNED until then); one that registered none predates directory assignment
    (MIGRATING); an unregistered broker is refused elsewhere (UNASSIGNED)."""
    registration = state.broker(broker_id)
    if registration is None:
        return DIRECTORY_UNASSIGNED
    if not registration.log_dirs:
        return DIRECTORY_MIGRATING
    if len(registration.log_dirs) == 1:
        return registration.log_dirs[0]
    return DIRECTORY_UNASSIGNED


def has_leaderships(state: ControllerState, broker_id: NodeId) -> bool:
    """Whether `broker_id` leads any partition (a broker in controlled shutdown may stop
    only once it leads none)."""
    return any(partition.leader == broker_id
               for topic in state.topics().values() for partition in topic.partitions.values())


def unclean_leader_election_enabled(state: ControllerState, topic_name: str) -> bool:
    """The topic's `unclean.leader.election.enable`, else the cluster-wide dynamic default,
    else false (Kafka's default)."""
    value = state.configs(RESOURCE_TOPIC, topic_name).get(UNCLEAN_LEADER_ELECTION_ENABLE)
    if value is None:
        value = state.configs(RESOURCE_BROKER, "").get(UNCLEAN_LEADER_ELECTION_ENABLE)
    return value is not None and value.strip().lower() == "true"


def bump_leader_epoch_on_isr_shrink(mv_level: int, migration_enabled: bool) -> bool:
    """KAFKA-15021: brokers before 3.6-IV0, and ZooKeeper-mode brokers during a migration,
    need a new leader epoch whenever the ISR shrinks."""
    return mv_level < IBP_3_6_IV0 or migration_enabled


def _contains_all(values: Sequence[int], required: Iterable[int]) -> bool:
    present = set(values)
    return all(item in present for item in required)


def build_partition_change(
    partition: PartitionImage,
    topic_id: uuid.UUID,
    index: int,
    *,
    mv_level: int,
    acceptable_leader: Callable[[int], bool],
    target_isr: Sequence[int] | None = None,
    target_leader_recovery_state: int | None = None,
    unclean: bool = False,
    bump_leader_epoch_on_isr_shrink: bool = False,
    target_directories: Mapping[NodeId, uuid.UUID] | None = None,
) -> MetadataRecord | None:
    """The PartitionChangeRecord taking `partition` to the target ISR / recovery state
    (and `target_directories`: replica -> its log directory) with a leader elected as
    the module docstring says, or None when nothing changes."""
    isr = list(partition.isr if target_isr is None else target_isr)
    replicas = list(partition.replicas)
    removing = list(partition.removing_replicas)
    adding = list(partition.adding_replicas)
    recovery = partition.leader_recovery_state if target_leader_recovery_state is None \
        else target_leader_recovery_state

    # An ongoing reassignment completes once the ISR (without the replicas being removed)
    # holds every replica that stays.
    if removing or adding:
        kept_isr = [r for r in isr if r not in removing]
        kept_replicas = [r for r in replicas if r not in removing]
        if kept_isr and kept_replicas and _contains_all(kept_isr, kept_replicas):
            isr, replicas, removing, adding = kept_isr, kept_replicas, [], []

    data: dict[str, Any] = {"topic_id": topic_id, "partition_id": index}

    def valid_leader(replica: int) -> bool:
        return replica in isr and acceptable_leader(replica)

    unclean_choice = False
    if valid_leader(partition.leader):
        leader = partition.leader
    else:
        leader = next((r for r in replicas if valid_leader(r)), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((r for r in replicas if acceptable_leader(r)), NO_LEADER)
            unclean_choice = leader != NO_LEADER
    if leader != partition.leader:
        data["leader"] = leader
        if unclean_choice:
            # An unclean election: the new leader's log is all there is (data may be lost).
            data["isr"] = [leader]
            if partition.leader_recovery_state != RECOVERING and mv_level >= IBP_3_2_IV0:
                data["leader_recovery_state"] = RECOVERING

    if "leader" not in data:
        # Setting the leader to itself bumps the leader epoch, which brokers must see when
        # replicas leave (and, before 3.6-IV0, when the ISR shrinks).
        if not _contains_all(replicas, partition.replicas):
            data["leader"] = partition.leader
        elif bump_leader_epoch_on_isr_shrink and not _contains_all(isr, partition.isr):
            data["leader"] = partition.leader

    if "isr" not in data and isr and isr != list(partition.isr):
        data["isr"] = isr

    if replicas and ft.directory_assignment_supported(mv_level) and (partition.directories or target_directories):
        # A partition without directories has every replica MIGRATING (Kafka's
        # PartitionRegistration fills them in so); Directories is written only when the
        # list changes.
        current = list(partition.directories) or [DIRECTORY_MIGRATING] * len(partition.replicas)
        by_replica = dict(zip(partition.replicas, current))
        by_replica.update(target_directories or {})
        directories = [by_replica.get(r, DIRECTORY_UNASSIGNED) for r in replicas]
        if directories != current:
            data["directories"] = directories
    if replicas and replicas != list(partition.replicas):
        data["replicas"] = replicas
    if removing != list(partition.removing_replicas):
        data["removing_replicas"] = removing
    if adding != list(partition.adding_replicas):
        data["adding_replicas"] = adding
    if recovery != partition.leader_recovery_state and "leader_recovery_state" not in data:
        data["leader_recovery_state"] = recovery

    if len(data) == 2:
        return None
    return record(mr.PARTITION_CHANGE_RECORD, data, version=partition_change_record_version(mv_level))


# ---------------------------------------------------------------------------
# Leadership that follows the brokers
# ---------------------------------------------------------------------------

PartitionKey = tuple[uuid.UUID, int]


def leader_and_isr_updates(
    state: ControllerState,
    *,
    remove: NodeId = NO_LEADER,
    add: NodeId = NO_LEADER,
    leaderless_only: bool = False,
    inactive: frozenset[NodeId] = frozenset(),
    pending: dict[PartitionKey, PartitionImage] | None = None,
    migration_enabled: bool = False,
    only: Sequence[PartitionKey] | None = None,
) -> list[MetadataRecord]:
    """Kafka's generateLeaderAndIsrUpdates: PartitionChangeRecords for every partition
    whose ISR holds `remove` (a broker being fenced, shutting down or unregistered: it
    leaves the ISR unless it is the last member, and never leads), or with
    `leaderless_only` every partition without a leader (`add`, a broker being unfenced,
    counts as active although the image still shows it fenced).

    `inactive` are brokers fenced earlier in the same command and `pending` the
    partitions as earlier records of that command leave them (updated here), so several
    brokers fenced at once each see the others' effect, as if fenced one at a time.

    `only` names the partitions to visit, in that order, instead of every partition
    (whether or not `remove` is in their ISR): a broker's replicas assigned to a log
    directory that is offline leave those partitions' ISRs and leaderships only."""
    mv_level = state.metadata_version
    if mv_level is None:
        raise RuntimeError("metadata.version is not finalized yet")
    pending = {} if pending is None else pending
    bump = bump_leader_epoch_on_isr_shrink(mv_level, migration_enabled)

    def acceptable(replica: int) -> bool:
        if replica == remove or replica in inactive:
            return False
        return replica == add or is_active(state, replica)

    records: list[MetadataRecord] = []
    unclean_by_topic: dict[str, bool] = {}
    for name, topic, index in _partitions_to_visit(state, only):
        key = (topic.topic_id, index)
        partition = pending.get(key, topic.partitions[index])
        if only is None:
            if leaderless_only:
                if partition.leader != NO_LEADER:
                    continue
            elif remove not in partition.isr:
                continue
        unclean = unclean_by_topic.get(name)
        if unclean is None:
            unclean = unclean_by_topic[name] = unclean_leader_election_enabled(state, name)
        change = build_partition_change(
            partition, topic.topic_id, index, mv_level=mv_level, acceptable_leader=acceptable,
            target_isr=[r for r in partition.isr if r != remove], unclean=unclean,
            bump_leader_epoch_on_isr_shrink=bump,
        )
        if change is not None:
            records.append(change)
            pending[key] = merge_partition_change(partition, change.data)
    return records


def _partitions_to_visit(state: ControllerState, only: Sequence[PartitionKey] | None):
    """(topic name, topic, index): every partition by topic name then index, or the
    partitions of `only` in its order (each must exist)."""
    if only is None:
        topics = state.topics()
        for name in sorted(topics):
            topic = topics[name]
            for index in sorted(topic.partitions):
                yield name, topic, index
        return
    for topic_id, index in only:
        topic = state.topic_by_id(topic_id)
        if topic is None or index not in topic.partitions:
            raise ValueError(f"no partition {index} of topic id {topic_id}")
        yield topic.name, topic, index
