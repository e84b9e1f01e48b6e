"""KIP-853 voters as the operator writes them: `storage format --initial-controllers`.

Owns: parsing `id@host:port:directoryid[,...]` into `DynamicVoter`s, with Kafka 4.4.0's
refusal texts (raft.DynamicVoter / raft.DynamicVoters), and the voter `--standalone`
makes of the node itself.

Rules kept here:
- Pure functions over strings; every refusal is a `DynamicVoterError` carrying Kafka's
  exact message, so the CLI prints it as a clean error (Kafka lets the exception escape
  with a stack trace; the words are the same).
- The checks run in Kafka's order (id, host, port, directory id), so the first refusal
  is the one Kafka gives. Java's integer and base64 rules are kept: `+1` is a node id,
  ` 1` is not; a directory id is 16 bytes of URL-safe base64, with or without `==`.
- A host is kept as written, except an IPv6 literal, which Kafka's VotersRecord holds in
  Java's spelling (`[::1]` -> `0:0:0:0:0:0:0:1`).
- Voters come back sorted by node id (Kafka keeps them in a sorted map); a node id given
  twice is refused.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import uuid
from dataclasses import dataclass

# Java's Integer.parseInt: an optional sign, then digits; nothing else (no blanks, no '_').
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
# Java's Uuid.fromString refuses longer input before decoding.
_MAX_UUID_TEXT = 24
MAX_PORT = 65535


class DynamicVoterError(ValueError):
    """An `--initial-controllers` value Kafka refuses; the message is Kafka's."""


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID


def _java_int(text: str) -> int | None:
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def _java_trim(text: str) -> str:
    # String.trim(): every character up to U+0020 at either end.
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def parse_directory_id(text: str) -> uuid.UUID | None:
    """Kafka's Uuid.fromString: URL-safe base64 of 16 bytes (padding optional); None if not."""
    if len(text) > _MAX_UUID_TEXT:
        return None
    body = text[:-2] if text.endswith("==") else text
    if not _BASE64URL.fullmatch(body) or len(body) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def java_host_string(host: str) -> str:
    """The host as Kafka's InetSocketAddress gives it back: an IPv6 literal in Java's
    uncompressed form, anything else unchanged."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        # Java turns an IPv4-mapped literal into the IPv4 address itself.
        return str(address.ipv4_mapped)
    groups = ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))
    return groups + (f"%{address.scope_id}" if address.scope_id else "")


def parse_dynamic_voter(text: str) -> DynamicVoter:
    """One `id@host:port:directoryid` (an IPv6 host in brackets)."""
    rest = _java_trim(text)
    at = rest.find("@")
    if at < 0:
        raise DynamicVoterError("No @ found in dynamic voter string.")
    if at == 0:
        raise DynamicVoterError("Invalid @ at beginning of dynamic voter string.")
    node_id = _java_int(rest[:at])
    if node_id is None:
        raise DynamicVoterError("Failed to parse node id in dynamic voter string.")
    if node_id < 0:
        raise DynamicVoterError(f"Invalid negative node id {node_id} in dynamic voter string.")
    rest = rest[at + 1:]
    if not rest:
        raise DynamicVoterError("No hostname found after node id.")
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise DynamicVoterError("Hostname began with left bracket, but no right bracket was found.")
        host, rest = rest[1:close], rest[close + 1:]
    else:
        colon = rest.find(":")
        if colon < 0:
            raise DynamicVoterError("No colon following hostname could be found.")
        host, rest = rest[:colon], rest[colon:]
    if not rest.startswith(":"):
        raise DynamicVoterError("Port section must start with a colon.")
    rest = rest[1:]
    colon = rest.find(":")
    if colon < 0:
        raise DynamicVoterError("No colon following port could be found.")
    port = _java_int(rest[:colon])
    if port is None:
        raise DynamicVoterError("Failed to parse port in dynamic voter string.")
    if not 0 <= port <= MAX_PORT:
        raise DynamicVoterError(f"Invalid port {port} in dynamic voter string.")
    directory_id = parse_directory_id(rest[colon + 1:])
    if directory_id is None:
        raise DynamicVoterError("Failed to parse directory ID in dynamic voter string.")
    return DynamicVoter(node_id, java_host_string(host), port, directory_id)


def parse_dynamic_voters(text: str) -> tuple[DynamicVoter, ...]:
    """`--initial-controllers`: comma-separated voters (empty items skipped), by node id."""
    voters: dict[int, DynamicVoter] = {}
    for item in _java_trim(text).split(","):
        if not item:
            continue
        voter = parse_dynamic_voter(item)
        if voter.node_id in voters:
            raise DynamicVoterError(f"Node id {voter.node_id} was specified more than once.")
        voters[voter.node_id] = voter
    if not voters:
        raise DynamicVoterError("No voters given.")
    return tuple(voters[node_id] for node_id in sorted(voters))


def standalone_voter(node_id: int, host: str | None, port: int, directory_id: uuid.UUID) -> DynamicVoter:
    """The voter `--standalone` makes of this node: its first advertised controller
    listener (no host -> `localhost`, as Kafka) and a fresh directory id."""
    return DynamicVoter(node_id, java_host_string(host or "localhost"), port, directory_id)
