"""A small Kafka protocol client on trio, for kraftwerk's own tools and tests.

Owns: connecting, ApiVersions negotiation (KIP-511: try our newest, fall
back to what an UNSUPPORTED_VERSION reply lists), version choice per API,
and one-request-at-a-time request/response with correlation checks.
Real Kafka clients are tested separately; this one exists so the CLI does
not depend on a third-party client.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import trio

from protocol.errors import DecodeError, ErrorCode, error_name
from protocol.frames import decode_response, encode_request
from protocol.registry import API_MESSAGES, api_name
from server.net.connect import open_client_stream
from server.net.framing import FrameDecoder
from server.security.client_config import ClientSecurity

CLIENT_SOFTWARE_NAME = "kraftwerk-cli"
CLIENT_SOFTWARE_VERSION = "0.1.0"
RESPONSE_MAX_BYTES = 100 * 1024 * 1024


class ClientError(Exception):
    """The server could not be reached or answered something unusable."""


@dataclass(frozen=True, slots=True)
class ApiRange:
    min_version: int
    max_version: int


class KafkaClient:
    def __init__(self, stream: trio.abc.Stream, client_id: str = CLIENT_SOFTWARE_NAME) -> None:
        self._stream = stream
        self._client_id = client_id
        self._correlation = itertools.count(1)
        self._decoder = FrameDecoder(RESPONSE_MAX_BYTES)
        self.api_versions: dict[int, ApiRange] = {}
        self.api_versions_response = None

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = CLIENT_SOFTWARE_NAME,
                      security: "ClientSecurity | None" = None, timeout_s: float = 30.0) -> "KafkaClient":
        """`security`: TLS and SASL as a Kafka client's properties say (None: PLAINTEXT);
        `timeout_s` bounds the TCP connect, TLS handshake and SASL exchange."""
        try:
            if security is None:
                stream = await trio.open_tcp_stream(host, port)
            else:
                stream = await open_client_stream(host, port, security, timeout_s=timeout_s, client_id=client_id)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        client = cls(stream, client_id)
        await client.negotiate()
        return client

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> "KafkaClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def negotiate(self) -> None:
        request_message = API_MESSAGES[18][0]
        version = request_message.version_range[1]
        body = {"client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": CLIENT_SOFTWARE_VERSION}
        response = await self.request(18, version, body)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            ranges = {k.api_key: k.max_version for k in response.api_keys}
            version = min(ranges.get(18, 0), version)
            response = await self.request(18, version, body)
        if response.error_code != ErrorCode.NONE:
            raise ClientError(f"ApiVersions failed with error {error_name(response.error_code)}")
        self.api_versions = {k.api_key: ApiRange(k.min_version, k.max_version) for k in response.api_keys}
        self.api_versions_response = response

    def choose_version(self, api_key: int, min_version: int = 0) -> int:
        ours = API_MESSAGES[api_key][0].version_range
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise ClientError(f"the server does not support {api_name(api_key)}")
        version = min(ours[1], theirs.max_version)
        if version < max(min_version, theirs.min_version, ours[0]):
            raise ClientError(f"no common version of {api_name(api_key)} (server {theirs.min_version}-"
                              f"{theirs.max_version}, needed at least {min_version})")
        return version

    async def call(self, api_key: int, body: dict, min_version: int = 0):
        return await self.request(api_key, self.choose_version(api_key, min_version), body)

    async def request(self, api_key: int, version: int, body: dict):
        correlation_id = next(self._correlation)
        try:
            await self._stream.send_all(encode_request(api_key, version, correlation_id, self._client_id, body))
            payload = await self._read_frame()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ClientError(f"connection lost during {api_name(api_key)}: {exc}") from None
        try:
            answered_id, response = decode_response(api_key, version, payload)
        except DecodeError as exc:
            raise ClientError(f"undecodable {api_name(api_key)} response: {exc}") from None
        if answered_id != correlation_id:
            raise ClientError("response correlation id does not match the request")
        return response

    async def _read_frame(self) -> bytes:
        while True:
            payload = self._decoder.next_frame()
            if payload is not None:
                return payload
            data = await self._stream.receive_some(65536)
            if not data:
                raise ClientError("the server closed the connection")
            self._decoder.receive_data(data)
