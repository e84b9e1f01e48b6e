"""Apache Kafka 4.4.0's own quorum tools against a kraftwerk quorum and against a Kafka
quorum set up the same way: what an operator sees must be the same.

The tools are Kafka's main classes (MetadataQuorumCommand = kafka-metadata-quorum.sh,
FeatureCommand = kafka-features.sh); each command runs against both quorums at once, and
the outputs are compared with node directory ids, ports and the numbers that depend on
timing (high watermark, offsets, lags, timestamps, the finalized-features epoch) masked.
Node ids, the cluster id (both quorums are formatted with the same one), leader ids and
epochs, and every word are compared as they are.

- A dynamic quorum (KIP-853): controller 1 formatted `--standalone`, controller 2
  `--no-initial-controllers`. `describe --status` / `--replication` before and after
  `add-controller`; removing the last voter, adding an existing voter and removing a
  wrong directory id (the exceptions and their texts, the exit codes); a successful
  remove; `FeatureCommand describe` (kraft.version 1). Which AddRaftVoter version Kafka's
  Admin client sends to kraftwerk (its request log), and AddRaftVoter v1 with
  AckWhenCommitted=false as Kafka's auto-joining controllers send it.
- A static quorum of one controller (controller.quorum.voters, kraft.version 0):
  add/remove-controller refused at kraft.version 0, `upgrade --feature kraft.version=1`
  (dry run, then for real), the static voter gaining its directory id, and
  `downgrade --feature kraft.version=0` refused with the same text.

The one deliberate difference met here (docs/kip-differences.md, "Feature catalog"):
kraftwerk advertises metadata.version from 3.0-IV1, which Kafka's tool prints as
`SupportedMinVersion: UNKNOWN 1` where a Kafka controller shows 3.3-IV3.

Every process started here is stopped at the module's end. Without Java or Kafka's jars
the module skips (fails under CI=true, tests/conftest.py)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.quorum_helpers import call, describe_quorum, poll_until, read_events
from kafka_peer.kafka_nodes import server_missing
from server.storage.meta_properties import parse_uuid_string, random_uuid_string

from .kafka_tools import FEATURES, METADATA_QUORUM, ToolRun, run_tool, tools_missing
from .quorum_nodes import (KAFKA, KRAFTWERK, Quorum, dynamic_quorum, first_error_line, replication_rows,
                           side_by_side, static_quorum, wait_caught_up_observer)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
ADD_RAFT_VOTER = 80
CHANGE_TIMEOUT_S = 30.0
# Kafka 4.4.0 advertises metadata.version from 3.3-IV3; kraftwerk from 3.0-IV1 (level 1),
# which Kafka's FeatureCommand cannot name (docs/kip-differences.md, "Feature catalog").
METADATA_VERSION_MIN = {KAFKA: "3.3-IV3", KRAFTWERK: "UNKNOWN 1"}


@pytest.fixture(scope="module")
def jars():
    missing = tools_missing() or server_missing()
    if missing is not None:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def dynamic(jars, tmp_path_factory):
    """kind -> a running dynamic quorum (controller 2 an observer at first). kraftwerk's
    controller 1 logs every request (log.level=debug) so its request log says which
    versions Kafka's Admin client sent."""
    base = tmp_path_factory.mktemp("dynamic")
    debug = {1: {"log.level": "debug"}}
    with contextlib.ExitStack() as stack:
        yield side_by_side(stack, lambda kind: dynamic_quorum(
            kind, base / kind, CLUSTER_ID, extra=debug if kind == KRAFTWERK else None))


@pytest.fixture(scope="module")
def static(jars, tmp_path_factory):
    """kind -> a running static quorum of one controller (kraft.version 0)."""
    base = tmp_path_factory.mktemp("static")
    with contextlib.ExitStack() as stack:
        yield side_by_side(stack, lambda kind: static_quorum(kind, base / kind, CLUSTER_ID))


