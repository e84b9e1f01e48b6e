"""`kraftwerk dump-log` and `kraftwerk metadata-shell` against Apache Kafka 4.4.0's own
reading of the same files, both ways:

- Kafka's DumpLogSegments (`kafka-dump-log.sh --cluster-metadata-decoder`, main class
  org.apache.kafka.tools.DumpLogSegments in kafka-tools) over a log kraftwerk wrote —
  through its storage layer (every record kind the controller writes, control records,
  a snapshot, several segments) and by a running kraftwerk controller — prints exactly
  what `kraftwerk dump-log --cluster-metadata` prints: every batch line, every record's
  offset, type and fields as Kafka's JSON.
- Over a log a real Kafka 4.4 controller wrote (formatted by Kafka's StorageTool, run
  until it has taken a snapshot, stopped), ours prints exactly what Kafka's tool prints,
  and the metadata shell shows the features and configs that controller finalized.

Kafka's MetadataShell (kafka-shell) is on neither classpath the setup resolves, so the
shell is checked against what the log says, not against Kafka's shell.

Skipped with the reason when Java or Kafka's jars are missing (failed under CI=true).
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli import local_cluster as lc
from cli import metadata_tools as mt
from cli.upgrade_story import LocalCluster
from protocol.records import decode_metadata_record
from server.controller.features import metadata_version_from_level
from server.storage.meta_properties import random_uuid_string
from server.storage.snapshot import list_snapshots, read_snapshot, snapshot_path

from kafka_peer.kafka_nodes import KafkaNode, KafkaNodeConfig, quorum_voters, server_missing
from storage.metadata_files import write_story

from .kafka_tools import CONFIGS, REPO_ROOT, run_tool, tools_missing

pytestmark = pytest.mark.e2e

DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log.sh
SNAPSHOT_WAIT_S = 60.0
POLL_S = 0.25  # another process's snapshot has no event to wait on


@pytest.fixture(scope="module", autouse=True)
def kafka_tools():
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)


def metadata_files(directory: Path) -> list[str]:
    """The segments and snapshots of a metadata directory (Kafka's also holds indexes,
    producer snapshots and checkpoints, which neither tool reads here)."""
    return sorted(str(p) for p in directory.iterdir() if mt.file_kind(p.name) is not None)


def retention_record_offset(directory: Path) -> int | None:
    """The offset of the ConfigRecord setting log.retention.ms, once it is in the log
    (read while the controller writes: a batch still being written does not verify yet)."""
    for segment in sorted(directory.glob("*.log")):
        for item in mt.scan_file(str(segment)):
            if not isinstance(item, mt.GoodBatch) or item.batch.is_control:
                continue
            for entry in item.batch.records:
                decoded = decode_metadata_record(entry.value)
                if decoded.name == "ConfigRecord" and decoded.data.name == "log.retention.ms":
                    return entry.offset
    return None


def kafkas_dump(files: list[str]) -> str:
    run = run_tool(DUMP_LOG_SEGMENTS, "--cluster-metadata-decoder", "--files", ",".join(files), timeout_s=60)
    assert run.returncode == 0, run.describe()
    return run.stdout


def our_dump(files: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = mt.dump_log(files, out, err)
    assert (code, err.getvalue()) == (0, "")
    return out.getvalue()


def assert_same_dump(files: list[str]) -> list[str]:
    """Both tools over `files`; equal line by line. Returns the lines."""
    theirs, ours = kafkas_dump(files).splitlines(), our_dump(files).splitlines()
    for index, (their_line, our_line) in enumerate(zip(theirs, ours)):
        assert our_line == their_line, f"line {index + 1} differs"
    assert len(ours) == len(theirs)
    return ours


def test_kafkas_dump_log_and_ours_agree_on_a_log_kraftwerks_storage_wrote(tmp_path):
    story = write_story(tmp_path / "node" / "__cluster_metadata-0")
    lines = assert_same_dump(metadata_files(story.directory))
    record_lines = [line for line in lines if line.startswith("| offset: ")]
    # Every offset of the log, every record of the snapshot with its header and footer.
    assert len(record_lines) == len(story.entries) + len(read_snapshot(story.snapshot_path).records) + 2
    kinds = {line.split(" payload: ")[1].split('"')[3] for line in record_lines if " payload: " in line}
    assert {"REGISTER_BROKER_RECORD", "PARTITION_CHANGE_RECORD", "CLIENT_QUOTA_RECORD",
            "USER_SCRAM_CREDENTIAL_RECORD", "ACCESS_CONTROL_ENTRY_RECORD", "REMOVE_TOPIC_RECORD"} <= kinds


def test_kafkas_dump_log_and_ours_agree_on_a_running_kraftwerk_controllers_log(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", controllers=1, brokers=0, metadata_version="3.9-IV0")
    try:
        cluster.bring_up()
        upgrade = subprocess.run([sys.executable, "-m", "cli.main", "features", "upgrade", "--metadata", "4.0-IV0",
                                  "--bootstrap-controller", cluster.controller_addresses],
                                 capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert upgrade.returncode == 0, upgrade.stderr
    finally:
        cluster.stop_all()
    directory = Path(cluster.specs[0].metadata_dir) / "__cluster_metadata-0"
    lines = assert_same_dump(metadata_files(directory))
    assert any("LeaderChange: " in line for line in lines)
    assert any('"featureLevel":22' in line and "metadata.version" in line for line in lines)  # 4.0-IV0


@pytest.mark.slow
def test_ours_agree_with_kafkas_on_a_log_a_kafka_controller_wrote(tmp_path):
    missing = server_missing()
    if missing is not None:
        pytest.skip(missing)
    port = lc.free_port_run(1)
    config = KafkaNodeConfig(1, port, tmp_path / "kafka-1", quorum_voters([(1, f"127.0.0.1:{port}")]),
                             roles=("controller",),
                             # A snapshot soon after the config change, so there is one to read.
                             extra={"metadata.log.max.snapshot.interval.ms": "500"})
    node = KafkaNode(config)
    node.format(random_uuid_string())
    directory = config.data_dir / "__cluster_metadata-0"
    node.start()
    try:
        node.wait_ready()
        alter = run_tool(CONFIGS, "--bootstrap-controller", config.address, "--alter", "--entity-type", "brokers",
                         "--entity-default", "--add-config", "log.retention.ms=4321")
        assert alter.returncode == 0, alter.describe()
        deadline = time.monotonic() + SNAPSHOT_WAIT_S
        # The config change is committed when the tool returns; wait for a snapshot that
        # holds it (one taken before it ends at or below its offset).
        while not any(snapshot.end_offset > (retention_record_offset(directory) or 1 << 62)
                      for snapshot in list_snapshots(directory)):
            assert time.monotonic() < deadline, f"no snapshot holding the config in {directory} after " \
                                                f"{SNAPSHOT_WAIT_S} s"
            time.sleep(POLL_S)
    finally:
        stopped = node.stop()
    assert stopped, "the Kafka controller did not stop on SIGTERM"
    files = metadata_files(directory)
    assert any(name.endswith(".checkpoint") for name in files)
    lines = assert_same_dump(files)
    assert any('"type":"REGISTER_CONTROLLER_RECORD"' in line for line in lines)
    assert any('"name":"log.retention.ms","value":"4321"' in line for line in lines)

    # The image of that directory (its newest snapshot and the log after it).
    out, err = io.StringIO(), io.StringIO()
    code = mt.metadata_shell(None, str(config.data_dir), [], io.StringIO(
        "cat /image/features/metadataVersion\ncat /image/configs/BROKER/log.retention.ms\n"
        "ls /image/cluster/brokers /image/topics/byName\n"), out, err)
    assert (code, err.getvalue()) == (0, ""), out.getvalue()
    image = mt.load_directory_image(str(config.data_dir))
    level = image.state.metadata_version
    assert out.getvalue().splitlines() == [metadata_version_from_level(level).name, "4321"]
    finalized = [line for line in lines
                 if '"type":"FEATURE_LEVEL_RECORD"' in line and '"name":"metadata.version"' in line]
    assert finalized and f'"featureLevel":{level}}}' in finalized[-1]
    newest = max(list_snapshots(directory))
    snapshot_image = mt.load_snapshot_image(str(snapshot_path(directory, newest)))
    assert snapshot_image.state.configs(4, "")["log.retention.ms"] == "4321"
