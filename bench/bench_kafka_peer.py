"""kraftwerk's controllers beside Apache Kafka 4.4.0's, measured in one run on one machine.

Two quorums of 3 controllers each on 127.0.0.1, formatted at metadata.version 4.4-IV2,
run one after the other (never at once: both would share the two cores):

  kraftwerk  cli/local_cluster.py controllers (fsync on), Kafka's default quorum timeouts;
  kafka      `kafka.Kafka` with process.roles=controller (tests/kafka_peer/kafka_nodes.py:
             the classpath scripts/setup --test resolves), -Xmx384m -XX:+UseSerialGC.

Per quorum, with the same client code (bench/_common.py's blocking Conn, our codec):

  start-up     from spawning the 3 processes to the first ApiVersions answer, and to
               an active controller (an empty validate-only UpdateFeatures answered 0);
  commit       UpdateFeatures group.version 1 -> 0 -> 1 ... at the active controller, one
               at a time: each a committed FeatureLevelRecord; p50/p99 of send-to-answer;
  createtopics 16 client threads, each with its own connection, CreateTopics of 1-partition
               topics for a fixed time; topics acknowledged per second. A synthetic broker
               (BrokerRegistration + BrokerHeartbeat from this process) is registered and
               unfenced first, since both controllers place replicas on live brokers only;
  memory       resident memory (VmRSS) per controller after the above;
  failover     kill -9 of the active controller -> the first UpdateFeatures a survivor
               acknowledges (each survivor asked in turn every 5 ms); the killed node is
               restarted and the next run waits for an active controller again.

Timing targets live here, never in tests. Report ratios from one run, with the load.

Run: .venv/bin/python bench/bench_kafka_peer.py [--failover-runs 20] [--commits 300] [--createtopics-s 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _common as common  # noqa: E402

from kafka_peer import kafka_nodes as kn  # noqa: E402

METADATA_VERSION = "4.4-IV2"
UPDATE_FEATURES, CREATE_TOPICS, BROKER_REGISTRATION, BROKER_HEARTBEAT = 57, 19, 62, 63
UPGRADE, SAFE_DOWNGRADE = 1, 2
NOT_CONTROLLER, STALE_BROKER_EPOCH = 41, 77
UNKNOWN_BROKER_ID = 999_999
STARTUP_TIMEOUT_S = 120.0
FAILOVER_TIMEOUT_S = 30.0
POLL_S = 0.005  # asking the survivors again: there is nothing on them to wait on
HEARTBEAT_S = 1.0
BROKER_ID = 100
CLIENTS = 16


class System:
    """Three controllers of one implementation: start, find the active one, kill, restart."""

    name = ""

    def start_all(self) -> None: ...
    def port(self, node_id: int) -> int: ...
    def pid(self, node_id: int) -> int: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def stop_all(self) -> None: ...
    def alive(self) -> list[int]: ...

    node_ids = (1, 2, 3)

    def find_active(self, timeout_s: float) -> int:
        """The node whose controller takes commands. A write cannot tell (kraftwerk's
        standbys relay them); a heartbeat for a broker nobody registered can: the active
        controller answers STALE_BROKER_EPOCH, a standby NOT_CONTROLLER (both systems)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node_id in self.alive():
                try:
                    with common.Conn(self.port(node_id), "bench-peer-find", timeout_s=2.0) as conn:
                        reply, _ = conn.call(BROKER_HEARTBEAT, 1, {
                            "broker_id": UNKNOWN_BROKER_ID, "broker_epoch": -1, "current_metadata_offset": 0,
                            "want_fence": True, "want_shut_down": False})
                        if reply.error_code == STALE_BROKER_EPOCH:
                            return node_id
                except (OSError, RuntimeError):
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"{self.name}: no active controller within {timeout_s} s")


