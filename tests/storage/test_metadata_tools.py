"""`kraftwerk dump-log` and `kraftwerk metadata-shell` over a metadata directory written
through kraftwerk's own storage (tests/storage/metadata_files.py): every batch and record
listed with the right offsets and types, records as Kafka's JSON, damage reported with
file, byte and offset and a non-zero exit, and the image the shell browses equal to the
one the controller itself replays.

The same files against Kafka's own DumpLogSegments: tests/interop/test_dump_log.py."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli import metadata_tools as mt
from protocol.record_batch import CRC_OFFSET, LENGTH_OFFSET
from protocol.records import encode_metadata_record, record
from protocol import metadata_records as mr
from protocol.schema import snake_case
from server.controller.snapshot import recover_state
from server.storage.log import MetadataLog
from server.storage.snapshot import SnapshotRecord, SnapshotWriter, read_snapshot

from .metadata_files import ALICE_SALT, SENSITIVE_VALUE, CLUSTER_ID, Story, write_story

REPO_ROOT = Path(__file__).resolve().parents[2]
RECORD_LINE = re.compile(r"^\| offset: (\d+) CreateTime: \d+ keySize: -?\d+ valueSize: -?\d+ sequence: -1 "
                         r"headerKeys: \[([^\]]*)\] (.*)$")
BATCH_LINE = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) CreateTime: \d+ "
                        r"size: (\d+) magic: 2 compresscodec: none crc: (\d+) isvalid: true$")
CONTROL_LABELS = {"LeaderChange": "LeaderChange:", "KRaftVersion": "KRaftVersion", "Voters": "KRaftVoters"}


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Story:
    return write_story(tmp_path_factory.mktemp("node") / "__cluster_metadata-0")


@pytest.fixture
def copy(story, tmp_path) -> Path:
    """A private copy of the story's node directory (its __cluster_metadata-0 returned), to damage."""
    shutil.copytree(story.directory.parent, tmp_path / "node", ignore=shutil.ignore_patterns(".lock"))
    return tmp_path / "node" / story.directory.name


def dump(*paths, payloads: bool = True, deep: bool = True) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = mt.dump_log([str(p) for p in paths], out, err, payloads=payloads, deep=deep)
    return code, out.getvalue(), err.getvalue()


def sections(text: str) -> dict[str, list[str]]:
    """The dump's lines per file (the "Dumping FILE" line starts each)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            current = out.setdefault(Path(line[len("Dumping "):]).name, [])
        else:
            current.append(line)
    return out


def listed(lines: list[str]) -> list[tuple[int, str]]:
    """(offset, what) of every record line: a metadata record's type or a control label."""
    out = []
    for line in lines:
        match = RECORD_LINE.match(line)
        if match is None:
            continue
        rest = match.group(3)
        if rest.startswith("payload: "):
            out.append((int(match.group(1)), json.loads(rest[len("payload: "):])["type"]))
        else:
            out.append((int(match.group(1)), rest.split(" ", 1)[0]))
    return out


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------
# dump-log
# --------------------------------------------------------------------------


def test_every_record_of_the_log_is_listed_with_its_offset_and_type(story):
    code, out, err = dump(*story.segments)
    assert (code, err) == (0, "")
    records = []
    for path in story.segments:
        records += listed(sections(out)[path.name])
    expected = [(offset, CONTROL_LABELS[what] if what in CONTROL_LABELS else snake_case(what).upper())
                for offset, what in story.entries]
    assert records == expected


def test_batch_lines_account_for_every_byte_of_every_segment(story):
    code, out, _ = dump(*story.segments)
    assert code == 0
    for path in story.segments:
        batches = [BATCH_LINE.match(line) for line in sections(out)[path.name] if line.startswith("baseOffset")]
        assert batches and all(batches), sections(out)[path.name]
        assert int(batches[0].group(1)) == int(path.name[:20])  # the file is named by its first offset
        position = 0
        for batch in batches:
            assert int(batch.group(4)) == position
            position += int(batch.group(5))
            assert int(batch.group(2)) - int(batch.group(1)) + 1 == int(batch.group(3))
        assert position == path.stat().st_size
        assert sections(out)[path.name][0] == f"Log starting offset: {int(path.name[:20])}"


