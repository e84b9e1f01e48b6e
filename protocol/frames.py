"""Whole request and response frames, for kraftwerk's own clients.

Owns: `encode_request` (size prefix, the request header of the version Kafka's
rule gives, the body) and `decode_response` (the response header, then the
body; an ApiVersions reply refusing the version is a v0 body, KIP-511, while any
other error, e.g. INVALID_REQUEST or REBOOTSTRAP_REQUIRED, comes in the version asked). The server
side of the same rules lives in `server/dispatch.py`.
"""

from __future__ import annotations

import struct
from io import BytesIO

from construct import Container

from protocol.header import REQUEST_HEADER, RESPONSE_HEADER, request_header_version, response_header_version
from protocol.registry import API_MESSAGES

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35

_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    request_message = API_MESSAGES[api_key][0]
    out = BytesIO()
    out.write(b"\x00\x00\x00\x00")
    REQUEST_HEADER.encode_into(request_header_version(request_message, version), {
        "request_api_key": api_key, "request_api_version": version,
        "correlation_id": correlation_id, "client_id": client_id}, out)
    request_message.encode_into(version, body, out)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Container]:
    """(correlation id, body) of one response payload (without its size prefix).

    Bad bytes raise `protocol.errors.DecodeError`."""
    request_message, response_message = API_MESSAGES[api_key]
    stream = BytesIO(payload)
    header = RESPONSE_HEADER.decode(response_header_version(request_message, version), stream)
    if api_key == API_VERSIONS_KEY:
        position = stream.tell()
        error = stream.read(2)
        stream.seek(position)
        if len(error) == 2 and _INT16.unpack(error)[0] == UNSUPPORTED_VERSION:
            return header.correlation_id, response_message.decode(0, stream)
    return header.correlation_id, response_message.decode(version, stream)
