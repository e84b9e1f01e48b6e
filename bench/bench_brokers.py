"""Brokers against a 3-voter quorum: renegotiation fan-out and a registration storm.

Two measurements, each against freshly formatted voters on 127.0.0.1
(cli/local_cluster.py: real `kraftwerk controller` processes, fsync on),
each printing its command line and markdown tables:

  fanout  For each N in --brokers: a fresh quorum at metadata.version
          3.5-IV2 and N broker agents (`BrokerNode`, release 3.7, heartbeat
          interval 2000 ms = Kafka's default) in this one trio process, each
          with its own formatted directory and metadata log (fsync on), real
          sockets to the controllers. Once all N are RUNNING (unfenced),
          UpdateFeatures moves metadata.version up one step at a time
          (3.7-IV2, 3.7-IV3, 3.7-IV4: the levels release 3.7 runs), sent to
          the leader with KafkaClient. Per step and broker: the time from the
          committed reply's arrival to the broker having renegotiated
          ApiVersions with the controllers at the new level
          (`wait_renegotiated`). At the first step each broker's advertised
          DescribeCluster range must go from max 0 to max 1 (gated at
          3.7-IV0). Bounded by --budget-s: an N that does not fit is reported
          as not run (or cut short), never waited on. Per step also: the
          requests each broker sent (by API), the offsets it replayed, the CPU
          of this process and of the leader, and the CPU this process spent in
          the garbage collector. After the steps, the harness's own floor on
          the same disk and connections (`harness_floor`: N small appends +
          fsync one after the other, N snapshot-sized files in worker threads,
          N x 3 ApiVersions, with the CPU and garbage-collector time of that
          part). By default full collections walk all N images of this one
          process; --gc-freeze freezes the heap (gc.freeze()) after each broker
          starts and once all N run, as `kraftwerk broker` freezes its own once
          it serves (cli/main.py): on the idle machine, one run each back to
          back, the median of steps at N=300 was 1,071 ms frozen and 942-1,128
          ms not (with the serving threshold below, the collector takes
          0.05-0.2 s of a step either way). The
          youngest generation's threshold is a serving process's own
          (server/collector.py `use_serving_thresholds`, as cli/main.py sets
          it for every node it serves); --no-serving-thresholds keeps
          CPython's 700. --settle waits
          (bounded, reported) before each step until every broker is RUNNING
          and has replayed the high watermark, so a step does not carry the
          previous one's re-registrations. --py-spy PATH profiles the steps.
  apiversions  The floor's N x 3 ApiVersions alone: N x 3 x 2 PeerConnections
          (as the brokers hold them) from this process and no broker images,
          rounds of N x 3 ApiVersions at once; --ballast-k keeps GC-tracked
          containers alive here, as N images would.
  storm   --brokers simulated brokers (a load generator speaking the real
          protocol over a few pipelined connections, one per 50 brokers) to a
          quorum at 3.7-IV4: each registers (BrokerRegistration at the version
          the leader advertises, jittered within the first 5 s), then
          heartbeats every 2000 ms with a metadata offset high enough to be
          unfenced. When all are unfenced (bounded), a steady window of
          --duration-s starts: heartbeat latency, errors, and each
          controller's CPU (utime + stime from /proc over the window).

Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_brokers.py fanout [--brokers 3,30,300] [--budget-s 300] [--json PATH]
         [--gc-freeze] [--settle] [--py-spy PATH]
     .venv/bin/python bench/bench_brokers.py apiversions [--brokers 30,100,300] [--rounds 5] [--ballast-k K]
     .venv/bin/python bench/bench_brokers.py storm [--brokers 1000] [--duration-s 30]
Both take --dir PATH (parent of the temporary directory: the disk measured).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import json
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

import _common as common  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from server.collector import use_serving_thresholds  # noqa: E402

VOTERS = 3
BROKER_ID_BASE = 100  # controllers are 1..3
RELEASE = "3.7"
HEARTBEAT_INTERVAL_MS = 2_000  # Kafka's broker.heartbeat.interval.ms default
FENCED_RETRY_MS = 100  # as server/broker/lifecycle.py: ask again soon while fenced
UPDATE_FEATURES, DESCRIBE_CLUSTER = 57, 60
BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63
UPGRADE = 1
FANOUT_FORMAT_MV, FANOUT_STEPS = "3.5-IV2", (17, 18, 19)  # 3.7-IV2, 3.7-IV3, 3.7-IV4
LEVEL_NAMES = {11: "3.5-IV2", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4"}
STORM_FORMAT_MV = "3.7-IV4"
BROKERS_PER_CONNECTION = 50
REGISTRATION_SPREAD_S = 5.0
REQUEST_TIMEOUT_S = 10.0
MAX_REGISTRATION_ATTEMPTS = 20
HIGH_METADATA_OFFSET = 1 << 40  # >= any registration offset: the controller unfences at once
RUNNING_WAIT_BASE_S, RUNNING_WAIT_PER_BROKER_S = 30.0, 0.5
RENEGOTIATE_WAIT_BASE_S, RENEGOTIATE_WAIT_PER_BROKER_S = 20.0, 0.2
UNFENCE_WAIT_S = 30.0  # after the last registration was sent
DRAIN_WAIT_S = 15.0
IDLE_WINDOW_S = 3.0
SETTLE_WAIT_BASE_S, SETTLE_WAIT_PER_BROKER_S = 10.0, 0.1
SETTLE_POLL_S, SETTLE_QUIET_POLLS = 0.1, 3


def raise_open_files_limit() -> int:
    """Every broker holds sockets and log files: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}" if not math.isnan(seconds) else "-"


def cpu_share(before: dict[int, float], after: dict[int, float], window_s: float) -> dict[int, float]:
    """% of one core per pid over the window."""
    return {pid: 100.0 * (after[pid] - before[pid]) / window_s for pid in before}


def code_name(code) -> str:
    if isinstance(code, int) and code in ErrorCode._value2member_map_:
        return ErrorCode(code).name
    return str(code)


# --------------------------------------------------------------------------
# 1. renegotiation fan-out
# --------------------------------------------------------------------------

