"""protocol/records.py decodes RegisterBrokerRecord (v0-v4) through a hand-written fast
path. It must return exactly what the declaration's own decoder returns, key order and
value types included (nested Containers too), for every record of every version —
tagged fields present or not, unknown tags, null and empty arrays — and for damaged
bytes the same Container or the same DecodeError."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.errors import DecodeError
from protocol.primitives import encode_uvarint
from protocol.records import _decode_generic, decode_metadata_record, encode_metadata_record, record

texts = st.text(max_size=12) | st.text(min_size=120, max_size=200)  # multi-byte lengths too
uuid_lists = st.lists(st.uuids(), max_size=3)


@st.composite
def registrations(draw):
    version = draw(st.integers(0, 4))
    data = {
        "broker_id": draw(st.integers(-2**31, 2**31 - 1)),
        "incarnation_id": draw(st.uuids()),
        "broker_epoch": draw(st.integers(-2**63, 2**63 - 1)),
        "end_points": draw(st.lists(st.fixed_dictionaries({
            "name": texts, "host": texts, "port": st.integers(0, 65535),
            "security_protocol": st.integers(-2**15, 2**15 - 1)}), max_size=3)),
        "features": draw(st.lists(st.fixed_dictionaries({
            "name": texts, "min_supported_version": st.integers(-2**15, 2**15 - 1),
            "max_supported_version": st.integers(-2**15, 2**15 - 1)}), max_size=4)),
        "rack": draw(st.none() | texts),
        "fenced": draw(st.booleans()),
    }
    if version >= 1:
        data["in_controlled_shutdown"] = draw(st.booleans())
    if version >= 2:
        data["is_migrating_zk_broker"] = draw(st.booleans())
    if version >= 3:
        data["log_dirs"] = draw(uuid_lists)
    if version >= 4:
        data["cordoned_log_dirs"] = draw(st.none() | uuid_lists)
    return record(mr.REGISTER_BROKER_RECORD, data, version)


def same(fast, generic) -> None:
    assert (fast.message, fast.version) == (generic.message, generic.version)
    assert type(fast.data) is type(generic.data)
    assert list(fast.data.items()) == list(generic.data.items())
    for key, value in generic.data.items():
        assert type(fast.data[key]) is type(value), key
        if isinstance(value, list):
            for mine, theirs in zip(fast.data[key], value):
                assert type(mine) is type(theirs), key
                if hasattr(theirs, "items"):
                    assert list(mine.items()) == list(theirs.items())
                    assert [type(v) for v in mine.values()] == [type(v) for v in theirs.values()]


def outcome(decode, value: bytes):
    try:
        decoded = decode(value)
    except DecodeError:
        return "DecodeError"
    return decoded.message.name, decoded.version, list(decoded.data.items())


def test_every_version_is_on_the_fast_path():
    # The property tests below compare two decoders; this one checks the fast one is used.
    from protocol.records import _FAST_DECODERS
    assert all((mr.REGISTER_BROKER_RECORD.api_key, v) in _FAST_DECODERS for v in range(5))


@settings(max_examples=500, deadline=None)
@given(registrations())
def test_the_fast_path_decodes_every_registration_as_the_generic_decoder_does(item):
    value = encode_metadata_record(item)
    same(decode_metadata_record(value), _decode_generic(value))
    same(decode_metadata_record(memoryview(value)), _decode_generic(value))


def _with_tags(value: bytes, tags: list[tuple[int, bytes]]) -> bytes:
    """`value` (whose tagged-field section is empty: its last byte) with `tags` instead."""
    assert value[-1] == 0
    section = encode_uvarint(len(tags)) + b"".join(
        encode_uvarint(tag) + encode_uvarint(len(payload)) + payload for tag, payload in tags)
    return value[:-1] + section


def _uuid_array(values) -> bytes:
    return encode_uvarint(len(values) + 1) + b"".join(v.bytes for v in values)


@settings(max_examples=300, deadline=None)
@given(registrations(), st.data())
def test_hand_made_tagged_sections_give_the_generic_decoders_answer(item, data):
    """Tags the encoder never writes: unknown ones, known ones in versions without them,
    out of order, repeated, null LogDirs, payloads of the wrong size."""
    plain = dict(item.data, log_dirs=[], cordoned_log_dirs=None)
    value = encode_metadata_record(record(mr.REGISTER_BROKER_RECORD, plain, item.version))
    payloads = st.one_of(
        st.lists(st.uuids(), max_size=2).map(_uuid_array),
        st.just(b"\x00"),  # a null array
        st.binary(max_size=20),
    )
    tags = data.draw(st.lists(st.tuples(st.integers(0, 4), payloads), max_size=3))
    changed = _with_tags(value, tags)
    assert outcome(decode_metadata_record, changed) == outcome(_decode_generic, changed)
    if outcome(_decode_generic, changed) != "DecodeError":
        same(decode_metadata_record(changed), _decode_generic(changed))


@settings(max_examples=400, deadline=None)
@given(registrations(), st.data())
def test_damaged_registrations_give_the_generic_decoders_answer(item, data):
    value = bytearray(encode_metadata_record(item))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if how == "flip":
        index = data.draw(st.integers(3, len(value) - 1))
        value[index] = data.draw(st.integers(0, 255))
    elif how == "truncate":
        value = value[:data.draw(st.integers(3, len(value) - 1))]
    else:
        value += bytes(data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=4)))
    value = bytes(value)
    assert outcome(decode_metadata_record, value) == outcome(_decode_generic, value)


@pytest.mark.parametrize("version", range(5))
def test_a_fleet_registration_decodes_as_the_generic_decoder_does(version):
    """The shape a broker writes: one listener, a few features, one log directory."""
    data = {"broker_id": 101, "incarnation_id": uuid.uuid4(), "broker_epoch": 42,
            "end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 19},
                         {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}],
            "rack": None, "fenced": True, "in_controlled_shutdown": False, "is_migrating_zk_broker": False,
            "log_dirs": [uuid.uuid4()], "cordoned_log_dirs": None}
    value = encode_metadata_record(record(mr.REGISTER_BROKER_RECORD, data, version))
    same(decode_metadata_record(value), _decode_generic(value))
