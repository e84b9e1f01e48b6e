"""Runs Apache Kafka 4.4.0's own server (`kafka.Kafka`) as child processes beside a
kraftwerk quorum: real Kafka brokers whose controllers are kraftwerk's.

Owns: `KafkaNodeConfig` (one node's id, roles, port, directory, voters and extra
properties, and the properties file they make), `KafkaNode` (one process: format its
directory with Kafka's own `kafka.tools.StorageTool`, start, wait until it answers
ApiVersions, stop, kill -9, read its log), `api_versions` (one bounded ApiVersions
exchange with any node), the log reader (`parse_log`, `LogEntry`) and `BENIGN`, the one
list of the WARN/ERROR lines a Kafka node may print here without pointing at a problem,
each with its reason (`problems` is every other WARN/ERROR).

Nothing of Kafka's is in this repository: `scripts/setup --test`
(scripts/setup.d/kafka-jars.sh) resolves interop/pom.xml's `broker-catalog` profile
(org.apache.kafka:kafka_2.13 and its dependencies) into ~/.m2 and writes the classpath to
interop/target/server-classpath.txt. `server_missing()` says why it cannot run here.

Rules kept here: every wait is bounded (format, start, readiness, stop); each process has
its own session, its own data directory and properties file under the directory it is
given, its own port (the caller reserves it below the ephemeral range with
cli.local_cluster.free_port_run) and a bounded heap; a process is never left behind
(`stop` ends with SIGKILL when SIGTERM was not enough). Built for brokers
(process.roles=broker) and controllers (process.roles=controller, one CONTROLLER
listener, static voters), which the benchmarks run as kraftwerk's peer.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import trio
from kafka import KafkaConsumer, TopicPartition

from server.client import ClientError, KafkaClient
from interop.kafka_tools import REPO_ROOT, classpath_missing  # tests/ is the import root (as e2e.helpers)

SERVER_CLASSPATH_FILE = REPO_ROOT / "interop" / "target" / "server-classpath.txt"
SERVER_COMPONENT = "Apache Kafka's server (org.apache.kafka:kafka_2.13 4.4.0, interop/pom.xml profile broker-catalog)"

KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
HEAP = "-Xmx384m"
JVM_OPTIONS = (
    HEAP,
    # One GC thread and no concurrent collector: several JVMs share two cores with the
    # kraftwerk processes, and a test's heap is small.
    "-XX:+UseSerialGC",
    # slf4j-simple (on the classpath) writes to stderr; a time on each line lets a person
    # line a broker's log up with the kraftwerk controllers' JSON logs.
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
)
FORMAT_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 5.0
POLL_S = 0.25  # another process's readiness has no event to wait on: asking again is all

# Properties every broker here gets (a test's `extra` overrides them). Why each differs
# from Kafka's default:
BROKER_DEFAULTS = {
    # Two brokers: Kafka's internal topics default to 3 replicas, which two cannot place.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # 5 instead of 50 partitions for __consumer_offsets / __transaction_state: the same
    # records through kraftwerk, a tenth of them, so a test's group loads quickly.
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    # A group forms as soon as its members join (default: wait 3 s for more).
    "group.initial.rebalance.delay.ms": "0",
    # A topic exists only when created through the controllers, never by a client's
    # Metadata request naming it.
    "auto.create.topics.enable": "false",
    # Heartbeat the controllers every 500 ms (default 2 s): unfencing and following a new
    # leader take a heartbeat or two.
    "broker.heartbeat.interval.ms": "500",
    # Fewer threads than Kafka's production defaults, for two small brokers on two cores.
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
}


class KafkaNodeError(Exception):
    """A Kafka process could not be formatted, started or stopped; the message says
    what it printed."""


def server_missing() -> str | None:
    """Why Kafka's server cannot run here (a reason naming the component), or None."""
    return classpath_missing(SERVER_CLASSPATH_FILE, SERVER_COMPONENT)


def java_command(main_class: str, *args: str) -> list[str]:
    classpath = SERVER_CLASSPATH_FILE.read_text().strip()
    return ["java", *JVM_OPTIONS, "-cp", classpath, main_class, *args]


