"""Round trips for every declaration the protocol layer has.

For every (api_key, version) in the registry (request and response), every
metadata record, every KRaft record and both headers:
- decode(encode(x)) == x on the fields the version has, with fields the
  version lacks decoded at their defaults;
- encode(decode(b)) == b, so re-encoding a peer's bytes is byte-exact;
- unknown tagged fields (at any flexible struct level) survive both ways.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import header, metadata_records, raft_records
from protocol.records import MetadataRecord, decode_metadata_record, encode_metadata_record
from protocol.registry import API_MESSAGES
from protocol.schema import Message
from strategies import all_versions, message_values, plain, present_fields, project


def _module_messages(module) -> list[Message]:
    return [m for m in vars(module).values() if isinstance(m, Message)]


API_CASES = [
    pytest.param(message, version, id=f"{message.name}-v{version}")
    for api_key in sorted(API_MESSAGES)
    for message in API_MESSAGES[api_key]
    for version in all_versions(message)
]
RECORD_CASES = [
    pytest.param(message, version, id=f"{message.name}-v{version}")
    for module in (metadata_records, raft_records, header)
    for message in _module_messages(module)
    for version in all_versions(message)
]
ALL_CASES = API_CASES + RECORD_CASES


def test_registry_covers_every_api_module():
    # Catches an API module that exists but was never registered.
    modules = [p for p in (Path(__file__).resolve().parents[2] / "protocol" / "apis").glob("*.py")
               if p.name != "__init__.py"]
    assert len(API_MESSAGES) == len(modules) == 39
    for api_key, (request, response) in API_MESSAGES.items():
        assert request.api_key == response.api_key == api_key
        assert request.type == "request" and response.type == "response"
        assert request.valid_versions == response.valid_versions


def _check_round_trip(message: Message, version: int, value: dict) -> None:
    encoded = message.encode(version, value)
    decoded = message.decode(version, encoded)
    assert project(message, message.fields, version, decoded) == plain(value)
    # Fields the version does not carry decode at their defaults.
    defaults = message.default(version)
    present = {f.attr for f in present_fields(message.fields, version)}
    for name, default in defaults.items():
        if name not in present:
            assert plain(decoded[name]) == plain(default), name
    # Byte-exact in the other direction.
    assert message.encode(version, decoded) == encoded


@pytest.mark.parametrize(("message", "version"), ALL_CASES)
@settings(max_examples=15)
@given(data=st.data())
def test_round_trip(message: Message, version: int, data):
    value = data.draw(message_values(message, version))
    _check_round_trip(message, version, value)


@pytest.mark.parametrize(("message", "version"), ALL_CASES)
def test_defaults_round_trip(message: Message, version: int):
    # The all-defaults message, from an empty dict: the shape handlers start from.
    encoded = message.encode(version, {})
    decoded = message.decode(version, encoded)
    assert plain(decoded) == plain(message.default(version))
    assert message.encode(version, decoded) == encoded


def test_unknown_tagged_fields_survive_at_top_level():
    message, _ = API_MESSAGES[18]
    value = {
        "client_software_name": "kw",
        "client_software_version": "1",
        "_unknown_tagged_fields": [(7, b"\x01\x02"), (200, b"")],
    }
    encoded = message.encode(3, value)
    # Tagged section: 2 entries; tag 7 size 2; tag 200 (uvarint c8 01) size 0.
    assert encoded.endswith(b"\x02\x07\x02\x01\x02\xc8\x01\x00")
    decoded = message.decode(3, encoded)
    assert decoded["_unknown_tagged_fields"] == [(7, b"\x01\x02"), (200, b"")]
    assert message.encode(3, decoded) == encoded


def test_unknown_tags_merge_with_known_tags_in_order():
    _, response = API_MESSAGES[18]
    value = {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
        "throttle_time_ms": 0,
        "finalized_features_epoch": 5,  # known tag 1
        "_unknown_tagged_fields": [(0x10, b"x")],
    }
    encoded = response.encode(3, value)
    decoded = response.decode(3, encoded)
    assert decoded["finalized_features_epoch"] == 5
    assert decoded["_unknown_tagged_fields"] == [(0x10, b"x")]
    assert response.encode(3, decoded) == encoded
    # Sorted: the known tag 1 comes before the unknown tag 16.
    assert encoded.endswith(b"\x02\x01\x08" + (5).to_bytes(8, "big") + b"\x10\x01x")


def test_unknown_tags_in_nested_struct():
    _, response = API_MESSAGES[18]
    value = {
        "api_keys": [{"api_key": 1, "min_version": 0, "max_version": 17,
                      "_unknown_tagged_fields": [(3, b"abc")]}],
    }
    decoded = response.decode(3, response.encode(3, value))
    assert plain(decoded["api_keys"][0]["_unknown_tagged_fields"]) == [[3, b"abc"]]


METADATA_CASES = [
    pytest.param(message, version, id=f"{message.name}-v{version}")
    for message in _module_messages(metadata_records)
    for version in all_versions(message)
]


@pytest.mark.parametrize(("message", "version"), METADATA_CASES)
@settings(max_examples=10)
@given(data=st.data())
def test_metadata_record_frame_round_trip(message: Message, version: int, data):
    value = data.draw(message_values(message, version))
    framed = encode_metadata_record(MetadataRecord(message, version, value))
    # Frame: uvarint frame version 1, uvarint api key, uvarint version.
    assert framed[0] == 1
    decoded = decode_metadata_record(framed)
    assert decoded.message is message
    assert decoded.version == version
    assert project(message, message.fields, version, decoded.data) == plain(value)
    assert encode_metadata_record(decoded) == framed


@pytest.mark.parametrize("header_version", [0, 1, 2])
@settings(max_examples=50)
@given(
    api_key=st.integers(-(1 << 15), (1 << 15) - 1),
    api_version=st.integers(-(1 << 15), (1 << 15) - 1),
    correlation_id=st.integers(-(1 << 31), (1 << 31) - 1),
    client_id=st.none() | st.text(st.characters(codec="utf-8"), max_size=30),
)
def test_request_header_wire_layout(header_version, api_key, api_version, correlation_id, client_id):
    value = {"request_api_key": api_key, "request_api_version": api_version,
             "correlation_id": correlation_id, "client_id": client_id}
    encoded = header.REQUEST_HEADER.encode(header_version, value)
    expected = api_key.to_bytes(2, "big", signed=True) + api_version.to_bytes(2, "big", signed=True)
    expected += correlation_id.to_bytes(4, "big", signed=True)
    if header_version >= 1:
        # ClientId keeps its int16 length even in the flexible v2 header.
        if client_id is None:
            expected += b"\xff\xff"
        else:
            raw = client_id.encode()
            expected += len(raw).to_bytes(2, "big") + raw
    if header_version == 2:
        expected += b"\x00"
    assert encoded == expected
    decoded = header.REQUEST_HEADER.decode(header_version, encoded)
    assert decoded["client_id"] == (client_id if header_version >= 1 else header.REQUEST_HEADER.default(0)["client_id"])


@pytest.mark.parametrize("header_version", [0, 1])
@given(correlation_id=st.integers(-(1 << 31), (1 << 31) - 1))
def test_response_header_helper_matches_declaration(header_version, correlation_id):
    encoded = header.encode_response_header(correlation_id, header_version)
    assert encoded == header.RESPONSE_HEADER.encode(header_version, {"correlation_id": correlation_id})
    assert header.RESPONSE_HEADER.decode(header_version, encoded)["correlation_id"] == correlation_id