class Kraftwerk(System):
    name = "kraftwerk"

    def __init__(self, work: Path) -> None:
        self.quorum = common.Quorum(work / "kraftwerk", 3, METADATA_VERSION)

    def start_all(self) -> None:
        self.quorum.start_all()

    def port(self, node_id: int) -> int:
        return self.quorum.port(node_id)

    def pid(self, node_id: int) -> int:
        return self.quorum.pid(node_id)

    def kill(self, node_id: int) -> None:
        self.quorum.kill(node_id)

    def restart(self, node_id: int) -> None:
        self.quorum.start(node_id)

    def stop_all(self) -> None:
        self.quorum.stop_all()

    def alive(self) -> list[int]:
        return self.quorum.alive()


class Kafka(System):
    name = "kafka"

    def __init__(self, work: Path) -> None:
        ports = common.free_ports(3)
        voters = kn.quorum_voters((i, f"127.0.0.1:{p}") for i, p in zip(self.node_ids, ports))
        self.nodes = {i: kn.KafkaNode(kn.KafkaNodeConfig(i, p, work / "kafka" / f"controller-{i}", voters,
                                                         roles=("controller",)))
                      for i, p in zip(self.node_ids, ports)}
        cluster_id = common.random_cluster_id()
        for node in self.nodes.values():
            node.format(cluster_id, "--release-version", METADATA_VERSION)

    def start_all(self) -> None:
        for node in self.nodes.values():
            node.start()

    def port(self, node_id: int) -> int:
        return self.nodes[node_id].config.port

    def pid(self, node_id: int) -> int:
        return self.nodes[node_id].process.pid

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int) -> None:
        self.nodes[node_id].start()

    def stop_all(self) -> None:
        kn.stop_all(self.nodes.values())

    def alive(self) -> list[int]:
        return [i for i, node in self.nodes.items() if node.alive()]


# -- measurements ------------------------------------------------------------------------

def startup(system: System) -> dict:
    started = time.perf_counter()
    system.start_all()
    first_answer = None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while first_answer is None and time.monotonic() < deadline:
        for node_id in system.node_ids:
            try:
                with common.Conn(system.port(node_id), "bench-peer-start", timeout_s=2.0) as conn:
                    conn.call(18, 3, {"client_software_name": "bench", "client_software_version": "1"})
                first_answer = time.perf_counter() - started
                break
            except OSError:
                continue
        time.sleep(0.01)
    if first_answer is None:
        raise RuntimeError(f"{system.name}: no ApiVersions answer within {STARTUP_TIMEOUT_S} s")
    system.find_active(STARTUP_TIMEOUT_S)
    return {"first_answer_s": first_answer, "active_s": time.perf_counter() - started}


def toggle_body(level: int) -> dict:
    return {"timeout_ms": 10_000, "validate_only": False, "feature_updates": [
        {"feature": "group.version", "max_version_level": level,
         "upgrade_type": UPGRADE if level else SAFE_DOWNGRADE}]}


def commit_latency(system: System, commits: int) -> list[float]:
    active = system.find_active(STARTUP_TIMEOUT_S)
    samples = []
    with common.Conn(system.port(active), "bench-peer-commit") as conn:
        # Kafka's controller refuses a feature change until every controller has
        # registered itself (ControllerRegistration): not measured, waited for.
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while conn.call(UPDATE_FEATURES, 1, toggle_body(1))[0].error_code != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{system.name}: UpdateFeatures still refused after {STARTUP_TIMEOUT_S} s")
            time.sleep(0.1)
        level = 0
        for _ in range(commits):
            reply, elapsed_ns = conn.call(UPDATE_FEATURES, 1, toggle_body(level))
            if reply.error_code != 0:
                raise RuntimeError(f"{system.name}: UpdateFeatures failed {reply.error_code} {reply.error_message}")
            samples.append(elapsed_ns / 1e6)
            level = 1 - level
    return samples


