"""ZooKeeper -> KRaft migration (KIP-866): copy time and controller downtime
against metadata size, and the dual-write (write-behind) lag under a steady write rate.

Everything is real processes on 127.0.0.1 (cli/migration_story.py): Debian's
ZooKeeper 3.8 (forceSync on by default here: `--no-zk-fsync` turns it off), three
ZooKeeper-mode broker agents, and a 3-voter KRaft quorum (fsync on) started with
`kafka.metadata.migration.enable=true`.

  copy        per size N (partitions in ZooKeeper: N/10 topics x 10 partitions, RF 3,
              3 ZooKeeper brokers): seed ZooKeeper, start the ZooKeeper brokers, format
              and start the controllers, and from that moment on
              - a probe thread sends IncrementalAlterConfigs (one ConfigRecord: the
                cluster-default broker config `bench.probe` = a counter) to the active
                controller every PROBE_INTERVAL_S, one at a time, and records each
                request's wait. The copy's transaction holds every other write until
                it ends, so the longest wait is the controller's write downtime;
              - the main thread polls DescribeMigration every 50 ms: wall time from
                "controllers started" to MigrationActive;
              - the active controller's log gives `migration.copy_started` /
                `migration.copy_finished` (records, seconds of the transaction).
              Downtime is reported per partition and per copied record: the KIP says
              it is proportional to the metadata size. The controllers' CPU seconds
              between those two log lines (/proc, sampled every 20 ms) are reported
              too, in total and per copied record: on a loaded machine they vary far
              less than the wall time.
  dual-write  on the cluster of one size (--dual-write-size, default the smallest),
              after MigrationActive and ZooKeeper caught up: per rate R, W worker
              threads send IncrementalAlterConfigs SET retention.ms on topic configs
              (one ConfigRecord per topic, --records-per-write topics per request;
              each worker owns a fixed set of topics, so the last value per topic is
              known), paced open-loop at R requests/s for --duration-s.
              A sampler reads DescribeMigration's ZkWriteBehindLag every 50 ms.
              ZooKeeper write transactions/s come from `srvr`'s zxid (one zxid per
              multi, and per session create/close). After each rate: wait for lag 0
              and check that ZooKeeper's /config/topics/<t> holds the last value
              written to every topic.
              "lag bounded": no write refused as blocked (REQUEST_TIMED_OUT) and the
              mean lag of the last quarter of the run is not above the mean of the
              first quarter by more than max(20, R x records-per-write / 4) records (a
              quarter second of the offered records). Reported apart: whether the
              controller accepted >= 90 % of the offered rate (when it did not while
              the lag stayed bounded, the write path saturated, not ZooKeeper).

  round-cost  (--round-cost, offline, no processes) the CPU time of one write-behind
              round's pure work (MigrationDriver._round: desired_* over the whole image,
              plan_writes for one topic, ZkMirror.apply) per size: the driver runs it on
              the controller's event loop once per committed batch it writes behind.

Timing targets live here, never in tests. The machine is small and shared: absolute
numbers are noisy, ratios measured within one run are the result; `uptime` (the load
average) is printed at the start and the end. `--json PATH` writes every result field
(tests/benchmarks/test_bench_migration.py runs the bench at a tiny size that way).

Run: .venv/bin/python bench/bench_migration.py [--sizes 1000,10000,100000]
         [--rates 50,100,200,400,800] [--duration-s 20] [--records-per-write 1]
         [--dual-write-size N] [--quick] [--dir PATH] [--keep] [--json PATH]
     .venv/bin/python bench/bench_migration.py --round-cost [--sizes 1000,10000,100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from cli.migration_story import MigrationCluster  # noqa: E402
from server.storage.meta_properties import random_uuid_string  # noqa: E402
from server.zk.process import ZooKeeperSettings, four_letter_word, zookeeper_missing  # noqa: E402
from server.zk.seed import SeedSpec, read_zookeeper  # noqa: E402

DESCRIBE_MIGRATION_KEY, DESCRIBE_MIGRATION_VERSION = 10001, 0
ALTER_CONFIGS_KEY, ALTER_CONFIGS_VERSION = 44, 1
NOT_CONTROLLER = 41
REQUEST_TIMED_OUT = 7
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET = 0
MIGRATION_ACTIVE = 4
PARTITIONS_PER_TOPIC = 10
ZK_BROKERS = 3
PROBE_INTERVAL_S = 0.02
SAMPLE_INTERVAL_S = 0.05
CPU_SAMPLE_INTERVAL_S = 0.02  # the controllers' /proc CPU times (CpuSampler)
FIND_ACTIVE_POLL_S = 0.05
ACTIVE_TIMEOUT_S = 900.0  # controllers started -> MigrationActive, per size
CATCH_UP_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 600.0  # a probe held by a long copy waits this long at most
WORKERS = 32
SETTLE_S = 2.0  # after MigrationActive: let the probe see the controller idle again


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()


def parse_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


# --------------------------------------------------------------------------
# talking to the quorum
# --------------------------------------------------------------------------

def describe_migration(conn: common.Conn):
    reply, _ = conn.call(DESCRIBE_MIGRATION_KEY, DESCRIBE_MIGRATION_VERSION, {})
    return reply


def find_active(cluster: MigrationCluster, deadline: float) -> int | None:
    """The controller that answers DescribeMigration (the active one), None at the deadline."""
    while time.monotonic() < deadline:
        for spec in cluster.controllers:
            try:
                with common.Conn(spec.port, "bench-migration-find", timeout_s=2.0) as conn:
                    if describe_migration(conn).error_code == 0:
                        return spec.node_id
            except (OSError, RuntimeError):
                pass
        time.sleep(FIND_ACTIVE_POLL_S)
    return None


def alter_config(conn: common.Conn, resource_type: int, names: str | list[str], key: str,
                 value: str) -> tuple[int, float]:
    """Sets `key` = `value` on every resource in `names` (one ConfigRecord each) in one
    request: (the first non-zero error code of its resources or 0, seconds from send to answer)."""
    names = [names] if isinstance(names, str) else names
    reply, elapsed_ns = conn.call(ALTER_CONFIGS_KEY, ALTER_CONFIGS_VERSION, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configs": [{"name": key, "config_operation": OP_SET, "value": value}]} for name in names],
        "validate_only": False})
    return next((r.error_code for r in reply.responses if r.error_code), 0), elapsed_ns / 1e9


def zk_zxid(port: int) -> int | None:
    try:
        answer = four_letter_word(port, "srvr")
    except OSError:
        return None
    found = re.search(r"Zxid:\s*0x([0-9a-fA-F]+)", answer)
    return int(found.group(1), 16) & 0xFFFFFFFF if found else None  # low 32 bits: the counter


def log_events(path: Path, names: set[str]) -> list[dict]:
    events = []
    if not path.exists():
        return events
    with open(path, "r", errors="replace") as handle:
        for line in handle:
            if '"event"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") in names:
                events.append(entry)
    return events


def iso_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --------------------------------------------------------------------------
# 1. the copy and the controller's downtime
# --------------------------------------------------------------------------

@dataclass
class Probe:
    """IncrementalAlterConfigs to the active controller, one at a time, every PROBE_INTERVAL_S."""

    cluster: MigrationCluster
    stop: threading.Event = field(default_factory=threading.Event)
    # (wall clock at send, seconds waited, error code or -1 for a connection failure)
    samples: list[tuple[float, float, int]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def run(self, deadline: float) -> None:
        counter = 0
        conn = None
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                if conn is None:
                    active = find_active(self.cluster, min(deadline, time.monotonic() + 5.0))
                    if active is None:
                        continue
                    try:
                        conn = common.Conn(self.cluster.spec(active).port, "bench-migration-probe",
                                           timeout_s=REQUEST_TIMEOUT_S)
                    except OSError:
                        conn = None
                        continue
                counter += 1
                sent = time.time()
                try:
                    code, waited = alter_config(conn, RESOURCE_BROKER, "", "bench.probe", str(counter))
                except (OSError, RuntimeError) as exc:
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                    conn.close()
                    conn = None
                    continue
                self.samples.append((sent, waited, code))
                if code == NOT_CONTROLLER:
                    conn.close()
                    conn = None
                elif code:
                    self.errors[f"error {code}"] = self.errors.get(f"error {code}", 0) + 1
                self.stop.wait(max(0.0, PROBE_INTERVAL_S - waited))
        finally:
            if conn is not None:
                conn.close()


@dataclass
class CopyResult:
    partitions: int
    topics: int
    seed_s: float
    to_active_s: float
    copy_records: int
    copy_s: float
    started_to_copy_s: float
    copy_to_active_s: float
    probe_count: int
    max_wait_s: float
    max_wait_at_s: float  # when the longest-waiting probe was sent, from "controllers started"
    probes_over_100ms: int
    probe_errors: dict[str, int]
    copies_started: int  # > 1: a leader lost its leadership mid-copy and the next one copied again
    aborted: int  # migration.transaction_aborted events
    elections: int  # raft.election_started events on all controllers after start
    leaders: list[int]  # controller ids that logged migration.copy_started, in order
    # CPU seconds (user + system, /proc) the three controllers used between the finished
    # copy's copy_started and copy_finished log lines, interpolated between 20 ms samples;
    # None where /proc is not readable. Far less sensitive to the machine's load than the
    # copy's wall time: the figure to compare when the machine is not idle.
    copy_cpu_s: float | None = None
    copy_cpu_s_leader: float | None = None  # the controller that ran the finished copy


class CpuSampler:
    """Samples each controller's CPU seconds (utime + stime from /proc/<pid>/stat) every
    CPU_SAMPLE_INTERVAL_S with the wall time, so the CPU spent between two log lines can be
    read afterwards (`between`)."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.pids = pids
        self.samples: dict[int, list[tuple[float, float]]] = {node: [] for node in pids}
        self.stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _cpu_s(self, pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / self._tick

    def run(self, deadline: float) -> None:
        while not self.stop.is_set() and time.monotonic() < deadline:
            now = time.time()
            for node, pid in self.pids.items():
                cpu = self._cpu_s(pid)
                if cpu is not None:
                    self.samples[node].append((now, cpu))
            self.stop.wait(CPU_SAMPLE_INTERVAL_S)

    def at(self, node: int, wall: float) -> float | None:
        """CPU seconds of `node` at wall time `wall`, linear between the samples around it."""
        samples = self.samples.get(node) or []
        before = [s for s in samples if s[0] <= wall]
        after = [s for s in samples if s[0] >= wall]
        if not before or not after:
            return None
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (wall - t0) / (t1 - t0)

    def between(self, node: int, start: float, end: float) -> float | None:
        first, last = self.at(node, start), self.at(node, end)
        return None if first is None or last is None else last - first


def wait_active(cluster: MigrationCluster, deadline: float) -> float:
    """Polls DescribeMigration every 50 ms until MigrationActive; returns time.monotonic() then."""
    while time.monotonic() < deadline:
        for spec in cluster.controllers:
            try:
                with common.Conn(spec.port, "bench-migration-state", timeout_s=5.0) as conn:
                    reply = describe_migration(conn)
                if reply.error_code == 0 and reply.migration_state >= MIGRATION_ACTIVE:
                    return time.monotonic()
            except (OSError, RuntimeError):
                pass
        time.sleep(SAMPLE_INTERVAL_S)
    raise RuntimeError(f"the migration did not reach MigrationActive within {ACTIVE_TIMEOUT_S:.0f} s")


def start_cluster(work: Path, partitions: int, zk_fsync: bool) -> tuple[MigrationCluster, float]:
    topics = max(1, partitions // PARTITIONS_PER_TOPIC)
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=tuple(range(1, ZK_BROKERS + 1)), topics=topics,
                    partitions_per_topic=PARTITIONS_PER_TOPIC, replication_factor=3,
                    topic_configs={"retention.ms": "604800000"})
    cluster = MigrationCluster(work, zk_brokers=ZK_BROKERS, seed=seed,
                               zookeeper_settings=ZooKeeperSettings(force_sync=zk_fsync))
    cluster.zookeeper.start()
    from server.zk.seed import seed_zookeeper
    started = time.monotonic()
    seed_zookeeper(cluster.zk_hosts, cluster.seed)
    seed_s = time.monotonic() - started
    cluster.start_zk_brokers()
    # Counted through /brokers/ids alone: reading the whole image takes seconds at 100k partitions.
    cluster.wait_until("three ZooKeeper brokers", lambda: _zk_broker_count(cluster) == ZK_BROKERS)
    cluster.format_controllers()
    return cluster, seed_s


def _zk_broker_count(cluster: MigrationCluster) -> int:
    from kazoo.client import KazooClient
    client = KazooClient(hosts=cluster.zk_hosts, timeout=10)
    client.start(timeout=10)
    try:
        return len(client.get_children("/brokers/ids"))
    finally:
        client.stop()
        client.close()


def run_copy(cluster: MigrationCluster, partitions: int, seed_s: float) -> CopyResult:
    probe = Probe(cluster)
    thread = threading.Thread(target=probe.run, args=(time.monotonic() + ACTIVE_TIMEOUT_S + 60,), daemon=True)
    wall_start = time.time()
    started = time.monotonic()
    cluster.start_controllers()
    sampler = CpuSampler({spec.node_id: cluster.processes[spec.node_id].process.pid for spec in cluster.controllers})
    sampling = threading.Thread(target=sampler.run, args=(time.monotonic() + ACTIVE_TIMEOUT_S + 60,), daemon=True)
    sampling.start()
    thread.start()
    try:
        active_at = wait_active(cluster, started + ACTIVE_TIMEOUT_S)
        time.sleep(SETTLE_S)
    finally:
        probe.stop.set()
        sampler.stop.set()
        thread.join(timeout=REQUEST_TIMEOUT_S)
        sampling.join(timeout=REQUEST_TIMEOUT_S)
    events: list[dict] = []
    names = {"migration.copy_started", "migration.copy_finished", "migration.transaction_aborted",
             "raft.election_started"}
    for spec in cluster.controllers:
        events += [dict(e, node=spec.node_id) for e in log_events(spec.log_path, names)]
    events.sort(key=lambda e: e.get("timestamp", ""))
    finished = [e for e in events if e["event"] == "migration.copy_finished"]
    begun = [e for e in events if e["event"] == "migration.copy_started"]
    if len(finished) != 1:
        raise RuntimeError(f"expected one finished copy, the controllers' logs show {len(begun)} started, "
                           f"{len(finished)} finished")
    # The copy that finished is the last one started before it (earlier ones were aborted).
    last_begun = [e for e in begun if e["timestamp"] <= finished[0]["timestamp"]][-1]
    copy_started_wall = iso_s(last_begun["timestamp"])
    copy_finished_wall = iso_s(finished[0]["timestamp"])
    if len(begun) > 1:
        for e in events:
            print(f"  {e['timestamp']} controller {e['node']}: {e['event']} "
                  f"{ {k: v for k, v in e.items() if k not in ('timestamp', 'event', 'node', 'level', 'logger')} }",
                  file=sys.stderr)
    worst = max(probe.samples, key=lambda s: s[1]) if probe.samples else (wall_start, float("nan"), 0)
    cpu = {spec.node_id: sampler.between(spec.node_id, copy_started_wall, copy_finished_wall)
           for spec in cluster.controllers}
    copy_cpu_s = None if any(v is None for v in cpu.values()) else sum(cpu.values())
    return CopyResult(
        partitions=partitions, topics=len(cluster.seed.topic_names()), seed_s=seed_s,
        to_active_s=active_at - started, copy_records=int(finished[0]["records"]),
        copy_s=float(finished[0]["seconds"]), started_to_copy_s=copy_started_wall - wall_start,
        copy_to_active_s=(wall_start + (active_at - started)) - copy_finished_wall,
        probe_count=len(probe.samples), max_wait_s=worst[1], max_wait_at_s=worst[0] - wall_start,
        probes_over_100ms=sum(1 for s in probe.samples if s[1] > 0.1), probe_errors=dict(probe.errors),
        copies_started=len(begun), aborted=sum(1 for e in events if e["event"] == "migration.transaction_aborted"),
        elections=sum(1 for e in events if e["event"] == "raft.election_started"),
        leaders=[e["node"] for e in begun], copy_cpu_s=copy_cpu_s, copy_cpu_s_leader=cpu.get(last_begun["node"]))


# --------------------------------------------------------------------------
# 2. dual-write lag under a steady write rate
# --------------------------------------------------------------------------

@dataclass
class RateResult:
    rate: int
    records_per_write: int
    sent: int
    ok: int
    blocked: int
    other_errors: int
    achieved_per_s: float
    late_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    lag_samples: int
    lag_p50: float
    lag_p99: float
    lag_max: float
    lag_first_quarter: float
    lag_last_quarter: float
    lag_bounded: bool
    rate_met: bool
    zk_txn_per_s: float
    drain_s: float
    zk_checked: int
    zk_mismatches: int


class Sampler:
    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.samples: list[tuple[float, int, int, bool]] = []  # (monotonic, lag, zk_last_offset, blocked)
        self.failures = 0

    def run(self, deadline: float) -> None:
        conn = None
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                tick = time.monotonic()
                try:
                    if conn is None:
                        conn = common.Conn(self.port, "bench-migration-sampler", timeout_s=5.0)
                    reply = describe_migration(conn)
                    if reply.error_code == 0:
                        self.samples.append((time.monotonic(), reply.zk_write_behind_lag, reply.zk_last_offset,
                                             bool(reply.writes_blocked)))
                    else:
                        self.failures += 1
                except (OSError, RuntimeError):
                    self.failures += 1
                    if conn is not None:
                        conn.close()
                    conn = None
                self.stop.wait(max(0.0, SAMPLE_INTERVAL_S - (time.monotonic() - tick)))
        finally:
            if conn is not None:
                conn.close()


def wait_lag_zero(port: int, timeout_s: float) -> float:
    started = time.monotonic()
    with common.Conn(port, "bench-migration-drain", timeout_s=5.0) as conn:
        while time.monotonic() - started < timeout_s:
            reply = describe_migration(conn)
            if reply.error_code == 0 and reply.zk_write_behind_lag == 0 and reply.zk_last_offset >= 0:
                return time.monotonic() - started
            time.sleep(0.01)
    raise RuntimeError(f"ZooKeeper did not catch up within {timeout_s:.0f} s")


def run_rate(cluster: MigrationCluster, port: int, topics: list[str], rate: int, duration_s: float,
             value_base: int, per_write: int) -> RateResult:
    count = max(1, int(rate * duration_s))
    # Each worker owns at least `per_write` topics: one request names distinct topics.
    workers = max(1, min(WORKERS, len(topics) // per_write, count))
    owned = [[t for i, t in enumerate(topics) if i % workers == w] for w in range(workers)]
    # per worker: list of (index, scheduled, sent, latency, code)
    results: list[list[tuple[int, float, float, float, int]]] = [[] for _ in range(workers)]
    last_value: list[dict[str, str]] = [{} for _ in range(workers)]
    uncertain: set[str] = set()
    start_at = time.monotonic() + 0.5
    hard_deadline = start_at + duration_s + 60.0

    def worker(w: int) -> None:
        turn = 0
        with common.Conn(port, f"bench-migration-writer-{w}", timeout_s=30.0) as conn:
            for index in range(w, count, workers):
                scheduled = start_at + index / rate
                now = time.monotonic()
                if now > hard_deadline:
                    break
                if scheduled > now:
                    time.sleep(scheduled - now)
                mine = owned[w]
                names = [mine[(turn * per_write + j) % len(mine)] for j in range(per_write)]
                turn += 1
                value = str(value_base + index)
                sent = time.monotonic()
                try:
                    code, latency = alter_config(conn, RESOURCE_TOPIC, names, "retention.ms", value)
                except (OSError, RuntimeError):
                    uncertain.update(names)
                    results[w].append((index, scheduled, sent, time.monotonic() - sent, -1))
                    return
                results[w].append((index, scheduled, sent, latency, code))
                if code == 0:
                    for name in names:
                        last_value[w][name] = value

    zxid_before = zk_zxid(cluster.zookeeper.port)
    sampler = Sampler(port)
    sampler_thread = threading.Thread(target=sampler.run, args=(hard_deadline + 5,), daemon=True)
    sampler_thread.start()
    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(1.0, hard_deadline + 5 - time.monotonic()))
    writes_end = time.monotonic()
    zxid_after = zk_zxid(cluster.zookeeper.port)
    sampler.stop.set()
    sampler_thread.join(timeout=10)
    drain_s = wait_lag_zero(port, CATCH_UP_TIMEOUT_S)

    done = [r for per in results for r in per]
    ok = [r for r in done if r[4] == 0]
    last_done = max((r[2] + r[3] for r in done), default=start_at)
    elapsed = max(1e-9, last_done - start_at)
    window = [s for s in sampler.samples if start_at <= s[0] <= last_done]
    lags = [float(s[1]) for s in window]
    quarter = max(1, len(lags) // 4)
    first_q = sum(lags[:quarter]) / quarter if lags else float("nan")
    last_q = sum(lags[-quarter:]) / quarter if lags else float("nan")
    blocked = sum(1 for r in done if r[4] == REQUEST_TIMED_OUT)
    achieved = len(ok) / elapsed
    # Lag in records; a quarter second of the offered record rate is the allowed growth.
    lag_bounded = bool(lags) and blocked == 0 and last_q - first_q <= max(20.0, rate * per_write / 4)
    rate_met = achieved >= 0.9 * rate

    # Correctness: ZooKeeper holds the last value written to every topic.
    image = read_zookeeper(cluster.zk_hosts)
    expected = {t: v for per in last_value for t, v in per.items() if t not in uncertain}
    mismatches = sum(1 for t, v in expected.items()
                     if image.topic_configs.get(t) is None or image.topic_configs[t].config.get("retention.ms") != v)
    zk_txn = (zxid_after - zxid_before) / max(1e-9, writes_end - start_at) \
        if zxid_before is not None and zxid_after is not None else float("nan")
    return RateResult(
        rate=rate, records_per_write=per_write, sent=len(done), ok=len(ok), blocked=blocked,
        other_errors=len(done) - len(ok) - blocked,
        achieved_per_s=achieved,
        late_p99_ms=common.percentile([max(0.0, r[2] - r[1]) for r in done], 0.99) * 1000,
        latency_p50_ms=common.percentile([r[3] for r in ok], 0.5) * 1000,
        latency_p99_ms=common.percentile([r[3] for r in ok], 0.99) * 1000,
        lag_samples=len(lags), lag_p50=common.percentile(lags, 0.5), lag_p99=common.percentile(lags, 0.99),
        lag_max=max(lags) if lags else float("nan"), lag_first_quarter=first_q, lag_last_quarter=last_q,
        lag_bounded=lag_bounded, rate_met=rate_met, zk_txn_per_s=zk_txn, drain_s=drain_s,
        zk_checked=len(expected), zk_mismatches=mismatches)


# --------------------------------------------------------------------------
# 3. (offline) the CPU cost of one write-behind round against metadata size
# --------------------------------------------------------------------------

def run_round_cost(sizes: list[int]) -> list[dict]:
    """One write-behind round's pure work (desired_topics, desired_broker_configs,
    desired_features, plan_writes for a scope of one topic, ZkMirror.apply), timed in this
    process on an image built by replaying the copy's records: no processes, no I/O. Two
    ways in one run: over the whole image (the driver before it was scoped) and over the
    batch's scope only (what MigrationDriver._round does now). The driver runs this on the
    controller's event loop, so it bounds the write path during dual writes."""
    from server.controller.state import ControllerState
    from server.migration import copy as mcopy
    from server.migration.driver import ZkMirror
    from server.migration.zk_sync import Scope, desired_broker_configs, desired_features, desired_topics, plan_writes
    from server.zk.seed import spec_image

    rows = []
    for partitions in sizes:
        spec = SeedSpec(cluster_id=random_uuid_string(), topics=max(1, partitions // PARTITIONS_PER_TOPIC),
                        partitions_per_topic=PARTITIONS_PER_TOPIC)
        image = spec_image(spec)
        plan = mcopy.plan_copy(image, set())
        state = ControllerState(spec.cluster_id)
        for offset, item in enumerate(plan.records):
            state.replay(item, offset)
        mirror = ZkMirror.of(image)
        scope = Scope(topics=frozenset([spec.topic_names()[0]]))
        runs = max(2, min(20, 200_000 // partitions))

        def timed(scoped: bool) -> float:
            started = time.perf_counter()
            for _ in range(runs):
                topics = desired_topics(state, 2, scope.topics if scoped else None)
                brokers = desired_broker_configs(state, scope.broker_configs if scoped else None)
                features = desired_features(state)
                plan_writes(scope, desired_topics=topics, desired_broker_configs=brokers, desired_features=features,
                            actual_topics=mirror.topics, actual_topic_configs=mirror.topic_configs,
                            actual_broker_configs=mirror.broker_configs, actual_features=mirror.features)
                mirror.apply(scope, topics, brokers, features)
            return (time.perf_counter() - started) / runs

        whole_s, scoped_s = timed(False), timed(True)
        rows.append({"partitions": partitions, "rounds": runs, "whole_ms": whole_s * 1000,
                     "scoped_ms": scoped_s * 1000})
    print(common.markdown_table(["partitions", "rounds timed", "whole image: ms per round",
                                 "scoped (the driver now): ms per round", "whole / scoped"],
                                [[f"{r['partitions']:,}", r["rounds"], f"{r['whole_ms']:.2f}", f"{r['scoped_ms']:.3f}",
                                  f"{r['whole_ms'] / r['scoped_ms']:,.0f}"] for r in rows]))
    return rows


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def print_copy_table(rows: list[CopyResult]) -> None:
    print(common.markdown_table(
        ["partitions", "topics", "seed s", "copy records", "copy s (log)", "records/s", "start -> copy s",
         "copy end -> Active s", "start -> MigrationActive s", "probes", "probes > 100 ms",
         "longest write wait s", "wait µs / partition", "wait µs / record", "wait / copy s",
         "copies started (by)", "elections", "copy CPU s (leader)", "CPU µs / record"],
        [[f"{r.partitions:,}", f"{r.topics:,}", f"{r.seed_s:.1f}", f"{r.copy_records:,}", f"{r.copy_s:.2f}",
          f"{r.copy_records / r.copy_s:,.0f}" if r.copy_s > 0 else "-", f"{r.started_to_copy_s:.1f}",
          f"{r.copy_to_active_s:.1f}", f"{r.to_active_s:.1f}", r.probe_count, r.probes_over_100ms,
          f"{r.max_wait_s:.2f}", f"{r.max_wait_s * 1e6 / r.partitions:.0f}",
          f"{r.max_wait_s * 1e6 / r.copy_records:.0f}", f"{r.max_wait_s / r.copy_s:.2f}" if r.copy_s > 0 else "-",
          f"{r.copies_started} ({','.join(map(str, r.leaders))})", r.elections,
          "-" if r.copy_cpu_s is None else f"{r.copy_cpu_s:.2f} ({r.copy_cpu_s_leader:.2f})",
          "-" if r.copy_cpu_s is None else f"{r.copy_cpu_s * 1e6 / r.copy_records:.0f}"]
         for r in rows]))
    for r in rows:
        if r.probe_errors:
            print(f"probe errors at {r.partitions:,} partitions: {r.probe_errors}")
        print(f"{r.partitions:,} partitions: the longest-waiting probe was sent {r.max_wait_at_s:.1f} s after "
              f"the controllers were started")


def print_rate_table(rows: list[RateResult]) -> None:
    print(common.markdown_table(
        ["target writes/s", "records/write", "sent", "ok", "blocked", "other errors", "achieved writes/s",
         "achieved records/s", "send late p99 ms", "write p50 ms", "write p99 ms", "lag samples",
         "lag p50 (records)", "lag p99", "lag max", "lag mean 1st / last quarter", "lag bounded",
         ">= 90 % of target", "ZK txn/s", "records per ZK txn", "drain to 0 s", "ZK topics checked / wrong"],
        [[r.rate, r.records_per_write, r.sent, r.ok, r.blocked, r.other_errors, f"{r.achieved_per_s:.0f}",
          f"{r.achieved_per_s * r.records_per_write:.0f}", f"{r.late_p99_ms:.0f}",
          f"{r.latency_p50_ms:.1f}", f"{r.latency_p99_ms:.1f}", r.lag_samples, f"{r.lag_p50:.0f}",
          f"{r.lag_p99:.0f}", f"{r.lag_max:.0f}", f"{r.lag_first_quarter:.1f} / {r.lag_last_quarter:.1f}",
          "yes" if r.lag_bounded else "NO", "yes" if r.rate_met else "no", f"{r.zk_txn_per_s:.0f}",
          f"{r.achieved_per_s * r.records_per_write / r.zk_txn_per_s:.1f}" if r.zk_txn_per_s > 0 else "-",
          f"{r.drain_s:.2f}", f"{r.zk_checked} / {r.zk_mismatches}"] for r in rows]))
    good = [r for r in rows if r.lag_bounded and r.rate_met and r.zk_mismatches == 0]
    if good:
        best = max(good, key=lambda r: r.rate)
        print(f"\nhighest offered rate accepted in full with a bounded lag: {best.rate} writes/s = "
              f"{best.rate * best.records_per_write} records/s (achieved {best.achieved_per_s:.0f} writes/s), "
              f"lag p99 there {best.lag_p99:.0f} records (max {best.lag_max:.0f})")
    else:
        print("\nno rate was accepted in full with a bounded lag")
    unbounded = [r.rate for r in rows if not r.lag_bounded]
    print(f"lag unbounded at: {unbounded or 'no rate'}; rates not accepted in full (the write path, not "
          f"ZooKeeper, saturated when the lag stayed bounded): {[r.rate for r in rows if not r.rate_met] or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="partitions in ZooKeeper, comma-separated")
    parser.add_argument("--rates", default="50,100,200,400,800", help="dual-write rates, writes/s")
    parser.add_argument("--duration-s", type=float, default=20.0, help="per dual-write rate")
    parser.add_argument("--dual-write-size", type=int, default=None,
                        help="the size whose cluster runs the dual-write rates (default: the smallest)")
    parser.add_argument("--records-per-write", type=int, default=1,
                        help="topics per IncrementalAlterConfigs request (one ConfigRecord each)")
    parser.add_argument("--quick", action="store_true", help="sizes 100,1000; rates 50,200; 4 s per rate")
    parser.add_argument("--no-zk-fsync", action="store_true", help="ZooKeeper forceSync=no")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--round-cost", action="store_true",
                        help="only time one write-behind round's pure work per size, offline (no processes)")
    parser.add_argument("--json", default=None, help="also write every result field to this file")
    args = parser.parse_args(argv)
    if args.round_cost:
        print(f"$ {common.command_line()}")
        load_start = os.getloadavg()
        print(f"start: {uptime()}")
        rows = run_round_cost([100, 1000] if args.quick else parse_list(args.sizes))
        load_end = os.getloadavg()
        print(f"end:   {uptime()}")
        write_json(args.json, {"command": common.command_line(), "load_start": load_start, "load_end": load_end,
                               "round_cost": rows})
        return 0
    if args.quick:
        sizes, rates, duration_s = [100, 1000], [50, 200], 4.0
    else:
        sizes, rates, duration_s = parse_list(args.sizes), parse_list(args.rates), args.duration_s
    reason = zookeeper_missing()
    if reason is not None:
        print(f"ZooKeeper unavailable: {reason}", file=sys.stderr)
        return 2
    dual_size = args.dual_write_size or min(sizes)
    zk_fsync = not args.no_zk_fsync
    work = common.work_dir(args.dir, "bench_migration_")
    load_avg_start = os.getloadavg()
    load_start = uptime()
    print(f"$ {common.command_line()}")
    print(f"start: {load_start}", flush=True)
    copies: list[CopyResult] = []
    rate_rows: list[RateResult] = []
    not_run: list[str] = []
    try:
        for partitions in sizes:
            cluster, seed_s = start_cluster(work / f"size-{partitions}", partitions, zk_fsync)
            failed = False
            try:
                print(f"[{partitions:,} partitions] seeded in {seed_s:.1f} s; starting the controllers",
                      file=sys.stderr, flush=True)
                result = run_copy(cluster, partitions, seed_s)
                copies.append(result)
                print(f"[{partitions:,} partitions] copy {result.copy_records:,} records in {result.copy_s:.2f} s, "
                      f"longest write wait {result.max_wait_s:.2f} s, MigrationActive after "
                      f"{result.to_active_s:.1f} s", file=sys.stderr, flush=True)
                if partitions == dual_size:
                    active = find_active(cluster, time.monotonic() + 30)
                    if active is None:
                        raise RuntimeError("no active controller after the copy")
                    port = cluster.spec(active).port
                    wait_lag_zero(port, CATCH_UP_TIMEOUT_S)
                    topics = cluster.seed.topic_names()
                    for index, rate in enumerate(rates):
                        row = run_rate(cluster, port, topics, rate, duration_s, value_base=10_000_000 * (index + 1),
                                       per_write=args.records_per_write)
                        rate_rows.append(row)
                        print(f"[dual-write {rate}/s] achieved {row.achieved_per_s:.0f}/s, lag p99 {row.lag_p99:.0f}, "
                              f"max {row.lag_max:.0f}, lag bounded={row.lag_bounded}, rate met={row.rate_met}, "
                              f"ZK wrong {row.zk_mismatches}",
                              file=sys.stderr, flush=True)
            except Exception as exc:  # noqa: BLE001 - reported, the other sizes still run
                failed = True
                not_run.append(f"size {partitions:,} failed: {exc}")
                print(f"[{partitions:,} partitions] FAILED: {exc!r}", file=sys.stderr, flush=True)
            finally:
                cluster.stop_all()
                if failed:
                    kept = Path(args.dir or "/tmp") / f"bench_migration_failed_{partitions}_{int(time.time())}"
                    shutil.copytree(work / f"size-{partitions}", kept,
                                    ignore=shutil.ignore_patterns("__cluster_metadata-0", "version-2"))
                    print(f"logs kept in {kept}", file=sys.stderr)
    except KeyboardInterrupt:
        not_run.append("interrupted")
    finally:
        load_avg_end = os.getloadavg()
        load_end = uptime()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    done_sizes = {c.partitions for c in copies}
    not_run += [f"size {s:,}" for s in sizes if s not in done_sizes and not any(f"size {s:,} failed" in n
                                                                              for n in not_run)]
    print(f"\nZooKeeper 3.8 forceSync={'yes' if zk_fsync else 'no'}; 3 KRaft voters (fsync on); "
          f"{ZK_BROKERS} ZooKeeper-mode broker agents; {PARTITIONS_PER_TOPIC} partitions per topic, RF 3; "
          f"all on 127.0.0.1")
    print("\n### Copy time and controller write downtime against metadata size\n")
    print_copy_table(copies)
    if rate_rows:
        print(f"\n### Dual-write lag ({dual_size:,} partitions / {max(1, dual_size // PARTITIONS_PER_TOPIC)} topics, "
              f"{duration_s:.0f} s per rate, {args.records_per_write} topic config(s) per request, "
              f"{WORKERS} writer connections max, lag sampled every "
              f"{SAMPLE_INTERVAL_S * 1000:.0f} ms)\n")
        print_rate_table(rate_rows)
    if not_run:
        print(f"\nnot run: {', '.join(not_run)}")
    print(f"\nstart: {load_start}\nend:   {load_end}")
    write_json(args.json, {
        "command": common.command_line(), "load_start": load_avg_start, "load_end": load_avg_end,
        "zk_fsync": zk_fsync, "dual_write_size": dual_size, "duration_s": duration_s,
        "copies": [dict(asdict(c), records_per_s=c.copy_records / c.copy_s if c.copy_s > 0 else None,
                        wait_us_per_partition=c.max_wait_s * 1e6 / c.partitions) for c in copies],
        "rates": [asdict(r) for r in rate_rows], "not_run": not_run})
    return 0


def write_json(path: str | None, results: dict) -> None:
    if path is not None:
        Path(path).write_text(json.dumps(results, indent=2, default=str, allow_nan=True))


if __name__ == "__main__":
    sys.exit(main())
