"""librdkafka clients (confluent-kafka's AdminClient and kcat) against a real controller."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.e2e

TIMEOUT_S = 10


@pytest.fixture(scope="module")
def shared(module_controllers):
    """These tests only read, so they share one controller."""
    return module_controllers.new()


@pytest.fixture
def admin(shared):
    return AdminClient({"bootstrap.servers": shared.address, "client.id": "kraftwerk-e2e",
                        # Fail fast rather than retry for minutes if something is wrong.
                        "socket.timeout.ms": TIMEOUT_S * 1000})


def test_list_topics_sees_the_cluster_id_and_our_node_as_controller(admin, shared):
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert metadata.cluster_id == shared.cluster_id
    assert metadata.controller_id == 1
    assert {node_id: (b.host, b.port) for node_id, b in metadata.brokers.items()} == {1: ("127.0.0.1", shared.port)}
    assert metadata.topics == {}


def test_list_topics_for_a_named_topic_reports_it_unknown(admin):
    metadata = admin.list_topics(topic="no-such-topic", timeout=TIMEOUT_S)
    assert metadata.topics["no-such-topic"].error is not None
    assert metadata.topics["no-such-topic"].error.name() == "UNKNOWN_TOPIC_OR_PART"


def test_describe_cluster(admin, shared):
    description = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert description.cluster_id == shared.cluster_id
    assert description.controller.id == 1
    assert [(n.id, n.host, n.port) for n in description.nodes] == [(1, "127.0.0.1", shared.port)]


def test_describe_cluster_reports_every_cluster_operation_when_asked(admin):
    # No authorizer yet: as Kafka without one, every CLUSTER operation is allowed.
    from confluent_kafka import admin as confluent_admin

    description = admin.describe_cluster(include_authorized_operations=True,
                                         request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    operation = confluent_admin.AclOperation
    assert set(description.authorized_operations) == {
        operation.CREATE, operation.ALTER, operation.DESCRIBE, operation.CLUSTER_ACTION,
        operation.DESCRIBE_CONFIGS, operation.ALTER_CONFIGS, operation.IDEMPOTENT_WRITE,
    }
    plain = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert plain.authorized_operations is None


def test_kcat_lists_broker_1_as_controller(shared):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (apt-get install kcat; .ci/run installs it)")
    result = subprocess.run([kcat, "-L", "-b", shared.address, "-m", "5"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"broker 1 at 127.0.0.1:{shared.port} (controller)" in result.stdout
    assert " 1 brokers:" in result.stdout
    assert " 0 topics:" in result.stdout
