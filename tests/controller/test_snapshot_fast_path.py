"""The snapshot's direct RegisterBrokerRecord writer (server/controller/snapshot.py,
`register_broker_record_value`) writes exactly the bytes of the generic path (a record,
then the schema's encoder) for any registration, at every metadata.version; what it
cannot write is left to the generic encoder, which then fails as before."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import EncodeError
from protocol.records import decode_metadata_record, encode_metadata_record
from server.controller.features import SupportedRange
from server.controller.snapshot import _register_broker_record, register_broker_record_value
from server.controller.state import BrokerEndpoint, BrokerRegistration

MV_LEVELS = st.one_of(st.none(), st.integers(min_value=1, max_value=30))
TEXT = st.text(max_size=20)
UUIDS = st.uuids()
INT16 = st.integers(min_value=-(2**15), max_value=2**15 - 1)

endpoints = st.builds(BrokerEndpoint, name=TEXT, host=TEXT, port=st.integers(min_value=0, max_value=65535),
                      security_protocol=INT16)
features = st.dictionaries(TEXT, st.builds(SupportedRange, INT16, INT16), max_size=4).map(MappingProxyType)
registrations = st.builds(
    BrokerRegistration,
    broker_id=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    incarnation_id=UUIDS,
    epoch=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    registration_offset=st.integers(min_value=0, max_value=2**40),
    endpoints=st.lists(endpoints, max_size=3).map(tuple),
    supported_features=features,
    rack=st.one_of(st.none(), TEXT),
    fenced=st.booleans(),
    in_controlled_shutdown=st.booleans(),
    is_migrating_zk_broker=st.booleans(),
    log_dirs=st.lists(UUIDS, max_size=3).map(tuple),
    cordoned_log_dirs=st.one_of(st.none(), st.lists(UUIDS, max_size=3).map(tuple)),
)


@settings(max_examples=400, deadline=None)
@given(registration=registrations, mv_level=MV_LEVELS)
def test_the_direct_writer_writes_the_generic_encoders_bytes(registration, mv_level):
    expected = encode_metadata_record(_register_broker_record(registration, mv_level))
    assert register_broker_record_value(registration, mv_level) == expected
    # And the bytes replay as the record the snapshot meant.
    assert decode_metadata_record(expected).data["broker_id"] == registration.broker_id


def plain_registration(**changes) -> BrokerRegistration:
    values = dict(broker_id=1, incarnation_id=uuid.UUID(int=7), epoch=5, registration_offset=5,
                  endpoints=(BrokerEndpoint("PLAINTEXT", "localhost", 9092, 0),),
                  supported_features=MappingProxyType({"metadata.version": SupportedRange(1, 19)}),
                  rack=None, fenced=True, in_controlled_shutdown=False)
    values.update(changes)
    return BrokerRegistration(**values)


@pytest.mark.parametrize("changes", [
    {"endpoints": (BrokerEndpoint("PLAINTEXT", "localhost", 70_000, 0),)},  # not a uint16
    {"broker_id": 2**31},  # not an int32
])
def test_what_the_direct_writer_cannot_write_fails_as_the_generic_encoder_does(changes):
    registration = plain_registration(**changes)
    with pytest.raises(EncodeError) as generic:
        encode_metadata_record(_register_broker_record(registration, 19))
    with pytest.raises(EncodeError) as direct:
        register_broker_record_value(registration, 19)
    assert str(direct.value) == str(generic.value)


@pytest.mark.parametrize("changes", [
    {"log_dirs": (uuid.UUID(int=3),), "cordoned_log_dirs": ()},  # tagged: one present, one empty but not null
    {"endpoints": (BrokerEndpoint("PLAINTEXT", "h" * 300, 9092, 0),), "rack": "r" * 200},  # two-byte lengths
    {"log_dirs": tuple(uuid.UUID(int=i) for i in range(9))},  # a tagged field longer than 127 bytes
])
def test_edge_cases_write_the_generic_bytes(changes):
    registration = plain_registration(**changes)
    for mv_level in (None, 7, 17, 19, 30):
        assert register_broker_record_value(registration, mv_level) == encode_metadata_record(
            _register_broker_record(registration, mv_level))
