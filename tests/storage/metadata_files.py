"""A metadata directory written through kraftwerk's own storage, for the offline tools'
tests (`kraftwerk dump-log`, `kraftwerk metadata-shell`) and the comparison with Kafka's
DumpLogSegments.

`write_story(directory)` lays the log out as the Raft layer does: a LeaderChange control
batch opens each leader epoch, then one batch per command (a group commit), KRaftVersion
and Voters control batches, small segments so the log spans several files, and a
controller snapshot in the middle. The metadata records come from the real controller
commands (bootstrap, registrations, heartbeats, CreateTopics, IncrementalAlterConfigs,
controlled shutdown, DeleteTopics) replayed into a `ControllerState`; the kinds those
commands do not cover here (SCRAM, ACLs, client quotas, producer ids, a sensitive broker
config) are records as their commands write them. `Story.entries` lists every offset
with what the log holds there, so a test can check a dump line by line.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from protocol import metadata_records as mr
from protocol.apis import create_topics, delete_topics, incremental_alter_configs
from protocol.raft_records import KRAFT_VERSION_RECORD, LEADER_CHANGE_MESSAGE, VOTERS_RECORD
from protocol.record_batch import ControlRecordType
from protocol.records import MetadataRecord, decode_metadata_record, record
from server.controller import commands as cmd
from server.controller import topics as tp
from server.controller.broker_config_catalog import BROKER_CONFIG_CATALOG
from server.controller.snapshot import write_controller_snapshot
from server.controller.state import RESOURCE_BROKER, ControllerState
from server.storage.log import LogConfig, MetadataLog
from server.storage.meta_properties import MetaProperties, write_meta_properties
from server.values import SnapshotId

from controller.helpers import (  # tests/ is the import root
    CLUSTER_ID,
    Cluster,
    decoded,
    heartbeat_request,
    registration_request,
)

SEGMENT_BYTES = 1024
FIRST_EPOCH = 1
ALICE_SALT = b"alice-salt-16byt"
# A PASSWORD-typed broker config: the shell must never show its value.
SENSITIVE_CONFIG = next(name for name, fact in sorted(BROKER_CONFIG_CATALOG.items()) if fact.sensitive)
SENSITIVE_VALUE = "hunter2-do-not-print"


@dataclass
class Story:
    directory: Path
    # (offset, what is there): a metadata record's type name ("FeatureLevelRecord") or a
    # control record's label ("LeaderChange", "KRaftVersion", "Voters").
    entries: list[tuple[int, str]] = field(default_factory=list)
    snapshot: SnapshotId | None = None
    snapshot_state: ControllerState | None = None
    state: ControllerState | None = None  # after the whole log

    @property
    def segments(self) -> list[Path]:
        return sorted(self.directory.glob("*.log"))

    @property
    def snapshot_path(self) -> Path:
        return next(self.directory.glob("*.checkpoint"))


class _Writer:
    """Runs commands against a Cluster and appends each one's records as one batch."""

    def __init__(self, log: MetadataLog, story: Story) -> None:
        self.log = log
        self.story = story
        self.epoch = FIRST_EPOCH
        self.clock_ms = 1_700_000_000_000
        self.cluster = Cluster(config=cmd.ControllerConfig(node_id=3000, cluster_id=CLUSTER_ID))
        self._topic_ids = iter(uuid.UUID(int=(index + 1) << 72 | 0xABC) for index in range(100))

    def _tick(self) -> int:
        self.clock_ms += 250
        return self.clock_ms

    def control(self, control_type: int, value: bytes, label: str) -> None:
        base, _ = self.log.append([value], self.epoch, self._tick(), control_type)
        self.story.entries.append((base, label))
        self.cluster.next_offset = base + 1
        if control_type == ControlRecordType.KRAFT_VERSION:
            level = KRAFT_VERSION_RECORD.decode(0, value).kraft_version
            self.cluster.state.replay_kraft_version(level, base)

    def leader_change(self, epoch: int, leader_id: int = 3000) -> None:
        self.epoch = epoch
        value = LEADER_CHANGE_MESSAGE.encode(0, {"version": 0, "leader_id": leader_id,
                                                 "voters": [{"voter_id": leader_id}],
                                                 "granting_voters": [{"voter_id": leader_id}]})
        self.control(ControlRecordType.LEADER_CHANGE, value, "LeaderChange")

    def records(self, records: list[MetadataRecord]) -> None:
        """One group commit: the records as one batch, replayed at their offsets."""
        if not records:
            return
        start = len(self.cluster.log)
        self.cluster.next_offset = self.log.end_offset
        self.cluster.append(records)
        values = [raw for raw, _ in self.cluster.log[start:]]
        base, _ = self.log.append(values, self.epoch, self._tick())
        for index, raw in enumerate(values):
            self.story.entries.append((base + index, decode_metadata_record(raw).name))

    def run(self, result: cmd.ControllerResult) -> cmd.ControllerResult:
        self.records(list(result.records))
        if result.heartbeat is not None:
            result.heartbeat.apply(self.cluster.tracker)
        return result


def _scram_record() -> MetadataRecord:
    return record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
        "name": "alice", "mechanism": 1, "salt": ALICE_SALT, "stored_key": b"\x01" * 32,
        "server_key": b"\x02" * 32, "iterations": 4096}, version=0)


