"""pipeline.reader: finding a fleet's files and turning segments and snapshots
into rows, including what corruption looks like. Pure Python, no Spark."""

from __future__ import annotations

import json
import random
import struct
import uuid

import pytest

from pipeline.reader import FleetFile, fleet_files, fleet_nodes, read_file, read_fleet
from pipeline.schema import RECORD_FIELDS
from protocol.record_batch import ControlRecordType
from server.storage.meta_properties import uuid_to_string

COLUMN = {name: index for index, name in enumerate(RECORD_FIELDS)}


def col(row: tuple, name: str):
    return row[COLUMN[name]]


def only_node(tmp_path, build, batches=None):
    node = build.write_node(tmp_path / "c1" / "n1", "ClusterOneAAAAAAAAAAAA", 1)
    layout = build.append_batches(node, build.standard_log() if batches is None else batches)
    return node, layout


def log_file(root) -> FleetFile:
    (found,) = [f for f in fleet_files(root) if f.source == "log"]
    return found


def segment_path(node):
    (path,) = sorted((node / "__cluster_metadata-0").glob("*.log"))
    return path


def flip_byte(path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------
# Finding files and nodes
# --------------------------------------------------------------------------


def test_fleet_files_lists_segments_and_snapshots_of_every_node_sorted(fleet):
    files = fleet_files(fleet)
    assert [f.relative_path for f in files] == [
        "east/ctrl-1/__cluster_metadata-0/00000000000000000000.log",
        "east/ctrl-1/__cluster_metadata-0/00000000000000000006-0000000001.checkpoint",
        "east/ctrl-2/__cluster_metadata-0/00000000000000000000.log",
        "west/ctrl-9/__cluster_metadata-0/00000000000000000000.log",
    ]
    assert [(f.cluster, f.cluster_id, f.node_id, f.source) for f in files] == [
        ("east", "EastClusterIdAAAAAAAAA", 1, "log"),
        ("east", "EastClusterIdAAAAAAAAA", 1, "snapshot"),
        ("east", "EastClusterIdAAAAAAAAA", 2, "log"),
        ("west", "WestClusterIdBBBBBBBBB", 9, "log"),
    ]
    assert all(f.path.endswith(f.relative_path) for f in files)


def test_a_cluster_dir_or_a_node_dir_reads_like_its_part_of_the_fleet(fleet):
    whole = fleet_files(fleet)
    assert fleet_files(fleet / "east") == [f for f in whole if f.cluster == "east"]
    assert fleet_files(fleet / "east" / "ctrl-2") == [f for f in whole if f.relative_path.startswith("east/ctrl-2/")]


def test_fleet_nodes_take_role_and_release_from_node_properties(fleet, build):
    build.write_node(fleet / "west" / "bare", "WestClusterIdBBBBBBBBB", 10)  # no node.properties
    nodes = fleet_nodes(fleet)
    assert [(n.cluster, n.cluster_id, n.node_id, n.role, n.release) for n in nodes] == [
        ("east", "EastClusterIdAAAAAAAAA", 1, "controller", "0.4.0"),
        ("east", "EastClusterIdAAAAAAAAA", 2, "controller", None),  # combined broker,controller
        ("west", "WestClusterIdBBBBBBBBB", 10, None, None),
        ("west", "WestClusterIdBBBBBBBBB", 9, "controller", "0.3.1"),
    ]
    assert nodes[0].path == str(fleet / "east" / "ctrl-1")


def test_a_node_without_readable_meta_properties_keeps_its_rows(tmp_path, build):
    node, _ = only_node(tmp_path, build)
    (node / "meta.properties").write_text("version=1\nnode.id=not-a-number\n")
    rows = list(read_fleet(tmp_path))
    assert len(rows) == 6
    assert {(col(r, "cluster_id"), col(r, "node_id")) for r in rows} == {(None, -1)}


# --------------------------------------------------------------------------
# Rows of a healthy log
# --------------------------------------------------------------------------


def test_every_row_has_the_schema_columns_in_order(fleet):
    rows = list(read_fleet(fleet))
    assert rows and all(len(row) == len(RECORD_FIELDS) for row in rows)
    assert all(col(row, "error") is None for row in rows)


def test_log_rows_carry_offsets_epochs_and_typed_feature_and_broker_columns(tmp_path, build):
    node, _ = only_node(tmp_path, build)
    rows = list(read_file(log_file(tmp_path)))
    summary = [(col(r, "offset"), col(r, "leader_epoch"), col(r, "record_type"), col(r, "record_version")) for r in rows]
    assert summary == [
        (0, 1, "LeaderChange", None),
        (1, 1, "FeatureLevelRecord", 0),
        (2, 1, "FeatureLevelRecord", 0),
        (3, 1, "RegisterBrokerRecord", 3),
        (4, 1, "UnfenceBrokerRecord", 0),
        (5, 1, "BrokerRegistrationChangeRecord", 2),
    ]
    first = rows[0]
    assert (col(first, "cluster"), col(first, "cluster_id"), col(first, "node_id"), col(first, "source")) == (
        "c1", "ClusterOneAAAAAAAAAAAA", 1, "log")
    assert col(first, "file") == "c1/n1/__cluster_metadata-0/00000000000000000000.log"
    # Each batch has its own timestamp in the builder: batch index added.
    assert [col(r, "batch_timestamp_ms") for r in rows] == [build.TIMESTAMP_MS + i for i in (0, 1, 1, 2, 3, 4)]

    assert [col(r, "feature") for r in rows[1:3]] == [("metadata.version", build.MV_LEVEL), ("group.version", 1)]
    assert col(rows[0], "feature") is None and col(rows[3], "feature") is None

    incarnation = uuid_to_string(uuid.UUID(int=0xABC))
    log_dir = uuid_to_string(uuid.UUID(int=0x1D1))
    assert col(rows[3], "broker") == (4, 3, incarnation, True, False, "rack-a", 7, 22, [log_dir])
    assert col(rows[4], "broker") == (4, 3, None, False, None, None, None, None, None)
    # The change record says nothing about fencing (0 = no change), only shutdown.
    assert col(rows[5], "broker") == (4, 3, None, None, True, None, None, None, None)
    assert col(rows[1], "broker") is None


def test_register_broker_fields_a_version_cannot_carry_are_null(tmp_path, build):
    value = build.register_broker(5, 9, uuid.UUID(int=5), version=0)
    only_node(tmp_path, build, [build.Batch((value,))])
    (row,) = read_file(log_file(tmp_path))
    assert col(row, "record_version") == 0
    # v0 has neither the controlled-shutdown flag (v1+) nor log dirs (v3+).
    assert col(row, "broker") == (5, 9, uuid_to_string(uuid.UUID(int=5)), True, None, None, 7, 22, None)
    # fields_json lists only what v0 has, not the decoder's defaults for later fields.
    fields = json.loads(col(row, "fields_json"))
    assert "in_controlled_shutdown" not in fields and "log_dirs" not in fields
    assert "is_migrating_zk_broker" not in fields and fields["fenced"] is True


def test_leader_change_is_one_control_row_with_its_fields(tmp_path, build):
    only_node(tmp_path, build)
    row = next(read_file(log_file(tmp_path)))
    assert col(row, "record_type") == "LeaderChange"
    assert col(row, "record_version") is None
    assert col(row, "feature") is None and col(row, "broker") is None
    assert json.loads(col(row, "fields_json")) == {
        "version": 0, "leader_id": 1,
        "voters": [{"voter_id": 1}, {"voter_id": 2}, {"voter_id": 3}],
        "granting_voters": [{"voter_id": 1}, {"voter_id": 2}, {"voter_id": 3}],
    }


def test_fields_json_holds_every_field_with_kafka_uuid_text_and_no_private_keys(tmp_path, build):
    only_node(tmp_path, build)
    rows = list(read_file(log_file(tmp_path)))
    register = json.loads(col(rows[3], "fields_json"))
    assert register["broker_id"] == 4
    assert register["incarnation_id"] == uuid_to_string(uuid.UUID(int=0xABC))
    assert register["log_dirs"] == [uuid_to_string(uuid.UUID(int=0x1D1))]
    assert register["features"][1] == {"name": "metadata.version", "min_supported_version": 7,
                                       "max_supported_version": 22}
    assert not any(key.startswith("_") for key in register)
    assert json.loads(col(rows[1], "fields_json")) == {"name": "metadata.version", "feature_level": build.MV_LEVEL}


# --------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------


def test_snapshot_rows_carry_replay_offsets(tmp_path, build):
    node = build.write_node(tmp_path / "c1" / "n1", "ClusterOneAAAAAAAAAAAA", 1)
    build.write_snapshot(node, end_offset=10, epoch=4)
    (snapshot,) = fleet_files(tmp_path)
    assert snapshot.source == "snapshot"
    rows = list(read_file(snapshot))
    # Registration pinned at its replay offset 3; the feature levels in the
    # highest free offsets below the last applied one (5); header and footer
    # carry no replay offset, so they get the snapshot's end offset - 1.
    assert [(col(r, "offset"), col(r, "record_type")) for r in rows] == [
        (9, "SnapshotHeader"),
        (3, "RegisterBrokerRecord"),
        (4, "FeatureLevelRecord"),
        (5, "FeatureLevelRecord"),
        (9, "SnapshotFooter"),
    ]
    assert {col(r, "leader_epoch") for r in rows} == {4}
    assert {col(r, "source") for r in rows} == {"snapshot"}
    assert col(rows[2], "feature") == ("metadata.version", build.MV_LEVEL)
    assert col(rows[1], "broker")[:4] == (7, 3, uuid_to_string(uuid.UUID(int=7)), False)
    assert json.loads(col(rows[0], "fields_json")) == {"version": 0, "last_contained_log_timestamp": build.TIMESTAMP_MS}


# --------------------------------------------------------------------------
# Corruption
# --------------------------------------------------------------------------


def rows_without_offsets(rows, offsets):
    return [r for r in rows if col(r, "offset") not in offsets]


def test_a_flipped_byte_gives_one_crc_error_row_and_keeps_every_other_batch(tmp_path, build):
    node, layout = only_node(tmp_path, build)
    healthy = list(read_file(log_file(tmp_path)))
    position, size = layout[2]  # the RegisterBrokerRecord batch, offset 3
    flip_byte(segment_path(node), position + size // 2)
    rows = list(read_file(log_file(tmp_path)))
    errors = [r for r in rows if col(r, "error") is not None]
    assert len(errors) == 1
    (error,) = errors
    assert col(error, "error").startswith(f"crc mismatch at byte {position}")
    assert col(error, "offset") == 3 and col(error, "leader_epoch") == 1
    assert col(error, "record_type") is None and col(error, "fields_json") is None
    assert [r for r in rows if r is not error] == rows_without_offsets(healthy, {3})


def test_a_damaged_length_field_is_skipped_by_finding_the_next_batch(tmp_path, build):
    node, layout = only_node(tmp_path, build)
    healthy = list(read_file(log_file(tmp_path)))
    position, _ = layout[1]  # the two FeatureLevelRecords, offsets 1-2
    flip_byte(segment_path(node), position + 8)  # the high byte of the length field
    rows = list(read_file(log_file(tmp_path)))
    errors = [r for r in rows if col(r, "error") is not None]
    assert len(errors) == 1
    assert col(errors[0], "error").startswith(f"unreadable batch header at byte {position}")
    assert col(errors[0], "offset") == -1
    assert [r for r in rows if col(r, "error") is None] == rows_without_offsets(healthy, {1, 2})


def test_a_truncated_tail_gives_one_error_row_after_the_complete_batches(tmp_path, build):
    node, layout = only_node(tmp_path, build)
    healthy = list(read_file(log_file(tmp_path)))
    position, size = layout[-1]
    path = segment_path(node)
    path.write_bytes(path.read_bytes()[: position + size - 5])
    rows = list(read_file(log_file(tmp_path)))
    assert rows[:-1] == healthy[:-1]
    assert col(rows[-1], "error").startswith(f"truncated batch at byte {position}")
    assert col(rows[-1], "offset") == 5


def test_a_tail_shorter_than_the_length_field_is_a_truncated_batch(tmp_path, build):
    node, layout = only_node(tmp_path, build)
    position, _ = layout[-1]
    path = segment_path(node)
    path.write_bytes(path.read_bytes()[: position + 7])
    rows = list(read_file(log_file(tmp_path)))
    assert len(rows) == 6
    assert col(rows[-1], "error").startswith(f"truncated batch at byte {position}")
    assert col(rows[-1], "offset") == -1


def test_an_undecodable_record_is_one_error_row_among_its_batch(tmp_path, build):
    garbage = b"\x01\x7f\x00junk"  # frame version 1, metadata record type 127 does not exist
    batch = build.Batch((build.feature_level("a.version", 1), garbage, build.feature_level("b.version", 2)))
    only_node(tmp_path, build, [batch])
    rows = list(read_file(log_file(tmp_path)))
    assert [(col(r, "offset"), col(r, "record_type")) for r in rows] == [
        (0, "FeatureLevelRecord"), (1, None), (2, "FeatureLevelRecord")]
    assert "undecodable record at offset 1" in col(rows[1], "error")
    assert col(rows[1], "leader_epoch") == 1


def test_a_corrupt_snapshot_gives_one_error_row_without_a_log_offset(tmp_path, build):
    node = build.write_node(tmp_path / "c1" / "n1", "ClusterOneAAAAAAAAAAAA", 1)
    build.write_snapshot(node, end_offset=10, epoch=4)
    (snapshot,) = fleet_files(tmp_path)
    healthy = list(read_file(snapshot))
    path = next((node / "__cluster_metadata-0").glob("*.checkpoint"))
    first_batch_size = struct.unpack_from(">i", path.read_bytes(), 8)[0] + 12
    flip_byte(path, first_batch_size + 70)  # inside the second batch's records
    rows = list(read_file(snapshot))
    errors = [r for r in rows if col(r, "error") is not None]
    assert len(errors) == 1
    assert col(errors[0], "offset") == -1
    assert col(errors[0], "error").startswith(f"crc mismatch at byte {first_batch_size}")
    assert [col(r, "record_type") for r in rows if r not in errors] == ["SnapshotHeader", "SnapshotFooter"]
    assert len(healthy) == 5


def test_an_unreadable_file_is_one_error_row(tmp_path):
    missing = FleetFile("c1", None, -1, "log", str(tmp_path / "gone.log"), "c1/n1/__cluster_metadata-0/gone.log")
    (row,) = read_file(missing)
    assert col(row, "error").startswith("cannot read file")
    assert col(row, "offset") == -1 and col(row, "file") == "c1/n1/__cluster_metadata-0/gone.log"


@pytest.mark.parametrize("seed", range(20))
def test_garbage_never_raises(tmp_path, build, seed):
    node, layout = only_node(tmp_path, build)
    path = segment_path(node)
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if seed % 2:
        data = data[: rng.randrange(len(data))]
    path.write_bytes(bytes(data))
    rows = list(read_file(log_file(tmp_path)))
    assert all(len(row) == len(RECORD_FIELDS) for row in rows)
    # Never more rows than records plus one error per batch of the original.
    assert len(rows) <= 6 + len(layout)


def test_control_batches_of_every_kraft_type_are_named(tmp_path, build):
    from protocol.raft_records import KRAFT_VERSION_RECORD

    value = KRAFT_VERSION_RECORD.encode(0, {"version": 0, "kraft_version": 1})
    only_node(tmp_path, build, [build.Batch((value,), 1, ControlRecordType.KRAFT_VERSION)])
    (row,) = read_file(log_file(tmp_path))
    assert col(row, "record_type") == "KRaftVersion"
    assert json.loads(col(row, "fields_json")) == {"version": 0, "kraft_version": 1}


def test_a_damaged_base_offset_outside_the_crc_is_reported(build, tmp_path):
    """baseOffset is not covered by the batch CRC: continuity within the segment catches it."""
    from pipeline.reader import fleet_files, read_file
    from pipeline.schema import RECORD_FIELDS

    fleet = build.build_fleet(tmp_path / "fleet")
    segment = next(f for f in fleet_files(fleet) if f.source == "log")
    before = list(read_file(segment))
    assert before and all(row[RECORD_FIELDS.index("error")] is None for row in before)
    data = bytearray(open(segment.path, "rb").read())
    # The second batch's base offset (int64 at the batch's first byte): find the batch
    # boundary from the first batch's length field (int32 at byte 8).
    second = 12 + int.from_bytes(data[8:12], "big")
    assert second < len(data), "the fixture segment must hold two batches"
    data[second + 7] ^= 0x40
    open(segment.path, "wb").write(bytes(data))
    after = list(read_file(segment))
    errors = [row for row in after if row[RECORD_FIELDS.index("error")] is not None]
    assert len(errors) == 1 and "base offset" in errors[0][RECORD_FIELDS.index("error")]
    # Every other batch still gives its rows, at their true offsets.
    good_offsets = {row[RECORD_FIELDS.index("offset")] for row in after if row not in errors}
    assert good_offsets < {row[RECORD_FIELDS.index("offset")] for row in before}