# --------------------------------------------------------------------------
# Running a tool on both quorums; what is compared
# --------------------------------------------------------------------------

def on_both(quorums: dict[str, Quorum], main_class: str, *args: str | Callable[[Quorum], str]) -> dict[str, ToolRun]:
    """`main_class` run against each quorum at once (its bootstrap controller first); an
    argument given as a function is computed per quorum (a file or id of that quorum)."""
    def run(quorum: Quorum) -> ToolRun:
        argv = [arg(quorum) if callable(arg) else arg for arg in args]
        return run_tool(main_class, *quorum.bootstrap, *argv)
    with ThreadPoolExecutor(max_workers=len(quorums)) as pool:
        futures = {kind: pool.submit(run, quorum) for kind, quorum in quorums.items()}
        return {kind: future.result() for kind, future in futures.items()}


def mask(text: str, quorum: Quorum) -> str:
    """The quorum's own directory ids and ports replaced by `<dirN>` / `<portN>` (N = node id)."""
    for node_id, directory_id in quorum.directory_ids.items():
        text = text.replace(directory_id, f"<dir{node_id}>")
    for node_id, port in quorum.ports().items():
        text = re.sub(rf"(?<=:){port}\b", f"<port{node_id}>", text)
    return text


def error_view(run: ToolRun, quorum: Quorum) -> str:
    """The first error line, masked, with the members of a `[...]` set sorted (Kafka
    prints a Java HashSet, whose order is not defined)."""
    line = mask(first_error_line(run), quorum)
    head, bracket, rest = line.partition("[")
    if not bracket:
        return line
    members, _, tail = rest.rpartition("]")
    return head + "[" + ", ".join(sorted(re.findall(r"ReplicaKey\([^)]*\)", members))) + "]" + tail


_TIMING = re.compile(r"^(HighWatermark|MaxFollowerLag|MaxFollowerLagTimeMs):(\s+)\S+$")


def status_view(line: str) -> str:
    """A describe --status line with its timing-dependent number masked."""
    return _TIMING.sub(r"\1:\2<n>", line)


def replication_view(run: ToolRun, quorum: Quorum) -> list[tuple[str, str, str]]:
    """describe --replication as (node id, directory id masked, status) rows; the offsets,
    lags and timestamps depend on timing."""
    return sorted((row[0], mask(row[1], quorum), row[6]) for row in replication_rows(run).values())


def feature_view(run: ToolRun, kind: str) -> list[str]:
    """FeatureCommand describe lines with Epoch masked (the offset of a feature change,
    not comparable between two logs), after checking the one documented difference."""
    lines = []
    for line in run.lines:
        if line.startswith("Feature: metadata.version"):
            assert f"SupportedMinVersion: {METADATA_VERSION_MIN[kind]} " in line, line
            line = line.replace(METADATA_VERSION_MIN[kind], "<min>".ljust(len(METADATA_VERSION_MIN[kind])))
            line = re.sub(r"SupportedMinVersion: <min>\s+", "SupportedMinVersion: <min> ", line)
        lines.append(re.sub(r"Epoch: \d+$", "Epoch: <n>", line))
    return lines


def view(run: ToolRun, quorum: Quorum, lines: Callable[[str], str] = lambda line: line):
    return run.returncode, [lines(mask(line, quorum)) for line in run.lines], error_view(run, quorum)


def assert_same_views(runs: dict[str, ToolRun], quorums: dict[str, Quorum],
                      lines: Callable[[str], str] = lambda line: line) -> tuple:
    """Kafka's and kraftwerk's runs print the same (exit code, stdout, first error line)
    once masked; returns that view."""
    views = {kind: view(run, quorums[kind], lines=lines) for kind, run in runs.items()}
    assert views[KRAFTWERK] == views[KAFKA], (
        f"=== against Kafka\n{runs[KAFKA].describe()}\n=== against kraftwerk\n{runs[KRAFTWERK].describe()}")
    return views[KAFKA]


