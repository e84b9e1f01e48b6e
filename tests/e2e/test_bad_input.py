"""Hostile and broken input against a real controller process, over raw sockets.

Every test: a witness connection is opened (and used) *before* the bad input,
the bad connection is handled as Kafka does (answered or closed), the
matching structured log event names the bad connection's peer, and
afterwards both the witness and a brand-new connection are still served.
All the tests share one server, so it also survives all of them in a row.
"""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from protocol.errors import ErrorCode
from .helpers import (
    api_versions_request,
    api_versions_round_trip,
    assert_closed_by_server,
    connect,
    encode_request,
    local_peer,
    read_response,
)

pytestmark = pytest.mark.e2e

MAX_REQUEST_BYTES = 1048576


@pytest.fixture(scope="module")
def server(module_controllers):
    return module_controllers.new(overrides=(f"socket.request.max.bytes={MAX_REQUEST_BYTES}", "log.level=debug"))


@pytest.fixture
def witness(server):
    """A client connected (and served) before the bad input arrives."""
    sock = connect(server)
    api_versions_round_trip(sock, 1)
    yield sock
    sock.close()


def assert_still_serving(server, witness) -> None:
    server.assert_alive()
    api_versions_round_trip(witness, 2)
    with connect(server) as fresh:
        api_versions_round_trip(fresh, 7)


