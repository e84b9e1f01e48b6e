"""Every node answers like one server: a write acknowledged through any node (broker,
standby or active controller) is seen by a read through any other node sent after the
acknowledgement, also right after a kill -9 of the leader. Standby controllers relay the
writes clients send them; reads wait for the node's image to reach the leader's, and for
a live leader when the node knows none (server/nodes/forwarding.py). Real processes:
3 controllers and 2 brokers."""

from __future__ import annotations

import itertools

import pytest
import trio

from cli.upgrade_story import LocalCluster
from protocol.errors import ErrorCode
from server.client import KafkaClient

pytestmark = pytest.mark.e2e

TIMEOUT_S = 60
CREATE_TOPICS, METADATA, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, UPDATE_FEATURES = 19, 3, 32, 44, 57
DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 55, 60
CONTROLLER_ENDPOINT = 2
CONTROLLERS = [1, 2, 3]
# Bounds the polling loop below besides its deadline: each answer comes back in well
# under a millisecond until the survivor notices its leader is gone, then one is held.
MAX_DESCRIBES = 50_000
MV_3_7_IV4, MV_3_8_IV0 = 19, 20
UPGRADE, SAFE_DOWNGRADE = 1, 2
TOPIC_RESOURCE, SET = 2, 0
BROKERS = [101, 102]


@pytest.fixture(scope="module")
def five_nodes(tmp_path_factory):
    # The leader holds high-watermark-only news for 300 ms, so every other node learns
    # of a commit well after the leader has acknowledged it: only the read barrier (and
    # the relay's own wait) can make its reads current.
    cluster = LocalCluster(tmp_path_factory.mktemp("ryw"), controllers=3, brokers=2, metadata_version="3.7-IV4",
                           extra={"kraftwerk.quorum.high.watermark.linger.ms": "300"})
    try:
        cluster.bring_up()
        yield cluster
    finally:
        cluster.stop_all()


async def connect(cluster: LocalCluster, node_id: int) -> KafkaClient:
    host, port = cluster.address(node_id).rsplit(":", 1)
    return await KafkaClient.connect(host, int(port), client_id="kraftwerk-ryw")


async def test_writes_through_any_node_are_read_back_through_any_other(five_nodes):
    cluster = five_nodes
    with trio.fail_after(TIMEOUT_S):
        clients = {node_id: await connect(cluster, node_id) for node_id in (1, 2, 3, *BROKERS)}
        try:
            # Every ordered pair of nodes: the standbys relay writes to the leader; the
            # leader's own answers are the ones the others are furthest behind.
            for round_index, (writer, reader) in enumerate(itertools.permutations(clients, 2)):
                name = f"ryw-{round_index}-{writer}-{reader}"
                created = await clients[writer].request(CREATE_TOPICS, 7, {
                    "topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                                "configs": []}], "timeout_ms": 10_000, "validate_only": False})
                assert created.topics[0].error_code == ErrorCode.NONE, (writer, created)
                # No wait: each read is sent right after the write's acknowledgement.
                metadata = await clients[reader].request(METADATA, 12, {
                    "topics": [{"name": name}], "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False})
                assert metadata.topics[0].error_code == ErrorCode.NONE, (writer, reader, metadata.topics[0])
                assert len(metadata.topics[0].partitions) == 2
                altered = await clients[writer].request(INCREMENTAL_ALTER_CONFIGS, 1, {
                    "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name, "configs": [
                        {"name": "retention.ms", "config_operation": SET, "value": str(1000 + round_index)}]}],
                    "validate_only": False})
                assert altered.responses[0].error_code == ErrorCode.NONE, (writer, altered)
                configs = await clients[reader].request(DESCRIBE_CONFIGS, 4, {
                    "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": name,
                                   "configuration_keys": ["retention.ms"]}],
                    "include_synonyms": False, "include_documentation": False})
                values = {c.name: c.value for c in configs.results[0].configs}
                assert values == {"retention.ms": str(1000 + round_index)}, (writer, reader, values)
            # metadata.version too: a client that changed it through one node sees the new
            # level in the ApiVersions answer of any other. Through the leader first: its
            # answer does not wait for anyone else's image.
            quorum = await clients[101].call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                              "partitions": [{"partition_index": 0}]}]})
            leader = quorum.topics[0].partitions[0].leader_id
            for writer, level, upgrade_type in ((leader, MV_3_8_IV0, UPGRADE), (101, MV_3_7_IV4, SAFE_DOWNGRADE)):
                reply = await clients[writer].request(UPDATE_FEATURES, 1, {
                    "timeout_ms": 10_000, "validate_only": False, "feature_updates": [
                        {"feature": "metadata.version", "max_version_level": level, "upgrade_type": upgrade_type}]})
                assert reply.error_code == ErrorCode.NONE, (writer, reply)
                for reader in clients:
                    if reader == writer:
                        continue
                    fresh = await connect(cluster, reader)
                    try:
                        finalized = {f.name: f.max_version_level
                                     for f in fresh.api_versions_response.finalized_features}
                    finally:
                        await fresh.aclose()
                    assert finalized["metadata.version"] == level, (writer, reader, finalized)
        finally:
            for client in clients.values():
                await client.aclose()


