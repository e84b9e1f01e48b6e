"""KIP-866's states and preconditions, as pure functions."""

from __future__ import annotations

from server.migration.state import (
    MIGRATION_MIN_METADATA_VERSION,
    BrokerCheck,
    MigrationState,
    ZkMigrationState,
    check_preconditions,
    kip_state,
    may_transition,
)

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def test_the_kip_state_follows_the_record_and_the_brokers():
    assert kip_state(ZkMigrationState.NONE, migration_enabled=False, zk_brokers=0) == MigrationState.KRAFT
    assert kip_state(ZkMigrationState.NONE, migration_enabled=True, zk_brokers=3) == MigrationState.MIGRATION_READY
    assert kip_state(ZkMigrationState.PRE_MIGRATION, True, 3) == MigrationState.MIGRATION_READY
    assert kip_state(ZkMigrationState.MIGRATION, True, 2) == MigrationState.MIGRATION_ACTIVE
    # MigrationFinished: still dual-writing, but every broker runs in KRaft mode.
    assert kip_state(ZkMigrationState.MIGRATION, True, 0) == MigrationState.MIGRATION_FINISHED
    assert kip_state(ZkMigrationState.POST_MIGRATION, False, 0) == MigrationState.KRAFT
    assert [s.value for s in MigrationState] == [1, 2, 3, 4, 5, 6]  # the KIP's table
    assert [s.value for s in ZkMigrationState] == [0, 1, 2, 3]  # Kafka's record values


def test_only_forward_transitions_are_allowed():
    assert may_transition(ZkMigrationState.NONE, ZkMigrationState.PRE_MIGRATION)
    assert may_transition(ZkMigrationState.PRE_MIGRATION, ZkMigrationState.MIGRATION)
    assert may_transition(ZkMigrationState.MIGRATION, ZkMigrationState.POST_MIGRATION)
    assert not may_transition(ZkMigrationState.MIGRATION, ZkMigrationState.PRE_MIGRATION)
    assert not may_transition(ZkMigrationState.NONE, ZkMigrationState.MIGRATION)
    assert not may_transition(ZkMigrationState.POST_MIGRATION, ZkMigrationState.MIGRATION)


def ok(broker_id: int) -> BrokerCheck:
    return BrokerCheck(broker_id, CLUSTER, True, 19)


def test_a_ready_cluster_has_no_failures():
    assert check_preconditions(cluster_id=CLUSTER, metadata_version=19, live_brokers=[ok(1), ok(2), ok(3)],
                               assigned_broker_ids=[1, 2, 3]) == []


def test_every_failure_is_listed_with_its_broker():
    failures = check_preconditions(
        cluster_id=CLUSTER,
        metadata_version=MIGRATION_MIN_METADATA_VERSION - 1,
        live_brokers=[
            ok(1),
            BrokerCheck(2, CLUSTER, False, 19),  # config not set
            BrokerCheck(3, None, False, None, "connection refused"),  # unreachable
            BrokerCheck(4, "another-cluster", True, 19),
            BrokerCheck(5, CLUSTER, True, 7),  # software too old
        ],
        assigned_broker_ids=[1, 2, 3, 4, 5, 6],  # 6 holds replicas but is not registered
    )
    text = [str(f) for f in failures]
    assert any("metadata.version is 7" in t and "3.4-IV0" in t for t in text)
    assert "broker 2: kafka.metadata.migration.enable is not true" in text
    assert "broker 3: did not answer MigrationCheck (connection refused)" in text
    assert any(t.startswith("broker 4: belongs to cluster another-cluster") for t in text)
    assert "broker 5: its software supports metadata.version up to level 7, the cluster needs level 8" in text
    assert any(t.startswith("broker 6: is offline") for t in text)
    assert not any(t.startswith("broker 1:") for t in text)


def test_no_broker_at_all_is_a_failure():
    failures = check_preconditions(cluster_id=CLUSTER, metadata_version=19, live_brokers=[], assigned_broker_ids=[])
    assert [f.broker_id for f in failures] == [None]


def test_a_broker_that_cannot_run_the_quorums_level_is_a_failure():
    failures = check_preconditions(cluster_id=CLUSTER, metadata_version=19,
                                   live_brokers=[ok(1), BrokerCheck(2, CLUSTER, True, 14)], assigned_broker_ids=[1, 2])
    assert [str(f) for f in failures] == [
        "broker 2: its software supports metadata.version up to level 14, the cluster needs level 19"]
