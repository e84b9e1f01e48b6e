"""Request and response headers, and Kafka's rule for which version each uses.

Owns: the header declarations and `request_header_version` /
`response_header_version`. The rule (Kafka's `generateHeaderVersion`): a
flexible API version uses request header v2 and response header v1, a
non-flexible one v1 and v0, and ApiVersions responses always use v0 so that a
client can parse the reply before it knows what the server speaks.
"""

from __future__ import annotations

import struct
from io import BytesIO

from construct import Container

from protocol.errors import DecodeError
from protocol.schema import Field as F
from protocol.schema import Message

REQUEST_HEADER = Message(
    name="RequestHeader",
    type="header",
    valid_versions="0-2",
    flexible_versions="2+",
    fields=(
        F("RequestApiKey", "int16", "0+"),
        F("RequestApiVersion", "int16", "0+"),
        F("CorrelationId", "int32", "0+"),
        F("ClientId", "string", "1+", nullable_versions="1+", ignorable=True, flexible_versions="none"),
    ),
)

RESPONSE_HEADER = Message(
    name="ResponseHeader",
    type="header",
    valid_versions="0-1",
    flexible_versions="1+",
    fields=(F("CorrelationId", "int32", "0+"),),
)

API_VERSIONS_KEY = 18

_KEY_VERSION = struct.Struct(">hh")


def request_header_version(request: Message, api_version: int) -> int:
    return 2 if request.is_flexible(api_version) else 1


def response_header_version(request: Message, api_version: int) -> int:
    if request.api_key == API_VERSIONS_KEY:
        return 0
    return 1 if request.is_flexible(api_version) else 0


def peek_api(frame: bytes) -> tuple[int, int]:
    """(api_key, api_version) of a request frame body, before full decoding."""
    if len(frame) < 8:
        raise DecodeError("request shorter than the fixed header")
    return _KEY_VERSION.unpack_from(frame, 0)


def decode_request_header(stream: BytesIO, header_version: int) -> Container:
    return REQUEST_HEADER.decode(header_version, stream)


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version == 0:
        return struct.pack(">i", correlation_id)
    # v1: correlation id plus an empty tagged-field section.
    return struct.pack(">ib", correlation_id, 0)
