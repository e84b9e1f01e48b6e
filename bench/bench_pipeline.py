"""The fleet pipeline's throughput: records per second through `upgrade_readiness`.

For each fleet size (total records = clusters x records per cluster; every cluster's
log is held by 3 controllers, so the files hold about 3x that many rows), measures:

  baseline   a plain single-process Python function over `pipeline.reader.read_fleet`
             (the program a user would write without Spark): one row per (cluster,
             offset) with the log copies preferred (highest leader epoch, then lowest
             node id, then file; snapshot rows only below the log start, from one
             snapshot, as `transforms.dedupe` does), then per cluster the last level of
             every feature and each broker's last registration (minus unregistered
             brokers), giving min / max mv_max over the registered brokers
             (= supported / target metadata.version) and the blockers.
  local[N]   Spark on one fresh SparkSession per master: by default (--copies stream)
             the job's read (`jobs.read_job_stream`: each cluster's record stream built
             in the data source, plus the error rows, the columns the tables read, 3
             partitions per core), cached as `jobs.build_stream_tables` does; stream =
             its rows without an error; upgrade_readiness(stream).collect(), timed from
             the read to the end of the collect. --copies distinct / all: the records
             (`jobs.read_job_records`, byte-identical copies skipped, or every copy;
             --all-columns reads every column), partitioned by cluster and sorted
             (`jobs.cluster_records`) and cached as `jobs.build_tables` does, stream =
             dedupe(records_df), also cached. --uncached: the bare recipe, which
             re-reads the files for every scan of the plan. Session start-up is timed
             apart.
  e2e        (--e2e) `kraftwerk pipeline run --master M` as a user runs it, in a fresh
             process per master and size: Spark start-up, reading, every table, Parquet
             and the report, timed from the start of the process to its end.
  raw read   `cat` of every segment and snapshot file to /dev/null (best of 2): the rate
             at which the bytes alone can be read, for the ratio.

Every answer is checked: the baseline's rows must equal Spark's readiness rows
(finalized metadata.version, supported and target level, blockers, registered brokers,
last offset) and the fake fleet's own summary (finalized metadata.version, registered
brokers, and with the controllers' maximum folded in, `readiness.max_level` and
`readiness.blockers`). A mismatch aborts the run.

records/s = rows in the fleet files / seconds. Fleets are cached under --fleet-dir
(one directory per spec, with a SPEC.json marker written last, holding the spec and
the summary's expectations), so reruns skip the generation.

Timing targets live here, never in tests.

Each Spark session first runs one untimed warm-up pass over the first cluster of the
smallest fleet (starts the Python workers, warms the JVM), so the sizes compare the work
and not the first-job costs. The masters share one JVM (one process), so the first pays
the JIT compiling of the plan that the later ones reuse (on 2 cores the compiler threads
run beside local[1]'s one task thread, and they take about a third of the CPU of a 2M
run); `--warmup fleet` warms each session on the whole smallest fleet instead, so that
local[N] against local[1] compares the work on compiled code. The machine's load averages (`os.getloadavg`) are printed
at the start and the end: the absolute times are only as good as the machine was idle.

Run: .venv/bin/python bench/bench_pipeline.py [--sizes 20000,60000,200000] [--clusters 10]
            [--masters local[1],local[2]] [--fleet-dir DIR] [--budget-s 1500] [--uncached]
            [--driver-memory 4g] [--tuples] [--copies all|distinct|stream] [--all-columns]
            [--no-baseline] [--e2e] [--warmup cluster|fleet] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from pipeline.fake_fleet import FleetSpec, write_fleet  # noqa: E402
from pipeline.jobs import DRIVER_MEMORY  # noqa: E402
from pipeline.reader import fleet_files, read_fleet  # noqa: E402
from pipeline.schema import RECORD_FIELDS  # noqa: E402

MARKER = "SPEC.json"
SHUFFLE_PARTITIONS = 4
METADATA_VERSION = "metadata.version"
FEATURE_LEVEL_RECORD = "FeatureLevelRecord"
REGISTER_BROKER_RECORD = "RegisterBrokerRecord"
UNREGISTER_BROKER_RECORD = "UnregisterBrokerRecord"
BROKER_RECORDS = frozenset({REGISTER_BROKER_RECORD, UNREGISTER_BROKER_RECORD, "FenceBrokerRecord",
                            "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord"})
SNAPSHOT_CONTROL_RECORDS = frozenset({"SnapshotHeader", "SnapshotFooter"})
_F = {name: i for i, name in enumerate(RECORD_FIELDS)}
C_CLUSTER, C_NODE, C_SOURCE, C_FILE, C_OFFSET, C_EPOCH = (
    _F["cluster"], _F["node_id"], _F["source"], _F["file"], _F["offset"], _F["leader_epoch"])
C_TYPE, C_FEATURE, C_BROKER, C_ERROR = _F["record_type"], _F["feature"], _F["broker"], _F["error"]


class BudgetExceeded(Exception):
    pass


# --------------------------------------------------------------------------
# fleets (cached by spec)
# --------------------------------------------------------------------------

def fleet_for(parent: Path, spec: FleetSpec, workers: int, deadline: float) -> tuple[Path, dict, float | None]:
    """(fleet directory, marker contents, seconds spent writing or None when reused)."""
    name = f"fleet-c{spec.clusters}-r{spec.records_per_cluster}-s{spec.seed}-b{spec.segment_bytes}"
    root = parent / name
    marker = root / MARKER
    if marker.is_file():
        saved = json.loads(marker.read_text())
        if saved["spec"] == asdict(spec):
            return root / "fleet", saved, None
    if time.monotonic() > deadline:
        raise BudgetExceeded(f"no time left to write {name}")
    shutil.rmtree(root, ignore_errors=True)  # a half-written fleet (no marker) is redone
    root.mkdir(parents=True)
    print(f"writing {name} ({spec.clusters} x {spec.records_per_cluster} records, {workers} workers)",
          file=sys.stderr)
    summary = write_fleet(root / "fleet", spec, None, workers=workers)
    expected = {
        c.name: {
            "metadata_version_level": c.finalized_levels[METADATA_VERSION],
            "brokers": sorted(b.broker_id for b in c.brokers),
            "controller_max_level": c.readiness.controller_max_level,
            "max_level": c.readiness.max_level,
            "blockers": sorted(c.readiness.blockers),
            "records": c.records,
        }
        for c in summary.clusters
    }
    saved = {"spec": asdict(spec), "total_records": summary.total_records, "clusters": expected,
             "write_seconds": summary.write_seconds}
    marker.write_text(json.dumps(saved, indent=1))  # last: its presence means "complete"
    return root / "fleet", saved, summary.write_seconds


# --------------------------------------------------------------------------
# the baseline: plain Python, one process
# --------------------------------------------------------------------------

def _cluster_readiness(log: dict, snapshots: dict) -> dict:
    """One cluster's answer from its log rows (offset -> (key, payload)) and snapshot
    files (file -> (node_id, [(offset, payload)]))."""
    log_start = min(log) if log else None
    # One snapshot supplies what lies below the log start: the oldest reaching it, else the newest.
    chosen = None
    if snapshots:
        def rank(item):
            file, (node_id, rows) = item
            end = max(o for o, _ in rows) + 1
            reaches = log_start is not None and end >= log_start
            return (0 if reaches else 1, end if reaches else -end, node_id, file)
        candidates = [item for item in snapshots.items() if item[1][1]]
        if candidates:
            chosen = min(candidates, key=rank)
    stream: list[tuple[int, tuple]] = [(offset, entry[1]) for offset, entry in log.items() if entry[1] is not None]
    if chosen is not None:
        rows = chosen[1][1]
        end = max(o for o, _ in rows) + 1
        log_level_offsets: dict[str, list[int]] = {}
        for offset, entry in log.items():
            payload = entry[1]
            if payload is not None and payload[0] == FEATURE_LEVEL_RECORD:
                log_level_offsets.setdefault(payload[1][0], []).append(offset)
        for offset, payload in rows:
            if payload is None:
                continue
            if log_start is None or offset < log_start:
                stream.append((offset, payload))
            elif payload[0] == FEATURE_LEVEL_RECORD and not any(
                    o < end for o in log_level_offsets.get(payload[1][0], ())):
                stream.append((log_start - 1, payload))
    stream.sort(key=lambda item: item[0])

    levels: dict[str, int] = {}
    mv_max: dict[int, int | None] = {}
    unregistered: dict[int, bool] = {}
    for _offset, (record_type, feature, broker) in stream:
        if record_type == FEATURE_LEVEL_RECORD:
            levels[feature[0]] = feature[1]
            continue
        broker_id = broker[0]
        if record_type == REGISTER_BROKER_RECORD:
            mv_max[broker_id] = broker[7]
        else:
            mv_max.setdefault(broker_id, None)
        unregistered[broker_id] = record_type == UNREGISTER_BROKER_RECORD
    registered = sorted(b for b, gone in unregistered.items() if not gone)
    maxima = [mv_max[b] for b in registered if mv_max[b] is not None]
    supported = min(maxima) if maxima else None
    target = max(maxima) if maxima else None
    blockers = sorted(b for b in registered if mv_max[b] is not None and mv_max[b] < target)
    offsets = list(log) + [o for _, (_, rows) in snapshots.items() for o, _ in rows]
    return {
        "metadata_version_level": levels.get(METADATA_VERSION),
        "supported_mv_level": supported,
        "target_mv_level": target,
        "blockers": blockers,
        "brokers": registered,
        "mv_max": {b: mv_max[b] for b in registered},
        "last_offset": max(offsets) if offsets else None,
    }


def baseline_readiness(fleet: Path) -> tuple[dict, int]:
    """({cluster: answer}, rows read). Clusters come one after another in read_fleet's
    order (files sorted by relative path, which starts with the cluster), so only one
    cluster's rows are held at a time."""
    answers: dict[str, dict] = {}
    rows_read = 0
    current = None
    log: dict[int, tuple] = {}
    snapshots: dict[str, tuple] = {}
    for row in read_fleet(fleet):
        rows_read += 1
        cluster = row[C_CLUSTER]
        if cluster != current:
            if current is not None:
                if current in answers:
                    raise RuntimeError(f"rows of cluster {current} are not contiguous")
                answers[current] = _cluster_readiness(log, snapshots)
            current, log, snapshots = cluster, {}, {}
        record_type = row[C_TYPE]
        if row[C_ERROR] is not None or record_type is None:
            continue
        payload = None
        if record_type == FEATURE_LEVEL_RECORD and row[C_FEATURE] is not None:
            payload = (record_type, row[C_FEATURE], None)
        elif record_type in BROKER_RECORDS and row[C_BROKER] is not None:
            payload = (record_type, None, row[C_BROKER])
        offset = row[C_OFFSET]
        if row[C_SOURCE] == "log":
            epoch, node_id = row[C_EPOCH], row[C_NODE]
            key = (-(epoch if epoch is not None else -1 << 40), node_id, row[C_FILE])
            held = log.get(offset)
            if held is None or key < held[0]:
                log[offset] = (key, payload)
        elif record_type not in SNAPSHOT_CONTROL_RECORDS:
            snapshots.setdefault(row[C_FILE], (row[C_NODE], []))[1].append((offset, payload))
    if current is not None:
        answers[current] = _cluster_readiness(log, snapshots)
    return answers, rows_read


