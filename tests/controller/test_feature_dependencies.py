"""Feature dependencies (KIP-1022): the catalog's lookups for releases, levels and
dependencies, and the refusals UpdateFeatures gives when a level would lack what it
depends on, in Kafka's words where Kafka has them."""

import pytest

from protocol.errors import ErrorCode
from server.controller import commands as cmd
from server.controller import features as ft
from server.controller import kafka_feature_catalog as kafka
from .helpers import Cluster

PREFIX = "The update failed for all features since the following feature had an error: "
SAFE, UNSAFE, UPGRADE = cmd.SAFE_DOWNGRADE, cmd.UNSAFE_DOWNGRADE, cmd.UPGRADE
ELR = "eligible.leader.replicas.version"


def assert_rejected(cluster: Cluster, result: cmd.ControllerResult, reason: str) -> None:
    before = cluster.state.snapshot()
    assert result.records == []
    assert result.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert result.response["error_message"] == PREFIX + reason
    assert cluster.state.snapshot() == before


# --------------------------------------------------------------------------
# the catalog's lookups
# --------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("3.9-IV0", "3.9-IV0"),
    ("3.9", "3.9-IV0"),
    ("3.7", "3.7-IV4"),      # a release is its last production level
    ("4.0", "4.0-IV3"),
    ("4.4", "4.4-IV2"),
    ("3.3", "3.3-IV3"),
    ("4.4.0", "4.4-IV2"),    # only the first two dot-separated parts count
    ("3.9.1", "3.9-IV0"),
    ("3.0", "3.0-IV1"),      # kraftwerk still knows the levels Kafka 4 dropped
    ("3.2-IV0", "3.2-IV0"),
])
def test_release_names_and_releases_resolve_as_kafka_resolves_them(text, expected):
    assert ft.metadata_version_for_release(text, unstable_enabled=False).name == expected


@pytest.mark.parametrize("text", ["foo", "", "4.5", "9.9-IV9", "3.9-IV9", "21", "3"])
def test_unknown_releases_resolve_to_nothing(text):
    # 4.5 has no production level yet, so the release 4.5 names none.
    assert ft.metadata_version_for_release(text, unstable_enabled=True) is None


def test_a_level_still_in_development_needs_unstable_levels():
    assert ft.metadata_version_for_release("4.5-IV0", unstable_enabled=False) is None
    assert ft.metadata_version_for_release("4.5-IV0", unstable_enabled=True) == ft.LATEST_TESTING


def test_every_kafka_name_and_release_is_known():
    for mv in kafka.KAFKA_METADATA_VERSIONS:
        assert ft.metadata_version_for_release(mv.name, unstable_enabled=True).level == mv.level
        last_of_release = [m for m in kafka.KAFKA_METADATA_VERSIONS if m.release == mv.release and m.production]
        if last_of_release:
            assert ft.metadata_version_for_release(mv.release, unstable_enabled=False).level == \
                last_of_release[-1].level


def test_production_feature_order_is_kafkas():
    assert ft.PRODUCTION_FEATURE_ORDER == ("kraft.version", "transaction.version", "group.version", ELR,
                                           "share.version", "streams.version")
    assert set(ft.PRODUCTION_FEATURE_ORDER) == set(ft.FEATURES)


def test_feature_levels_that_exist():
    assert ft.feature_level_error("group.version", 0, unstable_enabled=False) is None
    assert ft.feature_level_error("share.version", 2, unstable_enabled=False) is None
    assert ft.feature_level_error("share.version", 3, unstable_enabled=True) == \
        "No feature:share.version with feature level 3"
    assert ft.feature_level_error("group.version", -1, unstable_enabled=True) == \
        "No feature:group.version with feature level -1"


def test_dependencies_are_the_catalogs():
    assert dict(ft.feature_dependencies(ELR, 1)) == {"metadata.version": 23}
    assert dict(ft.feature_dependencies(ELR, 0)) == {}
    assert dict(ft.feature_dependencies("group.version", 1)) == {}
    assert dict(ft.feature_dependencies("no.such.feature", 1)) == {}


def test_blocked_dependent_names_the_feature_a_lower_level_would_strand():
    assert ft.blocked_dependent("metadata.version", {"metadata.version": 22, ELR: 1}) == (ELR, 1, 23)
    assert ft.blocked_dependent("metadata.version", {"metadata.version": 23, ELR: 1}) is None
    assert ft.blocked_dependent("metadata.version", {"metadata.version": 22, ELR: 0}) is None


# --------------------------------------------------------------------------
# UpdateFeatures
# --------------------------------------------------------------------------

def test_a_level_that_needs_a_higher_metadata_version_is_refused_with_kafkas_text():
    cluster = Cluster.bootstrapped(mv_level=22)
    assert_rejected(cluster, cluster.update([(ELR, 1, UPGRADE)]),
                    f"Invalid update version 1 for feature {ELR}. {ELR} could not be set to 1 because it depends on "
                    "metadata.version level 23")


