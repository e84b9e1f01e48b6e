"""The ZooKeeper -> KRaft migration's states and its preconditions (KIP-866), pure.

Owns: the two encodings of "where the migration is" and the rule between them, and
the precondition check the active controller runs before it copies anything.

Two encodings, on purpose:
- `ZkMigrationState` is what the metadata log holds: Kafka's `ZkMigrationStateRecord`
  with Kafka's values (NONE 0, MIGRATION 1, PRE_MIGRATION 2, POST_MIGRATION 3; FACTS.md
  §13), so Kafka's own tools read kraftwerk's log correctly. It is defined in
  `server/values.py` because the controller's replay, below this package, checks it.
- `MigrationState` is KIP-866's table (ZooKeeper 1 … KRaft 6): the `MigrationState`
  metric and `kraftwerk migration status` report it. ZooKeeper and MigrationEligible
  belong to the ZooKeeper controller (before any KRaft quorum exists); MigrationFinished
  is not a record of its own: it is MIGRATION with every broker already in KRaft mode,
  which the controller derives from its image (docs/kip-differences.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable

from server.values import ZkMigrationState


class MigrationState(IntEnum):
    """KIP-866's state table."""

    ZOOKEEPER = 1
    MIGRATION_ELIGIBLE = 2
    MIGRATION_READY = 3
    MIGRATION_ACTIVE = 4
    MIGRATION_FINISHED = 5
    KRAFT = 6


# 3.4-IV0: the first metadata.version with the migration (KIP-866's "new metadata.version").
MIGRATION_MIN_METADATA_VERSION = 8
MIGRATION_MIN_METADATA_VERSION_NAME = "3.4-IV0"

# The log transitions a controller may write (anything else is a bug or an operator error).
_TRANSITIONS = {
    ZkMigrationState.NONE: {ZkMigrationState.PRE_MIGRATION},
    ZkMigrationState.PRE_MIGRATION: {ZkMigrationState.MIGRATION},
    ZkMigrationState.MIGRATION: {ZkMigrationState.POST_MIGRATION},
    ZkMigrationState.POST_MIGRATION: set(),
}


def may_transition(current: ZkMigrationState, target: ZkMigrationState) -> bool:
    return target in _TRANSITIONS[current]


def kip_state(recorded: ZkMigrationState, migration_enabled: bool, zk_brokers: int) -> MigrationState:
    """The KIP's state from what the log says, this controller's config and how many
    ZooKeeper-mode brokers the cluster still has (registered in the image or live in
    ZooKeeper)."""
    if recorded == ZkMigrationState.POST_MIGRATION:
        return MigrationState.KRAFT
    if recorded == ZkMigrationState.MIGRATION:
        return MigrationState.MIGRATION_FINISHED if zk_brokers == 0 else MigrationState.MIGRATION_ACTIVE
    if recorded == ZkMigrationState.PRE_MIGRATION:
        return MigrationState.MIGRATION_READY
    # NONE: a KRaft quorum started for a migration that has not recorded anything yet is
    # "ready" (the quorum exists); without the switch it is a plain KRaft cluster.
    return MigrationState.MIGRATION_READY if migration_enabled else MigrationState.KRAFT


@dataclass(frozen=True, slots=True)
class BrokerCheck:
    """What the controller learned about one live ZooKeeper-mode broker."""

    broker_id: int
    # None: MigrationCheck got no answer (unreachable, timed out, refused the API).
    cluster_id: str | None
    config_enabled: bool
    # The broker's highest supported metadata.version (its /brokers/ids features map),
    # None when it advertises no range (a release before KIP-584's map carried it).
    max_metadata_version: int | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PreconditionFailure:
    """One reason the migration cannot start; broker_id None for cluster-wide ones."""

    broker_id: int | None
    reason: str

    def __str__(self) -> str:
        return f"broker {self.broker_id}: {self.reason}" if self.broker_id is not None else self.reason


def check_preconditions(
    *,
    cluster_id: str,
    metadata_version: int | None,
    live_brokers: Iterable[BrokerCheck],
    assigned_broker_ids: Iterable[int],
) -> list[PreconditionFailure]:
    """KIP-866's three conditions, every failure listed (not just the first):
    1. metadata.version is at least the migration's on the quorum, and every ZooKeeper
       broker's software can run the quorum's level;
    2. every live ZooKeeper broker has kafka.metadata.migration.enable=true (and belongs
       to this cluster);
    3. no broker is offline: a broker that holds replicas but is not registered in
       ZooKeeper (the KIP's "offline replicas as a proxy")."""
    failures: list[PreconditionFailure] = []
    if metadata_version is None or metadata_version < MIGRATION_MIN_METADATA_VERSION:
        failures.append(PreconditionFailure(
            None, f"metadata.version is {metadata_version}, the migration needs at least "
                  f"{MIGRATION_MIN_METADATA_VERSION_NAME} (level {MIGRATION_MIN_METADATA_VERSION})"))
    live = sorted(live_brokers, key=lambda b: b.broker_id)
    if not live:
        failures.append(PreconditionFailure(None, "no ZooKeeper broker is registered in /brokers/ids"))
    for broker in live:
        if broker.cluster_id is None:
            failures.append(PreconditionFailure(
                broker.broker_id, f"did not answer MigrationCheck ({broker.error or 'no answer'})"))
            continue
        if broker.cluster_id != cluster_id:
            failures.append(PreconditionFailure(
                broker.broker_id, f"belongs to cluster {broker.cluster_id}, not {cluster_id}"))
        if not broker.config_enabled:
            failures.append(PreconditionFailure(broker.broker_id, "kafka.metadata.migration.enable is not true"))
        # Once migrating, ZooKeeper's /features holds the quorum's metadata.version; a broker
        # whose software cannot run it would stop (KIP-584's protection), so check now.
        needed = max(metadata_version or 0, MIGRATION_MIN_METADATA_VERSION)
        if broker.max_metadata_version is not None and broker.max_metadata_version < needed:
            failures.append(PreconditionFailure(
                broker.broker_id, f"its software supports metadata.version up to level "
                                  f"{broker.max_metadata_version}, the cluster needs level {needed}"))
    live_ids = {b.broker_id for b in live}
    for broker_id in sorted(set(assigned_broker_ids) - live_ids):
        failures.append(PreconditionFailure(broker_id, "is offline: it holds replicas but is not registered "
                                                       "in ZooKeeper"))
    return failures