class SyntheticBroker:
    """One broker registration kept alive by heartbeats from this process, so that the
    controllers have somewhere to place replicas."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.stop = threading.Event()
        self.unfenced = threading.Event()
        self.epoch = -1
        self.thread: threading.Thread | None = None

    def register(self) -> None:
        active = self.system.find_active(STARTUP_TIMEOUT_S)
        with common.Conn(self.system.port(active), "bench-peer-broker") as conn:
            cluster = conn.call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})[0]
            reply, _ = conn.call(BROKER_REGISTRATION, 2, {
                "broker_id": BROKER_ID, "cluster_id": cluster.cluster_id, "incarnation_id": uuid.uuid4(),
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 19999, "security_protocol": 0}],
                "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 33},
                             {"name": "group.version", "min_supported_version": 0, "max_supported_version": 1},
                             {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1},
                             {"name": "transaction.version", "min_supported_version": 0, "max_supported_version": 2},
                             {"name": "eligible.leader.replicas.version", "min_supported_version": 0,
                              "max_supported_version": 1},
                             {"name": "share.version", "min_supported_version": 0, "max_supported_version": 2},
                             {"name": "streams.version", "min_supported_version": 0, "max_supported_version": 1}],
                "rack": None, "is_migrating_zk_broker": False, "log_dirs": [uuid.uuid4()]})
            if reply.error_code != 0:
                raise RuntimeError(f"{self.system.name}: BrokerRegistration failed {reply.error_code}")
            self.epoch = reply.broker_epoch
        self.thread = threading.Thread(target=self._heartbeat, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.unfenced.is_set() and time.monotonic() < deadline:
            self.unfenced.wait(0.1)
        if not self.unfenced.is_set():
            raise RuntimeError(f"{self.system.name}: the synthetic broker was never unfenced")

    def _heartbeat(self) -> None:
        while not self.stop.is_set():
            try:
                active = self.system.find_active(5.0)
                with common.Conn(self.system.port(active), "bench-peer-heartbeat") as conn:
                    while not self.stop.is_set():
                        reply, _ = conn.call(BROKER_HEARTBEAT, 1, {
                            "broker_id": BROKER_ID, "broker_epoch": self.epoch,
                            "current_metadata_offset": 1 << 40, "want_fence": False, "want_shut_down": False})
                        if reply.error_code != 0:
                            break
                        if not reply.is_fenced:
                            self.unfenced.set()
                        self.stop.wait(HEARTBEAT_S)
            except (OSError, RuntimeError):
                self.stop.wait(0.2)


def create_topics(system: System, seconds: float, tag: str) -> float:
    active = system.find_active(STARTUP_TIMEOUT_S)
    counts = [0] * CLIENTS
    errors: list[str] = []
    end = time.monotonic() + seconds

    def client(index: int) -> None:
        with common.Conn(system.port(active), f"bench-peer-create-{index}") as conn:
            serial = 0
            while time.monotonic() < end:
                serial += 1
                reply, _ = conn.call(CREATE_TOPICS, 7, {
                    "topics": [{"name": f"{tag}-{index}-{serial}", "num_partitions": 1, "replication_factor": 1,
                                "assignments": [], "configs": []}], "timeout_ms": 10_000, "validate_only": False})
                code = reply.topics[0].error_code
                if code:
                    errors.append(f"{code} {reply.topics[0].error_message}")
                    return
                counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{system.name}: CreateTopics failed: {errors[:3]}")
    return sum(counts) / elapsed


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def failover(system: System, runs: int) -> list[float]:
    samples = []
    level = 0
    for _ in range(runs):
        active = system.find_active(STARTUP_TIMEOUT_S)
        survivors = [n for n in system.node_ids if n != active]
        conns = {n: common.Conn(system.port(n), "bench-peer-failover") for n in survivors}
        try:
            killed_at = time.perf_counter()
            system.kill(active)
            deadline = time.monotonic() + FAILOVER_TIMEOUT_S
            acknowledged = None
            while acknowledged is None and time.monotonic() < deadline:
                for node_id, conn in conns.items():
                    try:
                        reply, _ = conn.call(UPDATE_FEATURES, 1, toggle_body(level))
                    except OSError:
                        conns[node_id] = common.Conn(system.port(node_id), "bench-peer-failover")
                        continue
                    if reply.error_code == 0:
                        acknowledged = time.perf_counter() - killed_at
                        level = 1 - level
                        break
                time.sleep(POLL_S)
            if acknowledged is None:
                raise RuntimeError(f"{system.name}: no write acknowledged within {FAILOVER_TIMEOUT_S} s of the kill")
            samples.append(acknowledged * 1000)
        finally:
            for conn in conns.values():
                conn.close()
        system.restart(active)
        wait_whole(system)
    return samples


def wait_whole(system: System) -> None:
    """Until the active controller sees every voter caught up to its high watermark
    (a restarted node replayed the log and serves again)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            active = system.find_active(STARTUP_TIMEOUT_S)
            with common.Conn(system.port(active), "bench-peer-whole", timeout_s=2.0) as conn:
                part = common.describe_quorum(conn)
            if part is not None and len(part.current_voters) == 3 and all(
                    v.log_end_offset >= part.high_watermark for v in part.current_voters):
                for node_id in system.node_ids:
                    with common.Conn(system.port(node_id), "bench-peer-whole", timeout_s=2.0):
                        pass
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{system.name}: the restarted controller did not catch up within {STARTUP_TIMEOUT_S} s")


