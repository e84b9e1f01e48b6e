"""A metadata.version change on a controller, seen from connections that asked ApiVersions
before it (KIP-778 without breaking clients): a version the connection was told but the
new level gates away is answered UNSUPPORTED_VERSION in that API's own response, never by
closing; a connection whose answer went stale is closed once idle, after every request
it sent has been answered; an Envelope carrying such a version gets the same answer in
its inner response."""

from __future__ import annotations

import struct

import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.frames import decode_response as decode_inner_response
from protocol.frames import encode_request
from server.client import KafkaClient
from server.dispatch import Dispatcher
from server.net.listener import CLOSE_STALE_API_VERSIONS, Connection, serve_connection
from server.security.envelope import ENVELOPE_KEY, address_bytes, serialize_principal
from server.security.model import ANONYMOUS

from node_harness import FrameReader, api_versions_body, decode_response, request_frame, running_node

TIMEOUT_S = 20
MV_3_7_IV4, MV_3_8_IV0, MV_3_9_IV0 = 19, 20, 21
UPDATE_FEATURES, API_VERSIONS, METADATA = 57, 18, 3
UPGRADE, SAFE_DOWNGRADE = 1, 2


def update(level: int, *, validate_only: bool, upgrade_type: int = UPGRADE) -> dict:
    return {"timeout_ms": 5000, "validate_only": validate_only,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level,
                                 "upgrade_type": upgrade_type}]}


async def change_metadata_version(port: int, level: int, upgrade_type: int) -> None:
    async with await KafkaClient.connect("127.0.0.1", port) as admin:
        reply = await admin.request(UPDATE_FEATURES, 1, update(level, validate_only=False, upgrade_type=upgrade_type))
        assert reply.error_code == ErrorCode.NONE, reply


async def test_a_version_told_before_a_downgrade_is_answered_unsupported_on_the_same_connection(tmp_path):
    # Closing stale connections is off here, so what is left to see is the answer itself
    # and that the connection stays usable after it.
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_9_IV0, close_connections_on_metadata_version_change=False) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                assert client.api_versions[UPDATE_FEATURES].max_version == 2
                await change_metadata_version(node.port, MV_3_8_IV0, SAFE_DOWNGRADE)
                assert node.state.metadata_version == MV_3_8_IV0
                reply = await client.request(UPDATE_FEATURES, 2, update(MV_3_8_IV0, validate_only=True))
                assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
                assert "UpdateFeatures v2 needs metadata.version 3.9-IV0 (21)" in reply.error_message
                assert list(reply.results) == []
                # Still open: the next request on the same connection is served.
                reply = await client.request(UPDATE_FEATURES, 1, update(MV_3_8_IV0, validate_only=True))
                assert reply.error_code == ErrorCode.NONE
                await client.negotiate()
                assert client.api_versions[UPDATE_FEATURES].max_version == 1
                # Asked again: v2 is no longer a version this connection was told; it is
                # still a version the protocol declares, so it is answered the same way.
                reply = await client.request(UPDATE_FEATURES, 2, update(MV_3_8_IV0, validate_only=True))
                assert reply.error_code == ErrorCode.UNSUPPORTED_VERSION
            # A connection that never asked ApiVersions is judged by the current ranges, and
            # answered the same way too.
            stream = await trio.open_tcp_stream("127.0.0.1", node.port)
            async with stream:
                reader = FrameReader(stream)
                await stream.send_all(request_frame(UPDATE_FEATURES, 2, 1, update(MV_3_8_IV0, validate_only=True)))
                got_id, body = decode_response(UPDATE_FEATURES, 2, await reader.next_payload())
                assert (got_id, body.error_code) == (1, ErrorCode.UNSUPPORTED_VERSION)
                # A version beyond the protocol's declaration cannot be answered: closed.
                await stream.send_all(_raw_frame(UPDATE_FEATURES, 9, 2))
                assert await reader.next_payload() is None


