"""KIP-853 with real processes: a standalone controller grows to three voters and shrinks
back to two while kafka-python writes, and a leader killed (-9) during an AddRaftVoter.

Every controller is a `kraftwerk controller --config` process formatted as an operator
does it (`storage format --standalone` for the first, `--no-initial-controllers` for
the others, all with controller.quorum.bootstrap.servers naming the first), and the
voters change through `kraftwerk metadata-quorum add-controller / remove-controller`.
Checked on every node: the voter set its own log holds (its latest raft.voters_changed
event) and DescribeQuorum; every write kafka-python saw acknowledged is on every node.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialUpsertion
from kafka.errors import KafkaError

from server.storage.meta_properties import parse_uuid_string

from .helpers import REPO, STOP_TIMEOUT_S, cli_env, new_cluster_id, run_cli
from .quorum_helpers import QuorumTestError, call, describe_quorum, free_port_run, poll_until, read_events

pytestmark = pytest.mark.e2e

CHANGE_TIMEOUT_S = 30.0
RETRY_S = 0.2  # asking other processes again: there is no event to wait on
# Refusals that say "not yet" rather than "no" (Kafka's texts).
TRANSIENT_REFUSALS = ("establish HWM", "NotLeaderOrFollowerException", "waiting for voters to commit the latest",
                      "There is no finalized MetadataVersion")  # a quorum that has not written its bootstrap yet
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
WRITER_MAX_WRITES = 20_000


class DynamicQuorum:
    """Controllers 1..count on consecutive loopback ports; controller 1 bootstraps the quorum
    (`--standalone`), or, with `static_voters`, controllers 1..static_voters are a static
    quorum (controller.quorum.voters, kraft.version 0) and the others may join it later."""

    def __init__(self, base: Path, count: int, static_voters: int = 0) -> None:
        self.base = base
        self.count = count
        self.cluster_id = new_cluster_id()
        self.first_port = free_port_run(count)
        self.processes: dict[int, subprocess.Popen] = {}
        # Controllers moved to another port after format (their listener changed).
        self.first_port_overrides: dict[int, int] = {}
        self._logs: dict[int, object] = {}
        voters = ",".join(f"{node_id}@{self.address(node_id)}" for node_id in range(1, static_voters + 1))
        for node_id in range(1, count + 1):
            static = node_id <= static_voters
            quorum = (f"controller.quorum.voters={voters}" if static
                      else f"controller.quorum.bootstrap.servers={self.address(1)}")
            self.config_path(node_id).write_text("\n".join([
                "process.roles=controller",
                f"node.id={node_id}",
                f"listeners=CONTROLLER://{self.address(node_id)}",
                "controller.listener.names=CONTROLLER",
                quorum,
                f"log.dirs={self.data_dir(node_id)}",
                f"metadata.log.dir={self.data_dir(node_id)}",
                "controller.quorum.election.timeout.ms=500",
                "controller.quorum.fetch.timeout.ms=1000",
            ]) + "\n")
            if static:
                flags = ()
            else:
                flags = ("--standalone",) if node_id == 1 and not static_voters else ("--no-initial-controllers",)
            formatted = run_cli("storage", "format", "--config", str(self.config_path(node_id)),
                                "-t", self.cluster_id, *flags)
            assert formatted.returncode == 0, formatted.stderr

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.first_port_overrides.get(node_id, self.first_port + node_id - 1)}"

    def config_path(self, node_id: int) -> Path:
        return self.base / f"controller-{node_id}.properties"

    def data_dir(self, node_id: int) -> Path:
        return self.base / f"data-{node_id}"

    def log_path(self, node_id: int) -> Path:
        return self.base / f"controller-{node_id}.log"

    def start(self, node_id: int) -> None:
        handle = open(self.log_path(node_id), "ab")
        self._logs[node_id] = handle
        self.processes[node_id] = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "controller", "--config", str(self.config_path(node_id))],
            stdout=subprocess.DEVNULL, stderr=handle, cwd=REPO, env=cli_env())
        poll_until(f"controller {node_id} to listen", lambda: listening(self.address(node_id)), 30)

    def kill(self, node_id: int) -> None:
        process = self.processes.pop(node_id)
        process.kill()
        process.wait(STOP_TIMEOUT_S)

    def stop_all(self) -> None:
        for node_id in list(self.processes):
            process = self.processes.pop(node_id)
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        for handle in self._logs.values():
            handle.close()

    def quorum_cli(self, *argv: str) -> subprocess.CompletedProcess:
        bootstrap = ",".join(self.address(node_id) for node_id in sorted(self.processes))
        return run_cli("metadata-quorum", "--bootstrap-controller", bootstrap, *argv, timeout_s=CHANGE_TIMEOUT_S)

    def add(self, node_id: int) -> subprocess.CompletedProcess:
        return self.settled(lambda: self.quorum_cli("--command-config", str(self.config_path(node_id)),
                                                    "add-controller"))

    def settled(self, change) -> subprocess.CompletedProcess:
        """`change()` again while the answer is one an operator retries: a leader just elected
        has not established its high watermark yet, or the leader moved meanwhile."""
        deadline = time.monotonic() + CHANGE_TIMEOUT_S
        while True:
            result = change()
            text = result.stdout + result.stderr
            if not any(transient in text for transient in TRANSIENT_REFUSALS) or time.monotonic() > deadline:
                return result
            time.sleep(RETRY_S)

    def directory_id(self, node_id: int) -> str:
        properties = (self.data_dir(node_id) / "meta.properties").read_text().splitlines()
        return next(line.split("=", 1)[1] for line in properties if line.startswith("directory.id="))

    def remove(self, node_id: int) -> subprocess.CompletedProcess:
        return self.settled(lambda: self.quorum_cli("remove-controller", "--controller-id", str(node_id),
                                                    "--controller-directory-id", self.directory_id(node_id)))

    def features(self, *argv: str) -> subprocess.CompletedProcess:
        return run_cli("features", *argv, "--bootstrap-controller", self.address(min(self.processes)),
                       timeout_s=CHANGE_TIMEOUT_S)

    def own_voters(self, node_id: int) -> set[int] | None:
        """The voter set node `node_id`'s log holds now (its latest raft.voters_changed)."""
        events = read_events(self.log_path(node_id), "raft.voters_changed")
        return set(events[-1]["voters"]) if events else None

    def wait_voters_everywhere(self, expected: set[int]) -> None:
        def probe():
            seen = {node_id: self.own_voters(node_id) for node_id in self.processes}
            if any(voters != expected for voters in seen.values()):
                return None
            partition = describe_quorum_or_none(self.address(min(self.processes)))
            if partition is None or {v.replica_id for v in partition.current_voters} != expected:
                return None
            return seen
        try:
            poll_until(f"voters {sorted(expected)} on every node", probe, CHANGE_TIMEOUT_S)
        except QuorumTestError:
            seen = {node_id: self.own_voters(node_id) for node_id in self.processes}
            raise QuorumTestError(f"voters per node: {seen}, expected {sorted(expected)}") from None


