"""KIP-919 on a running in-process controller: it registers itself (a lone voter before
it reports started), registers again when another incarnation takes its id, and
DescribeCluster with EndpointType CONTROLLER lists the registered controllers that have
an endpoint on the request's listener, as Kafka 4.4's controllers do."""

from __future__ import annotations

import uuid

import trio

from protocol.errors import ErrorCode
from server.client import KafkaClient

from node_harness import running_node

MV_3_6_IV2, MV_3_7_IV0 = 14, 15
ENDPOINT_TYPE_CONTROLLER = 2


def registration(controller_id: int, incarnation: uuid.UUID, listener: str = "CONTROLLER", port: int = 1) -> dict:
    return {"controller_id": controller_id, "incarnation_id": incarnation, "zk_migration_ready": False,
            "listeners": [{"name": listener, "host": "127.0.0.1", "port": port, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 33}]}


async def describe_controllers(client: KafkaClient):
    return await client.call(60, {"endpoint_type": ENDPOINT_TYPE_CONTROLLER,
                                  "include_cluster_authorized_operations": False}, min_version=1)


async def test_a_lone_controller_is_registered_when_it_reports_started(tmp_path):
    async with running_node(tmp_path, MV_3_7_IV0) as node:
        own = node.state.controller_registration(1)
        assert own is not None
        assert [(e.name, e.host, e.port, e.security_protocol) for e in own.endpoints] == [
            ("CONTROLLER", "127.0.0.1", node.port, 0)]
        assert {name: (r.min_level, r.max_level) for name, r in own.supported_features.items()} == \
            node.supported_features()
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            described = await describe_controllers(client)
            assert described.error_code == ErrorCode.NONE
            assert (described.endpoint_type, described.cluster_id, described.controller_id) == (
                ENDPOINT_TYPE_CONTROLLER, node.cluster_id, 1)
            assert [(b.broker_id, b.host, b.port, b.rack) for b in described.brokers] == [
                (1, "127.0.0.1", node.port, None)]


async def test_only_registrations_on_the_requests_listener_are_listed(tmp_path):
    async with running_node(tmp_path, MV_3_7_IV0) as node:
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            answer = await client.call(70, registration(7, uuid.uuid4(), listener="ELSEWHERE"))
            assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, "")
            assert node.state.controller_registration(7) is not None  # answered after commit
            answer = await client.call(70, registration(8, uuid.uuid4(), port=4321))
            assert answer.error_code == ErrorCode.NONE
            described = await describe_controllers(client)
            assert [(b.broker_id, b.port) for b in described.brokers] == [(1, node.port), (8, 4321)]


async def test_another_incarnation_under_its_id_makes_it_register_again(tmp_path):
    async with running_node(tmp_path, MV_3_7_IV0) as node:
        ours = node.state.controller_registration(1).incarnation_id
        impostor = uuid.uuid4()
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            answer = await client.call(70, registration(1, impostor))
            assert answer.error_code == ErrorCode.NONE
        # The node sees its registration replaced and sends its own again.
        with trio.fail_after(10):
            while node.state.controller_registration(1).incarnation_id != ours:
                await node.replayer.wait_replayed(node.replayer.replayed_end_offset + 1)
        assert node.state.controller_registration(1).endpoints[0].port == node.port


async def test_below_3_7_iv0_nothing_registers_and_registration_is_refused(tmp_path):
    async with running_node(tmp_path, MV_3_6_IV2) as node:
        assert dict(node.state.controllers) == {}
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            answer = await client.call(70, registration(2, uuid.uuid4()))
            assert (answer.error_code, answer.error_message) == (
                ErrorCode.UNSUPPORTED_VERSION,
                "The current MetadataVersion is too old to support controller registrations.")
        assert dict(node.state.controllers) == {}
