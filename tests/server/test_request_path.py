"""The request path's shortcuts keep its rules: the usual request header read in place
(server/dispatch.py `read_request_header`) fails and succeeds exactly where the
declaration does, and the answers of one received chunk of pipelined requests (sync
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
from server.dispatch import Dispatcher, read_request_header
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
