"""docker-compose.yml with deploy/docker-compose.host.yml on a real Docker engine.

The cluster a user gets from `scripts/compose-up` (which the fixture runs): 3 controllers
and 3 broker agents in containers built by scripts/compose-images, host networking on
127.0.0.1. Checked, in file order on one cluster (each test leaves it healthy for the next):
- every service becomes healthy; `kraftwerk features describe` answers through every
  broker and every controller; kafka-python, bootstrapped at one broker, is told the
  three brokers at addresses it can reach and creates a topic;
- `docker kill` of the controller leader in the middle of a stream of topic creations:
  a creation is acknowledged under a new leader, and every acknowledged topic exists;
  the killed controller, started again, is healthy and follows;
- a metadata.version upgrade through the CLI reaches every broker's ApiVersions;
- a controller and a broker restarted on a wiped volume never answer from an empty log
  as if it were current: the controller never reports its fresh bootstrap's
  metadata.version, the broker's first Metadata answer already names every topic;
- a node stopped in its first moments ends at once (Docker's init passes SIGTERM on),
  `stop` ends every node cleanly (exit code 0 after SIGTERM) and `down`/`up` keeps the
  data;
- the same file started a second time, beside the first, fails: the node that cannot
  listen says which address is in use.

Waits poll observable state with deadlines (harness.poll / wait_healthy); nothing
sleeps to synchronise; no timing is asserted (bench/bench_compose.py measures).
"""

from __future__ import annotations

import re
import subprocess
import threading
import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError

from e2e.helpers import run_cli
from kafka_peer.kafka_nodes import api_versions, finalized_features
from server.controller.features import metadata_version_from_name

from .harness import DOCKER, HOST_FILE, REPO, ComposeProject, poll

pytestmark = [pytest.mark.e2e, pytest.mark.compose]

CONTROLLERS = {1: 9093, 2: 9094, 3: 9095}
BROKERS = {101: 9092, 102: 9192, 103: 9292}
SERVICES = [f"controller-{n}" for n in CONTROLLERS] + [f"broker-{n}" for n in BROKERS]
BOOTSTRAP_CONTROLLERS = ",".join(f"127.0.0.1:{port}" for port in CONTROLLERS.values())
INITIAL_MV = "3.7-IV4"  # what the compose file formats with
UPGRADED_MV = "3.9-IV0"
WAIT_S = 120.0
COMPOSE_UP_TIMEOUT_S = 600.0  # may build the images first
CLIENT_TIMEOUT_MS = 10_000
WRITER_LIMIT = 2_000  # topic creations at most, so the writer is bounded in count too


def project(name: str) -> ComposeProject:
    return ComposeProject(name=name, files=(REPO / "docker-compose.yml", HOST_FILE))


@pytest.fixture(scope="module")
def cluster(kraftwerk_image):
    """The cluster as README's command brings it up (scripts/compose-up: engine, images,
    up -d, every service healthy)."""
    compose = project(f"kwtest-{uuid.uuid4().hex[:6]}")
    try:
        started = subprocess.run(["bash", str(REPO / "scripts" / "compose-up"), "-p", compose.name],
                                 capture_output=True, text=True, timeout=COMPOSE_UP_TIMEOUT_S, cwd=REPO)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        assert "all healthy" in started.stdout
        compose.wait_healthy(SERVICES)
        yield compose
    finally:
        compose.down()


def admin(port: int) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=CLIENT_TIMEOUT_MS,
                            client_id="kraftwerk-compose-test")


def topic_names(port: int) -> set[str]:
    client = admin(port)
    try:
        return set(client.list_topics())
    finally:
        client.close()


def create_topic(port: int, name: str) -> None:
    client = admin(port)
    try:
        client.create_topics([NewTopic(name, 1, 3)])
    finally:
        client.close()