def measure(system: System, args) -> dict:
    busy0, wall0 = common.machine_busy_s(), time.monotonic()
    result = {"startup": startup(system)}
    commit = commit_latency(system, args.commits)
    result["commit_p50_ms"] = common.percentile(commit, 0.5)
    result["commit_p99_ms"] = common.percentile(commit, 0.99)
    broker = SyntheticBroker(system)
    broker.register()
    try:
        result["createtopics_per_s"] = create_topics(system, args.createtopics_s, f"t{system.name}")
    finally:
        broker.stop.set()
    result["rss_mb"] = [rss_mb(system.pid(n)) for n in system.node_ids]
    result["failover_ms"] = failover(system, args.failover_runs)
    result["load"] = (common.machine_busy_s() - busy0) / (time.monotonic() - wall0) / os.cpu_count()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--createtopics-s", type=float, default=10.0)
    parser.add_argument("--failover-runs", type=int, default=20)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    missing = kn.server_missing()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    work = common.work_dir(args.work, "bench-kafka-peer-")
    results = {}
    try:
        for make in (Kraftwerk, Kafka):
            system = make(work)
            try:
                results[system.name] = measure(system, args)
            finally:
                system.stop_all()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours, theirs = results["kraftwerk"], results["kafka"]
    rows = []
    for label, key, fmt in (("first ApiVersions answer after spawn (s)", ("startup", "first_answer_s"), "{:.2f}"),
                            ("active controller after spawn (s)", ("startup", "active_s"), "{:.2f}"),
                            ("UpdateFeatures commit p50 (ms)", ("commit_p50_ms",), "{:.2f}"),
                            ("UpdateFeatures commit p99 (ms)", ("commit_p99_ms",), "{:.2f}"),
                            ("CreateTopics acknowledged / s, 16 clients", ("createtopics_per_s",), "{:.0f}")):
        a, b = ours, theirs
        for part in key:
            a, b = a[part], b[part]
        rows.append([label, fmt.format(a), fmt.format(b), f"{a / b:.2f}"])
    for label, fn in (("failover median (ms)", lambda s: common.percentile(s, 0.5)),
                      ("failover max (ms)", max)):
        a, b = fn(ours["failover_ms"]), fn(theirs["failover_ms"])
        rows.append([label, f"{a:.0f}", f"{b:.0f}", f"{a / b:.2f}"])
    a, b = sum(ours["rss_mb"]) / 3, sum(theirs["rss_mb"]) / 3
    rows.append(["resident memory per controller (MiB)", f"{a:.0f}", f"{b:.0f}", f"{a / b:.2f}"])
    print(f"$ {common.command_line()}")
    print(f"failover runs: {args.failover_runs}; machine load during kraftwerk {ours['load']:.2f}, "
          f"during kafka {theirs['load']:.2f} (busy CPU fraction of {os.cpu_count()} cores)")
    print(common.markdown_table(["", "kraftwerk", "Kafka 4.4.0", "kraftwerk / Kafka"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
