"""The KIP-853 controller quorums the interop tests run Kafka's tools against, built the
same way by Apache Kafka 4.4.0's server and by kraftwerk, and the readers of what
MetadataQuorumCommand prints.

Owns:
- `DynamicControllerConfig`: a controller properties file with
  controller.quorum.bootstrap.servers instead of controller.quorum.voters (a dynamic
  quorum; a static one is tests/kafka_peer's plain `KafkaNodeConfig`).
- `KraftwerkController`: a `kraftwerk controller --config FILE` process driven through the
  same interface as tests/kafka_peer's `KafkaNode` (format, start, wait_ready, stop), so a
  test runs one scenario on either implementation. Its properties file is the one the
  Kafka node of the same set-up gets.
- `dynamic_quorum` / `static_quorum`: controller 1 formatted `--standalone` and controller 2
  `--no-initial-controllers` (both naming controller 1 in controller.quorum.bootstrap.servers),
  or one static voter (controller.quorum.voters, kraft.version 0); formatted in parallel,
  started, ready, and always stopped (a context manager); `side_by_side` starts one
  set-up of each kind at once.
- Readers: `first_error_line`, `replication_rows`, `status_shape`, `voter_set_error`, and
  `wait_caught_up_observer` (DescribeQuorum until controller 2 is an observer with no lag:
  AddRaftVoter refuses a node that is not caught up).

Rules kept here: every wait is bounded; every process started is stopped when the context
ends (SIGTERM, then SIGKILL); ports come from `free_port_run` below the ephemeral range.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cli.local_cluster import free_port_run
from e2e.helpers import cli_env
from e2e.quorum_helpers import describe_quorum
from kafka_peer.kafka_nodes import KafkaNode, KafkaNodeConfig, KafkaNodeError, stop_all
from server.storage.meta_properties import parse_uuid_string, read_meta_properties

from .kafka_tools import REPO_ROOT, ToolRun

KAFKA = "kafka"
KRAFTWERK = "kraftwerk"
FORMAT_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 30.0
POLL_S = 0.25  # another process's state has no event to wait on: asking again is all


class DynamicControllerConfig(KafkaNodeConfig):
    """A controller of a dynamic quorum: controller.quorum.bootstrap.servers (the
    `quorum_voters` string is used as its value) instead of controller.quorum.voters."""

    def properties(self) -> dict[str, str]:
        properties = super().properties()
        del properties["controller.quorum.voters"]
        properties["controller.quorum.bootstrap.servers"] = self.quorum_voters
        return properties


class KraftwerkController(KafkaNode):
    """A kraftwerk controller process with the same properties file, directory layout and
    life cycle as the Kafka controller of the same config: formatted by `kraftwerk storage
    format --config FILE`, run by `kraftwerk controller --config FILE`, ready when it
    answers ApiVersions. Its log (JSON lines) is `config.log_path`."""

    def format(self, cluster_id: str, *extra_args: str) -> None:
        self.config.write()
        argv = [sys.executable, "-m", "cli.main", "storage", "format", "--config", str(self.config.properties_path),
                "--cluster-id", cluster_id, *extra_args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, cwd=REPO_ROOT,
                                  env=cli_env())
        except subprocess.TimeoutExpired:
            raise KafkaNodeError(f"formatting kraftwerk controller {self.node_id} took over "
                                 f"{FORMAT_TIMEOUT_S:.0f} s") from None
        if done.returncode != 0:
            raise KafkaNodeError(f"formatting kraftwerk controller {self.node_id} failed (exit {done.returncode}): "
                                 f"{done.stdout}{done.stderr}")

    def start(self) -> None:
        if self.alive():
            raise KafkaNodeError(f"kraftwerk controller {self.node_id} is already running")
        self.config.write()
        self._close_log()
        self._log_handle = open(self.config.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "controller", "--config", str(self.config.properties_path)],
            stdout=subprocess.DEVNULL, stderr=self._log_handle, cwd=REPO_ROOT, env=cli_env(),
            start_new_session=True)


def node_class(kind: str) -> type[KafkaNode]:
    return {KAFKA: KafkaNode, KRAFTWERK: KraftwerkController}[kind]


@dataclass
class Quorum:
    """The controllers of one set-up (by node id); `kind` says whose they are."""

    kind: str
    nodes: dict[int, KafkaNode]
    directory_ids: dict[int, str] = field(default_factory=dict)  # from each node's meta.properties

    @property
    def first(self) -> KafkaNode:
        return self.nodes[1]

    @property
    def second(self) -> KafkaNode:
        return self.nodes[2]

    @property
    def second_directory_id(self) -> str:
        return self.directory_ids[2]

    @property
    def bootstrap(self) -> list[str]:
        return ["--bootstrap-controller", self.first.address]

    def ports(self) -> dict[int, int]:
        return {node_id: node.config.port for node_id, node in self.nodes.items()}


@contextlib.contextmanager
def _running(kind: str, configs: list[KafkaNodeConfig], flags: Mapping[int, tuple[str, ...]],
             cluster_id: str) -> Iterator[Quorum]:
    cls = node_class(kind)
    nodes = {config.node_id: cls(config) for config in configs}
    try:
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            for formatted in [pool.submit(node.format, cluster_id, *flags[node_id])
                              for node_id, node in nodes.items()]:
                formatted.result()
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            node.wait_ready()
        directory_ids = {node_id: read_meta_properties(node.config.data_dir).directory_id
                         for node_id, node in nodes.items()}
        yield Quorum(kind, nodes, directory_ids)
    finally:
        stop_all(nodes.values())


def dynamic_quorum(kind: str, directory: Path, cluster_id: str,
                   extra: Mapping[int, Mapping[str, str]] | None = None) -> contextlib.AbstractContextManager[Quorum]:
    """Controller 1 `--standalone`, controller 2 `--no-initial-controllers`, both bootstrapping
    from controller 1 (a context manager: the processes stop when it ends). `extra` adds
    properties per node id."""
    port = free_port_run(2)
    bootstrap = f"127.0.0.1:{port}"
    configs = [DynamicControllerConfig(node_id, port + node_id - 1, directory / f"c{node_id}", bootstrap,
                                       roles=("controller",), extra=dict((extra or {}).get(node_id, {})))
               for node_id in (1, 2)]
    return _running(kind, configs, {1: ("--standalone",), 2: ("--no-initial-controllers",)}, cluster_id)


def side_by_side(stack: contextlib.ExitStack,
                 make: Callable[[str], contextlib.AbstractContextManager[Quorum]]) -> dict[str, Quorum]:
    """The set-up `make(kind)` for Kafka and for kraftwerk, started at the same time (the
    JVM's start is the slow part) and entered into `stack`, which stops both."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {kind: pool.submit(stack.enter_context, make(kind)) for kind in (KAFKA, KRAFTWERK)}
        # Wait for both before raising, so a failed start never leaves the other running
        # outside the stack.
        for future in futures.values():
            future.exception()
        return {kind: future.result() for kind, future in futures.items()}


def static_quorum(kind: str, directory: Path, cluster_id: str,
                  extra: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[Quorum]:
    """One static voter (controller.quorum.voters names only itself; kraft.version 0)."""
    port = free_port_run(1)
    config = KafkaNodeConfig(1, port, directory / "c1", f"1@127.0.0.1:{port}", roles=("controller",),
                             extra=dict(extra or {}))
    return _running(kind, [config], {1: ()}, cluster_id)


# --------------------------------------------------------------------------
# What MetadataQuorumCommand prints
# --------------------------------------------------------------------------

_LOG_LINE = re.compile(r"^\[[^\]]*\] (TRACE|DEBUG|INFO|WARN|ERROR) ")  # slf4j-simple: Kafka's own logging


def first_error_line(run: ToolRun) -> str:
    """The tool's first line for the operator on stderr (not a log line)."""
    lines = [line for line in run.stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)]
    return lines[0] if lines else ""


def replication_rows(run: ToolRun) -> dict[tuple[int, str], list[str]]:
    """The describe --replication table: (node id, status) -> its cells."""
    header, *rows = [[cell.strip() for cell in line.split("\t")] for line in run.lines]
    assert header[:7] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                          "LastCaughtUpTimestamp", "Status"], run.describe()
    return {(int(row[0]), row[6]): row for row in rows}


