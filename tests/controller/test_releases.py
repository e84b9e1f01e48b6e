"""The release catalog: each Kafka release's feature ranges, and name lookup."""

import pytest

from server import releases
from server.controller import features as ft

MV = ft.METADATA_VERSION


def mv_range(name: str) -> tuple[str, str]:
    supported = releases.release(name).features[MV]
    return (
        ft.metadata_version_from_level(supported.min_level).name,
        ft.metadata_version_from_level(supported.max_level).name,
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("3.3", ("3.0-IV1", "3.3-IV3")),
        ("3.4", ("3.0-IV1", "3.4-IV0")),
        ("3.5", ("3.0-IV1", "3.5-IV2")),
        ("3.6", ("3.0-IV1", "3.6-IV2")),
        ("3.7", ("3.0-IV1", "3.7-IV4")),
        ("3.8", ("3.0-IV1", "3.8-IV0")),
        ("3.9", ("3.0-IV1", "3.9-IV0")),
        ("4.0", ("3.3-IV3", "4.0-IV3")),
        ("4.1", ("3.3-IV3", "4.1-IV1")),
        ("4.2", ("3.3-IV3", "4.2-IV1")),
        ("4.3", ("3.3-IV3", "4.3-IV0")),
        ("4.4", ("3.3-IV3", "4.4-IV2")),
    ],
)
def test_metadata_version_ranges(name, expected):
    assert mv_range(name) == expected


def test_release_names_in_order():
    assert releases.RELEASE_NAMES == ("3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "4.0", "4.1", "4.2", "4.3",
                                      "4.4")


def test_3_6_supports_up_to_3_6_iv2_only():
    supported = releases.release("3.6").features[MV]
    assert supported.contains(ft.metadata_version_from_name("3.0-IV1").level)
    assert supported.contains(ft.metadata_version_from_name("3.6-IV2").level)
    assert not supported.contains(ft.metadata_version_from_name("3.7-IV0").level)
    assert not supported.contains(0)


def test_4_0_dropped_levels_below_3_3_iv3():
    supported = releases.release("4.0").features[MV]
    assert not supported.contains(6)  # 3.3-IV2
    assert supported.contains(7)  # 3.3-IV3
    # The lossless-downgrade rule then refuses a 4.0 node in a cluster finalized at 3.3-IV2.
    assert ft.unsupported_finalized_levels({MV: 6}, releases.release("4.0").features)
    assert not ft.unsupported_finalized_levels({MV: 7}, releases.release("4.0").features)


def test_every_max_is_a_real_level_and_releases_are_ordered():
    maxima = []
    for name in releases.RELEASE_NAMES:
        supported = releases.release(name).features[MV]
        mv = ft.metadata_version_from_level(supported.max_level)  # raises if not in the catalog
        ft.metadata_version_from_level(supported.min_level)
        # The max is an IV of the release itself.
        assert mv.name.startswith(name + "-IV")
        maxima.append(supported.max_level)
    assert maxima == sorted(maxima) and len(set(maxima)) == len(maxima)
    # The newest release (the pinned Kafka 4.4.0) reaches kraftwerk's newest production
    # level; the only level above it is one no release ships yet.
    assert maxima[-1] == ft.LATEST_PRODUCTION.level
    assert [mv.name for mv in ft.METADATA_VERSIONS if mv.level > maxima[-1]] == [ft.LATEST_TESTING.name]
    assert not ft.LATEST_TESTING.production


def test_max_is_the_last_iv_of_the_release():
    for name in releases.RELEASE_NAMES:
        ivs = [mv.level for mv in ft.METADATA_VERSIONS if mv.name.startswith(name + "-")]
        assert releases.release(name).features[MV].max_level == max(ivs)


def test_kraft_group_and_transaction_versions():
    for name in ("3.3", "3.4", "3.5", "3.6", "3.7", "3.8"):
        features = releases.release(name).features
        assert features[ft.KRAFT_VERSION] == ft.SupportedRange(0, 0)
        assert ft.GROUP_VERSION not in features
        assert ft.TRANSACTION_VERSION not in features
    assert releases.release("3.9").features[ft.KRAFT_VERSION] == ft.SupportedRange(0, 1)
    assert ft.GROUP_VERSION not in releases.release("3.9").features
    four = releases.release("4.0").features
    assert four[ft.KRAFT_VERSION] == ft.SupportedRange(0, 1)
    assert four[ft.GROUP_VERSION] == ft.SupportedRange(0, 1)
    assert four[ft.TRANSACTION_VERSION] == ft.SupportedRange(0, 2)
    later = (ft.ELIGIBLE_LEADER_REPLICAS_VERSION, ft.SHARE_VERSION, ft.STREAMS_VERSION)
    assert not any(name in four for name in later)