def test_records_print_as_kafkas_json(story):
    _, out, _ = dump(*story.segments)
    payloads = [line.split(" payload: ", 1)[1] for line in out.splitlines() if " payload: " in line]
    assert payloads[0] == ('{"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version",'
                           '"featureLevel":22}}')
    unfence = next(p for p in payloads if "BROKER_REGISTRATION_CHANGE_RECORD" in p)
    # Tagged fields only when they differ from their default: Fenced -1 (unfence) is
    # written, InControlledShutdown 0 and the empty LogDirs are not.
    assert '"fenced":-1' in unfence and "inControlledShutdown" not in unfence and "logDirs" not in unfence
    quotas = [json.loads(p)["data"] for p in payloads if "CLIENT_QUOTA_RECORD" in p]
    assert {"entityType": "user", "entityName": None} in quotas[1]["entity"]
    assert '"value":2.5E7' in next(p for p in payloads if "consumer_byte_rate" in p)  # Java's double
    scram = json.loads(next(p for p in payloads if "USER_SCRAM_CREDENTIAL_RECORD" in p))["data"]
    assert scram["salt"] == "YWxpY2Utc2FsdC0xNmJ5dA=="  # base64 of ALICE_SALT, as Jackson writes bytes
    assert ALICE_SALT == b"alice-salt-16byt"
    topic = json.loads(next(p for p in payloads if "TOPIC_RECORD" in p))["data"]
    assert topic["name"] == "orders" and len(topic["topicId"]) == 22  # Kafka's base64url uuid
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in out
    assert 'KRaftVoters {"version":0,"voters":[{"voterId":3000,' in out


def test_snapshot_lists_header_records_and_footer(story):
    code, out, err = dump(story.snapshot_path)
    assert (code, err) == (0, "")
    lines = sections(out)[story.snapshot_path.name]
    assert lines[0] == f"Snapshot end offset: {story.snapshot.end_offset}, epoch: {story.snapshot.epoch}"
    records = [RECORD_LINE.match(line) for line in lines if line.startswith("| offset")]
    assert records[0].group(3).startswith('SnapshotHeader {"version":0,"lastContainedLogTimestamp":')
    assert records[-1].group(3) == 'SnapshotFooter {"version":0}'
    assert [int(r.group(1)) for r in records] == list(range(len(records)))  # in-file offsets from 0
    inner = records[1:-1]
    assert all(r.group(2) == "kraftwerk.replay_offset" for r in inner)
    assert len(inner) == len(read_snapshot(story.snapshot_path).records)


def test_a_directory_means_its_segments_and_snapshots(story):
    code, out, _ = dump(story.directory.parent)
    assert code == 0
    assert set(sections(out)) == {p.name for p in story.segments} | {story.snapshot_path.name}


def test_without_cluster_metadata_only_batches_are_listed(story):
    code, out, _ = dump(*story.segments, payloads=False, deep=False)
    assert code == 0
    assert "| offset" not in out and out.count("baseOffset: ") > len(story.segments)


def test_a_flipped_byte_is_reported_with_file_byte_and_offset_and_reading_goes_on(story, copy):
    segment = copy / story.segments[0].name
    code, out, _ = dump(segment)
    second = BATCH_LINE.match(next(line for line in sections(out)[segment.name] if line.startswith("baseOffset: 1 ")))
    position, base_offset = int(second.group(4)), int(second.group(1))
    flip(segment, position + 70)  # inside the records: the CRC no longer matches
    code, out, err = dump(segment)
    assert code == mt.EXIT_DAMAGED
    assert f"Error: {segment}: byte {position} offset {base_offset}: CRC mismatch" in err
    lines = sections(out)[segment.name]
    assert f"baseOffset: {base_offset} position: {position} size: {second.group(5)} isvalid: false" in lines
    # The batches after the damaged one are still listed.
    after = [int(m.group(1)) for m in map(BATCH_LINE.match, lines) if m]
    assert after and max(after) > base_offset


def test_a_damaged_base_offset_outside_the_crc_is_reported(story, copy):
    segment = copy / story.segments[1].name
    flip(segment, 7)  # the low byte of the first batch's base offset
    code, _, err = dump(segment)
    assert code == mt.EXIT_DAMAGED
    assert re.search(rf"{re.escape(str(segment))}: byte 0 offset -?\d+: base offset -?\d+, expected "
                     rf"{int(segment.name[:20])}", err)


