"""The migration's copy: a ZooKeeper-mode cluster's metadata as KRaft records (pure).

Owns: `copy_records`, which turns a `ZkClusterImage` (read by server/zk/seed.py's
`read_zookeeper`) into the records of the copy (and their bytes: `plan_copy` runs in a
worker thread before the transaction begins), `copy_chunks`, which cuts them into
chunks of bounded size, and `chunk_commands`, the controller commands that write those
chunks inside one metadata transaction (KIP-868):

    BeginTransactionRecord(name="zk-migration")
      RegisterBrokerRecord(IsMigratingZkBroker)…  TopicRecord, PartitionRecord…
      ConfigRecord…  ClientQuotaRecord…  UserScramCredentialRecord…
      FeatureLevelRecord…  ZkMigrationStateRecord(MIGRATION)
    EndTransactionRecord

A controller that dies before EndTransactionRecord is committed leaves an open
transaction; the next leader aborts it (AbortTransactionRecord) and copies again, and
replay rolls the image back to the state before Begin, on every node.

Rules kept here:
- ZooKeeper brokers are registered unfenced (they serve traffic) with their broker
  epoch = the offset of their RegisterBrokerRecord, as every registration in kraftwerk;
  their liveness comes from ZooKeeper, not heartbeats, until they restart in KRaft mode.
- A partition's epoch is its leader epoch (ZooKeeper's partition-state znode version is
  not in the image; the leader epoch only grows, which is what an epoch must do).
- Client quotas (/config/users, /config/clients, /config/users/<u>/clients, /config/ips)
  become one ClientQuotaRecord per key, with Kafka's entity types (user, client-id, ip),
  the names unsanitized and `<default>` as the null name. SCRAM entries of a user's znode
  are no quotas: they become UserScramCredentialRecords, when the quorum's
  metadata.version can hold them (3.5-IV2); below it they stay in ZooKeeper only and
  the write-back keeps them there.
- metadata.version is never copied: the KRaft quorum's, fixed at format time and checked
  by the preconditions, is the cluster's from now on. Other finalized features are
  copied when this controller knows them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterator

from protocol import metadata_records as mr
from protocol.records import MetadataRecord, encode_metadata_record, record
from server.controller import features as ft
from server.controller.commands import ControllerResult
from server.controller.state import SCRAM_IN_METADATA_LEVEL
from server.security.model import ScramMechanism
from server.migration.state import ZkMigrationState
from server.migration.zk_sync import BROKER_RESOURCE, TOPIC_RESOURCE, kraft_broker_config_name
from server.zk import paths as zp

TRANSACTION_NAME = "zk-migration"
# Records per controller command (and so per Raft batch) during the copy.
DEFAULT_CHUNK_RECORDS = 5_000

# Kafka's SecurityProtocol ids by name.
_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True, slots=True)
class ZkBrokerRegistration:
    """A ZooKeeper broker to register; its epoch is assigned when its record gets an offset."""

    broker_id: int
    znode: zp.BrokerRegistrationZnode


def incarnation_id(broker_id: int, znode: zp.BrokerRegistrationZnode) -> uuid.UUID:
    """A stable incarnation id for a ZooKeeper broker session: the same znode gives the
    same id (so a repeated copy registers it identically), a re-registration (new
    timestamp) another."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kraftwerk:zk-broker:{broker_id}:{znode.timestamp_ms}")


def zk_broker_record(broker_id: int, znode: zp.BrokerRegistrationZnode, broker_epoch: int,
                     metadata_version: int) -> MetadataRecord:
    endpoints = []
    for endpoint in znode.endpoints:
        protocol_name = znode.listener_security_protocol_map.get(endpoint.listener, endpoint.listener)
        endpoints.append({"name": endpoint.listener, "host": endpoint.host, "port": endpoint.port,
                          "security_protocol": _SECURITY_PROTOCOLS.get(protocol_name, 0)})
    features = [{"name": name, "min_supported_version": rng.min_version, "max_supported_version": rng.max_version}
                for name, rng in sorted(znode.features.items())]
    return record(mr.REGISTER_BROKER_RECORD, {
        "broker_id": broker_id,
        "is_migrating_zk_broker": True,
        "incarnation_id": incarnation_id(broker_id, znode),
        "broker_epoch": broker_epoch,
        "end_points": endpoints,
        "features": features,
        "rack": znode.rack,
        "fenced": False,
        "in_controlled_shutdown": False,
    }, ft.register_broker_record_version(metadata_version))


