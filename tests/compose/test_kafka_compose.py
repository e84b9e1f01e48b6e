"""deploy/docker-compose.kafka.yml: real Apache Kafka 4.4.0 brokers on kraftwerk controllers.

The compose file a user runs for their own integration tests: three kraftwerk controllers
(ids 1-3, 127.0.0.1:11093-11095) and three Apache Kafka brokers (`kafka.Kafka`,
process.roles=broker, ids 101-103, 127.0.0.1:11092/11192/11292) in containers on host
networking, from the images scripts/compose-images builds (kraftwerk:0.1.0,
kraftwerk-kafka:4.4.0). Everything is checked from the host, as a user's test would:
kafka-python against the brokers, kraftwerk's CLI (`docker-compose exec ... kraftwerk`)
against the controllers, and a one-request ApiVersions client for the brokers' finalized
features.

Checked, in file order on one cluster (project kwtest-kafka, always brought down with
its volumes at the end):
- every service becomes healthy (a broker's healthcheck is a real ApiVersions answer on
  its own port), and a broker's Metadata lists all three brokers at their 127.0.0.1
  addresses;
- kafka-python creates a topic with three replicas through a broker, produces with
  acks=all and a consumer group reads every record back;
- a metadata.version upgrade through kraftwerk's CLI reaches all three brokers' ApiVersions;
- `docker kill` of the kraftwerk controller leader: a new leader is elected, a write is
  acknowledged, a topic is created, everything acknowledged is read back; the killed
  controller, started again with `up -d --no-deps`, rejoins the quorum and catches up.
After every test, the brokers' logs hold no WARN/ERROR that COMPOSE_BENIGN (kafka_nodes.BENIGN
and one more line) does not explain: a metadata record a Kafka broker could not replay, or
a controller answer it did not expect, shows there.

Waits poll observable state against a deadline (harness.poll); nothing sleeps to
synchronise and no timing is asserted. The up -> healthy time, the times from the kill to
the next acknowledged write and to the next created topic, and the image sizes are printed
and written to build/compose-bench/kafka.json for bench/RESULTS.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from kafka_peer import kafka_nodes
from kafka_peer.kafka_nodes import BENIGN, Benign, api_versions, finalized_features, parse_log, problems
from server.controller.features import LATEST_PRODUCTION, metadata_version_from_name

from .harness import DOCKER, REPO, ComposeProject, image_size_bytes, poll

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.slow]

COMPOSE_FILE = REPO / "deploy" / "docker-compose.kafka.yml"
PROJECT = "kwtest-kafka"
CONTROLLERS = {1: "127.0.0.1:11093", 2: "127.0.0.1:11094", 3: "127.0.0.1:11095"}
BROKERS = {101: "127.0.0.1:11092", 102: "127.0.0.1:11192", 103: "127.0.0.1:11292"}
BOOTSTRAP = list(BROKERS.values())
SERVICES = [f"controller-{n}" for n in CONTROLLERS] + [f"kafka-{n}" for n in BROKERS]
START_MV = "3.9-IV0"  # the compose file formats the controllers at this level
UPGRADE_STEPS = ("4.0-IV0", LATEST_PRODUCTION.name)
MV = "metadata.version"
PARTITIONS = 3
REPLICATION = 3
RECORDS = 300
HEALTHY_S = 300.0  # a cold start: six containers, three JVMs, on two shared cores
WAIT_S = 90.0  # one asynchronous change (an election, propagation, a rebalance)
CLI_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_MS = 30_000
BENCH_FILE = REPO / "build" / "compose-bench" / "kafka.json"

# Beside kafka_nodes.BENIGN: a line three brokers serving consumer groups print at times.
COMPOSE_BENIGN = BENIGN + (
    Benign("WARN", "DefaultAutoTopicCreationManager",
           re.compile(r"^Auto topic creation failed for __consumer_offsets with error 'TOPIC_ALREADY_EXISTS'"),
           "a FindCoordinator reached a broker whose metadata image did not yet hold __consumer_offsets, which "
           "another broker had just created: the controller answers TOPIC_ALREADY_EXISTS (as Kafka's own "
           "controller does) and Kafka's broker logs every error of an automatic creation at WARN"),
)


def record_numbers(**numbers) -> None:
    """Adds measured numbers to BENCH_FILE (and prints them: `pytest -s` shows them)."""
    BENCH_FILE.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(BENCH_FILE.read_text()) if BENCH_FILE.exists() else {}
    known.update(numbers)
    BENCH_FILE.write_text(json.dumps(known, indent=2, sort_keys=True) + "\n")
    for name, value in numbers.items():
        print(f"compose-kafka: {name} = {value}")


# --------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------

@dataclass
class KafkaCompose:
    project: ComposeProject
    down_controllers: set[int] = field(default_factory=set)
    log_offsets: dict[int, int] = field(default_factory=dict)  # broker -> log entries already checked

    def kraftwerk(self, *argv: str, via: int) -> subprocess.CompletedProcess:
        """kraftwerk's CLI inside controller `via`'s container (the image has it)."""
        return self.project.run("exec", "-T", f"controller-{via}", "kraftwerk", *argv, check=False,
                                timeout_s=CLI_TIMEOUT_S)

    def live_controllers(self) -> list[int]:
        return [n for n in CONTROLLERS if n not in self.down_controllers]

    def quorum_status(self, via: int) -> dict[str, str]:
        """`kraftwerk metadata-quorum describe --status` through controller `via`, as
        {"LeaderId": "3", ...}; {} when it does not answer."""
        result = self.kraftwerk("metadata-quorum", "--bootstrap-controller", CONTROLLERS[via], "describe",
                                "--status", via=via)
        if result.returncode != 0:
            return {}
        return dict(re.findall(r"^(\w+):\s+(.*)$", result.stdout, re.MULTILINE))

    def replication(self, via: int) -> dict[int, dict[str, object]]:
        """`kraftwerk metadata-quorum describe --replication` through controller `via`:
        node id -> its row (LogEndOffset, Lag, LastFetchTimestamp as ints; Status)."""
        result = self.kraftwerk("metadata-quorum", "--bootstrap-controller", CONTROLLERS[via], "describe",
                                "--replication", via=via)
        if result.returncode != 0:
            return {}
        header, *rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
        table = {}
        for row in rows:
            cells = dict(zip(header, row))
            table[int(cells["NodeId"])] = {"Status": cells["Status"], **{
                name: int(cells[name]) for name in ("LogEndOffset", "Lag", "LastFetchTimestamp")}}
        return table

    def leader(self) -> int:
        """The controller leader as a live controller names it (itself live)."""
        def ask() -> int | None:
            for node in self.live_controllers():
                leader = int(self.quorum_status(node).get("LeaderId", "-1"))
                if leader in self.live_controllers():
                    return leader
            return None
        return poll(ask, WAIT_S, "a live kraftwerk controller leader")

    def container_log(self, service: str) -> str:
        container = self.project.container_id(service)
        assert container is not None, f"{service} has no container"
        result = subprocess.run([DOCKER, "logs", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", timeout=60)
        return result.stdout

    def new_broker_problems(self) -> list[str]:
        """WARN/ERROR entries of the Kafka brokers' logs since the last call that
        COMPOSE_BENIGN does not explain."""
        found = []
        for broker in BROKERS:
            entries = parse_log(broker, self.container_log(f"kafka-{broker}"))
            seen = self.log_offsets.get(broker, 0)
            self.log_offsets[broker] = len(entries)
            found += [entry.describe() for entry in problems(entries[seen:], COMPOSE_BENIGN)]
        return found


@pytest.fixture(scope="module")
def cluster(kraftwerk_image, kafka_image):
    project = ComposeProject(PROJECT, (COMPOSE_FILE,))
    project.down()  # whatever an interrupted earlier run left behind
    try:
        start = time.monotonic()
        project.run("up", "-d")
        project.wait_healthy(SERVICES, timeout_s=HEALTHY_S)
        record_numbers(up_to_healthy_s=round(time.monotonic() - start, 1),
                       kraftwerk_image_mb=round(image_size_bytes(kraftwerk_image) / 1e6),
                       kafka_image_mb=round(image_size_bytes(kafka_image) / 1e6))
        yield KafkaCompose(project)
    finally:
        project.down()


@pytest.fixture(autouse=True)
def broker_logs_clean(cluster):
    yield
    found = cluster.new_broker_problems()
    if found:
        pytest.fail("Kafka brokers logged problems:\n" + "\n".join(found), pytrace=False)


# --------------------------------------------------------------------------
# Kafka clients from the host
# --------------------------------------------------------------------------

def create_topic(name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=CLIENT_TIMEOUT_MS,
                             client_id="compose-kafka-admin")
    try:
        admin.create_topics({name: {"num_partitions": PARTITIONS, "replication_factor": REPLICATION}},
                            timeout_ms=CLIENT_TIMEOUT_MS)
    finally:
        admin.close()


def fully_replicated(name: str) -> bool:
    """Every broker's Metadata: each partition of `name` has a leader, 3 replicas, all in sync."""
    for address in BOOTSTRAP:
        admin = KafkaAdminClient(bootstrap_servers=[address], request_timeout_ms=CLIENT_TIMEOUT_MS,
                                 client_id="compose-kafka-admin")
        try:
            (topic,) = admin.describe_topics([name])
        finally:
            admin.close()
        partitions = topic["partitions"]
        if topic["error_code"] != 0 or len(partitions) != PARTITIONS:
            return False
        for partition in partitions:
            if (partition["leader_id"] not in BROKERS or sorted(partition["replica_nodes"]) != sorted(BROKERS)
                    or sorted(partition["isr_nodes"]) != sorted(BROKERS)):
                return False
    return True