async def fanout_cell(n: int, quorum: common.Quorum, leader: int, deadline: float,
                      profile: str | None = None, gc_freeze: bool = False, settle_first: bool = False) -> dict:
    """N brokers in this trio run; returns {'start_s', 'steps': [...], 'note'}."""
    from server.broker.lifecycle import BrokerState
    from server.nodes.broker import BrokerNode
    from server.client import KafkaClient
    from server.config import Listener, ServerConfig, VoterAddress
    from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

    work = quorum.specs[1].directory
    voters = tuple(VoterAddress(node_id, common.HOST, quorum.port(node_id)) for node_id in quorum.specs)
    result: dict = {"steps": [], "note": "", "start_s": float("nan")}
    brokers: list[BrokerNode] = []
    for index in range(n):
        node_id = BROKER_ID_BASE + index
        directory = work / f"broker-{node_id}"
        directory.mkdir(parents=True)
        write_meta_properties(directory, MetaProperties(cluster_id=quorum.cluster_id, node_id=node_id,
                                                        directory_id=random_uuid_string()))
        brokers.append(BrokerNode(ServerConfig(
            node_id=node_id, listener=Listener("PLAINTEXT", common.HOST, 0), metadata_log_dir=directory,
            quorum_voters=voters, process_roles=("broker",), release=RELEASE,
            broker_heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)))
        hook_replayed(brokers[-1])

    with trio.move_on_at(deadline) as budget:
        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            gc_start, cpu_start = GC.mark(), time.process_time()
            for broker in brokers:
                await nursery.start(broker.run)
                if gc_freeze:
                    # `kraftwerk broker` freezes its heap once its node serves (cli/main.py),
                    # so a broker's own start-up objects never reach another collection:
                    # the same here, broker by broker.
                    gc.freeze()
            running_bound = RUNNING_WAIT_BASE_S + RUNNING_WAIT_PER_BROKER_S * n
            with trio.move_on_after(running_bound):
                for broker in brokers:  # bounded by the scope; each waits on state changes
                    await broker.lifecycle.wait_state(BrokerState.RUNNING)
            not_running = [b.config.node_id for b in brokers if b.lifecycle.state is not BrokerState.RUNNING]
            if not_running:
                result["note"] = f"{len(not_running)} of {n} brokers not RUNNING within {running_bound:g} s"
                nursery.cancel_scope.cancel()
                return result
            result["start_s"] = trio.current_time() - started
            result["start_cpu_s"] = time.process_time() - cpu_start
            result["start_gc_s"] = sum(GC.mark()[0]) - sum(gc_start[0])
            if gc_freeze:
                # Once more with every broker RUNNING (their images now hold all N
                # registrations). A real broker's image is in its own heap, frozen at start;
                # here all N images share this one heap, and without the freeze each full
                # collection walks every broker's image (1.1-2.1 s a step at N=300): a cost
                # of the one-process harness, not of a broker. --no-gc-freeze measures it.
                # Unfrozen and collected whole first: CPython starts a full collection only
                # once the objects that survived younger ones exceed a quarter of those the
                # last full collection kept, and after the broker-by-broker freezes that
                # count is tiny; one collection of the whole heap here (outside the steps)
                # makes it the heap's size again, as in a process that froze once.
                gc.unfreeze()
                gc.collect()
                gc.freeze()
            # The standing load of N idle brokers (Fetch long polls, heartbeats), before any change.
            pids = [os.getpid(), quorum.pid(leader)]
            # What every full collection walks: the GC-tracked objects of this one heap
            # (counted once, outside the measured windows).
            result["heap_objects"] = len(gc.get_objects())
            before, gc_before = {pid: common.process_cpu_s(pid) for pid in pids}, GC.mark()
            await trio.sleep(IDLE_WINDOW_S)
            idle = cpu_share(before, {pid: common.process_cpu_s(pid) for pid in pids}, IDLE_WINDOW_S)
            result["idle_cpu"] = (idle[pids[0]], idle[pids[1]])
            gc_after = GC.mark()
            # Of the brokers' process's idle CPU, the share its collector took (% of one core).
            result["idle_gc"] = (100.0 * (sum(gc_after[0]) - sum(gc_before[0])) / IDLE_WINDOW_S,
                                 gc_after[1][2] - gc_before[1][2])
            wrong = {b.config.node_id: b.advertised_ranges().get(DESCRIBE_CLUSTER) for b in brokers
                     if b.advertised_ranges().get(DESCRIBE_CLUSTER, (0, 0))[1] != 0}
            if wrong:
                raise RuntimeError(f"before the upgrade: DescribeCluster not at max 0 on {wrong}")
            print(f"N={n}: all RUNNING after {result['start_s']:.1f} s ({result['start_cpu_s']:.1f} s CPU, "
                  f"{result['start_gc_s']:.1f} s of it in the garbage collector); {result['heap_objects']:,} "
                  f"GC-tracked objects; idle: {idle[pids[0]]:.0f} % of a core, {result['idle_gc'][0]:.0f} % in the "
                  f"collector ({result['idle_gc'][1]} full collections in {IDLE_WINDOW_S:g} s)",
                  file=sys.stderr, flush=True)
            with py_spy(profile):
                async with await KafkaClient.connect(common.HOST, quorum.port(leader), "bench-brokers") as client:
                    for level in FANOUT_STEPS:
                        settled_s = await settle(brokers, SETTLE_WAIT_BASE_S + SETTLE_WAIT_PER_BROKER_S * n) \
                            if settle_first else None
                        result["steps"].append(await fanout_step(brokers, client, level, n, pids))
                        result["steps"][-1]["settle_s"] = settled_s
                        print(f"N={n}: step to {LEVEL_NAMES[level]}: all renegotiated after "
                              f"{ms(result['steps'][-1]['all_s'])} ms", file=sys.stderr, flush=True)
            # The harness's own floor, measured with the brokers still connected.
            result["floor"] = await harness_floor(brokers)
            nursery.cancel_scope.cancel()
    if gc_freeze:
        gc.unfreeze()
    if budget.cancelled_caught:
        result["note"] = (f"cut by --budget-s after {len(result['steps'])} of {len(FANOUT_STEPS)} steps"
                          + ("" if not math.isnan(result["start_s"]) else " (brokers not all RUNNING yet)"))
    return result


async def settle(brokers, bound_s: float) -> float:
    """With --settle, before a step: waits (bounded) until the cluster is quiet — every
    broker RUNNING and its image replayed up to the highest high watermark any broker
    knows, with that high watermark unchanged over SETTLE_QUIET_POLLS polls — so that a
    step does not also carry the previous step's tail (at 3.7-IV2 every broker
    re-registers with its log directory: N records that each of the N brokers replays).
    Returns the seconds waited."""
    from server.broker.lifecycle import BrokerState

    started = trio.current_time()
    quiet_polls, previous = 0, None
    with trio.move_on_after(bound_s):
        while quiet_polls < SETTLE_QUIET_POLLS:  # bounded by the scope
            high_watermark = max(b.raft_driver.high_watermark for b in brokers)
            quiet = all(b.lifecycle.state is BrokerState.RUNNING and b.replayer.replayed_end_offset >= high_watermark
                        for b in brokers)
            quiet_polls = quiet_polls + 1 if quiet and high_watermark == previous else 0
            previous = high_watermark if quiet else None
            await trio.sleep(SETTLE_POLL_S)
    return trio.current_time() - started