def test_truncated_size_prefix_then_close(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(b"\x00\x00")  # half a size prefix
        bad.shutdown(socket.SHUT_WR)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.disconnected_mid_request", peer=peer)
    assert event["buffered_bytes"] == 2
    assert_still_serving(server, witness)


def test_truncated_frame_body_then_close(server, witness):
    frame = api_versions_request(5)
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(frame[: len(frame) - 3])
        bad.shutdown(socket.SHUT_WR)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.disconnected_mid_request", peer=peer)
    assert event["buffered_bytes"] == len(frame) - 4 - 3
    assert_still_serving(server, witness)


@pytest.mark.parametrize("size", [MAX_REQUEST_BYTES + 1, 2**31 - 1])
def test_size_prefix_over_socket_request_max_bytes(server, witness, size):
    with connect(server) as bad:
        peer = local_peer(bad)
        # Only the prefix: the server must refuse before waiting for the body.
        bad.sendall(struct.pack(">i", size))
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.frame_rejected", peer=peer)
    assert f"frame of {size} bytes exceeds socket.request.max.bytes={MAX_REQUEST_BYTES}" in event["error"]
    assert_still_serving(server, witness)


def test_frame_exactly_at_the_limit_is_read_not_rejected(server, witness):
    # A frame of exactly socket.request.max.bytes passes framing; its body is
    # garbage for ApiVersions v3, so the decode fails instead.
    body = struct.pack(">hhi", 18, 3, 99) + b"\xff" * (MAX_REQUEST_BYTES - 8)
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(struct.pack(">i", len(body)) + body)
        assert_closed_by_server(bad)
    server.wait_for_event("net.request_decode_failed", peer=peer)
    assert not server.events("net.frame_rejected", peer=peer)
    assert_still_serving(server, witness)


def test_negative_size_prefix(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(b"\xde\xad\xbe\xef" + b"\x00" * 16)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.frame_rejected", peer=peer)
    assert "negative frame size" in event["error"]
    assert_still_serving(server, witness)


def test_http_request_is_rejected_as_a_huge_frame(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.frame_rejected", peer=peer)
    assert str(int.from_bytes(b"GET ", "big")) in event["error"]
    assert_still_serving(server, witness)


def test_garbage_body_in_a_valid_frame(server, witness):
    # ApiVersions v3 header, then bytes that are not a compact string etc.
    payload = struct.pack(">hhi", 18, 3, 42) + b"\x00\x0a" + b"\xff" * 30
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.request_decode_failed", peer=peer)
    assert event["api"] == "ApiVersions" and event["api_version"] == 3
    assert_still_serving(server, witness)


def test_frame_shorter_than_a_request_header(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        bad.sendall(struct.pack(">i", 4) + b"\x00\x12\x00\x03")
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.request_decode_failed", peer=peer)
    assert event["frame_bytes"] == 4
    assert_still_serving(server, witness)


def test_unknown_api_key(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        payload = struct.pack(">hhi", 9999, 0, 3) + struct.pack(">h", -1)
        bad.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.unknown_api", peer=peer)
    assert event["api_key"] == 9999
    assert_still_serving(server, witness)


@pytest.mark.parametrize(("api_key", "version", "name", "served"),
                         [(3, 99, "Metadata", "0-12"), (57, 9, "UpdateFeatures", "0-2")])
def test_version_we_do_not_serve_closes_the_connection(server, witness, api_key, version, name, served):
    with connect(server) as bad:
        peer = local_peer(bad)
        payload = struct.pack(">hhi", api_key, version, 3) + struct.pack(">h", -1) + b"\x00" * 8
        bad.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed_by_server(bad)
    event = server.wait_for_event("net.unsupported_version", peer=peer)
    assert (event["api"], event["api_version"], event["served"]) == (name, version, served)
    assert_still_serving(server, witness)


def test_api_versions_from_the_future_gets_a_v0_error_body(server, witness):
    with connect(server) as sock:
        peer = local_peer(sock)
        # A v99 request with a v2 (flexible) header and an opaque body.
        sock.sendall(encode_request(18, 3, 77, {"client_software_name": "future", "client_software_version": "9"})
                     .replace(struct.pack(">hh", 18, 3), struct.pack(">hh", 18, 99), 1))
        correlation_id, body = read_response(sock, 18, 0)
        assert correlation_id == 77
        assert body.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 5)]
        # KIP-511: the client retries with a version it now knows; same connection.
        api_versions_round_trip(sock, 78)
    event = server.wait_for_event("net.unsupported_version", peer=peer)
    assert event["api"] == "ApiVersions" and event["api_version"] == 99
    assert_still_serving(server, witness)


@pytest.mark.parametrize("name", ["bad name!", "-leading-dash", ""])
def test_api_versions_v3_with_an_invalid_client_software_name(server, witness, name):
    with connect(server) as sock:
        sock.sendall(api_versions_request(11, version=3, name=name))
        correlation_id, body = read_response(sock, 18, 3)
        assert correlation_id == 11
        assert body.error_code == ErrorCode.INVALID_REQUEST == 42
        # The connection stays usable (Kafka answers, it does not disconnect).
        api_versions_round_trip(sock, 12)
    assert_still_serving(server, witness)


async def test_slow_client_dribbling_one_byte_at_a_time(server, witness):
    frame = api_versions_request(31)
    with trio.fail_after(20):
        stream = await trio.open_tcp_stream(server.host, server.port)
        async with stream:
            for index in range(len(frame)):
                await stream.send_all(frame[index:index + 1])
                # Pacing, not synchronisation: each byte leaves as its own
                # segment so the server sees the frame in many partial reads.
                await trio.sleep(0.002)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = await stream.receive_some(65536)
                assert chunk, "server closed the connection on a slow client"
                data += chunk
    correlation_id = struct.unpack(">i", data[4:8])[0]
    assert correlation_id == 31
    assert struct.unpack(">h", data[8:10])[0] == 0  # ApiVersions error code
    assert_still_serving(server, witness)


def test_client_disconnecting_mid_request_after_a_served_request(server, witness):
    with connect(server) as bad:
        peer = local_peer(bad)
        api_versions_round_trip(bad, 1)
        frame = encode_request(57, 1, 2, {"timeout_ms": 1000, "feature_updates": [
            {"feature": "metadata.version", "max_version_level": 20, "upgrade_type": 1}], "validate_only": True})
        bad.sendall(frame[:10])
    # Closed without reading anything more: a reset or FIN mid-frame.
    event = server.wait_for_event("net.disconnected_mid_request", peer=peer)
    assert event["buffered_bytes"] == 6
    assert_still_serving(server, witness)


def test_request_log_lines_name_every_served_request(server, witness):
    # log.level=debug: each answered request has a net.request line.
    api_versions_round_trip(witness, 50)
    server.wait_for_event("net.request", api="ApiVersions", correlation_id=50)


def test_api_versions_from_the_future_with_only_a_fixed_header(server, witness):
    # 8 bytes: key, version, correlation id; no client id at all. The reply
    # still needs the correlation id, which sits at a fixed offset.
    with connect(server) as sock:
        payload = struct.pack(">hhi", 18, 99, 4242)
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        correlation_id, body = read_response(sock, 18, 0)
        assert (correlation_id, body.error_code) == (4242, ErrorCode.UNSUPPORTED_VERSION)
    assert_still_serving(server, witness)


def test_requests_sent_before_a_half_close_are_still_answered(server, witness):
    with connect(server) as sock:
        sock.sendall(api_versions_request(61) + encode_request(
            57, 1, 62, {"timeout_ms": 1000, "validate_only": True, "feature_updates": [
                {"feature": "metadata.version", "max_version_level": 20, "upgrade_type": 1}]})
            + api_versions_request(63))
        sock.shutdown(socket.SHUT_WR)
        assert read_response(sock, 18, 3)[0] == 61
        correlation_id, body = read_response(sock, 57, 1)
        assert (correlation_id, body.error_code) == (62, ErrorCode.NONE)
        assert read_response(sock, 18, 3)[0] == 63
        assert_closed_by_server(sock)
    assert_still_serving(server, witness)