def quorum_voters(voters: Iterable[tuple[int, str]]) -> str:
    """controller.quorum.voters for (node id, "host:port") pairs."""
    return ",".join(f"{node_id}@{address}" for node_id, address in voters)


@dataclass(frozen=True)
class KafkaNodeConfig:
    """One Kafka node. `directory` holds its properties file, its log and its data."""

    node_id: int
    port: int  # the node's one listener (PLAINTEXT for a broker), on 127.0.0.1
    directory: Path
    quorum_voters: str  # controller.quorum.voters
    roles: tuple[str, ...] = ("broker",)
    extra: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def properties(self) -> dict[str, str]:
        if self.roles == ("controller",):
            # A Kafka controller: its one listener is the CONTROLLER listener its voters
            # string names, which admin clients reach with bootstrap.controllers.
            properties = {
                "process.roles": "controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": self.quorum_voters,
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
                "listeners": f"CONTROLLER://{self.address}",
                "log.dirs": str(self.data_dir),
            }
            properties.update(self.extra)
            return properties
        if self.roles != ("broker",):
            raise ValueError(f"process.roles={','.join(self.roles)} is not built (only broker or controller)")
        listener = f"PLAINTEXT://{self.address}"
        properties = {
            "process.roles": ",".join(self.roles),
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "listeners": listener,
            "advertised.listeners": listener,
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **BROKER_DEFAULTS,
        }
        properties.update(self.extra)
        return properties

    def write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.properties().items()]
        self.properties_path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------
# ApiVersions: the one probe that says a Kafka node serves requests
# --------------------------------------------------------------------------

async def _api_versions(address: str, timeout_s: float):
    host, port = address.rsplit(":", 1)
    with trio.fail_after(timeout_s):
        async with await KafkaClient.connect(host, int(port), client_id="kraftwerk-kafka-peer") as client:
            return client.api_versions_response


def api_versions(address: str, timeout_s: float = PROBE_TIMEOUT_S):
    """One ApiVersions exchange (the newest version both sides speak), bounded by
    `timeout_s`. Raises ClientError (unreachable, refused, undecodable) or
    trio.TooSlowError."""
    return trio.run(_api_versions, address, timeout_s)


def finalized_features(response) -> dict[str, int]:
    """An ApiVersions answer's finalized features: name -> level."""
    return {f.name: f.max_version_level for f in response.finalized_features or ()}


def supported_features(response) -> dict[str, tuple[int, int]]:
    """An ApiVersions answer's supported features: name -> (min, max)."""
    return {f.name: (f.min_version, f.max_version) for f in response.supported_features or ()}


# --------------------------------------------------------------------------
# The log: slf4j-simple lines ("HH:mm:ss.SSS [thread] LEVEL logger - message")
# --------------------------------------------------------------------------

_ENTRY = re.compile(r"^(?:\d\d:\d\d:\d\d\.\d{3} )?\[(?P<thread>[^\]]*)\] (?P<level>TRACE|DEBUG|INFO|WARN|ERROR) "
                    r"(?P<logger>\S+) - (?P<message>.*)$")


@dataclass(frozen=True)
class LogEntry:
    """One log event: its first line and the lines after it (a stack trace, a config dump)."""

    node_id: int
    level: str
    logger: str
    thread: str
    message: str
    line: str
    detail: tuple[str, ...] = ()

    def describe(self, detail_lines: int = 2) -> str:
        shown = [f"[kafka {self.node_id}] {self.line}"]
        shown += [f"    {line.strip()}" for line in self.detail[:detail_lines]]
        return "\n".join(shown)


def parse_log(node_id: int, text: str) -> list[LogEntry]:
    """The entries of a log text. Lines before the first entry (the tail of an entry
    read in an earlier chunk) are dropped."""
    entries: list[LogEntry] = []
    detail: list[str] = []
    head = None
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match is None:
            if head is not None:
                detail.append(line)
            continue
        if head is not None:
            entries.append(LogEntry(node_id, **head, detail=tuple(detail)))
        head = {"level": match["level"], "logger": match["logger"], "thread": match["thread"],
                "message": match["message"], "line": line}
        detail = []
    if head is not None:
        entries.append(LogEntry(node_id, **head, detail=tuple(detail)))
    return entries


