"""The fake fleet: real kraftwerk logs that replay to what the summary says."""

from __future__ import annotations

import filecmp
import os
import uuid
from pathlib import Path

import pytest

from pipeline import fake_fleet as ff
from protocol.apis import broker_heartbeat, broker_registration
from protocol.records import decode_metadata_record, encode_metadata_record
from server.controller import commands as cmd
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.storage.bootstrap import METADATA_LOG_DIR_NAME
from server.releases import RELEASES
from server.storage.log import LogConfig, MetadataLog
from server.storage.meta_properties import parse_uuid_string, read_meta_properties
from server.storage.snapshot import list_snapshots, read_snapshot, snapshot_file_name

SPEC = ff.FleetSpec(clusters=3, records_per_cluster=2000, seed=7, segment_bytes=32 * 1024)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    return out, ff.write_fleet(out, SPEC)


def replay_node(log_dir: Path, cluster_id: str) -> tuple[ControllerState, int, int]:
    """(state, records incl. control, control records) from offset 0."""
    state = ControllerState(cluster_id)
    log = MetadataLog.open(log_dir, LogConfig(segment_bytes=SPEC.segment_bytes))
    records = control = 0
    try:
        offset = 0
        for _ in range(100_000):
            if offset >= log.end_offset:
                break
            for batch in log.read(offset):
                if batch.base_offset < offset:
                    continue
                records += len(batch.records)
                if batch.is_control:
                    control += len(batch.records)
                else:
                    for item in batch.records:
                        state.replay(decode_metadata_record(item.value), item.offset)
                offset = batch.next_offset
        assert offset == log.end_offset
    finally:
        log.close()
    return state, records, control


def test_every_node_replays_to_the_summary(fleet):
    out, summary = fleet
    assert len(summary.clusters) == SPEC.clusters
    for cluster in summary.clusters:
        for node_id in cluster.node_ids:
            node = out / cluster.name / str(node_id)
            meta = read_meta_properties(node)
            assert meta is not None and meta.cluster_id == cluster.cluster_id and meta.node_id == node_id
            parse_uuid_string(meta.cluster_id)
            parse_uuid_string(meta.directory_id)
            properties = (node / ff.NODE_PROPERTIES_FILE_NAME).read_text()
            assert f"node.id={node_id}\n" in properties
            assert "process.roles=controller\n" in properties
            assert f"kraftwerk.release={cluster.controller_release}\n" in properties
            state, records, control = replay_node(node / METADATA_LOG_DIR_NAME, cluster.cluster_id)
            assert dict(state.finalized_levels) == cluster.finalized_levels
            assert records == cluster.records and control == cluster.control_records
            assert sorted(state.brokers) == [b.broker_id for b in cluster.brokers]
            for broker in cluster.brokers:
                registration = state.brokers[broker.broker_id]
                assert (registration.epoch, registration.fenced) == (broker.epoch, broker.fenced)
                assert registration.supported("metadata.version") == \
                    RELEASES[broker.release].features["metadata.version"]
            features = RELEASES[cluster.controller_release].features
            assert ff.upgrade_readiness(state, features) == cluster.readiness


def test_record_counts_within_bounds_and_segments_roll(fleet):
    _, summary = fleet
    for cluster in summary.clusters:
        # Stopped at the first command that did not fit; no command writes more than a few.
        assert SPEC.records_per_cluster - 5 <= cluster.records <= SPEC.records_per_cluster
        assert cluster.segments >= 2
        assert cluster.control_records == cluster.leader_epochs >= 1
    assert summary.total_records == sum(c.records for c in summary.clusters)


def test_controller_copies_are_byte_identical(fleet):
    out, summary = fleet
    for cluster in summary.clusters:
        dirs = [out / cluster.name / str(n) / METADATA_LOG_DIR_NAME for n in cluster.node_ids]
        names = sorted(n for n in os.listdir(dirs[0]) if n != ".lock")
        assert any(n.endswith(".log") for n in names) and any(n.endswith(".checkpoint") for n in names)
        for other in dirs[1:]:
            assert sorted(n for n in os.listdir(other) if n != ".lock") == names
            match, mismatch, errors = filecmp.cmpfiles(dirs[0], other, names, shallow=False)
            assert not mismatch and not errors


def test_snapshots_load_and_match_summary(fleet):
    out, summary = fleet
    for cluster in summary.clusters:
        log_dir = out / cluster.name / str(cluster.node_ids[0]) / METADATA_LOG_DIR_NAME
        ids = list_snapshots(log_dir)
        assert [(i.end_offset, i.epoch) for i in ids] == list(cluster.snapshots)
        assert len(ids) == SPEC.snapshots_per_cluster
        for snapshot_id in ids:
            read_snapshot(log_dir / snapshot_file_name(snapshot_id))


