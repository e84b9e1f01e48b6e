"""`kraftwerk metadata-quorum` without a server: Kafka 4.4.0's texts for the add-controller
checks, the dry runs, the option checks, and the describe layouts built from a quorum
(tests/interop/test_metadata_quorum_vs_kafka.py runs the same paths next to Kafka's tool
and against a real Kafka quorum)."""

from __future__ import annotations

import uuid

import pytest

from cli.main import main
from cli.quorum_tools import (
    ApiError,
    Endpoint,
    Quorum,
    Replica,
    TerseError,
    node_text,
    parse_kafka_uuid,
    read_new_controller,
    replication_lines,
    status_lines,
    table_lines,
)
from server.storage.meta_properties import parse_uuid_string

DIRECTORY_ID = "e4YbjUO3FD0CSnwJoxISDg"
LEADER_DIRECTORY_ID = "yJwm9rYXSKquABS7Oqrjpw"
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NO_SERVER = ["metadata-quorum", "--bootstrap-controller", "127.0.0.1:1"]


@pytest.fixture
def controller_dir(tmp_path):
    directory = tmp_path / "meta"
    directory.mkdir()
    (directory / "meta.properties").write_text(
        f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=2\ndirectory.id={DIRECTORY_ID}\n")
    return directory


def properties(controller_dir, **changes):
    base = {"process.roles": "controller", "node.id": "2", "controller.listener.names": "CONTROLLER",
            "listeners": "CONTROLLER://127.0.0.1:19192", "metadata.log.dir": str(controller_dir)}
    base.update({key.replace("_", "."): value for key, value in changes.items()})
    return {key: value for key, value in base.items() if value is not None}


def run_cli(capsys, *args):
    status = main([*NO_SERVER, *args])
    out, err = capsys.readouterr()
    return status, out, err


# --------------------------------------------------------------------------
# add-controller: the new controller's own server.properties
# --------------------------------------------------------------------------

def test_reads_id_directory_id_and_advertised_endpoints(controller_dir):
    controller = read_new_controller(properties(controller_dir, advertised_listeners="controller://:19193"))
    assert controller.node_id == 2
    assert controller.directory_id == parse_uuid_string(DIRECTORY_ID)
    # advertised.listeners wins; an empty host is localhost; names are upper-cased.
    assert controller.endpoints == (Endpoint("CONTROLLER", "localhost", 19193),)


def test_log_dirs_first_entry_is_the_metadata_directory(controller_dir):
    controller = read_new_controller(properties(controller_dir, metadata_log_dir=None,
                                                log_dirs=f"{controller_dir},/elsewhere"))
    assert controller.node_id == 2


@pytest.mark.parametrize("changes, message", [
    ({"node.id": None}, "node.id not found in configuration file. Is this a valid controller configuration file?"),
    ({"node.id": "-1"}, "node.id was negative in configuration file. Is this a valid controller configuration file?"),
    ({"process.roles": "broker"}, "process.roles did not contain 'controller' in configuration file. Is this a "
                                  "valid controller configuration file?"),
    ({"metadata.log.dir": None}, "Neither metadata.log.dir nor log.dirs were found. Is this a valid controller "
                                 "configuration file?"),
    ({"metadata.log.dir": None, "log.dirs": ",,"}, "Neither metadata.log.dir nor log.dirs were found. Is this a "
                                                   "valid controller configuration file?"),
    ({"controller.listener.names": None}, "controller.listener.names was not found. Is this a valid controller "
                                          "configuration file?"),
    ({"controller.listener.names": "ctrl"}, "Cannot find information about controller listener name: CTRL"),
])
def test_config_checks_give_kafkas_texts(controller_dir, changes, message):
    props = properties(controller_dir)
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    with pytest.raises(TerseError) as raised:
        read_new_controller(props)
    assert str(raised.value) == message


def test_meta_properties_missing_or_without_directory_id(tmp_path, controller_dir):
    with pytest.raises(TerseError, match=f"^Unable to read meta.properties from {tmp_path}/none$"):
        read_new_controller(properties(controller_dir, metadata_log_dir=str(tmp_path / "none")))
    (controller_dir / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=2\n")
    with pytest.raises(TerseError, match=f"^No directory id found in {controller_dir}$"):
        read_new_controller(properties(controller_dir))


def test_add_controller_dry_run_and_errors_through_the_command(capsys, tmp_path, controller_dir):
    config = tmp_path / "controller.properties"
    config.write_text("process.roles=controller\nnode.id=2\ncontroller.listener.names=CONTROLLER\n"
                      "listeners=CONTROLLER://[::1]:19192\n"
                      f"metadata.log.dir={controller_dir}\n")
    assert run_cli(capsys, "--command-config", str(config), "add-controller", "--dry-run") == (
        0, f"DRY RUN of adding controller 2 with directory id {DIRECTORY_ID} and endpoints: "
           "CONTROLLER://[::1]:19192\n", "")
    # The options may also follow the subcommand (kraftwerk's other commands put them there).
    status = main(["metadata-quorum", "add-controller", "--dry-run", "--bootstrap-controller", "127.0.0.1:1",
                   "--command-config", str(config)])
    assert status == 0 and "DRY RUN of adding controller 2" in capsys.readouterr().out
    assert run_cli(capsys, "add-controller") == (
        1, "", "You must supply the configuration file of the controller you are adding when using "
               "add-controller.\n")
    assert run_cli(capsys, "--command-config", str(tmp_path / "missing"), "add-controller") == (
        1, "", f"Properties file {tmp_path / 'missing'} does not exist.\n")
    config.write_text(config.read_text().replace("node.id=2", "node.id=2x"))
    assert run_cli(capsys, "--command-config", str(config), "add-controller", "--dry-run") == (
        1, "", 'For input string: "2x"\n')


# --------------------------------------------------------------------------
# remove-controller and describe's option checks
# --------------------------------------------------------------------------

def test_remove_controller_dry_run_and_checks(capsys):
    assert run_cli(capsys, "remove-controller", "-i", "1", "-d", LEADER_DIRECTORY_ID, "--dry-run") == (
        0, f"DRY RUN of removing KRaft controller 1 with directory id {LEADER_DIRECTORY_ID}\n", "")
    assert run_cli(capsys, "remove-controller", "-i", "-1", "-d", LEADER_DIRECTORY_ID) == (
        1, "", "Invalid negative --controller-id: -1\n")
    assert run_cli(capsys, "remove-controller", "-i", "1", "-d", "abc") == (
        1, "", "Failed to parse --controller-directory-id: Input string `abc` decoded as 2 bytes, which is not "
               "equal to the expected 16 bytes of a base64-encoded UUID\n")


@pytest.mark.parametrize("text, message", [
    ("a", "Input byte[] should at least have 2 bytes for base64 bytes"),
    ("a!bc", "Illegal base64 character 21"),
    (DIRECTORY_ID + "xyzxyz", f"Input string with prefix `{DIRECTORY_ID}xy` is too long to be decoded as a "
                              "base64 UUID"),
    (DIRECTORY_ID + "=", "Input byte array has wrong 4-byte ending unit"),
])
def test_directory_id_parsing_refusals(text, message):
    with pytest.raises(ValueError) as raised:
        parse_kafka_uuid(text)
    assert str(raised.value) == message


def test_directory_id_parsing_accepts_kafkas_spellings():
    expected = parse_uuid_string(DIRECTORY_ID)
    assert parse_kafka_uuid(DIRECTORY_ID) == expected
    assert parse_kafka_uuid(DIRECTORY_ID + "==") == expected


@pytest.mark.parametrize("args, message", [
    (["describe"], "One of --status or --replication must be specified with describe sub-command"),
    (["describe", "--status", "--replication"],
     "Only one of --status or --replication should be specified with describe sub-command"),
    (["describe", "--status", "--human-readable"],
     "The option --human-readable is only supported along with --replication"),
])
def test_describe_option_checks(capsys, args, message):
    assert run_cli(capsys, *args) == (1, "", message + "\n")


# --------------------------------------------------------------------------
# describe: the layouts
# --------------------------------------------------------------------------

NOW_MS = 1_700_000_010_000
LEADER = Replica(1, parse_uuid_string(LEADER_DIRECTORY_ID), 25, NOW_MS, NOW_MS)
FOLLOWER = Replica(2, parse_uuid_string(DIRECTORY_ID), 20, NOW_MS - 500, NOW_MS - 1500)
STATIC_OBSERVER = Replica(101, uuid.UUID(int=0), 25, None, None)
QUORUM = Quorum(1, 3, 25, (LEADER, FOLLOWER), (STATIC_OBSERVER,),
                {1: (Endpoint("CONTROLLER", "127.0.0.1", 19191),), 2: (Endpoint("CONTROLLER", "::1", 19192),)})


def test_node_text_omits_zero_directory_id_and_empty_endpoints():
    assert node_text(STATIC_OBSERVER, ()) == '{"id": 101}'
    assert node_text(LEADER, QUORUM.endpoints[1]) == (
        f'{{"id": 1, "directoryId": "{LEADER_DIRECTORY_ID}", "endpoints": ["CONTROLLER://127.0.0.1:19191"]}}')
    two = (Endpoint("CONTROLLER", "h", 1), Endpoint("SSL", "h", 2))
    assert node_text(Replica(3, uuid.UUID(int=0), 0, None, None), two) == (
        '{"id": 3, "endpoints": ["CONTROLLER://h:1", "SSL://h:2"]}')


def test_status_layout():
    assert status_lines(CLUSTER_ID, QUORUM) == [
        f"ClusterId:              {CLUSTER_ID}",
        "LeaderId:               1",
        "LeaderEpoch:            3",
        "HighWatermark:          25",
        "MaxFollowerLag:         5",
        "MaxFollowerLagTimeMs:   1500",
        f'CurrentVoters:          [{{"id": 1, "directoryId": "{LEADER_DIRECTORY_ID}", "endpoints": '
        f'["CONTROLLER://127.0.0.1:19191"]}}, {{"id": 2, "directoryId": "{DIRECTORY_ID}", "endpoints": '
        '["CONTROLLER://[::1]:19192"]}]',
        'CurrentObservers:       [{"id": 101}]',
    ]


def test_status_lag_time_is_zero_when_the_leader_is_slowest_and_unknown_without_timestamps():
    only_leader = Quorum(1, 1, 5, (LEADER,), (), {})
    assert status_lines(CLUSTER_ID, only_leader)[4:6] == ["MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0"]
    unknown = Quorum(1, 1, 25, (LEADER, Replica(2, uuid.UUID(int=0), -1, None, None)), (), {})
    assert status_lines(CLUSTER_ID, unknown)[4:6] == ["MaxFollowerLag:         26",
                                                      "MaxFollowerLagTimeMs:   -1"]


def test_replication_table():
    lines = replication_lines(QUORUM, human_readable=False, now_ms=NOW_MS)
    assert lines == table_lines(
        ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
        [["1", LEADER_DIRECTORY_ID, "25", "0", str(NOW_MS), str(NOW_MS), "Leader"],
         ["2", DIRECTORY_ID, "20", "5", str(NOW_MS - 500), str(NOW_MS - 1500), "Follower"],
         ["101", "AAAAAAAAAAAAAAAAAAAAAA", "25", "0", "-1", "-1", "Observer"]])
    # Every cell is padded to its column and followed by a tab, the last one too.
    assert lines[0] == ("NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\t"
                        "LastCaughtUpTimestamp\tStatus  \t")
    human = replication_lines(QUORUM, human_readable=True, now_ms=NOW_MS)
    assert human[2].split("\t")[4:6] == ["500 ms ago        ", "1500 ms ago          "]


def test_replication_human_readable_refuses_a_future_timestamp():
    ahead = Quorum(1, 1, 25, (Replica(1, uuid.UUID(int=0), 25, NOW_MS + 5, NOW_MS),), (), {})
    with pytest.raises(Exception, match="Error while computing relative time, possible drift in system clock.\n"
                                        f"Current timestamp is {NOW_MS}, last fetch timestamp is {NOW_MS + 5}"):
        replication_lines(ahead, human_readable=True, now_ms=NOW_MS)


def test_error_codes_print_as_kafkas_admin_exceptions():
    assert str(ApiError.from_code(126, "The voter id for ReplicaKey(id=2, directoryId=x) is already part of the "
                                       "set of voters [].")) == (
        "org.apache.kafka.common.errors.DuplicateVoterException: The voter id for ReplicaKey(id=2, "
        "directoryId=x) is already part of the set of voters [].")
    assert str(ApiError.from_code(7, None)) == "org.apache.kafka.common.errors.TimeoutException: The request timed out."
    assert str(ApiError.from_code(6, "")) == "org.apache.kafka.common.errors.NotLeaderOrFollowerException: "