@dataclass(frozen=True)
class Benign:
    """A WARN/ERROR a Kafka node prints here without pointing at a problem."""

    level: str
    logger: str  # the logger's class name (the end of the logger's name)
    message: re.Pattern[str]
    reason: str
    detail: re.Pattern[str] | None = None  # searched in the entry's first detail line (its exception)

    def matches(self, entry: LogEntry) -> bool:
        if entry.level != self.level or entry.logger.rsplit(".", 1)[-1] != self.logger:
            return False
        if self.message.search(entry.message) is None:
            return False
        return self.detail is None or (bool(entry.detail) and self.detail.search(entry.detail[0]) is not None)


# The one list of known-benign lines. Anything else at WARN or ERROR is a problem: a
# metadata record the broker could not replay, a controller answer it did not expect.
BENIGN: tuple[Benign, ...] = (
    Benign("WARN", "NetworkClient",
           re.compile(r"Connection to node -?\d+ \(\S+\) could not be established\. Node may not be available\."),
           "a node that is down refuses connections: the kraftwerk controller a test killed (the brokers' Raft "
           "client and controller channels try it until they learn the new leader), or the other broker while "
           "it is stopped (a test's restart, the module's end)"),
    Benign("WARN", "ReplicaFetcherThread", re.compile(r"^\[ReplicaFetcher .*\] Error in response for fetch request"),
           "the other broker (the partition leader) stopped while a replica fetch was in flight (a test's "
           "restart, the module's end)",
           detail=re.compile(r"^java\.io\.IOException: Connection to (\d+ was disconnected before the response "
                             r"was read|\S+ \(id: \d+ .*\) failed\.)")),
    Benign("WARN", "ReplicaFetcherThread",
           re.compile(r"Received UNKNOWN_TOPIC_ID from the leader for partition \S+\. This error may be returned "
                      r"transiently when the partition is being created or deleted"),
           "a follower learned of a new partition before its leader had created it locally (both brokers replay "
           "the same PartitionRecord at their own pace); Kafka's fetcher retries and says it is transient"),
    Benign("WARN", "ReplicaFetcherThread", re.compile(r"^\[ReplicaFetcher .*\] Partition \S+ marked as failed$"),
           "a follower's fetch reached a leader that had already replayed a leader-epoch bump (a leadership move "
           "on controlled shutdown): Kafka answers FENCED_LEADER_EPOCH, the fetcher logs 'has an older epoch ... "
           "Will await the new LeaderAndIsr state' at INFO and parks the partition with this WARN until its own "
           "metadata replay resumes it. Every other path to this WARN logs an ERROR first, which stays a problem"),
)


def problems(entries: Iterable[LogEntry], benign: Iterable[Benign] = BENIGN) -> list[LogEntry]:
    """The WARN and ERROR entries that no `benign` pattern explains."""
    allowed = tuple(benign)
    return [e for e in entries if e.level in ("WARN", "ERROR") and not any(b.matches(e) for b in allowed)]


# --------------------------------------------------------------------------
# One Kafka process
# --------------------------------------------------------------------------

