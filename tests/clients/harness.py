"""The client-matrix harness: one driver process per (client, path), the scenario it is
put through, and the per-call outcomes it records.

Owns: `DriverProcess` (a driver of tests/clients/PROTOCOL.md as a child process, read
line by line with a bounded wait, always killed at the end), `MatrixCluster` (the
module's cluster: finding the controller leader, kill -9, restart, changing
metadata.version with our own CLI), the scenario (`run_scenario`: the calls of each
phase with names unique to (client, path, phase) and the checks of their results) and
`Outcome`, what one call did, as tools/gen_client_matrix.py renders it.

Rules: every wait is bounded; nothing sleeps to synchronise (results of writes are read
back at once, with no polling: read-your-writes on whichever node answers is part of
what is checked, and a lagging read-back is the server's failure to show); only in the
failover phase is a retriable error retried, within FAILOVER_DEADLINE_S, and the
retries are counted. The one wait between calls: after a metadata.version change
(whose propagation is asynchronous by design, KIP-778) the next phase starts once every
live node has the new level and every broker has renegotiated at it, polled with our
own client and the brokers' logs, as an operator's test would.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import trio

from cli import local_cluster as lc
from cli.upgrade_story import LocalCluster, StoryError, log_events, node_view
from server.client import ClientError, KafkaClient
from server.controller.features import metadata_version_from_level
from server.net.listener import STALE_CLOSE_LINGER_S
from server.observability import Event

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_MS = 15_000
# A driver answers within its call's timeout; the margin covers process scheduling.
ANSWER_MARGIN_S = 10.0
FAILOVER_DEADLINE_S = 20.0
# Each call of the failover phase: a cluster that has failed over answers in well under a
# second, and a client stuck on the dead leader must not hold the matrix for 15 s a call.
FAILOVER_CALL_TIMEOUT_MS = 5_000
RETRY_PAUSE_S = 0.2  # between retries of one call in the failover phase: nothing to wait on but time
# Before a call refused for a version its connection was told before a downgrade is asked
# again: long enough idle for the node to close that connection (server/net/listener.py).
GATED_RETRY_PAUSE_S = 2 * STALE_CLOSE_LINGER_S
GATED_RETRIES = 3
CLUSTER_WAIT_S = 60.0
POLL_S = 0.05
DESCRIBE_QUORUM, CREATE_TOPICS, METADATA = 55, 19, 3
NONE, TOPIC_ALREADY_EXISTS = 0, 36
DEFAULT_RETENTION_MS = "604800000"

MV_BASE, MV_UPGRADED, MV_UNSAFE_STEP = 19, 21, 20  # 3.7-IV4, 3.9-IV0, 3.8-IV0
PHASES = ("before", "after upgrade", "after downgrade", "after failover")
PATHS = ("broker", "controller")
CONTROLLERS, BROKERS = (1, 2, 3), (101, 102)
# The API behind a driver call whose version a downgrade may gate (Step.retry_gated).
GATED_API_NAMES = {"update_features": "UpdateFeatures"}


class DriverError(Exception):
    """The driver process broke the protocol: it died, printed garbage or did not answer."""


@dataclass
class Answer:
    status: str  # ok | error | unsupported
    result: dict = field(default_factory=dict)
    error: str = ""
    retriable: bool = False
    reason: str = ""


class DriverProcess:
    """One driver child process; `call` sends one call and waits for its answer."""

    def __init__(self, command: list[str], stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "w")
        self.stderr_path = stderr_path
        self.process = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, text=True, bufsize=1, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="driver-stdout", daemon=True)
        self._reader.start()
        self._next_id = 0
        self.ready: dict = {}

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)  # EOF: the driver exited

    def _next_line(self, timeout_s: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise DriverError(f"no answer within {timeout_s:.0f} s; see {self.stderr_path}") from None
        if line is None:
            raise DriverError(f"driver exited with {self.process.wait(timeout=5)}: {self.stderr_tail()}")
        try:
            return json.loads(line)
        except ValueError:
            raise DriverError(f"not a JSON line on stdout: {line[:200]!r}") from None

    def stderr_tail(self, lines: int = 15) -> str:
        self._stderr.flush()
        text = self.stderr_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait_ready(self) -> dict:
        self.ready = self._next_line(START_TIMEOUT_S)
        if not self.ready.get("ready"):
            raise DriverError(f"driver not ready: {self.ready.get('error')}; {self.stderr_tail()}")
        return self.ready

    def call(self, name: str, args: dict | None = None) -> Answer:
        self._next_id += 1
        call_id = self._next_id
        args = dict(args or {})
        timeout_ms = args.setdefault("timeout_ms", CALL_TIMEOUT_MS)
        try:
            self.process.stdin.write(json.dumps({"id": call_id, "call": name, "args": args}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise DriverError(f"driver gone ({exc}): {self.stderr_tail()}") from None
        message = self._next_line(timeout_ms / 1000 + ANSWER_MARGIN_S)
        if message.get("id") != call_id:
            raise DriverError(f"answer for id {message.get('id')} while waiting for {call_id}")
        return Answer(status=message["status"], result=message.get("result") or {},
                      error=str(message.get("error", "")), retriable=bool(message.get("retriable")),
                      reason=str(message.get("reason", "")))

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                try:
                    self.process.stdin.write(json.dumps({"id": 0, "call": "close"}) + "\n")
                    self.process.stdin.close()
                    self.process.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(timeout=10)
            self._stderr.close()


# -- the cluster -----------------------------------------------------------------------

async def _describe_quorum(address: str) -> int:
    host, port = address.rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port)) as client:
        reply = await client.call(DESCRIBE_QUORUM, {"topics": [{"topic_name": "__cluster_metadata",
                                                                "partitions": [{"partition_index": 0}]}]})
        return reply.topics[0].partitions[0].leader_id


async def _create_topic(address: str, name: str, partitions: int, replication_factor: int,
                        configs: dict[str, str]) -> int:
    host, port = address.rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port)) as client:
        reply = await client.call(CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": partitions,
                                                               "replication_factor": replication_factor,
                                                               "configs": [{"name": k, "value": v}
                                                                           for k, v in configs.items()]}],
                                                  "timeout_ms": CALL_TIMEOUT_MS})
        return reply.topics[0].error_code


async def _topic_names(address: str) -> set[str]:
    host, port = address.rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port)) as client:
        reply = await client.call(METADATA, {"topics": None})
        return {t.name for t in reply.topics}


class MatrixCluster:
    """The module's cluster, with the operations the scenario needs besides the client."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id

    def bootstrap(self, path: str) -> str:
        return self.cluster.broker_addresses if path == "broker" else self.cluster.controller_addresses

    def live_controllers(self) -> list[int]:
        return [c for c in CONTROLLERS if self.cluster.alive(c)]

    def leader(self) -> int:
        """The controller leader as the live controllers see it (asked with our own client)."""
        found: list[int] = []

        def known() -> bool:
            for node in self.live_controllers():
                leader = trio.run(_describe_quorum, self.cluster.address(node))
                if leader in self.live_controllers():
                    found.append(leader)
                    return True
            return False
        self.cluster.wait_until("a live controller leader", known, timeout_s=CLUSTER_WAIT_S)
        return found[-1]

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        """With our own client at the leader, for a client that cannot create topics; then
        until every broker lists it (another client's write: no read-your-writes to check)."""
        codes: list[int] = []

        def created() -> bool:
            # Right after a failover the leader we found may have lost its leadership (NOT_CONTROLLER): ask again.
            codes.append(trio.run(_create_topic, self.cluster.address(self.leader()), name, partitions,
                                  replication_factor, configs))
            return codes[-1] in (NONE, TOPIC_ALREADY_EXISTS)
        self.cluster.wait_until(f"our own client to create {name} (error codes {codes})", created,
                                timeout_s=CLUSTER_WAIT_S)
        self.cluster.wait_until(f"every broker to list {name}", lambda: all(
            name in trio.run(_topic_names, self.cluster.address(b)) for b in BROKERS), timeout_s=CLUSTER_WAIT_S)

    def kill(self, node_id: int) -> None:
        self.cluster.stop(node_id, kill=True)

    def gated_count(self, api_name: str) -> int:
        """How often any node has answered `api_name` UNSUPPORTED_VERSION for a version
        the finalized metadata.version gates away (its log's gated-version events)."""
        nodes = [*CONTROLLERS, *BROKERS]
        return sum(1 for node in nodes for event in log_events(self.cluster.spec(node).log_path, Event.GATED_VERSION)
                   if event.get("api") == api_name)

    def restart(self, node_id: int) -> None:
        self.cluster.start(node_id)
        self.cluster.wait_until(f"controller {node_id} to rejoin with a leader", lambda: self.leader() > 0,
                                timeout_s=CLUSTER_WAIT_S)

    def metadata_version(self) -> int:
        """The level as the controller leader has it: a controller just restarted may not
        have replayed the log yet, and its older image would start a change nobody needs."""
        for _ in range(3):
            try:
                return node_view(self.cluster.address(self.leader())).finalized.get("metadata.version", 0)
            except (ClientError, OSError):
                continue  # the leader changed under us: find it again
        return self.cluster.any_controller_view().finalized.get("metadata.version", 0)

    def renegotiation_mark(self) -> tuple[int, dict[int, int]]:
        """The level now and how many times each broker has renegotiated so far (taken
        before a change; see wait_changed)."""
        return self.metadata_version(), {b: len(self.cluster.renegotiations(b)) for b in BROKERS}

    def wait_changed(self, level: int, since: dict[int, int]) -> None:
        """metadata.version changes propagate asynchronously (KIP-778): as an operator's
        test does, the next phase starts once every live node's image has `level` and
        every broker has renegotiated with the controllers at it after `since`."""
        self.cluster.wait_metadata_version(level)
        name = str(metadata_version_from_level(level))

        def renegotiated() -> bool:
            return all(any(event.get("metadata_version") == name
                           for event in self.cluster.renegotiations(b)[since.get(b, 0):])
                       for b in BROKERS if self.cluster.alive(b))
        self.cluster.wait_until(f"every broker to renegotiate at {name}", renegotiated, timeout_s=CLUSTER_WAIT_S)

    def set_metadata_version(self, level: int, unsafe: bool = False,
                             since: tuple[int, dict[int, int]] | None = None) -> None:
        """Changes metadata.version with our own CLI (for clients that cannot; nothing to
        do when a client did), then waits as wait_changed says. `since`: the
        renegotiation_mark from before the first change of this step."""
        level_before, counts = self.renegotiation_mark() if since is None else since
        current = self.metadata_version()
        if current != level:
            verb = "upgrade" if level > current else "downgrade"
            argv = ["features", verb, "--bootstrap-controller", self.cluster.address(self.leader()),
                    "--metadata", str(level)]
            if unsafe:
                argv.append("--unsafe")
            result = lc.run_cli(*argv)
            if result.returncode != 0:
                raise StoryError(f"kraftwerk {' '.join(argv)} failed: "
                                 f"{result.stderr.strip() or result.stdout.strip()}")
        elif level_before == level:
            # No change since the mark: nothing to renegotiate.
            self.cluster.wait_metadata_version(level)
            return
        self.wait_changed(level, counts)

    def reset(self) -> None:
        """Every controller running and metadata.version back at the base level."""
        for node in CONTROLLERS:
            if not self.cluster.alive(node):
                self.cluster.stop(node)  # forget the dead process
                self.restart(node)
        if self.metadata_version() != MV_BASE:
            self.set_metadata_version(MV_BASE, unsafe=True)
        else:
            self.cluster.wait_metadata_version(MV_BASE)
        self.cluster.wait_unfenced(list(BROKERS))