def test_fleet_has_blockers_and_lossy_downgrades(fleet):
    _, summary = fleet
    blocked = [c for c in summary.clusters if c.readiness.blockers]
    assert blocked
    for cluster in blocked:
        assert cluster.readiness.max_level < cluster.readiness.controller_max_level
        for broker_id in cluster.readiness.blockers:
            release = next(b.release for b in cluster.brokers if b.broker_id == broker_id)
            assert release != cluster.controller_release
    lossy = [c for c in summary.clusters if c.unsafe_downgrades]
    assert lossy
    for cluster in lossy:
        change = next(c for c in cluster.feature_changes if c.kind == "unsafe_downgrade")
        assert change.feature == "metadata.version" and change.to_level < change.from_level
    for cluster in summary.clusters:
        kinds = [c.kind for c in cluster.feature_changes]
        assert kinds.count("upgrade") == cluster.upgrades
        assert kinds.count("safe_downgrade") == cluster.safe_downgrades
        assert kinds.count("unsafe_downgrade") == cluster.unsafe_downgrades


def test_feature_changes_are_at_their_offsets(fleet):
    out, summary = fleet
    cluster = summary.clusters[1]
    log = MetadataLog.open(out / cluster.name / str(cluster.node_ids[0]) / METADATA_LOG_DIR_NAME)
    try:
        for change in cluster.feature_changes:
            batch = next(b for b in log.read(change.offset, max_bytes=1) if b.base_offset <= change.offset <= b.last_offset)
            value = batch.records[change.offset - batch.base_offset].value
            item = decode_metadata_record(value)
            assert item.message.name == "FeatureLevelRecord"
            assert (item.data["name"], item.data["feature_level"]) == (change.feature, change.to_level)
    finally:
        log.close()


def test_same_seed_same_bytes_other_seed_differs(fleet, tmp_path):
    out, summary = fleet
    again = ff.write_fleet(tmp_path / "again", SPEC, workers=2)
    assert again == summary
    for cluster in summary.clusters:
        for node_id in cluster.node_ids:
            left, right = out / cluster.name / str(node_id), tmp_path / "again" / cluster.name / str(node_id)
            for directory in (Path(""), Path(METADATA_LOG_DIR_NAME)):
                # .lock: opening a log (as the replay test does) creates it.
                names = sorted(n for n in os.listdir(left / directory)
                               if (left / directory / n).is_file() and n != ".lock")
                _, mismatch, errors = filecmp.cmpfiles(left / directory, right / directory, names, shallow=False)
                assert not mismatch and not errors
    other = ff.write_fleet(tmp_path / "other", ff.FleetSpec(1, 200, seed=8))
    assert other.clusters[0].cluster_id != summary.clusters[0].cluster_id


def test_direct_requests_give_the_records_decoded_ones_give():
    """The story builds registration/heartbeat requests as mappings; the commands must
    answer them exactly as they answer the decoded requests a handler would pass."""
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"
    config = cmd.ControllerConfig(node_id=3000, cluster_id=cluster_id, supported_features=RELEASES["4.0"].features)
    for release, mv in (("3.6", 12), ("3.7", 19), ("3.8", 17), ("4.0", 21)):
        state = ControllerState(cluster_id)
        for offset, item in enumerate(cmd.bootstrap_records(mv)):
            state.replay(item, offset)
        tracker = BrokerHeartbeatTracker(9000)
        version, fields = ff.registration_fields(4, cluster_id, uuid.UUID(int=99 << 70), release,
                                                 [uuid.UUID(int=5 << 80)], "r1", "h")
        direct = cmd.register_broker(state, tracker, fields, version, 1000, 10, config)
        decoded = cmd.register_broker(state, tracker, ff.decoded_request(broker_registration.REQUEST, version, fields),
                                      version, 1000, 10, config)
        assert direct.response == decoded.response and direct.response["error_code"] == 0
        assert [encode_metadata_record(r) for r in direct.records] == [encode_metadata_record(r) for r in decoded.records]
        for offset, item in enumerate(direct.records, start=10):
            state.replay(item, offset)
        hb = ff.heartbeat_fields(4, 10, 10)
        next_offset = 10 + len(direct.records)
        direct = cmd.broker_heartbeat(state, tracker, hb, 1, 2000, config, next_offset=next_offset)
        decoded = cmd.broker_heartbeat(state, tracker, ff.decoded_request(broker_heartbeat.REQUEST, 1, hb), 1, 2000, config,
                                       next_offset=next_offset)
        assert direct.response == decoded.response and len(direct.records) == 1
        assert encode_metadata_record(direct.records[0]) == encode_metadata_record(decoded.records[0])


def test_spec_bounds():
    with pytest.raises(ValueError):
        ff.FleetSpec(clusters=0, records_per_cluster=100)
    with pytest.raises(ValueError):
        ff.FleetSpec(clusters=1, records_per_cluster=5)


def test_command_prints_a_line_per_cluster(tmp_path):
    lines: list[str] = []
    assert ff.fake_fleet_command(2, 400, tmp_path / "f", seed=3, progress=lines.append, workers=1) == 0
    assert sum(1 for line in lines if "cluster-000" in line) == 2
    assert lines[-1].startswith("wrote 400 records") or lines[-1].startswith("wrote 39")
