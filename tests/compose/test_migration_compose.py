"""deploy/docker-compose.migration.yml: a ZooKeeper -> KRaft migration (KIP-866) in containers.

The file's whole story, run with the commands its header documents (project
kwtest-migration, host networking on 127.0.0.1, images from scripts/compose-images):
- `up -d`: Debian's ZooKeeper (12181), three ZooKeeper-mode brokers (ids 1-3 on
  12092/12192/12292) and three KRaft controllers (3000-3002 on 12093-12095) started with
  the migration switched on; every service healthy, zookeeper-init exited 0;
- `kraftwerk migration status` (run in a controller's container) says MigrationActive
  with ZooKeeper brokers [1,2,3] once ZooKeeper has caught up;
- a topic (3 partitions, 3 replicas, a topic config) created during the dual writes: it
  is in ZooKeeper and every ZooKeeper-mode broker serves it from the host. It is created
  at the controllers: kraftwerk's ZooKeeper-mode broker agent serves no CreateTopics
  (Kafka's brokers forward it to the KRaft controller during a migration), so the
  controllers are where an admin client writes before the move;
- each broker moved in turn (`stop zk-broker-N`, `--profile kraft up -d --no-deps
  broker-N`, healthy): the status lists it under KRaftBrokers, the stopped ZooKeeper-mode
  broker stays stopped; after the third, MigrationFinished; the KRaft brokers serve the
  topic with the same replicas;
- finalize: each controller restarted alone with KRAFTWERK_MIGRATION=false (`up -d
  --no-deps`), healthy before the next; the status says KRaft (POST_MIGRATION,
  MigrationEnabled false); the topic is still served by the KRaft brokers, and a topic
  created through them afterwards does not reach ZooKeeper (it no longer follows).

Waits poll observable state against a deadline (harness.poll, wait_healthy); nothing
sleeps to synchronise and no timing is asserted. The up -> healthy time, each broker
move, the finalization and the ZooKeeper image's size are printed, kept as pytest user
properties and written to build/compose-bench/migration.json for bench/RESULTS.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from server.zk.seed import read_zookeeper

from .harness import DOCKER, REPO, ComposeProject, image_size_bytes, poll

pytestmark = [pytest.mark.e2e, pytest.mark.compose]

COMPOSE_FILE = REPO / "deploy" / "docker-compose.migration.yml"
PROJECT = "kwtest-migration"
ZOOKEEPER = "127.0.0.1:12181"
BROKERS = {1: "127.0.0.1:12092", 2: "127.0.0.1:12192", 3: "127.0.0.1:12292"}
CONTROLLERS = {3000: "127.0.0.1:12093", 3001: "127.0.0.1:12094", 3002: "127.0.0.1:12095"}
FIRST_SERVICES = (["zookeeper"] + [f"zk-broker-{n}" for n in BROKERS]
                  + [f"controller-{n}" for n in CONTROLLERS])
TOPIC = "before-the-move"
LATE_TOPIC = "after-finalize"
PARTITIONS = 3
REPLICATION = 3
TOPIC_CONFIG = {"retention.ms": "3600000"}
HEALTHY_S = 300.0  # a cold start: seven containers (a JVM among them) on two shared cores
WAIT_S = 90.0  # one asynchronous change (the copy, a registration, an election)
CLI_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_MS = 20_000
BENCH_FILE = REPO / "build" / "compose-bench" / "migration.json"


def record_numbers(record_property, **numbers) -> None:
    """Keeps measured numbers: printed (`pytest -s`), as user properties (junit xml) and
    in BENCH_FILE."""
    BENCH_FILE.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(BENCH_FILE.read_text()) if BENCH_FILE.exists() else {}
    known.update(numbers)
    BENCH_FILE.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")
    for name, value in numbers.items():
        record_property(name, value)
        print(f"compose-migration: {name} = {value}")


# --------------------------------------------------------------------------
# The project
# --------------------------------------------------------------------------

def down(project: ComposeProject) -> None:
    """Everything of the project, volumes included (`down` removes the containers of
    profile services too); then checks that no container of it is left."""
    project.down()
    left = subprocess.run([DOCKER, "ps", "-aq", "--filter", f"label=com.docker.compose.project={project.name}"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    if left:
        subprocess.run([DOCKER, "rm", "-f", "-v", *left], capture_output=True, timeout=120)
        raise AssertionError(f"`down` left containers of {project.name} behind (removed now): {left}")


@pytest.fixture
def project(kraftwerk_image, zookeeper_image):
    project = ComposeProject(PROJECT, (COMPOSE_FILE,))
    down(project)  # whatever an interrupted earlier run left behind
    try:
        yield project
    finally:
        down(project)


def migration_status(project: ComposeProject, via: int) -> dict[str, str]:
    """`kraftwerk migration status`, run in controller `via`'s container as the file's
    header documents it, as {"MigrationState": "MigrationActive (4)", ...}; {} while it
    gets no answer (a controller restarting, an election)."""
    result = project.run("exec", "-T", f"controller-{via}", "kraftwerk", "migration", "status",
                         "--bootstrap-controller", CONTROLLERS[via], "--timeout-s", "10", check=False,
                         timeout_s=CLI_TIMEOUT_S)
    if result.returncode != 0:
        return {}
    return dict(re.findall(r"^(\w+):\s+(.*)$", result.stdout, re.MULTILINE))


def ids(text: str) -> list[int]:
    """`[1,2,3]` -> [1, 2, 3]."""
    return [int(item) for item in text.strip("[]").split(",") if item.strip()]


def wait_status(project: ComposeProject, via: int, what: str, accept) -> dict[str, str]:
    """Polls the status until accept(status) holds; the last status is in the failure."""
    seen: list[dict[str, str]] = []

    def reached():
        status = migration_status(project, via)
        seen.append(status)
        return status if status and accept(status) else None
    try:
        return poll(reached, WAIT_S, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {seen[-1] if seen else None}") from None


# --------------------------------------------------------------------------
# Kafka clients from the host
# --------------------------------------------------------------------------

def admin(bootstrap: list[str]) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS,
                            client_id="compose-migration")


def create_topic(bootstrap: list[str], name: str, configs: dict[str, str]) -> bool:
    """CreateTopics through `bootstrap`; True once created (also when an earlier try,
    whose answer was lost, created it)."""
    client = admin(bootstrap)
    try:
        client.create_topics([NewTopic(name, PARTITIONS, REPLICATION, topic_configs=configs)],
                             timeout_ms=CLIENT_TIMEOUT_MS, raise_errors=True)
    except TopicAlreadyExistsError:
        pass
    finally:
        client.close()
    return True


def replicas_served_by(address: str, name: str) -> dict[int, tuple[int, ...]] | None:
    """partition -> replicas of `name` in the Metadata the node at `address` answers;
    None while it does not know the topic whole (every partition with a leader)."""
    client = admin([address])
    try:
        (topic,) = client.describe_topics([name])
    finally:
        client.close()
    partitions = topic["partitions"]
    if topic["error_code"] != 0 or len(partitions) != PARTITIONS:
        return None
    if any(p["error_code"] != 0 or p["leader_id"] < 0 for p in partitions):
        return None
    return {p["partition_index"]: tuple(p["replica_nodes"]) for p in partitions}


def served_by_every_broker(name: str) -> dict[int, tuple[int, ...]] | None:
    """The topic's replicas as every broker serves them, when all three agree."""
    answers = [replicas_served_by(address, name) for address in BROKERS.values()]
    if any(answer is None for answer in answers) or any(answer != answers[0] for answer in answers):
        return None
    return answers[0]


