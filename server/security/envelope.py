"""Forwarding with the client's identity: Kafka's Envelope (API key 58), pure parts.

Owns: the serialized principal (`serialize_principal` / `deserialize_principal`:
an int16 version followed by DefaultPrincipalData at that version, as Kafka's
default principal builder writes it) and the client address bytes (4 bytes IPv4,
16 bytes IPv6). Which APIs a broker may forward is the API catalog's
(server/api/catalog.py: the broker role's forwarding handler).

Why: a broker that relays an operator's UpdateFeatures or CreateAcls to the
active controller must not have it authorized as *the broker* (a super user or a
CLUSTER_ACTION holder): the controller authorizes the Envelope as the broker
(CLUSTER_ACTION on CLUSTER) and the request inside as the client.
"""

from __future__ import annotations

import ipaddress
import struct

from protocol.api_keys import ApiKey
from protocol.errors import DecodeError
from protocol.principal import DEFAULT_PRINCIPAL_DATA
from server.security.model import KafkaPrincipal

ENVELOPE_KEY = ApiKey.ENVELOPE
_INT16 = struct.Struct(">h")
PRINCIPAL_DATA_VERSION = 0


class EnvelopeError(Exception):
    """The envelope's principal or client address does not decode."""


def serialize_principal(principal: KafkaPrincipal) -> bytes:
    body = DEFAULT_PRINCIPAL_DATA.encode(PRINCIPAL_DATA_VERSION, {
        "type": principal.principal_type, "name": principal.name, "token_authenticated": False})
    return _INT16.pack(PRINCIPAL_DATA_VERSION) + body


def deserialize_principal(data: bytes | None) -> KafkaPrincipal:
    if data is None or len(data) < 2:
        raise EnvelopeError("the envelope carries no principal")
    version = _INT16.unpack_from(data)[0]
    if version != PRINCIPAL_DATA_VERSION:
        raise EnvelopeError(f"principal data version {version} is not supported")
    try:
        decoded = DEFAULT_PRINCIPAL_DATA.decode(version, bytes(data[2:]))
    except DecodeError as exc:
        raise EnvelopeError(f"principal data does not decode: {exc}") from None
    if not decoded.type:
        raise EnvelopeError("principal data has no type")
    return KafkaPrincipal(decoded.type, decoded.name)


def address_bytes(host: str) -> bytes:
    """The client's address as Kafka's InetAddress.getAddress() gives it."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def address_text(data: bytes) -> str:
    if len(data) not in (4, 16):
        raise EnvelopeError(f"client address of {len(data)} bytes is neither IPv4 nor IPv6")
    return str(ipaddress.ip_address(bytes(data)))