# -- outcomes ---------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one row (a call, with its variant) did in one phase."""

    row: str
    phase: str
    status: str  # ok | error | unsupported
    detail: str = ""  # the error, the failed check or the unsupported reason
    retries: int = 0
    elapsed_ms: int = 0  # for reading a slow run; not part of the table
    note: str = ""  # an ok answer missing a field the driver declared absent: why

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class Step:
    row: str  # the table row: the protocol call, with a variant in parentheses
    call: str
    args: dict
    check: Callable[[dict], str | None] = lambda result: None  # a mismatch, or None
    # An error that is the right answer (a read of something just deleted).
    accept_error: Callable[[str], bool] = lambda error: False
    # In the failover phase, a result that fails its check is asked again as well (a
    # follower names the dead leader until the election): the answer must become right.
    retry_mismatch: bool = False
    # A read-back of this call's write: left out when the client cannot make that call.
    reads_back: str | None = None
    # Right after a downgrade: a client may still use a version its connection was told
    # before it, which a node answers UNSUPPORTED_VERSION (docs/kip-differences.md) and
    # closes once the connection idles. With a node's log showing it gated this API, the
    # call is asked again after such an idle pause, on the client's new connection.
    retry_gated: bool = False


def expect(what: str, got, wanted) -> str | None:
    return None if got == wanted else f"{what}: expected {wanted!r}, got {got!r}"


