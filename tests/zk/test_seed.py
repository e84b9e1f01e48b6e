"""Seeding a ZooKeeper-mode cluster and reading it back (server/zk/seed.py)."""

from __future__ import annotations

import json
import time

import pytest
import trio
from kazoo.client import KazooClient

from server.zk import paths
from server.zk.client import connect
from server.zk.paths import ZnodeDecodeError
from server.zk.seed import (
    SeedError,
    SeedSpec,
    read_cluster_image,
    read_zookeeper,
    seed_zookeeper,
    spec_image,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _spec(**overrides) -> SeedSpec:
    values = dict(
        cluster_id=CLUSTER_ID,
        broker_ids=(1, 2, 3, 4),
        topics=5,
        partitions_per_topic=6,
        replication_factor=3,
        topic_configs={"retention.ms": "3600000", "cleanup.policy": "delete"},
        broker_configs={"1": {"log.cleaner.threads": "2"}, "<default>": {"message.max.bytes": "2000000"}},
        features={"metadata.version": 8},
        controller_epoch=4,
        seed=7,
    )
    values.update(overrides)
    return SeedSpec(**values)


def test_spec_image_is_realistic_and_deterministic() -> None:
    spec = _spec()
    image = spec_image(spec)
    assert image == spec_image(spec)
    assert image != spec_image(_spec(seed=8))
    assert image.partition_count() == 30
    topic_ids = {topic.assignment.topic_id for topic in image.topics.values()}
    assert len(topic_ids) == 5
    leaders: dict[int, int] = {}
    for topic in image.topics.values():
        assert sorted(topic.assignment.partitions) == list(range(6))
        for partition, replicas in topic.assignment.partitions.items():
            assert len(set(replicas)) == 3 and set(replicas) <= {1, 2, 3, 4}
            state = topic.partition_states[partition]
            assert state.leader == replicas[0]
            assert state.isr == replicas
            assert state.controller_epoch == 4
            leaders[state.leader] = leaders.get(state.leader, 0) + 1
    assert set(leaders) == {1, 2, 3, 4}  # leadership spread over every broker


def test_spec_validation() -> None:
    with pytest.raises(ValueError):
        _spec(replication_factor=5)
    with pytest.raises(ValueError):
        _spec(broker_ids=(1, 1, 2))
    with pytest.raises(ZnodeDecodeError):
        _spec(cluster_id="not-a-uuid")


def test_seed_then_read_back_equals_spec(zk_hosts: str) -> None:
    spec = _spec()
    written = seed_zookeeper(zk_hosts, spec)
    image = read_zookeeper(zk_hosts)
    assert image == written == spec_image(spec)
    assert image.cluster_id == CLUSTER_ID
    assert image.features is not None and image.features.finalized_levels() == {"metadata.version": 8}
    assert image.topic_configs["topic-0"].config == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert image.broker_configs["<default>"].config == {"message.max.bytes": "2000000"}
    assert image.controller_epoch == 4
    assert image.brokers == {} and image.controller is None and image.migration is None

    # The raw znodes have Kafka's layouts and paths.
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        raw, _ = client.get("/brokers/topics/topic-2")
        assert json.loads(raw)["version"] == 3
        assert set(json.loads(raw)["partitions"]) == {str(p) for p in range(6)}
        state, _ = client.get("/brokers/topics/topic-2/partitions/5/state")
        assert set(json.loads(state)) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert client.get("/controller_epoch")[0] == b"4"
        assert json.loads(client.get("/cluster/id")[0]) == {"version": "1", "id": CLUSTER_ID}
        for path in ("/brokers/ids", "/config/changes", "/admin/delete_topics"):
            assert client.exists(path) is not None
    finally:
        client.stop()
        client.close()


def test_seed_refuses_an_existing_cluster(zk_hosts: str) -> None:
    seed_zookeeper(zk_hosts, _spec(topics=1))
    with pytest.raises(SeedError):
        seed_zookeeper(zk_hosts, _spec(topics=1))


def test_read_sees_brokers_controller_and_migration(zk_hosts: str) -> None:
    seed_zookeeper(zk_hosts, _spec(topics=1))
    registration = paths.BrokerRegistrationZnode(
        host="127.0.0.1", port=9092, endpoints=(paths.Endpoint("PLAINTEXT", "127.0.0.1", 9092),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack=None, jmx_port=-1,
        timestamp_ms=1, features={},
    )
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        client.create(paths.broker_path(2), registration.encode(), ephemeral=True)
        client.create(paths.CONTROLLER_PATH, paths.ControllerZnode(3000, 5, 2).encode())
        client.create(paths.MIGRATION_PATH, paths.MigrationZnode(-1, 0, 3000, 2).encode())
        client.set(paths.MIGRATION_PATH, paths.MigrationZnode(41, 1000, 3000, 2).encode())
        image = read_cluster_image(client)
        # The bulk wire-protocol reader and the kazoo reader see the same cluster
        # (read while the ephemeral registration's session is still open).
        assert read_zookeeper(zk_hosts) == image
    finally:
        client.stop()
        client.close()
    assert image.brokers == {2: registration}
    assert image.broker_epochs[2] > 0  # the registration's czxid
    assert image.controller == paths.ControllerZnode(3000, 5, 2)
    assert image.migration == paths.MigrationZnode(41, 1000, 3000, 2)
    assert image.migration_version == 1


def test_read_names_the_bad_znode(zk_hosts: str) -> None:
    seed_zookeeper(zk_hosts, _spec(topics=1))
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        client.set("/brokers/topics/topic-0/partitions/1/state", b"{broken")
        with pytest.raises(ZnodeDecodeError, match="topic-0/partitions/1/state"):
            read_cluster_image(client)
    finally:
        client.stop()
        client.close()


def test_chroot_and_missing_cluster(zk_hosts: str) -> None:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        client.ensure_path("/kafka/cluster-a")
    finally:
        client.stop()
        client.close()
    chrooted = f"{zk_hosts}/kafka/cluster-a"
    empty = read_zookeeper(chrooted)
    assert empty.cluster_id is None and empty.topics == {} and empty.features is None
    spec = _spec(topics=2)
    seed_zookeeper(chrooted, spec)
    assert read_zookeeper(chrooted) == spec_image(spec)
    assert read_zookeeper(zk_hosts).cluster_id is None  # nothing leaked outside the chroot


def test_wire_reader_reports_an_unreachable_zookeeper() -> None:
    from cli.local_cluster import free_port_run
    from server.zk.seed import ZkWireError

    with pytest.raises(ZkWireError):
        read_zookeeper(f"127.0.0.1:{free_port_run(1)}", timeout_s=2)


async def test_read_through_a_trio_session(zk_hosts: str) -> None:
    await trio.to_thread.run_sync(seed_zookeeper, zk_hosts, _spec(topics=2))
    async with await connect(zk_hosts) as zk:
        image = await zk.run_sync(read_cluster_image)
    assert image == spec_image(_spec(topics=2))


def test_seed_10k_partitions(zk_hosts: str, capsys) -> None:
    spec = _spec(topics=100, partitions_per_topic=100, broker_ids=(1, 2, 3, 4, 5), seed=1)
    started = time.perf_counter()
    seed_zookeeper(zk_hosts, spec)
    seeded = time.perf_counter()
    image = read_zookeeper(zk_hosts)
    read = time.perf_counter()
    assert image.partition_count() == 10_000
    assert image == spec_image(spec)
    # Measured, not asserted (timing targets live in bench/).
    with capsys.disabled():
        print(f"\n[zk seed] 10k partitions: seed {seeded - started:.2f}s, read back {read - seeded:.2f}s")