async def harness_floor(brokers) -> dict:
    """What a metadata.version step costs this one process at the least, whatever the
    broker code does, measured on the same disk and connections:
    - append: per broker, one small write + fsync of its own file, one after the other
      on the event loop: what N observers appending the step's batch cost here (an
      observer's small append is written and fsynced on the event loop; with N of them
      in one process those fsyncs queue up);
    - snapshot: per broker, a file the size of its newest snapshot written, fsynced,
      renamed and its directory fsynced, in worker threads as the replayer does
      (trio's default limit of concurrent threads);
    - api_versions: every broker asks each controller for ApiVersions once on its live
      connections, all at once (the renegotiation's round trips).
    Each part is timed alone; `total_s` is their sum (they are sequential per broker)."""
    floor: dict = {}
    gc_start = GC.mark()
    record = b"x" * 120  # a one-record batch of the size of the step's FeatureLevelRecord batch
    started = time.perf_counter()
    for broker in brokers:
        path = Path(broker.config.metadata_log_dir) / "floor-append.tmp"
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
            path.unlink()
    floor["append_s"] = time.perf_counter() - started
    sizes = []
    for broker in brokers:
        checkpoints = sorted(Path(broker.config.metadata_log_dir).rglob("*.checkpoint"))
        sizes.append(max((c.stat().st_size for c in checkpoints), default=0))
    floor["snapshot_bytes_median"] = int(common.percentile(sizes, 0.5)) if sizes else 0

    def write_one(directory: Path, size: int) -> None:
        part, final = directory / "floor-snapshot.part", directory / "floor-snapshot.done"
        fd = os.open(part, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"s" * size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(part, final)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        final.unlink()

    started = trio.current_time()
    async with trio.open_nursery() as writers:
        for broker, size in zip(brokers, sizes):
            writers.start_soon(trio.to_thread.run_sync, write_one, Path(broker.config.metadata_log_dir), size)
    floor["snapshot_s"] = trio.current_time() - started
    answered = 0

    async def ask(peer) -> None:
        nonlocal answered
        if await peer.renegotiate(REQUEST_TIMEOUT_S):
            answered += 1

    started = trio.current_time()
    gc_before, cpu_before = GC.mark(), time.process_time()
    async with trio.open_nursery() as askers:
        for broker in brokers:
            for voter in broker.voters:
                peer = broker.controller_peer(voter.node_id)
                if peer is not None:
                    askers.start_soon(ask, peer)
    floor["api_versions_s"] = trio.current_time() - started
    gc_after = GC.mark()
    # What the brokers' process spent on those round trips, and how much of it was the
    # garbage collector (a full collection walks every object of this one heap).
    floor["api_versions_cpu_s"] = time.process_time() - cpu_before
    floor["api_versions_gc_s"] = sum(gc_after[0]) - sum(gc_before[0])
    floor["api_versions_gc_full"] = gc_after[1][2] - gc_before[1][2]
    floor["gc_s"] = sum(gc_after[0]) - sum(gc_start[0])
    floor["api_versions_answered"] = answered
    floor["total_s"] = floor["append_s"] + floor["snapshot_s"] + floor["api_versions_s"]
    return floor


class py_spy:
    """`py-spy record` of this process while the block runs (raw collapsed stacks to
    `path`), when `path` is given and py-spy is installed next to this Python."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.process = None

    def __enter__(self):
        if self.path:
            exe = Path(sys.executable).with_name("py-spy")
            if not exe.exists():
                raise RuntimeError(f"--py-spy needs {exe} (pip install py-spy)")
            self.process = subprocess.Popen([str(exe), "record", "--pid", str(os.getpid()), "--format", "raw",
                                             "--rate", "100", "--nonblocking", "--threads", "-o", self.path],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let it attach before the measured part starts
        return self

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


API_NAMES = {1: "Fetch", 18: "ApiVersions", 57: "UpdateFeatures", 58: "Envelope", 59: "FetchSnapshot",
             62: "BrokerRegistration", 63: "BrokerHeartbeat"}


def count_exchanges() -> Counter:
    """Counts every request this process's brokers send to the controllers, by API
    (wraps PeerConnection._exchange; instrumentation only: what a step costs in messages)."""
    from server.net.peer import PeerConnection

    sent: Counter = Counter()
    plain = PeerConnection._exchange

    async def exchange(self, api_key, version, body, on_response=None):
        sent[API_NAMES.get(api_key, str(api_key))] += 1
        return await plain(self, api_key, version, body, on_response)

    PeerConnection._exchange = exchange
    return sent


def hook_replayed(broker) -> None:
    """Marks when the broker's image first shows each metadata.version: wraps the node's
    commit callback before open() hands it to the replayer (instrumentation only)."""
    broker.bench_replayed_at = {}
    plain = broker._on_commit

    def on_commit(records, base_offset: int) -> None:
        level = broker.state.metadata_version
        if level is not None and level not in broker.bench_replayed_at:
            broker.bench_replayed_at[level] = trio.current_time()
        plain(records, base_offset)

    broker._on_commit = on_commit


async def fanout_step(brokers, client, level: int, n: int, pids: list[int]) -> dict:
    done_at: dict[int, float] = {}
    describe_cluster: dict[int, tuple[int, int] | None] = {}
    all_done = trio.Event()

    async def watch(broker) -> None:
        await broker.wait_renegotiated(level)
        done_at[broker.config.node_id] = trio.current_time()
        describe_cluster[broker.config.node_id] = broker.advertised_ranges().get(DESCRIBE_CLUSTER)
        if len(done_at) == len(brokers):
            all_done.set()

    step: dict = {"level": level}
    sent_before = Counter(SENT)
    # CPU seconds (all threads) of this process and of the leader over the step: less
    # sensitive than wall time to what else the machine runs.
    cpu_before = [common.process_cpu_s(pid) for pid in pids]
    gc_before = GC.mark()
    replayed_before = sum(b.replayer.replayed_end_offset for b in brokers)
    async with trio.open_nursery() as watchers:
        for broker in brokers:
            watchers.start_soon(watch, broker)
        sent = trio.current_time()
        reply = await client.call(UPDATE_FEATURES, {
            "timeout_ms": 30_000, "validate_only": False,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level,
                                 "allow_downgrade": False, "upgrade_type": UPGRADE}]})
        replied = trio.current_time()
        errors = [(r.error_code, r.error_message) for r in reply.results or [] if r.error_code]
        if reply.error_code or errors:
            raise RuntimeError(f"UpdateFeatures to {LEVEL_NAMES[level]} failed: {reply.error_code} "
                               f"{reply.error_message} {errors}")
        with trio.move_on_after(RENEGOTIATE_WAIT_BASE_S + RENEGOTIATE_WAIT_PER_BROKER_S * n):
            await all_done.wait()
        watchers.cancel_scope.cancel()
    step["commit_s"] = replied - sent
    step["cpu_s"] = [common.process_cpu_s(pid) - before for pid, before in zip(pids, cpu_before)]
    gc_after = GC.mark()
    step["gc_s"] = [after - before for after, before in zip(gc_after[0], gc_before[0])]
    step["gc_collections"] = [after - before for after, before in zip(gc_after[1], gc_before[1])]
    # Messages and replayed offsets per broker over the step (until all renegotiated or the bound).
    step["sent_per_broker"] = {api: round(count / n, 2) for api, count in sorted((SENT - sent_before).items())}
    step["replayed_offsets_per_broker"] = round(
        (sum(b.replayer.replayed_end_offset for b in brokers) - replayed_before) / n, 1)
    step["after_reply_s"] = sorted(t - replied for t in done_at.values())
    step["replayed_after_reply_s"] = sorted(b.bench_replayed_at[level] - replied for b in brokers
                                            if level in b.bench_replayed_at)
    missed = [b for b in brokers if b.config.node_id not in done_at]
    step["missed"] = [(b.config.node_id, level in b.bench_replayed_at, b.state.metadata_version,
                       b.renegotiated_metadata_version, b.renegotiations) for b in missed]
    step["renegotiated"] = len(done_at)
    step["all_s"] = (max(done_at.values()) - replied) if len(done_at) == len(brokers) else float("nan")
    step["describe_cluster_max"] = Counter(r[1] if r else None for r in describe_cluster.values())
    return step


SENT: Counter = Counter()  # filled by count_exchanges() in run_fanout


class GcClock:
    """CPU time this process spends in the cyclic garbage collector, by generation (gc.callbacks;
    instrumentation only): N brokers' images and tasks in one heap make every full
    collection walk all of them."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._started
            self.collections[info["generation"]] += 1

    def mark(self) -> tuple[list[float], list[int]]:
        return list(self.seconds), list(self.collections)


GC = GcClock()


def run_fanout(args) -> int:
    global SENT
    SENT = count_exchanges()
    counts = [int(x) for x in args.brokers.split(",") if x.strip()]
    nofile = raise_open_files_limit()
    # The N brokers stand for N `kraftwerk broker` processes, each of which collects
    # its youngest generation as cli/main.py sets it.
    thresholds_before = use_serving_thresholds() if args.serving_thresholds else None
    try:
        return _run_fanout_cells(args, counts, nofile)
    finally:
        if thresholds_before is not None:
            gc.set_threshold(*thresholds_before)


def _run_fanout_cells(args, counts: list[int], nofile: int) -> int:
    load_start = os.getloadavg()
    budget_deadline_wall = time.monotonic() + args.budget_s
    cells: dict[int, dict] = {}
    skipped: list[int] = []
    for n in counts:
        remaining = budget_deadline_wall - time.monotonic()
        if remaining <= 5:
            skipped.append(n)
            continue
        work = common.work_dir(args.dir, f"bench_brokers_fanout_{n}_")
        try:
            with common.kraftwerk_quorum(work, VOTERS, FANOUT_FORMAT_MV) as (quorum, leader):
                remaining = budget_deadline_wall - time.monotonic()

                profile = f"{args.py_spy}.{n}" if args.py_spy else None

                async def cell():
                    return await fanout_cell(n, quorum, leader, trio.current_time() + remaining, profile,
                                             args.gc_freeze, args.settle)

                cells[n] = trio.run(cell)
                cells[n]["leader"] = leader
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"N={n}: done ({time.monotonic() - (budget_deadline_wall - args.budget_s):.0f} s into the budget)",
              file=sys.stderr)

    print(f"$ {common.command_line()}")
    thresholds_from = "a serving process's" if args.serving_thresholds else "CPython's defaults"
    print(f"Per N: a fresh {VOTERS}-voter quorum (real processes, fsync on, 127.0.0.1) formatted at "
          f"{FANOUT_FORMAT_MV}; N BrokerNodes (release {RELEASE}, heartbeat {HEARTBEAT_INTERVAL_MS} ms, own "
          f"directory and fsynced metadata log each) in this one trio process. After all N are RUNNING, "
          f"UpdateFeatures (upgrade) to the leader steps metadata.version "
          f"{' -> '.join(LEVEL_NAMES[x] for x in (11,) + FANOUT_STEPS)}; per step and broker: time from the "
          f"committed reply's arrival to the broker's image showing the level (its commit callback) and to "
          f"`wait_renegotiated(level)` returning (negative: before the reply reached the client). "
          f"{'gc.freeze() once all were RUNNING (as `kraftwerk broker` freezes its start-up heap). ' if args.gc_freeze else 'No gc.freeze(): full collections walk all N images. '}"
          f"Collector thresholds {gc.get_threshold()} ({thresholds_from}). "
          f"RLIMIT_NOFILE {nofile}; budget {args.budget_s:g} s; "
          f"{os.cpu_count()} CPUs shared by the brokers' process and the three controllers.\n")
    rows = []
    for n, cell in cells.items():
        for step in cell["steps"]:
            samples = step["after_reply_s"]
            dc = ", ".join(f"{k}: {v}" for k, v in sorted(step["describe_cluster_max"].items(), key=str))
            rows.append([n, LEVEL_NAMES[step["level"]], f"{step['renegotiated']}/{n}", ms(step["commit_s"]),
                         ms(common.percentile(step["replayed_after_reply_s"], 0.5)),
                         ms(max(step["replayed_after_reply_s"], default=float("nan"))),
                         ms(common.percentile(samples, 0.5)), ms(common.percentile(samples, 0.99)),
                         ms(max(samples) if samples else float("nan")), ms(step["all_s"]), dc])
    for n, cell in cells.items():
        for step in cell["steps"]:
            print(f"N={n}, {LEVEL_NAMES[step['level']]}: per broker: sent {step['sent_per_broker']}, "
                  f"offsets replayed {step['replayed_offsets_per_broker']}, CPU ms of the brokers' process "
                  f"{step['cpu_s'][0] * 1000 / n:.2f} and of the leader {step['cpu_s'][1] * 1000 / n:.2f}; "
                  f"in the garbage collector {sum(step['gc_s']) * 1000:.0f} ms "
                  f"(collections by generation {step['gc_collections']})"
                  + (f"; settled {ms(step['settle_s'])} ms before the step" if step.get("settle_s") is not None else ""))
    print()
    for n, cell in cells.items():
        for step in cell["steps"]:
            if step["missed"]:
                print(f"N={n}, {LEVEL_NAMES[step['level']]}: not renegotiated within the bound (broker id, image "
                      f"reached the level, image level, last renegotiated level, renegotiations): "
                      f"{step['missed'][:10]}\n")
    print(common.markdown_table(["N", "to", "renegotiated", "commit ms (send -> reply)", "image at level: median ms",
                                 "image at level: max ms", "renegotiated: median ms", "p99 ms", "max ms",
                                 "all brokers ms", "DescribeCluster max: brokers"], rows))
    print()
    base = None
    summary = []
    for n, cell in cells.items():
        pooled = [s for step in cell["steps"] for s in step["after_reply_s"]]
        alls = [step["all_s"] for step in cell["steps"] if not math.isnan(step["all_s"])]
        if not pooled:
            summary.append([n, ms(cell["start_s"]), "-", 0, "-", "-", "-", "-", "-", "-", "-", cell["note"] or "-"])
            continue
        median, all_median = common.percentile(pooled, 0.5), common.percentile(alls, 0.5)
        if base is None:
            base = (median, all_median, n)
        idle, idle_gc = cell.get("idle_cpu"), cell.get("idle_gc")
        idle_text = (f"{idle[0]:.0f} / {idle[1]:.0f}" + (f" ({idle_gc[0]:.0f} GC)" if idle_gc else "")) if idle else "-"
        summary.append([n, ms(cell["start_s"]), idle_text, len(cell["steps"]), ms(median), ms(common.percentile(pooled, 0.99)),
                        ms(max(pooled)), ms(all_median), f"{median / base[0]:.1f}", f"{all_median / base[1]:.1f}",
                        f"{all_median * 1000 / n:.2f}", cell["note"] or "-"])
    print(common.markdown_table(["N", "all RUNNING after ms",
                                 f"idle CPU % brokers' process / leader ({IDLE_WINDOW_S:g} s; of it in the collector)",
                                 "steps", "median ms", "p99 ms", "max ms",
                                 "all brokers ms (median of steps)",
                                 f"median / N={base[2] if base else '-'}", f"all / N={base[2] if base else '-'}",
                                 "all ms per broker", "note"], summary))
    print()
    floor_rows = []
    for n, cell in cells.items():
        floor = cell.get("floor")
        alls = [step["all_s"] for step in cell["steps"] if not math.isnan(step["all_s"])]
        if floor is None or not alls:
            continue
        all_median = common.percentile(alls, 0.5)
        floor_rows.append([n, ms(floor["append_s"]), f"{floor['snapshot_bytes_median']:,}", ms(floor["snapshot_s"]),
                           f"{ms(floor['api_versions_s'])} ({floor['api_versions_answered']})",
                           f"{ms(floor['api_versions_cpu_s'])} / {ms(floor['api_versions_gc_s'])} "
                           f"({floor['api_versions_gc_full']})", ms(floor["total_s"]),
                           ms(all_median), f"{all_median / floor['total_s']:.1f}" if floor["total_s"] else "-",
                           f"{floor['total_s'] * 1000 / n:.2f}"])
    if floor_rows:
        print("Harness floor (same run, after the steps, brokers still connected): one small pwrite + fsync per "
              "broker, one after the other on the event loop; one snapshot-sized file per broker written, fsynced, "
              "renamed, directory fsynced, in worker threads; one ApiVersions per broker and controller, all at "
              "once.\n")
        print(common.markdown_table(["N", "N appends+fsync ms (serial)", "snapshot bytes (median)",
                                     "N snapshot files ms (threads)", "N x 3 ApiVersions ms (answered)",
                                     "of it: CPU ms of the brokers' process / GC ms (full collections)",
                                     "floor ms (sum)", "ours: all brokers ms (median of steps)", "ours / floor",
                                     "floor ms per broker"], floor_rows))
    if skipped:
        print(f"\nNot run (budget of {args.budget_s:g} s spent): N = {', '.join(map(str, skipped))}.")
    load_end = os.getloadavg()
    print(f"\nload average at start: {' '.join(f'{x:.2f}' for x in load_start)}; "
          f"at end: {' '.join(f'{x:.2f}' for x in load_end)}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": common.command_line(), "gc_freeze": args.gc_freeze, "settle": args.settle,
            "serving_thresholds": args.serving_thresholds, "gc_thresholds": gc.get_threshold(),
            "load_start": load_start, "load_end": load_end,
            "skipped": skipped, "results": {str(n): _cell_json(n, cell) for n, cell in cells.items()}},
            indent=2, default=str))
    return 0


