"""`kraftwerk metadata-quorum` next to Apache Kafka 4.4.0's own MetadataQuorumCommand.

Two parts:
- Without a server: the add-controller checks of the new controller's server.properties,
  describe's option checks and remove-controller's directory-id parsing. Both tools run on
  the same files and arguments and must print the same stdout, the same first stderr line
  (Kafka adds a Java stack trace after some) and exit with the same status.
- Against a real Kafka 4.4.0 dynamic quorum (KIP-853): controller 1 formatted
  `--standalone`, controller 2 formatted `--no-initial-controllers`, both `kafka.Kafka`
  processes. kraftwerk's add-controller makes controller 2 a voter; describe shows two
  voters with directory ids and endpoints; Kafka's tool prints the same shapes (ids and
  numbers masked); adding an existing voter (DUPLICATE_VOTER) and removing a wrong directory
  id (VOTER_NOT_FOUND) print the same errors from both tools; removing and re-adding
  controller 2 print the same success lines.

Every process started here is stopped at the module's end."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
import sys

import pytest

from kafka_peer.kafka_nodes import server_missing
from server.storage.meta_properties import random_uuid_string, read_meta_properties

from .kafka_tools import METADATA_QUORUM, REPO_ROOT, ToolRun, run_tool, tools_missing
from .quorum_nodes import (KAFKA, dynamic_quorum, first_error_line, replication_rows, status_shape,
                           voter_set_error, wait_caught_up_observer)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
CLI_TIMEOUT_S = 30.0


def kraftwerk(*args: str, timeout_s: float = CLI_TIMEOUT_S) -> ToolRun:
    argv = [sys.executable, "-m", "cli.main", "metadata-quorum", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 10, cwd=REPO_ROOT)
    return ToolRun(tuple(argv), done.returncode, done.stdout, done.stderr)


def kafka(*args: str) -> ToolRun:
    return run_tool(METADATA_QUORUM, *args)


def both(*args: str) -> tuple[ToolRun, ToolRun]:
    """Kafka's tool and kraftwerk's on the same arguments, side by side (two processes)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        kafka_run = pool.submit(kafka, *args)
        kraftwerk_run = pool.submit(kraftwerk, *args)
        return kafka_run.result(), kraftwerk_run.result()


def assert_same(kafka_run: ToolRun, kraftwerk_run: ToolRun) -> None:
    assert (kraftwerk_run.returncode, kraftwerk_run.stdout, first_error_line(kraftwerk_run)) == (
        kafka_run.returncode, kafka_run.stdout, first_error_line(kafka_run)), (
        f"{kafka_run.describe()}\n=== kraftwerk\n{kraftwerk_run.describe()}")


@pytest.fixture(scope="module")
def tools():
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)


# --------------------------------------------------------------------------
# No server: the same checks, the same texts
# --------------------------------------------------------------------------

META_DIRECTORY_ID = "e4YbjUO3FD0CSnwJoxISDg"
GOOD = {"process.roles": "controller", "node.id": "2", "controller.listener.names": "CONTROLLER",
        "listeners": "CONTROLLER://127.0.0.1:19192"}

CONFIG_CASES = {
    "ok": {},
    "advertised overrides, empty host": {"advertised.listeners": "controller://:19193"},
    "two controller listeners, IPv6": {"controller.listener.names": "CONTROLLER,SSL",
                                       "listeners": "CONTROLLER://[::1]:1,SSL://h:2"},
    "no node.id": {"node.id": None},
    "node.id not a number": {"node.id": "2x"},
    "node.id negative": {"node.id": "-3"},
    "broker only": {"process.roles": "broker"},
    "no log dirs": {"metadata.log.dir": None},
    "log.dirs of commas": {"metadata.log.dir": None, "log.dirs": ",,"},
    "no meta.properties": {"metadata.log.dir": "{tmp}/nowhere"},
    "meta.properties without directory.id": {"metadata.log.dir": "{tmp}/no-directory-id"},
    "no controller.listener.names": {"controller.listener.names": None},
    "unknown controller listener": {"controller.listener.names": "CTRL"},
}


