"""Every decoder, fed hostile bytes: it succeeds or raises `DecodeError`, within a memory bound.

Run: `.venv/bin/pytest -q tests/fuzz` (CI budget, derandomized);
`FUZZ_EXAMPLES=50 .venv/bin/pytest -q tests/fuzz` for a nightly-style run with
50x the examples and fresh randomness (tests/fuzz/budget.py).

Builds on tests/protocol/test_fuzz_decoders.py, which mutates ONE
fixed seed per (message, version) (`rich_value`) and checks allocation over
a whole batch of inputs at once. Here:
- the seeds are drawn from the protocol tests' Hypothesis value strategies
  (`strategies.message_values`), so the mutated inputs start from every shape
  a message can take (null vs empty arrays, unknown tagged fields, long and
  short compact lengths), and the fixed rich seed is only a splice donor;
- every single decode is measured with tracemalloc against a bound
  proportional to ITS input (below);
- beyond the message bodies: whole request frames the way the dispatcher
  reads them (peek, header, body on one stream), response frames the way
  `KafkaClient` reads them, the metadata record frame, and record batches,
  with the CRC recomputed after mutation so the damage reaches the record
  parser instead of stopping at the checksum.

The allocation bound, found by measurement (CPython 3.11, tracemalloc peak of
one decode minus what was allocated before it):
- mutated and random inputs of up to ~150 bytes peak at 1-6.5 KB (the
  decoded Containers, one exception with its traceback, the compiled parser's
  frames): the constant is 64 KiB, ten times that;
- the densest input found is a classic array count followed by as many
  elements as fit, each element as small as the format allows: MetadataRequest
  v0-7, topics of empty int16 strings, 2 bytes per element, each decoding to a
  Container (a dict) of ~250 bytes: 114-124 B of heap per input byte, and no
  message did worse over all (message, version) pairs with 600- and 2000-byte
  paddings of 0x00 and 0x01. The slope is 256 B per input byte, twice that.
So `peak <= 64 KiB + 256 * len(input)`. A 10-byte frame may therefore
allocate at most ~66 KB, and one claiming a 2 GB array cannot get far: the
decoders read elements one by one (no pre-sizing from a declared count) and
fail at the first missing byte; arrays of zero-byte elements are capped at
1024 (protocol/primitives.py `ZERO_SIZE_ELEMENTS_MAX`).
"""

from __future__ import annotations

import gc
import struct
import threading
import tracemalloc
from io import BytesIO

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import header, metadata_records, raft_records
from protocol.errors import DecodeError
from protocol.frames import decode_response, encode_request
from protocol.header import (
    REQUEST_HEADER,
    RESPONSE_HEADER,
    peek_api,
    request_header_version,
    response_header_version,
)
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD_BYTES,
    ControlRecordType,
    Record,
    RecordBatch,
    decode_batch,
    decode_batches,
    encode_batch,
    encode_record_batch,
    peek_batch_length,
)
from protocol.records import RECORD_TYPES, MetadataRecord, decode_metadata_record, encode_metadata_record
from protocol.registry import API_MESSAGES
from protocol.schema import Message
from strategies import all_versions, message_values, rich_value

from .budget import fuzz_settings
from .mutations import mutated

ALLOCATION_CONSTANT_BYTES = 64 * 1024
ALLOCATION_PER_INPUT_BYTE = 256

# Requests and responses of every API, every metadata record, every KRaft
# record, the request and response headers: each at every declared version.
MESSAGES: tuple[Message, ...] = tuple(m for api_key in sorted(API_MESSAGES) for m in API_MESSAGES[api_key]) + tuple(
    m for module in (metadata_records, raft_records, header) for m in vars(module).values() if isinstance(m, Message)
)
CASES = tuple((m, v) for m in MESSAGES for v in all_versions(m))
CASE_IDS = [f"{m.name}-v{v}" for m, v in CASES]


# --------------------------------------------------------------------------
# The property every decoder must keep
# --------------------------------------------------------------------------

def allocation_bound(input_bytes: int) -> int:
    return ALLOCATION_CONSTANT_BYTES + ALLOCATION_PER_INPUT_BYTE * input_bytes


def _decode_once(decode, data: bytes) -> bool:
    try:
        decode(data)
        return True
    except DecodeError:
        return False