def assert_same_replication(quorums: dict[str, Quorum], expected: list[tuple[str, str, str]]) -> None:
    runs = on_both(quorums, METADATA_QUORUM, "describe", "--replication")
    for kind, run in runs.items():
        assert run.returncode == 0, run.describe()
        assert replication_view(run, quorums[kind]) == expected, f"{kind}:\n{run.describe()}"


# --------------------------------------------------------------------------
# A dynamic quorum: describe, add-controller, the refusals, remove-controller
# --------------------------------------------------------------------------

def test_metadata_quorum_command_on_a_dynamic_quorum(dynamic):
    for quorum in dynamic.values():
        wait_caught_up_observer(quorum)

    before = assert_same_views(on_both(dynamic, METADATA_QUORUM, "describe", "--status"), dynamic, status_view)
    assert before[1] == [
        f"ClusterId:              {CLUSTER_ID}",
        "LeaderId:               1",
        "LeaderEpoch:            1",
        "HighWatermark:          <n>",
        "MaxFollowerLag:         <n>",
        "MaxFollowerLagTimeMs:   <n>",
        'CurrentVoters:          [{"id": 1, "directoryId": "<dir1>", "endpoints": ["CONTROLLER://127.0.0.1:<port1>"]}]',
        'CurrentObservers:       [{"id": 2, "directoryId": "<dir2>"}]',
    ]
    assert_same_replication(dynamic, [("1", "<dir1>", "Leader"), ("2", "<dir2>", "Observer")])

    # The only voter cannot be removed: VOTER_NOT_FOUND.
    last = assert_same_views(on_both(dynamic, METADATA_QUORUM, "remove-controller", "-i", "1", "-d",
                                     lambda q: q.directory_ids[1]), dynamic)
    assert last == (1, [], "org.apache.kafka.common.errors.VoterNotFoundException: Cannot remove voter "
                           "ReplicaKey(id=1, directoryId=<dir1>) from the set of voters "
                           "[ReplicaKey(id=1, directoryId=<dir1>)]")

    added = assert_same_views(on_both(dynamic, METADATA_QUORUM, "--command-config",
                                      lambda q: str(q.second.config.properties_path), "add-controller"), dynamic)
    assert added == (0, ["Added controller 2 with directory id <dir2> and endpoints: CONTROLLER://127.0.0.1:<port2>"],
                     "")
    # Kafka's Admin client negotiated AddRaftVoter v1 with kraftwerk (kraftwerk serves v0-1).
    requests = read_events(dynamic[KRAFTWERK].first.config.log_path, "net.request")
    assert {event["api_version"] for event in requests if event["api"] == "AddRaftVoter"} == {1}

    after = assert_same_views(on_both(dynamic, METADATA_QUORUM, "describe", "--status"), dynamic, status_view)
    assert after[1][6:] == [
        'CurrentVoters:          [{"id": 1, "directoryId": "<dir1>", "endpoints": ["CONTROLLER://127.0.0.1:<port1>"]}, '
        '{"id": 2, "directoryId": "<dir2>", "endpoints": ["CONTROLLER://127.0.0.1:<port2>"]}]',
        "CurrentObservers:       []",
    ]
    assert after[1][:3] == before[1][:3]
    assert_same_replication(dynamic, [("1", "<dir1>", "Leader"), ("2", "<dir2>", "Follower")])

    # An id that is already a voter: DUPLICATE_VOTER (with Kafka's trailing period).
    duplicate = assert_same_views(on_both(dynamic, METADATA_QUORUM, "--command-config",
                                          lambda q: str(q.second.config.properties_path), "add-controller"), dynamic)
    assert duplicate == (1, [], "org.apache.kafka.common.errors.DuplicateVoterException: The voter id for "
                                "ReplicaKey(id=2, directoryId=<dir2>) is already part of the set of voters "
                                "[ReplicaKey(id=1, directoryId=<dir1>), ReplicaKey(id=2, directoryId=<dir2>)].")

    # A voter id with another directory id: VOTER_NOT_FOUND.
    wrong = random_uuid_string()
    not_found = assert_same_views(on_both(dynamic, METADATA_QUORUM, "remove-controller", "-i", "2", "-d", wrong),
                                  dynamic)
    assert not_found == (1, [], f"org.apache.kafka.common.errors.VoterNotFoundException: Cannot remove voter "
                                f"ReplicaKey(id=2, directoryId={wrong}) from the set of voters "
                                f"[ReplicaKey(id=1, directoryId=<dir1>), ReplicaKey(id=2, directoryId=<dir2>)]")

    removed = assert_same_views(on_both(dynamic, METADATA_QUORUM, "remove-controller", "-i", "2", "-d",
                                        lambda q: q.second_directory_id), dynamic)
    assert removed == (0, ["Removed KRaft controller 2 with directory id <dir2>"], "")
    assert_same_replication(dynamic, [("1", "<dir1>", "Leader"), ("2", "<dir2>", "Observer")])


