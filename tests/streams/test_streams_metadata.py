"""SubscriptionInfo / AssignmentInfo codecs: round trips for every version,
probing of newer versions as a value, and DecodeError as the only failure."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import DecodeError
from protocol.streams import assignment_info as ai
from protocol.streams import subscription_info as si
from protocol.streams import AssignmentInfo, HostInfo, TaskId, TopicPartition, UnknownVersion, read_prefix

INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
TASKS = st.lists(st.builds(TaskId, INT32, INT32), max_size=6).map(tuple)
PARTITIONS = st.lists(st.builds(TopicPartition, TEXT, INT32), max_size=4).map(tuple)


@st.composite
def subscriptions(draw, version):
    return si.SubscriptionInfo(
        version=version,
        latest_supported_version=draw(st.integers(version, 2**31 - 1)) if version >= 3 else -1,
        process_id=draw(st.uuids()),
        prev_tasks=draw(TASKS),
        standby_tasks=draw(TASKS),
        # Kafka cannot tell an empty endpoint from none; none is the canonical form.
        user_endpoint=draw(st.none() | TEXT.filter(bool)) if version >= 2 else None,
        rack=draw(st.none() | TEXT) if version >= 4 else None,
    )


@st.composite
def assignments(draw, version):
    return AssignmentInfo(
        version=version,
        latest_supported_version=draw(st.integers(version, 2**31 - 1)) if version >= 3 else -1,
        active_tasks=draw(TASKS),
        standby_tasks=draw(st.lists(st.tuples(st.builds(TaskId, INT32, INT32), PARTITIONS), max_size=3).map(tuple)),
        partitions_by_host=(draw(st.lists(st.tuples(st.builds(HostInfo, TEXT, INT32), PARTITIONS), max_size=3)
                                 .map(tuple)) if version >= 2 else ()),
        error_code=draw(INT32) if version >= 4 else 0,
    )


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_subscription_round_trip(version, data):
    info = data.draw(subscriptions(version))
    encoded = si.encode(info)
    assert si.decode(encoded) == info
    assert read_prefix(encoded) == (version, info.latest_supported_version)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_assignment_round_trip(version, data):
    info = data.draw(assignments(version))
    encoded = ai.encode(info)
    assert ai.decode(encoded) == info
    assert read_prefix(encoded) == (version, info.latest_supported_version)


def test_v1_and_v2_layouts_are_kafkas():
    pid = uuid.UUID(int=(1 << 64) | 2)
    v1 = si.encode(si.SubscriptionInfo(1, -1, pid, (TaskId(0, 1),), ()))
    assert v1 == (struct.pack(">i", 1) + struct.pack(">qq", 1, 2) + struct.pack(">iii", 1, 0, 1)
                  + struct.pack(">i", 0))
    v2 = si.encode(si.SubscriptionInfo(2, -1, pid, (), (), "h:9"))
    assert v2 == struct.pack(">i", 2) + struct.pack(">qq", 1, 2) + struct.pack(">ii", 0, 0) + b"\x00\x00\x00\x03h:9"
    v3 = si.encode(si.SubscriptionInfo(3, 3, pid, (), (), None))
    assert v3 == struct.pack(">ii", 3, 3) + struct.pack(">qq", 1, 2) + struct.pack(">iii", 0, 0, 0)
    a2 = ai.encode(AssignmentInfo(2, -1, (TaskId(0, 0),), (),
                                  ((HostInfo("h", 9), (TopicPartition("t", 0),)),)))
    assert a2 == (struct.pack(">iiiii", 2, 1, 0, 0, 0) + struct.pack(">i", 1) + b"\x00\x01h" + struct.pack(">ii", 9, 1)
                  + b"\x00\x01t" + struct.pack(">i", 0))


@pytest.mark.parametrize("codec", [si, ai], ids=["subscription", "assignment"])
def test_v3_reader_reports_v4_as_unknown_version(codec):
    if codec is si:
        v4 = si.encode(si.SubscriptionInfo(4, 4, uuid.uuid4(), (TaskId(0, 1),), (), "h:1", "rack-a"))
    else:
        v4 = ai.encode(AssignmentInfo(4, 4, (TaskId(0, 1),), (), ((HostInfo("h", 1), ()),), 0))
    result = codec.decode(v4, reader_latest_version=3)
    assert result == UnknownVersion(4, 4, "SubscriptionInfo" if codec is si else "AssignmentInfo")
    assert "unknown version 4 (sender supports up to 4)" in str(result)
    # A sender may use a lower version than it supports; both numbers are reported.
    if codec is si:
        v4_of_5 = si.encode(si.SubscriptionInfo(4, 4, uuid.uuid4())).replace(b"\x00\x00\x00\x04", b"\x00\x00\x00\x05", 2)
        assert si.decode(v4_of_5)  # version 5 > known 4: a value, not an exception
        assert si.decode(v4_of_5).version == 5


def test_v4_is_really_unparseable_with_the_v3_layout():
    """The simulated v4 must be a format change, not v3 with a new number:
    read through the v3 declaration, the bytes after the prefix are garbage."""
    v4 = si.encode(si.SubscriptionInfo(4, 4, uuid.UUID(int=7), (TaskId(0, 1), TaskId(0, 2)), (), "host:1"))
    with pytest.raises(DecodeError):
        si.SUBSCRIPTION_INFO.decode(3, v4)
    a4 = ai.encode(AssignmentInfo(4, 4, (TaskId(0, 1),), ((TaskId(0, 2), (TopicPartition("t", 2),)),)))
    with pytest.raises(DecodeError):
        ai.ASSIGNMENT_INFO.decode(3, a4)


@pytest.mark.parametrize("reader", [1, 2, 3])
def test_older_readers_probe_every_newer_version(reader):
    for version in range(reader + 1, 5):
        if version >= 3:
            data = si.encode(si.SubscriptionInfo(version, 4, uuid.uuid4()))
            assert si.decode(data, reader) == UnknownVersion(version, 4, "SubscriptionInfo")
        else:
            data = si.encode(si.SubscriptionInfo(version, -1, uuid.uuid4()))
            assert si.decode(data, reader) == UnknownVersion(version, -1, "SubscriptionInfo")


@pytest.mark.parametrize("data", [b"", b"\x00\x00", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff",
                                  b"\x00\x00\x00\x05\x00\x00", b"\x00\x00\x00\x05\x00\x00\x00\x04",
                                  b"\x00\x00\x00\x01" + b"\x00" * 15])
def test_malformed_bytes_raise_decode_error(data):
    for codec in (si, ai):
        with pytest.raises(DecodeError):
            codec.decode(data)


def test_trailing_bytes_are_malformed():
    data = ai.encode(AssignmentInfo(3, 3)) + b"\x00"
    with pytest.raises(DecodeError):
        ai.decode(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64), st.integers(1, 4))
def test_garbage_only_ever_raises_decode_error(data, reader):
    for codec in (si, ai):
        try:
            codec.decode(data, reader)
        except DecodeError:
            pass


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_valid_messages_only_raise_decode_error(data):
    version = data.draw(st.integers(1, 4))
    encoded = bytearray(ai.encode(data.draw(assignments(version))))
    if encoded:
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    try:
        ai.decode(bytes(encoded[:cut]))
    except DecodeError:
        pass