def listening(address: str) -> bool | None:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=1.0):
        return True


def describe_quorum_or_none(address: str):
    try:
        partition = describe_quorum(address)
    except (OSError, AssertionError):
        return None
    return partition if partition.error_code == 0 else None


class Writer(threading.Thread):
    """kafka-python writing one SCRAM credential (a metadata record; a quorum of controllers
    alone has no brokers to put topics on) at a time; records the users acknowledged."""

    def __init__(self, quorum: DynamicQuorum) -> None:
        super().__init__(daemon=True)
        self.quorum = quorum
        self.acknowledged: list[str] = []
        self.errors: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 120
        index = 0
        admin = None
        while not self.done.is_set() and index < WRITER_MAX_WRITES and time.monotonic() < deadline:
            name = f"user-{index}"
            try:
                if admin is None:
                    admin = KafkaAdminClient(bootstrap_servers=[self.quorum.address(n) for n in self.quorum.processes],
                                             request_timeout_ms=5_000, client_id="kraftwerk-dynamic-quorum")
                upsert = UserScramCredentialUpsertion(name, ScramMechanism.SCRAM_SHA_256, "secret", iterations=4096)
                errors = admin.alter_user_scram_credentials([upsert])
                if errors.get(name):
                    self.errors.append(f"{name}: {errors[name]}")
                else:
                    self.acknowledged.append(name)
                    index += 1
            except KafkaError as exc:
                self.errors.append(f"{name}: {exc!r}")
                if admin is not None:
                    admin.close()
                    admin = None
            except (OSError, ValueError, RuntimeError) as exc:
                # kafka-python's "Failed to find active controller id!" during a leader change.
                self.errors.append(f"{name}: {exc!r}")
                if admin is not None:
                    admin.close()
                    admin = None
        if admin is not None:
            admin.close()