def test_feature_command_describe_on_a_dynamic_quorum(dynamic):
    runs = on_both(dynamic, FEATURES, "describe")
    views = {kind: (run.returncode, feature_view(run, kind), first_error_line(run)) for kind, run in runs.items()}
    assert views[KRAFTWERK] == views[KAFKA], f"{runs[KAFKA].describe()}\n{runs[KRAFTWERK].describe()}"
    kraft = [line for line in views[KAFKA][1] if line.startswith("Feature: kraft.version ")]
    assert len(kraft) == 1 and re.search(r"SupportedMinVersion: 0\s+SupportedMaxVersion: 1\s+"
                                         r"FinalizedVersionLevel: 1\s+Epoch", kraft[0]), kraft


def test_add_raft_voter_v1_without_waiting_for_the_commit(dynamic):
    """AddRaftVoter v1 with AckWhenCommitted=false, as a Kafka controller with
    controller.quorum.auto.join.enable sends it: answered NONE, and the voter joins."""
    for quorum in dynamic.values():
        if 2 in voter_ids(quorum):
            # The sequence test left it a voter (it ran alone or failed early): start over.
            removed = run_tool(METADATA_QUORUM, *quorum.bootstrap, "remove-controller", "-i", "2", "-d",
                               quorum.second_directory_id)
            assert removed.returncode == 0, removed.describe()
        poll_until(f"{quorum.kind}: controller 2 an observer", lambda q=quorum: 2 not in voter_ids(q) or None,
                   CHANGE_TIMEOUT_S)
        wait_caught_up_observer(quorum)
    answers = {}
    for kind, quorum in dynamic.items():
        second = quorum.second.config
        answer = call(quorum.first.address, ADD_RAFT_VOTER, 1, {
            "cluster_id": CLUSTER_ID,
            "timeout_ms": 30_000,
            "voter_id": 2,
            "voter_directory_id": parse_uuid_string(quorum.second_directory_id),
            "listeners": [{"name": "CONTROLLER", "host": second.host, "port": second.port}],
            "ack_when_committed": False,
        }, timeout_s=CHANGE_TIMEOUT_S)
        answers[kind] = (answer.error_code, answer.error_message)
    assert answers[KRAFTWERK] == answers[KAFKA] == (0, None)
    for quorum in dynamic.values():
        poll_until(f"{quorum.kind}: controller 2 a voter", lambda q=quorum: voter_ids(q) == {1, 2} or None,
                   CHANGE_TIMEOUT_S)
    assert_same_replication(dynamic, [("1", "<dir1>", "Leader"), ("2", "<dir2>", "Follower")])


def voter_ids(quorum: Quorum) -> set[int]:
    return {voter.replica_id for voter in describe_quorum(quorum.first.address).current_voters}