def produce(topic: str, values: list[bytes]) -> None:
    """Sends `values` with acks=all (kafka-python's idempotent producer) and waits for
    every acknowledgement."""
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", request_timeout_ms=CLIENT_TIMEOUT_MS,
                             max_block_ms=CLIENT_TIMEOUT_MS, client_id="compose-kafka-producer")
    try:
        futures = [producer.send(topic, key=str(i).encode(), value=value) for i, value in enumerate(values)]
        producer.flush(timeout=WAIT_S)
        for future in futures:
            future.get(timeout=WAIT_S)
    finally:
        producer.close(timeout=10)


def consume_all(topic: str, expected: int, group: str) -> list[bytes]:
    values, _ = kafka_nodes.consume_all(BOOTSTRAP, topic, expected, group, WAIT_S, CLIENT_TIMEOUT_MS + 5_000,
                                        "compose-kafka-consumer")
    return values


def payloads(stem: str, count: int = RECORDS) -> list[bytes]:
    return [f"{stem}-{i}".encode() for i in range(count)]


def finalized_mv(cluster: KafkaCompose, controller: int) -> str | None:
    """The finalized metadata.version name as `kraftwerk features describe` through
    `controller` prints it (None when it does not answer)."""
    result = cluster.kraftwerk("features", "describe", "--bootstrap-controller", CONTROLLERS[controller],
                               via=controller)
    found = re.search(rf"^Feature: {re.escape(MV)}\s.*FinalizedVersionLevel: (\S+)", result.stdout, re.MULTILINE)
    return found.group(1) if result.returncode == 0 and found else None


