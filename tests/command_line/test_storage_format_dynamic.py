"""`kraftwerk storage format` with KIP-853's quorum flags, row by row of Kafka 4.4.0's
behaviour (notes/kip853-facts.md §4): the refusals and their texts, the words printed,
meta.properties' directory.id, and the bootstrap snapshot decoded record by record
(server/storage/bootstrap.py). Also: the parser of `--initial-controllers`, the reader's
fallback to an older kraftwerk's bootstrap.checkpoint, and that a node and the offline
tools take the bootstrap snapshot for what it is (no state)."""

from __future__ import annotations

import io
import uuid

import pytest

from cli import metadata_tools as mt
from cli.storage_format import (
    CONTROLLER_NEEDS_A_FLAG,
    STANDALONE_ON_BROKER,
    VOTERS_AND_DYNAMIC_FLAG,
    bootstrap_metadata_line,
)
from protocol.raft_records import KRAFT_VERSION_RECORD, SNAPSHOT_HEADER_RECORD, VOTERS_RECORD
from protocol.record_batch import ControlRecordType, control_record_type, decode_batches
from server.controller.commands import bootstrap_records
from server.controller.snapshot import recover_snapshot
from server.voters import Endpoint, Voter, VoterSet
from server.storage.bootstrap import (
    BOOTSTRAP_SNAPSHOT_NAME,
    METADATA_LOG_DIR_NAME,
    BootstrapError,
    bootstrap_snapshot_path,
    encode_bootstrap_snapshot,
    read_bootstrap,
    write_bootstrap_snapshot,
    write_legacy_bootstrap_checkpoint,
)
from server.storage.dynamic_voters import DynamicVoterError, parse_dynamic_voter, parse_dynamic_voters
from server.storage.log import LogConfig, MetadataLog
from server.storage.meta_properties import parse_uuid_string, random_uuid_string, read_meta_properties
from .in_process import run_main

CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAA"
DIR_1 = "pkCSrLOITb6BrkbqORztFQ"
DIR_2 = "qkCSrLOITb6BrkbqORztFQ"
DIR_3 = "rkCSrLOITb6BrkbqORztFQ"
CONTROLLER = ["process.roles=controller", "node.id=1", "controller.listener.names=CONTROLLER",
              "listeners=CONTROLLER://127.0.0.1:19091"]
DYNAMIC = [*CONTROLLER, "controller.quorum.bootstrap.servers=127.0.0.1:19091"]
STATIC = [*CONTROLLER, "controller.quorum.voters=1@127.0.0.1:19091"]
BROKER = ["process.roles=broker", "node.id=5", "controller.listener.names=CONTROLLER",
          "listeners=PLAINTEXT://127.0.0.1:19095", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
          "controller.quorum.bootstrap.servers=127.0.0.1:19091"]
KV0_REFUSED = (
    "Cannot set kraft.version to 0 if controller.quorum.voters is empty and one of the flags --standalone, "
    "--initial-controllers, or --no-initial-controllers is used. For dynamic controllers support, try removing "
    "the --feature flag for kraft.version.")
KV1_REFUSED = (
    "Cannot set kraft.version to 1 unless controller.quorum.voters is empty and one of the flags --standalone, "
    "--initial-controllers, or --no-initial-controllers is used. For dynamic controllers support, try using one of "
    "--standalone, --initial-controllers, or --no-initial-controllers and removing controller.quorum.voters.")


class Formatted:
    def __init__(self, status, out, err, directory):
        self.status, self.out, self.err, self.directory = status, out, err, directory

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    @property
    def meta(self):
        return read_meta_properties(self.directory)

    @property
    def checkpoint(self):
        return bootstrap_snapshot_path(self.directory)

    def control_batch(self) -> list[tuple[int, object]]:
        """The first batch of the bootstrap snapshot: (control type, decoded value)."""
        first = decode_batches(self.checkpoint.read_bytes())[0]
        assert first.is_control and first.base_offset == 0 and first.leader_epoch == 0
        decoders = {ControlRecordType.SNAPSHOT_HEADER: SNAPSHOT_HEADER_RECORD,
                    ControlRecordType.KRAFT_VERSION: KRAFT_VERSION_RECORD, ControlRecordType.VOTERS: VOTERS_RECORD}
        out = []
        for record in first.records:
            kind = control_record_type(record)
            out.append((kind, decoders[kind].decode(0, record.value)))
        return out