def wait_for_more_writes(writer: Writer, after: str) -> None:
    written = len(writer.acknowledged)
    try:
        poll_until(f"writes after {after}", lambda: len(writer.acknowledged) > written + 3 or None, 30)
    except QuorumTestError as exc:
        raise QuorumTestError(f"{exc}; the writer's last errors: {writer.errors[-5:]}") from None


def scram_users_on(address: str) -> set[str]:
    """The users with a credential in that controller's own image (DescribeUserScramCredentials)."""
    body = call(address, DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    return {result.user for result in body.results if result.error_code == 0 and result.credential_infos}


@pytest.fixture
def quorum(tmp_path):
    built = DynamicQuorum(tmp_path, 4)
    try:
        yield built
    finally:
        built.stop_all()


def test_a_standalone_controller_grows_to_three_voters_and_shrinks_to_two_while_writes_go_on(quorum):
    for node_id in (1, 2, 3):
        quorum.start(node_id)
    quorum.wait_voters_everywhere({1})
    writer = Writer(quorum)
    writer.start()
    try:
        for node_id in (2, 3):
            added = quorum.add(node_id)
            assert added.returncode == 0, added.stdout + added.stderr
            assert added.stdout.startswith(f"Added controller {node_id} with directory id "
                                           f"{quorum.directory_id(node_id)} and endpoints: "
                                           f"CONTROLLER://{quorum.address(node_id)}")
        quorum.wait_voters_everywhere({1, 2, 3})
        partition = describe_quorum(quorum.address(2))
        directories = {v.replica_id: v.replica_directory_id for v in partition.current_voters}
        assert {node_id: str(directories[node_id]) for node_id in (2, 3)} == {
            node_id: str(parse_uuid_string(quorum.directory_id(node_id))) for node_id in (2, 3)}
        # The bootstrap controller (the leader so far) leaves; the other two carry on.
        removed = quorum.remove(1)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert removed.stdout.strip() == f"Removed KRaft controller 1 with directory id {quorum.directory_id(1)}"
        quorum.wait_voters_everywhere({2, 3})
        wait_for_more_writes(writer, "the shrink")
    finally:
        writer.done.set()
        writer.join(60)
    assert len(writer.acknowledged) >= 10, writer.errors[-5:]
    # Every acknowledged write is on every node, the removed one (now an observer) too.
    for node_id in (1, 2, 3):
        poll_until(f"acknowledged credentials on controller {node_id}",
                   lambda: set(writer.acknowledged) <= scram_users_on(quorum.address(node_id)) or None, 30)


def test_a_leader_killed_during_add_raft_voter_leaves_one_voter_set_everywhere_and_loses_no_write(quorum):
    for node_id in (1, 2, 3, 4):
        quorum.start(node_id)
    for node_id in (2, 3):
        assert quorum.add(node_id).returncode == 0
    quorum.wait_voters_everywhere({1, 2, 3})
    writer = Writer(quorum)
    writer.start()
    try:
        leader = describe_quorum(quorum.address(2)).leader_id
        bootstrap = ",".join(quorum.address(node_id) for node_id in (1, 2, 3))
        adding = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "metadata-quorum", "--bootstrap-controller", bootstrap,
             "--command-config", str(quorum.config_path(4)), "add-controller"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=cli_env(), text=True)
        quorum.kill(leader)
        out, err = adding.communicate(timeout=CHANGE_TIMEOUT_S + 30)
        quorum.start(leader)
        # Whatever the outcome of that request, the nodes agree; asking again settles it.
        if adding.returncode != 0:
            retried = quorum.add(4)
            assert retried.returncode == 0 or "DuplicateVoterException" in retried.stderr + retried.stdout, (
                retried.stdout + retried.stderr)
        quorum.wait_voters_everywhere({1, 2, 3, 4})
        wait_for_more_writes(writer, "the change")
    finally:
        writer.done.set()
        writer.join(60)
    assert writer.acknowledged, writer.errors[-5:]
    for node_id in (1, 2, 3, 4):
        poll_until(f"acknowledged credentials on controller {node_id}",
                   lambda: set(writer.acknowledged) <= scram_users_on(quorum.address(node_id)) or None, 30)


