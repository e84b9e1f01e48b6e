"""The controller's metadata image, rebuilt only by replaying metadata records.

Owns: `ControllerState` (finalized features, their epoch, broker registrations,
controller registrations (KIP-919), topics with their partitions, configs, the ZK migration state, SCRAM credentials,
ACLs, client quotas, the open metadata transaction), the typed
registration / topic / partition values, and the volatile `BrokerHeartbeatTracker`.

Rules kept here:
- `ControllerState.replay(record, offset)` is the ONLY way the image changes (plus
  `replay_kraft_version` for the raft layer's KRaftVersion control record). Leader,
  standby and restart all go through it, so the same log gives the same image.
- A record that does not fit the image (fencing an unknown broker, an epoch that
  does not match, an unbalanced transaction) raises `ReplayError` *before*
  anything is changed: the log is authoritative, so a mismatch is a bug.
- Heartbeat times are not in the log and not in the image: they live in
  `BrokerHeartbeatTracker`, which a new leader seeds when it activates.
- Topics are keyed by topic id (the log's identity for a topic: PartitionRecord and
  RemoveTopicRecord name the id, not the name); a name index is kept beside them.
  A TopicRecord for a name held by another id (or an id held by another name) is a
  ReplayError; the same (name, id) again restarts the topic with no partitions, as in
  Kafka (the PartitionRecords that follow rebuild them).
  A PartitionChangeRecord changes one partition as Kafka's PartitionRegistration.merge
  does (`merge_partition_change`); one naming an unknown topic or partition is a
  ReplayError. Snapshots hold the resulting PartitionRecord, never the changes.
  RemoveTopicRecord drops the topic, its partitions and its topic configs, as Kafka's
  replay does. A ConfigRecord whose value is null deletes that key; a resource with no
  keys left is gone. Configs are not checked against existing topics: ZooKeeper
  migration may copy a topic's configs before the topic itself.
- Readers get immutable values (`TopicImage`, `PartitionImage`, read-only mappings),
  built lazily and cached per topic, so a replayed PartitionRecord costs O(1) and a
  reader never sees a view change under it.
- Images in one process share the registration values the same committed records
  give (`SHARED_REGISTRATIONS`, a bounded window): only a value equal field for field
  to the one the record builds is shared, so sharing never changes what an image holds.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

from protocol import metadata_records as mr
from protocol.records import MetadataRecord
from server.controller.answers import Answer, ForwardedAnswers
from server.controller.downgrade import project_registration
from server.security.model import AclEntry, ScramCredential, ScramMechanism
from server.values import BrokerEpoch, LeaderEpoch, NodeId, Offset, ZkMigrationState
from server.controller.features import (
    IBP_3_4_IV0,
    KRAFT_VERSION,
    METADATA_VERSION,
    SupportedRange,
    controller_registration_supported,
    directory_assignment_supported,
)


# metadata.version 3.5-IV2: the first level whose log can hold SCRAM credentials.
SCRAM_IN_METADATA_LEVEL = 11


# A client quota entity: (entity type, entity name or None for the default) pairs, sorted
# by type ("client-id", "ip", "user"); Kafka keys its quota image by the same map.
QuotaEntity = tuple[tuple[str, "str | None"], ...]


def quota_entity(pairs) -> QuotaEntity:
    """The entity of (type, name) pairs; a type named twice keeps its last name, as
    Kafka builds the entity map from a request or record."""
    return tuple(sorted(dict(pairs).items()))


class ReplayError(Exception):
    """A record could not be applied to the image; the image is unchanged."""


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker as the log describes it.

    `epoch` is the BrokerEpoch field of its RegisterBrokerRecord (the offset the
    record got when this incarnation first registered); `registration_offset` is the
    offset of the latest RegisterBrokerRecord for it. They differ only after the
    same incarnation re-registers, which keeps its epoch (KAFKA-16952). Heartbeats
    unfence a broker once it has caught up to `registration_offset`.
    """

    broker_id: NodeId
    incarnation_id: uuid.UUID
    epoch: BrokerEpoch
    registration_offset: Offset
    endpoints: tuple[BrokerEndpoint, ...]
    supported_features: Mapping[str, SupportedRange]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()
    # The log directories the broker's heartbeats say are cordoned (KIP-1066); None
    # until its first heartbeat that says (or below metadata.version 4.3-IV0).
    cordoned_log_dirs: tuple[uuid.UUID, ...] | None = None
    # (record version, bytes): this value's RegisterBrokerRecord as a snapshot holds it
    # (server/controller/snapshot.py). A node snapshots at every metadata.version change
    # and most registrations are unchanged since the last one; the value is immutable,
    # so its bytes at a version are too. Not part of the value: not compared, not
    # copied by `replace`.
    snapshot_value: tuple[int, bytes] | None = field(default=None, init=False, compare=False, repr=False)

    def supported(self, feature: str) -> SupportedRange:
        """The broker's range for `feature`; a feature it did not mention is [0, 0]."""
        return self.supported_features.get(feature, SupportedRange(0, 0))

    def keep_snapshot_value(self, version: int, value: bytes) -> None:
        """Remembers `value` as this registration's snapshot record at `version`
        (`snapshot_value`; the one field set after construction)."""
        _set_snapshot_value(self, (version, value))


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """One controller's registration (RegisterControllerRecord, KIP-919): the latest
    record for its id replaces any earlier one, whatever its incarnation."""

    controller_id: NodeId
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    endpoints: tuple[BrokerEndpoint, ...]
    supported_features: Mapping[str, SupportedRange]

    def endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        """Its endpoint on the listener `listener_name`, if it registered one."""
        return next((e for e in self.endpoints if e.name == listener_name), None)


def _features_and_endpoints(data: Any) -> tuple[dict[str, SupportedRange], tuple[BrokerEndpoint, ...]]:
    """The supported features and endpoints of a RegisterBrokerRecord or RegisterControllerRecord."""
    features = {
        _get(f, "name"): SupportedRange(_get(f, "min_supported_version"), _get(f, "max_supported_version"))
        for f in _get(data, "features", [])
    }
    endpoints = tuple(
        BrokerEndpoint(_get(e, "name"), _get(e, "host"), _get(e, "port"), _get(e, "security_protocol"))
        for e in _get(data, "end_points", [])
    )
    return features, endpoints


