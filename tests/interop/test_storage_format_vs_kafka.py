"""`storage format` with KIP-853's flags: Kafka 4.4.0's StorageTool against kraftwerk's.

Each case formats one configuration twice, once with Kafka's `kafka.tools.StorageTool`
(kafka-storage.sh) and once with `kraftwerk storage format`, then compares: the exit
status, stdout (the Bootstrap metadata line and the Formatting line, directories
replaced), the refusal text (kraftwerk prints Kafka's words after its `Error: `; Kafka
lets an `--initial-controllers` parse error escape as an exception and prints argparse
clashes with doubled spaces, both normalised here), meta.properties, and the bootstrap
snapshots record by record apart from timestamps and random directory ids. Last, Kafka's
DumpLogSegments decodes every snapshot kraftwerk wrote.

Skipped, naming what is missing, where Java or Kafka's jars are not set up (CI=true turns
that skip into a failure, tests/conftest.py)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from protocol.raft_records import KRAFT_VERSION_RECORD, SNAPSHOT_FOOTER_RECORD, SNAPSHOT_HEADER_RECORD, VOTERS_RECORD
from protocol.record_batch import ControlRecordType, control_record_type, decode_batches
from protocol.records import decode_metadata_record
from server.storage.bootstrap import bootstrap_snapshot_path
from server.storage.meta_properties import parse_uuid_string, read_meta_properties

from command_line.in_process import run_main

from .kafka_tools import REPO_ROOT, classpath_missing, run_tool, tools_missing

pytestmark = pytest.mark.slow

SERVER_CLASSPATH_FILE = REPO_ROOT / "interop" / "target" / "server-classpath.txt"
STORAGE_TOOL = "kafka.tools.StorageTool"
DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"
TIMEOUT_S = 60.0
CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAA"
DIR_1 = "pkCSrLOITb6BrkbqORztFQ"
DIR_2 = "qkCSrLOITb6BrkbqORztFQ"
DIR_3 = "rkCSrLOITb6BrkbqORztFQ"
CONTROLLER = ["process.roles=controller", "node.id=1", "controller.listener.names=CONTROLLER",
              "listeners=CONTROLLER://127.0.0.1:19091"]
DYNAMIC = [*CONTROLLER, "controller.quorum.bootstrap.servers=127.0.0.1:19091"]
NO_HOST = ["process.roles=controller", "node.id=1", "controller.listener.names=CONTROLLER",
           "listeners=CONTROLLER://:19091", "controller.quorum.bootstrap.servers=127.0.0.1:19091"]
STATIC = [*CONTROLLER, "controller.quorum.voters=1@127.0.0.1:19091"]
BROKER = ["process.roles=broker", "node.id=5", "controller.listener.names=CONTROLLER",
          "listeners=PLAINTEXT://127.0.0.1:19095", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
          "controller.quorum.bootstrap.servers=127.0.0.1:19091"]
SALTED = "gP8A" + "A" * 39 + "="  # 32 bytes

CASES = {
    "static": (STATIC, []),
    "static-N": (STATIC, ["--no-initial-controllers"]),
    "static-s": (STATIC, ["--standalone"]),
    "static-I": (STATIC, ["--initial-controllers", f"1@localhost:19091:{DIR_1}"]),
    "static-kv1": (STATIC, ["--feature", "kraft.version=1"]),
    "dynamic": (DYNAMIC, []),
    "dynamic-s": (DYNAMIC, ["--standalone"]),
    "dynamic-s-no-host": (NO_HOST, ["-s"]),
    "dynamic-s-scram": (DYNAMIC, ["-s", "-r", "3.9", "-S",
                                  f'SCRAM-SHA-256=[name=alice,iterations=8192,salt="N3E=",saltedpassword="{SALTED}"]']),
    "dynamic-I-own": (DYNAMIC, ["-I", f"1@127.0.0.1:19091:{DIR_1},2@localhost:19092:{DIR_2}"]),
    "dynamic-I-others": (DYNAMIC, ["--initial-controllers", f"2@localhost:19092:{DIR_2},3@[::1]:19093:{DIR_3}"]),
    "dynamic-N": (DYNAMIC, ["-N"]),
    "dynamic-s-kv0": (DYNAMIC, ["-s", "--feature", "kraft.version=0"]),
    "dynamic-s-N": (DYNAMIC, ["-s", "-N"]),
    "dynamic-N-I": (DYNAMIC, ["-N", "-I", f"1@localhost:19091:{DIR_1}"]),
    "broker": (BROKER, []),
    "broker-s": (BROKER, ["--standalone"]),
    "broker-I": (BROKER, ["-I", f"1@localhost:19091:{DIR_1}"]),
    "bad-I-port": (DYNAMIC, ["-I", "1@localhost:9093"]),
    "bad-I-id": (DYNAMIC, ["-I", f"x@localhost:9093:{DIR_1}"]),
    "bad-I-dir": (DYNAMIC, ["-I", "1@localhost:9093:nope"]),
    "bad-I-twice": (DYNAMIC, ["-I", f"1@a:1:{DIR_1},1@b:2:{DIR_2}"]),
    "bad-I-empty": (DYNAMIC, ["-I", ","]),
}


@pytest.fixture(scope="module", autouse=True)
def kafka_server():
    missing = classpath_missing(SERVER_CLASSPATH_FILE, "Apache Kafka's server (kafka_2.13 4.4.0)") or tools_missing()
    if missing is not None:
        pytest.skip(missing)


@dataclass(frozen=True)
class Run:
    status: int
    stdout: list[str]
    error: str  # the refusal, normalised (empty on success)
    directory: Path


def _write_config(path: Path, properties: list[str], directory: Path) -> None:
    path.write_text("\n".join([*properties, f"log.dirs={directory}"]) + "\n")


def _kafka_error(stderr: str) -> str:
    thrown = re.search(r"Exception in thread \"main\" java\.lang\.IllegalArgumentException: (.*)", stderr)
    if thrown:
        return thrown.group(1).strip()
    clash = re.search(r"kafka-storage: error:(.*)", stderr, re.DOTALL)
    if clash:
        return " ".join(clash.group(1).split())
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(("\t", "SLF4J"))]
    return lines[-1].strip() if lines else ""


def kafka_format(tmp_path: Path, name: str, properties: list[str], flags: list[str]) -> Run:
    directory = tmp_path / f"kafka-{name}"
    config = tmp_path / f"kafka-{name}.properties"
    _write_config(config, properties, directory)
    argv = ["java", "-Xmx256m", "-cp", SERVER_CLASSPATH_FILE.read_text().strip(), STORAGE_TOOL,
            "format", "-c", str(config), "-t", CLUSTER_ID, *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO_ROOT)
    stdout = [line.replace(str(directory), "DIR") for line in done.stdout.splitlines() if line.strip()]
    return Run(done.returncode, stdout, "" if done.returncode == 0 else _kafka_error(done.stderr), directory)


def our_format(tmp_path: Path, name: str, properties: list[str], flags: list[str], capsys) -> Run:
    directory = tmp_path / f"ours-{name}"
    config = tmp_path / f"ours-{name}.properties"
    _write_config(config, [*properties, "log.level=warning"], directory)
    status, out, err = run_main(capsys, ["storage", "format", "--config", str(config), "-t", CLUSTER_ID, *flags])
    error = ""
    if status != 0:
        clash = re.search(r"kraftwerk storage format: error:(.*)", err, re.DOTALL)
        error = " ".join(clash.group(1).split()) if clash else err.strip().removeprefix("Error: ")
    stdout = [line.replace(str(directory), "DIR") for line in out.splitlines() if line.strip()]
    return Run(status, stdout, error, directory)


def snapshot_view(directory: Path) -> list | None:
    """The bootstrap snapshot as comparable data: per batch, its offsets and records,
    timestamps zeroed and directory ids of standalone voters replaced."""
    path = bootstrap_snapshot_path(directory)
    if not path.exists():
        return None
    decoders = {ControlRecordType.SNAPSHOT_HEADER: SNAPSHOT_HEADER_RECORD, ControlRecordType.SNAPSHOT_FOOTER:
                SNAPSHOT_FOOTER_RECORD, ControlRecordType.KRAFT_VERSION: KRAFT_VERSION_RECORD,
                ControlRecordType.VOTERS: VOTERS_RECORD}
    view = []
    for batch in decode_batches(path.read_bytes()):
        records = []
        for record in batch.records:
            if batch.is_control:
                kind = control_record_type(record)
                value = dict(decoders[kind].decode(0, record.value))
                value.pop("last_contained_log_timestamp", None)
                value.pop("_unknown_tagged_fields", None)
                records.append((int(kind), repr(value)))
            else:
                decoded = decode_metadata_record(record.value)
                records.append((decoded.name, decoded.version, repr(dict(decoded.data))))
        view.append((batch.base_offset, batch.last_offset_delta, batch.leader_epoch, batch.is_control,
                     batch.producer_id, records))
    return view


def _scrub(view, directory: Path):
    """Replaces this directory's own random id (meta.properties) in the view."""
    meta = read_meta_properties(directory)
    if view is None or meta is None or meta.directory_id is None:
        return view
    own = repr(parse_uuid_string(meta.directory_id))
    return repr(view).replace(own, "OWN-DIRECTORY-ID")