def test_refusals_change_nothing(quorum):
    for node_id in (1, 2):
        quorum.start(node_id)
    quorum.wait_voters_everywhere({1})
    # Node 3 is formatted but not running: the leader cannot reach it to ask its ApiVersions.
    down = quorum.add(3)
    assert down.returncode == 1
    assert ("org.apache.kafka.common.errors.TimeoutException: Aborted add voter operation for since API_VERSIONS "
            "returned an error BROKER_NOT_AVAILABLE") in down.stdout + down.stderr
    # The only voter cannot be removed.
    last = quorum.remove(1)
    assert last.returncode == 1
    assert (f"VoterNotFoundException: Cannot remove voter ReplicaKey(id=1, directoryId={quorum.directory_id(1)}) "
            f"from the set of voters [ReplicaKey(id=1, directoryId={quorum.directory_id(1)})]") in last.stdout + last.stderr
    # Adding a voter twice: DUPLICATE_VOTER.
    assert quorum.add(2).returncode == 0
    duplicate = quorum.add(2)
    assert duplicate.returncode == 1 and "DuplicateVoterException" in duplicate.stdout + duplicate.stderr
    quorum.wait_voters_everywhere({1, 2})
    events = [json.dumps(event) for event in read_events(quorum.log_path(1), "raft.voter_change_refused")]
    assert len(events) >= 3, events


