"""Hostile connection payloads from a seeded `random.Random` (no I/O here).

Owns: `HostilePlan`, one hostile connection (the bytes it sends and how it
ends), and `hostile_plan(rng, index)`, which draws one. The same seed always
gives the same plans, so a failure of the live-server test reproduces from
the seed it prints.

Kinds of connection, cycling through every API in `protocol.registry`:
- random bytes;
- a valid request frame (every API, every declared version, including ones
  the server does not serve) whose header and body were mutated, with the
  size prefix recomputed so the server really decodes (and maybe handles) it;
- a valid frame under a lying size prefix: negative, over the limit, 2 GiB,
  claiming more than follows (the server must wait, then see EOF), or less
  (the rest is read as the next frame);
- a valid frame truncated, then EOF;
- a pipeline: a few valid requests, then one of the above.
Each connection then either half-closes and reads until the server closes,
or just closes.

Rules kept here:
- Requests are built from kraftwerk's declarations, with values drawn from
  `rng`; strings never name a real feature or the cluster id, so a hostile
  request that happens to be valid cannot change what the well-behaved client
  checks (it may create a topic or fail a registration, which is fine).
"""

from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from protocol.frames import encode_request
from protocol.registry import API_MESSAGES
from protocol.schema import Field, Message
from strategies import all_versions, in_version, present_fields

from .mutations import LYING_LENGTHS

API_KEYS = tuple(sorted(API_MESSAGES))
KINDS = ("random", "mutated", "mutated", "lying_size", "truncated", "pipeline")

_STRINGS = ("", "a", "ab", "topic-1", "__cluster_metadata", "User:alice", "*", "ünïcödé", "x" * 40)
_INT_EDGES = {
    "int8": (0, 1, -1, 127, -128),
    "int16": (0, 1, -1, 32767, -32768),
    "int32": (0, 1, -1, 2**31 - 1, -(2**31)),
    "int64": (0, 1, -1, 2**63 - 1, -(2**63)),
    "uint16": (0, 1, 65535),
    "uint32": (0, 1, 2**32 - 1),
}


@dataclass(frozen=True)
class HostilePlan:
    kind: str
    api_key: int
    payload: bytes
    half_close: bool  # True: send EOF and read until the server closes; False: just close

    def describe(self) -> str:
        return f"{self.kind} api={self.api_key} half_close={self.half_close} payload={self.payload[:64].hex()}..."


def random_value(message: Message, version: int, rng: random.Random) -> dict:
    """A value for `message` at `version` from the declarations, edges favoured."""
    def scalar(type_name: str) -> Any:
        if type_name in _INT_EDGES:
            edges = _INT_EDGES[type_name]
            return rng.choice(edges) if rng.random() < 0.6 else rng.randint(min(edges), max(edges))
        if type_name == "bool":
            return rng.random() < 0.5
        if type_name == "float64":
            return rng.choice((0.0, -1.5, 1e300))
        if type_name == "string":
            return rng.choice(_STRINGS)
        if type_name in ("bytes", "records"):
            return rng.randbytes(rng.randint(0, 24))
        if type_name == "uuid":
            return uuid.UUID(int=rng.getrandbits(128)) if rng.random() < 0.7 else uuid.UUID(int=0)
        raise ValueError(type_name)

    def struct_value(fields: tuple[Field, ...]) -> dict:
        out = {}
        for f in present_fields(fields, version):
            if in_version(f.nullable_versions, version) and rng.random() < 0.15:
                out[f.attr] = None
                continue
            if f.is_struct:
                def make() -> Any:
                    return struct_value(message.struct_fields(f.element_type, f))
            else:
                def make() -> Any:
                    return scalar(f.element_type)
            out[f.attr] = [make() for _ in range(rng.randint(0, 3))] if f.is_array else make()
        return out

    return struct_value(message.fields)


def valid_frame(rng: random.Random, api_key: int, version: int | None = None) -> bytes:
    request = API_MESSAGES[api_key][0]
    if version is None:
        version = rng.choice(all_versions(request))
    body = random_value(request, version, rng)
    client_id = rng.choice((None, "", "hostile", "x" * 100))
    return encode_request(api_key, version, rng.randint(-(2**31), 2**31 - 1), client_id, body)


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(("flip", "set", "truncate", "extend", "insert", "delete", "lie", "lie"))
        position = rng.randint(0, len(out))
        if kind == "flip" and out:
            out[min(position, len(out) - 1)] ^= 1 << rng.randint(0, 7)
        elif kind == "set" and out:
            out[min(position, len(out) - 1)] = rng.randrange(256)
        elif kind == "truncate":
            del out[position:]
        elif kind == "extend":
            out += rng.randbytes(rng.randint(1, 16))
        elif kind == "insert":
            out[position:position] = rng.randbytes(rng.randint(1, 8))
        elif kind == "delete":
            del out[position:position + rng.randint(1, 8)]
        elif kind == "lie":
            lie = rng.choice(LYING_LENGTHS)
            if rng.random() < 0.5:
                out[position:position] = lie
            else:
                out[position:position + len(lie)] = lie
    return bytes(out)


def _reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _hostile_part(rng: random.Random, kind: str, api_key: int, max_frame_bytes: int) -> bytes:
    if kind == "random":
        return rng.randbytes(rng.randint(0, 300))
    frame = valid_frame(rng, api_key)
    if kind == "mutated":
        # Mutate header and body (never the prefix): the server decodes what we broke.
        return _reframe(mutate(rng, frame[4:]))
    if kind == "lying_size":
        body = frame[4:]
        claim = rng.choice((
            -1, -(2**31), 2**31 - 1, max_frame_bytes + 1, max_frame_bytes,
            len(body) + rng.randint(1, 10_000), max(len(body) - rng.randint(1, 8), 0),
        ))
        return struct.pack(">i", claim) + body
    if kind == "truncated":
        return frame[:rng.randint(1, len(frame) - 1)]
    raise ValueError(kind)


def hostile_plan(rng: random.Random, index: int, max_frame_bytes: int) -> HostilePlan:
    """The `index`-th hostile connection; its API cycles through every key."""
    api_key = API_KEYS[index % len(API_KEYS)]
    kind = rng.choice(KINDS)
    if kind == "pipeline":
        prefix = b"".join(valid_frame(rng, rng.choice(API_KEYS)) for _ in range(rng.randint(1, 3)))
        tail_kind = rng.choice(("random", "mutated", "lying_size", "truncated"))
        payload = prefix + _hostile_part(rng, tail_kind, api_key, max_frame_bytes)
    else:
        payload = _hostile_part(rng, kind, api_key, max_frame_bytes)
    return HostilePlan(kind, api_key, payload, half_close=rng.random() < 0.8)
