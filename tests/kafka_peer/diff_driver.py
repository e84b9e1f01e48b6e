"""The differential driver: one request, two controller quorums, one field-by-field diff.

Owns: `Conn` (a blocking connection that sends whole request frames or any raw bytes and
reads one answer, telling an answer from a closed connection and from silence),
`Outcome` (what a node did with one request: answered it, decoded with our codec as a
plain dict, or closed the connection, or said nothing in time), `normalise` (the values
that may differ between two healthy quorums — cluster ids, ports, topic ids, epochs that
depend on history, timestamps, throttle — replaced by placeholders), `diff` (every path
at which two plain values differ) and `Known` (an allowlisted difference: a path pattern,
the values seen on each side, and why).

Rules kept here: every read and connect is bounded (`timeout_s`); nothing is compared
before it is normalised; a list of records that name themselves (api keys, features,
configs, endpoints, voters) is compared as a mapping by that name, so order never counts
and a missing entry shows under its own name.
"""

from __future__ import annotations

import fnmatch
import re
import socket
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from construct import Container, ListContainer

from protocol.errors import DecodeError
from protocol.frames import decode_response, encode_request

IO_TIMEOUT_S = 10.0  # one answer from a controller on a loaded 2-core machine
CLIENT_ID = "kraftwerk-differential"
_SIZE = struct.Struct(">i")

ANSWERED, CLOSED, SILENT = "answered", "closed", "silent"


@dataclass(frozen=True)
class Outcome:
    """What a node did with one request."""

    kind: str  # ANSWERED, CLOSED or SILENT
    body: Any = None  # ANSWERED: the decoded response as plain dicts and lists
    correlation_id: int | None = None

    def plain(self) -> dict:
        """The shape the comparison sees: what happened, and the answer if any."""
        return {"outcome": self.kind, "response": self.body}


