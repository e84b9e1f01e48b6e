"""Real Apache Kafka 4.4.0 brokers on a kraftwerk controller quorum.

Two Kafka brokers (`kafka.Kafka`, process.roles=broker, ids 201 and 202, formatted by
Kafka's own StorageTool with kraftwerk's cluster id; 202 has two log directories, JBOD)
run against three kraftwerk controllers (metadata.version 3.9-IV0 at the start). Kafka's brokers register, heartbeat,
fetch the metadata log as observers and replay every record kraftwerk wrote into their own
image: a record Kafka cannot replay, or a controller answer it does not expect, shows as
a failed check here or as a WARN/ERROR line in a broker's log (checked after every test
against kafka_nodes.BENIGN, the one list of lines that are not problems).

Checked, in file order on one shared cluster:
- the brokers are registered and unfenced as every kraftwerk controller sees them, and the
  registration in kraftwerk's metadata log carries exactly the feature ranges the broker
  advertises (features kraftwerk has no use for included);
- a topic created through a kraftwerk controller is served by both brokers;
- kafka-python produces (acks=all, without and with idempotence) and a consumer group
  reads everything back and commits;
- the broker with two log directories chooses a directory for each of its new replicas
  and tells kraftwerk (AssignReplicasToDirs): kraftwerk's image names, per partition, the
  directory the broker really keeps it in, and the single-directory broker's replicas
  their one directory from the start;
- a metadata.version upgrade through kraftwerk (our CLI) reaches both brokers' ApiVersions;
- kill -9 of kraftwerk's leader: the brokers follow the new leader, a new topic is served,
  the old records are read back, producing still works; the killed controller restarts;
- then, under that leader, a broker's controlled shutdown: kraftwerk moves its leaderships
  and ISR memberships to the other broker and lets it go (it exits on its own); restarted,
  it registers again, is unfenced, rejoins every ISR (AlterPartition) and serves its data.

Waits on other processes are polls with a deadline (their state has no event to wait on);
nothing sleeps to synchronise. The whole module is `e2e` and `slow` (two JVMs; about 40 s
on the 2-core machine, most of it the brokers' start): `pytest -m "not slow"` leaves it
out locally; CI runs it.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from kafka import KafkaProducer

from cli import local_cluster as lc
from cli.upgrade_story import LocalCluster
from pipeline.reader import read_fleet
from pipeline.schema import RECORD_FIELDS
from protocol.errors import ErrorCode, error_name
from server.client import ClientError, KafkaClient
from server.controller.features import LATEST_PRODUCTION, metadata_version_from_name
from server.storage.meta_properties import read_meta_properties, uuid_to_string

from . import kafka_nodes
from .kafka_nodes import (
    STOP_TIMEOUT_S,
    KafkaNode,
    KafkaNodeConfig,
    api_versions,
    finalized_features,
    problems,
    quorum_voters,
    server_missing,
    stop_all,
    supported_features,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CONTROLLER_IDS = (1, 2, 3)
BROKER_IDS = (201, 202)
JBOD_BROKER = 202  # log.dirs names two directories: it assigns its replicas itself (KIP-858)
JBOD_LOG_DIRS = ("data-a", "data-b")
START_MV = "3.9-IV0"
UPGRADE_STEPS = ("4.0-IV0", LATEST_PRODUCTION.name)  # through the 4.0 line, then kraftwerk's newest
MV = "metadata.version"
RECORDS = 200
PARTITIONS = 4
REPLICATION = 2  # every partition on both brokers: their replica fetchers and kraftwerk's ISR handling run
WAIT_S = 60.0  # any one asynchronous change (propagation, election, rebalance) on a loaded 2-core machine
PROBE_TIMEOUT_S = 5.0
POLL_S = 0.2
CLIENT_TIMEOUT_MS = 30_000

DESCRIBE_QUORUM, CREATE_TOPICS, METADATA, DESCRIBE_CLUSTER = 55, 19, 3, 60
ENDPOINT_TYPE_BROKER = 1


# --------------------------------------------------------------------------
# Talking to kraftwerk and to the Kafka brokers with our own client
# --------------------------------------------------------------------------

async def _call(address: str, api_key: int, body: dict):
    host, port = address.rsplit(":", 1)
    with trio.fail_after(PROBE_TIMEOUT_S):
        async with await KafkaClient.connect(host, int(port), client_id="kraftwerk-kafka-peer") as client:
            return await client.call(api_key, body)


def call(address: str, api_key: int, body: dict):
    return trio.run(_call, address, api_key, body)


PROBE_ERRORS = (ClientError, OSError, trio.TooSlowError)


def poll(what: str, probe, done=bool, timeout_s: float = WAIT_S):
    """Asks `probe()` again every POLL_S until `done(value)`; returns that value. An error
    reaching a node counts as "not yet". Fails naming the last value (or error) seen."""
    deadline = time.monotonic() + timeout_s
    last: object = "nothing yet"
    while True:
        try:
            value = probe()
            if done(value):
                return value
            last = value
        except PROBE_ERRORS as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {last!r}")
        time.sleep(POLL_S)


def quorum_leader(address: str) -> int:
    reply = call(address, DESCRIBE_QUORUM, {"topics": [{"topic_name": "__cluster_metadata",
                                                        "partitions": [{"partition_index": 0}]}]})
    return reply.topics[0].partitions[0].leader_id


def registered_brokers(address: str) -> dict[int, str]:
    """DescribeCluster (brokers) through a kraftwerk controller: the registered, unfenced
    brokers (controllers list themselves first; their ids are below 100)."""
    reply = call(address, DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                             "endpoint_type": ENDPOINT_TYPE_BROKER})
    assert reply.error_code == ErrorCode.NONE, error_name(reply.error_code)
    return {b.broker_id: f"{b.host}:{b.port}" for b in reply.brokers if b.broker_id >= 100}


def served_partitions(broker: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] | None:
    """Metadata for `topic` from one Kafka broker: partition -> (leader, replicas, isr), or
    None while the broker does not know the topic."""
    reply = call(broker, METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (described,) = reply.topics
    if described.error_code != ErrorCode.NONE:
        return None
    return {p.partition_index: (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in described.partitions if p.error_code == ErrorCode.NONE}


def served_topic_id(broker: str, topic: str) -> uuid.UUID | None:
    reply = call(broker, METADATA, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return reply.topics[0].topic_id


def broker_mv(broker: str) -> tuple[int | None, int]:
    """A Kafka broker's finalized metadata.version level and finalized-features epoch."""
    reply = api_versions(broker, timeout_s=PROBE_TIMEOUT_S)
    return finalized_features(reply).get(MV), reply.finalized_features_epoch