def decodes_safely(decode, data: bytes, what: str) -> bool:
    """Runs `decode(data)`: True if it decoded, False on DecodeError. Any other
    exception propagates (Hypothesis then shrinks and reports the input), and
    the peak heap of the call must stay within `allocation_bound(len(data))`.

    What is bounded is what the input makes the decoder allocate, so the call is
    measured the second time: a first call may also pay for lazily built state
    that is not the input's doing (the same 36-byte input peaked at 77 KB once in
    a full-suite run, and at 3 KB on every call after it, with no collection
    and no other thread running). An input that makes the decoder allocate in
    proportion to a length it claims does so on every call."""
    decoded = _decode_once(decode, data)
    started_here = not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    # A collection inside the measured call would run other objects' finalizers,
    # whose allocations are not the decoder's: the collector stays out of it.
    gc.disable()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        decoded_again = _decode_once(decode, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        gc.enable()
        if started_here:
            tracemalloc.stop()
    assert decoded_again == decoded, f"{what}: decoding {data.hex()} twice gave two answers"
    used = peak - before
    assert used <= allocation_bound(len(data)), (
        f"{what}: decoding {len(data)} bytes peaked at {used} bytes of heap "
        f"(bound {allocation_bound(len(data))}); input {data.hex()}; "
        f"other threads alive (their allocations count too): {threading.active_count() - 1}"
    )
    return decoded


def hostile(valid: st.SearchStrategy[bytes], donors: tuple[bytes, ...], random_max: int = 128) -> st.SearchStrategy[bytes]:
    """(a) random bytes or (b) a mutated valid encoding, roughly one to three."""
    return st.one_of(
        st.binary(max_size=random_max),
        valid.flatmap(lambda seed: mutated(seed, donors)),
        valid.flatmap(lambda seed: mutated(seed, donors)),
        valid.flatmap(lambda seed: mutated(seed, donors)),
    )


def encodings(message: Message, version: int) -> st.SearchStrategy[bytes]:
    return message_values(message, version).map(lambda value: message.encode(version, value))


# --------------------------------------------------------------------------
# Message bodies: every request, response, metadata record, raft record, header
# --------------------------------------------------------------------------

@pytest.mark.parametrize(("message", "version"), CASES, ids=CASE_IDS)
def test_message_decoder(message: Message, version: int):
    message.construct(version)  # compile outside the measurement
    donors = (message.encode(version, rich_value(message, version)),)

    @fuzz_settings(12)
    @given(data=hostile(encodings(message, version), donors))
    def run(data: bytes) -> None:
        decodes_safely(lambda raw: message.decode(version, raw), data, f"{message.name} v{version}")

    run()


def test_lying_counts_in_a_tiny_input_allocate_nothing_like_the_claim():
    # The brief's example made concrete: a few bytes claiming 2**31-1 elements
    # (classic int32 count) or 2**32-2 (compact uvarint count), at the start of
    # every message and behind a 2-byte field, must cost at most the bound for
    # their ~10 bytes, whatever the message.
    claims = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f")
    for message, version in CASES:
        message.construct(version)
        for claim in claims:
            for data in (claim, claim + b"\x00" * 6, b"\x00\x00" + claim + b"\x01\x02\x03\x04"):
                decodes_safely(lambda raw: message.decode(version, raw), data, f"{message.name} v{version}")


def test_dense_arrays_stay_within_the_per_byte_bound():
    # Hypothesis rarely writes a long run of minimal elements, the input that
    # costs the most heap per byte (see the module docstring), so it is built
    # here: at every position of every seed, a count of 512 (compact and
    # classic) followed by 512 zero bytes, which most element types accept
    # as a minimal element.
    padding = b"\x00" * 512
    for message, version in CASES:
        message.construct(version)
        seed = message.encode(version, rich_value(message, version))
        for position in range(len(seed) + 1):
            for count in (b"\x81\x04", struct.pack(">i", 512)):
                data = seed[:position] + count + padding + seed[position:]
                decodes_safely(lambda raw: message.decode(version, raw), data, f"{message.name} v{version}")


def test_the_bound_would_catch_a_decoder_that_trusts_a_claimed_count():
    # Guards the guard: a decoder that pre-sizes a list from a claimed count
    # of 2**21 (16 MiB of pointers) from 10 bytes must fail the check.
    def trusting_decoder(raw: bytes) -> None:
        count = struct.unpack_from(">i", raw)[0]
        elements = [None] * count
        del elements
        raise DecodeError("truncated")

    with pytest.raises(AssertionError, match="peaked at"):
        decodes_safely(trusting_decoder, struct.pack(">i", 1 << 21) + b"\x00" * 6, "trusting decoder")
    assert decodes_safely(trusting_decoder, struct.pack(">i", 16) + b"\x00" * 6, "trusting decoder") is False


# --------------------------------------------------------------------------
# Frames as the server and the client read them
# --------------------------------------------------------------------------

def decode_request_frame(frame: bytes) -> None:
    """What `Dispatcher.dispatch` does with a frame body, minus the routing:
    peek the key and version, then header and body from one stream."""
    api_key, version = peek_api(frame)
    pair = API_MESSAGES.get(api_key)
    if pair is None or version not in pair[0].versions:
        raise DecodeError("not served")  # the dispatcher closes the connection here
    stream = BytesIO(frame)
    REQUEST_HEADER.decode(request_header_version(pair[0], version), stream)
    pair[0].decode(version, stream)


@st.composite
def request_frames(draw, api_key: int) -> bytes:
    request = API_MESSAGES[api_key][0]
    version = draw(st.sampled_from(all_versions(request)))
    body = draw(message_values(request, version))
    client_id = draw(st.none() | st.text(max_size=8))
    correlation_id = draw(st.integers(-(1 << 31), (1 << 31) - 1))
    return encode_request(api_key, version, correlation_id, client_id, body)[4:]


@st.composite
def response_frames(draw, api_key: int) -> tuple[int, bytes]:
    request, response = API_MESSAGES[api_key]
    version = draw(st.sampled_from(all_versions(response)))
    out = BytesIO()
    RESPONSE_HEADER.encode_into(response_header_version(request, version),
                                {"correlation_id": draw(st.integers(0, 1 << 20))}, out)
    response.encode_into(version, draw(message_values(response, version)), out)
    return version, out.getvalue()


@pytest.mark.parametrize("api_key", sorted(API_MESSAGES))
def test_request_frame_decoder(api_key: int):
    request = API_MESSAGES[api_key][0]
    donors = tuple(encode_request(api_key, v, 7, "donor", rich_value(request, v))[4:] for v in all_versions(request))

    @fuzz_settings(25)
    @given(data=hostile(request_frames(api_key), donors))
    def run(data: bytes) -> None:
        decodes_safely(decode_request_frame, data, f"request frame api {api_key}")

    run()


@pytest.mark.parametrize("api_key", sorted(API_MESSAGES))
def test_response_frame_decoder(api_key: int):
    """The client side (`KafkaClient`, the peer connections) reads what a server
    sends; a hostile or broken server must not crash it either."""

    @fuzz_settings(15)
    @given(frame=response_frames(api_key), data=st.data())
    def run(frame: tuple[int, bytes], data) -> None:
        version, payload = frame
        hostile_payload = data.draw(st.binary(max_size=64) | mutated(payload))
        decodes_safely(lambda raw: decode_response(api_key, version, raw), hostile_payload,
                       f"response frame api {api_key} v{version}")

    run()


def test_request_header_alone():
    @fuzz_settings(200)
    @given(version=st.sampled_from(all_versions(REQUEST_HEADER)), data=st.data())
    def run(version: int, data) -> None:
        valid = REQUEST_HEADER.encode(version, data.draw(message_values(REQUEST_HEADER, version)))
        raw = data.draw(st.binary(max_size=32) | mutated(valid))
        decodes_safely(lambda frame: REQUEST_HEADER.decode(version, frame), raw, f"request header v{version}")

    run()


# --------------------------------------------------------------------------
# The metadata record frame (uvarint frame version, api key, version, body)
# --------------------------------------------------------------------------

METADATA_RECORD_CASES = tuple((m, v) for m in RECORD_TYPES.values() for v in all_versions(m))


@st.composite
def framed_metadata_records(draw) -> bytes:
    message, version = draw(st.sampled_from(METADATA_RECORD_CASES))
    return encode_metadata_record(MetadataRecord(message, version, draw(message_values(message, version))))


def test_metadata_record_frame_decoder():
    donors = tuple(encode_metadata_record(MetadataRecord(m, v, rich_value(m, v))) for m, v in METADATA_RECORD_CASES)

    @fuzz_settings(600)
    @given(data=hostile(framed_metadata_records(), donors, random_max=64))
    def run(data: bytes) -> None:
        decodes_safely(decode_metadata_record, data, "metadata record frame")

    run()


# --------------------------------------------------------------------------
# Record batches
# --------------------------------------------------------------------------

@st.composite
def record_batches(draw) -> bytes:
    """A valid batch: KRaft-shaped (framed metadata records, or a control
    record) or general (keys, headers, nulls, gaps in the offsets)."""
    if draw(st.booleans()):
        values = draw(st.lists(framed_metadata_records(), min_size=1, max_size=4))
        control = draw(st.none() | st.sampled_from(list(ControlRecordType)))
        return encode_batch(draw(st.integers(0, 1 << 40)), draw(st.integers(0, 1 << 20)), values,
                            draw(st.integers(0, 1 << 41)), control)
    base_offset = draw(st.integers(0, 1 << 40))
    deltas = sorted(draw(st.sets(st.integers(0, 20), max_size=4)))
    blob = st.none() | st.binary(max_size=16)
    records = tuple(
        Record(offset=base_offset + delta, value=draw(blob), key=draw(blob),
               headers=tuple(draw(st.lists(st.tuples(st.text(max_size=4), blob), max_size=2))),
               timestamp_ms=draw(st.integers(0, 1 << 30)))
        for delta in deltas
    )
    return encode_record_batch(RecordBatch(
        base_offset=base_offset, leader_epoch=draw(st.integers(-1, 1 << 20)), base_timestamp_ms=0,
        last_offset_delta=max(deltas, default=0), is_control=False, records=records,
        max_timestamp_ms=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        is_transactional=draw(st.booleans()),
    ))


def reseal(data: bytes, fix_length: bool) -> bytes:
    """Recomputes the CRC (and optionally the length field) of the first batch
    in `data`, so a mutation behind the header is judged by the record parser,
    not rejected by the checksum. A writer with a bug produces exactly this."""
    buf = bytearray(data)
    if len(buf) < ATTRIBUTES_OFFSET:
        return bytes(buf)
    if fix_length:
        struct.pack_into(">i", buf, LENGTH_OFFSET, len(buf) - LOG_OVERHEAD_BYTES)
    (length,) = struct.unpack_from(">i", buf, LENGTH_OFFSET)
    end = min(len(buf), max(ATTRIBUTES_OFFSET, length + LOG_OVERHEAD_BYTES))
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c.crc32c(bytes(buf[ATTRIBUTES_OFFSET:end])))
    return bytes(buf)


