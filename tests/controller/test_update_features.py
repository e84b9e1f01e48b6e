"""UpdateFeatures: Kafka's checks, their order and their exact messages."""

import uuid

import pytest

from protocol.errors import ErrorCode
from server.controller import commands as cmd
from .helpers import NODE_ID, Cluster, features_request

PREFIX = "The update failed for all features since the following feature had an error: "
SAFE, UNSAFE, UPGRADE = cmd.SAFE_DOWNGRADE, cmd.UNSAFE_DOWNGRADE, cmd.UPGRADE


def assert_rejected(cluster: Cluster, result: cmd.ControllerResult, reason: str, code=ErrorCode.INVALID_UPDATE_VERSION):
    before = cluster.state.snapshot()
    assert result.records == []
    assert result.response["error_code"] == code
    assert result.response["error_message"] == PREFIX + reason
    assert result.response.get("results", []) == []
    assert cluster.state.snapshot() == before


def test_upgrade_writes_record_and_replays():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 22, UPGRADE)])
    assert result.response == {"throttle_time_ms": 0, "error_code": 0, "error_message": None}
    assert [r.data for r in result.records] == [{"name": "metadata.version", "feature_level": 22}]
    assert result.atomic
    assert cluster.state.metadata_version == 22
    assert cluster.state.finalized_features_epoch == cluster.next_offset - 1


@pytest.mark.parametrize("version", [0, 1])
def test_v0_v1_carry_per_feature_results(version):
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 21, UPGRADE), ("group.version", 1, UPGRADE)], version=version)
    assert result.response["results"] == [
        {"feature": "metadata.version", "error_code": 0, "error_message": "NONE"},
        {"feature": "group.version", "error_code": 0, "error_message": "NONE"},
    ]
    assert cluster.state.finalized_level("group.version") == 1


def test_v0_allow_downgrade_is_ignored():
    # Kafka's controller reads UpgradeType, which v0 lacks (default 1 = upgrade).
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 21, SAFE)], version=0)
    assert_rejected(
        cluster,
        result,
        "Invalid update version 21 for feature metadata.version. Can't downgrade the version of this feature "
        "without setting the upgrade type to either safe or unsafe downgrade.",
    )


def test_safe_lossless_downgrade_is_accepted():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 18, SAFE)])
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 18


def test_safe_lossy_downgrade_is_refused():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 16, SAFE)])
    assert_rejected(
        cluster,
        result,
        "Unsupported metadata.version downgrade from 22 to 16. Refusing to perform the requested downgrade "
        "because it might delete metadata information.",
    )


def test_unsafe_lossless_downgrade_is_accepted():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 17, UNSAFE)])
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 17


def test_unsafe_lossy_downgrade_is_accepted():
    # Kafka refuses it ("Unsafe metadata downgrade is not supported in this version.");
    # kraftwerk implements KIP-778's lossy downgrade (tests/controller/test_downgrade.py).
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 14, UNSAFE)])
    assert result.response["error_code"] == 0
    assert result.response["error_message"].startswith(
        "UNSAFE downgrade of metadata.version from 4.0-IV0 to 3.6-IV2 drops: no metadata this cluster holds")
    assert cluster.state.metadata_version == 14


def test_downgrade_type_with_a_higher_level():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 22, SAFE)])
    assert_rejected(
        cluster, result, "Invalid update version 22 for feature metadata.version. Can't downgrade to a newer version."
    )


def test_validate_only_writes_nothing():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 22, UPGRADE)], validate_only=True)
    assert result.records == []
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 20


def test_validate_only_still_reports_errors():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 14, SAFE)], validate_only=True)
    assert result.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION


def test_unknown_feature():
    cluster = Cluster.bootstrapped()
    result = cluster.update([("no.such.feature", 1, UPGRADE)])
    assert_rejected(
        cluster,
        result,
        f"Invalid update version 1 for feature no.such.feature. Local controller {NODE_ID} does not support this feature.",
    )


def test_level_above_local_max():
    cluster = Cluster.bootstrapped()
    result = cluster.update([("metadata.version", 34, UPGRADE)])
    assert_rejected(
        cluster,
        result,
        f"Invalid update version 34 for feature metadata.version. Local controller {NODE_ID} only supports versions 1-33",
    )


def test_unstable_controller_accepts_unstable_levels():
    cluster = Cluster.bootstrapped(unstable=True)
    result = cluster.update([("metadata.version", 25, UPGRADE)])
    assert result.response["error_code"] == 0
    assert cluster.state.metadata_version == 25