# --------------------------------------------------------------------------
# A static quorum of one controller: kraft.version 0 -> 1
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def joiner_config(tmp_path_factory):
    """A controller 2 that is never started: enough for add-controller to send its
    AddRaftVoter, which a kraft.version 0 quorum refuses before contacting it."""
    directory = tmp_path_factory.mktemp("joiner")
    (directory / "meta.properties").write_text(
        f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=2\ndirectory.id={random_uuid_string()}\n")
    path = directory / "controller-2.properties"
    path.write_text(f"process.roles=controller\nnode.id=2\ncontroller.listener.names=CONTROLLER\n"
                    f"listeners=CONTROLLER://127.0.0.1:1\nmetadata.log.dir={directory}\n")
    return path


def test_kraft_version_upgrade_of_a_static_quorum(static, joiner_config):
    def kraft_version_line(runs) -> str:
        views = {kind: (run.returncode, feature_view(run, kind), first_error_line(run)) for kind, run in runs.items()}
        assert views[KRAFTWERK] == views[KAFKA], f"{runs[KAFKA].describe()}\n{runs[KRAFTWERK].describe()}"
        return next(line for line in views[KAFKA][1] if line.startswith("Feature: kraft.version "))

    assert "FinalizedVersionLevel: 0 " in kraft_version_line(on_both(static, FEATURES, "describe"))
    status = assert_same_views(on_both(static, METADATA_QUORUM, "describe", "--status"), static, status_view)
    assert status[1][6] == 'CurrentVoters:          [{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:<port1>"]}]'

    # Voter changes need kraft.version 1.
    add = assert_same_views(on_both(static, METADATA_QUORUM, "--command-config", str(joiner_config),
                                    "add-controller"), static)
    assert add == (1, [], "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster doesn't support "
                          "adding voter because the kraft.version feature is 0")
    remove = assert_same_views(on_both(static, METADATA_QUORUM, "remove-controller", "-i", "1", "-d",
                                       lambda q: q.directory_ids[1]), static)
    assert remove == (1, [], "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster doesn't support "
                             "removing voter because the kraft.version feature is 0")

    dry_run = assert_same_views(on_both(static, FEATURES, "upgrade", "--feature", "kraft.version=1", "--dry-run"),
                                static)
    assert dry_run == (0, ["kraft.version can be upgraded to 1."], "")
    too_high = assert_same_views(on_both(static, FEATURES, "upgrade", "--feature", "kraft.version=2"), static)
    assert too_high == (1, ["Could not upgrade kraft.version to 2. The update failed for all features since the "
                            "following feature had an error: Invalid update version 2 for feature kraft.version. "
                            "Local controller 1 only supports versions 0-1"], "1 out of 1 operation(s) failed.")

    upgraded = assert_same_views(on_both(static, FEATURES, "upgrade", "--feature", "kraft.version=1"), static)
    assert upgraded == (0, ["kraft.version was upgraded to 1."], "")
    assert "FinalizedVersionLevel: 1 " in kraft_version_line(on_both(static, FEATURES, "describe"))
    # The static voter is now known with its directory id (the one in its meta.properties).
    status = assert_same_views(on_both(static, METADATA_QUORUM, "describe", "--status"), static, status_view)
    assert status[1][6] == ('CurrentVoters:          [{"id": 1, "directoryId": "<dir1>", '
                            '"endpoints": ["CONTROLLER://127.0.0.1:<port1>"]}]')

    refused = ("Could not downgrade kraft.version to 0. The update failed for all features since the following "
               "feature had an error: Invalid update version 0 for feature kraft.version. Can't downgrade the "
               "version of this feature.")
    for flags in ((), ("--unsafe",)):
        downgrade = assert_same_views(on_both(static, FEATURES, "downgrade", "--feature", "kraft.version=0", *flags),
                                      static)
        assert downgrade == (1, [refused], "1 out of 1 operation(s) failed."), flags
    again = assert_same_views(on_both(static, FEATURES, "upgrade", "--feature", "kraft.version=1"), static)
    assert again == (0, ["kraft.version was upgraded to 1."], "")
