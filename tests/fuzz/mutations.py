"""Byte-level mutations of valid encodings, as Hypothesis strategies.

Owns: `mutated(seed, donors)`, which turns one valid encoding into a hostile
one, and `LYING_LENGTHS`, the length prefixes and counts an attacker would
write (huge, negative, overlong) in every wire form Kafka uses.

Why mutate valid encodings rather than only draw random bytes: random bytes
almost never get past a message's first length prefix, so the decoder paths
behind it (nested arrays, tagged sections, compact strings deep in a struct)
would never see bad input. A valid encoding with one or two bytes changed
reaches all of them.

Rules kept here:
- Each mutation is one of: flip a bit, overwrite a byte, truncate, extend
  with noise, insert noise, delete a run, splice in a slice of another valid
  encoding (a donor), duplicate a slice of itself, or write a lying length
  (insert or overwrite) at any position, since lengths are where decoders
  allocate.
- Sizes stay small (a mutated input is at most the seed plus a few dozen
  bytes), so every property runs on bounded input and must terminate.
"""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from protocol.primitives import encode_uvarint, encode_varint, encode_varlong

# int16 lengths (classic strings): the maximum, the minimum, -1 (null), -2.
_INT16 = [struct.pack(">h", n) for n in (0x7FFF, -0x8000, -1, -2)]
# int32 lengths and counts (classic bytes and arrays, record batch fields).
_INT32 = [struct.pack(">i", n) for n in (0x7FFFFFFF, -0x80000000, -1, -2, 1 << 28, 1 << 20)]
# Unsigned varints (compact lengths and counts, tag numbers and tag sizes):
# the 32-bit maximum, 2**31, 2**27, 0 (compact null) and two overlong forms
# that no valid writer produces (6 and 11 bytes).
_UVARINT = [encode_uvarint(n) for n in (0xFFFFFFFF, 1 << 31, 1 << 27, 0)] + [
    b"\x80\x80\x80\x80\x80\x01",
    b"\xff" * 10 + b"\x01",
]
# Zigzag varints and varlongs (record batch record lengths, key/value sizes).
_ZIGZAG = [encode_varint(n) for n in (0x7FFFFFFF, -(1 << 31), -2, 1 << 30)] + [
    encode_varlong(1 << 62),
    encode_varlong(-(1 << 63)),
    b"\xff" * 9 + b"\x7f",  # a 10-byte varlong whose value exceeds 64 bits
]

LYING_LENGTHS: tuple[bytes, ...] = tuple(_INT16 + _INT32 + _UVARINT + _ZIGZAG)

_KINDS = ("flip", "set", "truncate", "extend", "insert", "delete", "splice", "duplicate", "lie", "lie")


@st.composite
def mutated(draw, seed: bytes, donors: tuple[bytes, ...] = (), max_mutations: int = 4) -> bytes:
    """`seed` with one to `max_mutations` mutations applied in sequence."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, max_mutations))):
        kind = draw(st.sampled_from(_KINDS))
        position = draw(st.integers(0, len(data)))
        if kind == "flip":
            if data:
                data[min(position, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            if data:
                data[min(position, len(data) - 1)] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[position:]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=16))
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[position:position + draw(st.integers(1, 8))]
        elif kind == "splice":
            donor = draw(st.sampled_from(donors)) if donors else bytes(data)
            start = draw(st.integers(0, len(donor)))
            piece = donor[start:start + draw(st.integers(1, 32))]
            if draw(st.booleans()):
                data[position:position] = piece
            else:
                data[position:position + len(piece)] = piece
        elif kind == "duplicate":
            piece = bytes(data[position:position + draw(st.integers(1, 16))])
            data[position:position] = piece
        else:  # lie: a hostile length prefix or count, inserted or written over
            lie = draw(st.sampled_from(LYING_LENGTHS))
            if draw(st.booleans()):
                data[position:position] = lie
            else:
                data[position:position + len(lie)] = lie
    return bytes(data)
