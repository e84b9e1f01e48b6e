"""The request path's shortcuts keep its rules: the usual request header read in place
(server/dispatch.py `read_request_header`) and ApiVersions' body read in place
(server/handlers/api_versions.py `request_decoder`) fail and succeed exactly where the
declarations do, and the answers of one received chunk of pipelined requests (sync
ones written together, async ones through the writer) leave in request order, every
request counted.
"""

from __future__ import annotations

import struct
from io import BytesIO

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import DecodeError, ErrorCode
from protocol.header import REQUEST_HEADER
from protocol.registry import API_MESSAGES
from server.dispatch import Dispatcher, read_request_header
from server.handlers import api_versions
from server.net.listener import Connection, serve_connection

from node_harness import FrameReader, api_versions_body, decode_response, request_frame, running_node

TIMEOUT_S = 20
API_VERSIONS, METADATA, UPDATE_FEATURES = 18, 3, 57


# -- the request header read in place ------------------------------------------------

def _reference(frame: bytes, header_version: int):
    stream = BytesIO(frame)
    try:
        header = REQUEST_HEADER.decode(header_version, stream)
    except DecodeError:
        return DecodeError
    return header.client_id, stream.tell()


def _fast(frame: bytes, header_version: int):
    try:
        return read_request_header(frame, header_version)
    except DecodeError:
        return DecodeError


_client_ids = st.one_of(st.none(), st.text(max_size=20),
                        st.binary(max_size=20))  # bytes: possibly not UTF-8
_tags = st.one_of(st.just(b"\x00"), st.binary(max_size=6))


@st.composite
def _headers(draw) -> bytes:
    fixed = struct.pack(">hhi", draw(st.integers(-1, 100)), draw(st.integers(-1, 20)),
                        draw(st.integers(-2**31, 2**31 - 1)))
    client_id = draw(_client_ids)
    if client_id is None:
        encoded = struct.pack(">h", draw(st.sampled_from([-1, -2, -32768])))
    else:
        raw = client_id.encode() if isinstance(client_id, str) else client_id
        size = draw(st.one_of(st.just(len(raw)), st.integers(-3, 40)))
        encoded = struct.pack(">h", size) + raw
    frame = fixed + encoded + draw(_tags) + draw(st.binary(max_size=8))
    return frame[:draw(st.integers(8, len(frame)))]


@settings(max_examples=600, deadline=None)
@given(frame=st.one_of(_headers(), st.binary(min_size=8, max_size=40)), header_version=st.integers(0, 2))
def test_the_header_read_in_place_agrees_with_the_declaration(frame, header_version):
    assert _fast(frame, header_version) == _reference(frame, header_version)


# -- ApiVersions' body read in place ------------------------------------------------

def _declared_api_versions(body: bytes, version: int):
    try:
        return dict(API_MESSAGES[API_VERSIONS][0].decode(version, BytesIO(body)))
    except DecodeError:
        return DecodeError


def _in_place_api_versions(body: bytes, version: int, prefix: bytes):
    try:
        return dict(api_versions.request_decoder(API_MESSAGES[API_VERSIONS][0], version)(prefix + body, len(prefix)))
    except DecodeError:
        return DecodeError


_text = st.one_of(st.text(max_size=8), st.binary(max_size=8))  # bytes: possibly not UTF-8
# No tagged fields, one or two (known to the declaration or not), or broken ones.
_tags = st.one_of(st.just(b"\x00"), st.sampled_from([b"\x00", b"\x01", b"\x01\x00\x00", b"\x01\x07\x01z", b"\x02\x00\x01a\x01\x00",
                                   b"\x80", b"\x81\x00", b""]), st.binary(max_size=4))


@st.composite
def _api_versions_requests(draw) -> tuple[bytes, int]:
    """(body, version): mostly well formed for its version, with a wrong size, a field
    of another version, a tag or a truncation here and there."""
    version = draw(st.integers(0, 5))

    def compact(value) -> bytes:
        if value is None:
            return b"\x00"
        raw = value.encode() if isinstance(value, str) else value
        size = len(raw) + 1 if draw(st.integers(0, 4)) else draw(st.integers(0, 140))
        head = bytes([size]) if size < 0x80 else bytes([(size & 0x7F) | 0x80, size >> 7])
        return head + raw
    body = compact(draw(_text)) + compact(draw(_text))
    if (version >= 5) == bool(draw(st.integers(0, 5))):  # v5's ClusterId and NodeId
        body += compact(draw(st.one_of(st.none(), st.just(""), _text))) + struct.pack(">i", draw(st.integers(-2, 9)))
    body += draw(_tags)
    if not draw(st.integers(0, 4)):
        body = body[:draw(st.integers(0, len(body)))]
    return body, version


@settings(max_examples=3000, deadline=None)
@given(request=st.one_of(_api_versions_requests(), st.tuples(st.binary(max_size=24), st.integers(0, 5))),
       prefix=st.sampled_from([b"", b"\x00\x12\x00\x03header"]))
def test_apiversions_read_in_place_agrees_with_the_declaration(request, prefix):
    body, version = request
    assert _in_place_api_versions(body, version, prefix) == _declared_api_versions(body, version)


# -- pipelined requests in one chunk --------------------------------------------------

def requests_counted(node, api: str, version: int) -> float:
    return node.metrics.registry.get_sample_value("kraftwerk_requests_total", {"api": api, "version": str(version)}) \
        or 0.0


async def test_pipelined_requests_in_one_chunk_are_answered_in_order_and_counted(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node, trio.open_nursery() as nursery:
            client, server = trio.testing.memory_stream_pair()
            conn = Connection(1, "127.0.0.1:1", server)

            async def serve() -> None:
                try:
                    await serve_connection(conn, Dispatcher(node, node.served_apis))
                finally:
                    await server.aclose()

            nursery.start_soon(serve)
            update = {"timeout_ms": 1000, "validate_only": True,
                      "feature_updates": [{"feature": "metadata.version", "max_version_level": 19,
                                           "upgrade_type": 1}]}
            # Sync answers (ApiVersions, Metadata) before, between and after async ones
            # (UpdateFeatures waits for the controller loop).
            plan = ["av"] * 5 + ["metadata"] + ["av"] * 4 + ["update"] + ["av"] * 6 + ["update"] + ["av"] * 3
            frames = []
            for index, kind in enumerate(plan):
                if kind == "av":
                    frames.append(request_frame(API_VERSIONS, 3, index, api_versions_body()))
                elif kind == "metadata":
                    frames.append(request_frame(METADATA, 12, index, {"topics": []}))
                else:
                    frames.append(request_frame(UPDATE_FEATURES, 1, index, update))
            before = requests_counted(node, "ApiVersions", 3)
            await client.send_all(b"".join(frames))
            reader = FrameReader(client)
            first = None
            for index, kind in enumerate(plan):
                payload = await reader.next_payload()
                assert payload is not None, "the connection closed"
                key, version = {"av": (API_VERSIONS, 3), "metadata": (METADATA, 12),
                                "update": (UPDATE_FEATURES, 1)}[kind]
                got_id, body = decode_response(key, version, payload)
                assert got_id == index
                if kind == "av":
                    assert body.error_code == ErrorCode.NONE and len(body.api_keys) > 10
                    first = first or body
                    assert body == first
                elif kind == "update":
                    assert body.error_code == ErrorCode.NONE
                else:
                    assert body.cluster_id == node.cluster_id
            assert requests_counted(node, "ApiVersions", 3) - before == plan.count("av")
            assert conn.client_software == ("server-test", "1.0")
            assert conn.advertised == node.advertised_ranges()
            nursery.cancel_scope.cancel()