# --------------------------------------------------------------------------
# Spark
# --------------------------------------------------------------------------

def spark_session(master: str, driver_memory: str | None = None):
    from pipeline.jobs import spark_session as pipeline_session

    if driver_memory:
        # Only the first session of the process launches the JVM, and only then does this
        # apply (later sessions reuse that JVM).
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {driver_memory} pyspark-shell"

    return pipeline_session(master, "bench-pipeline", SHUFFLE_PARTITIONS, driver_memory or DRIVER_MEMORY)


def spark_readiness(spark, fleet: Path, cached: bool, deadline: float, arrow: bool = True,
                    copies: str = "stream", all_columns: bool = False) -> tuple[dict, float]:
    """({cluster: answer}, seconds from the read to the end of collect). Jobs still
    running at `deadline` are cancelled (the collect then raises)."""
    from pipeline.datasource import read_records
    from pyspark.sql import functions as F

    from pipeline.jobs import JOB_COLUMNS, PARTITIONS_PER_CORE, STREAM_COLUMNS, STREAM_READ_COLUMNS, cluster_records
    from pipeline.transforms import dedupe, upgrade_readiness

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise BudgetExceeded("no time left")
    timer = threading.Timer(remaining, spark.sparkContext.cancelAllJobs)
    timer.daemon = True
    timer.start()
    started = time.perf_counter()
    try:
        partitions = max(1, spark.sparkContext.defaultParallelism) * PARTITIONS_PER_CORE
        if copies == "stream":
            # As jobs.build_stream_tables does: the source's rows cached as read.
            rows_df = read_records(spark, str(fleet), arrow=arrow, copies=copies, partitions=partitions,
                                   columns=None if all_columns else STREAM_READ_COLUMNS)
            if cached:
                rows_df = rows_df.cache()
            stream = rows_df.where(F.col("error").isNull())
            if not all_columns:
                stream = stream.select(*STREAM_COLUMNS)
            rows = upgrade_readiness(stream).collect()
            elapsed = time.perf_counter() - started
            if cached:
                rows_df.unpersist()
            return _answers(rows), elapsed
        records_df = read_records(spark, str(fleet), arrow=arrow, columns=None if all_columns else JOB_COLUMNS,
                                  copies=copies, partitions=partitions)
        if cached:
            # As jobs.build_tables does: partitioned by cluster and sorted the way dedupe
            # ranks copies, then cached.
            records_df = cluster_records(records_df).cache()
        stream = dedupe(records_df)
        if not all_columns:
            stream = stream.select(*STREAM_COLUMNS)
        if cached:
            stream = stream.cache()
        rows = upgrade_readiness(stream).collect()
        elapsed = time.perf_counter() - started
        if cached:
            stream.unpersist()
            records_df.unpersist()
    except Exception as exc:
        if time.monotonic() >= deadline:
            raise BudgetExceeded(f"Spark job cancelled at the budget: {exc.__class__.__name__}") from exc
        raise
    finally:
        timer.cancel()
    return _answers(rows), elapsed


