"""AlterPartition (KIP-497, KIP-841, KIP-903): a partition leader proposes a new ISR.

Owns the command (Kafka's ReplicationControlManager.alterPartition and its checks); the
change itself is decided by `partitions.build_partition_change`. Rules kept here:
- A request from a broker that is not registered at that epoch is refused whole
  (STALE_BROKER_EPOCH); otherwise every partition is answered on its own, in request order.
- The checks, in Kafka's order: unknown topic id / partition; epochs above the
  controller's (NOT_CONTROLLER: this controller is behind); a lower leader epoch
  (FENCED_LEADER_EPOCH); a requester that is not the leader (INVALID_REQUEST); a lower
  partition epoch (INVALID_UPDATE_VERSION); an ISR with duplicates, non-replicas or without
  the leader (INVALID_REQUEST); leader recovery rules (INVALID_REQUEST); members that are
  not registered, fenced, shutting down or (v3) at another broker epoch (INELIGIBLE_REPLICA).
- Every entry is checked against the image as it was before the request. An accepted
  entry answers the partition's state after its record; one that changes nothing writes no
  record and answers the current state; one whose change moved the leadership elsewhere
  (a completed reassignment) answers NEW_LEADER_ELECTED and still writes the record.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import ErrorCode
from protocol.records import MetadataRecord
from server.controller.commands import ControllerConfig, ControllerResult
from server.controller.partitions import (
    RECOVERED,
    RECOVERING,
    bump_leader_epoch_on_isr_shrink,
    build_partition_change,
    is_active,
    unclean_leader_election_enabled,
)
from server.controller.state import NO_LEADER_CHANGE, ControllerState, PartitionImage, merge_partition_change
from server.values import NodeId


def _partition_answer(index: int, code: int) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code}


def _validate(state: ControllerState, broker_id: NodeId, partition: PartitionImage | None, data: Any,
              isr_states: list[tuple[int, int]]) -> tuple[int, str | None]:
    """(error code, reason) for one partition entry, in Kafka's order of checks."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition"
    # Epochs above ours mean this controller is behind (no longer active): the leader
    # should find the new controller.
    if data.leader_epoch > partition.leader_epoch:
        return ErrorCode.NOT_CONTROLLER, (f"the leader epoch {data.leader_epoch} is greater than the local value "
                                          f"{partition.leader_epoch}")
    if data.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER, (f"the partition epoch {data.partition_epoch} is greater than the local "
                                          f"value {partition.partition_epoch}")
    if data.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, f"the current leader epoch is {partition.leader_epoch}, not {data.leader_epoch}"
    if broker_id != partition.leader:
        return ErrorCode.INVALID_REQUEST, f"the current leader is {partition.leader}"
    if data.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION, (f"the current partition epoch is {partition.partition_epoch}, "
                                                  f"not {data.partition_epoch}")
    new_isr = [member for member, _ in isr_states]
    replicas = set(partition.replicas)
    if len(set(new_isr)) != len(new_isr) or any(member not in replicas for member in new_isr):
        return ErrorCode.INVALID_REQUEST, f"it specified an invalid ISR {new_isr}"
    if partition.leader not in new_isr:
        return ErrorCode.INVALID_REQUEST, f"it specified an invalid ISR {new_isr} that doesn't include itself"
    recovery = data.leader_recovery_state
    if recovery == RECOVERING and len(new_isr) > 1:
        return ErrorCode.INVALID_REQUEST, (f"the ISR {new_isr} had more than one replica while the leader was still "
                                           "recovering from an unclean leader election")
    if partition.leader_recovery_state == RECOVERED and recovery == RECOVERING:
        return ErrorCode.INVALID_REQUEST, "the leader recovery state cannot change from RECOVERED to RECOVERING"
    ineligible = []
    for member, member_epoch in isr_states:
        registration = state.broker(member)
        if registration is None:
            ineligible.append(f"{member} (not registered)")
        elif registration.in_controlled_shutdown:
            ineligible.append(f"{member} (shutting down)")
        elif registration.fenced:
            ineligible.append(f"{member} (fenced)")
        elif member_epoch != -1 and member_epoch != registration.epoch:
            # -1: a v2 request, or a leader that skips the check (KIP-903).
            ineligible.append(f"{member} (broker epoch mismatch: requested={member_epoch} "
                              f"VS expected={registration.epoch})")
    if ineligible:
        return ErrorCode.INELIGIBLE_REPLICA, f"it specified ineligible replicas {', '.join(ineligible)} in the new ISR"
    return ErrorCode.NONE, None


