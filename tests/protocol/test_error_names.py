"""Error codes from peers are named, never trusted to be in our table."""

from __future__ import annotations

from protocol.errors import ErrorCode, error_name


def test_a_known_code_is_named_by_kafka_name():
    assert error_name(11) == "STALE_CONTROLLER_EPOCH" == ErrorCode.STALE_CONTROLLER_EPOCH.name
    assert error_name(0) == "NONE"


def test_a_code_missing_from_the_table_is_named_by_its_number():
    # A ZooKeeper broker or any peer may answer with any int16: naming it must not raise.
    assert error_name(32767) == "error code 32767"
    assert error_name(-2) == "error code -2"