def _answers(rows) -> dict:
    answers = {}
    for row in rows:
        r = row.asDict(recursive=True)
        brokers = r["brokers"] or []
        answers[r["cluster"]] = {
            "metadata_version_level": r["metadata_version_level"],
            "supported_mv_level": r["supported_mv_level"],
            "target_mv_level": r["target_mv_level"],
            "blockers": sorted(b["node_id"] for b in r["blockers"]),
            "brokers": sorted(b["broker_id"] for b in brokers),
            "mv_max": {b["broker_id"]: b["mv_max"] for b in brokers},
            "last_offset": r["last_offset"],
        }
    return answers


def raw_read_seconds(fleet: Path) -> float:
    """Best of two `cat`s of every segment and snapshot file to /dev/null."""
    paths = [f.path for f in fleet_files(fleet)]
    best = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        # Bounded: the file list is cut into chunks; one cat per chunk.
        for start in range(0, len(paths), 500):
            subprocess.run(["cat", *paths[start:start + 500]], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - started)
    return best


def end_to_end_seconds(fleet: Path, master: str, out: Path, timeout_s: float) -> float:
    """`kraftwerk pipeline run` in a fresh process, start to end (raises on failure)."""
    env = dict(os.environ, PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
    repo = Path(__file__).resolve().parents[1]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "pipeline", "run", "--fleet", str(fleet), "--out",
                           str(out), "--master", master], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=max(timeout_s, 1.0))
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"pipeline run failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def e2e_answers(out: Path) -> dict:
    """The readiness table a `pipeline run` wrote, as the bench's answers."""
    import pyarrow.parquet as pq

    answers = {}
    for r in pq.read_table(str(out / "upgrade_readiness")).to_pylist():
        brokers = r["brokers"] or []
        answers[r["cluster"]] = {
            "metadata_version_level": r["metadata_version_level"],
            "supported_mv_level": r["supported_mv_level"],
            "target_mv_level": r["target_mv_level"],
            "blockers": sorted(b["node_id"] for b in r["blockers"] if b["role"] == "broker"),
            "brokers": sorted(b["broker_id"] for b in brokers),
            "mv_max": {b["broker_id"]: b["mv_max"] for b in brokers},
            "last_offset": r["last_offset"],
        }
    return answers


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------