def features_describe(flag: str, port: int) -> dict[str, str]:
    """feature name -> FinalizedVersionLevel, as `kraftwerk features describe` prints them."""
    result = run_cli("features", "describe", flag, f"127.0.0.1:{port}", "--timeout-s", "5")
    assert result.returncode == 0, result.stderr
    levels = {}
    for line in result.stdout.splitlines():
        fields = dict(part.split(": ", 1) for part in line.split("\t") if ": " in part)
        levels[fields["Feature"]] = fields["FinalizedVersionLevel"]
    return levels


def leader_id() -> int:
    result = run_cli("metadata-quorum", "--bootstrap-controller", BOOTSTRAP_CONTROLLERS, "describe", "--status")
    assert result.returncode == 0, result.stderr
    return int(re.search(r"^LeaderId:\s+(\d+)", result.stdout, re.MULTILINE).group(1))


def broker_metadata_version(port: int) -> int | None:
    return finalized_features(api_versions(f"127.0.0.1:{port}")).get("metadata.version")


class TopicWriter:
    """Creates topics one after another through one broker until stopped; remembers
    which creations were acknowledged and counts those that failed."""

    def __init__(self, port: int, prefix: str) -> None:
        self.port = port
        self.prefix = prefix
        self.acknowledged: list[str] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for index in range(WRITER_LIMIT):
            if self._stop.is_set():
                return
            name = f"{self.prefix}-{index}"
            try:
                create_topic(self.port, name)
            except KafkaError:
                self.failures += 1
                continue
            self.acknowledged.append(name)

    def __enter__(self) -> "TopicWriter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)


def test_every_service_is_healthy_and_answers_from_the_host(cluster):
    for port in CONTROLLERS.values():
        assert features_describe("--bootstrap-controller", port)["metadata.version"] == INITIAL_MV
    for port in BROKERS.values():
        assert features_describe("--bootstrap-server", port)["metadata.version"] == INITIAL_MV
    client = admin(BROKERS[101])
    try:
        described = client.describe_cluster()
        client.create_topics([NewTopic("compose-first", 3, 3)])
    finally:
        client.close()
    assert {(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]} == {
        (node_id, "127.0.0.1", port) for node_id, port in BROKERS.items()}
    for port in BROKERS.values():
        assert "compose-first" in poll(lambda: topic_names(port), WAIT_S, f"topics through 127.0.0.1:{port}")


def test_killing_the_controller_leader_mid_write_loses_no_acknowledged_write(cluster):
    killed = leader_id()
    with TopicWriter(BROKERS[102], "during-kill") as writer:
        poll(lambda: len(writer.acknowledged) >= 3, WAIT_S, "three topics acknowledged before the kill")
        cluster.run("kill", f"controller-{killed}")
        acknowledged_before_kill = len(writer.acknowledged)
        poll(lambda: len(writer.acknowledged) >= acknowledged_before_kill + 3, WAIT_S,
             "topic creations acknowledged after the leader was killed")
    assert poll(lambda: leader_id() != killed and leader_id(), WAIT_S, "a new leader") != killed
    listed = topic_names(BROKERS[101])
    assert set(writer.acknowledged) <= listed, sorted(set(writer.acknowledged) - listed)
    cluster.run("up", "-d", "--no-deps", f"controller-{killed}")
    cluster.wait_healthy([f"controller-{killed}"])
    # It follows again: its image has the topics written while it was down.
    poll(lambda: features_describe("--bootstrap-controller", CONTROLLERS[killed]).get("metadata.version")
         == INITIAL_MV, WAIT_S, f"controller {killed} answering after its restart")


def test_a_metadata_version_upgrade_reaches_every_brokers_api_versions(cluster):
    result = run_cli("features", "upgrade", "--metadata", UPGRADED_MV, "--bootstrap-controller",
                     BOOTSTRAP_CONTROLLERS)
    assert result.returncode == 0, result.stdout + result.stderr
    level = metadata_version_from_name(UPGRADED_MV).level
    for port in BROKERS.values():
        poll(lambda: broker_metadata_version(port) == level, WAIT_S, f"metadata.version {UPGRADED_MV} at {port}")


