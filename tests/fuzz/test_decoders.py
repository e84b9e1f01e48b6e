"""Every decoder, fed hostile bytes: it succeeds or raises `DecodeError`, and never acts
on a length or count its input cannot hold.

Run: `.venv/bin/pytest -q tests/fuzz` (CI budget, derandomized);
`FUZZ_EXAMPLES=50 .venv/bin/pytest -q tests/fuzz` for a nightly-style run with
50x the examples and fresh randomness (tests/fuzz/budget.py).

Builds on tests/protocol/test_fuzz_decoders.py, which mutates ONE
fixed seed per (message, version) (`rich_value`). Here:
- the seeds are drawn from the protocol tests' Hypothesis value strategies
  (`strategies.message_values`), so the mutated inputs start from every shape
  a message can take (null vs empty arrays, unknown tagged fields, long and
  short compact lengths), and the fixed rich seed is only a splice donor;
- every single decode is audited (tests/fuzz/claim_audit.py);
- beyond the message bodies: whole request frames the way the dispatcher
  reads them (peek, header, body on one stream), response frames the way
  `KafkaClient` reads them, the metadata record frame, and record batches,
  with the CRC recomputed after mutation so the damage reaches the record
  parser instead of stopping at the checksum.

The bound is on what the decoder *asks for*, read by read, not on the heap:
a read larger than `CLAIM_UNCHECKED_MAX` bytes must fit in what remains of the
input (a claimed length is checked before it is acted on), and the number of
reads is at most a few per input byte (a claimed count cannot drive a loop past
the input). Both are pure functions of the input, so a verdict never changes
between runs.

Why not tracemalloc any more: a heap peak counts whatever the allocator and the
interpreter do during the call — free lists, lazily built caches, dict resizes,
other threads — so the same 23-byte input peaked at 76 KB on a loaded machine
and at 3 KB elsewhere; no bound on it is both tight and deterministic, and a
loose one only catches claims of megabytes. The audit catches a claim the input
cannot hold whatever its size. What it cannot see is a decoder that pre-sizes a
Python list from a count without reading; the decoders cannot do that: arrays
are built element by element by the compiled parsers (`KafkaArray`), a count
above `CLAIM_UNCHECKED_MAX` is checked against the bytes remaining first
(`check_array_claim`), arrays of zero-byte elements are capped at
`ZERO_SIZE_ELEMENTS_MAX`, and record batches check their record count against
the batch's bytes before the loop (protocol/record_batch.py).
"""

from __future__ import annotations

import struct
import sys
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
from protocol.primitives import read_bytes, read_compact_string
from protocol.records import RECORD_TYPES, MetadataRecord, decode_metadata_record, encode_metadata_record
from protocol.registry import API_MESSAGES
from protocol.schema import Message
from strategies import all_versions, message_values, rich_value

from .budget import fuzz_settings
from .claim_audit import ClaimViolation, audited_decode
from .mutations import mutated

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

def decodes_safely(decode, data: bytes, what: str) -> bool:
    """Runs `decode(data)` with its reads audited (tests/fuzz/claim_audit.py): True if it
    decoded, False on DecodeError. Any other exception propagates (Hypothesis then
    shrinks and reports the input), a `ClaimViolation` with the input attached."""
    try:
        audited_decode(decode, data, extra_modules=(sys.modules[__name__],))
        return True
    except DecodeError:
        return False
    except ClaimViolation as exc:
        raise ClaimViolation(f"{what}: {exc}; input ({len(data)} bytes) {data.hex()}") from None


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


def test_lying_counts_in_a_tiny_input_are_never_acted_on():
    # A few bytes claiming 2**31-1 (classic int32 count or length) or 2**32-2 (compact
    # uvarint), at the start of every message and behind a 2-byte field: refused with
    # DecodeError before anything is read or built for them, whatever the message.
    claims = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x7f\xff")
    for message, version in CASES:
        message.construct(version)
        for claim in claims:
            for data in (claim, claim + b"\x00" * 6, b"\x00\x00" + claim + b"\x01\x02\x03\x04"):
                decodes_safely(lambda raw: message.decode(version, raw), data, f"{message.name} v{version}")


def test_dense_arrays_stay_within_the_read_bound():
    # Hypothesis rarely writes a long run of minimal elements, the input that makes
    # the most reads per byte, so it is built here: at every position of every seed,
    # a count of 512 (compact and classic) followed by 512 zero bytes, which most
    # element types accept as a minimal element.
    padding = b"\x00" * 512
    for message, version in CASES:
        message.construct(version)
        seed = message.encode(version, rich_value(message, version))
        for position in range(len(seed) + 1):
            for count in (b"\x81\x04", struct.pack(">i", 512)):
                data = seed[:position] + count + padding + seed[position:]
                decodes_safely(lambda raw: message.decode(version, raw), data, f"{message.name} v{version}")


def test_the_audit_catches_a_decoder_that_trusts_a_claimed_length():
    # Guards the guard: a decoder that reads what a length claims before checking it
    # (on a socket or a file that read would allocate the claim) fails the check,
    # however small the claim is beyond CLAIM_UNCHECKED_MAX and whatever the heap does.
    def trusting_decoder(raw: bytes) -> None:
        stream = BytesIO(raw)
        (length,) = struct.unpack(">i", stream.read(4))
        data = stream.read(length)
        if len(data) != length:
            raise DecodeError("truncated")

    for claim in (1 << 21, 200):
        with pytest.raises(ClaimViolation, match="asked for"):
            decodes_safely(trusting_decoder, struct.pack(">i", claim) + b"\x00" * 6, "trusting decoder")
    # An honest input, and a short claim, are not the decoder's fault.
    assert decodes_safely(trusting_decoder, struct.pack(">i", 6) + b"\x00" * 6, "trusting decoder") is True
    assert decodes_safely(trusting_decoder, struct.pack(">i", 16) + b"\x00" * 6, "trusting decoder") is False


def test_the_audit_catches_a_decoder_that_trusts_a_claimed_count():
    # A decoder that loops over a claimed count without stopping at the end of its
    # input is stopped by the read bound at a few reads per byte, not after 2**31.
    def trusting_decoder(raw: bytes) -> None:
        stream = BytesIO(raw)
        (count,) = struct.unpack(">i", stream.read(4))
        elements = [stream.read(1) for _ in range(count)]
        if any(not element for element in elements):
            raise DecodeError("truncated")

    with pytest.raises(ClaimViolation, match="reads from a 10-byte input"):
        decodes_safely(trusting_decoder, struct.pack(">i", (1 << 31) - 1) + b"\x00" * 6, "trusting decoder")
    assert decodes_safely(trusting_decoder, struct.pack(">i", 6) + b"\x00" * 6, "trusting decoder") is True


def test_the_product_decoders_check_claims_before_acting_on_them():
    # The same inputs as the guards above, through the real primitives: a classic
    # bytes length of 200 with 6 bytes behind it and a compact string claiming
    # 2**20 bytes are refused without the large read.
    for reader, data in ((read_bytes, struct.pack(">i", 200) + b"\x00" * 6),
                         (read_compact_string, b"\x81\x80\x40" + b"a" * 6)):
        assert decodes_safely(lambda raw: reader(BytesIO(raw)), data, reader.__name__) is False


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