def test_validate_only_refuses_the_same_way():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([(ELR, 1, UPGRADE)], validate_only=True)
    assert result.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert "depends on metadata.version level 23" in result.response["error_message"]


def test_the_dependency_is_met_by_a_metadata_version_raised_in_the_same_request_in_any_order():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([(ELR, 1, UPGRADE), ("metadata.version", 24, UPGRADE)])
    assert result.response["error_code"] == 0
    assert cluster.state.finalized_level(ELR) == 1
    assert cluster.state.metadata_version == 24


def test_an_unsafe_metadata_version_downgrade_below_a_dependency_is_refused():
    # 4.4-IV2 has ELR 1; KIP-778's unsafe downgrade to 4.0-IV0 would leave it at a
    # metadata.version that cannot carry it.
    cluster = Cluster.bootstrapped(mv_level=33)
    assert cluster.state.finalized_level(ELR) == 1
    assert_rejected(cluster, cluster.update([("metadata.version", 22, UNSAFE)]),
                    f"Unsupported metadata.version downgrade from 33 to 22. {ELR}=1 depends on metadata.version "
                    f"level 23; lower or disable {ELR} in the same request.")


def test_the_same_downgrade_with_the_dependent_disabled_in_the_request_is_done():
    cluster = Cluster.bootstrapped(mv_level=33)
    result = cluster.update([("metadata.version", 22, UNSAFE), (ELR, 0, UNSAFE)])
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 22
    assert cluster.state.finalized_level(ELR) == 0


def test_a_safe_lossy_downgrade_still_gets_kafkas_lossy_refusal_first():
    cluster = Cluster.bootstrapped(mv_level=33)
    assert_rejected(cluster, cluster.update([("metadata.version", 22, SAFE)]),
                    "Unsupported metadata.version downgrade from 33 to 22. Refusing to perform the requested "
                    "downgrade because it might delete metadata information.")


def test_a_downgrade_that_keeps_the_dependency_is_not_refused_by_it():
    cluster = Cluster.bootstrapped(mv_level=27)  # 4.1-IV1: ELR 1
    result = cluster.update([("metadata.version", 23, SAFE)])  # lossless down to 4.0-IV1
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 23
    assert cluster.state.finalized_level(ELR) == 1


def test_disabling_a_feature_kafka_does_not_know_is_refused_with_kafkas_text():
    # Every node "supports" an unknown feature at 0 (its range is 0-0), so Kafka's
    # catalog lookup is what refuses it.
    cluster = Cluster.bootstrapped(mv_level=22)
    assert_rejected(cluster, cluster.update([("no.such.feature", 0, SAFE)]),
                    "Invalid update version 0 for feature no.such.feature. Feature no.such.feature not found.")


def release_updates(release_level: int, upgrade_type: int) -> list[tuple[str, int, int]]:
    """What `features upgrade|downgrade --release-version` sends (cli/release_tools.py)."""
    implied = {name: ft.default_feature_level(name, release_level) for name in ft.PRODUCTION_FEATURE_ORDER}
    sent = {name: level for name, level in implied.items() if upgrade_type != UPGRADE or level > 0}
    return [(name, level, upgrade_type) for name, level in sorted({"metadata.version": release_level, **sent}.items())]


def test_what_a_release_implies_is_accepted_by_the_controller():
    # upgrade --release-version 3.8 from 3.7-IV4: metadata.version only (every other
    # feature is 0 at 3.8, and an upgrade sends no zeros).
    cluster = Cluster.bootstrapped(mv_level=19)
    assert release_updates(20, UPGRADE) == [("metadata.version", 20, UPGRADE)]
    assert cluster.update(release_updates(20, UPGRADE)).response["error_code"] == 0
    assert cluster.state.metadata_version == 20
    # downgrade --release-version 3.8 from 3.9-IV0: every feature, zeros included.
    cluster = Cluster.bootstrapped(mv_level=21)
    assert len(release_updates(20, SAFE)) == 1 + len(ft.FEATURES)
    assert cluster.update(release_updates(20, SAFE)).response["error_code"] == 0
    assert cluster.state.metadata_version == 20


def test_a_release_downgrade_takes_the_dependent_feature_down_with_metadata_version():
    # downgrade --release-version 4.0 from 4.1-IV1 on a quorum at kraft.version 1:
    # eligible.leader.replicas.version goes 1 -> 0 in the same request as
    # metadata.version 27 -> 25, so the dependency never breaks.
    cluster = Cluster.bootstrapped(mv_level=27)
    cluster.state.replay_kraft_version(1, cluster.next_offset)
    cluster.next_offset += 1
    result = cluster.update(release_updates(25, SAFE))
    assert result.response["error_code"] == 0, result.response
    assert cluster.state.metadata_version == 25
    assert cluster.state.finalized_level(ELR) == 0
    assert cluster.state.finalized_level("transaction.version") == 2