@pytest.fixture
def fmt(tmp_path, capsys):
    counter = iter(range(1000))

    def format_with(properties: list[str], *argv: str) -> Formatted:
        index = next(counter)
        directory = tmp_path / f"meta-{index}"
        config = tmp_path / f"server-{index}.properties"
        config.write_text("\n".join([*properties, f"log.dirs={directory}", "log.level=warning"]) + "\n")
        status, out, err = run_main(capsys, ["storage", "format", "--config", str(config), "--cluster-id", CLUSTER_ID,
                                             *argv])
        result = Formatted(status, out, err, directory)
        if status != 0:
            # A refusal formats nothing.
            assert not directory.exists() or read_meta_properties(directory) is None
            assert not result.checkpoint.exists()
            assert "Traceback" not in err
        return result

    return format_with


# --------------------------------------------------------------------------
# The table of facts §4
# --------------------------------------------------------------------------

@pytest.mark.parametrize(("first", "second", "clash"), [
    (["--standalone"], ["--no-initial-controllers"],
     "argument --no-initial-controllers/-N: not allowed with argument --standalone/-s"),
    (["-s"], ["-I", f"1@h:1:{DIR_1}"], "argument --initial-controllers/-I: not allowed with argument --standalone/-s"),
    (["-N"], ["--initial-controllers", f"1@h:1:{DIR_1}"],
     "argument --initial-controllers/-I: not allowed with argument --no-initial-controllers/-N"),
])
def test_two_quorum_flags_are_a_usage_error_exit_1(fmt, first, second, clash):
    result = fmt(DYNAMIC, *first, *second)
    assert result.status == 1
    assert result.err.startswith("usage: ")
    assert result.err.rstrip().endswith(f"kraftwerk storage format: error: {clash}")


@pytest.mark.parametrize("flag", [["--standalone"], ["--initial-controllers", f"1@localhost:19091:{DIR_1}"]])
def test_voters_with_standalone_or_initial_controllers_is_refused(fmt, flag):
    result = fmt(STATIC, *flag)
    assert (result.status, result.err) == (1, f"Error: {VOTERS_AND_DYNAMIC_FLAG}\n")


def test_voters_are_refused_before_a_bad_initial_controllers_is_parsed(fmt):
    result = fmt(STATIC, "--initial-controllers", "garbage")
    assert result.err == f"Error: {VOTERS_AND_DYNAMIC_FLAG}\n"


@pytest.mark.parametrize("flags", [[], ["--no-initial-controllers"]])
def test_voters_format_a_static_quorum(fmt, flags):
    result = fmt(STATIC, *flags)
    assert result.status == 0, result.err
    assert result.lines[0].startswith("Bootstrap metadata: BootstrapMetadata(records=[")
    assert result.lines[1] == f"Formatting metadata directory {result.directory} with metadata.version 4.4-IV2."
    # kraft.version 0: the header alone, the voters are controller.quorum.voters.
    assert [kind for kind, _ in result.control_batch()] == [ControlRecordType.SNAPSHOT_HEADER]
    found = read_bootstrap(result.directory)
    assert (found.kraft_version, found.voters) == (0, None)
    assert parse_uuid_string(result.meta.directory_id)


def test_a_controller_with_bootstrap_servers_needs_a_flag(fmt):
    result = fmt(DYNAMIC)
    assert (result.status, result.err) == (1, f"Error: {CONTROLLER_NEEDS_A_FLAG}\n")


def test_standalone_makes_this_node_the_only_voter(fmt):
    result = fmt(DYNAMIC, "--standalone")
    assert result.status == 0, result.err
    assert result.lines[1] == (f"Formatting dynamic metadata voter directory {result.directory} with "
                               "metadata.version 4.4-IV2.")
    batch = result.control_batch()
    assert [kind for kind, _ in batch] == [ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.KRAFT_VERSION,
                                           ControlRecordType.VOTERS]
    assert batch[1][1].kraft_version == 1
    (voter,) = batch[2][1].voters
    directory_id = parse_uuid_string(result.meta.directory_id)
    assert voter.voter_id == 1 and voter.voter_directory_id == directory_id
    assert [(e.name, e.host, e.port) for e in voter.endpoints] == [("CONTROLLER", "127.0.0.1", 19091)]
    feature = voter.kraft_version_feature
    assert (feature.min_supported_version, feature.max_supported_version) == (0, 1)
    found = read_bootstrap(result.directory)
    assert found.kraft_version == 1
    assert found.voters == VoterSet((Voter(1, directory_id, (Endpoint("CONTROLLER", "127.0.0.1", 19091),), 0, 1),))
    # The bootstrap metadata records follow the control batch; kraft.version is not among them.
    assert [r.data["name"] for r in found.records] == [
        "metadata.version", "eligible.leader.replicas.version", "group.version", "share.version",
        "streams.version", "transaction.version"]


