"""Killing the broker an admin client is connected to: the client's next calls go
through the other broker.

A cluster of this module's own (1 controller, brokers 101 and 102 at metadata.version
3.7-IV4): the tests kill brokers, so they cannot share the suite's `cluster`. Every
test restarts the broker it killed and waits until both are unfenced again.

Each client is bootstrapped with both brokers, makes calls (so it holds connections
to both, and knows which broker it sends controller calls to: every broker names
itself the controller and forwards, KIP-590), then that broker, or the other one, is
killed with SIGKILL. Only what the client gets back is asserted; every call is bounded
by the client's own timeout, nothing sleeps.

kafka-python 3.0.12 caches the controller id from a Metadata answer and looks it up
again only when a call is answered NOT_CONTROLLER (`KafkaAdminClient.
_send_request_to_controller`): while that broker is down, its controller calls fail
inside the client (connection refused, then NodeNotReadyError during the reconnect
backoff) without reaching any server, whatever the surviving broker would answer.
The tests pin that down (no request was applied) beside the calls that do move to
the survivor. librdkafka (confluent-kafka) asks for metadata again and moves all of
its calls, controller calls included.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ResourceType
from confluent_kafka.admin import ConfigResource as ConfluentConfigResource
from confluent_kafka.admin import NewTopic as ConfluentNewTopic
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaConnectionError, NodeNotReadyError

from cli.upgrade_story import LocalCluster

pytestmark = pytest.mark.e2e

BROKERS = [101, 102]
TIMEOUT_S = 10
IDLE_POLL_S = 0.01  # kafka-python gives no event for "nothing in flight"
MV = "metadata.version"
MV_3_7_IV4 = 19


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("broker_loss"), controllers=1, brokers=2,
                           metadata_version="3.7-IV4")
    try:
        cluster.bring_up()
        yield cluster
    finally:
        cluster.stop_all()


@contextmanager
def killed(cluster: LocalCluster, broker_id: int):
    """kill -9 `broker_id` (reaped before the body runs); restarted and unfenced after."""
    cluster.stop(broker_id, kill=True)
    try:
        yield
    finally:
        cluster.start(broker_id)
        cluster.wait_unfenced(BROKERS)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------
# kafka-python
# --------------------------------------------------------------------------

@pytest.fixture
def kafka_python_admin(two_brokers):
    admin = KafkaAdminClient(bootstrap_servers=two_brokers.broker_addresses, client_id="kraftwerk-e2e-loss",
                             request_timeout_ms=TIMEOUT_S * 1000)
    try:
        yield admin
    finally:
        admin.close()


def connect_to_both(admin: KafkaAdminClient) -> None:
    """A BROKER config resource is asked of that broker: afterwards the client holds a
    connection to each (kafka-python's least-loaded choice prefers a connected node)."""
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(b)) for b in BROKERS])
    assert set(described["broker"]) == {str(b) for b in BROKERS}


def idle(admin: KafkaAdminClient, broker_id: int) -> KafkaAdminClient:
    """`admin`, once it has no request in flight to `broker_id`. kafka-python picks the
    least-loaded node: while the metadata refresh that a disconnect starts is in flight
    on the survivor, a dead broker with no connection left ranks above it (nothing in
    flight), and a call sent then fails ECONNREFUSED: a choice of the client's, made
    at random, not what these tests are about. Each read is sent through this."""
    deadline = time.monotonic() + TIMEOUT_S
    while admin._manager._conns[broker_id].in_flight_requests:
        assert time.monotonic() < deadline, f"the client kept requests in flight to {broker_id}"
        time.sleep(IDLE_POLL_S)
    return admin


def closed_event(admin: KafkaAdminClient, broker_id: int) -> threading.Event:
    """Set once the client has seen its connection to `broker_id` end."""
    event = threading.Event()
    admin._manager._conns[broker_id].close_future.add_both(lambda _: event.set())
    return event


def test_kafka_python_moves_its_reads_and_keeps_its_writes_on_the_survivor_when_the_other_broker_dies(
        two_brokers, kafka_python_admin):
    admin = kafka_python_admin
    before = topic_name("loss-kp-other")
    admin.create_topics([NewTopic(before, 1, 1)])
    connect_to_both(admin)
    controller = admin._controller_id
    assert controller in BROKERS
    victim = next(b for b in BROKERS if b != controller)
    seen_closed = closed_event(admin, victim)
    with killed(two_brokers, victim):
        assert seen_closed.wait(TIMEOUT_S), "the client never noticed its broker died"
        assert idle(admin, controller).describe_cluster()["cluster_id"] == two_brokers.cluster_id
        assert before in idle(admin, controller).list_topics()
        assert idle(admin, controller).describe_features()[MV]["finalized"][1] == MV_3_7_IV4
        # Its controller broker is alive: creating and deleting go on as before.
        after = topic_name("loss-kp-other")
        assert admin.create_topics([NewTopic(after, 1, 1)])["topics"][0]["error_code"] == 0
        assert after in idle(admin, controller).list_topics()
        admin.delete_topics([before, after])