def _wipe(cluster: ComposeProject, service: str) -> None:
    cluster.run("stop", service)
    cluster.run("rm", "-f", service)
    subprocess.run([DOCKER, "volume", "rm", f"{cluster.name}_{service}-data"], check=True, capture_output=True,
                   timeout=60)


def test_a_controller_on_a_wiped_volume_never_answers_from_its_empty_log(cluster):
    wiped = next(n for n in CONTROLLERS if n != leader_id())
    _wipe(cluster, f"controller-{wiped}")
    cluster.run("up", "-d", "--no-deps", f"controller-{wiped}")
    seen: list[str] = []

    def caught_up() -> bool:
        level = features_describe("--bootstrap-controller", CONTROLLERS[wiped]).get("metadata.version")
        seen.append(level)
        return level == UPGRADED_MV

    poll(caught_up, WAIT_S, f"the wiped controller {wiped} catching up")
    # Its format wrote bootstrap records at INITIAL_MV: those belong to a new quorum's
    # first leader and must never be served as the cluster's state.
    assert INITIAL_MV not in seen, seen
    cluster.wait_healthy([f"controller-{wiped}"])
    listed = topic_names(BROKERS[103])
    create_topic(BROKERS[103], "after-wipe")
    assert "compose-first" in listed


def test_a_broker_on_a_wiped_volume_answers_only_with_the_whole_image(cluster):
    before = topic_names(BROKERS[101])
    _wipe(cluster, "broker-103")
    cluster.run("up", "-d", "--no-deps", "broker-103")
    first_answer = poll(lambda: topic_names(BROKERS[103]), WAIT_S, "the wiped broker answering Metadata")
    assert before <= first_answer, sorted(before - first_answer)
    cluster.wait_healthy(["broker-103"])


def test_a_node_stopped_in_its_first_moments_is_not_left_to_the_kill(cluster):
    # `docker stop` right after `start`: the node has no signal handler yet. As PID 1 it
    # would ignore SIGTERM until Docker's SIGKILL (exit 137) ten seconds later; under
    # Docker's init (`init: true`) the signal ends it at once (143), or cleanly (0) if its
    # handlers were already in place.
    service = "controller-2" if leader_id() != 2 else "controller-3"
    container = cluster.container_id(service)
    cluster.run("stop", service)
    subprocess.run([DOCKER, "start", container], check=True, capture_output=True, timeout=60)
    subprocess.run([DOCKER, "stop", container], check=True, capture_output=True, timeout=60)
    assert cluster.inspect(service)["State"]["ExitCode"] in (0, 143), cluster.logs(service)[-2000:]
    cluster.run("start", service)
    cluster.wait_healthy([service])


def test_stop_ends_every_node_cleanly_and_down_up_keeps_the_data(cluster):
    before = topic_names(BROKERS[101])
    cluster.run("stop")
    for service in SERVICES:
        state = cluster.inspect(service)["State"]
        assert not state["Running"], service
        assert state["ExitCode"] == 0, (service, state, cluster.logs(service)[-2000:])
    cluster.run("down")  # keeps the named volumes
    cluster.run("up", "-d")
    cluster.wait_healthy(SERVICES)
    for port in BROKERS.values():
        assert before <= poll(lambda: topic_names(port), WAIT_S, f"topics through {port} after up")
        assert broker_metadata_version(port) == metadata_version_from_name(UPGRADED_MV).level


def test_the_same_file_started_twice_names_the_port_in_use(cluster):
    second = project(f"{cluster.name}-twice")
    try:
        second.run("up", "-d", "--no-deps", "controller-1")
        state = poll(lambda: (s := second.inspect("controller-1")["State"]) and not s["Running"] and s, WAIT_S,
                     "the second controller-1 exiting")
        assert state["ExitCode"] != 0
        logs = second.logs("controller-1")
        assert "127.0.0.1:9093" in logs and "in use" in logs, logs[-2000:]
        assert "Traceback" not in logs, logs[-3000:]
    finally:
        second.down()
    # The first cluster did not notice.
    assert features_describe("--bootstrap-controller", CONTROLLERS[1])["metadata.version"] == UPGRADED_MV
