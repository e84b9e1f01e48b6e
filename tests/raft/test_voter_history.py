"""Reading the voters (KIP-853) back from real files: a snapshot's header batch and the
control batches of a metadata log, as a restarted node and a follower installing a
snapshot do, however large the data batches between them are."""

from __future__ import annotations

import uuid

from protocol.record_batch import ControlRecordType
from server.raft import storage
from server.raft.core import RaftConfig, RaftCore
from server.raft.log import Batch, snapshot_control_records
from server.raft.storage import MetadataRaftLog, StoredRecordsCodec
from server.storage.log import LogConfig, MetadataLog
from server.storage.snapshot import SnapshotRecord, SnapshotWriter, snapshot_path
from server.values import SnapshotId
from server.voters import (Endpoint, Voter, VoterSet, encode_kraft_version_record, encode_voters_record,
                           snapshot_voter_records, voter_control_records)

VOTERS = VoterSet((Voter(1, uuid.UUID(int=11), (Endpoint("CONTROLLER", "127.0.0.1", 19091),), 0, 1),
                   Voter(2, uuid.UUID(int=12), (Endpoint("CONTROLLER", "127.0.0.1", 19092),), 0, 1)))
CONFIG = RaftConfig(node_id=1, voters=frozenset(), cluster_id="voter-history")
# Records whose batches are far above the 1 MiB a snapshot's control batch may take.
BIG_VALUES = [bytes(1024) for _ in range(3000)]


def write_snapshot(directory, snapshot_id: SnapshotId) -> str:
    header = [SnapshotRecord(value, control_type) for control_type, value in snapshot_voter_records(1, VOTERS)]
    with SnapshotWriter(directory, snapshot_id, 0, header_records=header) as writer:
        writer.append(BIG_VALUES)
        writer.freeze()
    return snapshot_path(directory, snapshot_id)


def test_the_voters_come_back_from_a_snapshot_whose_data_batches_exceed_the_control_batch_bound(tmp_path):
    path = write_snapshot(tmp_path, SnapshotId(3000, 1))
    data = open(path, "rb").read()
    assert len(data) > 2 << 20
    records = snapshot_control_records(lambda position, size: data[position:position + size], len(data))
    assert voter_control_records(records) == (1, VOTERS)


def test_a_restarted_node_reads_the_voters_from_its_snapshot_and_the_control_batches_after_it(tmp_path, monkeypatch):
    directory = tmp_path / "log"
    metadata_log = MetadataLog.open(directory, LogConfig(segment_bytes=1 << 20))
    raft_log = MetadataRaftLog(metadata_log)
    # Data batches of ~3 MiB between control batches, read with a walk budget smaller than one.
    monkeypatch.setattr(storage, "CONTROL_SCAN_BYTES", 64 * 1024)
    grown = VOTERS.with_voter(Voter(3, uuid.UUID(int=13), (Endpoint("CONTROLLER", "127.0.0.1", 19093),), 0, 1))
    batches = [
        Batch(0, 1, tuple(BIG_VALUES)),
        Batch(3000, 1, (encode_kraft_version_record(1),), int(ControlRecordType.KRAFT_VERSION)),
        Batch(3001, 1, (encode_voters_record(VOTERS),), int(ControlRecordType.VOTERS)),
        Batch(3002, 1, tuple(BIG_VALUES)),
        Batch(6002, 1, (encode_voters_record(grown),), int(ControlRecordType.VOTERS)),
        Batch(6003, 1, tuple(BIG_VALUES[:10])),
    ]
    metadata_log.append_raw(b"".join(storage.raw_bytes(batch) for batch in batches))
    assert [batch.base_offset for batch in raft_log.control_batches(0)] == [3000, 3001, 6002]
    history = RaftCore.load_voter_history(CONFIG, raft_log, StoredRecordsCodec())
    assert (history.kraft_version, history.latest, history.latest_offset) == (1, grown, 6002)
    assert history.at(6001) == VOTERS
    # From a snapshot in the same directory: its header's voters, then the log's later ones.
    write_snapshot(directory, SnapshotId(6002, 1))
    reopened = MetadataRaftLog(metadata_log)
    history = RaftCore.load_voter_history(CONFIG, reopened, StoredRecordsCodec())
    assert history.latest == grown and history.at(6001) == VOTERS
    metadata_log.close()