@pytest.fixture(scope="module")
def config_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quorum-configs")
    (tmp / "meta").mkdir()
    (tmp / "meta" / "meta.properties").write_text(
        f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=2\ndirectory.id={META_DIRECTORY_ID}\n")
    (tmp / "no-directory-id").mkdir()
    (tmp / "no-directory-id" / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=2\n")
    files = {}
    for index, (name, changes) in enumerate(CONFIG_CASES.items()):
        properties = {**GOOD, "metadata.log.dir": str(tmp / "meta"), **changes}
        lines = [f"{key}={value.format(tmp=tmp)}" for key, value in properties.items() if value is not None]
        path = tmp / f"case-{index}.properties"
        path.write_text("\n".join(lines) + "\n")
        files[name] = path
    return files


NO_SERVER = ["--bootstrap-controller", "127.0.0.1:1"]  # never contacted: every case fails or is a dry run


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_add_controller_config_checks_match_kafka(tools, config_files, case):
    args = [*NO_SERVER, "--command-config", str(config_files[case]), "add-controller", "--dry-run"]
    assert_same(*both(*args))


@pytest.mark.parametrize("args", [
    ["add-controller", "--dry-run"],
    ["--command-config", "/nonexistent/quorum.properties", "describe", "--status"],
    ["describe"],
    ["describe", "--status", "--replication"],
    ["describe", "--status", "--human-readable"],
    ["remove-controller", "-i", "-1", "-d", META_DIRECTORY_ID, "--dry-run"],
    ["remove-controller", "-i", "2", "-d", META_DIRECTORY_ID, "--dry-run"],
    ["remove-controller", "-i", "2", "-d", META_DIRECTORY_ID + "==", "--dry-run"],
    ["remove-controller", "-i", "2", "-d", "abc", "--dry-run"],
    ["remove-controller", "-i", "2", "-d", "a", "--dry-run"],
    ["remove-controller", "-i", "2", "-d", "a!bc", "--dry-run"],
    ["remove-controller", "-i", "2", "-d", META_DIRECTORY_ID + "xyzxyz", "--dry-run"],
], ids=lambda args: " ".join(args))
def test_option_checks_match_kafka(tools, args):
    assert_same(*both(*NO_SERVER, *args))


# --------------------------------------------------------------------------
# A real Kafka 4.4.0 dynamic quorum
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quorum(tools, tmp_path_factory):
    missing = server_missing()
    if missing is not None:
        pytest.skip(missing)
    with dynamic_quorum(KAFKA, tmp_path_factory.mktemp("dynamic-quorum"), CLUSTER_ID) as built:
        yield built


def test_dynamic_quorum_add_describe_and_errors_match_kafka(quorum, tmp_path):
    second = quorum.second.config
    wait_caught_up_observer(quorum)

    added = kraftwerk(*quorum.bootstrap, "--command-config", str(second.properties_path), "add-controller")
    assert added.returncode == 0, added.describe()
    assert added.lines == [f"Added controller 2 with directory id {quorum.second_directory_id} and endpoints: "
                           f"CONTROLLER://{second.address}"]

    status = kraftwerk(*quorum.bootstrap, "describe", "--status")
    assert status.returncode == 0, status.describe()
    voters = re.findall(r'\{"id": (\d), "directoryId": "([A-Za-z0-9_-]{22})", "endpoints": \["CONTROLLER://'
                        r'127\.0\.0\.1:(\d+)"\]\}', status.lines[6])
    first_meta = read_meta_properties(quorum.first.config.data_dir)
    assert sorted(voters) == [("1", first_meta.directory_id, str(quorum.first.config.port)),
                              ("2", quorum.second_directory_id, str(second.port))], status.describe()
    kafka_status = kafka(*quorum.bootstrap, "describe", "--status")
    assert kafka_status.returncode == 0, kafka_status.describe()
    assert status_shape(status) == status_shape(kafka_status), f"{status.describe()}\n{kafka_status.describe()}"

    replication = replication_rows(kraftwerk(*quorum.bootstrap, "describe", "--replication"))
    kafka_replication = replication_rows(kafka(*quorum.bootstrap, "describe", "--replication"))
    assert set(replication) == set(kafka_replication) == {(1, "Leader"), (2, "Follower")}
    for key in replication:
        assert replication[key][:2] == kafka_replication[key][:2]

    # An id that is already a voter: DUPLICATE_VOTER, printed as Kafka's Admin client reports it.
    duplicate = kraftwerk(*quorum.bootstrap, "--command-config", str(second.properties_path), "add-controller")
    kafka_duplicate = kafka(*quorum.bootstrap, "--command-config", str(second.properties_path), "add-controller")
    assert duplicate.returncode == kafka_duplicate.returncode == 1
    assert duplicate.stdout == kafka_duplicate.stdout == ""
    assert voter_set_error(duplicate) == voter_set_error(kafka_duplicate), (
        f"{duplicate.describe()}\n{kafka_duplicate.describe()}")
    assert first_error_line(duplicate).startswith("org.apache.kafka.common.errors.DuplicateVoterException: ")

    # A voter id with another directory id: VOTER_NOT_FOUND.
    wrong = random_uuid_string()
    not_found = kraftwerk(*quorum.bootstrap, "remove-controller", "-i", "2", "-d", wrong)
    kafka_not_found = kafka(*quorum.bootstrap, "remove-controller", "-i", "2", "-d", wrong)
    assert not_found.returncode == kafka_not_found.returncode == 1
    assert voter_set_error(not_found) == voter_set_error(kafka_not_found), (
        f"{not_found.describe()}\n{kafka_not_found.describe()}")
    assert first_error_line(not_found).startswith(
        f"org.apache.kafka.common.errors.VoterNotFoundException: Cannot remove voter ReplicaKey(id=2, "
        f"directoryId={wrong}) from the set of voters [")

    # kraftwerk removes controller 2, Kafka's tool adds it back: the same success lines.
    removed = kraftwerk(*quorum.bootstrap, "remove-controller", "-i", "2", "-d", quorum.second_directory_id)
    assert removed.returncode == 0, removed.describe()
    assert removed.lines == [f"Removed KRaft controller 2 with directory id {quorum.second_directory_id}"]
    wait_caught_up_observer(quorum)
    kafka_added = kafka(*quorum.bootstrap, "--command-config", str(second.properties_path), "add-controller")
    assert kafka_added.returncode == 0, kafka_added.describe()
    assert kafka_added.lines == added.lines
