"""Controller snapshots: state -> records -> state is exact, through the same
replay path; start-up recovery from snapshot + log tail; kill -9 while
snapshotting never breaks recovery.

Run as a script (`test_snapshot.py child DIR EPOCH`) it is the child process
of the kill -9 test.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # the kill -9 child imports the project from its root
    sys.path.insert(0, str(PROJECT_ROOT))

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from protocol import metadata_records as mr  # noqa: E402
from protocol.raft_records import KRAFT_VERSION_RECORD  # noqa: E402
from protocol.record_batch import ControlRecordType  # noqa: E402
from protocol.records import decode_metadata_record, encode_metadata_record, record  # noqa: E402
from server.controller import commands as cmd  # noqa: E402
from server.controller.snapshot import (  # noqa: E402
    REPLAY_OFFSET_HEADER,
    SnapshotLoadError,
    SnapshotRecoveryError,
    encode_snapshot_records,
    load_snapshot,
    recover_state,
    snapshot_plan,
    snapshot_records,
    take_snapshot,
    write_controller_snapshot,
)
from server.controller.state import ControllerState  # noqa: E402
from server.storage import snapshot as snap  # noqa: E402
from server.storage.log import LogConfig, MetadataLog, OffsetOutOfRangeError  # noqa: E402
from server.storage.snapshot import SnapshotRecord  # noqa: E402
from server.values import SnapshotId  # noqa: E402

if __name__ == "__main__":
    from tests.controller.helpers import CLUSTER_ID, Cluster
else:
    from .helpers import CLUSTER_ID, Cluster

SMALL_SEGMENTS = LogConfig(segment_bytes=1024)


def via_file(state: ControllerState, directory, end_offset: int | None = None, epoch: int = 3) -> ControllerState:
    end_offset = state.last_applied_offset + 1 if end_offset is None else end_offset
    snapshot_id = write_controller_snapshot(state, directory, end_offset, epoch, 1234)
    contents = snap.read_snapshot(snap.snapshot_path(directory, snapshot_id))
    return load_snapshot(contents.records, snapshot_id.end_offset, state.cluster_id)


def busy_cluster() -> Cluster:
    cluster = Cluster.bootstrapped(mv_level=22)
    epoch = cluster.register(1, uuid.UUID(int=1)).response["broker_epoch"]
    cluster.heartbeat(1, epoch)  # unfenced
    cluster.register(1, uuid.UUID(int=1))  # same incarnation: epoch kept, registration offset moves
    cluster.register(2, uuid.UUID(int=2), rack="r2")
    epoch3 = cluster.register(3, uuid.UUID(int=3)).response["broker_epoch"]
    cluster.heartbeat(3, epoch3)
    cluster.heartbeat(3, epoch3, want_shut_down=True)
    cluster.update([("group.version", 0, cmd.SAFE_DOWNGRADE)])
    cluster.update([("transaction.version", 2, cmd.UPGRADE)])
    return cluster


# --------------------------------------------------------------------------
# Round trip
# --------------------------------------------------------------------------


def test_round_trip_is_exact_including_offsets(tmp_path):
    cluster = busy_cluster()
    state = cluster.state
    one = state.broker(1)
    assert one.epoch != one.registration_offset  # the case no record field carries
    loaded = via_file(state, tmp_path)
    assert loaded == state
    assert loaded.broker(1).registration_offset == one.registration_offset
    assert loaded.finalized_features_epoch == state.finalized_features_epoch
    assert dict(loaded.finalized_levels) == dict(state.finalized_levels)


def test_records_replay_at_increasing_offsets_ending_at_the_last_applied_one():
    state = busy_cluster().state
    plan = snapshot_plan(state)
    offsets = [item.offset for item in plan]
    assert offsets == sorted(set(offsets))
    assert offsets[-1] == state.last_applied_offset
    registrations = {item.record.data["broker_id"]: item.offset for item in plan
                     if item.record is not None and item.record.name == "RegisterBrokerRecord"}
    assert registrations == {b.broker_id: b.registration_offset for b in state.brokers.values()}
    names = [r.name for r in snapshot_records(state)]
    assert names.count("FeatureLevelRecord") == len(state.finalized_levels)
    features = [r.data["name"] for r in snapshot_records(state) if r.name == "FeatureLevelRecord"]
    assert features[0] == "metadata.version"
    for entry in encode_snapshot_records(state):
        assert [key for key, _ in entry.headers] == [REPLAY_OFFSET_HEADER]


def test_kraft_version_travels_as_a_control_record(tmp_path):
    cluster = busy_cluster()
    cluster.state.replay_kraft_version(1, cluster.next_offset)
    entries = encode_snapshot_records(cluster.state)
    controls = [e for e in entries if e.control_type is not None]
    assert [e.control_type for e in controls] == [ControlRecordType.KRAFT_VERSION]
    assert KRAFT_VERSION_RECORD.decode(0, controls[0].value).kraft_version == 1
    assert via_file(cluster.state, tmp_path) == cluster.state


def test_registration_fields_survive_a_metadata_version_downgrade(tmp_path):
    # Registered with log dirs at 3.7-IV2+; after a downgrade the MV alone would
    # pick a RegisterBrokerRecord version without LogDirs.
    state = ControllerState(CLUSTER_ID)
    state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": 22}), 0)
    register = {
        "broker_id": 5, "incarnation_id": uuid.UUID(int=5), "broker_epoch": 1, "end_points": [],
        "features": [], "rack": None, "fenced": False, "in_controlled_shutdown": True,
        "is_migrating_zk_broker": True, "log_dirs": [uuid.UUID(int=99)],
    }
    state.replay(record(mr.REGISTER_BROKER_RECORD, register, version=3), 1)
    state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": 7}), 2)
    assert via_file(state, tmp_path) == state


@pytest.mark.parametrize("setup", ["empty", "no_ops_only", "registration_last"])
def test_edge_states_round_trip(tmp_path, setup):
    state = ControllerState(CLUSTER_ID)
    if setup == "no_ops_only":
        for offset in range(3):
            state.replay(record(mr.NO_OP_RECORD, {}), offset)
    elif setup == "registration_last":
        state.replay(record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": 22}), 0)
        register = {"broker_id": 1, "incarnation_id": uuid.UUID(int=1), "broker_epoch": 1, "end_points": [],
                    "features": [], "rack": None}
        state.replay(record(mr.REGISTER_BROKER_RECORD, register, version=0), 1)
    end_offset = max(state.last_applied_offset + 1, 1)
    assert via_file(state, tmp_path, end_offset=end_offset) == state


def test_a_snapshot_end_past_the_last_applied_offset_keeps_the_state(tmp_path):
    # Control batches (LeaderChange) after the last metadata record move the log
    # end but not the state; the snapshot id may be past the last applied offset.
    state = busy_cluster().state
    assert via_file(state, tmp_path, end_offset=state.last_applied_offset + 5) == state


def test_no_snapshot_inside_a_transaction():
    state = busy_cluster().state
    state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}), state.last_applied_offset + 1)
    with pytest.raises(ValueError, match="transaction"):
        snapshot_plan(state)


def test_load_rejects_records_without_offsets_or_beyond_the_end():
    state = busy_cluster().state
    entries = encode_snapshot_records(state)
    with pytest.raises(SnapshotLoadError, match="header"):
        load_snapshot([SnapshotRecord(entries[0].value)], 100, CLUSTER_ID)
    with pytest.raises(SnapshotLoadError, match="snapshot end"):
        load_snapshot(entries, state.last_applied_offset, CLUSTER_ID)
    swapped = [entries[1], entries[0]] + entries[2:]
    with pytest.raises(SnapshotLoadError):
        load_snapshot(swapped, state.last_applied_offset + 1, CLUSTER_ID)


BROKER_IDS = st.integers(min_value=1, max_value=3)
COMMANDS = st.one_of(
    st.tuples(st.just("register"), BROKER_IDS, st.integers(min_value=0, max_value=2)),
    st.tuples(st.just("heartbeat"), BROKER_IDS, st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("unregister"), BROKER_IDS),
    st.tuples(st.just("tick"), st.integers(min_value=0, max_value=12_000)),
    st.tuples(st.just("expire")),
    st.tuples(
        st.just("features"),
        st.sampled_from(["metadata.version", "group.version", "transaction.version"]),
        st.integers(min_value=-1, max_value=26),
        st.integers(min_value=0, max_value=4),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    mv_level=st.sampled_from([4, 7, 17, 21, 22]),
    commands=st.lists(COMMANDS, max_size=30),
    split=st.floats(min_value=0, max_value=1),
)
def test_snapshot_then_log_tail_equals_full_replay(mv_level, commands, split):
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    at = int(split * len(commands))
    for command in commands[:at]:
        cluster.apply(command)
    snapshot_end = cluster.next_offset
    image_then = cluster.state.snapshot()
    with tempfile.TemporaryDirectory() as directory:
        snapshot_id = write_controller_snapshot(cluster.state, directory, snapshot_end, 1, 0)
        contents = snap.read_snapshot(snap.snapshot_path(directory, snapshot_id))
    for command in commands[at:]:
        cluster.apply(command)
    loaded = load_snapshot(contents.records, snapshot_end, CLUSTER_ID)
    assert loaded.snapshot() == image_then
    for raw, offset in cluster.log:
        if offset >= snapshot_end:
            loaded.replay(decode_metadata_record(raw), offset)
    assert loaded == cluster.state == cluster.replayed_from_scratch()


# --------------------------------------------------------------------------
# Start-up recovery
# --------------------------------------------------------------------------


def copy_to_log(cluster: Cluster, log: MetadataLog, epoch: int = 1, per_batch: int = 3) -> None:
    """Appends the cluster's records the log does not have yet."""
    pending = [raw for raw, offset in cluster.log if offset >= log.end_offset]
    for index in range(0, len(pending), per_batch):
        log.append(pending[index : index + per_batch], leader_epoch=epoch, timestamp_ms=1000 + log.end_offset)