@st.composite
def hostile_batches(draw) -> bytes:
    kind = draw(st.sampled_from(["random", "mutated", "resealed", "resealed", "two"]))
    if kind == "random":
        return draw(st.binary(max_size=160))
    seed = draw(record_batches())
    if kind == "two":  # a valid batch followed by a damaged one (decode_batches walks on)
        return seed + reseal(draw(mutated(draw(record_batches()))), draw(st.booleans()))
    damaged = draw(mutated(seed))
    if kind == "mutated":
        return damaged
    return reseal(damaged, fix_length=draw(st.booleans()))


def decode_every_way(data: bytes) -> None:
    for decode in (
        lambda raw: decode_batch(raw, 0),
        lambda raw: decode_batches(raw),
        lambda raw: decode_batches(raw, allow_partial_tail=True),
        lambda raw: peek_batch_length(raw, 0),
        lambda raw: decode_batch(raw, 0, max_batch_bytes=64),
    ):
        decodes_safely(decode, data, "record batch")


def test_record_batch_decoders():
    @fuzz_settings(700)
    @given(data=hostile_batches())
    def run(data: bytes) -> None:
        decode_every_way(data)

    run()


def test_resealed_mutations_reach_the_record_parser():
    """Guards the fuzzer itself: if resealing were wrong, every mutated batch
    would die at the CRC check and the record parser would never be fuzzed."""
    reasons: set[str] = set()

    @fuzz_settings(300)
    @given(seed=record_batches(), data=st.data())
    def run(seed: bytes, data) -> None:
        damaged = reseal(data.draw(mutated(seed, max_mutations=1)), fix_length=True)
        try:
            decode_batch(damaged, 0)
        except DecodeError as exc:
            reasons.add("crc" if "CRC mismatch" in str(exc) else "parser")

    run()
    assert "parser" in reasons, reasons

