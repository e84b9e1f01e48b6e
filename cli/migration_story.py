"""A ZooKeeper-mode cluster and its migration to KRaft (KIP-866), with real processes.

Owns: `MigrationCluster`: a real ZooKeeper (Debian's 3.8, server/zk/process.py) seeded
with a realistic ZooKeeper-mode Kafka cluster, ZooKeeper-mode broker agents
(`kraftwerk broker --zookeeper`), and a KRaft controller quorum started with
`kafka.metadata.migration.enable=true`; the steps of the migration (brokers restarted
in KRaft mode one by one, finalization by restarting the controllers with the switch
off, rollback) and the views the tests and `kraftwerk cluster up --zookeeper` need
(DescribeMigration, the image through the Kafka APIs, ZooKeeper's contents).

Ids follow KIP-866's example: ZooKeeper brokers 1..N keep their ids in KRaft mode;
controllers are 3000, 3001, ...
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import trio

from cli import local_cluster as lc
from cli.upgrade_story import log_events, node_view
from server.client import ClientError, KafkaClient
from server.storage.meta_properties import random_uuid_string
from server.zk.process import ZooKeeperProcess, ZooKeeperSettings
from server.zk.seed import SeedSpec, read_zookeeper, seed_zookeeper

FIRST_CONTROLLER_ID = 3000
READY_TIMEOUT_S = 90.0
POLL_S = 0.1
DESCRIBE_MIGRATION_KEY = 10001
CALL_TIMEOUT_S = 5.0
STATES = {1: "ZooKeeper", 2: "MigrationEligible", 3: "MigrationReady", 4: "MigrationActive",
          5: "MigrationFinished", 6: "KRaft"}


class MigrationStoryError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class MigrationView:
    """DescribeMigration, as the active controller answers it."""

    controller_id: int
    state: str
    zk_migration_state: int
    lag: int
    zk_last_offset: int
    zk_brokers: tuple[int, ...]
    kraft_brokers: tuple[int, ...]
    failures: tuple[str, ...]


async def _describe_migration(address: str):
    host, _, port = address.rpartition(":")
    # Bounded: a frozen (SIGSTOP) or dying node accepts the connection and never answers.
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(host, int(port)) as client:
            await client.negotiate()
            return await client.call(DESCRIBE_MIGRATION_KEY, {})


async def _unfenced_brokers(address: str) -> list[int]:
    host, _, port = address.rpartition(":")
    with trio.fail_after(CALL_TIMEOUT_S):
        async with await KafkaClient.connect(host, int(port)) as client:
            reply = await client.call(60, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    return sorted(b.broker_id for b in reply.brokers if b.broker_id < FIRST_CONTROLLER_ID)


def unfenced_brokers(address: str) -> list[int]:
    return trio.run(_unfenced_brokers, address)


def describe_migration(address: str) -> MigrationView | None:
    """None when `address` is not the active controller."""
    response = trio.run(_describe_migration, address)
    if response.error_code != 0:
        return None
    return MigrationView(
        response.controller_id, STATES.get(response.migration_state, str(response.migration_state)),
        response.zk_migration_state, response.zk_write_behind_lag, response.zk_last_offset,
        tuple(response.zk_brokers), tuple(response.kraft_brokers),
        tuple(f"{f.broker_id}: {f.reason}" for f in response.precondition_failures))


class MigrationCluster:
    def __init__(self, work: Path, *, zk_brokers: int = 3, controllers: int = 3, seed: SeedSpec | None = None,
                 metadata_version: str = "3.7-IV4", broker_release: str | None = None,
                 controller_extra: dict[str, str] | None = None,
                 zookeeper_settings: ZooKeeperSettings | None = None,
                 broker_extra: dict[str, str] | None = None, controller_base_port: int | None = None,
                 broker_base_port: int | None = None, zookeeper_port: int = 0) -> None:
        # zookeeper_settings: zoo.cfg knobs (None: ZooKeeperProcess's defaults, forceSync off);
        # bench/bench_migration.py passes force_sync=True to measure with real fsync.
        # broker_extra: properties for every broker, in ZooKeeper and in KRaft mode (e.g.
        # kraftwerk.metrics.port). Ports: free ones unless a base port is given (`kraftwerk
        # cluster up --zookeeper`); ZooKeeper's likewise.
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.cluster_id = random_uuid_string()
        # ZooKeeper's port too is reserved below the ephemeral range (cli/local_cluster.py
        # free_port_run): it is kept across ZooKeeper restarts.
        self.zookeeper = ZooKeeperProcess(work / "zookeeper", port=zookeeper_port or lc.free_port_run(1),
                                          settings=zookeeper_settings)
        self.seed = seed or SeedSpec(cluster_id=self.cluster_id, broker_ids=tuple(range(1, zk_brokers + 1)))
        if self.seed.cluster_id != self.cluster_id:
            self.cluster_id = self.seed.cluster_id
        controller_port = controller_base_port if controller_base_port else lc.free_port_run(controllers)
        broker_port = broker_base_port if broker_base_port else lc.free_port_run(zk_brokers)
        self.controllers = [lc.ControllerSpec(FIRST_CONTROLLER_ID + i, controller_port + i, work)
                            for i in range(controllers)]
        self.brokers = [lc.broker_spec(i + 1, broker_port + i, work) for i in range(zk_brokers)]
        self.metadata_version = metadata_version
        self.broker_release = broker_release
        self.controller_extra = dict(controller_extra or {})
        self.broker_extra = dict(broker_extra or {})
        self.migration_enabled = {spec.node_id: True for spec in self.controllers}
        self.kraft_mode: set[int] = set()  # brokers restarted in KRaft mode
        self.processes: dict[int, lc.ControllerProcess] = {}

    # -- addresses ---------------------------------------------------------------------
    @property
    def zk_hosts(self) -> str:
        return self.zookeeper.hosts

    def spec(self, node_id: int) -> lc.ControllerSpec:
        return next(s for s in self.controllers + self.brokers if s.node_id == node_id)

    def address(self, node_id: int) -> str:
        return self.spec(node_id).address

    @property
    def controller_addresses(self) -> str:
        return ",".join(s.address for s in self.controllers)

    # -- ZooKeeper and its brokers -----------------------------------------------------
    def start_zookeeper(self, seed: bool = True) -> None:
        self.zookeeper.start()
        if seed:
            seed_zookeeper(self.zk_hosts, self.seed)

    def _write_zk_broker_config(self, spec: lc.ControllerSpec) -> None:
        lines = [f"# ZooKeeper-mode broker {spec.node_id}, written by kraftwerk's migration tooling.",
                 f"broker.id={spec.node_id}", f"listeners=PLAINTEXT://127.0.0.1:{spec.port}",
                 f"zookeeper.connect={self.zk_hosts}", "kafka.metadata.migration.enable=true",
                 # As Kafka's migration guide asks: the ZooKeeper brokers know the KRaft quorum.
                 f"controller.quorum.voters={lc.voters_property(self.controllers)}"]
        if self.broker_release:
            lines.append(f"kraftwerk.release={self.broker_release}")
        lines += [f"{key}={value}" for key, value in self.broker_extra.items()]
        spec.directory.mkdir(parents=True, exist_ok=True)
        spec.config_path.write_text("\n".join(lines) + "\n")

    def start_zk_broker(self, broker_id: int) -> lc.ControllerProcess:
        spec = self.spec(broker_id)
        self._write_zk_broker_config(spec)
        process = lc.start_controller(spec, ("--zookeeper", self.zk_hosts))
        self.processes[broker_id] = process
        self.kraft_mode.discard(broker_id)
        return process

    def start_zk_brokers(self) -> None:
        for spec in self.brokers:
            self.start_zk_broker(spec.node_id)

    # -- the KRaft quorum --------------------------------------------------------------
    def _write_controller_config(self, spec: lc.ControllerSpec) -> None:
        extra = dict(self.controller_extra)
        extra.setdefault("broker.session.timeout.ms", "9000")
        if self.migration_enabled[spec.node_id]:
            extra["kafka.metadata.migration.enable"] = "true"
            extra["zookeeper.connect"] = self.zk_hosts
        lc.write_config(spec, self.controllers, extra)

    def format_controllers(self) -> None:
        for spec in self.controllers:
            self._write_controller_config(spec)
            lc.format_node(spec, self.cluster_id, self.metadata_version)

    def start_controller(self, node_id: int) -> lc.ControllerProcess:
        spec = self.spec(node_id)
        self._write_controller_config(spec)
        process = lc.start_controller(spec)
        self.processes[node_id] = process
        return process

    def start_controllers(self) -> None:
        for spec in self.controllers:
            self.start_controller(spec.node_id)

    def reset_quorum(self) -> None:
        """A fresh KRaft quorum (stopped, its metadata deleted, formatted again with the
        migration on): what an operator does before migrating again after a rollback."""
        for spec in self.controllers:
            self.stop(spec.node_id)
            shutil.rmtree(spec.metadata_dir, ignore_errors=True)
            self.migration_enabled[spec.node_id] = True
        self.format_controllers()

    def events(self, node_id: int, event: str) -> list[dict]:
        """The structured log lines `event` of one node's log."""
        return log_events(self.spec(node_id).log_path, event)

    # -- the migration's steps ---------------------------------------------------------
    def migrate_broker(self, broker_id: int) -> lc.ControllerProcess:
        """Restarts a ZooKeeper-mode broker as a KRaft broker agent (same id and port)."""
        self.stop(broker_id)
        spec = self.spec(broker_id)
        lc.write_config(spec, self.controllers, self._kraft_broker_extra())
        lc.format_node(spec, self.cluster_id, self.metadata_version)
        process = lc.start_controller(spec)
        self.processes[broker_id] = process
        self.kraft_mode.add(broker_id)
        return process

    def _kraft_broker_extra(self) -> dict[str, str]:
        extra = {"broker.heartbeat.interval.ms": "500"}
        if self.broker_release:
            extra["kraftwerk.release"] = self.broker_release
        extra.update(self.broker_extra)
        return extra

    def kraft_broker_spec(self, broker_id: int, directory: Path) -> lc.ControllerSpec:
        """Broker `broker_id` in KRaft mode with its files under `directory` (same id, same port)."""
        return lc.broker_spec(broker_id, self.spec(broker_id).port, directory)

    def write_kraft_broker_config(self, broker_id: int, directory: Path) -> Path:
        """The properties `migrate_broker` would run broker `broker_id` with, written under
        `directory` (for an operator who moves the broker by hand)."""
        return lc.write_config(self.kraft_broker_spec(broker_id, directory), self.controllers,
                               self._kraft_broker_extra())

    def finalize(self) -> None:
        """KIP-866's last step: every controller restarted with the migration switched off."""
        for spec in self.controllers:
            self.migration_enabled[spec.node_id] = False
            self.stop(spec.node_id)
            self.start_controller(spec.node_id)

    # -- processes ---------------------------------------------------------------------
    def stop(self, node_id: int, kill: bool = False) -> None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            lc.stop_controller(process, kill=kill)

    def alive(self, node_id: int) -> bool:
        process = self.processes.get(node_id)
        return process is not None and process.alive()

    def stop_all(self) -> None:
        try:
            lc.stop_nodes(self.processes)
        finally:
            self.zookeeper.stop()  # even when a node's stop failed: nothing is left running

    # -- views -------------------------------------------------------------------------
    def wait_until(self, what: str, condition: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
        # A frozen (SIGSTOP) node times out our bounded calls: that too means "ask again".
        lc.poll_until(what, condition, timeout_s=timeout_s, poll_s=POLL_S,
                      retry_on=(ClientError, OSError, trio.TooSlowError), error=MigrationStoryError)

    def migration(self) -> MigrationView | None:
        """DescribeMigration from the active controller, None while there is none."""
        for spec in self.controllers:
            if not self.alive(spec.node_id):
                continue
            try:
                view = describe_migration(spec.address)
            except (ClientError, OSError, trio.TooSlowError):
                continue
            if view is not None:
                return view
        return None

    def wait_state(self, state: str, timeout_s: float = READY_TIMEOUT_S) -> MigrationView:
        found: list[MigrationView] = []

        def reached() -> bool:
            view = self.migration()
            if view is not None and view.state == state:
                found.append(view)
                return True
            return False
        self.wait_until(f"the migration to reach {state}", reached, timeout_s)
        return found[-1]

    def wait_caught_up(self, timeout_s: float = READY_TIMEOUT_S) -> MigrationView:
        """Until ZooKeeper holds everything committed (write-behind lag 0)."""
        found: list[MigrationView] = []

        def caught_up() -> bool:
            view = self.migration()
            if view is not None and view.lag == 0 and view.zk_last_offset >= 0:
                found.append(view)
                return True
            return False
        self.wait_until("ZooKeeper to catch up with the metadata log", caught_up, timeout_s)
        return found[-1]

    def wait_controllers_in_step(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every live controller has applied what the active one has (standbys serve
        Metadata from their own replay, which trails the leader's by a little)."""
        def in_step() -> bool:
            view = self.migration()
            if view is None:
                return False
            leader = node_view(self.address(view.controller_id)).epoch
            return all(node_view(spec.address).epoch >= leader
                       for spec in self.controllers if self.alive(spec.node_id))
        self.wait_until("every controller to apply what the active one has", in_step, timeout_s)

    def unfenced_brokers(self) -> list[int]:
        """Brokers the active controller lists as unfenced (DescribeCluster)."""
        view = self.migration()
        if view is None:
            return []
        return unfenced_brokers(self.address(view.controller_id))

    def zookeeper_image(self):
        return read_zookeeper(self.zk_hosts)

    def metrics_port(self, node_id: int) -> int | None:
        """The Prometheus port node `node_id` serves (with `kraftwerk.metrics.port` set),
        from the `metrics.serving` event in its log; None if it logged none. The log
        is appended across restarts and a node logs the event before it reports its
        port, so once a start returned the last event is the running process's."""
        return metrics_port_from_log(self.spec(node_id).log_path)


def metrics_port_from_log(log_path: Path) -> int | None:
    """The port of the last `metrics.serving` event in a node's JSON-lines log."""
    if not log_path.exists():
        return None
    port = None
    with log_path.open("rb") as handle:
        for line in handle:
            if b'"metrics.serving"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill -9
            if event.get("event") == "metrics.serving":
                port = int(event["port"])
    return port
