"""KIP-866 end to end, with real processes and a real ZooKeeper: a seeded ZooKeeper-mode
cluster of three ZooKeeper broker agents is migrated by a three-controller KRaft
quorum. Afterwards the log holds what ZooKeeper held; every change made during dual
writes (topics created and deleted, configs altered, metadata.version raised) is in
ZooKeeper too; the brokers move to KRaft mode one by one (MigrationActive ->
MigrationFinished); restarting the controllers with the switch off finalizes (KRaft),
after which ZooKeeper no longer follows."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from protocol.errors import ErrorCode
from cli.migration_story import MigrationCluster
from server.storage.meta_properties import random_uuid_string
from server.zk import paths as zp
from server.zk.process import zookeeper_missing
from server.zk.seed import SeedSpec

from .helpers import run_cli
from .migration_helpers import alter, create_topic

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 20_000


@pytest.fixture
def cluster(tmp_path):
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=(1, 2, 3), topics=4, partitions_per_topic=3,
                    replication_factor=3, topic_configs={"retention.ms": "86400000"},
                    broker_configs={"<default>": {"log.retention.hours": "72"}, "2": {"log.cleaner.threads": "2"}})
    cluster = MigrationCluster(tmp_path / "migration", seed=seed)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def kraft_topics(admin: KafkaAdminClient) -> dict[str, dict[int, tuple]]:
    described = admin.describe_topics()
    return {t["name"]: {p["partition_index"]: (tuple(p["replica_nodes"]), p["leader_id"],
                                               tuple(sorted(p["isr_nodes"])))
                        for p in t["partitions"]}
            for t in described}


def zk_topics(image: zp.ZkClusterImage) -> dict[str, dict[int, tuple]]:
    return {name: {index: (tuple(replicas), topic.partition_states[index].leader,
                           tuple(sorted(topic.partition_states[index].isr)))
                   for index, replicas in topic.assignment.partitions.items()}
            for name, topic in image.topics.items()}


def test_a_zookeeper_cluster_migrates_to_kraft(cluster):
    cluster.start_zookeeper()
    cluster.start_zk_brokers()
    cluster.wait_until("three ZooKeeper brokers", lambda: len(cluster.zookeeper_image().brokers) == 3)
    before = cluster.zookeeper_image()

    cluster.format_controllers()
    cluster.start_controllers()
    view = cluster.wait_state("MigrationActive")
    assert view.zk_brokers == (1, 2, 3) and view.failures == ()
    # Asked through a ZooKeeper-mode broker (it names itself as the controller and has no
    # DescribeMigration), the status command says so at once instead of retrying.
    through_zk_broker = run_cli("migration", "status", "--bootstrap-server", cluster.address(1), "--timeout-s", "30")
    assert through_zk_broker.returncode != 0
    assert "does not serve DescribeMigration" in through_zk_broker.stderr, through_zk_broker.stderr
    assert "--bootstrap-controller" in through_zk_broker.stderr
    # Kafka's later signal: each ZooKeeper broker registered with the quorum as migrating.
    cluster.wait_until("the ZooKeeper brokers' KRaft handshakes",
                       lambda: all(cluster.events(b, "zkbroker.kraft_registered") for b in (1, 2, 3)))
    cluster.wait_caught_up()
    cluster.wait_controllers_in_step()

    # ZooKeeper's controller role belongs to the active KRaft controller now (persistent).
    zk = cluster.zookeeper_image()
    assert zk.controller is not None and zk.controller.is_kraft
    assert zk.controller.broker_id == cluster.migration().controller_id

    admin = KafkaAdminClient(bootstrap_servers=cluster.controller_addresses, request_timeout_ms=TIMEOUT_MS,
                             client_id="kraftwerk-migration-e2e")
    try:
        # The copy: the log holds exactly what ZooKeeper held.
        assert kraft_topics(admin) == zk_topics(before)
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "topic-0")])
        assert configs["topic"]["topic-0"]["retention.ms"]["value"] == "86400000"

        # Dual writes: every change made through the KRaft quorum reaches ZooKeeper.
        admin.create_topics([NewTopic("dual-write", 2, 3, topic_configs={"cleanup.policy": "compact"})])
        # kafka-python sends AlterConfigs to any node and does not follow NOT_CONTROLLER from
        # a standby controller: send it to the active controller and check the answer.
        assert alter(cluster, "topic-1", "1000") == ErrorCode.NONE
        admin.delete_topics(["topic-3"])
        cluster.wait_caught_up()
        cluster.wait_controllers_in_step()
        zk = cluster.zookeeper_image()
        assert zk_topics(zk) == kraft_topics(admin)
        assert "topic-3" not in zk.topics and "topic-3" not in zk.topic_configs
        assert zk.topic_configs["dual-write"].config == {"cleanup.policy": "compact"}
        assert zk.topic_configs["topic-1"].config["retention.ms"] == "1000"
        assert zk.broker_configs["<default>"].config == {"log.retention.hours": "72"}
        assert zk.features is not None and zk.features.finalized_levels()["metadata.version"] > 0
    finally:
        admin.close()

    # The brokers move to KRaft mode one by one; the cluster is mixed meanwhile.
    for broker_id in (1, 2, 3):
        cluster.migrate_broker(broker_id)
        expected = "MigrationFinished" if broker_id == 3 else "MigrationActive"
        cluster.wait_until(f"broker {broker_id} to run in KRaft mode",
                           lambda: broker_id in (cluster.migration() or _EMPTY).kraft_brokers
                           and broker_id not in cluster.migration().zk_brokers)
        assert cluster.wait_state(expected).state == expected

    # Finalization: the controllers restart without the switch; ZooKeeper stops following.
    cluster.finalize()
    view = cluster.wait_state("KRaft")
    assert view.zk_migration_state == 3  # POST_MIGRATION
    cluster.wait_until("the KRaft brokers to be unfenced by the restarted quorum",
                       lambda: cluster.unfenced_brokers() == [1, 2, 3])
    # Right after the rolling restart the leadership may still move (a restarted voter can
    # start an election), and kafka-python follows NOT_CONTROLLER only once: create the
    # topic at the active controller, retried until acknowledged (36: a retry of one that
    # committed without an answer).
    cluster.wait_until("a topic created after finalization",
                       lambda: create_topic(cluster, "after-finalize", partitions=1) in (ErrorCode.NONE, 36))
    admin = KafkaAdminClient(bootstrap_servers=cluster.controller_addresses, request_timeout_ms=TIMEOUT_MS,
                             client_id="kraftwerk-migration-e2e")
    try:
        cluster.wait_controllers_in_step()  # the Metadata answer may come from a standby
        assert "after-finalize" in kraft_topics(admin)
    finally:
        admin.close()
    assert "after-finalize" not in cluster.zookeeper_image().topics


class _Empty:
    kraft_brokers: tuple = ()
    zk_brokers: tuple = ()


_EMPTY = _Empty()
