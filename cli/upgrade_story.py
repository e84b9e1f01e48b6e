"""The whole KIP-778 upgrade story on a local cluster of real processes.

Owns: `LocalCluster` (3 controllers and 3 broker agents on 127.0.0.1, each a
`kraftwerk controller|broker` child process with its own properties file and
directory; restartable one node at a time with another `--release`), the
read-only probes an operator (or a test) uses to look at it — ApiVersions,
DescribeCluster, the brokers' renegotiation log lines — `ClientProbe`, a
client that keeps asking the brokers for metadata throughout and measures
whether it was ever left without an answer, and `UpgradeStory`, the steps of
`kraftwerk cluster demo-upgrade`:

  start at release 3.5 with metadata.version 3.5-IV2; roll every node to 3.7
  one at a time; upgrade metadata.version online step by step while brokers
  renegotiate; downgrade losslessly; see a lossy SAFE downgrade refused;
  perform an UNSAFE one and see what it dropped.

Every operator action is a real `kraftwerk` CLI invocation, printed as it would
be typed. Every wait is bounded; the probes never change anything.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import trio

from protocol.frames import decode_response, encode_request
from cli import local_cluster as lc
from server.client import ClientError, KafkaClient
from server.controller.features import metadata_version_from_level, metadata_version_from_name
from server.storage.meta_properties import random_uuid_string, read_meta_properties

API_VERSIONS, METADATA, DESCRIBE_CLUSTER, CREATE_TOPICS = 18, 3, 60, 19
READY_TIMEOUT_S = 60.0
POLL_S = 0.05  # polling other processes' state: there is nothing to wait on but asking again
PROBE_INTERVAL_S = 0.05
PROBE_TIMEOUT_S = 2.0


class StoryError(Exception):
    """A step of the story did not do what it should; the message says which."""


@dataclass
class NodeView:
    """What one node says about itself and the cluster (ApiVersions v3)."""

    finalized: dict[str, int]
    epoch: int
    supported: dict[str, tuple[int, int]]
    api_ranges: dict[int, tuple[int, int]]


async def _api_versions(address: str) -> NodeView:
    host, port = address.rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port)) as client:
        reply = client.api_versions_response
        return NodeView(
            finalized={f.name: f.max_version_level for f in reply.finalized_features or ()},
            epoch=reply.finalized_features_epoch,
            supported={f.name: (f.min_version, f.max_version) for f in reply.supported_features or ()},
            api_ranges={k: (r.min_version, r.max_version) for k, r in client.api_versions.items()},
        )


async def _unfenced_brokers(address: str) -> list[int]:
    host, port = address.rsplit(":", 1)
    async with await KafkaClient.connect(host, int(port)) as client:
        reply = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                     "endpoint_type": 1})
        return sorted(b.broker_id for b in reply.brokers if b.broker_id >= 100)


def node_view(address: str) -> NodeView:
    return trio.run(_api_versions, address)


def unfenced_brokers(address: str) -> list[int]:
    return trio.run(_unfenced_brokers, address)


def log_events(path: Path, event: str) -> list[dict]:
    """The JSON log lines of one process with this event name."""
    found = []
    if not path.exists():
        return found
    for line in path.read_text(errors="replace").splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            found.append(record)
    return found


class LocalCluster:
    """3 controllers (ids 1-3) and 3 brokers (ids 101-103) as real processes."""

    def __init__(self, work: Path, controllers: int = 3, brokers: int = 3, controller_base_port: int | None = None,
                 broker_base_port: int | None = None, release: str | None = None,
                 metadata_version: str | None = None, extra: dict[str, str] | None = None,
                 standalone: bool = False) -> None:
        """`standalone`: a dynamic quorum (KIP-853): controller 1 is formatted `--standalone`,
        the other controllers `--no-initial-controllers` (observers until added), every
        node finds the quorum through controller 1 (controller.quorum.bootstrap.servers)."""
        self.work = work
        self.standalone = standalone
        # Controllers added after format (KIP-853 add-controller), found through the others.
        self.added: set[int] = set()
        self.cluster_id = random_uuid_string()
        controller_base_port = controller_base_port or lc.free_port_run(controllers)
        broker_base_port = broker_base_port or (lc.free_port_run(brokers) if brokers else 0)
        self.controllers = lc.plan(work, controllers, controller_base_port)
        self.brokers = lc.plan_brokers(work, brokers, broker_base_port)
        self.metadata_version = metadata_version
        self.extra = dict(extra or {})
        self.releases: dict[int, str | None] = {spec.node_id: release for spec in self.specs}
        self.processes: dict[int, lc.ControllerProcess] = {}

    @property
    def specs(self) -> list[lc.ControllerSpec]:
        return self.controllers + self.brokers

    def spec(self, node_id: int) -> lc.ControllerSpec:
        return next(s for s in self.specs if s.node_id == node_id)

    def address(self, node_id: int) -> str:
        return self.spec(node_id).address

    @property
    def controller_addresses(self) -> str:
        return ",".join(s.address for s in self.controllers)

    @property
    def broker_addresses(self) -> str:
        return ",".join(s.address for s in self.brokers)

    def _write_config(self, spec: lc.ControllerSpec) -> None:
        extra = dict(self.extra)
        if spec.role == "broker":
            # Quick liveness for a local cluster (Kafka's defaults: 2 s and 9 s).
            extra.setdefault("broker.heartbeat.interval.ms", "500")
        else:
            extra.setdefault("broker.session.timeout.ms", "9000")
        release = self.releases.get(spec.node_id)
        if release:
            extra["kraftwerk.release"] = release
        lc.write_config(spec, self.static_voters, extra, bootstrap_servers=self.bootstrap_servers(spec))

    @property
    def static_voters(self) -> list[lc.ControllerSpec]:
        """The controllers the cluster was formatted with (not those added later)."""
        return [c for c in self.controllers if c.node_id not in self.added]

    def bootstrap_servers(self, spec: lc.ControllerSpec) -> str | None:
        """controller.quorum.bootstrap.servers of a node of a dynamic quorum (None: static
        voters): controller 1 for a standalone quorum; the first controllers for one added."""
        if self.standalone:
            return self.controllers[0].address
        if spec.node_id in self.added:
            return ",".join(c.address for c in self.static_voters)
        return None

    def _format_flags(self, spec: lc.ControllerSpec) -> tuple[str, ...]:
        if not self.standalone or spec.role == "broker":
            return ()
        return ("--standalone",) if spec is self.controllers[0] else ("--no-initial-controllers",)

    def format(self) -> None:
        for spec in self.specs:
            self._write_config(spec)
            lc.format_node(spec, self.cluster_id, self.metadata_version, self._format_flags(spec))

    def start(self, node_id: int) -> lc.ControllerProcess:
        spec = self.spec(node_id)
        self._write_config(spec)
        process = lc.start_node(spec)
        self.processes[node_id] = process
        return process

    def bring_up(self) -> None:
        """Formats and starts every node, then waits until the quorum wrote the bootstrap
        records and every broker is registered and unfenced."""
        self.format()
        for spec in self.specs:
            self.start(spec.node_id)
        self.wait_bootstrapped()
        if self.brokers:
            self.wait_unfenced([spec.node_id for spec in self.brokers])

    def add_broker(self, release: str | None) -> int:
        """Plans (and formats) one more broker; returns its id. Start it with `start`."""
        node_id = max(b.node_id for b in self.brokers) + 1 if self.brokers else 101
        spec = lc.broker_spec(node_id, lc.free_port_run(1), self.work)
        self.brokers.append(spec)
        self.releases[node_id] = release
        self._write_config(spec)
        lc.format_node(spec, self.cluster_id, self.metadata_version)
        return node_id

    def add_controller(self, release: str | None) -> int:
        """Plans and formats one more controller, an observer of a dynamic quorum until
        `kraftwerk metadata-quorum add-controller` adds it (KIP-853); returns its id."""
        node_id = max(c.node_id for c in self.controllers) + 1
        spec = lc.ControllerSpec(node_id, lc.free_port_run(1), self.work)
        self.controllers.append(spec)
        self.added.add(node_id)
        self.releases[node_id] = release
        self._write_config(spec)
        lc.format_node(spec, self.cluster_id, self.metadata_version, ("--no-initial-controllers",))
        return node_id

    def stop(self, node_id: int, kill: bool = False) -> None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            lc.stop_node(process, kill=kill)

    def stop_all(self) -> None:
        lc.stop_nodes(self.processes)

    def alive(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.alive()

    def exit_code(self, node_id: int) -> int | None:
        process = self.processes.get(node_id)
        return None if process is None else process.process.poll()

    # -- waiting for the cluster ------------------------------------------------------
    def wait_until(self, what: str, condition: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
        lc.poll_until(what, condition, timeout_s=timeout_s, poll_s=POLL_S, retry_on=(ClientError, OSError),
                      error=StoryError)

    def any_controller_view(self) -> NodeView:
        for spec in self.controllers:
            if self.alive(spec.node_id):
                try:
                    return node_view(spec.address)
                except (ClientError, OSError):
                    continue
        raise StoryError("no controller answers")

    def unfenced(self) -> list[int]:
        for spec in self.controllers:
            if self.alive(spec.node_id):
                try:
                    return unfenced_brokers(spec.address)
                except (ClientError, OSError):
                    continue
        return []

    def wait_bootstrapped(self) -> None:
        self.wait_until("the quorum to elect a leader and bootstrap",
                        lambda: self.any_controller_view().finalized.get("metadata.version", 0) > 0)

    def wait_unfenced(self, broker_ids: list[int]) -> None:
        self.wait_until(f"brokers {broker_ids} to be unfenced", lambda: set(broker_ids) <= set(self.unfenced()))

    def wait_metadata_version(self, level: int) -> None:
        """Every live node's image is at `level`."""
        def all_at_level() -> bool:
            return all(node_view(self.address(node_id)).finalized.get("metadata.version") == level
                       for node_id in self.processes if self.alive(node_id))
        self.wait_until(f"every node to see metadata.version {metadata_version_from_level(level)}", all_at_level)

    def renegotiations(self, broker_id: int) -> list[dict]:
        return log_events(self.spec(broker_id).log_path, "broker.api_versions_renegotiated")

    def wait_renegotiated(self, level: int) -> None:
        name = str(metadata_version_from_level(level))

        def done() -> bool:
            return all(any(e.get("metadata_version") == name for e in self.renegotiations(b.node_id))
                       for b in self.brokers if self.alive(b.node_id))
        self.wait_until(f"every broker to renegotiate at {name}", done)


