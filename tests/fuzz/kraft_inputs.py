"""Structure-aware KRaft inputs: bodies drawn from the declarations, and mutated frames.

Owns: `Chooser` (where every decision comes from: a Hypothesis `draw` in the
property tests, a seeded `random.Random` in the live soak, so both explore the
same space), `Aim` (what a well-aimed body names: the cluster id, the voters,
the target's id, epochs and end offsets, record batches), `draw_body`, which
walks a `Message`'s declared fields for one version (a request, or a response
to one of the node's own requests) and draws a value for each, `pick_api`,
`mutate`, which breaks a valid encoding, and `fuzz_frame`, a whole request
frame (Kafka request header included) for a live node.

Why structure-aware: a random body almost never names `__cluster_metadata`
partition 0 with the right cluster id, so it is refused at the first check and
the consensus code behind that check never sees it. Here most bodies are well
formed and well aimed, and the damage is in the values: int32/int64 bounds,
-1, 0, the last epochs (2**31-2, 2**31-1), non-voter and negative node ids,
huge and empty arrays, wrong cluster ids, topic names and partition indexes.

Rules kept here:
- Nothing is written per message: the walk is generic over `Field`s, and the
  value of a field is chosen by its type and, for integers and strings, by the
  role its name gives it (an epoch, a node id, the addressee, an offset, a
  size, a partition, an error code, a cluster id, a topic). A new version of a
  declaration is covered as it is.
- 60% of bodies are well aimed (`_Walk`): their selectors are right and their
  epochs and offsets mostly the target's, so one bad value is what they test;
  the rest may be wrong anywhere. Tagged fields are left out 40% of the time
  (a reader must cope with their defaults).
- A drawn body always encodes in the version it was drawn for (strings stay
  within int16 lengths, integers within their type); breaking the bytes is
  `mutate`'s job, so a failure to encode is a bug of this module.
- Bounded: at most `MAX_ARRAY_ITEMS` distinct array elements; at most one huge
  thing per body, an array of one element repeated (at most
  `HUGE_ARRAY_ITEMS`) or a string of at most `HUGE_STRING_CHARS`; a mutation
  adds at most a few dozen bytes.
"""

from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from hypothesis import strategies as st

from protocol.frames import encode_request
from protocol.registry import API_MESSAGES
from protocol.schema import Field, Message, Versions

from .mutations import LYING_LENGTHS

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)

FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 1, 52, 53, 54, 55, 59
KRAFT_API_KEYS = (FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT)
# The versions our own nodes speak (server/raft/messages.py WIRE_VERSIONS, plus
# DescribeQuorum's newest); drawn half of the time, any declared version otherwise.
PREFERRED_VERSIONS = {FETCH: 17, VOTE: 1, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, DESCRIBE_QUORUM: 2,
                      FETCH_SNAPSHOT: 1}

MAX_EPOCH = 2**31 - 2
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

MAX_ARRAY_ITEMS = 3
HUGE_ARRAY_ITEMS = (64, 1000, 5000)
# Below the int16 length limit of non-flexible strings, so every draw encodes.
HUGE_STRING_CHARS = 30_000
MAX_MUTATIONS = 4

_TYPE_BOUNDS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (INT32_MIN, INT32_MAX),
    "int64": (INT64_MIN, INT64_MAX),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
_GENERIC_EDGES = (0, 1, -1, -2, 2, 2**31 - 2, 2**31 - 1, -(2**31), 2**31, 2**32, 2**63 - 1, -(2**63),
                  2**15 - 1, 2**7 - 1)
_EPOCH_EDGES = (0, 1, -1, MAX_EPOCH, INT32_MAX, INT32_MIN, MAX_EPOCH - 1)
_OFFSET_EDGES = (0, 1, -1, 2**31 - 1, 2**31, 2**32, INT64_MAX, INT64_MIN, INT64_MAX - 1)
_SIZE_EDGES = (0, 1, -1, INT32_MAX, INT32_MIN, 1 << 20, 8 * 1024 * 1024)
_PARTITION_EDGES = (1, -1, INT32_MAX, INT32_MIN, 2)
_WRONG_TOPICS = ("", "__cluster_metadatA", "__consumer_offsets", "__cluster_metadata ", "ünïcödé")
# Codes a responder may send (plus -1 and 32767 from the generic edges).
_ERROR_CODES = (1, 2, 3, 6, 15, 74, 75, 76, 98, 104, 105, 106, 107, 108, 109, 121)
_WRONG_CLUSTER_IDS = ("", "AAAAAAAAAAAAAAAAAAAAAA", "not-a-cluster", "\x00")


class Chooser(Protocol):
    """Every decision a generator makes; `integer` bounds are inclusive."""

    def integer(self, lo: int, hi: int) -> int: ...

    def pick(self, options: Sequence[Any]) -> Any: ...

    def binary(self, max_size: int) -> bytes: ...