def partition_directories(controller_dir, topic_id: str) -> dict[int, dict[int, str]]:
    """Each partition of the topic with id `topic_id` (Kafka's string form) as one kraftwerk
    controller's metadata log and snapshots leave it: partition -> {replica: its log
    directory id}. PartitionRecord starts a partition; a PartitionChangeRecord naming
    Replicas or Directories replaces them (records are applied in offset order)."""
    rows = []
    for row in read_fleet(controller_dir):
        record = dict(zip(RECORD_FIELDS, row))
        if record["error"] is None and record["record_type"] in ("PartitionRecord", "PartitionChangeRecord"):
            fields = json.loads(record["fields_json"])
            if fields["topic_id"] == topic_id:
                rows.append((record["offset"], record["record_type"], fields))
    replicas: dict[int, list[int]] = {}
    directories: dict[int, list[str]] = {}
    for _, record_type, fields in sorted(rows, key=lambda row: row[0]):
        index = fields["partition_id"]
        if record_type == "PartitionRecord":
            replicas[index], directories[index] = fields["replicas"], fields["directories"]
            continue
        if fields.get("replicas") is not None:
            replicas[index] = fields["replicas"]
        if fields.get("directories"):
            directories[index] = fields["directories"]
    return {index: dict(zip(replicas[index], directories[index])) for index in replicas}


def broker_directories(node: KafkaNode) -> dict[str, Path]:
    """A Kafka broker's log directories by directory id (each one's meta.properties)."""
    found = {}
    for path in node.config.properties()["log.dirs"].split(","):
        meta = read_meta_properties(path)
        assert meta is not None and meta.directory_id is not None, path
        found[meta.directory_id] = Path(path)
    return found


