"""Client quotas through a broker and through the controller of a running cluster of real
processes (one controller, two brokers), with kafka-python's own codec on the wire.

No installed client offers quota calls in its admin API: kafka-python 3.0.12's
KafkaAdminClient has no describe/alter_client_quotas (it only declares the messages,
kafka.protocol.admin.client_quotas) and confluent-kafka 2.16's AdminClient has none either.
So the admin client's connection manager sends kafka-python's DescribeClientQuotasRequest
and AlterClientQuotasRequest, at the versions it negotiates from our ApiVersions: the
bytes are a real client's, the API calls are the ones its admin layer would make.
"""

from __future__ import annotations

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest


pytestmark = pytest.mark.e2e

BROKERS = [101, 102]
CONTROLLER = 1
INVALID_REQUEST = 42
EXACT, DEFAULT, ANY = 0, 1, 2


class Quotas:
    """Quota calls of one KafkaAdminClient, sent to one node."""

    def __init__(self, client: KafkaAdminClient, node_id: int) -> None:
        self.client = client
        self.node_id = node_id
        # The version of every request sent, as the client negotiated it.
        self.versions: list[int] = []

    def _send(self, request):
        manager = self.client._manager
        return manager.run(manager.send, request, self.node_id)

    def alter(self, entries, validate_only=False) -> list[tuple[dict, int, str | None]]:
        request = AlterClientQuotasRequest(entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n)
                        for t, n in entity.items()],
                ops=[AlterClientQuotasRequest.EntryData.OpData(key=k, value=float(v or 0), remove=v is None)
                     for k, v in ops.items()])
            for entity, ops in entries], validate_only=validate_only)
        response = self._send(request)
        self.versions.append(request.API_VERSION)
        return [({e.entity_type: e.entity_name for e in entry.entity}, entry.error_code, entry.error_message)
                for entry in response.entries]

    def describe(self, components=(), strict=False):
        request = DescribeClientQuotasRequest(components=[
            DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
            strict=strict)
        response = self._send(request)
        self.versions.append(request.API_VERSION)
        if response.error_code:
            return response.error_code, response.error_message
        return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                {v.key: v.value for v in entry.values} for entry in response.entries}


@pytest.fixture
def via(cluster):
    clients = {}

    def connect(node_id: int) -> Quotas:
        if node_id not in clients:
            clients[node_id] = KafkaAdminClient(bootstrap_servers=cluster.address(node_id), request_timeout_ms=10_000,
                                                client_id="kraftwerk-e2e-quotas")
        return Quotas(clients[node_id], node_id)

    try:
        yield connect
    finally:
        for client in clients.values():
            client.close()


def test_quotas_through_a_broker_are_read_back_from_every_node(cluster, via):
    broker = via(101)
    # Validate-only: accepted, nothing written.
    assert broker.alter([({"user": "alice"}, {"producer_byte_rate": 1024})], validate_only=True) == [
        ({"user": "alice"}, 0, None)]
    assert broker.describe([("user", EXACT, "alice")]) == {}

    results = broker.alter([
        ({"user": "alice"}, {"producer_byte_rate": 1024, "request_percentage": 12.5}),
        ({"user": "alice", "client-id": None}, {"consumer_byte_rate": 4096}),
        ({"ip": None}, {"connection_creation_rate": 20}),
        ({"user": "bob"}, {"producer_byte_rate": 10.5}),
        ({"ip": "not-an-address"}, {"connection_creation_rate": 1}),
    ])
    assert results == [
        ({"user": "alice"}, 0, None),
        ({"client-id": None, "user": "alice"}, 0, None),
        ({"ip": None}, 0, None),
        ({"user": "bob"}, INVALID_REQUEST, "producer_byte_rate cannot be a fractional value."),
        ({"ip": "not-an-address"}, INVALID_REQUEST, "not-an-address is not a valid IP or resolvable host."),
    ]
    alice = (("user", "alice"),)
    alice_default_client = (("client-id", None), ("user", "alice"))
    expected = {alice: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
                alice_default_client: {"consumer_byte_rate": 4096.0}}
    # The broker that forwarded the write has caught up when it answers it; the others
    # follow the log, so wait (bounded) for them.
    for node_id in (101, 102, CONTROLLER):
        reader = via(node_id)
        cluster.wait_until(f"alice's quotas on {node_id}",
                           lambda: reader.describe([("user", EXACT, "alice")]) == expected)
        assert reader.describe([("user", EXACT, "alice")], strict=True) == {alice: expected[alice]}
        assert reader.describe([("client-id", DEFAULT, None)]) == {alice_default_client: expected[alice_default_client]}
        assert reader.describe([("ip", ANY, None)]) == {(("ip", None),): {"connection_creation_rate": 20.0}}
        assert reader.describe([("ip", ANY, None), ("user", ANY, None)]) == (
            INVALID_REQUEST, "Invalid entity filter component combination. IP filter component should not be used "
                             "with user or clientId filter component.")

    # Removing through the other broker.
    assert via(102).alter([({"user": "alice"}, {"producer_byte_rate": None, "request_percentage": None})]) == [
        ({"user": "alice"}, 0, None)]
    cluster.wait_until("alice's user quotas removed on 101",
                       lambda: via(101).describe([("user", EXACT, "alice")], strict=True) == {})


def test_quotas_through_the_controller(cluster, via):
    controller = via(CONTROLLER)
    assert controller.alter([({"client-id": "reporting"}, {"consumer_byte_rate": 2048,
                                                          "controller_mutation_rate": 0.5})]) == [
        ({"client-id": "reporting"}, 0, None)]
    assert controller.describe([("client-id", EXACT, "reporting")]) == {
        (("client-id", "reporting"),): {"consumer_byte_rate": 2048.0, "controller_mutation_rate": 0.5}}
    assert controller.alter([({"client-id": "reporting", "ip": "10.0.0.1"}, {"consumer_byte_rate": 1})]) == [
        ({"client-id": "reporting", "ip": "10.0.0.1"}, INVALID_REQUEST,
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")]
    cluster.wait_until("the controller's write on broker 102",
                       lambda: (("client-id", "reporting"),) in via(102).describe([("client-id", ANY, None)]))
    # kafka-python speaks the flexible v1 of both APIs with us, as it would with Kafka.
    assert set(controller.versions) == {1}
