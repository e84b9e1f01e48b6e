"""ApiVersions (key 18, v0-5): what this node speaks and which features it has.

KIP-511: v3+ carries the client's software name and version, validated
against Kafka's pattern (INVALID_REQUEST otherwise). KIP-584: v3+ carries
SupportedFeatures, FinalizedFeaturesEpoch and FinalizedFeatures as tagged
fields. KIP-778: the API versions listed are those the finalized
metadata.version allows (server/gating.py), so they change with it. The encoded body is cached per (version, finalized epoch) because it
only changes when features change, and ApiVersions is the hottest request.
Every connection starts with it, so its usual body is read in place
(`request_decoder`, the catalog's decoder for it), falling back to the
declaration for anything else: it decodes and fails exactly where the
declaration does (tests/server/test_request_path.py compares them). Clients of one
software send byte-identical requests, so whole answers are memoized by the request's
bytes (`AnswerMemo`, one per version, kept by the dispatcher), valid only while the node
hands out the same advertised table and the same encoded body.

The connection remembers the ranges it was told (`Connection.remember_advertised`):
after a metadata.version change the dispatcher answers a request inside them that
the new level gates away with UNSUPPORTED_VERSION instead of closing, and the node
closes only connections whose answer went stale. A client naming kraftwerk's node
software (the peers of server/net/peer.py) asks again on its own after a change,
so its connection is never closed for it.

KIP-1242 (v5): a client that names the cluster it means to reach (ClusterId) and this
node's id (NodeId) and finds another cluster or another node behind the address gets
REBOOTSTRAP_REQUIRED with no API list, as Kafka's brokers answer it: its metadata is
stale. Kafka's controllers do not check (a client bootstrapped from the controllers asks
any of them), and neither do kraftwerk's. It names both or neither (INVALID_REQUEST
otherwise, Kafka's isValid), on every node.
"""

from __future__ import annotations

import re
import struct
from functools import partial
from io import BytesIO

from construct import Container

from protocol.errors import ErrorCode
from server.api.context import FeatureViews, NodeServices
from server.net.peer import SOFTWARE_NAME as NODE_SOFTWARE_NAME

SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


_INT32 = struct.Struct(">i")


def request_decoder(message, version: int):
    """A decoder `(frame, body offset) -> body` of ApiVersions requests of `version`,
    giving what `message.decode` gives and failing where it fails. The usual v3+ body
    (compact strings shorter than 127 bytes, valid UTF-8, v5's ClusterId and NodeId, no
    tagged fields) is read in place; anything else goes through the declaration, which
    also words the errors. Every connection starts with this request."""

    def declared(frame: bytes, offset: int):
        stream = BytesIO(frame)
        stream.seek(offset)
        return message.decode(version, stream)

    if version < 3:  # no body fields: nothing to read in place
        return declared

    def decode(frame: bytes, offset: int):
        end = len(frame)
        # A compact string shorter than 127 bytes: its length + 1 in one byte (1..127).
        if offset < end and 0 < frame[offset] < 0x80:
            name_end = offset + frame[offset]
            if name_end < end and 0 < frame[name_end] < 0x80:
                version_end = name_end + frame[name_end]
                position = version_end
                cluster_id = None
                node_id = -1
                usual = position < end
                if usual and version >= 5:
                    # ClusterId: a compact nullable string (0 = null); NodeId: int32.
                    size = frame[position]
                    if size >= 0x80:
                        usual = False
                    else:
                        if size:
                            try:
                                cluster_id = frame[position + 1:position + size].decode("utf-8")
                            except UnicodeDecodeError:
                                usual = False
                        position += max(size, 1)
                        if usual and position + 4 < end:
                            node_id = _INT32.unpack_from(frame, position)[0]
                            position += 4
                        else:
                            usual = False
                if usual and frame[position] == 0:  # no tagged fields
                    try:
                        name = frame[offset + 1:name_end].decode("utf-8")
                        software_version = frame[name_end + 1:version_end].decode("utf-8")
                    except UnicodeDecodeError:
                        pass
                    else:
                        body = Container()
                        body["cluster_id"] = cluster_id
                        body["node_id"] = node_id
                        body["client_software_name"] = name
                        body["client_software_version"] = software_version
                        return body
        return declared(frame, offset)

    return decode


# Requests longer than this (header included) are never memoized: the usual ones are
# 20-80 bytes, and the key is the request's bytes.
MEMO_MAX_FRAME_BYTES = 512
# Distinct requests remembered per (version) memo; a full memo starts over, so a client
# sending ever new software names costs only misses.
MEMO_MAX_ENTRIES = 256
_MEMO_KEY_OFFSET = 8  # api key, api version, correlation id: the rest decides the answer


