"""protocol/records.py decodes the records a migration's copy is made of (TopicRecord,
PartitionRecord v0-v2, ConfigRecord) through a hand-written fast path. It must return
exactly what the generic decoder returns, key order included, for every record and every
byte string: the same Container, or the same DecodeError."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.errors import DecodeError
from protocol.records import _decode_generic, decode_metadata_record, encode_metadata_record, record

int32s = st.integers(-2**31, 2**31 - 1)
int32_lists = st.lists(int32s, max_size=40)
names = st.text(max_size=30)


@st.composite
def partition_records(draw):
    version = draw(st.integers(0, 2))
    data = {
        "partition_id": draw(int32s), "topic_id": draw(st.uuids()), "replicas": draw(int32_lists),
        "isr": draw(int32_lists), "removing_replicas": draw(int32_lists), "adding_replicas": draw(int32_lists),
        "leader": draw(int32s), "leader_epoch": draw(int32s), "partition_epoch": draw(int32s),
        # Non-default tagged fields: the fast path hands these to the generic decoder.
        "leader_recovery_state": draw(st.sampled_from([0, 0, 0, 1])),
    }
    if version >= 1:
        data["directories"] = draw(st.lists(st.uuids(), max_size=4))
    if version >= 2 and draw(st.booleans()):
        data["eligible_leader_replicas"] = draw(int32_lists)
    return record(mr.PARTITION_RECORD, data, version)


topic_records = st.builds(lambda name, topic_id: record(mr.TOPIC_RECORD, {"name": name, "topic_id": topic_id}, 0),
                          names, st.uuids())
config_records = st.builds(
    lambda rtype, rname, name, value: record(mr.CONFIG_RECORD, {"resource_type": rtype, "resource_name": rname,
                                                                "name": name, "value": value}, 0),
    st.integers(-128, 127), names, names, st.none() | names)
records = st.one_of(partition_records(), topic_records, config_records)


def outcome(decode, value: bytes):
    try:
        decoded = decode(value)
    except DecodeError:
        return "DecodeError"
    return decoded.message.name, decoded.version, list(decoded.data.items())


@settings(max_examples=400, deadline=None)
@given(records)
def test_the_fast_path_decodes_every_record_as_the_generic_decoder_does(item):
    value = encode_metadata_record(item)
    fast, generic = decode_metadata_record(value), _decode_generic(value)
    assert (fast.message, fast.version) == (generic.message, generic.version)
    assert list(fast.data.items()) == list(generic.data.items())
    assert type(fast.data) is type(generic.data)
    assert all(type(fast.data[k]) is type(generic.data[k]) for k in generic.data)


@settings(max_examples=400, deadline=None)
@given(records, st.data())
def test_damaged_bytes_give_the_generic_decoders_answer(item, data):
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


@pytest.mark.parametrize("value", [b"\x01\x03\x00", b"\x01\x02\x00\x00", b"\x01\x04\x00\x05", b"\x01\x03\x01" + b"\xff" * 30])
def test_short_and_garbage_bodies_raise_decode_error(value):
    with pytest.raises(DecodeError):
        decode_metadata_record(value)


def test_a_memoryview_decodes_like_bytes():
    item = record(mr.PARTITION_RECORD, {"partition_id": 1, "topic_id": uuid.uuid4(), "replicas": [1, 2],
                                        "isr": [1], "leader": 1, "leader_epoch": 3, "partition_epoch": 4}, 0)
    value = encode_metadata_record(item)
    assert decode_metadata_record(memoryview(value)).data == _decode_generic(value).data