class ClientProbe:
    """A client that keeps asking the brokers for Metadata, as an application would:
    on an error it reconnects to the next broker. Records the longest time without an
    answer and how often a connection was closed under it (a broker restart, or the
    KIP-778 close after a metadata.version change). While `writing` is set, every other
    request creates a topic (`written` lists those the controller acknowledged)."""

    def __init__(self, addresses: list[str], seed: int = 7) -> None:
        self._addresses = list(addresses)
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="client-probe", daemon=True)
        self.answers = 0
        self.reconnects = 0
        self.longest_gap_s = 0.0
        self.errors: list[str] = []
        self.writing = threading.Event()
        self.written: list[str] = []
        self.longest_write_gap_s = 0.0

    def __enter__(self) -> ClientProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        sock = None
        index = self._rng.randrange(len(self._addresses))
        last_answer = time.monotonic()
        last_write: float | None = None
        correlation = 0
        while not self._stop.is_set():
            try:
                if sock is None:
                    host, port = self._addresses[index % len(self._addresses)].rsplit(":", 1)
                    sock = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S)
                correlation += 1
                write = self.writing.is_set() and correlation % 2 == 0
                if write:
                    name = f"probe-{correlation}"
                    sock.sendall(encode_request(CREATE_TOPICS, 5, correlation, "kraftwerk-probe", {
                        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}],
                        "timeout_ms": int(PROBE_TIMEOUT_S * 1000)}))
                    api_key, version = CREATE_TOPICS, 5
                else:
                    sock.sendall(encode_request(METADATA, 4, correlation, "kraftwerk-probe", {"topics": []}))
                    api_key, version = METADATA, 4
                size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
                answered, body = decode_response(api_key, version, _recv_exactly(sock, size))
                if answered != correlation:
                    raise OSError("correlation id mismatch")
                now = time.monotonic()
                self.longest_gap_s = max(self.longest_gap_s, now - last_answer)
                last_answer = now
                self.answers += 1
                if write and body.topics and body.topics[0].error_code == 0:
                    self.written.append(name)
                    if last_write is not None:
                        self.longest_write_gap_s = max(self.longest_write_gap_s, now - last_write)
                    last_write = now
            except (OSError, ValueError) as exc:
                self.errors.append(str(exc))
                if sock is not None:
                    sock.close()
                    sock = None
                self.reconnects += 1
                index += 1
            self._stop.wait(PROBE_INTERVAL_S)
        if sock is not None:
            sock.close()


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        data = sock.recv(size - len(chunks))
        if not data:
            raise OSError("connection closed by the broker")
        chunks.extend(data)
    return bytes(chunks)


