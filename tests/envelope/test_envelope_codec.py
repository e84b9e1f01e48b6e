"""The pure parts of forwarding in an Envelope: principal and client address bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.security.envelope import (
    EnvelopeError,
    address_bytes,
    address_text,
    deserialize_principal,
    serialize_principal,
)
from server.security.model import KafkaPrincipal


@given(st.text(min_size=1, max_size=20), st.text(max_size=40))
def test_principal_round_trip(kind, name):
    principal = KafkaPrincipal(kind, name)
    assert deserialize_principal(serialize_principal(principal)) == principal


def test_principal_bytes_are_kafkas_version_prefixed_default_principal_data():
    # int16 version 0, compact string "User", compact string "alice", bool false, no tags.
    assert serialize_principal(KafkaPrincipal("User", "alice")) == b"\x00\x00\x05User\x06alice\x00\x00"


@pytest.mark.parametrize("data", [None, b"", b"\x00", b"\x00\x01\x05User\x06alice\x00\x00", b"\x00\x00\x05Us",
                                  b"\x00\x00\x01\x06alice\x00\x00"])
def test_bad_principal_bytes_are_an_envelope_error(data):
    with pytest.raises(EnvelopeError):
        deserialize_principal(data)


@given(st.binary(max_size=64))
def test_any_principal_bytes_decode_or_raise_envelope_error(data):
    try:
        deserialize_principal(data)
    except EnvelopeError:
        pass


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "::1", "fe80::1"])
def test_address_round_trip(host):
    assert address_text(address_bytes(host)) == host


@pytest.mark.parametrize("data", [b"", b"\x7f\x00\x00", b"\x00" * 5])
def test_bad_address_bytes_are_an_envelope_error(data):
    with pytest.raises(EnvelopeError):
        address_text(data)