def scram_not_found(error: str) -> bool:
    """Kafka answers a described user without credentials with RESOURCE_NOT_FOUND; a client
    that exposes only the message shows ours ("attemptToDescribeUserThatDoesNotExist")."""
    folded = error.lower().replace(" ", "").replace("_", "")
    return "resourcenotfound" in folded or "doesnotexist" in folded


def safe_name(*parts: str) -> str:
    return "-".join(p.replace(" ", "-").replace("_", "-") for p in parts).lower()


class Scenario:
    """The calls of the matrix for one driver on one path."""

    def __init__(self, driver_name: str, path: str, cluster: MatrixCluster, driver: DriverProcess,
                 unsupported: dict[str, str], record: Callable[[Outcome], None],
                 absent_fields: dict[str, dict[str, str]] | None = None) -> None:
        self.driver_name = driver_name
        self.absent_fields = absent_fields or {}
        self.path = path
        self.cluster = cluster
        self.driver = driver
        self.unsupported = unsupported
        self.record = record
        self.outcomes: list[Outcome] = []

    # -- one step ----------------------------------------------------------------------
    def run_step(self, phase: str, step: Step, retry_until: float | None = None) -> Answer:
        """One call; with `retry_until` (a time.monotonic() deadline, failover phase only) a
        retriable error is asked again until then, and the retries are counted."""
        retries = gated_retries = 0
        started = time.monotonic()
        gated_before = self.cluster.gated_count(GATED_API_NAMES[step.call]) if step.retry_gated else 0
        while True:
            args = step.args if retry_until is None else {"timeout_ms": FAILOVER_CALL_TIMEOUT_MS, **step.args}
            answer = self.driver.call(step.call, args)
            mismatch = step.check(answer.result) if answer.status == "ok" else None
            if (step.retry_gated and answer.status == "error" and "UNSUPPORTED_VERSION" in answer.error
                    and gated_retries < GATED_RETRIES
                    and self.cluster.gated_count(GATED_API_NAMES[step.call]) > gated_before):
                retries += 1
                gated_retries += 1
                time.sleep(GATED_RETRY_PAUSE_S)
                continue
            again = (answer.status == "error" and answer.retriable) or (mismatch and step.retry_mismatch)
            if not (again and retry_until is not None and time.monotonic() < retry_until):
                break
            retries += 1
            time.sleep(RETRY_PAUSE_S)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        if answer.status == "ok":
            outcome = Outcome(step.row, phase, "error" if mismatch else "ok", mismatch or "", retries, elapsed_ms)
            absent = self.absent_fields.get(step.call, {})
            missing = [key for key in absent if answer.result.get(key) is None]
            if not mismatch and missing:
                outcome.note = "; ".join(absent[key] for key in missing)
        elif answer.status == "unsupported":
            outcome = Outcome(step.row, phase, "unsupported", answer.reason, retries, elapsed_ms)
        elif step.accept_error(answer.error):
            outcome = Outcome(step.row, phase, "ok", f"answered {answer.error}", retries, elapsed_ms)
        else:
            outcome = Outcome(step.row, phase, "error", answer.error, retries, elapsed_ms)
        self.outcomes.append(outcome)
        self.record(outcome)
        return answer

    # -- the calls of one phase --------------------------------------------------------
    def broker_resource(self) -> str:
        """A BROKER config resource the client can reach on its path: a broker through the
        brokers; through the controllers a live controller (they answer for their own id)."""
        if self.path == "broker":
            return str(BROKERS[0])
        return str(self.cluster.live_controllers()[0])

    def phase_steps(self, phase: str, level: int) -> list[Step]:
        prefix = safe_name("mx", self.driver_name, self.path[0], phase)
        topic, user, scram_user = f"{prefix}-t", f"{prefix}-quota", f"{prefix}-scram"
        principal = f"User:{prefix}-acl"
        node = self.broker_resource()
        brokers = list(BROKERS)

        def cluster_check(result):
            ids = result.get("broker_ids")
            cluster_id = result.get("cluster_id")
            if cluster_id is None and "cluster_id" in self.absent_fields.get("describe_cluster", {}):
                pass  # declared: the client does not expose it (drivers.py says why)
            elif cluster_id != self.cluster.cluster_id:
                # Not the id itself: it changes with every run, the table must not.
                return f"cluster_id: expected the cluster's id, got {cluster_id!r}"
            if self.path == "broker":
                return expect("broker_ids", ids, brokers)
            # Through the controllers (docs/kip-differences.md): DescribeCluster lists the
            # controllers, then the unfenced brokers; Metadata lists the controllers only.
            # A client deriving describe_cluster from either sees every controller.
            found = set(ids or ())
            if not set(CONTROLLERS) <= found:
                return f"broker_ids: expected the controllers {list(CONTROLLERS)} among them, got {ids!r}"
            if not (found == set(CONTROLLERS) or set(brokers) <= found <= set(brokers) | set(CONTROLLERS)):
                return (f"broker_ids: expected the controllers (Metadata) or the controllers and "
                        f"{brokers} (DescribeCluster), got {ids!r}")
            return None

        def features_check(result):
            finalized = result.get("finalized", {}).get("metadata.version")
            supported = result.get("supported", {}).get("metadata.version")
            if supported is None or supported[1] < MV_UPGRADED:
                return f"supported metadata.version: expected a max >= {MV_UPGRADED}, got {supported!r}"
            return expect("finalized metadata.version", finalized, level)

        def quorum_check(result):
            if result.get("leader_id") not in self.cluster.live_controllers():
                return f"leader_id: expected one of {self.cluster.live_controllers()}, got {result.get('leader_id')!r}"
            return expect("voters", result.get("voters"), list(CONTROLLERS))

        def has_topic(present):
            def check(result):
                topics = result.get("topics", [])
                if (topic in topics) != present:
                    return f"list_topics: {topic} {'missing' if present else 'still listed'}"
                return None
            return check

        def incremental_check(result):
            configs = result.get("configs", {})
            # A deleted key reads back as its default (or absent, as some clients report it).
            if configs.get("retention.ms") not in (None, DEFAULT_RETENTION_MS):
                return f"retention.ms: expected deleted (default {DEFAULT_RETENTION_MS}), got {configs!r}"
            return expect("segment.ms", configs.get("segment.ms"), "600000")

        def configs_check(wanted):
            return lambda result: expect("configs", result.get("configs"), wanted)

        acl = {"principal": principal, "host": "*", "operation": "READ", "permission": "ALLOW",
               "resource_type": "TOPIC", "resource_name": topic, "pattern": "LITERAL"}
        acl_pattern = {k: acl[k] for k in ("resource_type", "resource_name", "pattern")}
        acl_entry = {k: acl[k] for k in ("principal", "host", "operation", "permission")}
        scram = {"user": scram_user, "mechanism": "SCRAM-SHA-256"}

        return [
            Step("describe_cluster", "describe_cluster", {}, cluster_check),
            Step("describe_features", "describe_features", {}, features_check),
            Step("describe_quorum", "describe_quorum", {}, quorum_check, retry_mismatch=True),
            Step("create_topic", "create_topic", {"name": topic, "partitions": 1, "replication_factor": 2,
                                                  "configs": {"retention.ms": "3600000"}}),
            Step("list_topics", "list_topics", {}, has_topic(True)),
            Step("describe_topic", "describe_topic", {"name": topic},
                 lambda r: expect("partitions", r.get("partitions"), 1)),
            Step("create_partitions", "create_partitions", {"name": topic, "total": 3}),
            Step("describe_topic (after create_partitions)", "describe_topic", {"name": topic},
                 lambda r: expect("partitions", r.get("partitions"), 3), reads_back="create_partitions"),
            Step("describe_configs (topic)", "describe_configs",
                 {"resource": "topic", "name": topic, "keys": ["retention.ms"]},
                 configs_check({"retention.ms": "3600000"})),
            Step("incremental_alter_configs (topic)", "incremental_alter_configs",
                 {"resource": "topic", "name": topic, "set": {"segment.ms": "600000"}, "delete": ["retention.ms"]}),
            Step("describe_configs (topic, after incremental_alter_configs)", "describe_configs",
                 {"resource": "topic", "name": topic, "keys": ["segment.ms", "retention.ms"]},
                 incremental_check, reads_back="incremental_alter_configs"),
            Step("alter_configs (topic)", "alter_configs",
                 {"resource": "topic", "name": topic, "configs": {"cleanup.policy": "compact"}}),
            Step("describe_configs (topic, after alter_configs)", "describe_configs",
                 {"resource": "topic", "name": topic, "keys": ["cleanup.policy"]},
                 configs_check({"cleanup.policy": "compact"}), reads_back="alter_configs"),
            Step("incremental_alter_configs (broker)", "incremental_alter_configs",
                 {"resource": "broker", "name": node, "set": {"max.connections": str(1000 + PHASES.index(phase))},
                  "delete": []}),
            Step("describe_configs (broker, after incremental_alter_configs)", "describe_configs",
                 {"resource": "broker", "name": node, "keys": ["max.connections", "node.id"]},
                 configs_check({"max.connections": str(1000 + PHASES.index(phase)), "node.id": node}), reads_back="incremental_alter_configs"),
            Step("alter_configs (broker)", "alter_configs",
                 {"resource": "broker", "name": node, "configs": {"max.connections": str(2000 + PHASES.index(phase))}}),
            Step("describe_configs (broker, after alter_configs)", "describe_configs",
                 {"resource": "broker", "name": node, "keys": ["max.connections"]},
                 configs_check({"max.connections": str(2000 + PHASES.index(phase))}), reads_back="alter_configs"),
            Step("alter_client_quotas", "alter_client_quotas",
                 {"entity": {"user": user}, "set": {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
                  "remove": []}),
            Step("describe_client_quotas", "describe_client_quotas", {"entity": {"user": user}},
                 lambda r: expect("quotas", r.get("quotas"),
                                  {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}), reads_back="alter_client_quotas"),
            Step("alter_client_quotas (remove)", "alter_client_quotas",
                 {"entity": {"user": user}, "set": {}, "remove": ["consumer_byte_rate"]}),
            Step("describe_client_quotas (after remove)", "describe_client_quotas", {"entity": {"user": user}},
                 lambda r: expect("quotas", r.get("quotas"), {"producer_byte_rate": 1024.0}), reads_back="alter_client_quotas"),
            Step("create_acl", "create_acl", acl),
            Step("describe_acls", "describe_acls", acl_pattern,
                 lambda r: expect("acls", r.get("acls"), [acl_entry]), reads_back="create_acl"),
            Step("delete_acls", "delete_acls", acl, lambda r: expect("deleted", r.get("deleted"), 1)),
            Step("describe_acls (after delete_acls)", "describe_acls", acl_pattern,
                 lambda r: expect("acls", r.get("acls"), []), reads_back="delete_acls"),
            Step("alter_scram", "alter_scram", {**scram, "iterations": 8192, "password": f"{prefix}-secret"}),
            Step("describe_scram", "describe_scram", {"users": [scram_user]},
                 lambda r: expect("users", r.get("users"),
                                  {scram_user: [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]}), reads_back="alter_scram"),
            Step("alter_scram (delete)", "alter_scram", {**scram, "delete": True}),
            Step("describe_scram (after delete)", "describe_scram", {"users": [scram_user]},
                 lambda r: None if not r.get("users", {}).get(scram_user) else
                 f"users: expected no credentials for {scram_user}, got {r['users'][scram_user]!r}",
                 accept_error=scram_not_found, reads_back="alter_scram"),
            Step("delete_topic", "delete_topic", {"name": topic}),
            Step("list_topics (after delete_topic)", "list_topics", {}, has_topic(False), reads_back="delete_topic"),
        ]

    def run_phase(self, phase: str, level: int, retry_until: float | None = None) -> None:
        cannot: set[str] = set()
        for step in self.phase_steps(phase, level):
            if step.reads_back in cannot:
                continue
            answer = self.run_step(phase, step, retry_until=retry_until)
            if answer.status == "unsupported":
                cannot.add(step.call)
            if step.call == "create_topic" and answer.status == "unsupported":
                # The reads of the topic are still the client's: the topic comes from our client.
                args = step.args
                self.cluster.create_topic(args["name"], args["partitions"], args["replication_factor"],
                                          args["configs"])

    # -- metadata.version changes through the client (or our CLI) ----------------------
    def feature_step(self, phase: str, variant: str, level: int, kind: str, validate_only: bool,
                     expected_after: int) -> bool:
        """One update_features call, then describe_features must show `expected_after`
        at once (read-your-writes). False when the client cannot make this variant."""
        args = {"feature": "metadata.version", "level": level, "type": kind, "validate_only": validate_only}
        answer = self.run_step(phase, Step(f"update_features ({variant})", "update_features", args,
                                           retry_gated=kind != "upgrade"))
        if answer.status == "unsupported":
            return False
        self.run_step(phase, Step(f"describe_features (after {variant})", "describe_features", {},
                                  lambda r: expect("finalized metadata.version",
                                                   r.get("finalized", {}).get("metadata.version"), expected_after)))
        return True

    def upgrade(self) -> None:
        phase = "after upgrade"
        mark = self.cluster.renegotiation_mark()
        # Each variant on its own: a client without validate-only may still upgrade.
        self.feature_step(phase, "validate_only", MV_UPGRADED, "upgrade", True, MV_BASE)
        self.feature_step(phase, "upgrade", MV_UPGRADED, "upgrade", False, MV_UPGRADED)
        # With our CLI when the client has no update_features (or its change failed: that is
        # recorded above, and the phases after it still run at the level they are about).
        self.cluster.set_metadata_version(MV_UPGRADED, since=mark)

    def downgrade(self) -> None:
        phase = "after downgrade"
        mark = self.cluster.renegotiation_mark()
        self.feature_step(phase, "unsafe_downgrade", MV_UNSAFE_STEP, "unsafe_downgrade", False, MV_UNSAFE_STEP)
        self.feature_step(phase, "safe_downgrade", MV_BASE, "safe_downgrade", False, MV_BASE)
        self.cluster.set_metadata_version(MV_BASE, unsafe=True, since=mark)

    def run(self, failover: bool = True) -> None:
        self.run_phase("before", MV_BASE)
        self.upgrade()
        self.run_phase("after upgrade", MV_UPGRADED)
        self.downgrade()
        self.run_phase("after downgrade", MV_BASE)
        if not failover:
            return  # declared: this client cannot survive it on this path (tests/clients/drivers.py)
        self.cluster.kill(self.cluster.leader())
        # One budget for the whole phase, from the kill: the quorum elects once.
        self.run_phase("after failover", MV_BASE, retry_until=time.monotonic() + FAILOVER_DEADLINE_S)


def problems(outcomes: list[Outcome], unsupported: dict[str, str]) -> list[str]:
    """What makes the test fail: an error, a failed check, or an unsupported answer for
    a call the driver did not declare unsupported (or a declared one answered). A
    declaration names a call (`update_features`) or one of its rows
    (`update_features (validate_only)`)."""
    found = []
    for outcome in outcomes:
        call = outcome.row.split(" (")[0]
        declared = unsupported.get(outcome.row, unsupported.get(call))
        if outcome.status == "error":
            found.append(f"[{outcome.phase}] {outcome.row}: {outcome.detail}")
        elif outcome.status == "unsupported" and declared is None:
            found.append(f"[{outcome.phase}] {outcome.row}: unsupported but not declared so ({outcome.detail})")
        elif outcome.status == "ok" and declared is not None:
            found.append(f"[{outcome.phase}] {outcome.row}: declared unsupported ({declared}) but answered ok")
    return found