def test_a_torn_tail_is_reported_with_the_bytes_left(story, copy):
    segment = copy / story.segments[-1].name
    size = segment.stat().st_size
    segment.write_bytes(segment.read_bytes()[:size - 10])
    code, out, err = dump(segment)
    assert code == mt.EXIT_DAMAGED
    assert "truncated" in err
    assert re.search(rf"Found \d+ invalid bytes at the end of {segment.name}", out)


def test_an_impossible_length_field_is_reported_and_reading_resumes(story, copy):
    segment = copy / story.segments[0].name
    data = bytearray(segment.read_bytes())
    data[LENGTH_OFFSET:LENGTH_OFFSET + 4] = (0x7FFF_FFFF).to_bytes(4, "big")
    segment.write_bytes(bytes(data))
    code, out, err = dump(segment)
    assert code == mt.EXIT_DAMAGED
    assert f"{segment}: byte 0 offset 0: " in err and "exceeds the limit" in err and "reading resumes" in err
    assert any(line.startswith("baseOffset: 1 lastOffset:") for line in sections(out)[segment.name])


def test_a_record_that_does_not_decode_in_a_valid_batch_is_reported(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog.open(directory)
    good = encode_metadata_record(record(mr.NO_OP_RECORD, {}, version=0))
    log.append([good, b"\x01\xc8\x01\x00", good], 1, 1000)  # frame 1, api key 200: no such record
    log.close()
    segment = directory / "00000000000000000000.log"
    code, out, err = dump(segment)
    assert code == mt.EXIT_DAMAGED
    assert f"{segment}: byte 0 offset 1: record does not decode: unknown metadata record type 200" in err
    assert "| offset: 2 " in out  # the records after it are listed


def test_a_damaged_snapshot_is_reported(story, copy):
    snapshot = copy / story.snapshot_path.name
    flip(snapshot, CRC_OFFSET)
    code, _, err = dump(snapshot)
    assert code == mt.EXIT_DAMAGED
    assert f"{snapshot}: byte 0 offset 0: CRC mismatch" in err


def test_a_snapshot_without_its_footer_is_reported(story, copy):
    snapshot = copy / story.snapshot_path.name
    _, out, _ = dump(snapshot)
    footer = [BATCH_LINE.match(line) for line in sections(out)[snapshot.name] if line.startswith("baseOffset")][-1]
    snapshot.write_bytes(snapshot.read_bytes()[:int(footer.group(4))])
    code, _, err = dump(snapshot)
    assert code == mt.EXIT_DAMAGED
    assert "no SnapshotFooter (the snapshot is incomplete)" in err


def test_the_command_exits_non_zero_on_damage(story, copy):
    segment = copy / story.segments[0].name
    flip(segment, 180)  # in the records of the second batch (bytes 91-208)
    done = subprocess.run([sys.executable, "-m", "cli.main", "dump-log", "--cluster-metadata", str(segment)],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 1, done.stderr
    assert str(segment) in done.stderr and "CRC mismatch" in done.stderr
    assert done.stdout.startswith(f"Dumping {segment}\nLog starting offset: 0\n")


# --------------------------------------------------------------------------
# metadata-shell: the image
# --------------------------------------------------------------------------


def test_the_directory_image_is_the_one_the_controller_replays(story, copy):
    image = mt.load_directory_image(str(copy.parent))
    assert image.damages == ()
    assert image.state == story.state
    assert image.provenance.offset == story.entries[-1][0]
    # The node's own start-up path over the same files (it takes the log's lock and may
    # write, so it runs after the read-only tool).
    with MetadataLog.open(copy) as log:
        assert recover_state(copy, log, CLUSTER_ID) == image.state


def test_the_snapshot_image_is_the_state_it_was_written_from(story):
    image = mt.load_snapshot_image(str(story.snapshot_path))
    assert image.state == story.snapshot_state
    assert image.provenance == mt.Provenance(story.snapshot.end_offset - 1, story.snapshot.epoch,
                                             read_snapshot(story.snapshot_path).last_contained_log_timestamp_ms)


def test_a_snapshot_without_replay_offsets_as_kafka_writes_it_loads(story, tmp_path):
    contents = read_snapshot(story.snapshot_path)
    with SnapshotWriter(tmp_path, story.snapshot, contents.last_contained_log_timestamp_ms) as writer:
        writer.append_records(SnapshotRecord(entry.value, entry.control_type) for entry in contents.records)
        writer.freeze()
    image = mt.load_snapshot_image(str(tmp_path / story.snapshot_path.name))
    tree = mt.image_tree(image)["image"]
    assert tree == mt.image_tree(mt.load_snapshot_image(str(story.snapshot_path)))["image"]


def test_a_damaged_log_stops_the_image_before_the_damage(story, copy):
    last = copy / story.segments[-1].name
    flip(last, 100)
    image = mt.load_directory_image(str(copy))
    assert len(image.damages) == 1 and str(last) in str(image.damages[0])
    assert "the image stops before it" in image.damages[0].reason
    assert image.provenance.offset < story.entries[-1][0]
    out, err = io.StringIO(), io.StringIO()
    code = mt.metadata_shell(None, str(copy), ["ls", "/image"], io.StringIO(), out, err)
    assert code == mt.EXIT_DAMAGED and str(last) in err.getvalue() and "features" in out.getvalue()


def test_a_directory_without_its_log_prefix_is_refused(story, copy):
    for path in copy.glob("*.checkpoint"):
        path.unlink()
    (copy / story.segments[0].name).unlink()
    with pytest.raises(mt.MetadataToolError, match="there is no usable snapshot"):
        mt.load_directory_image(str(copy))


# --------------------------------------------------------------------------
# metadata-shell: the tree and the commands
# --------------------------------------------------------------------------


def session(story: Story, script: str, *, directory: bool = True) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    source = (None, str(story.directory)) if directory else (str(story.snapshot_path), None)
    code = mt.metadata_shell(*source, [], io.StringIO(script), out, err)
    return code, out.getvalue(), err.getvalue()


def test_the_tree_follows_kafkas_layout(story):
    code, out, err = session(story, "ls /\nls /image\nls /image/cluster\nls /image/topics\nls /image/acls\n")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "image", "local",
        "acls", "clientQuotas", "cluster", "configs", "delegationToken", "features", "producerIds", "provenance",
        "scram", "topics",
        "brokers", "controllers",
        "byId", "byName",
        "byId",
    ]


def test_leaves_show_the_image(story):
    topic_id = mt.uuid_to_string(story.state.topic("orders").topic_id)
    code, out, _ = session(story, "\n".join([
        "cat /image/features/metadataVersion /image/features/finalized_group.version",
        "cat /image/topics/byName/orders/name /image/topics/byName/orders/id",
        f"cat /image/topics/byId/{topic_id}/name",
        "cat /image/configs/BROKER/log.retention.ms /image/configs/TOPIC:orders/cleanup.policy",
        "cat /image/producerIds/nextProducerId",
        "ls /image/clientQuotas",
        "cat /image/clientQuotas/user(<default>)/consumer_byte_rate",
        "cat /image/cluster/brokers/3",
        "cat /image/topics/byName/orders/1",
        "cat /image/provenance",
    ]) + "\n")
    assert code == 0
    lines = out.splitlines()
    assert lines[:7] == ["4.0-IV0", "1", "orders", topic_id, "orders", "86400000", "compact"]
    assert lines[7] == "1000"
    assert lines[8:11] == ["clientId(app\\(1\\))_user(alice)", "user(<default>)", "user(alice)"]
    assert lines[11] == "2.5E7"
    assert lines[12].startswith("BrokerRegistration(id=3, epoch=") and "inControlledShutdown=true" in lines[12]
    assert "rack=Optional[rack-1]" in lines[12]
    partition = story.state.topic("orders").partitions[1]
    assert lines[13] == (f"PartitionRegistration(replicas={list(partition.replicas)}, directories=["
                         + ", ".join(mt.uuid_to_string(d) for d in partition.directories)
                         + f"], isr={list(partition.isr)}, removingReplicas=[], addingReplicas=[], elr=[], "
                         f"lastKnownElr=[], leader={partition.leader}, leaderRecoveryState=RECOVERED, "
                         f"leaderEpoch={partition.leader_epoch}, partitionEpoch={partition.partition_epoch})")
    assert re.fullmatch(rf"offset {story.entries[-1][0]}, epoch 2, time 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?"
                        r"Z\[UTC\]", lines[14])


def test_the_deleted_topic_and_the_snapshot_state_differ(story):
    _, now, _ = session(story, "ls /image/topics/byName\n")
    _, then, _ = session(story, "ls /image/topics/byName\n", directory=False)
    assert now.split() == ["orders"] and then.split() == ["orders", "payments"]


def test_cd_pwd_relative_paths_and_errors(story):
    code, out, _ = session(story, "\n".join([
        "pwd", "cd /image/topics", "pwd", "ls", "cd byName/orders", "pwd", "cat name", "cd ../..", "pwd",
        "cd nowhere", "cd /image/provenance", "cat /image/features", "cat /nothing", "ls /nothing",
        "bogus", "cd", "pwd",
    ]) + "\n")
    assert code == mt.EXIT_DAMAGED  # some commands failed
    assert out.splitlines() == [
        "/", "/image/topics", "byId", "byName", "/image/topics/byName/orders", "orders", "/image/topics",
        "cd: nowhere: no such directory.", "cd: /image/provenance: not a directory.",
        "cat: /image/features: Is a directory", "cat: /nothing: No such file or directory.",
        "ls: /nothing: no such file or directory.",
        "invalid choice: 'bogus' (choose from 'cat', 'cd', 'exit', 'find', 'help', 'ls', 'pwd', 'tree')", "/",
    ]


def test_find_and_tree(story):
    code, out, _ = session(story, "find /image/features\ntree /image/producerIds\ntree /image/features/metadataVersion\n")
    assert code == 0
    assert out.splitlines() == [
        "/image/features", "/image/features/finalized_group.version", "/image/features/metadataVersion",
        "/image/features/zkMigrationState", "nextProducerId:", "  1000", "4.0-IV0",
    ]


def test_globs_match_like_kafkas_shell(story):
    code, out, _ = session(story, "cat /image/features/finalized_*\nls /image/{cluster,producerIds}\n"
                                  "find /image/cluster/brokers/?\n")
    assert code == 0
    assert out.splitlines() == ["1", "cluster:", "brokers", "controllers", "", "producerIds:", "nextProducerId",
                                "/image/cluster/brokers/1", "/image/cluster/brokers/2", "/image/cluster/brokers/3"]


def test_exit_ends_the_script(story):
    code, out, _ = session(story, "pwd\nexit\npwd\n")
    assert (code, out) == (0, "/\n")


def test_secrets_are_never_shown(story):
    code, out, _ = session(story, "tree /\n")
    assert code == 0
    assert SENSITIVE_VALUE not in out
    for secret in (ALICE_SALT, b"\x01" * 32, b"\x02" * 32):
        assert secret.hex() not in out and secret.decode("latin-1") not in out
    assert "ScramCredentialData(salt=[redacted], storedKey=[redacted], serverKey=[redacted], iterations=4096)" in out
    assert "[redacted]" in out.split("BROKER:1:", 1)[1].split("\n", 3)[2]


def test_one_command_from_the_command_line(story):
    done = subprocess.run([sys.executable, "-m", "cli.main", "metadata-shell", "--snapshot", str(story.snapshot_path),
                           "ls", "/image/features"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["finalized_group.version", "metadataVersion", "zkMigrationState"]
    piped = subprocess.run([sys.executable, "-m", "cli.main", "metadata-shell", "--directory",
                            str(story.directory.parent)], input="cd /image/topics/byName\nls\n",
                           capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert (piped.returncode, piped.stdout) == (0, "orders\n"), piped.stderr


def test_a_missing_or_corrupt_snapshot_is_an_error(story, copy, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert mt.metadata_shell(str(tmp_path / "nope.checkpoint"), None, ["ls"], io.StringIO(), out, err) == 1
    assert "no such file" in err.getvalue()
    snapshot = copy / story.snapshot_path.name
    flip(snapshot, 200)
    err = io.StringIO()
    assert mt.metadata_shell(str(snapshot), None, ["ls"], io.StringIO(), io.StringIO(), err) == 1
    assert str(snapshot) in err.getvalue()


def test_java_doubles():
    assert [mt.java_double(v) for v in (1024.0, 0.5, 2.5e7, 1e-4, 123456.789, 0.0, 1e7)] == [
        "1024.0", "0.5", "2.5E7", "1.0E-4", "123456.789", "0.0", "1.0E7"]


def test_quota_entity_names_escape_like_kafka():
    assert mt.quota_entity_name((("client-id", "a(b)\\c"), ("ip", "1.2.3.4"), ("user", None))) == \
        "clientId(a\\(b\\)\\\\c)_ip(1.2.3.4)_user(<default>)"