def _cell_json(n: int, cell: dict) -> dict:
    """The machine-readable form of one N's results (seconds; NaN as null)."""

    def num(value):
        return None if isinstance(value, float) and math.isnan(value) else value

    steps = []
    for step in cell["steps"]:
        samples = step["after_reply_s"]
        steps.append({
            "level": step["level"], "to": LEVEL_NAMES[step["level"]], "renegotiated": step["renegotiated"],
            "commit_s": step["commit_s"],
            "image_median_s": num(common.percentile(step["replayed_after_reply_s"], 0.5)),
            "image_max_s": max(step["replayed_after_reply_s"], default=None),
            "renegotiated_median_s": num(common.percentile(samples, 0.5)),
            "renegotiated_p99_s": num(common.percentile(samples, 0.99)),
            "renegotiated_max_s": max(samples, default=None), "all_s": num(step["all_s"]),
            "describe_cluster_max": {str(k): v for k, v in step["describe_cluster_max"].items()},
            "sent_per_broker": step["sent_per_broker"], "cpu_s": step["cpu_s"], "gc_s": step["gc_s"],
            "gc_collections": step["gc_collections"], "settle_s": step.get("settle_s"),
            "replayed_offsets_per_broker": step["replayed_offsets_per_broker"],
            "missed": step["missed"][:10]})
    alls = [step["all_s"] for step in cell["steps"] if not math.isnan(step["all_s"])]
    all_median = common.percentile(alls, 0.5) if alls else None
    return {"brokers": n, "start_s": num(cell["start_s"]), "start_cpu_s": cell.get("start_cpu_s"),
            "start_gc_s": cell.get("start_gc_s"), "idle_cpu": cell.get("idle_cpu"),
            "idle_gc": cell.get("idle_gc"), "heap_objects": cell.get("heap_objects"),
            "note": cell["note"], "steps": steps, "all_median_s": all_median,
            "all_ms_per_broker": all_median * 1000 / n if all_median is not None else None,
            "floor": cell.get("floor")}