def in_zookeeper(name: str) -> dict[int, tuple[int, ...]] | None:
    image = read_zookeeper(ZOOKEEPER)
    topic = image.topics.get(name)
    return None if topic is None else {index: tuple(r) for index, r in topic.assignment.partitions.items()}


# --------------------------------------------------------------------------
# The story
# --------------------------------------------------------------------------

def test_the_migration_file_migrates_a_zookeeper_cluster_to_kraft(project, zookeeper_image, record_property):
    # `docker-compose -f deploy/docker-compose.migration.yml up -d`
    start = time.monotonic()
    project.run("up", "-d", timeout_s=HEALTHY_S)
    project.wait_healthy(FIRST_SERVICES, timeout_s=HEALTHY_S)
    record_numbers(record_property, up_to_healthy_s=round(time.monotonic() - start, 1),
                   zookeeper_image_mb=round(image_size_bytes(zookeeper_image) / 1e6))
    assert project.health("zookeeper-init") == "exited (exit 0)", project.logs("zookeeper-init")[-2000:]

    # MigrationActive: the controllers copied ZooKeeper's metadata and dual-write.
    status = wait_status(project, 3000, "MigrationActive with ZooKeeper caught up",
                         lambda s: s.get("MigrationState") == "MigrationActive (4)"
                         and s.get("ZooKeeperWriteBehindLag") == "0")
    assert ids(status["ZooKeeperBrokers"]) == [1, 2, 3] and ids(status["KRaftBrokers"]) == []
    assert status["MigrationEnabled"] == "true" and "Blocked" not in status

    # Written before the move, during the dual writes (at the controllers: see the docstring).
    poll(lambda: create_topic(list(CONTROLLERS.values()), TOPIC, TOPIC_CONFIG), WAIT_S,
         f"topic {TOPIC} created through the controllers")
    replicas = poll(lambda: served_by_every_broker(TOPIC), WAIT_S,
                    f"every ZooKeeper-mode broker serving {TOPIC}")
    assert {len(set(r)) for r in replicas.values()} == {REPLICATION}
    assert set().union(*replicas.values()) == set(BROKERS)
    assert poll(lambda: in_zookeeper(TOPIC), WAIT_S, f"{TOPIC} written to ZooKeeper") == replicas
    assert read_zookeeper(ZOOKEEPER).topic_configs[TOPIC].config == TOPIC_CONFIG

    # The brokers move to KRaft mode one at a time: same id, same port.
    moves = []
    for n in BROKERS:
        move_start = time.monotonic()
        project.run("stop", f"zk-broker-{n}")
        project.run("--profile", "kraft", "up", "-d", "--no-deps", f"broker-{n}")
        project.wait_healthy([f"broker-{n}"], timeout_s=HEALTHY_S)
        expected = "MigrationFinished (5)" if n == max(BROKERS) else "MigrationActive (4)"
        status = wait_status(project, 3000, f"broker {n} in KRaft mode ({expected})",
                             lambda s, n=n, expected=expected: n in ids(s.get("KRaftBrokers", "[]"))
                             and n not in ids(s.get("ZooKeeperBrokers", "[]"))
                             and s.get("MigrationState") == expected)
        moves.append(round(time.monotonic() - move_start, 1))
        assert ids(status["KRaftBrokers"]) == [b for b in BROKERS if b <= n]
        # --no-deps kept compose from starting the ZooKeeper-mode broker again.
        assert project.health(f"zk-broker-{n}").startswith("exited"), project.health(f"zk-broker-{n}")
    record_numbers(record_property, broker_moves_s=moves)

    # The KRaft brokers serve what was written before the move, unchanged.
    assert poll(lambda: served_by_every_broker(TOPIC), WAIT_S, f"the KRaft brokers serving {TOPIC}") == replicas

    # Finalize: each controller restarted alone without the switch, healthy before the next.
    finalize_start = time.monotonic()
    for n in CONTROLLERS:
        project.run("up", "-d", "--no-deps", f"controller-{n}", extra_env={"KRAFTWERK_MIGRATION": "false"})
        project.wait_healthy([f"controller-{n}"], timeout_s=HEALTHY_S)
    status = wait_status(project, 3002, "KRaft (finalized)",
                         lambda s: s.get("MigrationState") == "KRaft (6)")
    record_numbers(record_property, finalize_s=round(time.monotonic() - finalize_start, 1))
    assert status["ZkMigrationState"] == "POST_MIGRATION" and status["MigrationEnabled"] == "false"
    assert ids(status["KRaftBrokers"]) == [1, 2, 3]
    for n in BROKERS:
        assert project.health(f"zk-broker-{n}").startswith("exited"), project.health(f"zk-broker-{n}")
    project.wait_healthy([f"broker-{n}" for n in BROKERS], timeout_s=WAIT_S)

    # KRaft: the topic is still served; ZooKeeper no longer follows new writes.
    assert poll(lambda: served_by_every_broker(TOPIC), WAIT_S, f"{TOPIC} after finalizing") == replicas
    poll(lambda: create_topic(list(BROKERS.values()), LATE_TOPIC, {}), WAIT_S,
         f"topic {LATE_TOPIC} created through the KRaft brokers")
    poll(lambda: served_by_every_broker(LATE_TOPIC), WAIT_S, f"every KRaft broker serving {LATE_TOPIC}")
    assert LATE_TOPIC not in read_zookeeper(ZOOKEEPER).topics