def topic_ids(image: zp.ZkClusterImage) -> dict[str, uuid.UUID]:
    """Each topic's id. A topic created before topic ids (Kafka < 2.8), or one whose id
    another topic already has (a damaged ZooKeeper), gets a fresh id, stable per name,
    so the copy never fails on it; the write-back then records that id in ZooKeeper."""
    ids: dict[str, uuid.UUID] = {}
    seen: set[uuid.UUID] = set()
    for name in sorted(image.topics):
        text = image.topics[name].assignment.topic_id
        topic_id = zp.parse_kafka_uuid(text) if text else None
        if topic_id is None or topic_id in seen or topic_id.int == 0:
            topic_id = uuid.uuid5(uuid.NAMESPACE_URL, f"kraftwerk:zk-topic:{name}")
        seen.add(topic_id)
        ids[name] = topic_id
    return ids


def topic_records(image: zp.ZkClusterImage) -> Iterator[MetadataRecord]:
    ids = topic_ids(image)
    for name in sorted(image.topics):
        topic = image.topics[name]
        topic_id = ids[name]
        yield record(mr.TOPIC_RECORD, {"name": name, "topic_id": topic_id}, 0)
        for index in sorted(topic.assignment.partitions):
            replicas = list(topic.assignment.partitions[index])
            state = topic.partition_states.get(index)
            leader = state.leader if state is not None else (replicas[0] if replicas else -1)
            isr = list(state.isr) if state is not None else replicas
            leader_epoch = state.leader_epoch if state is not None else 0
            yield record(mr.PARTITION_RECORD, {
                "partition_id": index, "topic_id": topic_id, "replicas": replicas, "isr": isr,
                "removing_replicas": list(topic.assignment.removing_replicas.get(index, ())),
                "adding_replicas": list(topic.assignment.adding_replicas.get(index, ())),
                "leader": leader, "leader_epoch": leader_epoch, "partition_epoch": leader_epoch,
            }, 0)
        config = image.topic_configs.get(name)
        if config is not None:
            for key in sorted(config.config):
                yield record(mr.CONFIG_RECORD, {"resource_type": TOPIC_RESOURCE, "resource_name": name,
                                                "name": key, "value": config.config[key]}, 0)


def broker_config_records(image: zp.ZkClusterImage) -> Iterator[MetadataRecord]:
    for zk_name in sorted(image.broker_configs):
        config = image.broker_configs[zk_name]
        for key in sorted(config.config):
            yield record(mr.CONFIG_RECORD, {"resource_type": BROKER_RESOURCE,
                                            "resource_name": kraft_broker_config_name(zk_name),
                                            "name": key, "value": config.config[key]}, 0)


def client_quota_records(image: zp.ZkClusterImage) -> Iterator[MetadataRecord]:
    quotas = image.client_quotas()
    for entity in sorted(quotas, key=_entity_order):
        data = [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity]
        for key, value in sorted(quotas[entity].items()):
            yield record(mr.CLIENT_QUOTA_RECORD, {"entity": data, "key": key, "value": value, "remove": False}, 0)


def _entity_order(entity: zp.QuotaEntityKey) -> tuple:
    return tuple((entity_type, name is not None, name or "") for entity_type, name in entity)


def scram_records(image: zp.ZkClusterImage) -> Iterator[MetadataRecord]:
    for (user, mechanism_name), credential in sorted(image.scram_credentials().items()):
        yield record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
            "name": user, "mechanism": int(ScramMechanism.from_name(mechanism_name)), "salt": credential.salt,
            "stored_key": credential.stored_key, "server_key": credential.server_key,
            "iterations": credential.iterations}, 0)


def feature_records(image: zp.ZkClusterImage, known_features: set[str]) -> Iterator[MetadataRecord]:
    if image.features is None:
        return
    for name, level in sorted(image.features.finalized_levels().items()):
        if name == ft.METADATA_VERSION or name not in known_features or level <= 0:
            continue
        yield record(mr.FEATURE_LEVEL_RECORD, {"name": name, "feature_level": level}, 0)


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """The copy, ready to be proposed: brokers first (their epochs depend on offsets)."""

    brokers: tuple[ZkBrokerRegistration, ...]
    records: tuple[MetadataRecord, ...]  # topics, partitions, configs, quotas, SCRAM, features
    # `encode_metadata_record` of each of `records`, made with the plan (in the driver's
    # worker thread, before the copy's transaction holds other writes); empty: not made.
    values: tuple[bytes, ...] = ()

    @property
    def total_records(self) -> int:
        # + Begin, ZkMigrationState, End
        return len(self.brokers) + len(self.records) + 3