def broker_mv(address: str) -> tuple[int | None, int]:
    """A Kafka broker's finalized metadata.version level and features epoch (ApiVersions)."""
    reply = api_versions(address)
    return finalized_features(reply).get(MV), reply.finalized_features_epoch


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

def test_every_service_healthy_and_brokers_reachable_from_the_host(cluster):
    for service in SERVICES:
        assert cluster.project.health(service) == "healthy", service
    # Every broker's Metadata names all three brokers at the addresses they advertise,
    # which a client on the host reaches: the brokers registered with kraftwerk and are
    # unfenced.
    for address in BOOTSTRAP:
        def brokers_seen(address=address) -> dict[int, str] | None:
            admin = KafkaAdminClient(bootstrap_servers=[address], request_timeout_ms=CLIENT_TIMEOUT_MS,
                                     client_id="compose-kafka-admin")
            try:
                described = admin.describe_cluster()
            finally:
                admin.close()
            seen = {b["broker_id"]: f"{b['host']}:{b['port']}" for b in described["brokers"]}
            return seen if seen == BROKERS else None
        poll(brokers_seen, WAIT_S, f"broker {address} to list brokers {sorted(BROKERS)}")


def test_topic_with_three_replicas_produce_acks_all_and_consume(cluster):
    topic = "compose-orders"
    create_topic(topic)
    poll(lambda: fully_replicated(topic), WAIT_S, f"every partition of {topic} on all three brokers, in sync")
    values = payloads(topic)
    produce(topic, values)
    read = consume_all(topic, RECORDS, group=f"{topic}-group")
    assert sorted(read) == sorted(values)  # exactly once each


