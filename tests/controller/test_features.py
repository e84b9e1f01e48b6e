"""The feature catalog: Kafka's levels, names and the lossless-downgrade rule."""

import pytest

from server.controller import features as ft


def test_catalog_levels_and_names_match_kafka():
    assert [mv.level for mv in ft.METADATA_VERSIONS] == list(range(1, 35))
    assert ft.metadata_version_from_level(1).name == "3.0-IV1"
    assert ft.metadata_version_from_level(22).name == "4.0-IV0"
    assert ft.metadata_version_from_level(25).name == "4.0-IV3"
    assert ft.metadata_version_from_level(27).name == "4.1-IV1"
    assert ft.metadata_version_from_level(29).name == "4.2-IV1"
    assert ft.metadata_version_from_level(30).name == "4.3-IV0"
    assert ft.metadata_version_from_level(33).name == "4.4-IV2"
    assert ft.metadata_version_from_level(34).name == "4.5-IV0"
    assert ft.metadata_version_from_name("3.3-IV0").level == 4
    assert ft.metadata_version_from_name("3.9-IV0").level == 21
    assert ft.metadata_version_from_name("4.4-IV0").release == "4.4"
    changed = {mv.level for mv in ft.METADATA_VERSIONS if mv.did_metadata_change}
    assert changed == {1, 3, 5, 6, 7, 8, 11, 13, 14, 15, 17, 23, 30, 32, 33}
    # Only the level Kafka 4.4.0 still develops is not production-ready.
    assert [mv.name for mv in ft.METADATA_VERSIONS if not mv.production] == ["4.5-IV0"]


def test_named_versions():
    assert (ft.MINIMUM_BOOTSTRAP_VERSION.name, ft.MINIMUM_BOOTSTRAP_VERSION.level) == ("3.3-IV0", 4)
    assert (ft.LATEST_PRODUCTION.name, ft.LATEST_PRODUCTION.level) == ("4.4-IV2", 33)
    assert (ft.LATEST_TESTING.name, ft.LATEST_TESTING.level) == ("4.5-IV0", 34)
    assert str(ft.MINIMUM_BOOTSTRAP_VERSION) == "3.3-IV0"


def test_unknown_lookups_raise():
    with pytest.raises(ValueError):
        ft.metadata_version_from_level(35)
    with pytest.raises(ValueError):
        ft.metadata_version_from_level(0)
    with pytest.raises(ValueError):
        ft.metadata_version_from_name("2.8-IV1")
    assert ft.find_metadata_version(99) is None


@pytest.mark.parametrize(
    ("high", "low", "lossless"),
    [
        (22, 18, True),  # 3.7-IV4 .. 4.0-IV0: nothing changed
        (22, 17, True),  # 17 itself is the target, so its change is kept
        (22, 16, False),  # crossing 3.7-IV2
        (10, 8, True),
        (11, 10, False),
        (25, 24, True),
        (25, 22, False),  # crossing 4.0-IV1
        (29, 23, True),  # 4.0-IV1 .. 4.2-IV1: nothing changed since 4.0-IV1
        (30, 29, False),  # crossing 4.3-IV0
        (31, 30, True),
        (33, 32, False),  # crossing 4.4-IV2
        (34, 33, True),
        (4, 4, True),
        (5, 4, False),
    ],
)
def test_is_lossless_downgrade(high, low, lossless):
    assert ft.is_lossless_downgrade(high, low) is lossless


def test_record_version_gates():
    assert ft.register_broker_record_version(4) == 0
    assert ft.register_broker_record_version(7) == 1
    assert ft.register_broker_record_version(8) == 2
    assert ft.register_broker_record_version(17) == 3
    assert not ft.broker_registration_change_record_supported(5)
    assert ft.broker_registration_change_record_supported(6)


def test_default_feature_levels_follow_bootstrap_versions():
    later = {"eligible.leader.replicas.version": 0, "share.version": 0, "streams.version": 0}
    assert ft.default_feature_levels(20) == {"kraft.version": 0, "group.version": 0, "transaction.version": 0, **later}
    assert ft.default_feature_levels(21) == {"kraft.version": 1, "group.version": 0, "transaction.version": 0, **later}
    assert ft.default_feature_levels(22) == {"kraft.version": 1, "group.version": 1, "transaction.version": 0, **later}
    assert ft.default_feature_levels(24) == {"kraft.version": 1, "group.version": 1, "transaction.version": 2, **later}
    current = {"kraft.version": 1, "group.version": 1, "transaction.version": 2}
    assert ft.default_feature_levels(26) == {**current, **later, "eligible.leader.replicas.version": 1}
    assert ft.default_feature_levels(28) == {**current, "eligible.leader.replicas.version": 1, "share.version": 1,
                                             "streams.version": 0}
    assert ft.default_feature_levels(33) == {**current, "eligible.leader.replicas.version": 1, "share.version": 2,
                                             "streams.version": 1}
    assert ft.default_feature_level("metadata.version", 13) == 13


def test_dependency_messages():
    # Kafka 4.4.0's only dependency on another feature's level: ELR needs 4.0-IV1.
    assert ft.dependency_error("eligible.leader.replicas.version", 1, {"metadata.version": 22}) == (
        "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"
    )
    assert ft.dependency_error("eligible.leader.replicas.version", 1, {"metadata.version": 23}) is None
    # Kafka 4.4.0's kraft.version 1 depends on nothing (kraft.version changes are the
    # raft layer's, checked against the voters instead).
    assert ft.dependency_error("kraft.version", 1, {"metadata.version": 20}) is None
    assert ft.dependency_error("group.version", 1, {"metadata.version": 3}) == (
        "group.version could not be set to 1 because it depends on metadata.version=4 (3.3-IV0)"
    )
    assert ft.dependency_error("group.version", 0, {}) is None


def test_local_supported_features():
    production = ft.local_supported_features(False)
    assert production["metadata.version"] == ft.SupportedRange(1, 33)
    assert ft.local_supported_features(True)["metadata.version"] == ft.SupportedRange(1, 34)
    assert production["transaction.version"] == ft.SupportedRange(0, 2)
    assert production["eligible.leader.replicas.version"] == ft.SupportedRange(0, 1)
    assert production["share.version"] == ft.SupportedRange(0, 2)
    assert production["streams.version"] == ft.SupportedRange(0, 1)
    assert str(ft.SupportedRange(1, 22)) == "1-22"
    assert str(ft.SupportedRange(3, 3)) == "3"


def test_unsupported_finalized_levels_names_each_feature_and_range():
    from server.controller.features import local_supported_features, unsupported_finalized_levels

    production = local_supported_features(False)
    assert unsupported_finalized_levels({"metadata.version": 22, "group.version": 1}, production) == []
    reasons = unsupported_finalized_levels({"metadata.version": 34, "transaction.version": 2,
                                            "made.up.feature": 1, "group.version": 0}, production)
    assert reasons == [
        "made.up.feature is finalized at 1, but this node supports 0",
        "metadata.version is finalized at 34 (4.5-IV0), but this node supports 1-33",
    ]
    assert unsupported_finalized_levels({"metadata.version": 34}, local_supported_features(True)) == []