def test_standalone_directory_ids_are_fresh(fmt):
    first, second = fmt(DYNAMIC, "-s"), fmt(DYNAMIC, "-s")
    assert first.meta.directory_id != second.meta.directory_id


def test_standalone_without_a_listener_host_advertises_localhost(fmt):
    result = fmt([*DYNAMIC[:3], "listeners=CONTROLLER://:19091", DYNAMIC[-1]], "--standalone")
    assert result.status == 0, result.err
    (voter,) = read_bootstrap(result.directory).voters
    assert voter.endpoints == (Endpoint("CONTROLLER", "localhost", 19091),)


def test_standalone_takes_the_advertised_controller_listener(fmt):
    result = fmt([*DYNAMIC, "advertised.listeners=CONTROLLER://controller-1.example:29091"], "-s")
    (voter,) = read_bootstrap(result.directory).voters
    assert voter.endpoints == (Endpoint("CONTROLLER", "controller-1.example", 29091),)


def test_initial_controllers_naming_this_node(fmt):
    result = fmt(DYNAMIC, "--initial-controllers", f"2@localhost:19092:{DIR_2},1@127.0.0.1:19091:{DIR_1}")
    assert result.status == 0, result.err
    assert result.lines[1] == (f"Formatting dynamic metadata voter directory {result.directory} with "
                               "metadata.version 4.4-IV2.")
    assert result.meta.directory_id == DIR_1
    found = read_bootstrap(result.directory)
    assert found.kraft_version == 1
    # By node id, each on the controller listener.
    assert found.voters == VoterSet((
        Voter(1, parse_uuid_string(DIR_1), (Endpoint("CONTROLLER", "127.0.0.1", 19091),), 0, 1),
        Voter(2, parse_uuid_string(DIR_2), (Endpoint("CONTROLLER", "localhost", 19092),), 0, 1)))


def test_initial_controllers_without_this_node(fmt):
    result = fmt(DYNAMIC, "-I", f"2@localhost:19092:{DIR_2},3@[::1]:19093:{DIR_3}")
    assert result.status == 0, result.err
    assert result.lines[1] == f"Formatting dynamic metadata directory {result.directory} with metadata.version 4.4-IV2."
    assert result.meta.directory_id not in (DIR_2, DIR_3)
    voters = read_bootstrap(result.directory).voters
    assert [(v.node_id, v.endpoints[0].host) for v in voters] == [(2, "localhost"), (3, "0:0:0:0:0:0:0:1")]


def test_no_initial_controllers_on_a_dynamic_quorum(fmt):
    result = fmt(DYNAMIC, "--no-initial-controllers")
    assert result.status == 0, result.err
    assert result.lines[1] == f"Formatting metadata directory {result.directory} with metadata.version 4.4-IV2."
    batch = result.control_batch()
    assert [kind for kind, _ in batch] == [ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.KRAFT_VERSION]
    assert batch[1][1].kraft_version == 1
    found = read_bootstrap(result.directory)
    assert (found.kraft_version, found.voters) == (1, None)


def test_standalone_on_a_broker_is_refused(fmt):
    result = fmt(BROKER, "--standalone")
    assert (result.status, result.err) == (1, f"Error: {STANDALONE_ON_BROKER}\n")


@pytest.mark.parametrize(("flags", "words"), [
    ([], "metadata directory"),
    (["--initial-controllers", f"1@localhost:19091:{DIR_1}"], "dynamic metadata directory"),
    (["--no-initial-controllers"], "metadata directory"),
])
def test_a_broker_gets_meta_properties_only(fmt, flags, words):
    result = fmt(BROKER, *flags)
    assert result.status == 0, result.err
    assert result.lines[1] == f"Formatting {words} {result.directory} with metadata.version 4.4-IV2."
    assert result.meta.node_id == 5
    assert not (result.directory / METADATA_LOG_DIR_NAME).exists()
    assert read_bootstrap(result.directory) is None


@pytest.mark.parametrize("flag", [["-s"], ["-N"], ["-I", f"1@localhost:19091:{DIR_1}"]])
def test_kraft_version_0_is_refused_on_a_dynamic_quorum(fmt, flag):
    result = fmt(DYNAMIC, *flag, "--feature", "kraft.version=0")
    assert (result.status, result.err) == (1, f"Error: {KV0_REFUSED}\n")


def test_kraft_version_1_is_refused_with_static_voters(fmt):
    result = fmt(STATIC, "--feature", "kraft.version=1")
    assert (result.status, result.err) == (1, f"Error: {KV1_REFUSED}\n")


