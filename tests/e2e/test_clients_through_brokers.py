"""Real clients (kafka-python, confluent-kafka, kcat) bootstrapped from broker agents of a
running cluster of real processes: one controller and two brokers."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient, UpdateFeatureType

from .helpers import status_node_ids


pytestmark = pytest.mark.e2e

TIMEOUT_S = 10
MV = "metadata.version"
MV_3_7_IV4, MV_3_8_IV0 = 19, 20


def test_kafka_python_describes_and_updates_features_through_a_broker(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.address(101), request_timeout_ms=10_000,
                             client_id="kraftwerk-e2e")
    try:
        described = admin.describe_features()[MV]
        assert described["supported"] == (1, 33) and described["finalized"][1] == MV_3_7_IV4
        # The broker names itself the controller and forwards the update to the real one.
        assert admin.update_features({MV: MV_3_8_IV0}) == {MV: "OK"}
        cluster.wait_metadata_version(MV_3_8_IV0)
        assert admin.update_features({MV: (UpdateFeatureType.SAFE_DOWNGRADE, MV_3_7_IV4)}) == {MV: "OK"}
        cluster.wait_metadata_version(MV_3_7_IV4)
    finally:
        admin.close()


def test_confluent_kafka_sees_the_unfenced_brokers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.address(102), "client.id": "kraftwerk-e2e",
                         "socket.timeout.ms": TIMEOUT_S * 1000})
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert metadata.cluster_id == cluster.cluster_id
    assert {node_id: f"{b.host}:{b.port}" for node_id, b in metadata.brokers.items()} == {
        101: cluster.address(101), 102: cluster.address(102)}
    # Each broker names itself the controller (it forwards controller APIs, KIP-590). librdkafka sends
    # its Metadata request to whichever broker it picks once it knows both, so either may answer; the
    # real controller (node 1) is never named, because clients cannot reach it.
    assert metadata.controller_id in (101, 102)
    description = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert sorted(n.id for n in description.nodes) == [101, 102]


def test_kcat_lists_the_brokers(cluster):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (apt-get install kcat; .ci/run installs it)")
    result = subprocess.run([kcat, "-L", "-b", cluster.address(101), "-m", "5"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"broker 101 at {cluster.address(101)} (controller)" in result.stdout
    assert f"broker 102 at {cluster.address(102)}" in result.stdout
    assert " 2 brokers:" in result.stdout


def test_our_cli_through_a_broker(cluster):
    from cli.local_cluster import run_cli

    described = run_cli("features", "describe", "--bootstrap-server", cluster.address(102))
    assert described.returncode == 0, described.stderr
    assert "FinalizedVersionLevel: 3.7-IV4" in described.stdout
    quorum = run_cli("metadata-quorum", "describe", "--status", "--bootstrap-server", cluster.address(101))
    assert quorum.returncode == 0, quorum.stderr
    assert "LeaderId:               1" in quorum.stdout
    # Brokers are observers, with the directory ids their fetches name (KIP-853).
    assert status_node_ids(quorum.stdout, "CurrentObservers") == [101, 102]
    assert '"directoryId": ' in quorum.stdout.split("CurrentObservers:", 1)[1]
