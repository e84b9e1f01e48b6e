"""Decoders take any bytes: they succeed or raise `DecodeError`, nothing else.

Inputs: random bytes, and mutations of valid encodings (bit flips,
truncations, insertions, overwrites with huge length prefixes), for every
(message, version) the protocol layer declares, the headers and the metadata
record frame. A huge declared string/bytes/array length in a small buffer
must fail fast and must never be acted on: every decode of such an input is
audited read by read (tests/fuzz/claim_audit.py), so a read larger than the
unchecked minimum must fit in what remains of the input (the decoder never asks
for, so never allocates, what the claim says) and the number of reads stays
within a few per input byte (a claimed count cannot drive a loop past the
input). Both are pure functions of the input: the verdict does not depend on
the allocator's state or on the machine's load, as a heap peak did.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import header, metadata_records, raft_records
from protocol.errors import DecodeError
from protocol.records import decode_metadata_record
from protocol.registry import API_MESSAGES
from protocol.schema import Message
from strategies import all_versions, rich_value

from fuzz.claim_audit import ClaimViolation, audited_decode

MESSAGES: list[Message] = [m for api_key in sorted(API_MESSAGES) for m in API_MESSAGES[api_key]]
for _module in (metadata_records, raft_records, header):
    MESSAGES += [m for m in vars(_module).values() if isinstance(m, Message)]

CASES = [(m, v) for m in MESSAGES for v in all_versions(m)]
CASE_IDS = [f"{m.name}-v{v}" for m, v in CASES]
SEEDS = {(m.name, v): m.encode(v, rich_value(m, v)) for m, v in CASES}

# Length prefixes that claim far more than any test buffer holds:
# int16 0x7fff, int32 0x7fffffff, uvarint 0xffffffff (the 5-byte maximum).
HUGE_PREFIXES = (b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f")


def decode_or_decode_error(message: Message, version: int, data: bytes) -> None:
    try:
        message.decode(version, data)
    except DecodeError:
        pass


def test_rich_seeds_decode():
    # The mutation seeds must themselves be valid, or the fuzzing below
    # would only ever explore the first bytes.
    for (m, v), data in zip(CASES, SEEDS.values()):
        assert m.encode(v, m.decode(v, data)) == data


@pytest.mark.parametrize(("message", "version"), CASES, ids=CASE_IDS)
def test_every_truncation_and_bit_flip(message, version):
    seed = SEEDS[(message.name, version)]
    for cut in range(len(seed)):
        # A strict prefix can still decode when the tail is optional-looking,
        # but it must never raise anything else.
        decode_or_decode_error(message, version, seed[:cut])
    for position in range(len(seed)):
        for bit in (0, 3, 7):
            flipped = bytearray(seed)
            flipped[position] ^= 1 << bit
            decode_or_decode_error(message, version, bytes(flipped))


@pytest.mark.parametrize(("message", "version"), CASES, ids=CASE_IDS)
def test_huge_length_prefixes_fail_fast_without_allocating(message, version):
    seed = SEEDS[(message.name, version)]
    inputs = []
    for position in range(len(seed) + 1):
        for prefix in HUGE_PREFIXES:
            inputs.append(seed[:position] + prefix + seed[position:])  # insertion
            inputs.append(seed[:position] + prefix + seed[position + len(prefix):])  # overwrite
    for data in inputs:
        try:
            audited_decode(lambda raw: decode_or_decode_error(message, version, raw), data)
        except ClaimViolation as exc:
            raise ClaimViolation(f"{message.name} v{version}: {exc}; input {data.hex()}") from None


def test_huge_array_count_in_tiny_buffer_is_rejected():
    # ApiVersionsResponse v0: error code, then a classic array count claiming
    # 2**31-1 entries with nothing behind it.
    _, response = API_MESSAGES[18]
    with pytest.raises(DecodeError):
        response.decode(0, b"\x00\x00\x7f\xff\xff\xff")
    # The flexible form: a uvarint count of 2**32-2 entries.
    with pytest.raises(DecodeError):
        response.decode(3, b"\x00\x00\xff\xff\xff\xff\x0f")


def test_overlong_uvarint_is_rejected():
    request, _ = API_MESSAGES[18]
    with pytest.raises(DecodeError):
        request.decode(3, b"\x80\x80\x80\x80\x80\x01")


@settings(max_examples=400)
@given(case=st.sampled_from(CASES), data=st.binary(max_size=96))
def test_random_bytes(case, data):
    message, version = case
    decode_or_decode_error(message, version, data)


@st.composite
def mutated_seeds(draw):
    message, version = draw(st.sampled_from(CASES))
    data = bytearray(SEEDS[(message.name, version)])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "huge"]))
        position = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            data[min(position, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[position:]
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=6))
        elif kind == "delete":
            del data[position:position + draw(st.integers(1, 4))]
        elif kind == "huge":
            data[position:position] = draw(st.sampled_from(HUGE_PREFIXES))
    return message, version, bytes(data)


@settings(max_examples=600)
@given(mutated_seeds())
def test_mutated_valid_encodings(mutation):
    message, version, data = mutation
    decode_or_decode_error(message, version, data)


@settings(max_examples=200)
@given(data=st.binary(max_size=64))
def test_metadata_record_frame_decoder(data):
    try:
        decode_metadata_record(data)
    except DecodeError:
        pass


@settings(max_examples=200)
@given(case=st.sampled_from([(m, v) for m, v in CASES if m.type == "metadata"]), noise=st.binary(max_size=8))
def test_metadata_record_frame_with_valid_prefix(case, noise):
    message, version = case
    framed = bytes([1, message.api_key, version]) + SEEDS[(message.name, version)]
    for cut in (len(framed) // 2, len(framed)):
        try:
            decode_metadata_record(framed[:cut] + noise)
        except DecodeError:
            pass