class SharedRegistrations:
    """Registrations already built in this process, by (offset, broker id), so that
    every image that replays the same committed RegisterBrokerRecord holds one
    immutable value instead of one copy each.

    A process that hosts several nodes (the simulator, tests, a benchmark with N
    broker agents) replays each committed record once per node: without this, N
    images of N brokers hold N² registrations, each built anew and each walked by
    the cyclic collector. A hit is taken only when every field the record gives
    equals the cached value's (checked without allocating), so a different record
    at the same offset (another cluster in the same process, a divergent test log)
    builds its own value: the image is the same as without the cache, field for
    field. A process with one node gains nothing and pays one lookup per
    registration record, and at most `max_entries` superseded values outlive their
    images until the next clear."""

    __slots__ = ("_by_key", "_derived", "max_entries")

    def __init__(self, max_entries: int = 1024) -> None:
        self._by_key: dict[tuple[int, Any], BrokerRegistration] = {}
        # (offset, broker id) -> (the registration a fencing or shutdown change applied
        # to, the change, the result): an image whose registration is that same shared
        # value gets the same result (`derived`).
        self._derived: dict[tuple[int, Any], tuple[BrokerRegistration, Any, BrokerRegistration]] = {}
        self.max_entries = max_entries

    def get(self, data: Any, offset: int) -> "BrokerRegistration | None":
        cached = self._by_key.get((offset, data.get("broker_id")))
        if cached is not None and _registration_matches(cached, data):
            return cached
        return None

    def put(self, registration: "BrokerRegistration") -> None:
        by_key = self._by_key
        if len(by_key) >= self.max_entries:
            # Values are kept only while nodes still replay them: a bounded window,
            # cleared whole (cheaper than an LRU's bookkeeping per record).
            by_key.clear()
        by_key[(registration.registration_offset, registration.broker_id)] = registration

    def derive(self, offset: int, source: "BrokerRegistration", change: Any,
               build: Callable[[], "BrokerRegistration"]) -> "BrokerRegistration":
        """The registration `change` (a record's fencing / shutdown values) at `offset`
        makes of `source`: the one another image got from this very value (a value is
        immutable, so the same change of it gives an equal one), else `build()`, kept
        for the next image."""
        key = (offset, source.broker_id)
        derived = self._derived
        held = derived.get(key)
        if held is not None and held[0] is source and held[1] == change:
            return held[2]
        result = build()
        if len(derived) >= self.max_entries:
            derived.clear()
        derived[key] = (source, change, result)
        return result


def _registration_matches(registration: "BrokerRegistration", data: Any) -> bool:
    """Whether `_mapping_registration(data, registration.registration_offset)` would
    build a value equal to `registration` (read-only walk of the record's fields)."""
    get = data.get
    if (registration.epoch != get("broker_epoch") or registration.incarnation_id != get("incarnation_id")
            or registration.rack != get("rack")):
        return False
    fenced = get("fenced")
    if (registration.fenced is not (True if fenced is None else bool(fenced))
            or registration.in_controlled_shutdown is not bool(get("in_controlled_shutdown"))
            or registration.is_migrating_zk_broker is not bool(get("is_migrating_zk_broker"))):
        return False
    endpoints = get("end_points") or ()
    held = registration.endpoints
    if len(endpoints) != len(held):
        return False
    for endpoint, value in zip(endpoints, held):
        eget = endpoint.get
        if (value.name != eget("name") or value.host != eget("host") or value.port != eget("port")
                or value.security_protocol != eget("security_protocol")):
            return False
    features = get("features") or ()
    supported = registration.supported_features
    # The mapping keeps the list's order (a dict built in order), so the names must come
    # one for one, in order: a repeated name (a shorter mapping) or another order is
    # built, never matched.
    if len(features) != len(supported):
        return False
    for feature, (name, supported_range) in zip(features, supported.items()):
        fget = feature.get
        if (name != fget("name") or supported_range.min_level != fget("min_supported_version")
                or supported_range.max_level != fget("max_supported_version")):
            return False
    log_dirs = get("log_dirs")
    # Built as () from a null LogDirs, and as None from a null CordonedLogDirs.
    if not (not registration.log_dirs if log_dirs is None else _same_values(registration.log_dirs, log_dirs)):
        return False
    cordoned = get("cordoned_log_dirs")
    return registration.cordoned_log_dirs is None if cordoned is None \
        else _same_values(registration.cordoned_log_dirs, cordoned)


def _same_values(held: "tuple | None", given: Any) -> bool:
    if held is None or len(held) != len(given):
        return False
    for held_value, given_value in zip(held, given):
        if held_value != given_value:
            return False
    return True


# This process's shared registrations (see SharedRegistrations): the one piece of
# module state here, a cache of immutable values that never changes what an image holds.
SHARED_REGISTRATIONS = SharedRegistrations()


def _fencing_changed(registration: "BrokerRegistration", offset: int, fenced: bool) -> "BrokerRegistration":
    """`replace(registration, fenced=fenced)`, shared with the images that applied the
    same record to the same value."""
    change = FENCING_CHANGE_FENCE if fenced else FENCING_CHANGE_UNFENCE
    return SHARED_REGISTRATIONS.derive(offset, registration, change, lambda: replace(registration, fenced=fenced))


def _mapping_registration(data: dict, offset: int,
                          previous: "BrokerRegistration | None" = None) -> "BrokerRegistration":
    """The registration a RegisterBrokerRecord whose fields are a mapping (a decoded
    Container or a dict built here) describes: what `_get` would read, without its
    per-field dispatch. Every node replays every broker's registration, and a fleet
    that re-registers (log directories at 3.7-IV2) costs N replays on each of N nodes.

    `previous` (the broker's registration this one replaces): its endpoints and log
    directory tuples are kept when the record repeats them — equal immutable values, so
    the image is the same — and a re-registering fleet leaves each image with fewer new
    objects that outlive the collector's young generations."""
    get = data.get
    ranges = []
    for feature in get("features") or ():
        fget = feature.get
        ranges.append((fget("name"), fget("min_supported_version"), fget("max_supported_version")))
    endpoints = []
    for endpoint in get("end_points") or ():
        eget = endpoint.get
        endpoints.append(BrokerEndpoint(eget("name"), eget("host"), eget("port"), eget("security_protocol")))
    endpoints = tuple(endpoints)
    fenced = get("fenced")
    log_dirs = get("log_dirs")
    log_dirs = () if log_dirs is None else tuple(log_dirs)
    cordoned = _uuid_tuple(get("cordoned_log_dirs"))
    if previous is not None:
        if previous.endpoints == endpoints:
            endpoints = previous.endpoints
        if previous.log_dirs == log_dirs:
            log_dirs = previous.log_dirs
        if cordoned is not None and previous.cordoned_log_dirs == cordoned:
            cordoned = previous.cordoned_log_dirs
    return _new_registration(
        get("broker_id"), get("incarnation_id"), get("broker_epoch"), offset, endpoints,
        _supported_features(tuple(ranges)), get("rack"), True if fenced is None else bool(fenced),
        bool(get("in_controlled_shutdown")), bool(get("is_migrating_zk_broker")), log_dirs, cordoned)


# `_new_registration` builds a BrokerRegistration from its fields in this order.
_REGISTRATION_FIELDS = ("broker_id", "incarnation_id", "epoch", "registration_offset", "endpoints",
                        "supported_features", "rack", "fenced", "in_controlled_shutdown", "is_migrating_zk_broker",
                        "log_dirs", "cordoned_log_dirs")
if tuple(f.name for f in fields(BrokerRegistration) if f.init) != _REGISTRATION_FIELDS:
    raise RuntimeError("BrokerRegistration's fields changed: update _REGISTRATION_FIELDS, _new_registration "
                       "and _registration_matches")


