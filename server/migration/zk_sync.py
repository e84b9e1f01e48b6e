"""What ZooKeeper must hold for a KRaft image, and the writes that make it so (pure).

Owns: the mapping from the controller's image (topics, partitions, configs, client
quotas, SCRAM credentials, finalized features) to Kafka's ZooKeeper layout (server/zk/paths.py), and `plan_writes`, the
difference between what ZooKeeper holds and what it should hold, as an ordered list of
`ZkWrite`s for one ZooKeeper multi.

Why a difference and not a replay of records: the same function serves the full
reconciliation a new leader runs (scope: everything) and the write-behind of each
committed batch (scope: the topics and configs the batch touched). Writing only what
differs makes both idempotent, so a batch written twice (a failover between the
ZooKeeper multi and the leader learning it succeeded) changes nothing the second time,
and a config-change notification is only created when a config really changed.

Rules kept here:
- Brokers are not written: ZooKeeper-mode brokers own their ephemeral
  `/brokers/ids/<id>`, and KRaft brokers never appear there (KIP-866 keeps them apart
  by id; the controller refuses a KRaft registration whose id a live ZooKeeper broker
  holds).
- A partition state is equal when leader, leader epoch and ISR are; its controller
  epoch is the ZooKeeper controller epoch of the writer and does not make it differ.
- A client quota entity's znode holds its quotas and, for a user, its SCRAM
  credentials; quotas compare as numbers, so "1024" and "1024.0" are equal and a
  znode is only written when a value really differs. An entity whose last quota goes
  keeps an empty znode (as Kafka's dual write leaves it), created parents included.
  When the image cannot hold SCRAM credentials (metadata.version below 3.5-IV2), the
  ones ZooKeeper holds are kept as they are.
- Creates come parents first; deletes children first; every write of one scope goes
  into one multi, with the `/migration` check and update added by the caller.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Mapping

from server.controller.state import SCRAM_IN_METADATA_LEVEL
from server.security.model import ScramMechanism
from server.zk import paths as zp

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
# KRaft names the cluster-wide default broker config ""; ZooKeeper names it "<default>".
ZK_DEFAULT_BROKER = "<default>"


@dataclass(frozen=True, slots=True)
class ZkWrite:
    """One operation of a ZooKeeper multi: create, set or delete `path`."""

    kind: str  # "create" | "set" | "delete"
    path: str
    data: bytes = b""
    # create only: a sequential znode (ZooKeeper appends a counter to the name).
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class DesiredTopic:
    """One topic as ZooKeeper should hold it."""

    name: str
    assignment: zp.TopicZnode
    states: Mapping[int, zp.PartitionStateZnode]
    config: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Scope:
    """Which part of ZooKeeper a plan covers. `everything` for a full reconciliation."""

    everything: bool = False
    topics: frozenset[str] = frozenset()
    broker_configs: frozenset[str] = frozenset()  # ZooKeeper names ("<default>" or the id)
    features: bool = False
    quota_entities: frozenset[str] = frozenset()  # entity paths (zp.quota_entity_path)

    @staticmethod
    def all() -> "Scope":
        return Scope(everything=True, features=True)


def zk_broker_config_name(kraft_name: str) -> str:
    return ZK_DEFAULT_BROKER if kraft_name == "" else kraft_name


def kraft_broker_config_name(zk_name: str) -> str:
    return "" if zk_name == ZK_DEFAULT_BROKER else zk_name


# --------------------------------------------------------------------------
# KRaft image -> what ZooKeeper should hold
# --------------------------------------------------------------------------

def _desired_topic(topic, config: Mapping[str, str], controller_epoch: int) -> DesiredTopic:
    assignment = zp.TopicZnode(
        topic_id=zp.kafka_uuid_string(topic.topic_id),
        partitions={index: tuple(p.replicas) for index, p in topic.partitions.items()},
    )
    states = {
        index: zp.PartitionStateZnode(leader=p.leader, leader_epoch=p.leader_epoch, isr=tuple(p.isr),
                                      controller_epoch=controller_epoch)
        for index, p in topic.partitions.items()
    }
    return DesiredTopic(topic.name, assignment, states, dict(config))


def desired_topics(state, controller_epoch: int, names: Iterable[str] | None = None) -> dict[str, DesiredTopic]:
    """Topics of the image in ZooKeeper's layout: every one, or only `names` (those the
    image still has). The write-behind passes a batch's names: its cost must follow the
    batch, not the size of the whole image."""
    if names is None:
        return {name: _desired_topic(topic, state.configs(TOPIC_RESOURCE, name), controller_epoch)
                for name, topic in state.topics().items()}
    out: dict[str, DesiredTopic] = {}
    for name in names:
        topic = state.topic(name)
        if topic is not None:
            out[name] = _desired_topic(topic, state.configs(TOPIC_RESOURCE, name), controller_epoch)
    return out


def desired_broker_configs(state, names: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """ZooKeeper name -> config map, for every broker-config resource of the image (or
    only the ZooKeeper names `names`)."""
    out: dict[str, dict[str, str]] = {}
    if names is None:
        kraft_names = [name for resource_type, name in state.config_resources() if resource_type == BROKER_RESOURCE]
    else:
        kraft_names = [kraft_broker_config_name(name) for name in names]
    for name in kraft_names:
        config = dict(state.configs(BROKER_RESOURCE, name))
        if config:
            out[zk_broker_config_name(name)] = config
    return out


def image_holds_scram(state) -> bool:
    """Whether the image carries SCRAM credentials (else ZooKeeper's are kept)."""
    return state.metadata_version >= SCRAM_IN_METADATA_LEVEL


def _desired_quota_config(quotas: Mapping[str, float], scram: Mapping[str, str]) -> dict[str, str]:
    config = {key: zp.quota_value_text(quotas[key]) for key in sorted(quotas)}
    config.update(sorted(scram.items()))
    return config


def _scram_text(credential) -> str:
    return zp.ScramCredentialText(credential.salt, credential.stored_key, credential.server_key,
                                  credential.iterations).encode()


def desired_client_quotas(state, entity_paths: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """Entity path -> the config its znode should hold (quotas, and a user's SCRAM
    credentials when the image holds them), for every entity of the image or only
    `entity_paths`; entities with nothing to hold are left out."""
    quotas = state.client_quotas()
    scram: dict[str, dict[str, str]] = {}
    if image_holds_scram(state):
        for (user, mechanism), credential in state.scram_credentials().items():
            path = zp.quota_entity_path(((zp.QUOTA_USER, user),))
            scram.setdefault(path, {})[ScramMechanism(mechanism).mechanism_name] = _scram_text(credential)
    if entity_paths is None:
        by_path = {}
        for entity in quotas:
            try:
                by_path[zp.quota_entity_path(entity)] = entity
            except ValueError:
                continue  # a combination ZooKeeper has no znode for (the controller refuses them)
        paths = set(by_path) | set(scram)
    else:
        by_path = {}
        for path in entity_paths:
            by_path[path] = zp.parse_quota_entity_path(path)
        paths = set(by_path)
    out: dict[str, dict[str, str]] = {}
    for path in paths:
        entity = by_path.get(path)
        values = quotas.get(entity, {}) if entity is not None else {}
        config = _desired_quota_config(values, scram.get(path, {}))
        if config:
            out[path] = config
    return out


def desired_features(state) -> zp.FeaturesZnode:
    levels = state.all_finalized_levels()
    return zp.FeaturesZnode(
        status=zp.FeatureZnodeStatus.ENABLED,
        features={name: zp.FinalizedFeature(max_version_level=level) for name, level in sorted(levels.items())},
    )


# --------------------------------------------------------------------------
# the difference
# --------------------------------------------------------------------------

def _same_state(a: zp.PartitionStateZnode, b: zp.PartitionStateZnode) -> bool:
    return a.leader == b.leader and a.leader_epoch == b.leader_epoch and tuple(a.isr) == tuple(b.isr)


def _same_assignment(a: zp.TopicZnode, b: zp.TopicZnode) -> bool:
    return (a.topic_id == b.topic_id and dict(a.partitions) == dict(b.partitions)
            and dict(a.adding_replicas) == dict(b.adding_replicas)
            and dict(a.removing_replicas) == dict(b.removing_replicas))


def _config_change_notification(entity_path: str) -> ZkWrite:
    # What a ZooKeeper-mode broker watches to reload dynamic configs (Kafka's
    # /config/changes/config_change_<seq>, {"version":2,"entity_path":"topics/t"}).
    data = b'{"version":2,"entity_path":"' + entity_path.encode() + b'"}'
    return ZkWrite("create", "/config/changes/config_change_", data, sequential=True)


def _same_quota_config(have: zp.ConfigZnode, want: Mapping[str, str]) -> bool:
    try:
        have_values = zp.quota_values(have)
    except zp.ZnodeDecodeError:
        return False  # not numbers: rewrite it with the image's values
    want_znode = zp.ConfigZnode(dict(want))
    return have_values == zp.quota_values(want_znode) and zp.scram_entries(have) == zp.scram_entries(want_znode)


def _wanted_quota_config(entity_path: str, desired: Mapping[str, Mapping[str, str]],
                         have: zp.ConfigZnode | None, keep_zk_scram: bool) -> dict[str, str]:
    want = dict(desired.get(entity_path, {}))
    if keep_zk_scram:
        want = {key: value for key, value in want.items() if key not in zp.SCRAM_MECHANISM_NAMES}
        if have is not None:
            want.update(zp.scram_entries(have))
    return want


def _quota_writes(names: Iterable[str], desired: Mapping[str, Mapping[str, str]],
                  actual: Mapping[str, zp.ConfigZnode], actual_parents: frozenset[str],
                  keep_zk_scram: bool) -> list[ZkWrite]:
    writes: list[ZkWrite] = []
    created: set[str] = set()
    for entity_path in sorted(names):
        have = actual.get(entity_path)
        want = _wanted_quota_config(entity_path, desired, have, keep_zk_scram)
        path = zp.quota_config_path(entity_path)
        if have is None:
            if not want:
                continue
            parts = entity_path.split("/")
            if len(parts) == 4:  # users/<u>/clients/<c>: its parents may not exist yet
                user_entity = f"{zp.CONFIG_USERS}/{parts[1]}"
                if user_entity not in actual and user_entity not in created:
                    writes.append(ZkWrite("create", zp.quota_config_path(user_entity), zp.ConfigZnode({}).encode()))
                    created.add(user_entity)
                if parts[1] not in actual_parents and zp.user_clients_path(parts[1]) not in created:
                    writes.append(ZkWrite("create", zp.user_clients_path(parts[1])))
                    created.add(zp.user_clients_path(parts[1]))
            writes.append(ZkWrite("create", path, zp.ConfigZnode(want).encode()))
            created.add(entity_path)
        elif _same_quota_config(have, want):
            continue
        else:
            writes.append(ZkWrite("set", path, zp.ConfigZnode(want).encode()))
        writes.append(_config_change_notification(entity_path))
    return writes


def quota_entities_written(names: Iterable[str], desired: Mapping[str, Mapping[str, str]],
                           actual: Mapping[str, zp.ConfigZnode], keep_zk_scram: bool) -> dict[str, zp.ConfigZnode]:
    """What ZooKeeper holds for `names` (and the parents `_quota_writes` creates) once
    the writes planned for them succeeded: the mirror's update."""
    out: dict[str, zp.ConfigZnode] = {}
    for entity_path in sorted(names):  # the order of `_quota_writes`: a user before its clients
        have = actual.get(entity_path)
        want = _wanted_quota_config(entity_path, desired, have, keep_zk_scram)
        if have is None and not want:
            continue
        out[entity_path] = zp.ConfigZnode(want) if have is None or not _same_quota_config(have, want) else have
        parts = entity_path.split("/")
        if have is None and len(parts) == 4:
            user_entity = f"{zp.CONFIG_USERS}/{parts[1]}"
            if user_entity not in actual and user_entity not in out:
                out[user_entity] = zp.ConfigZnode({})
    return out


def _delete_topic(name: str, actual: zp.ZkTopicImage | None, config_exists: bool) -> list[ZkWrite]:
    writes: list[ZkWrite] = []
    if actual is not None:
        for index in sorted(actual.assignment.partitions):
            if index in actual.partition_states:
                writes.append(ZkWrite("delete", zp.partition_state_path(name, index)))
            writes.append(ZkWrite("delete", zp.partition_path(name, index)))
        writes.append(ZkWrite("delete", zp.topic_partitions_path(name)))
        writes.append(ZkWrite("delete", zp.topic_path(name)))
    if config_exists:
        writes.append(ZkWrite("delete", zp.config_path(zp.CONFIG_TOPICS, name)))
    return writes


def _write_topic(want: DesiredTopic, actual: zp.ZkTopicImage | None,
                 actual_config: zp.ConfigZnode | None) -> list[ZkWrite]:
    name = want.name
    writes: list[ZkWrite] = []
    if actual is None:
        writes.append(ZkWrite("create", zp.topic_path(name), want.assignment.encode()))
        writes.append(ZkWrite("create", zp.topic_partitions_path(name)))
        for index in sorted(want.states):
            writes.append(ZkWrite("create", zp.partition_path(name, index)))
            writes.append(ZkWrite("create", zp.partition_state_path(name, index), want.states[index].encode()))
    else:
        if actual.assignment.topic_id != want.assignment.topic_id:
            # Same name, another topic (deleted and re-created): replace it whole.
            return (_delete_topic(name, actual, False)
                    + _write_topic(want, None, actual_config))
        if not _same_assignment(actual.assignment, want.assignment):
            writes.append(ZkWrite("set", zp.topic_path(name), want.assignment.encode()))
        have = set(actual.assignment.partitions)
        for index in sorted(want.states):
            state = want.states[index]
            current = actual.partition_states.get(index)
            if index not in have:
                writes.append(ZkWrite("create", zp.partition_path(name, index)))
                writes.append(ZkWrite("create", zp.partition_state_path(name, index), state.encode()))
            elif current is None:
                writes.append(ZkWrite("create", zp.partition_state_path(name, index), state.encode()))
            elif not _same_state(current, state):
                writes.append(ZkWrite("set", zp.partition_state_path(name, index), state.encode()))
        for index in sorted(have - set(want.states)):
            if index in actual.partition_states:
                writes.append(ZkWrite("delete", zp.partition_state_path(name, index)))
            writes.append(ZkWrite("delete", zp.partition_path(name, index)))
    config_path = zp.config_path(zp.CONFIG_TOPICS, name)
    if actual_config is None:
        # Kafka creates the topic's config znode with the topic, even when empty.
        writes.append(ZkWrite("create", config_path, zp.ConfigZnode(dict(want.config)).encode()))
        if want.config:
            writes.append(_config_change_notification(f"topics/{name}"))
    elif dict(actual_config.config) != dict(want.config):
        writes.append(ZkWrite("set", config_path, zp.ConfigZnode(dict(want.config)).encode()))
        writes.append(_config_change_notification(f"topics/{name}"))
    return writes


def plan_writes(
    scope: Scope,
    *,
    desired_topics: Mapping[str, DesiredTopic],
    desired_broker_configs: Mapping[str, Mapping[str, str]],
    desired_features: zp.FeaturesZnode | None,
    actual_topics: Mapping[str, zp.ZkTopicImage],
    actual_topic_configs: Mapping[str, zp.ConfigZnode],
    actual_broker_configs: Mapping[str, zp.ConfigZnode],
    actual_features: zp.FeaturesZnode | None,
    desired_quotas: Mapping[str, Mapping[str, str]] | None = None,
    actual_quotas: Mapping[str, zp.ConfigZnode] | None = None,
    actual_user_client_parents: frozenset[str] = frozenset(),
    keep_zk_scram: bool = False,
) -> list[ZkWrite]:
    """The writes that make ZooKeeper hold the desired state within `scope`.

    `actual_*` must hold what ZooKeeper has for (at least) everything in scope: a
    missing key means "absent in ZooKeeper". `keep_zk_scram`: the image holds no SCRAM
    credentials, so the users' znodes keep the ones they have."""
    desired_quotas = desired_quotas or {}
    actual_quotas = actual_quotas or {}
    writes: list[ZkWrite] = []
    if scope.everything:
        topic_names: Iterable[str] = set(desired_topics) | set(actual_topics) | set(actual_topic_configs)
        broker_names: Iterable[str] = set(desired_broker_configs) | set(actual_broker_configs)
        quota_names: Iterable[str] = set(desired_quotas) | set(actual_quotas)
    else:
        topic_names, broker_names = scope.topics, scope.broker_configs
        quota_names = scope.quota_entities
    for name in sorted(topic_names):
        want = desired_topics.get(name)
        if want is None:
            writes += _delete_topic(name, actual_topics.get(name), name in actual_topic_configs)
        else:
            writes += _write_topic(want, actual_topics.get(name), actual_topic_configs.get(name))
    for name in sorted(broker_names):
        want_config = desired_broker_configs.get(name)
        have = actual_broker_configs.get(name)
        path = zp.config_path(zp.CONFIG_BROKERS, name)
        if want_config is None:
            if have is not None:
                writes.append(ZkWrite("delete", path))
                writes.append(_config_change_notification(f"brokers/{name}"))
        elif have is None:
            writes.append(ZkWrite("create", path, zp.ConfigZnode(dict(want_config)).encode()))
            writes.append(_config_change_notification(f"brokers/{name}"))
        elif dict(have.config) != dict(want_config):
            writes.append(ZkWrite("set", path, zp.ConfigZnode(dict(want_config)).encode()))
            writes.append(_config_change_notification(f"brokers/{name}"))
    writes += _quota_writes(quota_names, desired_quotas, actual_quotas, actual_user_client_parents, keep_zk_scram)
    if scope.features and desired_features is not None:
        if actual_features is None:
            writes.append(ZkWrite("create", zp.FEATURES_PATH, desired_features.encode()))
        elif (actual_features.finalized_levels() != desired_features.finalized_levels()
              or actual_features.status != desired_features.status):
            writes.append(ZkWrite("set", zp.FEATURES_PATH, desired_features.encode()))
    return writes


# --------------------------------------------------------------------------
# which parts of the image a batch of records touched
# --------------------------------------------------------------------------

def touched_scope(records: Iterable, topic_names: dict[uuid.UUID, str]) -> Scope:
    """The scope a batch of committed records changes. `topic_names` (topic id ->
    name) is updated from TopicRecords, so a RemoveTopicRecord later in the stream can
    still be named once the image has forgotten the topic."""
    topics: set[str] = set()
    broker_configs: set[str] = set()
    quota_entities: set[str] = set()
    features = False
    for record in records:
        name = record.name
        data = record.data
        if name == "TopicRecord":
            topic_names[data["topic_id"]] = data["name"]
            topics.add(data["name"])
        elif name in ("PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord"):
            topic = topic_names.get(data["topic_id"])
            if topic is not None:
                topics.add(topic)
        elif name == "ConfigRecord":
            if data["resource_type"] == TOPIC_RESOURCE:
                topics.add(data["resource_name"])
            elif data["resource_type"] == BROKER_RESOURCE:
                broker_configs.add(zk_broker_config_name(data["resource_name"]))
        elif name == "ClientQuotaRecord":
            entity = tuple(sorted((e["entity_type"], e["entity_name"]) for e in data["entity"]))
            try:
                quota_entities.add(zp.quota_entity_path(entity))
            except ValueError:
                pass  # a combination ZooKeeper has no znode for (the controller refuses them)
        elif name in ("UserScramCredentialRecord", "RemoveUserScramCredentialRecord"):
            quota_entities.add(zp.quota_entity_path(((zp.QUOTA_USER, data["name"]),)))
        elif name == "FeatureLevelRecord":
            features = True
    return Scope(topics=frozenset(topics), broker_configs=frozenset(broker_configs), features=features,
                 quota_entities=frozenset(quota_entities))