async def quorum_leader(client: KafkaClient) -> int:
    quorum = await client.call(DESCRIBE_QUORUM, {"topics": [{"topic_name": "__cluster_metadata",
                                                             "partitions": [{"partition_index": 0}]}]})
    return quorum.topics[0].partitions[0].leader_id


async def test_reads_after_a_kill_of_the_leader_wait_for_the_next_one(five_nodes):
    """kill -9 of the controller leader. A surviving controller never tells a client that
    no controller is active: DescribeCluster names the dead leader until the survivor
    notices, then waits for the election and names the next one (told -1, Kafka's Java
    Admin with bootstrap.controllers keeps it until metadata.max.age.ms). Meanwhile a
    topic created through one broker once the quorum has failed over is in the other
    broker's Metadata at once, although that broker may still follow the dead leader."""
    cluster = five_nodes
    with trio.fail_after(TIMEOUT_S):
        probe = await connect(cluster, BROKERS[0])
        try:
            dead = await quorum_leader(probe)
        finally:
            await probe.aclose()
        survivor = next(c for c in CONTROLLERS if c != dead)
        named: list[int] = []
        clients = {node_id: await connect(cluster, node_id) for node_id in (survivor, *BROKERS)}

        async def describe_until_another_leader() -> None:
            for _ in range(MAX_DESCRIBES):
                reply = await clients[survivor].call(DESCRIBE_CLUSTER, {
                    "include_cluster_authorized_operations": False, "endpoint_type": CONTROLLER_ENDPOINT})
                assert reply.error_code == ErrorCode.NONE, reply
                named.append(reply.controller_id)
                if reply.controller_id != dead:
                    return
            pytest.fail(f"{MAX_DESCRIBES} DescribeCluster answers all named the dead leader {dead}")

        async def create_then_read_elsewhere() -> None:
            name = "ryw-after-failover"
            codes = []
            while True:
                created = await clients[BROKERS[0]].request(CREATE_TOPICS, 7, {
                    "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                "configs": []}], "timeout_ms": 10_000, "validate_only": False})
                codes.append(created.topics[0].error_code)
                if codes[-1] == ErrorCode.NONE:
                    break
                # The broker answers only once the next leader has; a retriable refusal
                # (e.g. REQUEST_TIMED_OUT on a slow election) is asked again.
                assert codes[-1] in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER), codes
            metadata = await clients[BROKERS[1]].request(METADATA, 12, {
                "topics": [{"name": name}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            assert metadata.topics[0].error_code == ErrorCode.NONE, metadata.topics[0]

        try:
            cluster.stop(dead, kill=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(describe_until_another_leader)
                nursery.start_soon(create_then_read_elsewhere)
        finally:
            for client in clients.values():
                await client.aclose()
            cluster.start(dead)  # the module's cluster whole again
    assert named[-1] in CONTROLLERS and named[-1] != dead, named
    assert -1 not in named, named