def test_a_static_quorum_upgrades_kraft_version_online_then_adds_a_controller(tmp_path):
    quorum = DynamicQuorum(tmp_path, 4, static_voters=3)
    try:
        for node_id in (1, 2, 3, 4):
            quorum.start(node_id)
        writer = Writer(quorum)
        writer.start()
        try:
            # kraft.version 0: the voters are the static configuration's, changes are refused.
            refused = quorum.add(4)
            assert refused.returncode == 1
            assert ("UnsupportedVersionException: Cluster doesn't support adding voter because the kraft.version "
                    "feature is 0") in refused.stdout + refused.stderr
            # Every voter must have fetched (the leader learns its directory id so) before the
            # upgrade passes: "not all of the voters support it" until then.
            upgraded = poll_until("the kraft.version upgrade", lambda: (
                lambda result: result if result.returncode == 0 else None)(
                    quorum.features("upgrade", "--feature", "kraft.version=1")), CHANGE_TIMEOUT_S)
            assert upgraded.stdout.strip() == "kraft.version was upgraded to 1.", upgraded.stdout + upgraded.stderr
            quorum.wait_voters_everywhere({1, 2, 3})
            described = quorum.quorum_cli("describe", "--status")
            for node_id in (1, 2, 3):
                assert f'{{"id": {node_id}, "directoryId": "{quorum.directory_id(node_id)}"' in described.stdout
            downgrade = quorum.features("downgrade", "--feature", "kraft.version=0", "--unsafe")
            assert downgrade.returncode == 1
            assert "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this " \
                   "feature." in downgrade.stdout
            added = quorum.add(4)
            assert added.returncode == 0, added.stdout + added.stderr
            quorum.wait_voters_everywhere({1, 2, 3, 4})
            wait_for_more_writes(writer, "the upgrade and the new voter")
        finally:
            writer.done.set()
            writer.join(60)
        # The static nodes keep the log's voters across a restart (controller.quorum.voters
        # still names three).
        quorum.kill(1)
        quorum.start(1)
        quorum.wait_voters_everywhere({1, 2, 3, 4})
        for node_id in (1, 2, 3, 4):
            poll_until(f"acknowledged credentials on controller {node_id}",
                       lambda: set(writer.acknowledged) <= scram_users_on(quorum.address(node_id)) or None, 30)
    finally:
        quorum.stop_all()


def test_a_voter_whose_listener_moved_updates_its_entry_and_the_quorum_reaches_it(quorum):
    for node_id in (1, 2, 3):
        quorum.start(node_id)
    for node_id in (2, 3):
        assert quorum.add(node_id).returncode == 0
    quorum.wait_voters_everywhere({1, 2, 3})
    # Controller 3 comes back on another port (its properties file says so): it asks the leader
    # to rewrite its entry (UpdateRaftVoter), and the voters then reach it there.
    quorum.kill(3)
    moved = free_port_run(1)
    config = quorum.config_path(3)
    config.write_text(config.read_text().replace(quorum.address(3), f"127.0.0.1:{moved}"))
    quorum.first_port_overrides[3] = moved
    quorum.start(3)

    def entry_moved():
        partition = describe_quorum_or_none(quorum.address(1))
        return partition is not None and (read_events(quorum.log_path(3), "raft.voter_update_sent") or None)
    poll_until("controller 3 to send UpdateRaftVoter", entry_moved, CHANGE_TIMEOUT_S)
    described = poll_until("the moved endpoint in the voter set", lambda: (
        lambda out: out if f"CONTROLLER://127.0.0.1:{moved}" in out else None)(
            quorum.quorum_cli("describe", "--status").stdout), CHANGE_TIMEOUT_S)
    assert f'{{"id": 3, "directoryId": "{quorum.directory_id(3)}", "endpoints": ["CONTROLLER://127.0.0.1:{moved}"]}}' \
        in described
    # The quorum still commits with controller 3 counted: stop another voter, write, and see 3 has it.
    follower = next(node_id for node_id in (1, 2) if node_id != describe_quorum(quorum.address(3)).leader_id)
    quorum.kill(follower)
    writer = Writer(quorum)
    writer.start()
    try:
        wait_for_more_writes(writer, "the move")
    finally:
        writer.done.set()
        writer.join(60)
    poll_until("acknowledged credentials on controller 3",
               lambda: set(writer.acknowledged) <= scram_users_on(quorum.address(3)) or None, 30)


def test_an_observer_of_a_one_voter_quorum_restarts(quorum):
    for node_id in (1, 2):
        quorum.start(node_id)
    quorum.wait_voters_everywhere({1})
    # Its log names one voter, controller 1: it must not wait to lead before reporting started.
    quorum.kill(2)
    quorum.start(2)
    poll_until("controller 2 to report started", lambda: read_events(quorum.log_path(2), "server.started")[1:] or None,
               CHANGE_TIMEOUT_S)
    assert quorum.add(2).returncode == 0
    quorum.wait_voters_everywhere({1, 2})
