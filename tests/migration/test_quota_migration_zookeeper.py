"""Client quotas and SCRAM users through a real migration: a real ZooKeeper seeded with
Kafka's quota znodes (users, clients, users/<u>/clients, ips, defaults, a sanitized
name, SCRAM credentials) and a ZooKeeper-mode broker agent, migrated by a real KRaft
controller. DescribeClientQuotas and DescribeUserScramCredentials on the KRaft side
answer what ZooKeeper held; AlterClientQuotas during dual writes reaches the znodes,
with change notifications."""

from __future__ import annotations

import json

import pytest
import trio
from kazoo.client import KazooClient

from cli.migration_story import MigrationCluster
from server.client import KafkaClient
from server.storage.meta_properties import random_uuid_string
from server.zk import paths as zp
from server.zk.process import zookeeper_missing
from server.zk.seed import SeedSpec

pytestmark = pytest.mark.e2e

CALL_TIMEOUT_S = 20.0
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS = 48, 49, 50
MATCH_ANY = 2
ALICE_SCRAM = zp.ScramCredentialText(b"alice-salt", b"alice-stored", b"alice-server", 4096)

SEEDED_QUOTAS = {
    "/config/users/alice": {"producer_byte_rate": "1024", "SCRAM-SHA-256": ALICE_SCRAM.encode()},
    "/config/users/<default>": {"consumer_byte_rate": "4096"},
    "/config/users/CN%3Dcarol/clients/c%201": {"request_percentage": "12.5"},
    "/config/clients/<default>": {"producer_byte_rate": "100"},
    "/config/ips/10.0.0.1": {"connection_creation_rate": "5"},
}


@pytest.fixture
def cluster(tmp_path):
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=(1,), topics=1, partitions_per_topic=1,
                    replication_factor=1)
    cluster = MigrationCluster(tmp_path / "migration", zk_brokers=1, controllers=1, seed=seed)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def seed_quotas(hosts: str) -> None:
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=30)
    try:
        for path, config in SEEDED_QUOTAS.items():
            # Kafka creates the parents of a per-client znode without data.
            client.create(path, zp.ConfigZnode(config).encode(), makepath=True)
    finally:
        client.stop()
        client.close()


def notifications(hosts: str) -> list[str]:
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=30)
    try:
        out = []
        for child in sorted(client.get_children("/config/changes")):
            data, _ = client.get(f"/config/changes/{child}")
            out.append(json.loads(data)["entity_path"])
        return out
    finally:
        client.stop()
        client.close()


def call(cluster: MigrationCluster, api_key: int, body: dict):
    """One request at the active controller."""
    host, _, port = cluster.address(cluster.migration().controller_id).rpartition(":")

    async def run():
        with trio.fail_after(CALL_TIMEOUT_S):
            async with await KafkaClient.connect(host, int(port)) as client:
                await client.negotiate()
                return await client.call(api_key, body)
    return trio.run(run)


def described_quotas(cluster: MigrationCluster) -> dict:
    response = call(cluster, DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False})
    assert response.error_code == 0, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry["values"]} for entry in response.entries}


def test_quotas_and_scram_users_migrate_and_dual_write(cluster):
    cluster.start_zookeeper()
    seed_quotas(cluster.zk_hosts)
    cluster.start_zk_brokers()
    cluster.wait_until("the ZooKeeper broker", lambda: len(cluster.zookeeper_image().brokers) == 1)
    cluster.format_controllers()
    cluster.start_controllers()
    cluster.wait_state("MigrationActive")
    cluster.wait_caught_up()

    # The copy: KRaft answers what ZooKeeper held, names unsanitized, <default> as null.
    assert described_quotas(cluster) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", None),): {"consumer_byte_rate": 4096.0},
        (("client-id", "c 1"), ("user", "CN=carol")): {"request_percentage": 12.5},
        (("client-id", None),): {"producer_byte_rate": 100.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }
    scram = call(cluster, DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
    assert scram.error_code == 0
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in scram.results] == [
        ("alice", [(1, 4096)])]
    # Nothing needed writing back: no notification yet.
    assert notifications(cluster.zk_hosts) == []

    # Dual writes: AlterClientQuotas committed in KRaft reaches the znodes.
    response = call(cluster, ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": "alice"}],
         "ops": [{"key": "producer_byte_rate", "value": 2048.0, "remove": False}]},
        {"entity": [{"entity_type": "user", "entity_name": "dave"}, {"entity_type": "client-id", "entity_name": "d1"}],
         "ops": [{"key": "consumer_byte_rate", "value": 10.0, "remove": False}]},
        {"entity": [{"entity_type": "ip", "entity_name": "10.0.0.1"}],
         "ops": [{"key": "connection_creation_rate", "value": 0.0, "remove": True}]},
    ]})
    assert [e.error_code for e in response.entries] == [0, 0, 0]
    cluster.wait_caught_up()
    image = cluster.zookeeper_image()
    assert image.quota_configs["users/alice"].config == {"producer_byte_rate": "2048",
                                                         "SCRAM-SHA-256": ALICE_SCRAM.encode()}
    assert image.quota_configs["users/dave/clients/d1"].config == {"consumer_byte_rate": "10"}
    assert image.quota_configs["ips/10.0.0.1"].config == {}
    assert image.quota_configs["users/CN%3Dcarol/clients/c%201"].config == {"request_percentage": "12.5"}
    assert "dave" in image.user_client_parents
    # What ZooKeeper now holds reads back as the KRaft image's quotas.
    assert image.client_quotas() == described_quotas(cluster)
    assert sorted(notifications(cluster.zk_hosts)) == ["ips/10.0.0.1", "users/alice", "users/dave/clients/d1"]
