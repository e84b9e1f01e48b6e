"""The feature catalog: Kafka's levels, names and the lossless-downgrade rule."""

import pytest

from server.controller import features as ft


def test_catalog_levels_and_names_match_kafka():
    assert [mv.level for mv in ft.METADATA_VERSIONS] == list(range(1, 26))
    assert ft.metadata_version_from_level(1).name == "3.0-IV1"
    assert ft.metadata_version_from_level(22).name == "4.0-IV0"
    assert ft.metadata_version_from_level(25).name == "4.0-IV3"
    assert ft.metadata_version_from_name("3.3-IV0").level == 4
    assert ft.metadata_version_from_name("3.9-IV0").level == 21
    changed = {mv.level for mv in ft.METADATA_VERSIONS if mv.did_metadata_change}
    assert changed == {1, 3, 5, 6, 7, 8, 11, 13, 14, 15, 17, 23}


def test_named_versions():
    assert (ft.MINIMUM_BOOTSTRAP_VERSION.name, ft.MINIMUM_BOOTSTRAP_VERSION.level) == ("3.3-IV0", 4)
    assert (ft.LATEST_PRODUCTION.name, ft.LATEST_PRODUCTION.level) == ("4.0-IV0", 22)
    assert str(ft.MINIMUM_BOOTSTRAP_VERSION) == "3.3-IV0"


def test_unknown_lookups_raise():
    with pytest.raises(ValueError):
        ft.metadata_version_from_level(26)
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
    assert ft.default_feature_levels(20) == {"kraft.version": 0, "group.version": 0, "transaction.version": 0}
    assert ft.default_feature_levels(21) == {"kraft.version": 1, "group.version": 0, "transaction.version": 0}
    assert ft.default_feature_levels(22) == {"kraft.version": 1, "group.version": 1, "transaction.version": 0}
    assert ft.default_feature_levels(24) == {"kraft.version": 1, "group.version": 1, "transaction.version": 2}
    assert ft.default_feature_level("metadata.version", 13) == 13


def test_dependency_messages():
    assert ft.dependency_error("kraft.version", 1, {"metadata.version": 20}) == (
        "kraft.version could not be set to 1 because it depends on metadata.version level 21"
    )
    assert ft.dependency_error("kraft.version", 1, {"metadata.version": 21}) is None
    assert ft.dependency_error("group.version", 1, {"metadata.version": 3}) == (
        "group.version could not be set to 1 because it depends on metadata.version=4 (3.3-IV0)"
    )
    assert ft.dependency_error("group.version", 0, {}) is None


def test_local_supported_features():
    production = ft.local_supported_features(False)
    assert production["metadata.version"] == ft.SupportedRange(1, 22)
    assert ft.local_supported_features(True)["metadata.version"] == ft.SupportedRange(1, 25)
    assert production["transaction.version"] == ft.SupportedRange(0, 2)
    assert str(ft.SupportedRange(1, 22)) == "1-22"
    assert str(ft.SupportedRange(3, 3)) == "3"


def test_unsupported_finalized_levels_names_each_feature_and_range():
    from server.controller.features import local_supported_features, unsupported_finalized_levels

    production = local_supported_features(False)
    assert unsupported_finalized_levels({"metadata.version": 22, "group.version": 1}, production) == []
    reasons = unsupported_finalized_levels({"metadata.version": 25, "transaction.version": 2,
                                            "made.up.feature": 1, "group.version": 0}, production)
    assert reasons == [
        "made.up.feature is finalized at 1, but this node supports 0",
        "metadata.version is finalized at 25 (4.0-IV3), but this node supports 1-22",
    ]
    assert unsupported_finalized_levels({"metadata.version": 25}, local_supported_features(True)) == []