def _new_registration(*values, _new=object.__new__, _cls=BrokerRegistration,
                      _setters=tuple(BrokerRegistration.__dict__[name].__set__ for name in _REGISTRATION_FIELDS)
                      ) -> BrokerRegistration:
    """`BrokerRegistration(...)` with every field given (in `_REGISTRATION_FIELDS`
    order), through the slots' own setters rather than the frozen dataclass's
    `__init__` (one `object.__setattr__` per field): every node replays every broker's
    registration, N replays on each of N nodes when a fleet re-registers. The result is
    the same frozen value (equality, hash and `replace` are the dataclass's)."""
    registration = _new(_cls)
    for setter, value in zip(_setters, values, strict=True):
        setter(registration, value)
    _set_snapshot_value(registration, None)
    return registration


_set_snapshot_value = BrokerRegistration.__dict__["snapshot_value"].__set__


@functools.lru_cache(maxsize=256)
def _shared_supported_features(ranges: tuple[tuple[str, int, int], ...]) -> Mapping[str, SupportedRange]:
    return MappingProxyType({name: SupportedRange(low, high) for name, low, high in ranges})


def _supported_features(ranges: tuple[tuple[str, int, int], ...]) -> Mapping[str, SupportedRange]:
    """The read-only features mapping of a registration's (name, min, max) ranges, one
    shared value per distinct list: the brokers of a fleet run the same release, so an
    image of N registrations holds one mapping (and its ranges) instead of N — fewer
    objects to build on each replay and for the cyclic collector to walk. Immutable, so
    sharing is safe; a later range for the same name wins, as in a dict built in order."""
    try:
        return _shared_supported_features(ranges)
    except TypeError:  # an unhashable value (never from a decoded record): build it alone
        return MappingProxyType({name: SupportedRange(low, high) for name, low, high in ranges})


def _uuid_tuple(values: Any) -> tuple[uuid.UUID, ...] | None:
    return None if values is None else tuple(values)


def _get(data: Any, key: str, default: Any = None) -> Any:
    """Field access for both dicts and construct Containers (records built locally
    are dicts; decoded ones are Containers, which are dicts too)."""
    value = data.get(key, default) if hasattr(data, "get") else getattr(data, key, default)
    return default if value is None and default is not None else value


# Values of BrokerRegistrationChangeRecord.Fenced / .InControlledShutdown
# (Kafka's BrokerRegistrationFencingChange and ...InControlledShutdownChange).
FENCING_CHANGE_FENCE = 1
FENCING_CHANGE_NONE = 0
FENCING_CHANGE_UNFENCE = -1
SHUTDOWN_CHANGE_NONE = 0
SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN = 1


# ConfigRecord.ResourceType values (Kafka's ConfigResource.Type).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

_EMPTY_MAPPING: Mapping = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PartitionImage:
    """One partition as its PartitionRecord and the PartitionChangeRecords after it describe it."""

    replicas: tuple[NodeId, ...]
    isr: tuple[NodeId, ...]
    leader: NodeId
    leader_epoch: LeaderEpoch
    partition_epoch: int
    removing_replicas: tuple[NodeId, ...] = ()
    adding_replicas: tuple[NodeId, ...] = ()
    leader_recovery_state: int = 0
    # PartitionRecord v1+ (metadata.version 3.7-IV2): the log directory of each replica.
    directories: tuple[uuid.UUID, ...] = ()


# `_new_partition` builds a PartitionImage from its fields in this order.
_PARTITION_FIELDS = ("replicas", "isr", "leader", "leader_epoch", "partition_epoch", "removing_replicas",
                     "adding_replicas", "leader_recovery_state", "directories")
if tuple(f.name for f in fields(PartitionImage)) != _PARTITION_FIELDS:
    raise RuntimeError("PartitionImage's fields changed: update _PARTITION_FIELDS and _new_partition")


def _new_partition(replicas, isr, leader, leader_epoch, partition_epoch, removing_replicas, adding_replicas,
                   leader_recovery_state, directories, *, _new=object.__new__, _cls=PartitionImage,
                   _setters=tuple(PartitionImage.__dict__[name].__set__ for name in _PARTITION_FIELDS)) -> PartitionImage:
    """`PartitionImage(...)` with every field given, through the slots' own setters: the
    frozen dataclass's `__init__` calls `object.__setattr__` once per field, which made
    it a third of a PartitionRecord's replay (1.2-1.8 µs against 0.5-0.7 µs here). The
    result is the same frozen value (equality, hash and `replace` are the dataclass's)."""
    partition = _new(_cls)
    (set_replicas, set_isr, set_leader, set_leader_epoch, set_partition_epoch, set_removing, set_adding,
     set_recovery, set_directories) = _setters
    set_replicas(partition, replicas)
    set_isr(partition, isr)
    set_leader(partition, leader)
    set_leader_epoch(partition, leader_epoch)
    set_partition_epoch(partition, partition_epoch)
    set_removing(partition, removing_replicas)
    set_adding(partition, adding_replicas)
    set_recovery(partition, leader_recovery_state)
    set_directories(partition, directories)
    return partition


# PartitionChangeRecord's "no change" values (Kafka's LeaderConstants / LeaderRecoveryState).
NO_LEADER = -1
NO_LEADER_CHANGE = -2
LEADER_RECOVERY_NO_CHANGE = -1
# Kafka's reserved directory ids (DirectoryId), as PartitionRecord.Directories holds them.
# MIGRATING: a directory was chosen but the controller does not know it (replicas from
# before metadata.version 3.7-IV2, or from a broker that registered no directories).
DIRECTORY_MIGRATING = uuid.UUID(int=0)
# UNASSIGNED: no directory chosen yet; the broker picks one and says so with
# AssignReplicasToDirs.
DIRECTORY_UNASSIGNED = uuid.UUID(int=1)
# LOST: the replica's directory is offline and unknown.
DIRECTORY_LOST = uuid.UUID(int=2)