def test_features_kafka_added_after_4_0():
    elr, share, streams = ft.ELIGIBLE_LEADER_REPLICAS_VERSION, ft.SHARE_VERSION, ft.STREAMS_VERSION
    assert releases.release("4.1").features[elr] == ft.SupportedRange(0, 1)
    assert share not in releases.release("4.1").features
    assert streams not in releases.release("4.1").features
    for name in ("4.2", "4.3"):
        features = releases.release(name).features
        assert (features[elr], features[share], features[streams]) == (
            ft.SupportedRange(0, 1), ft.SupportedRange(0, 1), ft.SupportedRange(0, 1))
    newest = releases.release("4.4").features
    assert newest[share] == ft.SupportedRange(0, 2)
    # kraftwerk's own production ranges are those of the pinned Kafka release, except
    # that kraftwerk still runs the metadata.versions below 3.3-IV3 that Kafka 4 dropped.
    own = dict(ft.local_supported_features(False))
    assert own.pop(MV) == ft.SupportedRange(1, newest[MV].max_level)
    assert newest[MV].min_level == ft.metadata_version_from_name("3.3-IV3").level
    assert {name: r for name, r in newest.items() if name != MV} == own


def test_release_ranges_follow_kafkas_bootstrap_versions():
    # A release from 4.0 on supports a feature level iff Kafka's catalog bootstraps that
    # level at or below the release's top metadata.version.
    for name in ("4.0", "4.1", "4.2", "4.3", "4.4"):
        features = releases.release(name).features
        top = features[MV].max_level
        for feature, spec in ft.FEATURES.items():
            expected = max([0] + [level.level for level in spec.levels if level.bootstrap_mv_level <= top])
            assert features.get(feature, ft.DISABLED).max_level == expected, (name, feature)


def test_release_before_3_9_cannot_join_a_cluster_at_kraft_version_1():
    finalized = {MV: 21, ft.KRAFT_VERSION: 1}
    assert ft.unsupported_finalized_levels(finalized, releases.release("3.8").features) == [
        "kraft.version is finalized at 1, but this node supports 0",
        "metadata.version is finalized at 21 (3.9-IV0), but this node supports 1-20",
    ]
    assert ft.unsupported_finalized_levels(finalized, releases.release("3.9").features) == []


def test_patch_versions_map_to_their_release():
    assert releases.release("3.7.1") is releases.release("3.7")
    assert releases.release("3.7.1").name == "3.7"
    assert releases.release("4.0.0").name == "4.0"


@pytest.mark.parametrize("name", ["2.8", "3.10", "5.0", "3", "3.6.1.2", "3.6-IV2", "", "three"])
def test_unknown_release_raises_with_the_known_names(name):
    with pytest.raises(ValueError) as raised:
        releases.release(name)
    message = str(raised.value)
    assert repr(name) in message
    for known in releases.RELEASE_NAMES:
        assert known in message


def test_release_features_are_read_only():
    with pytest.raises(TypeError):
        releases.release("3.6").features[MV] = ft.SupportedRange(0, 99)  # type: ignore[index]


def test_supported_features_none_is_kraftwerks_own():
    assert dict(releases.supported_features(None, False)) == dict(ft.local_supported_features(False))
    assert dict(releases.supported_features(None, True)) == dict(ft.local_supported_features(True))
    assert releases.supported_features(None, True)[MV].max_level == ft.LATEST_TESTING.level
    assert releases.supported_features(None, False)[MV].max_level == ft.LATEST_PRODUCTION.level


def test_named_release_ignores_unstable():
    for name in ("3.6", "4.0", "3.9.1"):
        stable = releases.supported_features(name, False)
        assert releases.supported_features(name, True) == stable
        assert stable == releases.release(name).features
    assert releases.supported_features("3.6", True)[MV].max_level == 14
    with pytest.raises(ValueError):
        releases.supported_features("9.9", False)