@pytest.mark.parametrize("name", list(CASES))
def test_format_matches_kafka(tmp_path, capsys, name):
    properties, flags = CASES[name]
    theirs = kafka_format(tmp_path, name, properties, flags)
    ours = our_format(tmp_path, name, properties, flags, capsys)
    assert ours.status == theirs.status, (theirs, ours)
    assert ours.error == theirs.error
    assert ours.stdout == theirs.stdout
    their_meta, our_meta = read_meta_properties(theirs.directory), read_meta_properties(ours.directory)
    if their_meta is None:
        assert our_meta is None
        return
    assert (our_meta.cluster_id, our_meta.node_id) == (their_meta.cluster_id, their_meta.node_id)
    assert (our_meta.directory_id is None) == (their_meta.directory_id is None)
    if theirs.stdout[-1].startswith("Formatting dynamic metadata voter directory") and "-s" not in flags \
            and "--standalone" not in flags:
        # --initial-controllers naming this node: its directory id, on both sides.
        assert our_meta.directory_id == their_meta.directory_id
    assert _scrub(snapshot_view(ours.directory), ours.directory) == \
        _scrub(snapshot_view(theirs.directory), theirs.directory)


def test_kafkas_dump_log_segments_decodes_our_bootstrap_snapshots(tmp_path, capsys):
    files = []
    for name in ("static", "dynamic-s", "dynamic-I-others", "dynamic-N", "dynamic-s-scram"):
        properties, flags = CASES[name]
        ours = our_format(tmp_path, name, properties, flags, capsys)
        assert ours.status == 0, ours
        files.append(str(bootstrap_snapshot_path(ours.directory)))
    run = run_tool(DUMP_LOG_SEGMENTS, "--cluster-metadata-decoder", "--files", ",".join(files), timeout_s=TIMEOUT_S)
    assert run.returncode == 0, run.describe()
    assert "Exception" not in run.stdout + run.stderr and "isvalid: false" not in run.stdout, run.describe()
    assert run.stdout.count("Snapshot end offset: 0, epoch: 0") == len(files)
    assert run.stdout.count("KRaftVoters {") == 3
    assert run.stdout.count("KRaftVersion {") == 4
    assert run.stdout.count("SnapshotFooter {") == len(files)
    assert run.stdout.count('"type":"USER_SCRAM_CREDENTIAL_RECORD"') == 1