class AnswerMemo:
    """Whole ApiVersions answers of one request version, by the request's bytes after
    the correlation id (client id, header tags, body), shared by a node's connections:
    every client of one software name and version sends the same bytes. The answer is
    a function of those bytes, the node's advertised table (KIP-778 gating) and the
    node's encoded body for the version (its features and their epoch): an entry is
    used only while both are the very objects it was made with (the node replaces,
    never mutates, them on a change), and never for a connection the dispatcher would
    not answer at once (gated, behind the read barrier, authorizer rule, debug logging:
    the dispatcher's checks). A hit repeats what `handle` does to the connection.
    Learned only from answers `handle` gave, refusals (INVALID_REQUEST,
    REBOOTSTRAP_REQUIRED) included, so they stay exactly Kafka's."""

    __slots__ = ("version", "_response", "_entries")

    def __init__(self, response, version: int) -> None:
        self.version = version
        self._response = response
        # key -> (advertised table, served body, answer body, software or None,
        #         renegotiates, accepted)
        self._entries: dict[bytes, tuple] = {}

    def token(self, services):
        """What an entry must have been made with besides the advertised table: the
        node's encoded body for this version (a new object whenever features move)."""
        return services.api_versions_body(self.version)

    def token_reader(self, services):
        """`token` as a call without arguments, for a caller that keeps it per node."""
        return partial(services.api_versions_body, self.version)

    def recall(self, frame: bytes, connection, ranges: dict, token) -> bytes | None:
        """The encoded answer body to `frame` when known and made under `ranges` and
        `token` (the node's current ones; the connection updated as `handle` would),
        else None."""
        entry = self._entries.get(frame[_MEMO_KEY_OFFSET:])
        if entry is None or entry[0] is not ranges or entry[1] is not token:
            return None
        if entry[5]:
            if entry[3] is not None:
                connection.client_software = entry[3]
                connection.renegotiates = entry[4]
            if connection.advertised is not ranges or connection.closing:
                # (Told these very ranges already and no close pending: nothing to do.)
                connection.remember_advertised(ranges)
        return entry[2]

    def learn(self, frame: bytes, request, answer, ranges: dict, services) -> None:
        """Remembers `answer` (what `handle` returned for `request`, decoded from
        `frame`, judged under `ranges`)."""
        if len(frame) > MEMO_MAX_FRAME_BYTES:
            return
        served = self.token(services)
        accepted = answer is served
        if not accepted and answer.__class__ is not dict:
            return  # not an answer `handle` gives (accepted: the served body; refused: a dict)
        software = None
        renegotiates = False
        if accepted and self.version >= 3:
            software = (request["client_software_name"], request["client_software_version"])
            renegotiates = software[0] == NODE_SOFTWARE_NAME
        body = answer if answer.__class__ is bytes else self._response.encode(self.version, answer)
        entries = self._entries
        if len(entries) >= MEMO_MAX_ENTRIES:
            entries.clear()
        entries[frame[_MEMO_KEY_OFFSET:]] = (ranges, served, body, software, renegotiates, accepted)


def answer_memo(response, version: int) -> AnswerMemo:
    return AnswerMemo(response, version)


def _refusal(code: int) -> dict:
    # As Kafka's: only an UNSUPPORTED_VERSION answer lists versions (the dispatcher's).
    return {"error_code": code, "api_keys": [], "throttle_time_ms": 0}


def handle(ctx, request):
    services: NodeServices = ctx.services
    version = ctx.api_version
    # Fields are read as items: an attribute of a decoded message is found only after a
    # failed ordinary lookup (an AttributeError per read), and this is the hottest request.
    # Kafka's order: a malformed request (v5: ClusterId and NodeId come both or neither;
    # v3+: the software name and version), then one meant for another node (KIP-1242).
    if version >= 5:
        cluster_id = request["cluster_id"]
        node_id = request["node_id"]
        if (cluster_id is None) != (node_id == -1):
            return _refusal(ErrorCode.INVALID_REQUEST)
    if version >= 3:
        name = request["client_software_name"]
        software_version = request["client_software_version"]
        if not (SOFTWARE_PATTERN.fullmatch(name) and SOFTWARE_PATTERN.fullmatch(software_version)):
            return _refusal(ErrorCode.INVALID_REQUEST)
    if version >= 5 and services.is_broker and cluster_id is not None and (
            cluster_id != services.cluster_id or node_id != services.node_id):
        return _refusal(ErrorCode.REBOOTSTRAP_REQUIRED)
    connection = ctx.connection
    if version >= 3:
        connection.client_software = (name, software_version)
        connection.renegotiates = name == NODE_SOFTWARE_NAME
    # Read together with the body (a sync handler: no level change in between), so the
    # connection remembers exactly the ranges this answer lists.
    ranges = ctx.advertised
    connection.remember_advertised(ranges if ranges is not None else services.advertised_ranges())
    return services.api_versions_body(version)


def build_body(views: FeatureViews, version: int) -> dict:
    # KIP-778: only the versions the finalized metadata.version allows (server/gating.py).
    api_keys = [
        {"api_key": api_key, "min_version": min_version, "max_version": max_version}
        for api_key, (min_version, max_version) in sorted(views.advertised_ranges().items())
    ]
    body = {"error_code": ErrorCode.NONE, "api_keys": api_keys, "throttle_time_ms": 0}
    if version >= 3:
        supported = []
        for name, (min_level, max_level) in sorted(views.supported_features().items()):
            # KAFKA-17011: before v4, a minimum of 0 confuses old clients, so
            # such features are left out.
            if version < 4 and min_level == 0:
                continue
            supported.append({"name": name, "min_version": min_level, "max_version": max_level})
        body["supported_features"] = supported
        body["finalized_features_epoch"] = views.finalized_features_epoch()
        body["finalized_features"] = [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(views.finalized_levels().items())
            if level > 0 or name == "metadata.version"
        ]
        body["zk_migration_ready"] = False
    return body