def test_recovery_from_snapshot_and_log_tail(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    cluster = busy_cluster()
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        copy_to_log(cluster, log, per_batch=1)
        first = take_snapshot(cluster.state, log)
        assert first == SnapshotId(cluster.next_offset, 1)
        assert take_snapshot(cluster.state, log) is None  # nothing new
        for broker_id in range(10, 40):
            cluster.register(broker_id, uuid.UUID(int=broker_id))
        copy_to_log(cluster, log, epoch=2)
        last_timestamp_ms = log.read(cluster.next_offset - 1, max_bytes=1)[0].max_timestamp_ms
        second = take_snapshot(cluster.state, log)
        assert log.start_offset == second.end_offset
        assert snap.list_snapshots(directory) == [second]
        header = snap.read_snapshot(snap.snapshot_path(directory, second)).last_contained_log_timestamp_ms
        assert header == last_timestamp_ms
        with pytest.raises(OffsetOutOfRangeError):
            log.read(second.end_offset - 1)
        cluster.update([("group.version", 1, cmd.UPGRADE)])
        cluster.register(50, uuid.UUID(int=50))
        copy_to_log(cluster, log, epoch=3)
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        state = recover_state(directory, log, CLUSTER_ID)
        assert state == cluster.state == cluster.replayed_from_scratch()
        assert log.start_offset == second.end_offset


def test_recovery_without_snapshots_replays_the_whole_log(tmp_path):
    directory = tmp_path / "log"
    cluster = busy_cluster()
    with MetadataLog.open(directory) as log:
        copy_to_log(cluster, log)
        log.append([b"\x00\x00\x01\x00"], leader_epoch=1, timestamp_ms=0, control_type=ControlRecordType.LEADER_CHANGE)
        assert recover_state(directory, log, CLUSTER_ID) == cluster.state


def test_recovery_falls_back_to_an_older_snapshot_when_the_newest_is_corrupt(tmp_path):
    directory = tmp_path / "log"
    cluster = busy_cluster()
    with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
        copy_to_log(cluster, log)
        older = write_controller_snapshot(cluster.state, directory, cluster.next_offset, 1)
        for broker_id in range(10, 20):
            cluster.register(broker_id, uuid.UUID(int=broker_id))
        copy_to_log(cluster, log)
        newer = write_controller_snapshot(cluster.state, directory, cluster.next_offset, 1)
        path = snap.snapshot_path(directory, newer)
        data = bytearray(open(path, "rb").read())
        data[200] ^= 0x10
        open(path, "wb").write(bytes(data))
        assert recover_state(directory, log, CLUSTER_ID) == cluster.state
        # Once the log start has moved past the older snapshot, nothing can rebuild the state.
        log.delete_before(newer.end_offset)
        with pytest.raises(SnapshotRecoveryError, match="no valid snapshot"):
            recover_state(directory, log, CLUSTER_ID)
        assert older in snap.list_snapshots(directory)


def test_recovery_finishes_a_snapshot_install_the_crash_interrupted(tmp_path):
    # A follower wrote the leader's snapshot, then died before resetting its log.
    leader = busy_cluster()
    for broker_id in range(10, 20):
        leader.register(broker_id, uuid.UUID(int=broker_id))
    follower_dir = tmp_path / "follower"
    with MetadataLog.open(follower_dir, SMALL_SEGMENTS) as log:
        follower = Cluster.bootstrapped(mv_level=22)
        copy_to_log(follower, log)
        snapshot_id = write_controller_snapshot(leader.state, follower_dir, leader.next_offset, 4)
        (follower_dir / (snap.snapshot_file_name(SnapshotId(99999, 9)) + ".part")).write_bytes(b"torn")
    with MetadataLog.open(follower_dir, SMALL_SEGMENTS) as log:
        state = recover_state(follower_dir, log, CLUSTER_ID)
        assert state == leader.state
        assert (log.start_offset, log.end_offset, log.last_epoch) == (snapshot_id.end_offset, snapshot_id.end_offset, 4)
        assert not any(name.endswith(".part") for name in os.listdir(follower_dir))


def test_a_log_that_lost_its_prefix_without_a_snapshot_refuses_to_start(tmp_path):
    directory = tmp_path / "log"
    with MetadataLog.open(directory) as log:
        copy_to_log(busy_cluster(), log)
        log.delete_before(4)
        with pytest.raises(SnapshotRecoveryError):
            recover_state(directory, log, CLUSTER_ID)


# --------------------------------------------------------------------------
# kill -9 while snapshotting
# --------------------------------------------------------------------------

BROKERS = 60
CHILD_ROUNDS = (120, 260, 50)  # acknowledged appends before each kill
ROUND_DEADLINE_S = 60.0


def record_at(offset: int) -> bytes:
    """The deterministic record at `offset` of the kill -9 test's log."""
    if offset == 0:
        item = record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": 22})
    elif offset % 3 == 0:
        item = record(mr.REGISTER_BROKER_RECORD, {
            "broker_id": offset % BROKERS, "incarnation_id": uuid.UUID(int=offset), "broker_epoch": offset,
            "end_points": [{"name": "PLAINTEXT", "host": "h%d" % offset, "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
            "rack": None, "fenced": True, "log_dirs": [uuid.UUID(int=offset + 1)],
        }, version=3)
    elif offset % 3 == 1:
        item = record(mr.FEATURE_LEVEL_RECORD, {"name": "test.feature.%d" % (offset % 7), "feature_level": offset % 500 + 1})
    elif offset == 2:
        item = record(mr.NO_OP_RECORD, {})
    else:
        # The broker registered two offsets ago: unfence it (same epoch).
        item = record(mr.BROKER_REGISTRATION_CHANGE_RECORD, {
            "broker_id": (offset - 2) % BROKERS, "broker_epoch": offset - 2, "fenced": -1,
        }, version=0)
    return encode_metadata_record(item)


def expected_state(end_offset: int) -> ControllerState:
    state = ControllerState(CLUSTER_ID)
    for offset in range(end_offset):
        state.replay(decode_metadata_record(record_at(offset)), offset)
    return state


def child_main(directory: str, epoch: int) -> None:
    from server.observability import configure_logging

    configure_logging(stream=sys.stderr)  # stdout carries only the protocol lines
    log = MetadataLog.open(directory, SMALL_SEGMENTS)
    state = recover_state(directory, log, CLUSTER_ID)
    print(f"ready {log.end_offset}", flush=True)
    for index in range(100_000):
        base = log.end_offset
        values = [record_at(base + i) for i in range(index % 3 + 1)]
        log.append(values, leader_epoch=epoch, timestamp_ms=base)
        for offset, value in enumerate(values, start=base):
            state.replay(decode_metadata_record(value), offset)
        print(f"ack {log.end_offset}", flush=True)
        if index % 4 == 0:
            take_snapshot(state, log)


def read_line(process: subprocess.Popen, selector: selectors.BaseSelector, deadline: float) -> str:
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "child process stalled"
        if selector.select(timeout=remaining):
            line = process.stdout.readline()
            assert line, f"child exited early with {process.wait()}; its stderr is in the test's tmp_path"
            return line


def run_and_kill(directory: Path, epoch: int, acks_wanted: int) -> int:
    python = PROJECT_ROOT / ".venv" / "bin" / "python"
    # A file, not a pipe: a chatty child must never block on a full stderr pipe.
    stderr = open(directory.parent / f"child-{epoch}.stderr", "wb")
    process = subprocess.Popen(
        [str(python if python.exists() else sys.executable), __file__, "child", str(directory), str(epoch)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        bufsize=1,
        cwd=PROJECT_ROOT,
    )
    acked = -1
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + ROUND_DEADLINE_S
        assert read_line(process, selector, deadline).startswith("ready ")
        for _ in range(acks_wanted):
            kind, end = read_line(process, selector, deadline).split()
            assert kind == "ack"
            acked = int(end)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        stderr.close()
    assert process.returncode == -signal.SIGKILL
    return acked


def test_kill_9_while_snapshotting_never_breaks_recovery(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    acked = 0
    for round_index, acks_wanted in enumerate(CHILD_ROUNDS):
        acked = max(acked, run_and_kill(directory, round_index + 1, acks_wanted))
        with MetadataLog.open(directory, SMALL_SEGMENTS) as log:
            state = recover_state(directory, log, CLUSTER_ID)
            assert log.end_offset >= acked
            assert state == expected_state(log.end_offset)
            snapshots = snap.list_snapshots(directory)
            assert snapshots, "the child took snapshots"
            assert log.start_offset <= snapshots[-1].end_offset <= log.end_offset
            assert not any(name.endswith(".part") for name in os.listdir(directory))
    assert log.start_offset > 0  # prefixes really were deleted


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "child":
    child_main(sys.argv[2], int(sys.argv[3]))