def check_against_summary(answers: dict, saved: dict) -> None:
    expected = saved["clusters"]
    if set(answers) != set(expected):
        raise RuntimeError(f"clusters differ: baseline {sorted(answers)} vs summary {sorted(expected)}")
    for name, want in expected.items():
        got = answers[name]
        controller_max = want["controller_max_level"]
        # The summary judges the controllers too: fold their maximum in.
        supported = min(got["supported_mv_level"], controller_max) if got["supported_mv_level"] is not None \
            else controller_max
        blockers = sorted(b for b, m in got["mv_max"].items() if m is not None and m < controller_max)
        mismatch = [
            what for what, a, b in (
                ("finalized metadata.version", got["metadata_version_level"], want["metadata_version_level"]),
                ("registered brokers", got["brokers"], want["brokers"]),
                ("supported level (with controllers)", supported, want["max_level"]),
                ("blockers below the controllers' maximum", blockers, want["blockers"]),
                ("last offset", got["last_offset"], want["records"] - 1),
            ) if a != b
        ]
        if mismatch:
            raise RuntimeError(f"{name}: baseline disagrees with the fleet summary on {mismatch}: {got} vs {want}")


def check_e2e(answers: dict, saved: dict) -> None:
    """A `pipeline run`'s readiness table against the fake fleet's summary, on what does
    not depend on how the controllers are judged (the job also judges them)."""
    expected = saved["clusters"]
    if set(answers) != set(expected):
        raise RuntimeError(f"e2e clusters differ: {sorted(answers)} vs summary {sorted(expected)}")
    for name, want in expected.items():
        got = answers[name]
        for what, a, b in (("finalized metadata.version", got["metadata_version_level"], want["metadata_version_level"]),
                           ("registered brokers", got["brokers"], want["brokers"]),
                           ("last offset", got["last_offset"], want["records"] - 1)):
            if a != b:
                raise RuntimeError(f"{name}: pipeline run disagrees with the fleet summary on {what}: {a} vs {b}")