# --------------------------------------------------------------------------
# 1b. the ApiVersions floor alone: connections without broker images
# --------------------------------------------------------------------------

async def apiversions_cell(n: int, quorum: common.Quorum, rounds: int) -> dict:
    """N "brokers" as the fan-out's have them toward each controller (a controller and a
    forwarding connection: PeerConnection, their client ids), but no BrokerNode: no image,
    no Fetch, no heartbeats. Then `rounds` times N x 3 ApiVersions at once, as the
    harness floor asks them; per round the wall time, the CPU of this process and of each
    controller, and the garbage collector's time here."""
    from server.net.peer import PeerAddress, PeerConnection

    rng = random.Random(n)
    asked: list = []
    rows: list[dict] = []
    async with trio.open_nursery() as nursery:
        for index in range(n):
            for node_id in quorum.specs:
                for suffix in ("", "-forward"):
                    peer = PeerConnection(PeerAddress(node_id, common.HOST, quorum.port(node_id)),
                                          f"kraftwerk-broker-{BROKER_ID_BASE + index}{suffix}", rng)
                    await nursery.start(peer.run)
                    if not suffix:
                        asked.append(peer)
        with trio.fail_after(RUNNING_WAIT_BASE_S + RUNNING_WAIT_PER_BROKER_S * n):
            for peer in asked:
                await peer.wait_connected()
        pids = [os.getpid()] + [quorum.pid(node_id) for node_id in quorum.specs]
        for _ in range(rounds):
            answered = 0

            async def ask(peer) -> None:
                nonlocal answered
                if await peer.renegotiate(REQUEST_TIMEOUT_S):
                    answered += 1

            cpu_before, gc_before = [common.process_cpu_s(pid) for pid in pids], GC.mark()
            started = trio.current_time()
            async with trio.open_nursery() as askers:
                for peer in asked:
                    askers.start_soon(ask, peer)
            wall_s = trio.current_time() - started
            gc_after = GC.mark()
            rows.append({"wall_s": wall_s, "answered": answered,
                         "cpu_s": [common.process_cpu_s(pid) - before for pid, before in zip(pids, cpu_before)],
                         "gc_s": sum(gc_after[0]) - sum(gc_before[0]),
                         "gc_full": gc_after[1][2] - gc_before[1][2]})
            await trio.sleep(0.2)  # let the controllers' and this process's stragglers finish
        nursery.cancel_scope.cancel()
    return {"brokers": n, "rounds": rows}