def merge_partition_change(partition: PartitionImage, change: Any) -> PartitionImage:
    """`partition` after one PartitionChangeRecord, as Kafka's PartitionRegistration.merge:
    a null list keeps the old one, Leader -2 keeps the leader (and its epoch) while any
    other value, the same leader included, bumps the leader epoch, LeaderRecoveryState -1
    keeps it, and every change bumps the partition epoch. Eligible leader replicas are
    not modelled (kraftwerk never writes them)."""
    replicas = _get(change, "replicas")
    isr = _get(change, "isr")
    removing = _get(change, "removing_replicas")
    adding = _get(change, "adding_replicas")
    leader = _get(change, "leader", NO_LEADER_CHANGE)
    recovery = _get(change, "leader_recovery_state", LEADER_RECOVERY_NO_CHANGE)
    new_replicas = partition.replicas if replicas is None else tuple(replicas)
    directories = _get(change, "directories")
    if directories:
        new_directories = tuple(directories)
    elif not partition.directories or len(partition.directories) == len(new_replicas):
        new_directories = partition.directories
    else:
        # New replicas without directories: not known yet (Kafka's defaultToMigrating).
        new_directories = (DIRECTORY_MIGRATING,) * len(new_replicas)
    return _new_partition(
        new_replicas,
        partition.isr if isr is None else tuple(isr),
        partition.leader if leader == NO_LEADER_CHANGE else leader,
        partition.leader_epoch if leader == NO_LEADER_CHANGE else partition.leader_epoch + 1,
        partition.partition_epoch + 1,
        partition.removing_replicas if removing is None else tuple(removing),
        partition.adding_replicas if adding is None else tuple(adding),
        partition.leader_recovery_state if recovery == LEADER_RECOVERY_NO_CHANGE else recovery,
        new_directories,
    )


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its name, id and partitions (a read-only mapping by partition index)."""

    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]


class _TopicEntry:
    """A topic inside the image: mutable partitions plus a cached immutable view."""

    __slots__ = ("name", "topic_id", "partitions", "view")

    def __init__(self, name: str, topic_id: uuid.UUID, partitions: dict[int, PartitionImage]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        self.view: TopicImage | None = None

    def image(self) -> TopicImage:
        if self.view is None:
            self.view = TopicImage(self.name, self.topic_id, MappingProxyType(dict(self.partitions)))
        return self.view

    def copy(self) -> "_TopicEntry":
        entry = _TopicEntry(self.name, self.topic_id, dict(self.partitions))
        entry.view = self.view  # immutable, still accurate
        return entry


class ProducerIds(NamedTuple):
    """The last ProducerIdsRecord (KIP-730): `next_producer_id` is the first id of the
    next block; the last block went to `broker_id` at `broker_epoch`."""
    next_producer_id: int
    broker_id: int
    broker_epoch: int


NO_PRODUCER_IDS = ProducerIds(0, -1, -1)


@dataclass(slots=True)
class _Image:
    """The part of the state an aborted metadata transaction rolls back."""

    finalized_levels: dict[str, int] = field(default_factory=dict)
    kraft_version: int = 0
    brokers: dict[NodeId, BrokerRegistration] = field(default_factory=dict)
    # Derived from `brokers` (which broker registered each log directory), kept so a
    # registration checks its directories in O(its directories), not O(all brokers).
    directory_owners: dict = field(default_factory=dict, compare=False)
    topics: dict[uuid.UUID, _TopicEntry] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # name -> id
    # (resource type, resource name) -> {config name: value}
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)
    # Cache of the `topics()` view; None after any topic change.
    topics_view: Mapping[str, TopicImage] | None = None
    # The last ZkMigrationStateRecord's value (NONE when never written).
    zk_migration_state: ZkMigrationState = ZkMigrationState.NONE
    # (user, mechanism) -> credential (UserScramCredentialRecord).
    scram: dict[tuple[str, int], ScramCredential] = field(default_factory=dict)
    # ACL id -> entry (AccessControlEntryRecord). The authorizer indexes them itself.
    acls: dict[uuid.UUID, AclEntry] = field(default_factory=dict)
    # The offset of the last ACL record replayed (-1: none). In one committed history the
    # ACL set at a given stamp is always the same, so the authorizer rebuilds its index
    # only when this moves (an aborted transaction moves it back with the ACLs).
    acls_changed_offset: Offset = -1
    # Client quotas (ClientQuotaRecord): entity -> {quota key: value}. An entity is its
    # (entity type, name or None for the default) pairs sorted by type; one with no keys
    # left is dropped, as Kafka's image does.
    quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # The last ProducerIdsRecord: the first id of the next block AllocateProducerIds
    # hands out, and the broker (and its epoch) the last block went to.
    producer_ids: ProducerIds = NO_PRODUCER_IDS
    # Controller registrations (RegisterControllerRecord) by controller id.
    controllers: dict[NodeId, ControllerRegistration] = field(default_factory=dict)

    def copy(self) -> "_Image":
        return _Image(
            dict(self.finalized_levels), self.kraft_version, dict(self.brokers), dict(self.directory_owners),
            {topic_id: entry.copy() for topic_id, entry in self.topics.items()},
            dict(self.topic_ids),
            {resource: dict(values) for resource, values in self.configs.items()},
            self.topics_view,
            self.zk_migration_state,
            dict(self.scram),
            dict(self.acls),
            self.acls_changed_offset,
            {entity: dict(values) for entity, values in self.quotas.items()},
            self.producer_ids,
            dict(self.controllers),
        )


class ControllerState:
    """The replayed metadata image. Read it through the properties; change it only
    with `replay`."""

    __slots__ = ("cluster_id", "_image", "_last_applied_offset", "_transaction_start", "_transaction_base",
                 "_forwarded")

    def __init__(self, cluster_id: str) -> None:
        # The cluster id is not in the metadata log (Kafka keeps it in meta.properties),
        # so it is given, not replayed.
        self.cluster_id = cluster_id
        self._image = _Image()
        self._last_applied_offset = -1
        self._transaction_start: int | None = None
        self._transaction_base: _Image | None = None
        # Answers of forwarded writes (server/controller/idempotence.py). Outside `_image`:
        # not metadata, not in snapshots, and never written inside a transaction.
        self._forwarded = ForwardedAnswers()

    def copy(self) -> "ControllerState":
        """An independent, equal copy, an open metadata transaction included (its
        rollback base too): the controller loop's speculative state starts from it."""
        clone = ControllerState(self.cluster_id)
        clone._image = self._image.copy()
        clone._last_applied_offset = self._last_applied_offset
        clone._transaction_start = self._transaction_start
        clone._transaction_base = self._transaction_base.copy() if self._transaction_base is not None else None
        clone._forwarded = self._forwarded.copy()
        return clone

    # ---- reads -------------------------------------------------------------

    @property
    def metadata_version(self) -> int | None:
        """The finalized metadata.version level, None before bootstrap."""
        return self._image.finalized_levels.get(METADATA_VERSION)

    @property
    def finalized_levels(self) -> Mapping[str, int]:
        """Finalized features from FeatureLevelRecords (level-0 features are absent)."""
        return MappingProxyType(self._image.finalized_levels)

    @property
    def kraft_version(self) -> int:
        return self._image.kraft_version

    def finalized_level(self, feature: str) -> int:
        """The finalized level of `feature`, 0 when it is not finalized."""
        if feature == KRAFT_VERSION:
            return self._image.kraft_version
        return self._image.finalized_levels.get(feature, 0)

    def all_finalized_levels(self) -> dict[str, int]:
        """Finalized levels including kraft.version (when above 0), as the controller
        checks registrations and answers ApiVersions."""
        levels = dict(self._image.finalized_levels)
        if self._image.kraft_version > 0:
            levels[KRAFT_VERSION] = self._image.kraft_version
        return levels

    def forwarded_answer(self, key: bytes) -> Answer | None:
        """The remembered answer of a forwarded write (forward id + write index), if any."""
        return self._forwarded.get(key)

    @property
    def last_applied_offset(self) -> Offset:
        return self._last_applied_offset

    @property
    def finalized_features_epoch(self) -> Offset:
        """Kafka's FinalizedFeaturesEpoch: the offset of the last applied record."""
        return self._last_applied_offset

    @property
    def brokers(self) -> Mapping[NodeId, BrokerRegistration]:
        return MappingProxyType(self._image.brokers)

    def directory_owner(self, directory) -> NodeId | None:
        """The broker that registered log directory `directory`, if any."""
        return self._image.directory_owners.get(directory)

    def broker(self, broker_id: NodeId) -> BrokerRegistration | None:
        return self._image.brokers.get(broker_id)

    @property
    def controllers(self) -> Mapping[NodeId, ControllerRegistration]:
        """Every registered controller (KIP-919) by id."""
        return MappingProxyType(self._image.controllers)

    def controller_registration(self, controller_id: NodeId) -> ControllerRegistration | None:
        return self._image.controllers.get(controller_id)

    @property
    def zk_migration_state(self) -> ZkMigrationState:
        """The last ZkMigrationStateRecord's value; NONE when none was written."""
        return self._image.zk_migration_state

    def topics(self) -> Mapping[str, TopicImage]:
        """Every topic by name (a read-only snapshot; later replays do not change it)."""
        image = self._image
        if image.topics_view is None:
            image.topics_view = MappingProxyType(
                {name: image.topics[topic_id].image() for name, topic_id in image.topic_ids.items()}
            )
        return image.topics_view

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self._image.topic_ids.get(name)
        return None if topic_id is None else self._image.topics[topic_id].image()

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        entry = self._image.topics.get(topic_id)
        return None if entry is None else entry.image()

    def configs(self, resource_type: int, resource_name: str) -> Mapping[str, str]:
        """The configs set on one resource (ConfigRecord.ResourceType, name); empty if none.
        The cluster-wide broker default resource is (RESOURCE_BROKER, "")."""
        values = self._image.configs.get((resource_type, resource_name))
        return _EMPTY_MAPPING if values is None else MappingProxyType(dict(values))

    def config_resources(self) -> tuple[tuple[int, str], ...]:
        """Every (resource type, resource name) with at least one config, sorted."""
        return tuple(sorted(self._image.configs))

    def scram_credential(self, user: str, mechanism: int) -> ScramCredential | None:
        return self._image.scram.get((user, int(mechanism)))

    def scram_credentials(self) -> Mapping[tuple[str, int], ScramCredential]:
        """Every SCRAM credential by (user, mechanism)."""
        return MappingProxyType(self._image.scram)

    def acls(self) -> Mapping[uuid.UUID, AclEntry]:
        """Every ACL by id."""
        return MappingProxyType(self._image.acls)

    def client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        """Every client quota entity with its {quota key: value}, in replay order."""
        return MappingProxyType({entity: MappingProxyType(dict(values))
                                 for entity, values in self._image.quotas.items()})

    @property
    def producer_ids(self) -> ProducerIds:
        """Where the producer-id blocks stand (NO_PRODUCER_IDS before the first block)."""
        return self._image.producer_ids

    @property
    def acls_changed_offset(self) -> Offset:
        """The offset of the last ACL record applied (-1: none): a cheap change stamp."""
        return self._image.acls_changed_offset

    @property
    def in_transaction(self) -> bool:
        return self._transaction_start is not None

    @property
    def transaction_start_offset(self) -> Offset | None:
        return self._transaction_start

    def snapshot(self) -> dict[str, Any]:
        """A plain value of the whole image, for equality checks and debugging."""
        return {
            "cluster_id": self.cluster_id,
            "finalized_levels": dict(self._image.finalized_levels),
            "kraft_version": self._image.kraft_version,
            "brokers": dict(self._image.brokers),
            "topics": {entry.topic_id: entry.image() for entry in self._image.topics.values()},
            "configs": {resource: dict(values) for resource, values in self._image.configs.items()},
            "zk_migration_state": self._image.zk_migration_state,
            "scram": dict(self._image.scram),
            "acls": dict(self._image.acls),
            "quotas": {entity: dict(values) for entity, values in self._image.quotas.items()},
            "producer_ids": self._image.producer_ids,
            "controllers": dict(self._image.controllers),
            "last_applied_offset": self._last_applied_offset,
            "transaction_start": self._transaction_start,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ControllerState):
            return NotImplemented
        return self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"ControllerState({self.snapshot()!r})"

    # ---- the one mutation path ---------------------------------------------

    def replay(self, record: MetadataRecord, offset: Offset) -> None:
        """Apply one committed record at `offset`. Offsets must increase."""
        if offset <= self._last_applied_offset:
            raise ReplayError(f"offset {offset} is not after the last applied offset {self._last_applied_offset}")
        handler = _HANDLERS.get(record.message.api_key)
        if handler is None:
            # Records we do not model (delegation tokens, ...) still
            # advance the offset: the image is "as of" that offset even if it ignores them.
            self._last_applied_offset = offset
            return
        handler(self, record.data, offset)
        self._last_applied_offset = offset

    def replay_kraft_version(self, level: int, offset: Offset) -> None:
        """Apply the raft layer's KRaftVersion control record. kraft.version is not a
        FeatureLevelRecord (KAFKA-18979), but the controller checks registrations
        against it and reports it in ApiVersions."""
        if level < 0:
            raise ReplayError(f"kraft.version {level} is negative")
        if offset <= self._last_applied_offset:
            raise ReplayError(f"offset {offset} is not after the last applied offset {self._last_applied_offset}")
        self._image.kraft_version = level
        self._last_applied_offset = offset

    # ---- per-record handlers (validate first, then mutate) -----------------

    def _replay_feature_level(self, data: Any, offset: int) -> None:
        name = _get(data, "name")
        level = _get(data, "feature_level")
        if level < 0:
            raise ReplayError(f"FeatureLevelRecord {name}={level}: negative level")
        if name == KRAFT_VERSION:
            # KAFKA-18979: kraft.version lives in the raft log, never here.
            return
        if name == METADATA_VERSION and level == 0:
            raise ReplayError("FeatureLevelRecord cannot remove metadata.version")
        previous = self._image.finalized_levels.get(name)
        if level == 0:
            self._image.finalized_levels.pop(name, None)
        else:
            self._image.finalized_levels[name] = level
        if name == METADATA_VERSION and previous is not None and level < previous:
            self._project_image(previous, level)

    def _project_image(self, from_level: int, to_level: int) -> None:
        """KIP-778: below `from_level` the records of the image are written at `to_level`;
        what that level cannot hold is dropped (an UNSAFE downgrade: the controller refuses
        a lossy SAFE one). Every copy does this at the same offset, so all stay equal."""
        brokers = self._image.brokers
        for broker_id, registration in list(brokers.items()):
            projected = project_registration(registration, from_level, to_level)
            if projected is not registration:
                if not projected.log_dirs and registration.log_dirs:
                    self._forget_directories(registration)
                brokers[broker_id] = projected
        if controller_registration_supported(from_level) and not controller_registration_supported(to_level):
            # RegisterControllerRecord came with 3.7-IV0: below it no controller is registered.
            self._image.controllers = {}
        if from_level >= IBP_3_4_IV0 > to_level:
            # ZkMigrationStateRecord came with 3.4-IV0: below it there is no migration state.
            self._image.zk_migration_state = ZkMigrationState.NONE
        if from_level >= SCRAM_IN_METADATA_LEVEL > to_level and self._image.scram:
            # UserScramCredentialRecord came with 3.5-IV2: below it the log keeps no SCRAM user
            # (server/controller/downgrade.py lists it, so the dry run says so first).
            self._image.scram = {}
        if directory_assignment_supported(from_level) and not directory_assignment_supported(to_level):
            # PartitionRecord.Directories came with 3.7-IV2, like RegisterBrokerRecord.LogDirs.
            for entry in self._image.topics.values():
                if any(p.directories for p in entry.partitions.values()):
                    entry.partitions = {index: replace(p, directories=()) if p.directories else p
                                        for index, p in entry.partitions.items()}
                    entry.view = None
                    self._image.topics_view = None

    def _replay_register_broker(self, data: Any, offset: int) -> None:
        previous = self._image.brokers.get(data.get("broker_id"))
        registration = SHARED_REGISTRATIONS.get(data, offset)
        if registration is None:
            registration = _mapping_registration(data, offset, previous)
            SHARED_REGISTRATIONS.put(registration)
        if previous is not None:
            self._forget_directories(previous)
        self._image.brokers[registration.broker_id] = registration
        for directory in registration.log_dirs:
            self._image.directory_owners[directory] = registration.broker_id

    def _replay_register_controller(self, data: Any, offset: int) -> None:
        # Kafka keeps the latest registration per id: a controller that restarts (a new
        # incarnation) or re-registers replaces its old one.
        features, endpoints = _features_and_endpoints(data)
        registration = ControllerRegistration(
            controller_id=_get(data, "controller_id"),
            incarnation_id=_get(data, "incarnation_id"),
            zk_migration_ready=bool(_get(data, "zk_migration_ready", False)),
            endpoints=endpoints,
            supported_features=MappingProxyType(features),
        )
        self._image.controllers[registration.controller_id] = registration

    def _forget_directories(self, registration: BrokerRegistration) -> None:
        owners = self._image.directory_owners
        for directory in registration.log_dirs:
            if owners.get(directory) == registration.broker_id:
                del owners[directory]

    def _registration_for(self, what: str, broker_id: int, epoch: int) -> BrokerRegistration:
        registration = self._image.brokers.get(broker_id)
        if registration is None:
            raise ReplayError(f"{what}: no registration for broker {broker_id}")
        if registration.epoch != epoch:
            raise ReplayError(f"{what}: broker {broker_id} has epoch {registration.epoch}, record has {epoch}")
        return registration

    def _replay_unregister_broker(self, data: Any, offset: int) -> None:
        broker_id = _get(data, "broker_id")
        registration = self._registration_for("UnregisterBrokerRecord", broker_id, _get(data, "broker_epoch"))
        self._forget_directories(registration)
        del self._image.brokers[broker_id]

    def _replay_fence(self, data: Any, offset: int) -> None:
        registration = self._registration_for("FenceBrokerRecord", _get(data, "id"), _get(data, "epoch"))
        self._image.brokers[registration.broker_id] = _fencing_changed(registration, offset, True)

    def _replay_unfence(self, data: Any, offset: int) -> None:
        registration = self._registration_for("UnfenceBrokerRecord", _get(data, "id"), _get(data, "epoch"))
        self._image.brokers[registration.broker_id] = _fencing_changed(registration, offset, False)

    def _replay_registration_change(self, data: Any, offset: int) -> None:
        registration = self._registration_for(
            "BrokerRegistrationChangeRecord", _get(data, "broker_id"), _get(data, "broker_epoch")
        )
        fencing = _get(data, "fenced", FENCING_CHANGE_NONE)
        shutdown = _get(data, "in_controlled_shutdown", SHUTDOWN_CHANGE_NONE)
        if fencing not in (FENCING_CHANGE_FENCE, FENCING_CHANGE_NONE, FENCING_CHANGE_UNFENCE):
            raise ReplayError(f"BrokerRegistrationChangeRecord: unknown fenced value {fencing}")
        if shutdown not in (SHUTDOWN_CHANGE_NONE, SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN):
            raise ReplayError(f"BrokerRegistrationChangeRecord: unknown inControlledShutdown value {shutdown}")
        log_dirs = _get(data, "log_dirs", [])
        cordoned = _get(data, "cordoned_log_dirs")

        def changed() -> BrokerRegistration:
            result = registration
            # Like Kafka's BrokerRegistration.cloneWith, fencing leaves the
            # in-controlled-shutdown flag alone; heartbeats treat fenced as taking precedence.
            if fencing == FENCING_CHANGE_FENCE:
                result = replace(result, fenced=True)
            elif fencing == FENCING_CHANGE_UNFENCE:
                result = replace(result, fenced=False)
            if shutdown == SHUTDOWN_CHANGE_IN_CONTROLLED_SHUTDOWN:
                result = replace(result, in_controlled_shutdown=True)
            if log_dirs:
                result = replace(result, log_dirs=tuple(log_dirs))
            if cordoned is not None:  # null: no change
                result = replace(result, cordoned_log_dirs=tuple(cordoned))
            return result

        # A fencing / shutdown change alone (the usual one: unfence, fence, controlled
        # shutdown) of a shared registration gives every image the same result.
        if not log_dirs and cordoned is None:
            self._image.brokers[registration.broker_id] = SHARED_REGISTRATIONS.derive(
                offset, registration, (fencing, shutdown), changed)
        else:
            self._image.brokers[registration.broker_id] = changed()

    def _replay_no_op(self, data: Any, offset: int) -> None:
        # Nothing for the metadata; one of ours may remember a forwarded write's answer.
        self._forwarded.replay(data)

    def _replay_topic(self, data: Any, offset: int) -> None:
        name = _get(data, "name")
        topic_id = _get(data, "topic_id")
        if not name:
            raise ReplayError(f"TopicRecord at {offset}: empty topic name")
        if topic_id is None or topic_id.int == 0:
            raise ReplayError(f"TopicRecord {name} at {offset}: no topic id")
        known_id = self._image.topic_ids.get(name)
        if known_id is not None and known_id != topic_id:
            raise ReplayError(f"TopicRecord at {offset}: topic {name} already exists with id {known_id}")
        if known_id is None and topic_id in self._image.topics:
            raise ReplayError(f"TopicRecord {name} at {offset}: topic id {topic_id} is already "
                              f"used by {self._image.topics[topic_id].name}")
        # The same (name, id) again starts the topic afresh, as Kafka's replay does: the
        # PartitionRecords after it describe its partitions (a repeated migration copy).
        self._image.topics[topic_id] = _TopicEntry(name, topic_id, {})
        self._image.topic_ids[name] = topic_id
        self._image.topics_view = None

    def _replay_partition(self, data: Any, offset: int) -> None:
        # Records are mappings (built ones dicts, decoded ones Containers): read directly,
        # without `_get`'s per-field dispatch, since a large image is mostly PartitionRecords.
        # A missing or null field reads as `_get` with the default would.
        get = data.get
        topic_id = get("topic_id")
        entry = self._image.topics.get(topic_id)
        if entry is None:
            raise ReplayError(f"PartitionRecord at {offset}: no topic with id {topic_id}")
        index = get("partition_id")
        if index is None or index < 0:
            raise ReplayError(f"PartitionRecord at {offset} for {entry.name}: bad partition id {index}")
        replicas, isr, removing, adding, directories = (get("replicas"), get("isr"), get("removing_replicas"),
                                                        get("adding_replicas"), get("directories"))
        leader, leader_epoch, partition_epoch, recovery = (get("leader"), get("leader_epoch"),
                                                           get("partition_epoch"), get("leader_recovery_state"))
        entry.partitions[index] = _new_partition(
            () if replicas is None else tuple(replicas),
            () if isr is None else tuple(isr),
            -1 if leader is None else leader,
            -1 if leader_epoch is None else leader_epoch,
            -1 if partition_epoch is None else partition_epoch,
            () if removing is None else tuple(removing),
            () if adding is None else tuple(adding),
            0 if recovery is None else recovery,
            () if directories is None else tuple(directories),
        )
        entry.view = None
        self._image.topics_view = None

    def _replay_partition_change(self, data: Any, offset: int) -> None:
        topic_id = _get(data, "topic_id")
        entry = self._image.topics.get(topic_id)
        if entry is None:
            raise ReplayError(f"PartitionChangeRecord at {offset}: no topic with id {topic_id}")
        index = _get(data, "partition_id")
        partition = entry.partitions.get(index)
        if partition is None:
            raise ReplayError(f"PartitionChangeRecord at {offset} for {entry.name}: no partition {index}")
        entry.partitions[index] = merge_partition_change(partition, data)
        entry.view = None
        self._image.topics_view = None

    def _replay_remove_topic(self, data: Any, offset: int) -> None:
        topic_id = _get(data, "topic_id")
        entry = self._image.topics.get(topic_id)
        if entry is None:
            raise ReplayError(f"RemoveTopicRecord at {offset}: no topic with id {topic_id}")
        del self._image.topics[topic_id]
        del self._image.topic_ids[entry.name]
        self._image.configs.pop((RESOURCE_TOPIC, entry.name), None)
        self._image.topics_view = None

    def _replay_config(self, data: Any, offset: int) -> None:
        resource = (_get(data, "resource_type"), _get(data, "resource_name"))
        name = _get(data, "name")
        if resource[1] is None or name is None:
            raise ReplayError(f"ConfigRecord at {offset}: resource name and config name are required")
        value = data.get("value") if hasattr(data, "get") else getattr(data, "value", None)
        configs = self._image.configs
        if value is None:
            values = configs.get(resource)
            if values is not None:
                values.pop(name, None)
                if not values:
                    del configs[resource]
        else:
            configs.setdefault(resource, {})[name] = value

    def _replay_zk_migration_state(self, data: Any, offset: int) -> None:
        value = _get(data, "zk_migration_state")
        try:
            state = ZkMigrationState(value)
        except ValueError:
            # Kafka's ZK (4) is never persisted, so it is as unknown here as any other value.
            raise ReplayError(f"ZkMigrationStateRecord at {offset}: unknown state {value}") from None
        self._image.zk_migration_state = state

    def _replay_begin_transaction(self, data: Any, offset: int) -> None:
        if self._transaction_start is not None:
            raise ReplayError(
                f"BeginTransactionRecord at {offset}: the transaction begun at {self._transaction_start} is still open"
            )
        # Records inside the transaction are applied as they come (our log appends
        # a group in one batch); keep the image as it was so an abort can restore it.
        self._transaction_start = offset
        self._transaction_base = self._image.copy()

    def _replay_user_scram_credential(self, data: Any, offset: int) -> None:
        mechanism = _get(data, "mechanism")
        if mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            raise ReplayError(f"UserScramCredentialRecord at {offset} names unknown mechanism {mechanism}")
        name = _get(data, "name")
        self._image.scram[(name, int(mechanism))] = ScramCredential(
            name, ScramMechanism(mechanism), bytes(_get(data, "salt")), bytes(_get(data, "stored_key")),
            bytes(_get(data, "server_key")), _get(data, "iterations"),
        )

    def _replay_remove_user_scram_credential(self, data: Any, offset: int) -> None:
        key = (_get(data, "name"), int(_get(data, "mechanism")))
        if key not in self._image.scram:
            raise ReplayError(f"RemoveUserScramCredentialRecord at {offset} for {key[0]!r}/{key[1]}: no such credential")
        del self._image.scram[key]

    def _replay_access_control_entry(self, data: Any, offset: int) -> None:
        acl_id = _get(data, "id")
        if acl_id in self._image.acls:
            raise ReplayError(f"AccessControlEntryRecord at {offset}: ACL {acl_id} exists")
        self._image.acls[acl_id] = AclEntry(
            acl_id, _get(data, "resource_type"), _get(data, "resource_name"), _get(data, "pattern_type"),
            _get(data, "principal"), _get(data, "host"), _get(data, "operation"), _get(data, "permission_type"),
        )
        self._image.acls_changed_offset = offset

    def _replay_remove_access_control_entry(self, data: Any, offset: int) -> None:
        acl_id = _get(data, "id")
        if acl_id not in self._image.acls:
            raise ReplayError(f"RemoveAccessControlEntryRecord at {offset}: no ACL {acl_id}")
        del self._image.acls[acl_id]
        self._image.acls_changed_offset = offset

    def _replay_client_quota(self, data: Any, offset: int) -> None:
        entity = quota_entity((_get(e, "entity_type"), _get(e, "entity_name")) for e in _get(data, "entity", ()))
        key = _get(data, "key")
        if _get(data, "remove"):
            values = self._image.quotas.get(entity)
            if values is not None:
                values.pop(key, None)
                if not values:
                    del self._image.quotas[entity]
            return
        self._image.quotas.setdefault(entity, {})[key] = float(_get(data, "value"))

    def _replay_producer_ids(self, data: Any, offset: int) -> None:
        # Blocks only move forward: a record that would hand out ids again is corruption.
        next_id = _get(data, "next_producer_id")
        current = self._image.producer_ids.next_producer_id
        if next_id <= current:
            raise ReplayError(f"ProducerIdsRecord at {offset}: next producer id {next_id} is not after {current}")
        self._image.producer_ids = ProducerIds(next_id, _get(data, "broker_id"), _get(data, "broker_epoch"))

    def _replay_end_transaction(self, data: Any, offset: int) -> None:
        if self._transaction_start is None:
            raise ReplayError(f"EndTransactionRecord at {offset} without an open transaction")
        self._transaction_start = None
        self._transaction_base = None

    def _replay_abort_transaction(self, data: Any, offset: int) -> None:
        if self._transaction_start is None or self._transaction_base is None:
            raise ReplayError(f"AbortTransactionRecord at {offset} without an open transaction")
        self._image = self._transaction_base
        self._transaction_start = None
        self._transaction_base = None