def test_kraft_version_1_named_on_a_dynamic_quorum(fmt):
    result = fmt(DYNAMIC, "-s", "--feature", "kraft.version=1")
    assert result.status == 0, result.err
    assert read_bootstrap(result.directory).kraft_version == 1


@pytest.mark.parametrize(("value", "message"), [
    ("1localhost:19091", "No @ found in dynamic voter string."),
    ("@localhost:19091:" + DIR_1, "Invalid @ at beginning of dynamic voter string."),
    ("one@localhost:19091:" + DIR_1, "Failed to parse node id in dynamic voter string."),
    ("-3@localhost:19091:" + DIR_1, "Invalid negative node id -3 in dynamic voter string."),
    ("1@", "No hostname found after node id."),
    ("1@[::1:19091:" + DIR_1, "Hostname began with left bracket, but no right bracket was found."),
    ("1@localhost", "No colon following hostname could be found."),
    ("1@[::1]19091:" + DIR_1, "Port section must start with a colon."),
    ("1@localhost:9093", "No colon following port could be found."),
    ("1@localhost:port:" + DIR_1, "Failed to parse port in dynamic voter string."),
    ("1@localhost:70000:" + DIR_1, "Invalid port 70000 in dynamic voter string."),
    ("1@localhost:19091:not-a-uuid", "Failed to parse directory ID in dynamic voter string."),
    (",", "No voters given."),
    (f"1@a:1:{DIR_1},1@b:2:{DIR_2}", "Node id 1 was specified more than once."),
])
def test_bad_initial_controllers_are_refused_with_kafkas_words(fmt, value, message):
    # `=`: a value starting with '-' is otherwise an option to argparse.
    result = fmt(DYNAMIC, f"--initial-controllers={value}")
    assert (result.status, result.err) == (1, f"Error: {message}\n")


# --------------------------------------------------------------------------
# kraftwerk's own case: a controller with neither voters nor bootstrap servers
# --------------------------------------------------------------------------

def test_a_controller_alone_formats_static_without_a_flag(fmt):
    result = fmt(CONTROLLER)
    assert result.status == 0, result.err
    assert result.lines[1] == f"Formatting metadata directory {result.directory} with metadata.version 4.4-IV2."
    assert read_bootstrap(result.directory).kraft_version == 0


def test_a_controller_alone_formats_dynamic_with_a_flag(fmt):
    result = fmt(CONTROLLER, "--standalone")
    assert result.status == 0, result.err
    found = read_bootstrap(result.directory)
    assert found.kraft_version == 1 and [v.node_id for v in found.voters] == [1]


# --------------------------------------------------------------------------
# The pieces
# --------------------------------------------------------------------------

def test_the_bootstrap_metadata_line_is_kafkas():
    records = bootstrap_records(21)
    assert bootstrap_metadata_line(records, 21) == (
        "Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(FeatureLevelRecord("
        "name='metadata.version', featureLevel=21) at version 0)], metadataVersionLevel=21, source=format command)")


def test_scram_credentials_print_as_java_does(fmt):
    salted = "gP8A" + "A" * 39 + "="  # 32 bytes: 0x80 0xff 0x00 ...
    result = fmt(DYNAMIC, "-s", "-r", "3.9", "-S",
                 f'SCRAM-SHA-256=[name=alice,iterations=8192,salt="N3E=",saltedpassword="{salted}"]')
    assert result.status == 0, result.err
    # Kafka's generated toString: strings quoted, bytes as Java's signed bytes.
    assert result.lines[0].startswith(
        "Bootstrap metadata: BootstrapMetadata(records=[ApiMessageAndVersion(FeatureLevelRecord(name="
        "'metadata.version', featureLevel=21) at version 0), ApiMessageAndVersion(UserScramCredentialRecord("
        "name='alice', mechanism=1, salt=[55, 113], storedKey=[")
    assert result.lines[0].endswith("iterations=8192) at version 0)], metadataVersionLevel=21, source=format command)")
    assert [r.name for r in read_bootstrap(result.directory).records] == ["FeatureLevelRecord",
                                                                         "UserScramCredentialRecord"]