def check_same(baseline: dict, spark: dict, master: str) -> None:
    if baseline != spark:
        bad = sorted(c for c in set(baseline) | set(spark) if baseline.get(c) != spark.get(c))
        c = bad[0]
        raise RuntimeError(f"{master} disagrees with the baseline on {len(bad)} clusters, e.g. {c}: "
                           f"spark {spark.get(c)} vs baseline {baseline.get(c)}")


# --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,60000,200000",
                        help="total records per fleet (clusters x records per cluster), comma separated")
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--workers", type=int, default=2, help="processes writing a fleet")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--fleet-dir", default=None,
                        help="where fleets are cached (default: a temporary directory, removed at the end)")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--budget-s", type=float, default=1500.0,
                        help="no new step starts after this many seconds; a running Spark job is cancelled")
    parser.add_argument("--uncached", action="store_true",
                        help="do not cache the records and the stream (the bare recipe)")
    parser.add_argument("--warmup", choices=("cluster", "fleet"), default="cluster",
                        help="what the untimed warm-up pass of each session reads: the smallest fleet's first "
                             "cluster, or the whole smallest fleet (then every master is timed with the JIT "
                             "compiler's work on that plan done: the masters run one after another in one JVM, "
                             "and without it the first pays the compiling that the later ones reuse)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the untimed pass over the smallest fleet's first cluster at the start of "
                             "each session")
    parser.add_argument("--driver-memory", default=None,
                        help="spark.driver.memory of the JVM the first session launches (Spark's default: 1g)")
    parser.add_argument("--tuples", action="store_true",
                        help="the data source yields Python tuples instead of Arrow batches (arrow=false)")
    parser.add_argument("--copies", choices=("all", "distinct", "stream"), default="stream",
                        help="stream: each cluster's stream built in the data source, as the job reads; "
                             "distinct: the records with byte-identical copies skipped, deduplicated by Spark; "
                             "all: every controller's copy")
    parser.add_argument("--all-columns", action="store_true",
                        help="read every column (fields_json included) instead of the job's columns")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the plain-Python baseline (Spark's answers are then checked against the "
                             "fake fleet's summary only)")
    parser.add_argument("--e2e", action="store_true",
                        help="also time `kraftwerk pipeline run` end to end, one fresh process per master and size")
    parser.add_argument("--json", default=None, help="write the results as JSON to this path")
    args = parser.parse_args(argv)
    if args.tuples and args.copies == "stream":
        parser.error("--tuples needs --copies distinct or all (the stream mode builds Arrow batches)")
    load_start = os.getloadavg()
    started_utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    deadline = time.monotonic() + args.budget_s
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    from server.observability import configure_logging
    configure_logging("warning")

    work = None
    if args.fleet_dir:
        fleet_parent = Path(args.fleet_dir).resolve()
        fleet_parent.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench_pipeline_", dir=args.dir))
        fleet_parent = work
    results: dict[int, dict] = {}
    pending: list[str] = []
    session_s: dict[str, float] = {}
    warmup_s: dict[str, float] = {}
    try:
        for size in sizes:
            per_cluster = size // args.clusters
            spec = FleetSpec(clusters=args.clusters, records_per_cluster=per_cluster, seed=args.seed,
                             segment_bytes=args.segment_bytes)
            try:
                fleet, saved, wrote_s = fleet_for(fleet_parent, spec, args.workers, deadline)
                answers, base_s = None, None
                rows = None
                if not args.no_baseline:
                    started = time.perf_counter()
                    answers, rows = baseline_readiness(fleet)
                    base_s = time.perf_counter() - started
            except BudgetExceeded as exc:
                pending.append(f"size {size}: {exc}")
                continue
            if answers is not None:
                check_against_summary(answers, saved)
            files = fleet_files(fleet)
            results[size] = {"fleet": fleet, "records": saved["total_records"], "rows": rows,
                             "files": len(files), "bytes": sum(os.path.getsize(f.path) for f in files),
                             "wrote_s": wrote_s, "baseline_s": base_s, "answers": answers, "saved": saved,
                             "spark_s": {}, "e2e_s": {}, "raw_read_s": raw_read_seconds(fleet)}
            print(f"size {size}: {rows} rows, baseline {base_s} s, raw read {results[size]['raw_read_s']:.2f} s",
                  file=sys.stderr)
        for master in masters:
            if time.monotonic() > deadline:
                pending.append(f"{master}: not started (budget)")
                continue
            started = time.perf_counter()
            spark = spark_session(master, args.driver_memory)
            session_s[master] = time.perf_counter() - started
            try:
                if results and not args.no_warmup:
                    # One untimed pass over the smallest fleet's first cluster: starts the Python
                    # workers and warms the JVM, so the sizes compare the work and not the
                    # first-job costs. One cluster is enough for that (the whole fleet at 1M
                    # records would cost minutes of budget for nothing measured).
                    smallest = next(iter(results.values()))["fleet"]
                    warm = smallest if args.warmup == "fleet" else min(
                        (p for p in smallest.iterdir() if p.is_dir()), default=smallest)
                    started = time.perf_counter()
                    try:
                        spark_readiness(spark, warm, not args.uncached, deadline, not args.tuples, args.copies,
                                        args.all_columns)
                        warmup_s[master] = time.perf_counter() - started
                    except BudgetExceeded as exc:
                        pending.append(f"{master} warm-up: {exc}")
                for size, result in results.items():
                    try:
                        answers, elapsed = spark_readiness(spark, result["fleet"], not args.uncached, deadline,
                                                           not args.tuples, args.copies, args.all_columns)
                    except BudgetExceeded as exc:
                        pending.append(f"{master} size {size}: {exc}")
                        continue
                    if result["answers"] is None:
                        check_against_summary(answers, result["saved"])
                    else:
                        check_same(result["answers"], answers, master)
                    result["spark_s"][master] = elapsed
                    print(f"size {size}: {master} {elapsed:.1f} s", file=sys.stderr)
            finally:
                spark.stop()
        if args.e2e:
            for master in masters:
                for size, result in results.items():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        pending.append(f"e2e {master} size {size}: budget")
                        continue
                    out = fleet_parent / f"e2e-out-{size}"
                    try:
                        elapsed = end_to_end_seconds(result["fleet"], master, out, remaining)
                    except subprocess.TimeoutExpired:
                        pending.append(f"e2e {master} size {size}: cut at the budget")
                        continue
                    check_e2e(e2e_answers(out), result["saved"])
                    shutil.rmtree(out, ignore_errors=True)
                    result["e2e_s"][master] = elapsed
                    print(f"size {size}: e2e {master} {elapsed:.1f} s", file=sys.stderr)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)

    load_end = os.getloadavg()
    print(f"$ {common.command_line()}")
    print(f"Started {started_utc}, ended {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load averages "
          f"(1/5/15 min) at the start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, at the end "
          f"{load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}.")
    print(f"Fleets of {args.clusters} clusters (seed {args.seed}, segments {args.segment_bytes} B, 3 controller "
          f"copies each); rows = rows in the fleet files (all copies and snapshots); Spark = the job's read "
          f"(copies {args.copies}, {'all columns' if args.all_columns else 'the transforms columns'}) -> "
          f"{'stream rows' if args.copies == 'stream' else 'dedupe'} -> upgrade_readiness -> collect, "
          f"{'uncached' if args.uncached else 'cached as jobs.build_stream_tables / build_tables does'}, "
          f"spark.sql.shuffle.partitions={SHUFFLE_PARTITIONS}, data source rows as "
          f"{'Python tuples' if args.tuples else 'Arrow batches'}, driver memory {args.driver_memory or 'the pipeline default (' + DRIVER_MEMORY + ')'}, "
          f"one session per master reused across sizes "
          f"(smallest first); baseline = plain Python over read_fleet, one process. Every cluster's answer checked: "
          f"baseline = Spark = the fake fleet's summary. Session start-up: "
          + ", ".join(f"{m} {s:.1f} s" for m, s in session_s.items())
          + " (the first starts the JVM; later sessions reuse it); untimed warm-up pass over the smallest fleet"
          + ("" if args.warmup == "fleet" else "'s first cluster") + ": "
          + (", ".join(f"{m} {s:.1f} s" for m, s in warmup_s.items()) or "none")
          + f". {os.cpu_count()} CPUs.\n")
    # Rates are of the fleet's records (FleetSpec.clusters x records_per_cluster, as the
    # summary counts them): what a user means by "records", not the copies and snapshots.
    headers = ["records", "rows", "files", "MB", "raw read s", "baseline s"]
    for master in masters:
        headers += [f"{master} s", f"{master} rec/s", f"{master} / baseline"]
    if args.e2e:
        headers += [f"e2e {master} s" for master in masters] + [f"e2e {master} rec/s" for master in masters]
    rows_out = []
    for size, r in results.items():
        base = r["baseline_s"]
        line = [f"{r['records']:,}", "-" if r["rows"] is None else f"{r['rows']:,}", r["files"],
                f"{r['bytes'] / 1e6:,.0f}", f"{r['raw_read_s']:.2f}", "-" if base is None else f"{base:.1f}"]
        for master in masters:
            t = r["spark_s"].get(master)
            line += ["-", "-", "-"] if t is None else [
                f"{t:.1f}", f"{r['records'] / t:,.0f}", "-" if base is None else f"{base / t:.2f}"]
        if args.e2e:
            line += [f"{r['e2e_s'][m]:.1f}" if m in r["e2e_s"] else "-" for m in masters]
            line += [f"{r['records'] / r['e2e_s'][m]:,.0f}" if m in r["e2e_s"] else "-" for m in masters]
        rows_out.append(line)
    print(common.markdown_table(headers, rows_out))
    if len(masters) >= 2:
        # Named by the masters, whatever order they ran in: the one with fewer cores first.
        a, b = sorted(masters[:2], key=lambda m: (len(m), m))
        print(f"\n{b} / {a} speed-up (time of {a} / time of {b}): " + ", ".join(
            f"{r['records']:,}: {r['spark_s'][a] / r['spark_s'][b]:.2f}"
            for r in results.values() if a in r["spark_s"] and b in r["spark_s"]))
    for r in results.values():
        ratios = [f"{m} {r['raw_read_s'] / t:.3f}" for m, t in r["spark_s"].items()]
        ratios += [f"e2e {m} {r['raw_read_s'] / t:.3f}" for m, t in r["e2e_s"].items()]
        if ratios:
            print(f"\n{r['records']:,} records: rate / raw read rate (raw read s / s): " + ", ".join(ratios))
    done = [r for r in results.values()]
    wrote = [f"{r['records']:,} in {r['wrote_s']:.0f} s" for r in done if r["wrote_s"] is not None]
    if wrote:
        print("\nFleets written this run (" + str(args.workers) + " workers): " + ", ".join(wrote))
    if pending:
        print("\nNot measured (budget): " + "; ".join(pending))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": common.command_line(),
            "started_utc": started_utc,
            "load_start": list(load_start),
            "load_end": list(load_end),
            "cpus": os.cpu_count(),
            "masters": masters,
            "copies": args.copies,
            "all_columns": args.all_columns,
            "session_s": session_s,
            "warmup": "none" if args.no_warmup else args.warmup,
            "warmup_s": warmup_s,
            "sizes": [
                {"size": size, "records": r["records"], "rows": r["rows"], "files": r["files"], "bytes": r["bytes"],
                 "raw_read_s": r["raw_read_s"], "baseline_s": r["baseline_s"], "spark_s": r["spark_s"],
                 "e2e_s": r["e2e_s"], "wrote_s": r["wrote_s"], "answers_checked": True}
                for size, r in results.items()
            ],
            "pending": pending,
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