class Conn:
    """One blocking TCP connection to a node (127.0.0.1 only)."""

    def __init__(self, address: str, timeout_s: float = IO_TIMEOUT_S) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | str:
        """One response payload, or CLOSED (end of stream, reset) or SILENT (nothing in
        `timeout_s`)."""
        try:
            head = self._read_exactly(4)
            if head is None:
                return CLOSED
            (size,) = _SIZE.unpack(head)
            payload = self._read_exactly(size)
            return CLOSED if payload is None else payload
        except socket.timeout:
            return SILENT
        except (ConnectionResetError, BrokenPipeError):
            return CLOSED

    def _read_exactly(self, count: int) -> bytes | None:
        chunks, wanted = [], count
        while wanted:
            chunk = self.sock.recv(min(wanted, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            wanted -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, body: dict, client_id: str | None = CLIENT_ID) -> Outcome:
        correlation_id = self.next_correlation()
        try:
            self.send_raw(encode_request(api_key, version, correlation_id, client_id, body))
        except (ConnectionResetError, BrokenPipeError):
            return Outcome(CLOSED)
        return self.read_answer(api_key, version)

    def read_answer(self, api_key: int, version: int) -> Outcome:
        """The answer to a request already sent, decoded as `api_key` at `version` (an
        ApiVersions error answer as v0, KIP-511)."""
        payload = self.read_frame()
        if isinstance(payload, str):
            return Outcome(payload)
        try:
            correlation_id, response = decode_response(api_key, version, payload)
        except DecodeError as exc:
            raise AssertionError(f"undecodable answer to api {api_key} v{version}: {exc}") from None
        return Outcome(ANSWERED, plain(response), correlation_id)


def request_once(address: str, api_key: int, version: int, body: dict, client_id: str | None = CLIENT_ID) -> Outcome:
    with Conn(address) as conn:
        return conn.request(api_key, version, body, client_id)


# --------------------------------------------------------------------------
# Plain values, normalised
# --------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """A decoded construct value as dicts, lists and scalars (construct's `_io` and our
    empty `_unknown_tagged_fields` dropped)."""
    if isinstance(value, (Container, dict)):
        return {k: plain(v) for k, v in value.items()
                if not k.startswith("_io") and not (k == "_unknown_tagged_fields" and not v)}
    if isinstance(value, (ListContainer, list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


# Records that name themselves: compared as {name: record}. The first key a record has wins.
NAMING_KEYS = ("api_key", "name", "feature", "resource_name", "broker_id", "replica_id", "topic_name",
               "partition_index", "listener")

# Values that differ between two healthy quorums for no fault of either. The placeholder
# keeps "set" apart from "unset" (null, -1, 0 stay as they are), so a missing value is
# still a difference.
CLUSTER_ID_FIELDS = frozenset({"cluster_id"})
PORT_FIELDS = frozenset({"port"})
TOPIC_ID_FIELDS = frozenset({"topic_id"})
# Epochs and offsets that count what happened to each log (elections, records written).
HISTORY_FIELDS = frozenset({"finalized_features_epoch", "leader_epoch", "high_watermark", "log_end_offset",
                            "broker_epoch", "epoch"})
TIMESTAMP_FIELDS = frozenset({"last_fetch_timestamp", "last_caught_up_timestamp"})
THROTTLE_FIELDS = frozenset({"throttle_time_ms"})
# Node ids that name whichever node was elected: the quorums share ids 1-3, but which
# one leads is chance.
ELECTED_FIELDS = frozenset({"leader_id", "controller_id"})


def _placeholder(name: str, value: Any) -> Any:
    if value is None or (isinstance(value, int) and value in (-1, 0)):
        return value  # "unset" (null, -1, a default 0) is compared as it is
    if name in CLUSTER_ID_FIELDS:
        return "<cluster-id>"
    if name in PORT_FIELDS:
        return "<port>"
    if name in TOPIC_ID_FIELDS:
        return "<topic-id>" if value != "00000000-0000-0000-0000-000000000000" else value
    if name in HISTORY_FIELDS:
        return "<history>"
    if name in TIMESTAMP_FIELDS:
        return "<timestamp>"
    if name in THROTTLE_FIELDS:
        return "<throttle>"
    if name in ELECTED_FIELDS:
        return "<elected>"
    return value


# Messages that name the node answering (which one was elected is chance).
_ANSWERING_NODE = re.compile(r"\bLocal controller \d+\b")


def normalise(value: Any, field_name: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalise(v) for v in value]
        if items and all(isinstance(i, dict) for i in items):
            for key in NAMING_KEYS:
                if all(key in i for i in items):
                    names = [i[key] for i in items]
                    if len(set(map(repr, names))) == len(names):
                        return {f"{key}={n}": i for n, i in zip(names, items)}
        return items
    if field_name == "error_message" and isinstance(value, str):
        return _ANSWERING_NODE.sub("Local controller <elected>", value)
    return _placeholder(field_name, value)


# --------------------------------------------------------------------------
# The diff
# --------------------------------------------------------------------------

MISSING = "<missing>"


@dataclass(frozen=True)
class Difference:
    path: str
    kafka: Any
    kraftwerk: Any

    def __str__(self) -> str:
        return f"{self.path}: kafka={self.kafka!r} kraftwerk={self.kraftwerk!r}"


def diff(kafka: Any, kraftwerk: Any, path: str = "") -> list[Difference]:
    """Every path at which the two plain values differ (a key one side lacks shows as
    MISSING on that side)."""
    if isinstance(kafka, dict) and isinstance(kraftwerk, dict):
        found = []
        for key in list(kafka) + [k for k in kraftwerk if k not in kafka]:
            sub = f"{path}.{key}" if path else str(key)
            found += diff(kafka.get(key, MISSING), kraftwerk.get(key, MISSING), sub)
        return found
    if isinstance(kafka, list) and isinstance(kraftwerk, list) and len(kafka) == len(kraftwerk):
        found = []
        for index, (a, b) in enumerate(zip(kafka, kraftwerk)):
            found += diff(a, b, f"{path}[{index}]")
        return found
    return [] if kafka == kraftwerk else [Difference(path, kafka, kraftwerk)]


ANY = object()


@dataclass(frozen=True)
class Known:
    """A difference kept on purpose (or not fixed yet): `path` is an fnmatch pattern over
    the diff's paths; `kafka`/`kraftwerk` the values expected there (ANY: whatever);
    `reason` says why, and docs/kip-differences.md has the row."""

    path: str
    reason: str
    kafka: Any = ANY
    kraftwerk: Any = ANY

    def matches(self, difference: Difference) -> bool:
        return (fnmatch.fnmatchcase(difference.path, self.path)
                and (self.kafka is ANY or self.kafka == difference.kafka)
                and (self.kraftwerk is ANY or self.kraftwerk == difference.kraftwerk))


def unexplained(differences: list[Difference], known: tuple[Known, ...]) -> tuple[list[Difference], list[Known]]:
    """(the differences no Known entry explains, the Known entries that explained nothing)."""
    left = [d for d in differences if not any(k.matches(d) for k in known)]
    unused = [k for k in known if not any(k.matches(d) for d in differences)]
    return left, unused