def latest_registrations(controller_dir) -> dict[int, dict]:
    """The newest RegisterBrokerRecord per broker in one kraftwerk controller's metadata
    log and snapshots, read lock-free from its files (what the controller wrote and
    replays). A batch being written (a torn tail) reads as an error row and is skipped."""
    found: dict[int, dict] = {}
    for row in read_fleet(controller_dir):
        record = dict(zip(RECORD_FIELDS, row))
        if record["error"] is None and record["record_type"] == "RegisterBrokerRecord":
            fields = json.loads(record["fields_json"])
            known = found.get(fields["broker_id"])
            if known is None or fields["broker_epoch"] >= known["broker_epoch"]:
                found[fields["broker_id"]] = fields
    return found


# --------------------------------------------------------------------------
# The module's cluster
# --------------------------------------------------------------------------

@dataclass
class Peers:
    kraftwerk: LocalCluster
    brokers: dict[int, KafkaNode]
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def bootstrap(self) -> list[str]:
        return [node.address for node in self.brokers.values()]

    def live_controllers(self) -> list[int]:
        return [c for c in CONTROLLER_IDS if self.kraftwerk.alive(c)]

    def leader(self) -> int:
        """The controller leader, as a live controller names it (one of the live ones)."""
        def ask() -> int:
            for node in self.live_controllers():
                try:
                    leader = quorum_leader(self.kraftwerk.address(node))
                except PROBE_ERRORS:
                    continue
                if leader in self.live_controllers():
                    return leader
            return -1
        return poll("a live kraftwerk controller leader", ask, lambda leader: leader > 0)

    def unique(self, stem: str) -> str:
        return f"{stem}-{next(self.names)}"

    def create_topic(self, name: str, partitions: int = PARTITIONS, replication: int = REPLICATION) -> uuid.UUID:
        """CreateTopics through the kraftwerk leader (found again if leadership moved)."""
        def create():
            reply = call(self.kraftwerk.address(self.leader()), CREATE_TOPICS, {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication}],
                "timeout_ms": CLIENT_TIMEOUT_MS})
            return reply.topics[0]
        created = poll(f"kraftwerk to create topic {name}", create,
                       lambda t: t.error_code not in (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT))
        assert created.error_code == ErrorCode.NONE, (name, error_name(created.error_code), created.error_message)
        self.topic_ids[name] = created.topic_id
        return created.topic_id

    def wait_served(self, topic: str, partitions: int = PARTITIONS) -> dict[int, dict]:
        """Until every Kafka broker's Metadata names a live leader for every partition of
        `topic`, under the id kraftwerk gave it; returns each broker's view."""
        views = {}
        for broker_id, node in self.brokers.items():
            def complete(view) -> bool:
                return (view is not None and sorted(view) == list(range(partitions))
                        and all(leader in BROKER_IDS for leader, _, _ in view.values()))
            views[broker_id] = poll(f"Kafka broker {broker_id} to serve every partition of {topic}",
                                    lambda node=node: served_partitions(node.address, topic), complete)
            assert served_topic_id(node.address, topic) == self.topic_ids[topic], broker_id
        return views


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    missing = server_missing()
    if missing is not None:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("kafka-peer")
    kraftwerk = LocalCluster(work, controllers=len(CONTROLLER_IDS), brokers=0, metadata_version=START_MV)
    brokers: dict[int, KafkaNode] = {}
    try:
        kraftwerk.bring_up()
        voters = quorum_voters((spec.node_id, spec.address) for spec in kraftwerk.controllers)
        for broker_id in BROKER_IDS:
            directory = work / f"kafka-{broker_id}"
            extra = {}
            if broker_id == JBOD_BROKER:
                extra["log.dirs"] = ",".join(str(directory / name) for name in JBOD_LOG_DIRS)
            config = KafkaNodeConfig(broker_id, lc.free_port_run(1), directory, voters, extra=extra)
            brokers[broker_id] = node = KafkaNode(config)
            node.format(kraftwerk.cluster_id)
        # Both JVMs start together: their start-ups overlap on the two cores.
        for node in brokers.values():
            node.start()
        for node in brokers.values():
            node.wait_ready()
        yield Peers(kraftwerk, brokers)
    finally:
        # Brokers first: their controlled shutdown asks the controllers.
        killed = stop_all(brokers.values())
        kraftwerk.stop_all()
    shutdown_problems = [e.describe() for node in brokers.values() for e in problems(node.new_entries())]
    if killed:
        shutdown_problems.append(f"Kafka brokers {killed} did not finish their controlled shutdown within "
                                 f"{STOP_TIMEOUT_S:.0f} s (killed)")
    assert not shutdown_problems, "Kafka brokers' shutdown:\n" + "\n".join(shutdown_problems)


