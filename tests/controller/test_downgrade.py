"""KIP-778 lossy (UNSAFE) metadata.version downgrades: the image is projected to the lower
level when the FeatureLevelRecord is replayed, exactly what the catalog says is dropped,
and every copy (replay from scratch, snapshot) agrees."""

import uuid

from server.controller import commands as cmd
from server.controller import downgrade
from server.controller.snapshot import encode_snapshot_records, load_snapshot

from .helpers import Cluster

SAFE, UNSAFE = cmd.SAFE_DOWNGRADE, cmd.UNSAFE_DOWNGRADE
MV_3_6_IV2, MV_3_7_IV2, MV_3_7_IV4, MV_4_0_IV0 = 14, 17, 19, 22
LOG_DIR = uuid.UUID(int=(7 << 64) | 9)


def cluster_with_a_broker(mv_level: int) -> Cluster:
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    assert cluster.register(1, uuid.UUID(int=11), log_dirs=[LOG_DIR]).response["error_code"] == 0
    assert cluster.register(2, uuid.UUID(int=12), log_dirs=[uuid.UUID(int=(8 << 64) | 9)]).response[
        "error_code"] == 0
    return cluster


def test_unsafe_downgrade_below_3_7_iv2_drops_log_dirs_and_says_so():
    cluster = cluster_with_a_broker(MV_3_7_IV4)
    result = cluster.update([("metadata.version", MV_3_6_IV2, UNSAFE)])
    assert result.response["error_code"] == 0
    assert result.response["error_message"] == (
        "UNSAFE downgrade of metadata.version from 3.7-IV4 to 3.6-IV2 drops: "
        f"broker 1: RegisterBrokerRecord.LogDirs (since 3.7-IV2) = {LOG_DIR}; "
        "broker 2: RegisterBrokerRecord.LogDirs (since 3.7-IV2) = 00000000-0000-0008-0000-000000000009. "
        "No longer written below it: RegisterControllerRecord records (since 3.7-IV0).")
    state = cluster.state
    assert state.metadata_version == MV_3_6_IV2
    assert state.broker(1).log_dirs == () and state.broker(2).log_dirs == ()
    assert state.directory_owner(LOG_DIR) is None
    # Everything else of the registrations is kept.
    assert state.broker(1).endpoints and state.broker(1).supported_features
    # Every copy agrees: replay from the log, and a snapshot of the result.
    assert cluster.replayed_from_scratch() == state
    assert load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1,
                         state.cluster_id) == state


def test_dry_run_reports_the_loss_and_changes_nothing():
    cluster = cluster_with_a_broker(MV_3_7_IV4)
    before = cluster.state.snapshot()
    result = cluster.update([("metadata.version", MV_3_6_IV2, UNSAFE)], validate_only=True)
    assert result.records == []
    assert f"broker 1: RegisterBrokerRecord.LogDirs (since 3.7-IV2) = {LOG_DIR}" in result.response["error_message"]
    assert cluster.state.snapshot() == before


def test_safe_is_still_refused_for_a_lossy_downgrade():
    cluster = cluster_with_a_broker(MV_3_7_IV4)
    result = cluster.update([("metadata.version", MV_3_6_IV2, SAFE)])
    assert result.records == []
    assert "Refusing to perform the requested downgrade" in result.response["error_message"]
    assert cluster.state.broker(1).log_dirs == (LOG_DIR,)


def test_lossless_downgrade_keeps_everything():
    cluster = cluster_with_a_broker(MV_4_0_IV0)
    before = {b: cluster.state.broker(b) for b in (1, 2)}
    result = cluster.update([("metadata.version", MV_3_7_IV2, SAFE)])
    assert result.response["error_code"] == 0 and result.response["error_message"] is None
    assert {b: cluster.state.broker(b) for b in (1, 2)} == before


def test_upgrade_after_a_lossy_downgrade_does_not_bring_data_back():
    cluster = cluster_with_a_broker(MV_3_7_IV4)
    cluster.update([("metadata.version", MV_3_6_IV2, UNSAFE)])
    assert cluster.update([("metadata.version", MV_3_7_IV4, cmd.UPGRADE)]).response["error_code"] == 0
    assert cluster.state.broker(1).log_dirs == ()


def test_catalog_only_drops_what_lies_between_the_levels():
    assert downgrade.losses([], MV_3_7_IV4, MV_3_6_IV2) == []
    assert downgrade.dropped_record_types(MV_3_7_IV4, MV_3_7_IV2) == []
    assert downgrade.dropped_record_types(MV_3_7_IV4, 11) == [
        "BeginTransactionRecord records (since 3.6-IV1)", "RegisterControllerRecord records (since 3.7-IV0)"]
    for addition in downgrade.METADATA_ADDITIONS:
        assert addition.describe()