class RandomChooser:
    """Decisions from a seeded `random.Random` (the live soak: fast, replayable by seed)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]

    def binary(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))


class DrawChooser:
    """Decisions from Hypothesis (`data.draw`), so failures shrink."""

    def __init__(self, draw) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))

    def pick(self, options: Sequence[Any]) -> Any:
        return self._draw(st.sampled_from(list(options)))

    def binary(self, max_size: int) -> bytes:
        return self._draw(st.binary(max_size=max_size))


def chance(chooser: Chooser, percent: int) -> bool:
    """True with probability `percent`/100 (shrinks towards True: the well-aimed case)."""
    return chooser.integer(1, 100) <= percent


@dataclass(frozen=True, slots=True)
class Aim:
    """What a well-aimed request names; epochs and offsets are the target's (or a guess)."""

    cluster_id: str
    voters: tuple[int, ...]
    target_id: int
    epochs: tuple[int, ...] = (0, 1)
    end_offsets: tuple[int, ...] = (0, 1)
    # Ids that are not voters: an observer, a broker, a stranger.
    non_voters: tuple[int, ...] = (4, 100, 3000)
    # Valid record batches (Fetch responses carry them), e.g. at the receiver's end offset.
    records: tuple[bytes, ...] = ()
    # Tagged fields the target reads beyond the declarations, as (tag, payload): kraftwerk's
    # pre-vote flag, a voter token (right or wrong).
    known_tags: tuple[tuple[int, bytes], ...] = ()

    def node_ids(self) -> tuple[int, ...]:
        return self.voters + self.non_voters + (self.target_id,)


class _Walk:
    """The state of drawing one body: the aim, whether this body is well aimed, and the
    budget of huge things.

    A well-aimed body (most of them) gets the selectors right, so that it passes the
    boundary checks and reaches the core: the cluster id, `__cluster_metadata`,
    partition 0, exactly one topic and partition, this node as the addressee, another
    voter as the sender. Its damage is in the values (epochs, offsets, sizes). Every
    other body is wrong anywhere. Either way at most one huge thing (array or string) per
    body: two nested huge arrays would make a frame of millions of elements and test
    nothing more."""

    def __init__(self, chooser: Chooser, aim: Aim) -> None:
        self.aim = aim
        self.aimed = chance(chooser, 60)
        self.huge_left = 1

    def take_huge(self) -> bool:
        if self.huge_left <= 0:
            return False
        self.huge_left -= 1
        return True


# -- integers by role ---------------------------------------------------------

def _role_of(attr: str) -> str:
    if "error_code" in attr:
        return "error"
    if "epoch" in attr:
        return "epoch"
    if attr in ("partition", "partition_index", "index", "partitions"):
        return "partition"
    if attr == "voter_id":
        return "addressee"
    if attr.endswith("_id") or attr in ("preferred_successors",):
        return "node"
    if "offset" in attr or attr in ("position", "high_watermark", "size"):
        return "offset"
    if "bytes" in attr or attr.endswith("_ms"):
        return "size"
    return "generic"


def _fits(type_name: str, value: int) -> bool:
    lo, hi = _TYPE_BOUNDS[type_name]
    return lo <= value <= hi


def _integer(chooser: Chooser, type_name: str, attr: str, walk: _Walk) -> int:
    lo, hi = _TYPE_BOUNDS[type_name]
    aim = walk.aim
    role = _role_of(attr)
    roll = chooser.integer(1, 100)
    # A well-aimed body mostly agrees with the target (so one bad value is what it tests).
    exact = 75 if walk.aimed else 35
    if role == "epoch":
        if roll <= exact:
            options = aim.epochs  # exactly the target's: what gets past the epoch checks
        else:
            near = tuple(e + d for e in aim.epochs for d in (1, -1, 2))
            options = near if roll <= exact + 15 else _EPOCH_EDGES if roll <= 95 else None
    elif role == "addressee":
        target = (aim.target_id,)
        options = target if walk.aimed or roll <= 50 else aim.node_ids() + (-1, INT32_MAX) if roll <= 90 else None
    elif role == "node":
        others = tuple(v for v in aim.voters if v != aim.target_id) or aim.voters
        strangers = aim.node_ids() + (-1, 0, INT32_MAX, INT32_MIN)
        if walk.aimed:
            options = others if roll <= 85 else strangers
        else:
            options = aim.voters if roll <= 50 else strangers if roll <= 90 else None
    elif role == "partition":
        options = (0,) if walk.aimed or roll <= 80 else _PARTITION_EDGES if roll <= 95 else None
    elif role == "offset":
        if roll <= exact:
            options = aim.end_offsets
        else:
            near = tuple(o + d for o in aim.end_offsets for d in (1, -1, 5))
            options = near if roll <= exact + 15 else _OFFSET_EDGES if roll <= 95 else None
    elif role == "size":
        options = (500, 1 << 20) if roll <= 40 else _SIZE_EDGES if roll <= 90 else None
    elif role == "error":
        options = (0,) if roll <= 70 else _ERROR_CODES if roll <= 95 else None
    else:
        options = _GENERIC_EDGES if roll <= 60 else None
    if options is not None:
        fitting = [value for value in options if _fits(type_name, value)]
        if fitting:
            return chooser.pick(fitting)
    return chooser.integer(lo, hi)