def _raw_frame(api_key: int, version: int, correlation_id: int) -> bytes:
    """A request header of `version` with a null client id and an opaque body."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + b"\x00" * 8
    return struct.pack(">i", len(payload)) + payload


async def test_a_stale_connection_answers_everything_read_then_closes_once_idle(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_9_IV0) as node:
            gate = trio.Event()
            held: list[object] = []
            original_submit = node.submit

            async def hold_first_submit(command, **kwargs):
                # Holds the memory connection's first request in flight; the downgrade
                # (sent over a real socket afterwards) passes.
                if not held:
                    held.append(command)
                    await gate.wait()
                return await original_submit(command, **kwargs)

            node.submit = hold_first_submit
            client, server = trio.testing.memory_stream_pair()
            conn = Connection(1, "memory", server)
            node.connections.add(conn)
            reader = FrameReader(client)

            async def serve() -> None:
                try:
                    await serve_connection(conn, Dispatcher(node, node.served_apis))
                finally:
                    node.connections.discard(conn)
                    await server.aclose()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                await client.send_all(request_frame(API_VERSIONS, 3, 1, api_versions_body()))
                got_id, body = decode_response(API_VERSIONS, 3, await reader.next_payload())
                assert (got_id, body.error_code) == (1, ErrorCode.NONE)
                assert conn.advertised[UPDATE_FEATURES] == (0, 2)
                # A request in flight while the level changes: the connection is not idle.
                await client.send_all(request_frame(UPDATE_FEATURES, 1, 2, update(MV_3_8_IV0, validate_only=True)))
                await trio.testing.wait_all_tasks_blocked()
                assert held and not conn.idle
                await change_metadata_version(node.port, MV_3_8_IV0, SAFE_DOWNGRADE)
                # A controller closes nothing by itself; brokers call this at replay.
                assert not conn.closing
                node.close_stale_connections()
                # Its ApiVersions answer is stale now: a close is pending, not done.
                assert conn.closing and conn.close_reason == CLOSE_STALE_API_VERSIONS
                # A request read meanwhile, at a version this connection was told.
                await client.send_all(request_frame(UPDATE_FEATURES, 2, 3, update(MV_3_8_IV0, validate_only=True)))
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
                got_id, body = decode_response(UPDATE_FEATURES, 1, await reader.next_payload())
                assert (got_id, body.error_code) == (2, ErrorCode.NONE)
                got_id, body = decode_response(UPDATE_FEATURES, 2, await reader.next_payload())
                assert (got_id, body.error_code) == (3, ErrorCode.UNSUPPORTED_VERSION)
                assert "3.9-IV0" in body.error_message
                # Everything answered, the connection idle: it ends.
                assert await reader.next_payload() is None
            # This one and the admin connection that sent the downgrade (told at 3.9-IV0 too,
            # closed after its answer was written).
            assert node.connections.closed_by_request == 2


async def test_a_controller_closes_no_connection_when_the_metadata_version_changes(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_7_IV4) as node:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                told = dict(client.api_versions)
                # 3.7-IV4 -> 3.8-IV0 moves no gate: the same versions are advertised.
                await change_metadata_version(node.port, MV_3_8_IV0, UPGRADE)
                assert node.state.metadata_version == MV_3_8_IV0
                assert node.connections.closed_by_request == 0
                reply = await client.call(METADATA, {"topics": []})
                assert reply.cluster_id == node.cluster_id
                await client.negotiate()
                assert client.api_versions == told
                # 3.8-IV0 -> 3.9-IV0 allows UpdateFeatures v2: this connection's answer is
                # stale, yet a controller keeps it open (as Kafka's do) and serves it.
                await change_metadata_version(node.port, MV_3_9_IV0, UPGRADE)
                reply = await client.call(METADATA, {"topics": []})
                assert reply.cluster_id == node.cluster_id
                assert node.connections.closed_by_request == 0
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                assert client.api_versions[UPDATE_FEATURES].max_version == 2


async def test_an_envelope_carrying_a_gated_version_gets_unsupported_version_inside(tmp_path):
    # The forwarding broker had offered its client UpdateFeatures v2 and has not replayed
    # the downgrade yet; the controller has.
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_9_IV0) as node:
            await change_metadata_version(node.port, MV_3_8_IV0, SAFE_DOWNGRADE)
            inner = encode_request(UPDATE_FEATURES, 2, 77, "forwarded-client", update(MV_3_8_IV0, validate_only=True))
            async with await KafkaClient.connect("127.0.0.1", node.port) as broker:
                reply = await broker.request(ENVELOPE_KEY, 0, {
                    "request_data": inner[4:],
                    "request_principal": serialize_principal(ANONYMOUS),
                    "client_host_address": address_bytes("127.0.0.1"),
                })
                assert reply.error_code == ErrorCode.NONE
                got_id, body = decode_inner_response(UPDATE_FEATURES, 2, bytes(reply.response_data))
                assert got_id == 77
                assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
                assert "UpdateFeatures v2" in body.error_message
                # A version the level still allows is served as before.
                inner = encode_request(UPDATE_FEATURES, 1, 78, "forwarded-client",
                                       update(MV_3_8_IV0, validate_only=True))
                reply = await broker.request(ENVELOPE_KEY, 0, {
                    "request_data": inner[4:],
                    "request_principal": serialize_principal(ANONYMOUS),
                    "client_host_address": address_bytes("127.0.0.1"),
                })
                got_id, body = decode_inner_response(UPDATE_FEATURES, 1, bytes(reply.response_data))
                assert (reply.error_code, got_id, body.error_code) == (ErrorCode.NONE, 78, ErrorCode.NONE)