def alter_partition(state: ControllerState, request: Any, api_version: int,
                    config: ControllerConfig) -> ControllerResult:
    """AlterPartition v2-3 (Kafka's ReplicationControlManager.alterPartition): a partition
    leader proposes a new ISR (v3: with each member's broker epoch). The answer carries the
    partition's state after the change, or its current state when nothing changed."""
    broker_id = request.broker_id
    broker_epoch = request.broker_epoch
    registration = state.broker(broker_id)
    if registration is None or registration.epoch != broker_epoch:
        message = (f"No broker registration found for broker id {broker_id}" if registration is None
                   else f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}")
        return ControllerResult([], {"throttle_time_ms": 0, "error_code": ErrorCode.STALE_BROKER_EPOCH,
                                     "topics": []}, error_message=message)
    mv_level = state.metadata_version
    if mv_level is None:
        raise RuntimeError("metadata.version is not finalized yet")
    records: list[MetadataRecord] = []
    topics: list[dict[str, Any]] = []
    refusals: list[str] = []
    for topic_data in request.topics:
        topic = state.topic_by_id(topic_data.topic_id) if topic_data.topic_id.int != 0 else None
        answers: list[dict[str, Any]] = []
        topics.append({"topic_id": topic_data.topic_id, "partitions": answers})
        if topic is None:
            answers.extend(_partition_answer(p.partition_index, ErrorCode.UNKNOWN_TOPIC_ID)
                           for p in topic_data.partitions)
            refusals.append(f"unknown topic id {topic_data.topic_id}")
            continue
        unclean = unclean_leader_election_enabled(state, topic.name)
        for data in topic_data.partitions:
            index = data.partition_index
            if api_version >= 3:
                isr_states = [(member.broker_id, member.broker_epoch) for member in data.new_isr_with_epochs]
            else:
                isr_states = [(member, -1) for member in data.new_isr]
            # Every entry is checked against the image as it was before this request, as
            # Kafka's controller does (records apply only once the request is decided).
            partition = topic.partitions.get(index)
            code, reason = _validate(state, broker_id, partition, data, isr_states)
            if code != ErrorCode.NONE or partition is None:
                answers.append(_partition_answer(index, code))
                refusals.append(f"{topic.name}-{index}: {reason}")
                continue
            change = build_partition_change(
                partition, topic.topic_id, index, mv_level=mv_level,
                acceptable_leader=lambda replica: is_active(state, replica),
                target_isr=[member for member, _ in isr_states],
                target_leader_recovery_state=data.leader_recovery_state,
                unclean=unclean,
                bump_leader_epoch_on_isr_shrink=bump_leader_epoch_on_isr_shrink(mv_level, config.migration_enabled),
            )
            if change is not None:
                records.append(change)
                partition = merge_partition_change(partition, change.data)
                new_leader = change.data.get("leader", NO_LEADER_CHANGE)
                if new_leader not in (broker_id, NO_LEADER_CHANGE):
                    # Completing a reassignment moved the leadership: the requester must
                    # fetch metadata before it tries again (the record is still written).
                    answers.append(_partition_answer(index, ErrorCode.NEW_LEADER_ELECTED))
                    continue
            answers.append({
                "partition_index": index, "error_code": ErrorCode.NONE, "leader_id": partition.leader,
                "leader_epoch": partition.leader_epoch, "isr": list(partition.isr),
                "leader_recovery_state": partition.leader_recovery_state,
                "partition_epoch": partition.partition_epoch,
            })
    return ControllerResult(
        records, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "topics": topics},
        error_message="; ".join(refusals) if refusals else None,
    )