# -- strings, uuids, bytes ------------------------------------------------------

def _string(chooser: Chooser, attr: str, walk: _Walk) -> str:
    aim = walk.aim
    roll = chooser.integer(1, 100)
    if attr == "cluster_id":
        if walk.aimed or roll <= 75:
            return aim.cluster_id
        if roll <= 95:
            return chooser.pick(_WRONG_CLUSTER_IDS + (aim.cluster_id[:-1], aim.cluster_id + "x"))
    elif attr in ("topic_name", "topic", "name"):
        if walk.aimed or roll <= 80:
            return METADATA_TOPIC
        if roll <= 95:
            return chooser.pick(_WRONG_TOPICS)
    if roll <= 98 or not walk.take_huge():
        return chooser.pick(("", "a", "CONTROLLER", "127.0.0.1", "ünïcödé"))
    # A huge string (int16 lengths still hold it).
    piece = chooser.pick(("x", "é", METADATA_TOPIC))
    return piece * (chooser.pick((1000, HUGE_STRING_CHARS)) // len(piece.encode()))


def _uuid(chooser: Chooser, attr: str, walk: _Walk) -> uuid.UUID:
    roll = chooser.integer(1, 100)
    if attr == "topic_id" and (walk.aimed or roll <= 80):
        return METADATA_TOPIC_ID
    if roll <= 90:
        return chooser.pick((uuid.UUID(int=0), METADATA_TOPIC_ID, uuid.UUID(int=(1 << 128) - 1)))
    return uuid.UUID(int=chooser.integer(0, (1 << 128) - 1))


def _records(chooser: Chooser, walk: _Walk) -> bytes:
    """Fetch `records`: a valid batch (often at the receiver's end offset), one broken by
    `mutate`, or noise."""
    roll = chooser.integer(1, 100)
    if roll <= 70 and walk.aim.records:
        records = chooser.pick(walk.aim.records)
        return records if roll <= 45 else mutate(chooser, records)
    return chooser.binary(64)


def _scalar(chooser: Chooser, type_name: str, attr: str, walk: _Walk) -> Any:
    if type_name in _TYPE_BOUNDS:
        return _integer(chooser, type_name, attr, walk)
    if type_name == "bool":
        return chooser.pick((False, True))
    if type_name == "float64":
        return chooser.pick((0.0, -1.0, 1e308))
    if type_name == "string":
        return _string(chooser, attr, walk)
    if type_name == "records":
        return _records(chooser, walk)
    if type_name == "bytes":
        return chooser.binary(64)
    if type_name == "uuid":
        return _uuid(chooser, attr, walk)
    raise ValueError(f"no values for type {type_name}")


# -- the walk ---------------------------------------------------------------------

def _present(fields: tuple[Field, ...], version: int) -> list[Field]:
    return [f for f in fields if version in Versions.parse(f.versions)]


def _array_length(chooser: Chooser, f: Field, walk: _Walk) -> int:
    roll = chooser.integer(1, 100)
    if walk.aimed and f.is_struct and roll <= 95:
        return 1  # one topic, one partition: the shape every KRaft RPC has
    if roll <= 75:
        return 1
    if roll <= 85:
        return 0
    if roll <= 98 or not walk.take_huge():
        return chooser.integer(2, MAX_ARRAY_ITEMS)
    return chooser.pick(HUGE_ARRAY_ITEMS)


def _struct(chooser: Chooser, message: Message, fields: tuple[Field, ...], version: int, walk: _Walk) -> dict:
    out: dict[str, Any] = {}
    for f in _present(fields, version):
        if version in Versions.parse(f.nullable_versions) and chance(chooser, 4):
            out[f.attr] = None
            continue
        if f.tag is not None and version in Versions.parse(f.tagged_versions) and chance(chooser, 40):
            continue  # a tagged field is optional: absent, the reader sees its default
        if f.is_struct:
            sub_fields = message.struct_fields(f.element_type, f)

            def make(sub_fields=sub_fields) -> Any:
                return _struct(chooser, message, sub_fields, version, walk)
        else:
            def make(f=f) -> Any:
                return _scalar(chooser, f.element_type, f.attr, walk)
        if not f.is_array:
            out[f.attr] = make()
            continue
        length = _array_length(chooser, f, walk)
        if length <= MAX_ARRAY_ITEMS:
            out[f.attr] = [make() for _ in range(length)]
        else:
            element = make()  # repeated: the size is in the count, not in the drawing
            out[f.attr] = [element] * length
    if message.is_flexible(version) and chance(chooser, 3):
        out["_unknown_tagged_fields"] = [(chooser.pick((90, 1000, 2**31 - 1)), chooser.binary(16))]
    return out


def draw_body(chooser: Chooser, message: Message, version: int, aim: Aim) -> dict:
    """A body for `message` at `version`: every present field, values chosen by type and role."""
    body = _struct(chooser, message, message.fields, version, _Walk(chooser, aim))
    if message.is_flexible(version) and aim.known_tags and chance(chooser, 50):
        body["_unknown_tagged_fields"] = [chooser.pick(aim.known_tags)]
    return body


def pick_api(chooser: Chooser) -> tuple[int, int]:
    """(api key, version): a KRaft API, its wire version half of the time, else any declared one."""
    api_key = chooser.pick(KRAFT_API_KEYS)
    if chance(chooser, 50):
        return api_key, PREFERRED_VERSIONS[api_key]
    lo, hi = API_MESSAGES[api_key][0].version_range
    return api_key, chooser.integer(lo, hi)


# -- bytes ---------------------------------------------------------------------------

_MUTATIONS = ("flip", "set", "truncate", "extend", "insert", "delete", "lie", "lie", "duplicate")


def mutate(chooser: Chooser, data: bytes) -> bytes:
    """`data` with one to `MAX_MUTATIONS` of: a bit flipped, a byte set, truncation,
    noise appended or inserted, a run deleted or duplicated, a lying length or count."""
    out = bytearray(data)
    for _ in range(chooser.integer(1, MAX_MUTATIONS)):
        kind = chooser.pick(_MUTATIONS)
        position = chooser.integer(0, len(out))
        if kind == "flip" and out:
            out[min(position, len(out) - 1)] ^= 1 << chooser.integer(0, 7)
        elif kind == "set" and out:
            out[min(position, len(out) - 1)] = chooser.pick((0x00, 0xFF, 0x7F, 0x80, 0x01))
        elif kind == "truncate":
            del out[position:]
        elif kind == "extend":
            out += chooser.binary(16) or b"\x00"
        elif kind == "insert":
            out[position:position] = chooser.binary(8) or b"\xff"
        elif kind == "delete":
            del out[position:position + chooser.integer(1, 8)]
        elif kind == "duplicate":
            out[position:position] = bytes(out[position:position + chooser.integer(1, 16)])
        elif kind == "lie":
            lie = chooser.pick(LYING_LENGTHS)
            if chance(chooser, 50):
                out[position:position] = lie
            else:
                out[position:position + len(lie)] = lie
    return bytes(out)


@dataclass(frozen=True, slots=True)
class FuzzFrame:
    """One request frame for a live node, and how it was made (for the report)."""

    kind: str  # "structured", "mutated_body", "mutated_frame", "lying_size"
    api_key: int
    version: int
    frame: bytes


_SIZE = struct.Struct(">i")


def fuzz_frame(chooser: Chooser, aim: Aim, correlation_id: int, max_frame_bytes: int = 8 * 1024 * 1024) -> FuzzFrame:
    """A size-prefixed request frame with the Kafka request header: a well-formed
    structure-aware request (half), its body mutated (under a correct size and a
    valid header), the whole payload mutated (header too), or under a lying size."""
    api_key, version = pick_api(chooser)
    body = draw_body(chooser, API_MESSAGES[api_key][0], version, aim)
    client_id = chooser.pick(("kraft-fuzz", None, ""))
    frame = encode_request(api_key, version, correlation_id, client_id, body)
    roll = chooser.integer(1, 100)
    if roll <= 50:
        return FuzzFrame("structured", api_key, version, frame)
    if roll <= 80:
        header_only = encode_request(api_key, version, correlation_id, client_id, {})
        header_size = len(header_only) - len(API_MESSAGES[api_key][0].encode(version, {}))
        payload = frame[4:header_size] + mutate(chooser, frame[header_size:])
        return FuzzFrame("mutated_body", api_key, version, _SIZE.pack(len(payload)) + payload)
    if roll <= 95:
        payload = mutate(chooser, frame[4:])
        return FuzzFrame("mutated_frame", api_key, version, _SIZE.pack(len(payload)) + payload)
    # A size that lies: the server must refuse it or wait for bytes that never come.
    payload = frame[4:]
    claim = chooser.pick((-1, INT32_MIN, INT32_MAX, max_frame_bytes + 1, len(payload) + 1000, max(len(payload) - 3, 0)))
    return FuzzFrame("lying_size", api_key, version, _SIZE.pack(claim) + payload)