def test_dynamic_voter_parsing_follows_java():
    voter = parse_dynamic_voter(f"  +7@[::ffff:10.0.0.1]:0:{DIR_1}==  ")
    assert (voter.node_id, voter.host, voter.port) == (7, "10.0.0.1", 0)
    assert voter.directory_id == parse_uuid_string(DIR_1)
    assert parse_dynamic_voter(f"1@[fe80::1:2]:1:{DIR_1}").host == "fe80:0:0:0:0:0:1:2"
    assert parse_dynamic_voter(f"1@my-host:1:{DIR_1}").host == "my-host"
    for bad_id in ("1 ", "1_0", "2147483648", ""):
        with pytest.raises(DynamicVoterError, match="^(Failed to parse node id|Invalid @ at beginning)"):
            parse_dynamic_voter(f"{bad_id}@h:1:{DIR_1}")
    for bad_dir in ("", DIR_1[:-1], DIR_1 + "A", DIR_1.replace("p", "+"), DIR_1 + "="):
        with pytest.raises(DynamicVoterError, match="^Failed to parse directory ID"):
            parse_dynamic_voter(f"1@h:1:{bad_dir}")
    assert [v.node_id for v in parse_dynamic_voters(f",3@a:1:{DIR_3},,1@b:2:{DIR_1},")] == [1, 3]


def test_the_file_layout(tmp_path):
    directory_id = uuid.uuid4()
    voters = VoterSet((Voter(1, directory_id, (Endpoint("CONTROLLER", "localhost", 9093),), 0, 1),))
    path = write_bootstrap_snapshot(tmp_path, bootstrap_records(33), kraft_version=1, voters=voters,
                                    timestamp_ms=1234)
    assert path == tmp_path / METADATA_LOG_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME
    header, data, footer = decode_batches(path.read_bytes())
    assert [control_record_type(r) for r in header.records] == [3, 5, 6]
    assert header.base_offset == 0 and data.base_offset == 3 and footer.base_offset == 3 + len(data.records)
    assert not data.is_control and footer.is_control and control_record_type(footer.records[0]) == 4
    for batch in (header, data, footer):
        assert (batch.leader_epoch, batch.base_timestamp_ms, batch.producer_id) == (0, 1234, -1)
    assert SNAPSHOT_HEADER_RECORD.decode(0, header.records[0].value).last_contained_log_timestamp == 1234
    with pytest.raises(ValueError, match="kraft.version 1"):
        encode_bootstrap_snapshot(bootstrap_records(33), kraft_version=0, voters=voters)


def test_an_older_bootstrap_checkpoint_is_still_read(tmp_path):
    records = bootstrap_records(19)
    write_legacy_bootstrap_checkpoint(tmp_path, records)
    found = read_bootstrap(tmp_path)
    assert (list(found.records), found.kraft_version, found.voters) == (records, 0, None)
    # The bootstrap snapshot wins over it.
    write_bootstrap_snapshot(tmp_path, bootstrap_records(21))
    assert read_bootstrap(tmp_path).records[0].data["feature_level"] == 21
    assert read_bootstrap(tmp_path / "nothing") is None


def test_a_damaged_bootstrap_snapshot_is_named(tmp_path):
    path = write_bootstrap_snapshot(tmp_path, bootstrap_records(21))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BootstrapError, match=f"^{path} is corrupt"):
        read_bootstrap(tmp_path)


def test_recovery_takes_the_bootstrap_snapshot_for_no_state(tmp_path):
    voters = VoterSet((Voter(1, uuid.uuid4(), (Endpoint("CONTROLLER", "localhost", 9093),), 0, 1),))
    write_bootstrap_snapshot(tmp_path, bootstrap_records(33), kraft_version=1, voters=voters)
    log = MetadataLog.open(tmp_path / METADATA_LOG_DIR_NAME, LogConfig())
    try:
        state, from_offset, chosen = recover_snapshot(tmp_path / METADATA_LOG_DIR_NAME, log, CLUSTER_ID)
    finally:
        log.close()
    assert (from_offset, chosen, state.last_applied_offset, state.metadata_version) == (0, None, -1, None)


def test_the_offline_tools_read_it(tmp_path):
    voters = VoterSet((Voter(1, uuid.uuid4(), (Endpoint("CONTROLLER", "localhost", 9093),), 0, 1),))
    path = write_bootstrap_snapshot(tmp_path, bootstrap_records(33), kraft_version=1, voters=voters)
    out = io.StringIO()
    assert mt.dump_file(str(path), out, payloads=True) == []
    text = out.getvalue()
    assert "Snapshot end offset: 0, epoch: 0" in text
    assert "KRaftVoters" in text or "Voters" in text
    image = mt.load_snapshot_image(str(path))
    assert image.state.metadata_version == 33


def test_random_uuid_strings_are_directory_ids():
    # meta.properties takes the id the format chose; it must read back.
    assert parse_uuid_string(random_uuid_string())