def test_level_below_minimum_bootstrap_version():
    cluster = Cluster.bootstrapped(mv_level=4)
    result = cluster.update([("metadata.version", 3, SAFE)])
    assert_rejected(cluster, result, "Invalid metadata.version 3. Unable to set a metadata.version less than 3.3-IV0")


def test_negative_level():
    cluster = Cluster.bootstrapped()
    result = cluster.update([("group.version", -1, SAFE)])
    assert_rejected(cluster, result, "Invalid update version -1 for feature group.version. A feature version cannot be less than 0.")


def test_unknown_upgrade_type():
    cluster = Cluster.bootstrapped()
    result = cluster.update([("group.version", 1, 7)])
    assert_rejected(
        cluster, result, "Invalid update version 1 for feature group.version. The controller does not support the given upgrade type."
    )


def test_dependency_failure():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("eligible.leader.replicas.version", 1, UPGRADE)])
    assert_rejected(
        cluster,
        result,
        "Invalid update version 1 for feature eligible.leader.replicas.version. eligible.leader.replicas.version "
        "could not be set to 1 because it depends on metadata.version level 23",
    )


def test_dependency_counts_other_updates_in_the_same_request():
    # The same request raises metadata.version to 4.0-IV1, so the dependency holds.
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 23, UPGRADE), ("eligible.leader.replicas.version", 1, UPGRADE)])
    assert result.response["error_code"] == 0
    assert [r.data for r in result.records] == [
        {"name": "metadata.version", "feature_level": 23},
        {"name": "eligible.leader.replicas.version", "feature_level": 1},
    ]
    assert cluster.state.finalized_level("eligible.leader.replicas.version") == 1


def test_kraft_version_upgrade_with_a_metadata_version_raise_writes_the_level_and_asks_raft_for_kraft_version():
    cluster = Cluster.bootstrapped(mv_level=20, unstable=True)
    result = cluster.update([("metadata.version", 21, UPGRADE), ("kraft.version", 1, UPGRADE)], kraft_version=0)
    assert result.response["error_code"] == 0
    # metadata.version is a record of the controller's; kraft.version the Raft layer writes.
    assert [(r.data["name"], r.data["feature_level"]) for r in result.records] == [("metadata.version", 21)]
    assert result.kraft_version_upgrade == 1


def test_dependency_on_minimum_bootstrap_version_sees_a_lower_proposed_metadata_version():
    # group.version is checked first (request order) against metadata.version 3 from
    # the same request.
    cluster = Cluster.bootstrapped(mv_level=4)
    result = cluster.update([("group.version", 1, UPGRADE), ("metadata.version", 3, SAFE)])
    assert_rejected(
        cluster,
        result,
        "Invalid update version 1 for feature group.version. group.version could not be set to 1 because it "
        "depends on metadata.version=4 (3.3-IV0)",
    )


def test_duplicate_feature_is_invalid_request():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 21, UPGRADE), ("metadata.version", 22, UPGRADE)], version=1)
    assert result.records == []
    assert result.response["error_code"] == ErrorCode.INVALID_REQUEST
    assert result.response["results"] == []
    assert cluster.state.metadata_version == 20


def test_deletion_at_level_zero_with_a_downgrade_type():
    cluster = Cluster.bootstrapped(mv_level=22)
    assert cluster.state.finalized_level("group.version") == 1
    result = cluster.update([("group.version", 0, SAFE)])
    assert result.response["error_code"] == 0
    assert [r.data for r in result.records] == [{"name": "group.version", "feature_level": 0}]
    assert "group.version" not in cluster.state.finalized_levels


def test_deletion_without_downgrade_type_is_refused():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("group.version", 0, UPGRADE)])
    assert_rejected(
        cluster,
        result,
        "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
        "setting the upgrade type to either safe or unsafe downgrade.",
    )


def test_metadata_version_cannot_be_deleted():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.update([("metadata.version", 0, UNSAFE)])
    assert_rejected(
        cluster,
        result,
        f"Invalid update version 0 for feature metadata.version. Local controller {NODE_ID} only supports versions 1-33",
    )