_HANDLERS = {
    mr.FEATURE_LEVEL_RECORD.api_key: ControllerState._replay_feature_level,
    mr.REGISTER_BROKER_RECORD.api_key: ControllerState._replay_register_broker,
    mr.UNREGISTER_BROKER_RECORD.api_key: ControllerState._replay_unregister_broker,
    mr.FENCE_BROKER_RECORD.api_key: ControllerState._replay_fence,
    mr.UNFENCE_BROKER_RECORD.api_key: ControllerState._replay_unfence,
    mr.BROKER_REGISTRATION_CHANGE_RECORD.api_key: ControllerState._replay_registration_change,
    mr.NO_OP_RECORD.api_key: ControllerState._replay_no_op,
    mr.TOPIC_RECORD.api_key: ControllerState._replay_topic,
    mr.PARTITION_RECORD.api_key: ControllerState._replay_partition,
    mr.PARTITION_CHANGE_RECORD.api_key: ControllerState._replay_partition_change,
    mr.REMOVE_TOPIC_RECORD.api_key: ControllerState._replay_remove_topic,
    mr.CONFIG_RECORD.api_key: ControllerState._replay_config,
    mr.ZK_MIGRATION_STATE_RECORD.api_key: ControllerState._replay_zk_migration_state,
    mr.BEGIN_TRANSACTION_RECORD.api_key: ControllerState._replay_begin_transaction,
    mr.END_TRANSACTION_RECORD.api_key: ControllerState._replay_end_transaction,
    mr.ABORT_TRANSACTION_RECORD.api_key: ControllerState._replay_abort_transaction,
    mr.USER_SCRAM_CREDENTIAL_RECORD.api_key: ControllerState._replay_user_scram_credential,
    mr.REMOVE_USER_SCRAM_CREDENTIAL_RECORD.api_key: ControllerState._replay_remove_user_scram_credential,
    mr.ACCESS_CONTROL_ENTRY_RECORD.api_key: ControllerState._replay_access_control_entry,
    mr.REMOVE_ACCESS_CONTROL_ENTRY_RECORD.api_key: ControllerState._replay_remove_access_control_entry,
    mr.CLIENT_QUOTA_RECORD.api_key: ControllerState._replay_client_quota,
    mr.PRODUCER_IDS_RECORD.api_key: ControllerState._replay_producer_ids,
    mr.REGISTER_CONTROLLER_RECORD.api_key: ControllerState._replay_register_controller,
}