@dataclass
class StepRecord:
    title: str
    facts: dict = field(default_factory=dict)


class UpgradeStory:
    """The steps of `kraftwerk cluster demo-upgrade`; `say` prints (or collects) the narrative."""

    START_RELEASE, TARGET_RELEASE = "3.5", "3.7"
    START_MV = "3.5-IV2"
    UPGRADE_STEPS = ("3.6-IV2", "3.7-IV0", "3.7-IV2", "3.7-IV4")
    LOSSLESS_TARGET = "3.7-IV2"
    LOSSY_TARGET = "3.6-IV2"
    # The first release with kraft.version 1 (KIP-853's dynamic quorums), and its metadata.version.
    QUORUM_RELEASE, QUORUM_METADATA_VERSION = "3.9", "3.9-IV0"

    def __init__(self, work: Path, say: Callable[[str], None] = print, base_port: int | None = None,
                 broker_base_port: int | None = None) -> None:
        if work.exists():
            shutil.rmtree(work)
        self.say = say
        self.cluster = LocalCluster(work, controller_base_port=base_port, broker_base_port=broker_base_port,
                                    release=self.START_RELEASE, metadata_version=self.START_MV)
        self.records: list[StepRecord] = []
        # The topics the client probe created and saw acknowledged.
        self.probe_written: list[str] = []

    # -- operator commands --------------------------------------------------------------
    def kraftwerk(self, title: str, *argv: str, expect_ok: bool = True) -> str:
        self.say(f"\n$ kraftwerk {' '.join(argv)}    # {title}")
        result = lc.run_cli(*argv)
        for line in result.stdout.splitlines():
            self.say(line)
        if (result.returncode == 0) != expect_ok:
            raise StoryError(f"`kraftwerk {' '.join(argv)}` exited {result.returncode}: "
                             f"{result.stdout.strip()} {result.stderr.strip()[-500:]}")
        return result.stdout

    def note(self, text: str) -> None:
        self.say(f"# {text}")

    def record(self, title: str, **facts) -> StepRecord:
        step = StepRecord(title, facts)
        self.records.append(step)
        return step

    def advertised_by_brokers(self) -> dict[int, dict[int, tuple[int, int]]]:
        return {b.node_id: node_view(b.address).api_ranges for b in self.cluster.brokers
                if self.cluster.alive(b.node_id)}

    # -- the story ------------------------------------------------------------------------
    def start(self) -> None:
        cluster = self.cluster
        self.note(f"a cluster of 3 controllers and 3 brokers, all release {self.START_RELEASE}, "
                  f"metadata.version {self.START_MV}")
        cluster.format()
        for spec in cluster.specs:
            process = cluster.start(spec.node_id)
            self.say(f"  {spec.role} {spec.node_id} (release {cluster.releases[spec.node_id]}) on "
                     f"{process.address}, pid {process.process.pid}, log {spec.log_path}")
        cluster.wait_bootstrapped()
        cluster.wait_unfenced([b.node_id for b in cluster.brokers])
        self.kraftwerk("what the cluster runs, seen through a broker", "features", "describe",
                       "--bootstrap-server", cluster.brokers[0].address)
        self.record("started", unfenced=cluster.unfenced(), advertised=self.advertised_by_brokers())

    def roll(self, release: str, probe: ClientProbe | None = None, title: str = "rolled") -> None:
        """Restarts every node on `release`, one at a time, waiting for each to be back."""
        cluster = self.cluster
        self.note(f"rolling restart to release {release}, one node at a time (controllers first)")
        for spec in cluster.specs:
            cluster.stop(spec.node_id)
            cluster.releases[spec.node_id] = release
            cluster.start(spec.node_id)
            if spec.role == "broker":
                cluster.wait_unfenced([spec.node_id])
            else:
                cluster.wait_until(f"controller {spec.node_id} to catch up",
                                   lambda: node_view(spec.address).finalized.get("metadata.version", 0) > 0)
            self.say(f"  {spec.role} {spec.node_id} now runs release {release}")
        view = node_view(cluster.brokers[0].address)
        self.record(title, release=release, supported=view.supported["metadata.version"],
                    unfenced=cluster.unfenced(), probe_gap_s=probe.longest_gap_s if probe else None)
        self.kraftwerk("every node supports more now; nothing is finalized higher yet", "features", "describe",
                       "--bootstrap-server", cluster.brokers[0].address)

    def upgrade_step(self, target: str) -> StepRecord:
        cluster = self.cluster
        before = self.advertised_by_brokers()
        self.kraftwerk(f"upgrade metadata.version to {target} online", "features", "upgrade", "--metadata",
                       target, "--bootstrap-server", cluster.broker_addresses)
        level = metadata_version_from_level_name(target)
        cluster.wait_renegotiated(level)
        cluster.wait_metadata_version(level)
        after = self.advertised_by_brokers()
        changed = {key: (before[cluster.brokers[0].node_id].get(key), after[cluster.brokers[0].node_id].get(key))
                   for key in after[cluster.brokers[0].node_id]
                   if before[cluster.brokers[0].node_id].get(key) != after[cluster.brokers[0].node_id].get(key)}
        for broker in cluster.brokers:
            events = [e for e in cluster.renegotiations(broker.node_id) if e.get("metadata_version") == target]
            versions = events[-1].get("versions") if events else None
            self.say(f"  broker {broker.node_id} renegotiated with the controller at {target}: "
                     f"now uses {versions}")
        if changed:
            names = {60: "DescribeCluster", 57: "UpdateFeatures", 3: "Metadata", 55: "DescribeQuorum"}
            shown = ", ".join(f"{names.get(k, k)} {a[1] if a else '-'} -> {b[1] if b else '-'}"
                              for k, (a, b) in sorted(changed.items()))
            self.say(f"  brokers now advertise to clients: {shown} (open client connections keep "
                     "working with what they were told; new ones see the new versions)")
        return self.record(f"upgraded to {target}", level=level, before=before, after=after,
                           unfenced=cluster.unfenced())

    def downgrades(self) -> None:
        cluster = self.cluster
        self.kraftwerk(f"a lossless downgrade to {self.LOSSLESS_TARGET}: nothing in between changed the "
                       "metadata format", "features", "downgrade", "--metadata", self.LOSSLESS_TARGET,
                       "--bootstrap-server", cluster.broker_addresses)
        cluster.wait_metadata_version(metadata_version_from_level_name(self.LOSSLESS_TARGET))
        self.record("lossless downgrade", view=cluster.any_controller_view())
        refused = self.kraftwerk(f"a SAFE downgrade to {self.LOSSY_TARGET} would lose metadata: refused",
                                 "features", "downgrade", "--metadata", self.LOSSY_TARGET, "--bootstrap-server",
                                 cluster.broker_addresses, expect_ok=False)
        dry = self.kraftwerk("what would an UNSAFE downgrade drop? (dry run)", "features", "downgrade",
                             "--metadata", self.LOSSY_TARGET, "--unsafe", "--dry-run", "--bootstrap-server",
                             cluster.broker_addresses)
        done = self.kraftwerk("do it: UNSAFE downgrade", "features", "downgrade", "--metadata",
                              self.LOSSY_TARGET, "--unsafe", "--bootstrap-server", cluster.broker_addresses)
        level = metadata_version_from_level_name(self.LOSSY_TARGET)
        cluster.wait_renegotiated(level)
        cluster.wait_metadata_version(level)
        self.record("lossy downgrade", refused=refused, dry_run=dry, done=done,
                    view=cluster.any_controller_view(), unfenced=cluster.unfenced())
        self.kraftwerk("the cluster after the lossy downgrade", "features", "describe", "--bootstrap-server",
                       cluster.brokers[0].address)

    def replace_a_controller(self, probe: ClientProbe) -> None:
        """KIP-853 on the same cluster: every node on a release with kraft.version 1, the
        voters moved into the metadata log, and controller 1 replaced by a new controller 4,
        online, while the client keeps writing through the brokers."""
        cluster = self.cluster
        self.roll(self.QUORUM_RELEASE, probe, title="rolled for the quorum")
        # Talking to the controllers directly (--bootstrap-controller) needs 3.7-IV0 or later.
        self.upgrade_step(self.QUORUM_METADATA_VERSION)
        probe.writing.set()
        self.kraftwerk("kraft.version 1: the voters go into the metadata log (KIP-853), online", "features",
                       "upgrade", "--feature", "kraft.version=1", "--bootstrap-server", cluster.broker_addresses)
        controllers = ",".join(c.address for c in cluster.controllers)
        self.kraftwerk("the voters now carry directory ids", "metadata-quorum", "--bootstrap-controller", controllers,
                       "describe", "--status")
        newcomer = cluster.add_controller(self.QUORUM_RELEASE)
        spec = cluster.spec(newcomer)
        process = cluster.start(newcomer)
        self.say(f"  controller {newcomer} (release {self.QUORUM_RELEASE}, formatted --no-initial-controllers) "
                 f"on {process.address}: an observer of the quorum")
        # It must catch up before the leader adds it (Kafka's rule): asked until it has.
        cluster.wait_until(f"controller {newcomer} to be added", lambda: lc.run_cli(
            "metadata-quorum", "--bootstrap-controller", controllers, "--command-config", str(spec.config_path),
            "add-controller").returncode == 0)
        self.say(f"$ kraftwerk metadata-quorum --bootstrap-controller {controllers} --command-config "
                 f"{spec.config_path} add-controller    # controller {newcomer} becomes a voter")
        leaving = cluster.controllers[0]
        directory_id = read_meta_properties(leaving.metadata_dir).directory_id
        self.kraftwerk(f"controller {leaving.node_id} leaves the voters", "metadata-quorum", "--bootstrap-controller",
                       controllers, "remove-controller", "--controller-id", str(leaving.node_id),
                       "--controller-directory-id", directory_id)
        cluster.stop(leaving.node_id)
        remaining = ",".join(c.address for c in cluster.controllers if c is not leaving)
        status = self.kraftwerk("the quorum after the replacement", "metadata-quorum", "--bootstrap-controller",
                                remaining, "describe", "--status")
        self.record("controller replaced", status=status, added=newcomer, removed=leaving.node_id,
                    written=len(probe.written), longest_write_gap_s=probe.longest_write_gap_s)
        self.note(f"the client's writes went on throughout: {len(probe.written)} topics created, the longest "
                  f"wait between two of them {probe.longest_write_gap_s * 1000:.0f} ms")

    def run(self, after_upgrade: Callable[[str, StepRecord], None] | None = None) -> list[StepRecord]:
        """The whole story; `after_upgrade(target, record)` runs after each online upgrade
        (the end-to-end test checks more there)."""
        cluster = self.cluster
        self.start()
        with ClientProbe([b.address for b in cluster.brokers]) as probe:
            self.roll(self.TARGET_RELEASE, probe)
            for target in self.UPGRADE_STEPS:
                record = self.upgrade_step(target)
                if after_upgrade is not None:
                    after_upgrade(target, record)
            self.downgrades()
            self.replace_a_controller(probe)
        self.probe_written = list(probe.written)
        self.record("client probe", answers=probe.answers, reconnects=probe.reconnects,
                    longest_gap_s=probe.longest_gap_s)
        self.note(f"a client asked the brokers for metadata every {PROBE_INTERVAL_S * 1000:.0f} ms throughout: "
                  f"{probe.answers} answers, {probe.reconnects} reconnects, longest wait "
                  f"{probe.longest_gap_s * 1000:.0f} ms")
        return self.records


def metadata_version_from_level_name(name: str) -> int:
    return metadata_version_from_name(name).level