def test_kafka_python_moves_its_reads_but_not_its_controller_calls_when_its_controller_broker_dies(
        two_brokers, kafka_python_admin):
    admin = kafka_python_admin
    before = topic_name("loss-kp-ctl")
    admin.create_topics([NewTopic(before, 1, 1)])
    connect_to_both(admin)
    victim = admin._controller_id
    assert victim in BROKERS
    survivor = next(b for b in BROKERS if b != victim)
    seen_closed = closed_event(admin, victim)
    with killed(two_brokers, victim):
        assert seen_closed.wait(TIMEOUT_S), "the client never noticed its broker died"
        # Reads go to the least-loaded connected node: the survivor answers them.
        description = idle(admin, survivor).describe_cluster()
        assert description["cluster_id"] == two_brokers.cluster_id
        assert survivor in {b["broker_id"] for b in description["brokers"]}
        assert before in idle(admin, survivor).list_topics()
        assert idle(admin, survivor).describe_features()[MV]["finalized"][1] == MV_3_7_IV4
        assert {node_id for node_id, conn in admin._manager._conns.items() if conn.connected} == {survivor}
        # Controller calls stay on the cached, dead controller id: refused inside the client.
        lost = topic_name("loss-kp-ctl")
        with pytest.raises((KafkaConnectionError, NodeNotReadyError)) as refused:
            admin.create_topics([NewTopic(lost, 1, 1)])
        assert isinstance(refused.value, NodeNotReadyError) or "ECONNREFUSED" in str(refused.value)
        # Nothing reached a server: the topic does not exist (the survivor says so).
        assert lost not in idle(admin, survivor).list_topics()
        assert admin._controller_id == victim


# --------------------------------------------------------------------------
# confluent-kafka (librdkafka)
# --------------------------------------------------------------------------

class TransportErrors:
    """librdkafka's `error_cb`: which brokers the client has seen a connection to end or
    be refused (`_TRANSPORT`, its broker named "host:port/<id>: ...")."""

    def __init__(self) -> None:
        self.lost: set[int] = set()

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._TRANSPORT:
            self.lost.update(b for b in BROKERS if f"/{b}: " in error.str())

    def wait_lost(self, admin: AdminClient, broker_id: int) -> None:
        """Serves the client's callbacks (its own bounded poll) until it has noticed."""
        deadline = time.monotonic() + TIMEOUT_S
        while broker_id not in self.lost:
            assert time.monotonic() < deadline, "the client never noticed its broker died"
            admin.poll(0.1)


@pytest.mark.parametrize("which", ["its controller broker", "the other broker"])
def test_confluent_kafka_moves_every_call_to_the_survivor(two_brokers, which):
    errors = TransportErrors()
    admin = AdminClient({"bootstrap.servers": two_brokers.broker_addresses, "client.id": "kraftwerk-e2e-loss",
                         "socket.timeout.ms": TIMEOUT_S * 1000, "error_cb": errors})
    before = topic_name("loss-ck")
    created = admin.create_topics([ConfluentNewTopic(before, 1, 1)], request_timeout=TIMEOUT_S)
    assert created[before].result(timeout=TIMEOUT_S) is None
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert set(metadata.brokers) == set(BROKERS)
    # A BROKER config resource is asked of that broker: afterwards the client holds a
    # connection to each, so it notices whichever one dies.
    # (librdkafka takes one BROKER resource per call.)
    for broker_id in BROKERS:
        described = admin.describe_configs([ConfluentConfigResource(ResourceType.BROKER, str(broker_id))],
                                           request_timeout=TIMEOUT_S)
        assert all(future.result(timeout=TIMEOUT_S) for future in described.values())
    controller = metadata.controller_id
    assert controller in BROKERS
    victim = controller if which == "its controller broker" else next(b for b in BROKERS if b != controller)
    with killed(two_brokers, victim):
        # As for kafka-python: the first call once the client knows. A call made before
        # is bound to the dead broker's handle, which librdkafka retries there with its
        # reconnect backoff (up to reconnect.backoff.max.ms, 10 s), past any timeout here,
        # whatever the cluster does: that is a race inside the client, not the cluster.
        errors.wait_lost(admin, victim)
        # The first call after the kill: librdkafka finds its way to the survivor itself.
        assert admin.list_topics(timeout=TIMEOUT_S).cluster_id == two_brokers.cluster_id
        description = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
        assert description.cluster_id == two_brokers.cluster_id
        after = topic_name("loss-ck")
        created = admin.create_topics([ConfluentNewTopic(after, 1, 1)], request_timeout=TIMEOUT_S)
        assert created[after].result(timeout=TIMEOUT_S) is None
        # It was applied: the controller refuses the same name again.
        again = admin.create_topics([ConfluentNewTopic(after, 1, 1)], request_timeout=TIMEOUT_S)
        with pytest.raises(KafkaException) as exists:
            again[after].result(timeout=TIMEOUT_S)
        assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
        deleted = admin.delete_topics([before, after], request_timeout=TIMEOUT_S)
        assert all(future.result(timeout=TIMEOUT_S) is None for future in deleted.values())

