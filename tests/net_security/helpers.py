"""Certificates and in-process nodes for the listener-security tests.

Owns: `Pki` (a trustme CA, a second "other" CA, server and client certificates
written as PEM files), `start_node` (a formatted `ControllerNode` on 127.0.0.1
with any config changes, served in the caller's nursery), raw frame helpers and
a bounded reader of whole response frames.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from io import BytesIO
from pathlib import Path

import trio
import trustme

from protocol.header import REQUEST_HEADER, RESPONSE_HEADER, request_header_version, response_header_version
from protocol.registry import API_MESSAGES
from server.config import Listener, ServerConfig, SslConfig
from server.controller.commands import bootstrap_records
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

MV_3_7_IV4 = 19
TIMEOUT_S = 20


@dataclass(frozen=True)
class Identity:
    """A key and certificate chain in one PEM file (Kafka's PEM keystore) and the CA file."""

    keystore: str
    cafile: str


class Pki:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ca = trustme.CA(organization_name="kraftwerk-test")
        self.other_ca = trustme.CA(organization_name="someone-else")
        self.cafile = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.other_cafile = self._write("other-ca.pem", self.other_ca.cert_pem.bytes())
        self.server = self.issue("server", "127.0.0.1", "localhost", common_name="controller")
        self.alice = self.issue("alice", common_name="alice", organization_unit_name="ops",
                                organization_name="kraftwerk")
        self.mallory = self.issue("mallory", common_name="mallory", ca=self.other_ca)

    def _write(self, name: str, data: bytes) -> str:
        path = self.directory / name
        path.write_bytes(data)
        return str(path)

    def issue(self, name: str, *identities: str, ca: trustme.CA | None = None, **names) -> Identity:
        ca = ca or self.ca
        cert = ca.issue_cert(*(identities or ("127.0.0.1",)), **names)
        pem = cert.private_key_and_cert_chain_pem.bytes()
        return Identity(self._write(f"{name}.pem", pem),
                        self.cafile if ca is self.ca else self.other_cafile)


def ssl_config(identity: Identity, client_auth: str = "none") -> SslConfig:
    return SslConfig(keystore_location=identity.keystore, truststore_location=identity.cafile,
                     client_auth=client_auth)


def format_directory(directory: Path, node_id: int = 1, cluster_id: str | None = None) -> str:
    cluster_id = cluster_id or random_uuid_string()
    directory.mkdir(parents=True)
    write_bootstrap_checkpoint(directory, bootstrap_records(MV_3_7_IV4))
    write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                                    directory_id=random_uuid_string()))
    return cluster_id


def node_config(directory: Path, **changes) -> ServerConfig:
    base = ServerConfig(listener=Listener("CONTROLLER", "127.0.0.1", 0), metadata_log_dir=directory)
    return replace(base, **changes)


async def start_node(nursery: trio.Nursery, tmp_path: Path, name: str = "node", **changes) -> ControllerNode:
    directory = tmp_path / name
    format_directory(directory)
    node = ControllerNode(node_config(directory, **changes))
    await nursery.start(node.run)
    return node


def request_frame(api_key: int, version: int, correlation_id: int, body: dict, client_id: str = "sec-test") -> bytes:
    request_message = API_MESSAGES[api_key][0]
    out = BytesIO()
    REQUEST_HEADER.encode_into(request_header_version(request_message, version),
                               {"request_api_key": api_key, "request_api_version": version,
                                "correlation_id": correlation_id, "client_id": client_id}, out)
    request_message.encode_into(version, body, out)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def api_versions_frame(correlation_id: int, software_name: str = "sec-test") -> bytes:
    return request_frame(18, 3, correlation_id, {"client_software_name": software_name,
                                                 "client_software_version": "1.0"})


def decode_response(api_key: int, version: int, payload: bytes):
    stream = BytesIO(payload)
    header = RESPONSE_HEADER.decode(response_header_version(API_MESSAGES[api_key][0], version), stream)
    return header.correlation_id, API_MESSAGES[api_key][1].decode(version, stream)


class FrameReader:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next_payload(self) -> bytes | None:
        """The next response frame's payload; None when the server closed (or reset) the connection."""
        while True:
            if len(self.buffer) >= 4:
                size = struct.unpack_from(">i", self.buffer, 0)[0]
                if len(self.buffer) >= 4 + size:
                    payload = bytes(self.buffer[4:4 + size])
                    del self.buffer[:4 + size]
                    return payload
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not data:
                return None
            self.buffer += data


async def api_versions_round_trip(stream: trio.abc.Stream, correlation_id: int) -> bool:
    """True when an ApiVersions request on `stream` is answered (False: the server closed)."""
    try:
        await stream.send_all(api_versions_frame(correlation_id))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return False
    payload = await FrameReader(stream).next_payload()
    if payload is None:
        return False
    got_id, body = decode_response(18, 3, payload)
    return got_id == correlation_id and body.error_code == 0