_DIRECTORY_ID = re.compile(r'"directoryId": "[A-Za-z0-9_-]{22}"')


def status_shape(run: ToolRun) -> list[str]:
    """describe --status with the numbers and directory ids masked: the layout both
    implementations must share."""
    shape = []
    for line in run.lines:
        line = _DIRECTORY_ID.sub('"directoryId": "<id>"', line)
        line = re.sub(r"^(ClusterId|LeaderEpoch|HighWatermark|MaxFollowerLag|MaxFollowerLagTimeMs):(\s+)\S+$",
                      r"\1:\2<n>", line)
        shape.append(line)
    return shape


def voter_set_error(run: ToolRun) -> tuple[str, frozenset[str]]:
    """An error line naming a Java HashSet of voters, with the set's order taken out."""
    line = first_error_line(run)
    head, sep, rest = line.partition(" [")
    members, _, tail = rest.rpartition("]")
    return head + sep + "<set>]" + tail, frozenset(re.findall(r"ReplicaKey\([^)]*\)", members))


def wait_caught_up_observer(quorum: Quorum, timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
    """Until the leader lists controller 2 as an observer with its directory id and its
    log end at the leader's (DescribeQuorum v2, asked of controller 1)."""
    deadline = time.monotonic() + timeout_s
    wanted = str(parse_uuid_string(quorum.second_directory_id))
    last = None
    while True:
        try:
            last = describe_quorum(quorum.first.address)
        except (OSError, AssertionError):
            last = None
        if last is not None:
            leader = next((v for v in last.current_voters if v.replica_id == last.leader_id), None)
            observer = next((o for o in last.observers
                             if o.replica_id == 2 and str(o.replica_directory_id) == wanted), None)
            if leader is not None and observer is not None and observer.log_end_offset == leader.log_end_offset \
                    and observer.last_caught_up_timestamp > 0:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{quorum.kind}: controller 2 did not catch up as an observer: {last}")
        time.sleep(POLL_S)