@pytest.fixture(autouse=True)
def broker_logs_clean(peers):
    """After each test: no WARN/ERROR in the Kafka brokers' logs that kafka_nodes.BENIGN
    does not explain (a record they could not replay, an unexpected controller answer).
    A line written just after a test's last check shows at the next test, or at the
    module's teardown: it is never missed, only perhaps named one test late."""
    yield
    found = [e for node in peers.brokers.values() for e in problems(node.new_entries())]
    if found:
        pytest.fail("Kafka brokers logged problems:\n" + "\n".join(e.describe() for e in found), pytrace=False)


# --------------------------------------------------------------------------
# Producing and consuming with kafka-python
# --------------------------------------------------------------------------

def produce(peers: Peers, topic: str, values: list[bytes], **config) -> dict[int, int]:
    """Sends `values` (acks=all) and waits for every acknowledgement; returns how many
    records each partition took."""
    producer = KafkaProducer(bootstrap_servers=peers.bootstrap, acks="all", request_timeout_ms=CLIENT_TIMEOUT_MS,
                             max_block_ms=CLIENT_TIMEOUT_MS, client_id="kafka-peer-producer", **config)
    try:
        futures = [producer.send(topic, key=str(i).encode(), value=value) for i, value in enumerate(values)]
        producer.flush(timeout=WAIT_S)
        per_partition: dict[int, int] = {}
        for future in futures:
            metadata = future.get(timeout=WAIT_S)
            per_partition[metadata.partition] = per_partition.get(metadata.partition, 0) + 1
        return per_partition
    finally:
        producer.close(timeout=10)


def consume_all(peers: Peers, topic: str, expected: int, group: str) -> tuple[list[bytes], dict[int, int]]:
    return kafka_nodes.consume_all(peers.bootstrap, topic, expected, group, WAIT_S, CLIENT_TIMEOUT_MS + 5_000,
                                   "kafka-peer-consumer")


def payloads(stem: str, count: int) -> list[bytes]:
    return [f"{stem}-{i}".encode() for i in range(count)]


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

def test_brokers_registered_and_unfenced_with_their_features(peers):
    expected = {broker_id: node.address for broker_id, node in peers.brokers.items()}
    for controller in CONTROLLER_IDS:
        poll(f"kraftwerk controller {controller} to list brokers {BROKER_IDS} unfenced",
             lambda controller=controller: registered_brokers(peers.kraftwerk.address(controller)),
             lambda seen: seen == expected)

    for broker_id, node in peers.brokers.items():
        advertised = supported_features(api_versions(node.address))
        # Kafka 4.4 brokers support features kraftwerk has no use for (share.version,
        # streams.version, ...): the registration keeps them all.
        assert {MV, "share.version", "streams.version"} <= set(advertised), advertised
        for controller in CONTROLLER_IDS:
            spec = peers.kraftwerk.spec(controller)

            def registration(spec=spec, broker_id=broker_id):
                return latest_registrations(spec.metadata_dir).get(broker_id)
            record = poll(f"broker {broker_id}'s registration in controller {controller}'s log", registration,
                          lambda r: r is not None)
            registered = {f["name"]: (f["min_supported_version"], f["max_supported_version"])
                          for f in record["features"]}
            assert registered == advertised, (broker_id, controller)
            assert [(e["name"], e["host"], e["port"]) for e in record["end_points"]] == [
                ("PLAINTEXT", "127.0.0.1", node.config.port)]


def test_topic_created_through_kraftwerk_is_served_by_both_brokers(peers):
    topic = peers.unique("served")
    peers.create_topic(topic)
    views = peers.wait_served(topic)
    for broker_id, view in views.items():
        for partition, (leader, replicas, isr) in view.items():
            assert sorted(replicas) == sorted(BROKER_IDS), (broker_id, partition, replicas)
            assert leader in replicas and set(isr) <= set(replicas), (broker_id, partition, leader, isr)
    # Both brokers have the same image of the topic, and both lead some partition.
    assert views[BROKER_IDS[0]] == views[BROKER_IDS[1]]
    assert {leader for leader, _, _ in views[BROKER_IDS[0]].values()} == set(BROKER_IDS)


