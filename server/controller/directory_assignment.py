"""AssignReplicasToDirs (KIP-858): a broker with several log directories says which
directory holds each of its replicas.

Owns the command (Kafka's ReplicationControlManager.handleAssignReplicasToDirs) and
`has_online_dir`. Since metadata.version 3.7-IV2 PartitionRecord.Directories names each
replica's log directory; the controller fills it in only for brokers with a single
directory (`partitions.default_directory`), so a broker with several picks one itself
and reports it here. The state replays the PartitionChangeRecords this writes like any
other (`state.merge_partition_change`: a Directories list replaces the old one).

Rules kept here (Kafka's):
- Below metadata.version 3.7-IV2 the whole request is refused (UNSUPPORTED_VERSION), and
  so is a broker that is not registered at that epoch (STALE_BROKER_EPOCH); otherwise
  every partition is answered on its own, in request order, under its directory and topic.
- Per partition: an unknown topic id is UNKNOWN_TOPIC_ID, an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION, a partition the broker is not a replica of
  NOT_LEADER_OR_FOLLOWER. Otherwise the answer is NONE and a PartitionChangeRecord sets
  the broker's directory — none when the partition already names that directory, so a
  repeated request writes nothing.
- A directory the broker did not register as online (`has_online_dir`) is still
  recorded, and the broker then leaves those partitions' ISRs and leaderships, as when it
  is fenced: a replica in an offline directory cannot serve.
- Every entry is checked against the image as it was before the request, as Kafka's
  controller does; a partition named twice gets two records and the later one wins.
"""

from __future__ import annotations

import uuid
from typing import Any

from protocol.errors import ErrorCode
from protocol.records import MetadataRecord
from server.controller.commands import ControllerConfig, ControllerResult
from server.controller.features import directory_assignment_supported
from server.controller.partitions import (
    PartitionKey,
    bump_leader_epoch_on_isr_shrink,
    build_partition_change,
    is_active,
    leader_and_isr_updates,
)
from server.controller.state import (
    DIRECTORY_LOST,
    DIRECTORY_MIGRATING,
    DIRECTORY_UNASSIGNED,
    BrokerRegistration,
    ControllerState,
)


def has_online_dir(registration: BrokerRegistration, directory: uuid.UUID) -> bool:
    """Kafka's BrokerRegistration.hasOnlineDir: UNASSIGNED and MIGRATING are no real
    directory, so they count as online; LOST never is. A broker that registered no
    directories (it did so below 3.7-IV2) is trusted until it registers them."""
    if directory in (DIRECTORY_UNASSIGNED, DIRECTORY_MIGRATING):
        return True
    if directory == DIRECTORY_LOST:
        return False
    return not registration.log_dirs or directory in registration.log_dirs


def _refusal(code: int, message: str) -> ControllerResult:
    return ControllerResult([], {"throttle_time_ms": 0, "error_code": code, "directories": []},
                            error_message=message)


def assign_replicas_to_dirs(state: ControllerState, request: Any, config: ControllerConfig) -> ControllerResult:
    """AssignReplicasToDirs v0: the broker's replicas, by the directory that holds them."""
    mv_level = state.metadata_version
    if mv_level is None:
        raise RuntimeError("metadata.version is not finalized yet")
    if not directory_assignment_supported(mv_level):
        return _refusal(ErrorCode.UNSUPPORTED_VERSION, "Directory assignment is not supported yet.")
    broker_id = request.broker_id
    registration = state.broker(broker_id)
    if registration is None:
        return _refusal(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
    if registration.epoch != request.broker_epoch:
        return _refusal(ErrorCode.STALE_BROKER_EPOCH, f"Expected broker epoch {registration.epoch}, but got "
                                                      f"broker epoch {request.broker_epoch}")
    records: list[MetadataRecord] = []
    # Partitions assigned to an offline directory, in request order, each once.
    offline: dict[PartitionKey, None] = {}
    refusals: list[str] = []
    bump = bump_leader_epoch_on_isr_shrink(mv_level, config.migration_enabled)
    directories: list[dict[str, Any]] = []
    for directory_data in request.directories:
        directory = directory_data.id
        online = has_online_dir(registration, directory)
        topics: list[dict[str, Any]] = []
        directories.append({"id": directory, "topics": topics})
        for topic_data in directory_data.topics:
            topic_id = topic_data.topic_id
            topic = state.topic_by_id(topic_id)
            answers: list[dict[str, Any]] = []
            topics.append({"topic_id": topic_id, "partitions": answers})
            for partition_data in topic_data.partitions:
                index = partition_data.partition_index
                partition = None if topic is None else topic.partitions.get(index)
                if topic is None:
                    code, reason = ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}"
                elif partition is None:
                    code, reason = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic.name}-{index}"
                elif broker_id not in partition.replicas:
                    code, reason = ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic.name}-{index} is not assigned to it"
                else:
                    code, reason = ErrorCode.NONE, None
                answers.append({"partition_index": index, "error_code": code})
                if reason is not None:
                    refusals.append(reason)
                    continue
                change = build_partition_change(
                    partition, topic_id, index, mv_level=mv_level,
                    acceptable_leader=lambda replica: is_active(state, replica),
                    bump_leader_epoch_on_isr_shrink=bump, target_directories={broker_id: directory},
                )
                if change is not None:
                    records.append(change)
                if not online:
                    offline[(topic_id, index)] = None
    if offline:
        # Built from the image before this request, like the directory changes above:
        # each touches other fields of the partition, so replaying both keeps both.
        records.extend(leader_and_isr_updates(state, remove=broker_id, only=list(offline),
                                              migration_enabled=config.migration_enabled))
    return ControllerResult(records, {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                                      "directories": directories},
                            error_message="; ".join(refusals) if refusals else None)