def plan_copy(image: zp.ZkClusterImage, known_features: set[str],
              metadata_version: int | None = None) -> CopyPlan:
    """The copy of `image`. SCRAM credentials are copied when `metadata_version` (the
    quorum's) can hold them; None means it can. A bad quota or credential znode raises
    `ZnodeDecodeError` naming it: nothing is copied (Kafka's migration stops too)."""
    brokers = tuple(ZkBrokerRegistration(broker_id, image.brokers[broker_id]) for broker_id in sorted(image.brokers))
    with_scram = metadata_version is None or metadata_version >= SCRAM_IN_METADATA_LEVEL
    records = (tuple(topic_records(image)) + tuple(broker_config_records(image))
               + tuple(client_quota_records(image)) + (tuple(scram_records(image)) if with_scram else ())
               + tuple(feature_records(image, known_features)))
    return CopyPlan(brokers, records, tuple(encode_metadata_record(item) for item in records))


def begin_record() -> MetadataRecord:
    return record(mr.BEGIN_TRANSACTION_RECORD, {"name": TRANSACTION_NAME}, 0)


def end_record() -> MetadataRecord:
    return record(mr.END_TRANSACTION_RECORD, {}, 0)


def abort_record(reason: str) -> MetadataRecord:
    return record(mr.ABORT_TRANSACTION_RECORD, {"reason": reason}, 0)


def migration_state_record(state: ZkMigrationState) -> MetadataRecord:
    return record(mr.ZK_MIGRATION_STATE_RECORD, {"zk_migration_state": int(state)}, 0)


def copy_chunks(plan: CopyPlan, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[list[MetadataRecord]]:
    """The copy's topic, config and feature records in lists of at most `chunk_records`,
    one list per controller command. Broker records are built inside the first command
    (`broker_records`), since their epochs are offsets only the command knows."""
    records = list(plan.records)
    for start in range(0, len(records), chunk_records):
        yield records[start:start + chunk_records]


def chunk_commands(plan: CopyPlan, chunk_records: int, metadata_version: int) -> list:
    """The copy as controller commands, one per chunk of `copy_chunks`: the first opens the
    transaction (in PRE_MIGRATION only) and registers the brokers, the last records
    MIGRATION and ends it. Each later command checks that the records of every chunk
    before it are in the transaction, so the commands can be queued several at once: a
    chunk that failed makes every later one fail too, and the transaction never ends
    without it (the next leader aborts it)."""
    chunks = list(copy_chunks(plan, chunk_records)) or [[]]
    encoded = len(plan.values) == len(plan.records)
    # copy_chunks cuts at multiples of chunk_records: chunk i starts at record i * chunk_records.
    chunk_values = [list(plan.values[index * chunk_records:index * chunk_records + len(chunk)])
                    for index, chunk in enumerate(chunks)] if encoded else []
    # Offset of each chunk's first record, counted from the BeginTransactionRecord.
    firsts = []
    position = 1 + len(plan.brokers)
    for chunk in chunks:
        firsts.append(position)
        position += len(chunk)

    def command_for(index: int):
        chunk, first, last, expected = chunks[index], index == 0, index == len(chunks) - 1, firsts[index]

        def command(state, tracker, next_offset, now):
            if first:
                if state.in_transaction or ZkMigrationState(state.zk_migration_state) != ZkMigrationState.PRE_MIGRATION:
                    raise RuntimeError("the copy must start in PRE_MIGRATION outside a transaction")
                head = [begin_record()] + broker_records(plan, next_offset + 1, metadata_version)
                records = head + chunk
            else:
                if not state.in_transaction:
                    raise RuntimeError("the copy's transaction is no longer open")
                if next_offset != state.transaction_start_offset + expected:
                    raise RuntimeError("a chunk of the copy before this one is missing")
                head = []
                records = list(chunk)
            tail = [migration_state_record(ZkMigrationState.MIGRATION), end_record()] if last else []
            records += tail
            values = None
            if encoded:
                # The chunk's bytes were made with the plan; only the few records built here
                # are encoded now.
                values = ([encode_metadata_record(item) for item in head] + chunk_values[index]
                          + [encode_metadata_record(item) for item in tail])
            # Built field for field at their versions: the active controller replays these
            # objects on commit instead of decoding its own batch (tests/migration/
            # test_copy_commands.py checks that both replays give the same image).
            return ControllerResult(records, {}, records_as_decoded=True, values=values)
        return command
    return [command_for(index) for index in range(len(chunks))]


def broker_records(plan: CopyPlan, next_offset: int, metadata_version: int) -> list[MetadataRecord]:
    """The ZooKeeper brokers' RegisterBrokerRecords for a command whose first record gets
    `next_offset`: each broker's epoch is its own record's offset."""
    return [zk_broker_record(b.broker_id, b.znode, next_offset + i, metadata_version)
            for i, b in enumerate(plan.brokers)]