def produce_and_consume_all(peers: Peers, topic: str, **config) -> None:
    """RECORDS values produced to `topic` are read back by a consumer group exactly once
    each, and the group commits every partition's end."""
    values = payloads(topic, RECORDS)
    per_partition = produce(peers, topic, values, **config)
    assert sum(per_partition.values()) == RECORDS
    read, committed = consume_all(peers, topic, RECORDS, group=f"{topic}-group")
    assert sorted(read) == sorted(values)  # exactly once each: no duplicate from a retry
    assert committed == {p: per_partition.get(p, 0) for p in range(PARTITIONS)}


def test_produce_and_consume_group_without_idempotence(peers):
    topic = peers.unique("plain")
    peers.create_topic(topic)
    peers.wait_served(topic)
    produce_and_consume_all(peers, topic, enable_idempotence=False)


def test_idempotent_producer(peers):
    # The default kafka-python producer is idempotent: InitProducerId at a broker, which
    # asks the controller for a block of producer ids (AllocateProducerIds).
    topic = peers.unique("idempotent")
    peers.create_topic(topic)
    peers.wait_served(topic)
    produce_and_consume_all(peers, topic)


def test_a_broker_with_two_log_dirs_assigns_its_replicas_to_them(peers):
    jbod = peers.brokers[JBOD_BROKER]
    (single,) = (node for broker_id, node in peers.brokers.items() if broker_id != JBOD_BROKER)
    jbod_dirs = broker_directories(jbod)
    assert len(jbod_dirs) == len(JBOD_LOG_DIRS)
    (single_dir,) = broker_directories(single)

    topic = peers.unique("jbod")
    topic_id = uuid_to_string(peers.create_topic(topic))
    peers.wait_served(topic)

    # Where the JBOD broker keeps each partition: Kafka's <topic>-<partition> folder.
    def placed() -> dict[int, list[str]]:
        return {p: [d for d, path in jbod_dirs.items() if (path / f"{topic}-{p}").is_dir()]
                for p in range(PARTITIONS)}
    placement = poll(f"Kafka broker {JBOD_BROKER} to keep every partition of {topic} in one of its directories",
                     placed, lambda seen: all(len(dirs) == 1 for dirs in seen.values()))
    expected = {p: {JBOD_BROKER: dirs[0], single.node_id: single_dir} for p, dirs in placement.items()}

    # Every controller's image (its metadata log) names those directories: kraftwerk gave
    # the single-directory broker its directory at creation, and took the JBOD broker's
    # choices from its AssignReplicasToDirs.
    for controller in peers.live_controllers():
        spec = peers.kraftwerk.spec(controller)
        poll(f"controller {controller}'s image to name the real log directories of {topic}'s replicas",
             lambda spec=spec: partition_directories(spec.metadata_dir, topic_id),
             lambda seen: seen == expected)
    produce_and_consume_all(peers, topic, enable_idempotence=False)


def test_metadata_version_upgrade_reaches_the_brokers(peers):
    epochs = {}
    for broker_id, node in peers.brokers.items():
        level, epochs[broker_id] = broker_mv(node.address)
        assert level == metadata_version_from_name(START_MV).level, broker_id
    for target in UPGRADE_STEPS:
        wanted = metadata_version_from_name(target).level
        result = lc.run_cli("features", "upgrade", "--bootstrap-controller",
                            peers.kraftwerk.address(peers.leader()), "--metadata", target)
        assert result.returncode == 0, result.stderr or result.stdout
        for broker_id, node in peers.brokers.items():
            _, epoch = poll(f"Kafka broker {broker_id} to finalize metadata.version {target}",
                            lambda node=node: broker_mv(node.address),
                            lambda seen, wanted=wanted: seen[0] == wanted)
            assert epoch > epochs[broker_id], (broker_id, target, epoch, epochs[broker_id])
            epochs[broker_id] = epoch
    # A topic created at the new level is replayed by both brokers too.
    topic = peers.unique("upgraded")
    peers.create_topic(topic)
    peers.wait_served(topic)