def test_broker_not_supporting_the_level():
    cluster = Cluster.bootstrapped(mv_level=20)
    epoch = cluster.register(7, uuid.uuid4(), features={"metadata.version": (1, 21)}).response["broker_epoch"]
    assert epoch >= 0
    result = cluster.update([("metadata.version", 22, UPGRADE)])
    assert_rejected(
        cluster, result, "Invalid update version 22 for feature metadata.version. Broker 7 only supports versions 1-21"
    )


def test_broker_missing_a_feature_counts_as_zero_zero():
    cluster = Cluster.bootstrapped(mv_level=20)
    cluster.register(7, uuid.uuid4(), features={"metadata.version": (1, 22)})
    result = cluster.update([("group.version", 1, UPGRADE)])
    assert_rejected(
        cluster, result, "Invalid update version 1 for feature group.version. Broker 7 does not support this feature."
    )


def test_all_or_nothing():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("group.version", 1, UPGRADE), ("metadata.version", 34, UPGRADE)])
    assert result.records == []
    assert cluster.state.finalized_level("group.version") == 0


def test_first_error_in_request_order_is_reported():
    cluster = Cluster.bootstrapped(mv_level=20)
    result = cluster.update([("metadata.version", 34, UPGRADE), ("group.version", -1, UPGRADE)])
    assert "metadata.version" in result.response["error_message"]


def test_kraft_version_upgrades_through_raft_never_downgrades_and_the_same_level_is_a_no_op():
    cluster = Cluster.bootstrapped(mv_level=22)
    upgrade = cluster.update([("kraft.version", 1, UPGRADE)], kraft_version=0)
    assert (upgrade.response["error_code"], upgrade.records, upgrade.kraft_version_upgrade) == (0, [], 1)
    same = cluster.update([("kraft.version", 0, UPGRADE)], kraft_version=0)
    assert (same.response["error_code"], same.records, same.kraft_version_upgrade) == (0, [], None)
    # The level comes from the Raft layer, ahead of the image (which replays it later).
    for downgrade_type in (SAFE, UNSAFE):
        refused = cluster.update([("kraft.version", 0, downgrade_type)], kraft_version=1)
        assert_rejected(cluster, refused, "Invalid update version 0 for feature kraft.version. Can't downgrade the "
                                          "version of this feature.")
    # Above what the controllers support: the usual support check.
    too_high = cluster.update([("kraft.version", 2, UPGRADE)], kraft_version=1)
    assert too_high.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert too_high.kraft_version_upgrade is None


def test_no_records_at_all_leaves_the_epoch_alone():
    cluster = Cluster.bootstrapped(mv_level=22)
    epoch = cluster.state.finalized_features_epoch
    cluster.update([])
    assert cluster.state.finalized_features_epoch == epoch


def test_every_controller_of_the_quorum_must_support_the_new_level():
    from server.controller.features import SupportedRange

    cluster = Cluster.bootstrapped(mv_level=19)
    old_controller = {"metadata.version": SupportedRange(1, 20)}
    current = {"metadata.version": SupportedRange(1, 22)}
    request = features_request([("metadata.version", 21, cmd.UPGRADE)])
    refused = cmd.update_features(cluster.state, request, 2, cluster.config, {2: current, 3: old_controller})
    assert refused.records == []
    assert refused.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert refused.response["error_message"] == (
        cmd.UPDATE_FAILED_PREFIX + "Invalid update version 21 for feature metadata.version. "
        "Controller 3 only supports versions 1-20")
    # A controller whose ranges are unknown blocks the change from 3.7-IV0 (KIP-919 era) on ...
    unknown = cmd.update_features(cluster.state, request, 2, cluster.config, {2: current, 3: None})
    assert unknown.response["error_message"].endswith(
        "controller 3 has not registered, and may not support this feature")
    # ... and everything passes when every controller supports the level.
    accepted = cmd.update_features(cluster.state, request, 2, cluster.config, {2: current, 3: current})
    assert accepted.response["error_code"] == ErrorCode.NONE
    assert [r.data["feature_level"] for r in accepted.records] == [21]


def test_before_3_7_unknown_controllers_do_not_block_an_upgrade():
    from server.controller.features import SupportedRange

    cluster = Cluster.bootstrapped(mv_level=14)  # 3.6-IV2
    request = features_request([("metadata.version", 15, cmd.UPGRADE)])
    result = cmd.update_features(cluster.state, request, 2, cluster.config,
                                 {2: None, 3: {"metadata.version": SupportedRange(1, 22)}})
    assert result.response["error_code"] == ErrorCode.NONE
