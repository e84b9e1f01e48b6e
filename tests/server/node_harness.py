"""In-process kraftwerk nodes for the listener and dispatcher tests.

(tests/server/ has no __init__.py on purpose: as a package it would be named
`server` and shadow kraftwerk's own package; this module is imported by plain name.)

Owns: formatting a metadata directory the way `kraftwerk storage format`
does (bootstrap checkpoint + meta.properties), running a `ControllerNode`
in a nursery on 127.0.0.1:0, building raw request frames, and a connected
pair of plain TCP streams (`connected_pair`).
"""

from __future__ import annotations

import struct
from contextlib import asynccontextmanager
from dataclasses import replace
from io import BytesIO
from pathlib import Path

import trio

from protocol.header import REQUEST_HEADER, RESPONSE_HEADER, request_header_version, response_header_version
from protocol.registry import API_MESSAGES
from server.config import Listener, ServerConfig
from server.controller.commands import bootstrap_records
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

MV_3_7_IV4 = 19


def format_directory(directory: Path, metadata_version_level: int = MV_3_7_IV4, node_id: int = 1) -> str:
    cluster_id = random_uuid_string()
    directory.mkdir(parents=True)
    write_bootstrap_checkpoint(directory, bootstrap_records(metadata_version_level))
    write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                                    directory_id=random_uuid_string()))
    return cluster_id


def node_config(directory: Path, **changes) -> ServerConfig:
    base = ServerConfig(listener=Listener("CONTROLLER", "127.0.0.1", 0), metadata_log_dir=directory)
    return replace(base, **changes)


@asynccontextmanager
async def running_node(tmp_path: Path, metadata_version_level: int = MV_3_7_IV4, **changes):
    """A formatted, started node; cancelled (and its log closed) on exit."""
    directory = tmp_path / "metadata"
    format_directory(directory, metadata_version_level)
    node = ControllerNode(node_config(directory, **changes))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        try:
            yield node
        finally:
            nursery.cancel_scope.cancel()


def request_frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    request_message = API_MESSAGES[api_key][0]
    out = BytesIO()
    REQUEST_HEADER.encode_into(request_header_version(request_message, version),
                               {"request_api_key": api_key, "request_api_version": version,
                                "correlation_id": correlation_id, "client_id": "server-test"}, out)
    request_message.encode_into(version, body, out)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes):
    """(correlation id, body) of one response frame's payload (without the size prefix)."""
    stream = BytesIO(payload)
    header = RESPONSE_HEADER.decode(response_header_version(API_MESSAGES[api_key][0], version), stream)
    body = API_MESSAGES[api_key][1].decode(version, stream)
    assert stream.tell() == len(payload), "trailing bytes after the response"
    return header.correlation_id, body


class FrameReader:
    """Reads whole response frames from a trio stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next_payload(self) -> bytes | None:
        """The next frame's payload, or None at a clean EOF between frames."""
        while True:
            if len(self.buffer) >= 4:
                size = struct.unpack_from(">i", self.buffer, 0)[0]
                if len(self.buffer) >= 4 + size:
                    payload = bytes(self.buffer[4:4 + size])
                    del self.buffer[:4 + size]
                    return payload
            data = await self.stream.receive_some(65536)
            if not data:
                assert not self.buffer, f"EOF inside a response frame ({len(self.buffer)} bytes)"
                return None
            self.buffer += data


def api_versions_body() -> dict:
    return {"client_software_name": "server-test", "client_software_version": "1.0"}


def validate_only_update(level: int) -> dict:
    return {"timeout_ms": 1000, "validate_only": True,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level, "upgrade_type": 1}]}


async def connected_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """(client, server): two ends of one real TCP connection on 127.0.0.1."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return client, server