class KafkaNode:
    """One Kafka server process for `config`: format, start, wait_ready, stop, kill."""

    def __init__(self, config: KafkaNodeConfig) -> None:
        self.config = config
        self.process: subprocess.Popen | None = None
        self._log_handle = None
        self._read_up_to = 0  # bytes of the log already returned by new_entries

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def address(self) -> str:
        return self.config.address

    def format(self, cluster_id: str, *extra_args: str) -> None:
        """`kafka-storage.sh format -t CLUSTER_ID -c FILE`: writes meta.properties (and
        Kafka's bootstrap checkpoint, which a broker never reads) into the data dir."""
        self.config.write()
        argv = java_command(STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(self.config.properties_path),
                            *extra_args)
        output = self.config.directory / "format.log"
        try:
            with open(output, "w") as handle:
                done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, timeout=FORMAT_TIMEOUT_S,
                                      cwd=self.config.directory)
        except subprocess.TimeoutExpired:
            raise KafkaNodeError(f"formatting Kafka node {self.node_id} took over {FORMAT_TIMEOUT_S:.0f} s; "
                                 f"see {output}") from None
        if done.returncode != 0:
            raise KafkaNodeError(f"formatting Kafka node {self.node_id} failed (exit {done.returncode}): "
                                 f"{_tail(output)}")

    def start(self) -> None:
        """Starts `kafka.Kafka FILE` (returns at once; see wait_ready)."""
        if self.alive():
            raise KafkaNodeError(f"Kafka node {self.node_id} is already running")
        self.config.write()
        self._close_log()
        self._log_handle = open(self.config.log_path, "ab")
        self.process = subprocess.Popen(java_command(KAFKA_MAIN, str(self.config.properties_path)),
                                        stdout=self._log_handle, stderr=subprocess.STDOUT,
                                        cwd=self.config.directory, start_new_session=True)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until the node answers ApiVersions on its port. A broker opens its listener
        only once registered, caught up with the metadata log and unfenced."""
        deadline = time.monotonic() + timeout_s
        last_error = "no answer yet"
        while True:
            if not self.alive():
                raise KafkaNodeError(f"Kafka node {self.node_id} exited with {self.exit_code()} before it was "
                                     f"ready:\n{_tail(self.config.log_path)}")
            try:
                api_versions(self.address, timeout_s=PROBE_TIMEOUT_S)
                return
            except (ClientError, OSError, trio.TooSlowError) as exc:
                last_error = str(exc) or type(exc).__name__
            if time.monotonic() > deadline:
                raise KafkaNodeError(f"Kafka node {self.node_id} not ready after {timeout_s:.0f} s "
                                     f"({last_error}):\n{_tail(self.config.log_path)}")
            time.sleep(POLL_S)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def terminate(self) -> None:
        """Sends SIGTERM (Kafka's shutdown hook: a broker's controlled shutdown) and
        returns at once; `stop` waits."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM, then SIGKILL after `timeout_s`. True when the process ended on its
        own (a broker whose controlled shutdown the controllers never grant needs the
        SIGKILL)."""
        on_its_own = True
        if self.alive():
            self.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                on_its_own = False
                self._kill_group()
        self._close_log()
        return on_its_own

    def kill(self) -> None:
        """kill -9: no shutdown at all."""
        if self.alive():
            self._kill_group()
        self._close_log()

    def _kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=KILL_TIMEOUT_S)

    def _close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def new_entries(self) -> list[LogEntry]:
        """The log entries written since the last call (complete lines only)."""
        path = self.config.log_path
        if not path.exists():
            return []
        with open(path, "rb") as handle:
            handle.seek(self._read_up_to)
            data = handle.read()
        complete = data.rfind(b"\n") + 1
        self._read_up_to += complete
        return parse_log(self.node_id, data[:complete].decode(errors="replace"))


def stop_all(nodes: Iterable[KafkaNode], timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    """Stops every node in parallel (SIGTERM to all, one shared deadline, then SIGKILL);
    returns the ids of the nodes that needed the SIGKILL."""
    nodes = list(nodes)
    for node in nodes:
        node.terminate()
    deadline = time.monotonic() + timeout_s
    return [node.node_id for node in nodes if not node.stop(timeout_s=max(0.0, deadline - time.monotonic()))]


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --------------------------------------------------------------------------
# Reading a topic back as a consumer group
# --------------------------------------------------------------------------

def consume_all(bootstrap: str, topic: str, expected: int, group: str, timeout_s: float,
                request_timeout_ms: int, client_id: str) -> tuple[list[bytes], dict[int, int]]:
    """A consumer group (one member) reads `topic` from the beginning until it has
    `expected` records (bounded by `timeout_s`), commits, and returns the values and the
    committed offset per partition as the group coordinator answers it."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, request_timeout_ms=request_timeout_ms, client_id=client_id)
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        assert len(values) >= expected, f"group {group} read {len(values)} of {expected} records of {topic}"
        consumer.commit()
        partitions = consumer.partitions_for_topic(topic) or set()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in sorted(partitions)}
        return values, committed
    finally:
        consumer.close()
