"""KIP-866's metrics on real processes during a migration: every node started with
`kraftwerk.metrics.port=0` serves Prometheus metrics, found through its log's
`metrics.serving` event. The active controller reports MigrationState 4
(MigrationActive), the ZooKeeper write-behind lag (0 once caught up) and the finalized
features; a ZooKeeper-mode broker reports MetadataType 1 until a KRaft controller
sends it UpdateMetadata, then 2 (Dual); a broker moved to KRaft mode reports 3."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.controller.features import metadata_version_from_name
from cli.migration_story import MigrationCluster
from server.storage.meta_properties import random_uuid_string
from server.zk.process import zookeeper_missing
from server.zk.seed import SeedSpec

pytestmark = pytest.mark.e2e

METRICS = {"kraftwerk.metrics.port": "0"}
METADATA_VERSION = "3.7-IV4"


@pytest.fixture
def cluster(tmp_path):
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=(1, 2, 3), topics=2, partitions_per_topic=2,
                    replication_factor=3)
    cluster = MigrationCluster(tmp_path / "migration", seed=seed, metadata_version=METADATA_VERSION,
                               controller_extra=METRICS, broker_extra=METRICS)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def scrape(cluster: MigrationCluster, node_id: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from node `node_id`'s endpoint."""
    port = cluster.metrics_port(node_id)
    assert port is not None, f"node {node_id} logged no metrics.serving event"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(cluster: MigrationCluster, node_id: int, name: str, **labels) -> float | None:
    return scrape(cluster, node_id).get((name, tuple(sorted(labels.items()))))


def test_migration_metrics_on_controllers_zookeeper_brokers_and_kraft_brokers(cluster):
    cluster.start_zookeeper()
    cluster.start_zk_brokers()
    cluster.wait_until("three ZooKeeper brokers", lambda: len(cluster.zookeeper_image().brokers) == 3)
    # No controller has spoken to the ZooKeeper-mode brokers yet: plain ZooKeeper mode.
    for broker_id in (1, 2, 3):
        found = scrape(cluster, broker_id)
        assert found[("kafka_server_metadata_type", ())] == 1
        assert found[("kraftwerk_zkbroker_registered", ())] == 1
        assert found[("kraftwerk_zkbroker_controller_id", ())] == -1

    cluster.format_controllers()
    cluster.start_controllers()
    cluster.wait_state("MigrationActive")
    view = cluster.wait_caught_up()
    active = view.controller_id

    # The active controller: MigrationActive, lag 0 (caught up, nothing written since),
    # the finalized metadata.version.
    level = metadata_version_from_name(METADATA_VERSION).level
    found = scrape(cluster, active)
    assert found[("kafka_controller_migration_state", ())] == 4
    assert found[("kafka_controller_zookeeper_write_behind_lag", ())] == 0
    assert found[("kafka_controller_features", (("feature", "metadata.version"), ("level", str(level))))] == 1
    assert found[("kafka_controller_active_controller_count", ())] == 1
    assert found[("kafka_server_metadata_type", ())] == 3
    for standby in (spec.node_id for spec in cluster.controllers if spec.node_id != active):
        assert value(cluster, standby, "kafka_controller_active_controller_count") == 0

    # The ZooKeeper-mode brokers hear from the KRaft controller (UpdateMetadata): Dual.
    def dual(broker_id: int) -> bool:
        found = scrape(cluster, broker_id)
        return (found[("kafka_server_metadata_type", ())] == 2
                and found[("kraftwerk_zkbroker_kraft_controller", ())] == 1
                and found[("kraftwerk_zkbroker_controller_id", ())] == active)
    for broker_id in (1, 2, 3):
        cluster.wait_until(f"ZooKeeper broker {broker_id} to report MetadataType 2", lambda: dual(broker_id))

    # Broker 1 moves to KRaft mode: MetadataType 3, registered and unfenced; the others stay Dual.
    cluster.migrate_broker(1)
    cluster.wait_until("broker 1 to run in KRaft mode",
                       lambda: 1 in getattr(cluster.migration(), "kraft_brokers", ()))

    def kraft_running() -> bool:
        found = scrape(cluster, 1)
        return found[("kafka_server_broker_state", ())] == 3 and found[("kraftwerk_broker_fenced", ())] == 0
    cluster.wait_until("KRaft broker 1 to be RUNNING", kraft_running)
    found = scrape(cluster, 1)
    assert found[("kafka_server_metadata_type", ())] == 3
    assert found[("kraftwerk_broker_registered", ())] == 1
    assert found[("kafka_controller_features", (("feature", "metadata.version"), ("level", str(level))))] == 1
    assert ("kafka_controller_migration_state", ()) not in found  # only the active controller reports it
    assert value(cluster, 2, "kafka_server_metadata_type") == 2
    view = cluster.wait_state("MigrationActive")  # still mixed: brokers 2 and 3 run in ZooKeeper mode
    assert value(cluster, view.controller_id, "kafka_controller_migration_state") == 4