def test_metadata_version_upgrade_reaches_every_broker(cluster):
    epochs = {}
    for broker, address in BROKERS.items():
        level, epochs[broker] = broker_mv(address)
        assert level == metadata_version_from_name(START_MV).level, (broker, level)
    for target in UPGRADE_STEPS:
        wanted = metadata_version_from_name(target).level
        # The documented command: kraftwerk's CLI in a controller's container, against
        # controller 1 (kraftwerk finds the active controller from there).
        result = cluster.kraftwerk("features", "upgrade", "--bootstrap-controller", CONTROLLERS[1],
                                   "--metadata", target, via=1)
        assert result.returncode == 0, result.stdout + result.stderr
        for broker, address in BROKERS.items():
            def finalized(address=address, wanted=wanted) -> tuple[int, int] | None:
                level, epoch = broker_mv(address)
                return (level, epoch) if level == wanted else None
            _, epoch = poll(finalized, WAIT_S, f"Kafka broker {broker} to finalize metadata.version {target}")
            assert epoch > epochs[broker], (broker, target, epoch, epochs[broker])
            epochs[broker] = epoch


def test_kill_of_the_controller_leader(cluster):
    before = "compose-before-kill"
    create_topic(before)
    poll(lambda: fully_replicated(before), WAIT_S, f"every partition of {before} on all three brokers, in sync")
    first = payloads(before)
    produce(before, first)

    killed = cluster.leader()
    service = f"controller-{killed}"
    container = cluster.project.container_id(service)
    subprocess.run([DOCKER, "kill", container], check=True, capture_output=True, timeout=60)
    killed_at = time.monotonic()
    cluster.down_controllers.add(killed)
    try:
        # The next write acknowledged by all replicas: the brokers hold the data, and
        # keep serving while the controllers elect a new leader.
        produce(before, payloads(f"{before}-first-after", 1))
        kill_to_ack_s = time.monotonic() - killed_at
        # A metadata write needs the new leader: a topic created through a broker (which
        # forwards CreateTopics to the active controller, whichever it now is).
        after = "compose-after-kill"
        create_topic(after)
        kill_to_topic_s = time.monotonic() - killed_at
        new_leader = cluster.leader()
        assert new_leader != killed
        poll(lambda: fully_replicated(after), WAIT_S, f"every partition of {after} on all three brokers, in sync")

        second = payloads(f"{before}-later")
        produce(before, second)
        produce(after, payloads(after))

        read = consume_all(before, 2 * RECORDS + 1, group=f"{before}-group")
        assert sorted(read) == sorted(first + payloads(f"{before}-first-after", 1) + second)
        assert sorted(consume_all(after, RECORDS, group=f"{after}-group")) == sorted(payloads(after))
    finally:
        restarted_ms = int(time.time() * 1000)  # the containers share the host's clock
        cluster.project.run("up", "-d", "--no-deps", service)
        cluster.down_controllers.discard(killed)
    record_numbers(kill_leader_to_acked_write_s=round(kill_to_ack_s, 2),
                   kill_leader_to_topic_created_s=round(kill_to_topic_s, 2))

    # The restarted controller rejoins: healthy, it names the live leader, it finalizes
    # what the leader finalizes, and the leader sees it fetch up to the log's end.
    cluster.project.wait_healthy([service], timeout_s=WAIT_S)
    poll(lambda: cluster.quorum_status(killed).get("LeaderId") == str(new_leader) or None, WAIT_S,
         f"restarted controller {killed} to name leader {new_leader}")
    leader_mv = finalized_mv(cluster, new_leader)
    assert leader_mv is not None
    poll(lambda: finalized_mv(cluster, killed) == leader_mv, WAIT_S,
         f"restarted controller {killed} to finalize metadata.version {leader_mv}")

    # The leader's replication view: the restarted voter fetches again, with no lag.
    def fetching() -> bool:
        row = cluster.replication(new_leader).get(killed)
        return row is not None and row["Status"] == "Follower" and row["LastFetchTimestamp"] > restarted_ms \
            and row["Lag"] == 0
    poll(fetching, WAIT_S, f"leader {new_leader} to see restarted controller {killed} fetching without lag")