class BrokerHeartbeatTracker:
    """Last heartbeat time per (broker id, broker epoch), in milliseconds.

    Volatile by design: it is not in the log, so a new active controller starts
    empty and must call `activate` to give every unfenced broker a fresh session
    (otherwise a broker that died during the failover would never be fenced).
    Keyed by epoch as well as id so a heartbeat from an old incarnation never keeps
    a new one alive.
    """

    __slots__ = ("session_timeout_ms", "_contact_ms", "_metadata_offset", "_shutdown_offset")

    def __init__(self, session_timeout_ms: int) -> None:
        if session_timeout_ms <= 0:
            raise ValueError("session_timeout_ms must be positive")
        self.session_timeout_ms = session_timeout_ms
        # broker id -> (broker epoch, last contact in ms)
        self._contact_ms: dict[NodeId, tuple[BrokerEpoch, int]] = {}
        # broker id -> (broker epoch, the metadata offset its last heartbeat reported)
        self._metadata_offset: dict[NodeId, tuple[BrokerEpoch, int]] = {}
        # broker id -> (broker epoch, the offset of the last record that took it into
        # controlled shutdown): it is let go once every active broker has replayed it.
        self._shutdown_offset: dict[NodeId, tuple[BrokerEpoch, int]] = {}

    def activate(self, state: ControllerState, now_ms: int) -> None:
        """Forget everything and start a session now for every unfenced broker."""
        self._contact_ms.clear()
        self._metadata_offset.clear()
        self._shutdown_offset.clear()
        for registration in state.brokers.values():
            if not registration.fenced:
                self._contact_ms[registration.broker_id] = (registration.epoch, now_ms)

    def update_contact(self, broker_id: NodeId, broker_epoch: BrokerEpoch, now_ms: int) -> None:
        previous = self._contact_ms.get(broker_id)
        if previous is not None and previous[0] == broker_epoch and previous[1] > now_ms:
            return  # never move a session backwards in time
        self._contact_ms[broker_id] = (broker_epoch, now_ms)

    def remove(self, broker_id: NodeId) -> None:
        self._contact_ms.pop(broker_id, None)
        self._metadata_offset.pop(broker_id, None)
        self._shutdown_offset.pop(broker_id, None)

    def update_metadata_offset(self, broker_id: NodeId, broker_epoch: BrokerEpoch, offset: int) -> None:
        self._metadata_offset[broker_id] = (broker_epoch, offset)

    def metadata_offset(self, broker_id: NodeId, broker_epoch: BrokerEpoch) -> int:
        """What the broker's last heartbeat of this epoch reported replayed (-1: none yet)."""
        entry = self._metadata_offset.get(broker_id)
        return entry[1] if entry is not None and entry[0] == broker_epoch else -1

    def note_controlled_shutdown(self, broker_id: NodeId, broker_epoch: BrokerEpoch, offset: int) -> None:
        """The first offset noted for this epoch stays (Kafka's maybeUpdateControlledShutdownOffset)."""
        entry = self._shutdown_offset.get(broker_id)
        if entry is None or entry[0] != broker_epoch:
            self._shutdown_offset[broker_id] = (broker_epoch, offset)

    def controlled_shutdown_offset(self, broker_id: NodeId, broker_epoch: BrokerEpoch) -> int | None:
        entry = self._shutdown_offset.get(broker_id)
        return entry[1] if entry is not None and entry[0] == broker_epoch else None

    def contact_ms(self, broker_id: NodeId, broker_epoch: BrokerEpoch) -> int | None:
        entry = self._contact_ms.get(broker_id)
        if entry is None or entry[0] != broker_epoch:
            return None
        return entry[1]

    def is_expired(self, broker_id: NodeId, broker_epoch: BrokerEpoch, now_ms: int) -> bool:
        """True when the broker has a session for this epoch and it ran out. A broker
        never heard from has no session to expire (Kafka's tracker behaves the same)."""
        contact = self.contact_ms(broker_id, broker_epoch)
        return contact is not None and now_ms - contact > self.session_timeout_ms

    def has_valid_session(self, broker_id: NodeId, broker_epoch: BrokerEpoch, now_ms: int) -> bool:
        contact = self.contact_ms(broker_id, broker_epoch)
        return contact is not None and now_ms - contact <= self.session_timeout_ms