def _acl_record() -> MetadataRecord:
    return record(mr.ACCESS_CONTROL_ENTRY_RECORD, {
        "id": uuid.UUID(int=0xAC1), "resource_type": 2, "resource_name": "orders",
        "pattern_type": 3, "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3},
        version=0)


def _quota_records() -> list[MetadataRecord]:
    def quota(entity: list[tuple[str, str | None]], key: str, value: float) -> MetadataRecord:
        return record(mr.CLIENT_QUOTA_RECORD, {
            "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
            "key": key, "value": value, "remove": False}, version=0)
    return [
        quota([("user", "alice")], "producer_byte_rate", 1024.0),
        quota([("user", None)], "consumer_byte_rate", 2.5e7),  # Java prints 2.5E7
        quota([("client-id", "app(1)"), ("user", "alice")], "request_percentage", 0.5),
    ]


def write_story(directory: Path) -> Story:
    """Writes the story into `directory` (a __cluster_metadata-0, with the node's
    meta.properties beside it) and returns it."""
    story = Story(directory)
    log = MetadataLog.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES))
    write_meta_properties(directory.parent, MetaProperties(CLUSTER_ID, 3000))
    try:
        writer = _Writer(log, story)
        writer.leader_change(FIRST_EPOCH)
        writer.records(cmd.bootstrap_records(22, {}))
        writer.control(ControlRecordType.KRAFT_VERSION,
                       KRAFT_VERSION_RECORD.encode(0, {"version": 0, "kraft_version": 1}), "KRaftVersion")
        writer.control(ControlRecordType.VOTERS, VOTERS_RECORD.encode(0, {"version": 0, "voters": [{
            "voter_id": 3000, "voter_directory_id": uuid.UUID(int=0xD1), "endpoints": [
                {"name": "CONTROLLER", "host": "127.0.0.1", "port": 9093}],
            "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}]}), "Voters")
        cluster = writer.cluster
        epochs = {}
        for broker_id in (1, 2, 3):
            writer.run(cmd.register_broker(cluster.state, cluster.tracker, _registration(broker_id), 4,
                                           cluster.now_ms, log.end_offset, cluster.config))
            epochs[broker_id] = cluster.state.broker(broker_id).epoch
        for broker_id in (1, 2, 3):
            writer.run(cmd.broker_heartbeat(cluster.state, cluster.tracker,
                                            _heartbeat(broker_id, epochs[broker_id], log.end_offset - 1), 1,
                                            cluster.now_ms, cluster.config, next_offset=log.end_offset))
        writer.run(tp.create_topics(cluster.state, decoded(create_topics.REQUEST, 7, timeout_ms=1000, topics=[
            {"name": "orders", "num_partitions": 3, "replication_factor": 2, "assignments": [],
             "configs": [{"name": "cleanup.policy", "value": "compact"}]},
            {"name": "payments", "num_partitions": 1, "replication_factor": 3, "assignments": [],
             "configs": []}]), 7, lambda: next(writer._topic_ids)))
        writer.run(tp.incremental_alter_configs(cluster.state, decoded(
            incremental_alter_configs.REQUEST, 1, validate_only=False, resources=[
                {"resource_type": RESOURCE_BROKER, "resource_name": "", "configs": [
                    {"name": "log.retention.ms", "config_operation": tp.OP_SET, "value": "86400000"}]}]), 1))
        writer.records([_scram_record(), _acl_record()])
        # The snapshot point: everything so far, as a node's replay task would snapshot it.
        story.snapshot_state = cluster.state.copy()
        story.snapshot = write_controller_snapshot(cluster.state, directory, cluster.state.last_applied_offset + 1,
                                                   writer.epoch, writer.clock_ms)
        writer.leader_change(FIRST_EPOCH + 1)
        writer.records(_quota_records())
        writer.records([record(mr.PRODUCER_IDS_RECORD, {"broker_id": 1, "broker_epoch": epochs[1],
                                                        "next_producer_id": 1000}, version=0)])
        writer.records([record(mr.CONFIG_RECORD, {"resource_type": RESOURCE_BROKER, "resource_name": "1",
                                                  "name": SENSITIVE_CONFIG, "value": SENSITIVE_VALUE}, version=0)])
        # Controlled shutdown of broker 3: PartitionChangeRecords move its leaderships away.
        writer.run(cmd.broker_heartbeat(cluster.state, cluster.tracker,
                                        _heartbeat(3, epochs[3], log.end_offset - 1, want_shut_down=True), 1,
                                        cluster.now_ms, cluster.config, next_offset=log.end_offset))
        writer.run(tp.delete_topics(cluster.state, decoded(delete_topics.REQUEST, 6, timeout_ms=1000, topics=[
            {"name": "payments", "topic_id": uuid.UUID(int=0)}]), 6))
        story.state = cluster.state.copy()
    finally:
        log.close()
    return story


def _registration(broker_id: int):
    return registration_request(broker_id, uuid.UUID(int=broker_id), rack=f"rack-{broker_id % 2}")


def _heartbeat(broker_id: int, epoch: int, offset: int, want_shut_down: bool = False):
    return heartbeat_request(broker_id, epoch, offset, want_shut_down=want_shut_down)