def test_brokers_follow_a_new_leader_after_kill_9(peers):
    before = peers.unique("before-failover")
    peers.create_topic(before)
    peers.wait_served(before)
    first = payloads(before, RECORDS)
    produce(peers, before, first, enable_idempotence=False)

    expected = {broker_id: node.address for broker_id, node in peers.brokers.items()}
    killed = peers.leader()
    peers.kraftwerk.stop(killed, kill=True)
    try:
        new_leader = peers.leader()
        assert new_leader != killed

        after = peers.unique("after-failover")
        peers.create_topic(after)
        peers.wait_served(after)
        peers.wait_served(before)

        # The brokers heartbeat the new leader and stay unfenced.
        poll(f"the new leader {new_leader} to list both brokers unfenced",
             lambda: registered_brokers(peers.kraftwerk.address(new_leader)), lambda seen: seen == expected)

        second = payloads(f"{before}-later", RECORDS)
        produce(peers, before, second, enable_idempotence=False)
        read, _ = consume_all(peers, before, 2 * RECORDS, group=f"{before}-group")
        assert sorted(read) == sorted(first + second)

        produce(peers, after, payloads(after, RECORDS), enable_idempotence=False)
        read, _ = consume_all(peers, after, RECORDS, group=f"{after}-group")
        assert sorted(read) == sorted(payloads(after, RECORDS))
    finally:
        peers.kraftwerk.stop(killed)  # forget the dead process
        peers.kraftwerk.start(killed)

    # The restarted controller catches up: it knows a leader and lists both brokers.
    poll(f"restarted controller {killed} to name a live leader",
         lambda: quorum_leader(peers.kraftwerk.address(killed)), lambda leader: leader in peers.live_controllers())
    poll(f"restarted controller {killed} to list both brokers unfenced",
         lambda: registered_brokers(peers.kraftwerk.address(killed)), lambda seen: seen == expected)


def test_controlled_shutdown_and_restart_of_a_broker(peers):
    # After the failover test this runs under the new leader: a controlled shutdown is
    # heartbeats answered by it (wantShutDown until the controller lets the broker go).
    topic = peers.unique("restart")
    peers.create_topic(topic)
    peers.wait_served(topic)
    first = payloads(topic, RECORDS)
    produce(peers, topic, first, enable_idempotence=False)

    stopped, stays = peers.brokers[BROKER_IDS[0]], peers.brokers[BROKER_IDS[1]]
    assert stopped.stop(), f"Kafka broker {stopped.node_id} did not finish its controlled shutdown"
    leader = peers.kraftwerk.address(peers.leader())
    poll(f"the leader to drop broker {stopped.node_id} from the unfenced brokers",
         lambda: registered_brokers(leader), lambda seen: seen == {stays.node_id: stays.address})

    def moved(view) -> bool:
        return (view is not None and len(view) == PARTITIONS
                and all(leader_id == stays.node_id and stopped.node_id not in isr for leader_id, _, isr in view.values()))
    poll(f"every partition of {topic} led by {stays.node_id} without {stopped.node_id} in its ISR",
         lambda: served_partitions(stays.address, topic), moved)

    stopped.start()
    stopped.wait_ready()
    expected = {broker_id: node.address for broker_id, node in peers.brokers.items()}
    poll("both brokers unfenced again", lambda: registered_brokers(leader), lambda seen: seen == expected)

    # The restarted broker catches up as a follower and the leader brings it back into the
    # ISR (AlterPartition through kraftwerk).
    def whole(view) -> bool:
        return (view is not None and len(view) == PARTITIONS
                and all(sorted(isr) == sorted(BROKER_IDS) for _, _, isr in view.values()))
    for node in peers.brokers.values():
        poll(f"Kafka broker {node.node_id} to list both replicas in the ISR of every partition of {topic}",
             lambda node=node: served_partitions(node.address, topic), whole)

    second = payloads(f"{topic}-later", RECORDS)
    produce(peers, topic, second, enable_idempotence=False)
    read, _ = consume_all(peers, topic, 2 * RECORDS, group=f"{topic}-group")
    assert sorted(read) == sorted(first + second)