def run_apiversions(args) -> int:
    counts = [int(x) for x in args.brokers.split(",") if x.strip()]
    nofile = raise_open_files_limit()
    load_start = os.getloadavg()
    # GC-tracked containers kept alive here, as N broker images would be (the fan-out's
    # process at N=300 holds a few million): every full collection walks them.
    ballast = [[{} for _ in range(9)] for _ in range(args.ballast_k * 100)]
    cells = []
    for n in counts:
        work = common.work_dir(args.dir, f"bench_brokers_apiversions_{n}_")
        try:
            with common.kraftwerk_quorum(work, VOTERS, FANOUT_FORMAT_MV) as (quorum, _leader):
                cells.append(trio.run(apiversions_cell, n, quorum, args.rounds))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    print(f"$ {common.command_line()}")
    print(f"Per N: a fresh {VOTERS}-voter quorum (real processes, 127.0.0.1) at {FANOUT_FORMAT_MV}; N x 3 x 2 "
          f"PeerConnections from this process (a controller and a forwarding connection per broker and "
          f"controller, as BrokerNode has) without broker images; {args.rounds} rounds of one ApiVersions per "
          f"broker and controller, all at once (the fan-out's harness floor). Ballast: {args.ballast_k}k x 10 "
          f"GC-tracked containers in this process. RLIMIT_NOFILE {nofile}.\n")
    rows = []
    for cell in cells:
        n, rounds = cell["brokers"], cell["rounds"]
        middle = sorted(rounds, key=lambda r: r["wall_s"])[len(rounds) // 2]
        rows.append([n, 3 * n, ms(middle["wall_s"]), f"{middle['wall_s'] * 1000 / (3 * n):.2f}",
                     f"{middle['cpu_s'][0] * 1000 / (3 * n):.2f}",
                     " / ".join(f"{c * 1000 / n:.2f}" for c in middle["cpu_s"][1:]),
                     f"{ms(middle['gc_s'])} ({middle['gc_full']})", ", ".join(ms(r["wall_s"]) for r in rounds)])
    print(common.markdown_table(["N", "requests", "wall ms (median round)", "wall ms per request",
                                 "CPU ms per request, this process", "CPU ms per request, controllers 1/2/3",
                                 "GC ms here (full collections)", "all rounds ms"], rows))
    print(f"\nload average at start: {' '.join(f'{x:.2f}' for x in load_start)}; "
          f"at end: {' '.join(f'{x:.2f}' for x in load_end)}")
    del ballast
    if args.json:
        Path(args.json).write_text(json.dumps({"command": common.command_line(), "ballast_k": args.ballast_k,
                                               "load_start": load_start, "load_end": load_end, "results": cells},
                                              indent=2))
    return 0


# --------------------------------------------------------------------------
# 2. registration storm
# --------------------------------------------------------------------------

class SimBroker:
    __slots__ = ("broker_id", "incarnation_id", "directory_id", "epoch", "fenced", "ever_unfenced",
                 "refenced", "registered_s", "registrations")

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.incarnation_id = uuid.uuid4()
        self.directory_id = uuid.uuid4()
        self.epoch = -1
        self.fenced = True
        self.ever_unfenced = False
        self.refenced = 0  # unfenced -> fenced again (e.g. a session that expired)
        self.registered_s: float | None = None
        self.registrations = 0


class Storm:
    """The load generator's shared state: samples, error counts, phase marks."""

    def __init__(self, n: int, features: list[dict], cluster_id: str) -> None:
        self.brokers = [SimBroker(BROKER_ID_BASE + i) for i in range(n)]
        self.features = features
        self.cluster_id = cluster_id
        self.registration_s: list[float] = []
        self.heartbeats: list[tuple[float, float]] = []  # (sent, latency)
        self.errors: Counter = Counter()
        self.unfenced = 0
        self.all_unfenced = trio.Event()
        self.stop = False
        self.finished = 0
        self.all_finished = trio.Event()

    def registration_body(self, sim: SimBroker) -> dict:
        return {
            "broker_id": sim.broker_id, "cluster_id": self.cluster_id, "incarnation_id": sim.incarnation_id,
            "listeners": [{"name": "PLAINTEXT", "host": common.HOST, "port": 20_000 + sim.broker_id,
                           "security_protocol": 0}],
            "features": self.features, "rack": None, "is_migrating_zk_broker": False,
            "log_dirs": [sim.directory_id], "previous_broker_epoch": -1,
        }

    def mark_fenced(self, sim: SimBroker, fenced: bool) -> None:
        if sim.fenced and not fenced:
            self.unfenced += 1
            sim.ever_unfenced = True
            if self.unfenced == len(self.brokers):
                self.all_unfenced.set()
        elif not sim.fenced and fenced:
            self.unfenced -= 1
            sim.refenced += 1
        sim.fenced = fenced


async def timed_request(storm: Storm, peer, api_key: int, body: dict, version: int):
    """(response or None, latency s); failures are counted by name."""
    from server.net.peer import PeerUnavailable

    started = trio.current_time()
    try:
        response = await peer.request(api_key, body, REQUEST_TIMEOUT_S, version=version)
    except trio.TooSlowError:
        storm.errors[(api_key, "timeout")] += 1
        return None, trio.current_time() - started
    except PeerUnavailable as exc:
        storm.errors[(api_key, f"unavailable: {exc}")] += 1
        return None, trio.current_time() - started
    elapsed = trio.current_time() - started
    if response.error_code:
        storm.errors[(api_key, code_name(response.error_code))] += 1
    return response, elapsed


async def sim_broker(storm: Storm, sim: SimBroker, peer, versions: dict[int, int], rng: random.Random) -> None:
    try:
        await trio.sleep(rng.uniform(0, REGISTRATION_SPREAD_S))
        attempts = 0
        while not storm.stop:
            if sim.epoch < 0:
                if attempts >= MAX_REGISTRATION_ATTEMPTS:
                    return
                attempts += 1
                response, elapsed = await timed_request(storm, peer, BROKER_REGISTRATION,
                                                        storm.registration_body(sim), versions[BROKER_REGISTRATION])
                if response is not None and response.error_code == 0:
                    sim.epoch = response.broker_epoch
                    sim.registrations += 1
                    if sim.registered_s is None:
                        sim.registered_s = trio.current_time()
                        storm.registration_s.append(elapsed)
                else:
                    await trio.sleep(rng.uniform(0.25, 0.75))  # jittered back-off, then register again
                continue
            sent = trio.current_time()
            response, elapsed = await timed_request(storm, peer, BROKER_HEARTBEAT, {
                "broker_id": sim.broker_id, "broker_epoch": sim.epoch,
                "current_metadata_offset": HIGH_METADATA_OFFSET, "want_fence": False, "want_shut_down": False,
                "offline_log_dirs": []}, versions[BROKER_HEARTBEAT])
            if response is not None:
                storm.heartbeats.append((sent, elapsed))
                if response.error_code == ErrorCode.STALE_BROKER_EPOCH:
                    storm.mark_fenced(sim, True)
                    sim.epoch = -1
                    continue
                if response.error_code == 0:
                    storm.mark_fenced(sim, bool(response.is_fenced))
            delay_ms = FENCED_RETRY_MS if sim.fenced else HEARTBEAT_INTERVAL_MS
            await trio.sleep(delay_ms / 1000)
    finally:
        storm.finished += 1
        if storm.finished == len(storm.brokers):
            storm.all_finished.set()


async def storm_run(args, quorum: common.Quorum, leader: int) -> dict:
    from server.net.peer import PeerAddress, PeerConnection
    from server.releases import supported_features

    features = [{"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
                for name, r in sorted(supported_features(RELEASE, False).items())]
    storm = Storm(args.brokers, features, quorum.cluster_id)
    pids = {node_id: quorum.pid(node_id) for node_id in quorum.specs}
    own = os.getpid()
    connections = max(1, math.ceil(args.brokers / BROKERS_PER_CONNECTION))
    peers = [PeerConnection(PeerAddress(leader, common.HOST, quorum.port(leader)), f"bench-storm-{k}",
                            random.Random(k), max_in_flight_requests=2 * BROKERS_PER_CONNECTION)
             for k in range(connections)]
    result: dict = {"connections": connections}
    async with trio.open_nursery() as nursery:
        for peer in peers:
            await nursery.start(peer.run)
        with trio.fail_after(10):
            for peer in peers:
                await peer.wait_connected()
        versions = {key: peers[0].choose_version(key) for key in (BROKER_REGISTRATION, BROKER_HEARTBEAT)}
        result["versions"] = versions
        cpu0 = {pid: common.process_cpu_s(pid) for pid in list(pids.values()) + [own]}
        t0 = trio.current_time()
        rng = random.Random(1)
        for index, sim in enumerate(storm.brokers):
            nursery.start_soon(sim_broker, storm, sim, peers[index // BROKERS_PER_CONNECTION], versions,
                               random.Random(rng.random()))
        with trio.move_on_after(REGISTRATION_SPREAD_S + UNFENCE_WAIT_S):
            await storm.all_unfenced.wait()
        steady_start = trio.current_time()
        cpu1 = {pid: common.process_cpu_s(pid) for pid in cpu0}
        result["storm_s"] = steady_start - t0
        result["unfenced_at_window_start"] = storm.unfenced
        await trio.sleep(args.duration_s)
        steady_end = trio.current_time()
        cpu2 = {pid: common.process_cpu_s(pid) for pid in cpu0}
        storm.stop = True
        with trio.move_on_after(DRAIN_WAIT_S):  # each sim ends after its current request or sleep
            await storm.all_finished.wait()
        unfenced_listed = await describe_cluster_unfenced(quorum.port(leader))
        nursery.cancel_scope.cancel()
    window = steady_end - steady_start
    result["cpu_storm"] = cpu_share(cpu0, cpu1, steady_start - t0)
    result["cpu_steady"] = cpu_share(cpu1, cpu2, window)
    result.update(storm=storm, window_s=window, pids=pids, own=own, unfenced_listed=unfenced_listed,
                  steady=[lat for sent, lat in storm.heartbeats if steady_start <= sent < steady_end],
                  storm_heartbeats=[lat for sent, lat in storm.heartbeats if sent < steady_start])
    return result


async def describe_cluster_unfenced(port: int) -> int | None:
    """Brokers the leader lists in DescribeCluster (it lists only unfenced ones)."""
    from server.client import ClientError, KafkaClient

    try:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            async with await KafkaClient.connect(common.HOST, port, "bench-storm-check") as client:
                reply = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                             "endpoint_type": 1})
    except (ClientError, trio.TooSlowError):
        return None
    return sum(1 for b in reply.brokers if b.broker_id >= BROKER_ID_BASE)


def run_storm(args) -> int:
    nofile = raise_open_files_limit()
    work = common.work_dir(args.dir, "bench_brokers_storm_")
    try:
        with common.kraftwerk_quorum(work, VOTERS, STORM_FORMAT_MV) as (quorum, leader):
            result = trio.run(storm_run, args, quorum, leader)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    storm: Storm = result["storm"]
    n = len(storm.brokers)
    print(f"$ {common.command_line()}")
    print(f"{n} simulated brokers (release {RELEASE} feature ranges) against a {VOTERS}-voter quorum (real "
          f"processes, fsync on, 127.0.0.1) formatted at {STORM_FORMAT_MV}, from this one trio process over "
          f"{result['connections']} pipelined connections to the leader (controller {leader}). Each registers "
          f"(BrokerRegistration v{result['versions'][BROKER_REGISTRATION]}, start jittered in the first "
          f"{REGISTRATION_SPREAD_S:g} s), then heartbeats (BrokerHeartbeat v{result['versions'][BROKER_HEARTBEAT]}) "
          f"{HEARTBEAT_INTERVAL_MS} ms after each answer ({FENCED_RETRY_MS} ms while fenced) with "
          f"current_metadata_offset {HIGH_METADATA_OFFSET}. Storm phase: start until all are unfenced "
          f"({result['storm_s']:.1f} s); steady window: the next {result['window_s']:.1f} s. RLIMIT_NOFILE "
          f"{nofile}; {os.cpu_count()} CPUs shared by the load generator and the three controllers.\n")
    steady, reg = result["steady"], storm.registration_s
    rows = [
        ["registration (first success per broker)", len(reg), ms(common.percentile(reg, 0.5)),
         ms(common.percentile(reg, 0.99)), ms(max(reg) if reg else float("nan"))],
        ["heartbeat, storm phase", len(result["storm_heartbeats"]),
         ms(common.percentile(result["storm_heartbeats"], 0.5)),
         ms(common.percentile(result["storm_heartbeats"], 0.99)),
         ms(max(result["storm_heartbeats"]) if result["storm_heartbeats"] else float("nan"))],
        ["heartbeat, steady window", len(steady), ms(common.percentile(steady, 0.5)),
         ms(common.percentile(steady, 0.99)), ms(max(steady) if steady else float("nan"))],
    ]
    print(common.markdown_table(["request", "samples", "p50 ms", "p99 ms", "max ms"], rows))
    print()
    pids, own = result["pids"], result["own"]
    cpu_rows = []
    for node_id, pid in pids.items():
        label = f"controller {node_id}" + (" (leader)" if node_id == leader else "")
        cpu_rows.append([label, f"{result['cpu_storm'][pid]:.0f}", f"{result['cpu_steady'][pid]:.0f}"])
    cpu_rows.append(["load generator (this process)", f"{result['cpu_storm'][own]:.0f}",
                     f"{result['cpu_steady'][own]:.0f}"])
    print(common.markdown_table(["process", "CPU % of one core, storm phase", "CPU % of one core, steady window"],
                                cpu_rows))
    print()
    registered = sum(1 for s in storm.brokers if s.registered_s is not None)
    ever = sum(1 for s in storm.brokers if s.ever_unfenced)
    refenced = sum(s.refenced for s in storm.brokers)
    reregistered = sum(max(0, s.registrations - 1) for s in storm.brokers)
    rate = len(steady) / result["window_s"] if result["window_s"] else float("nan")
    errors = ", ".join(f"{('BrokerRegistration' if k[0] == BROKER_REGISTRATION else 'BrokerHeartbeat')} "
                       f"{k[1]}: {v}" for k, v in sorted(storm.errors.items(), key=str)) or "none"
    print(common.markdown_table(["brokers", "registered", "ever unfenced", "unfenced at window start",
                                 "unfenced at end (own view)", "unfenced listed by leader (DescribeCluster)",
                                 "re-fenced", "re-registered", "heartbeats/s in window"],
                                [[n, registered, ever, result["unfenced_at_window_start"], storm.unfenced,
                                  result["unfenced_listed"] if result["unfenced_listed"] is not None else "no answer",
                                  refenced, reregistered, f"{rate:,.0f}"]]))
    print(f"\nErrors by API and code: {errors}.")
    return 0


# --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="measure", required=True)
    fan = sub.add_parser("fanout", help="metadata.version change -> every broker renegotiated")
    fan.add_argument("--brokers", default="3,30,300", help="comma-separated broker counts")
    fan.add_argument("--budget-s", type=float, default=300.0, help="no N starts (or continues) after this")
    fan.add_argument("--json", default=None, help="also write the results as JSON to this file")
    fan.add_argument("--gc-freeze", action=argparse.BooleanOptionalAction, default=False,
                     help="gc.freeze() once all N are RUNNING, as `kraftwerk broker` does once it serves "
                          "(cli/main.py): full collections then skip the start-up heap, here the N images "
                          "the one process holds (default off: no faster on the idle machine; see GcClock)")
    fan.add_argument("--serving-thresholds", action=argparse.BooleanOptionalAction, default=True,
                     help="collect the youngest generation as a serving process does (server/collector.py "
                          "use_serving_thresholds, set by cli/main.py for every node it serves); "
                          "--no-serving-thresholds keeps CPython's defaults")
    fan.add_argument("--settle", action=argparse.BooleanOptionalAction, default=False,
                     help="before each step, wait (bounded) until every broker is RUNNING and has replayed "
                          "the high watermark, unchanged over 3 polls: a step then does not carry the previous "
                          "step's re-registrations (the wait is reported, not counted)")
    fan.add_argument("--py-spy", default=None, metavar="PATH",
                     help="profile the steps with py-spy (raw stacks to PATH.<N>; needs .venv/bin/py-spy)")
    api = sub.add_parser("apiversions", help="the floor's N x 3 ApiVersions alone: connections, no broker images")
    api.add_argument("--brokers", default="30,100,300", help="comma-separated broker counts")
    api.add_argument("--rounds", type=int, default=5)
    api.add_argument("--ballast-k", type=int, default=0,
                     help="thousands x 10 GC-tracked containers kept alive here (the heap N images make)")
    api.add_argument("--json", default=None, help="also write the results as JSON to this file")
    sto = sub.add_parser("storm", help="simulated brokers registering and heartbeating")
    sto.add_argument("--brokers", type=int, default=1000)
    sto.add_argument("--duration-s", type=float, default=30.0, help="steady window after all are unfenced")
    for p in (fan, api, sto):
        p.add_argument("--dir", default=None, help="parent of the temporary work directory (the disk measured)")
    args = parser.parse_args(argv)
    os.chdir(common.REPO)  # local_cluster runs `python -m cli.main` from the current directory
    from server.observability import configure_logging
    configure_logging("warning")
    return {"fanout": run_fanout, "apiversions": run_apiversions, "storm": run_storm}[args.measure](args)


if __name__ == "__main__":
    raise SystemExit(main())
