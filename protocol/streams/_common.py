"""What SubscriptionInfo and AssignmentInfo share: the probing prefix and the
"unknown version" result.

Owns: `UnknownVersion` (the value a decoder returns for bytes newer than it
understands), `read_prefix` (the fields every version keeps in place) and
`decode_versioned`, the one decoding entry point both messages use.

Rules kept here (KIP-268):
- Every version starts with a big-endian int32 used version; from version 3
  on the second int32 is the sender's latest supported version. Those bytes
  never move, so a reader of any release can learn both numbers from a
  message it cannot otherwise parse. That is what makes version probing work.
- Decoding never raises for a well-formed but newer message: it returns
  `UnknownVersion`. The only exception is `protocol.errors.DecodeError`, for
  bytes that are malformed (truncated, a version below 1, trailing garbage).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO

from protocol.errors import DecodeError
from protocol.schema import Message

# The first version whose prefix carries the latest supported version
# (Kafka 2.0); v1 and v2 senders have no such field.
EARLIEST_PROBEABLE_VERSION = 3
# Kafka writes -1 for "the sender did not say" (v1 and v2 messages).
UNKNOWN_SUPPORTED_VERSION = -1

_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class UnknownVersion:
    """A message newer than this reader understands, reported as a value.

    `latest_supported_version` is the sender's own latest version when the
    prefix carries it (always, for versions >= 3), else -1.
    """

    version: int
    latest_supported_version: int
    message: str

    def __str__(self) -> str:
        return (f"{self.message}: unknown version {self.version} "
                f"(sender supports up to {self.latest_supported_version})")


def read_prefix(data: bytes) -> tuple[int, int]:
    """(used version, latest supported version or -1) from any version's bytes."""
    if len(data) < 4:
        raise DecodeError(f"truncated version prefix: {len(data)} bytes")
    version = _INT32.unpack_from(data, 0)[0]
    if version < 1:
        raise DecodeError(f"invalid metadata version {version}")
    if version < EARLIEST_PROBEABLE_VERSION:
        return version, UNKNOWN_SUPPORTED_VERSION
    if len(data) < 8:
        raise DecodeError(f"truncated latest-supported-version prefix: {len(data)} bytes")
    latest = _INT32.unpack_from(data, 4)[0]
    if latest < version:
        # A sender cannot use a version it does not support.
        raise DecodeError(f"latest supported version {latest} below used version {version}")
    return version, latest


def decode_versioned(message: Message, data: bytes, reader_latest_version: int):
    """Decodes with the declaration of the version the bytes name, or reports
    `UnknownVersion` when that version is above what the reader knows.

    Returns the construct Container for known versions (the caller turns it
    into its value type), or an `UnknownVersion`.
    """
    data = bytes(data)
    version, latest = read_prefix(data)
    known_lo, known_hi = message.version_range
    if version > min(reader_latest_version, known_hi):
        return UnknownVersion(version, latest, message.name)
    stream = BytesIO(data)
    container = message.decode(version, stream)
    if stream.tell() != len(data):
        raise DecodeError(f"{message.name} v{version}: {len(data) - stream.tell()} trailing bytes")
    return container
