"""metadata.version gating of API versions, and client-side version negotiation."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.registry import API_MESSAGES
from server import gating
from server.controller import features as ft

BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
UPDATE_FEATURES = 57
DESCRIBE_CLUSTER = 60
UNGATED = (18, 3, 55, 1, 52, 53, 54, 59, 64)

LEVELS = [mv.level for mv in ft.METADATA_VERSIONS]


def level(name: str) -> int:
    return ft.metadata_version_from_name(name).level


def test_table_matches_the_issue():
    assert gating.min_metadata_version(BROKER_REGISTRATION, 0) is None
    assert gating.min_metadata_version(BROKER_REGISTRATION, 1) == level("3.4-IV0") == 8
    for version in (2, 3, 4):
        assert gating.min_metadata_version(BROKER_REGISTRATION, version) == level("3.7-IV2") == 17
    assert gating.min_metadata_version(BROKER_HEARTBEAT, 0) is None
    assert gating.min_metadata_version(BROKER_HEARTBEAT, 1) == 17
    assert gating.min_metadata_version(UPDATE_FEATURES, 0) is None
    assert gating.min_metadata_version(UPDATE_FEATURES, 1) == level("3.3-IV0") == 4
    assert gating.min_metadata_version(UPDATE_FEATURES, 2) == level("3.9-IV0") == 21
    assert gating.min_metadata_version(DESCRIBE_CLUSTER, 0) is None
    assert gating.min_metadata_version(DESCRIBE_CLUSTER, 1) == level("3.7-IV0") == 15


@pytest.mark.parametrize("api_key", UNGATED)
def test_other_apis_are_not_gated(api_key):
    for version in range(20):
        assert gating.min_metadata_version(api_key, version) is None
    assert gating.max_allowed_version(api_key, 0, 7, 1) == 7


def test_gates_are_monotone_and_name_real_levels():
    for api_key, gate in gating.GATES.items():
        previous = 0
        for version in range(0, max(gate.needs) + 3):
            needed = gating.min_metadata_version(api_key, version)
            needed = 0 if needed is None else needed
            assert needed >= previous, f"{gate.api_name} v{version} needs less than v{version - 1}"
            previous = needed
        for needed in gate.needs.values():
            ft.metadata_version_from_level(needed)


def test_gates_name_real_apis_and_versions():
    for api_key, gate in gating.GATES.items():
        request, _ = API_MESSAGES[api_key]
        assert request.name == gate.api_name + "Request"
        low, high = request.version_range
        for version in gate.needs:
            assert low <= version <= high


def test_broker_registration_at_3_5_iv2_and_3_7_iv2():
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, level("3.5-IV2")) == 1
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, level("3.7-IV1")) == 1
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, level("3.7-IV2")) == 4
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, level("3.3-IV3")) == 0
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, level("4.0-IV3")) == 4


def test_broker_heartbeat_below_3_7_iv2():
    for mv_level in range(1, 17):
        assert gating.max_allowed_version(BROKER_HEARTBEAT, 0, 1, mv_level) == 0
    assert gating.max_allowed_version(BROKER_HEARTBEAT, 0, 1, 17) == 1


def test_update_features_steps():
    assert gating.max_allowed_version(UPDATE_FEATURES, 0, 2, 3) == 0
    assert gating.max_allowed_version(UPDATE_FEATURES, 0, 2, 4) == 1
    assert gating.max_allowed_version(UPDATE_FEATURES, 0, 2, 20) == 1
    assert gating.max_allowed_version(UPDATE_FEATURES, 0, 2, 21) == 2


def test_nothing_allowed_when_min_version_is_gated():
    assert gating.max_allowed_version(BROKER_REGISTRATION, 2, 4, level("3.6-IV2")) is None
    assert gating.max_allowed_version(BROKER_REGISTRATION, 2, 4, level("3.7-IV2")) == 4


def test_unknown_metadata_version_gates_nothing():
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 4, None) == 4
    assert gating.max_allowed_version(BROKER_REGISTRATION, 2, 4, None) == 4
    served = {BROKER_REGISTRATION: (0, 4), BROKER_HEARTBEAT: (0, 1), 18: (0, 4)}
    assert gating.gated_ranges(served, None) == served


def test_versions_above_the_table_inherit_the_last_gate():
    assert gating.min_metadata_version(BROKER_REGISTRATION, 9) == 17
    assert gating.max_allowed_version(BROKER_REGISTRATION, 0, 9, 16) == 1


def test_gated_ranges():
    served = {
        18: (0, 4),
        BROKER_REGISTRATION: (0, 4),
        BROKER_HEARTBEAT: (1, 1),
        UPDATE_FEATURES: (0, 2),
        DESCRIBE_CLUSTER: (0, 1),
    }
    assert gating.gated_ranges(served, level("3.6-IV2")) == {
        18: (0, 4),
        BROKER_REGISTRATION: (0, 1),
        UPDATE_FEATURES: (0, 1),
        DESCRIBE_CLUSTER: (0, 0),
    }  # BrokerHeartbeat served only at v1: dropped
    assert gating.gated_ranges(served, level("3.9-IV0")) == served
    assert served[BROKER_REGISTRATION] == (0, 4)  # input untouched


def test_describe_gates():
    lines = gating.describe_gates()
    assert "BrokerRegistration v1 needs metadata.version 3.4-IV0 (8)" in lines
    assert "BrokerRegistration v2+ needs metadata.version 3.7-IV2 (17)" in lines
    assert "BrokerHeartbeat v1+ needs metadata.version 3.7-IV2 (17)" in lines
    assert "UpdateFeatures v1 needs metadata.version 3.3-IV0 (4)" in lines
    assert "UpdateFeatures v2+ needs metadata.version 3.9-IV0 (21)" in lines
    assert "DescribeCluster v1+ needs metadata.version 3.7-IV0 (15)" in lines
    assert "AlterPartition v2 needs metadata.version 3.2-IV0 (3)" in lines
    assert "AlterPartition v3+ needs metadata.version 3.5-IV1 (10)" in lines
    assert len(lines) == 8


def test_negotiate():
    assert gating.negotiate((0, 4), (0, 2)) == 2
    assert gating.negotiate((0, 2), (0, 4)) == 2
    assert gating.negotiate((1, 3), (3, 7)) == 3
    assert gating.negotiate((0, 1), (2, 4)) is None
    assert gating.negotiate((2, 4), (0, 1)) is None
    assert gating.negotiate((0, 0), (0, 0)) == 0


@given(
    api_key=st.sampled_from(sorted(gating.GATES) + list(UNGATED)),
    mv_level=st.sampled_from(LEVELS),
    low=st.integers(0, 6),
    width=st.integers(0, 6),
)
def test_max_allowed_version_property(api_key, mv_level, low, width):
    high = low + width
    allowed = gating.max_allowed_version(api_key, low, high, mv_level)

    def ok(version):
        needed = gating.min_metadata_version(api_key, version)
        return needed is None or needed <= mv_level

    if allowed is None:
        assert not any(ok(version) for version in range(low, high + 1))
    else:
        assert low <= allowed <= high
        assert all(ok(version) for version in range(low, allowed + 1))
        # It is the highest: the next one up (if served) is refused.
        if allowed < high:
            assert not ok(allowed + 1)


@given(
    local=st.tuples(st.integers(0, 10), st.integers(0, 10)).map(sorted),
    remote=st.tuples(st.integers(0, 10), st.integers(0, 10)).map(sorted),
)
def test_negotiate_property(local, remote):
    chosen = gating.negotiate(tuple(local), tuple(remote))
    common = set(range(local[0], local[1] + 1)) & set(range(remote[0], remote[1] + 1))
    assert chosen == (max(common) if common else None)
