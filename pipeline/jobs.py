"""The fleet job: records in, Parquet tables and an HTML report out.

Owns: `run` (read a fleet directory, run the transforms, write the outputs),
`build_tables` / `build_stream_tables` / `build_split_tables` and `write_outputs` (the
same without the reading, for tests and other inputs), `collect_parquet`, `RunResult`,
`run_command` (the CLI's entry), and the Spark session with its class archive.

Rules kept here:
- The transforms stay pure (pipeline/transforms.py); this module decides the actions.
  Each table is computed once, by its Parquet write.
- `run` reads each cluster's record stream as the data source builds it (the rows
  `transforms.dedupe` keeps, decided per cluster where the rows are decoded, plus the
  error rows), so no stage shuffles or sorts every record to deduplicate. It reads the
  fleet twice, split by kind (`read_job_split`): the broker rows, nearly every record,
  go straight into the broker timeline, uncached; the other rows (feature levels,
  the rest of the stream, errors: few) are cached and give the other tables, with the
  timeline's Parquet standing for the broker rows (`build_split_tables`). Decoding the
  files a second time costs less than caching every row in Spark.
  `build_stream_tables` builds the same tables from one stream-mode read (cached as
  read), `build_tables` from any records DataFrame, with `dedupe` in Spark: the
  records partitioned by cluster and sorted once (`cluster_records`) and the stream
  are cached; those two read the files once.
- The broker timeline is written first and not cached: upgrade_readiness reads it back
  from its Parquet files. The report reads the small tables back from Parquet with
  pyarrow, as Spark's collect() would give them (never raw records).
- Outputs under `out`: `features_audit/`, `upgrade_readiness/`, `broker_timeline/`,
  `errors/` (Parquet, overwritten) and `report.html`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping

import pyarrow
import pyarrow.dataset
import pyarrow.parquet
import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline import report, transforms
from pipeline.datasource import COPIES_DISTINCT, COPIES_STREAM, STREAM_ROWS_BROKER, STREAM_ROWS_OTHER, read_records
from pipeline.reader import fleet_nodes
from pipeline.schema import RECORD_FIELDS

TABLES = ("features_audit", "upgrade_readiness", "broker_timeline", "errors")
REPORT_FILE = "report.html"
NODES_SCHEMA = "cluster string, node_id int, role string, release string"
# The columns the transforms read: fields_json and record_version are for people
# querying the records themselves, and fields_json (every field of every record as JSON)
# is by far the dearest column to produce.
JOB_COLUMNS = tuple(name for name in RECORD_FIELDS if name not in ("fields_json", "record_version"))
# The stream's columns the tables read (features_audit, broker_timeline, upgrade_readiness).
STREAM_COLUMNS = ("cluster", "cluster_id", "offset", "batch_timestamp_ms", "source", "record_type", "feature",
                  "broker")
# What the job reads in the source's stream mode: the stream's columns and what the
# errors table reads of the error rows.
STREAM_READ_COLUMNS = tuple(name for name in RECORD_FIELDS if name in {*STREAM_COLUMNS, "node_id", "file", "error"})
# Read partitions per core: enough that a slow partition does not leave a core idle at
# the end, few enough that the per-task cost (a Python worker's turn, planning) stays small.
PARTITIONS_PER_CORE = 3


def read_job_records(spark, fleet: str | Path):
    """The records DataFrame the job's tables are built from: only JOB_COLUMNS, and
    without the controllers' byte-identical copies of a file, which `dedupe` would drop
    and which can hold no error row their twin does not also report (the argument is
    pipeline/columnar.py's docstring). Every table of the job is the same as from the
    full records."""
    partitions = max(1, spark.sparkContext.defaultParallelism) * PARTITIONS_PER_CORE
    return read_records(spark, str(fleet), columns=JOB_COLUMNS, copies=COPIES_DISTINCT, partitions=partitions)

def read_job_stream(spark, fleet: str | Path):
    """The fleet as the job's tables need it: each cluster's record stream (the rows
    `transforms.dedupe` keeps, built by the data source per cluster,
    `.option("copies", "stream")`) plus every error row, STREAM_READ_COLUMNS only."""
    partitions = max(1, spark.sparkContext.defaultParallelism) * PARTITIONS_PER_CORE
    return read_records(spark, str(fleet), columns=STREAM_READ_COLUMNS, copies=COPIES_STREAM, partitions=partitions)


# The split read's columns: what the broker timeline reads of the broker rows, and what
# the other tables read of the other rows (broker is null in all of them).
BROKER_READ_COLUMNS = tuple(name for name in STREAM_COLUMNS if name != "feature")
OTHER_READ_COLUMNS = tuple(name for name in STREAM_READ_COLUMNS if name != "broker")


def read_job_split(spark, fleet: str | Path):
    """`read_job_stream` as two reads: (the rows the broker timeline is built from,
    every other row), `.option("streamRows", "broker" / "other")`."""
    partitions = max(1, spark.sparkContext.defaultParallelism) * PARTITIONS_PER_CORE
    return tuple(
        read_records(spark, str(fleet), columns=columns, copies=COPIES_STREAM, partitions=partitions,
                     stream_rows=kind)
        for kind, columns in ((STREAM_ROWS_BROKER, BROKER_READ_COLUMNS), (STREAM_ROWS_OTHER, OTHER_READ_COLUMNS))
    )


def cluster_records(records_df, partitions: int | None = None):
    """`records_df` hash-partitioned by cluster and sorted within each partition the way
    `transforms.dedupe` ranks a log offset's copies (cluster, offset, leader epoch
    descending, node id, file). Every table of the job groups by cluster at some grain
    (dedupe by (cluster, offset), the timeline by (cluster, broker), the aggregates by
    cluster), and a partitioning by cluster satisfies them all: this one shuffle and
    this one sort replace an exchange per window and aggregation and dedupe's sort.
    The rows are the same; only their placement changes. The job caches the result
    (dedupe scans it several times: log rows, snapshot rows, log starts, errors, and
    every scan of the Python data source starts Python workers)."""
    if partitions is None:
        partitions = int(records_df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return records_df.repartition(partitions, "cluster").sortWithinPartitions(*transforms.log_copy_order())


Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RunResult:
    out: Path
    tables: Mapping[str, Path]  # table name -> Parquet directory
    row_counts: Mapping[str, int]
    report: Path


def build_tables(records_df, nodes_df=None) -> dict:
    """The four output DataFrames (lazy) from a records DataFrame (pipeline/schema.py),
    plus "stream", the cached record stream they share, "records", the cached input
    (write_outputs releases both), "timeline", the broker timeline (the base of
    upgrade_readiness, not cached), and "readiness_over", which builds
    upgrade_readiness over a given timeline: write_outputs hands it the timeline it
    wrote, read back from Parquet, so the timeline is computed once and never cached."""
    records_df = cluster_records(records_df).cache()
    # Only the columns the tables read are cached (which controller's copy a record came
    # from, node_id / file / leader_epoch, matters to dedupe, not after it).
    stream = transforms.dedupe(records_df).select(*STREAM_COLUMNS).cache()
    return _tables(stream, records_df, nodes_df)


def build_stream_tables(rows_df, nodes_df=None) -> dict:
    """`build_tables` for the data source's stream mode (`read_job_stream`): the stream
    is its rows without an error, the errors table is built from the others. The rows
    are cached as read (every table scans them; a scan of the source decodes the files
    again); the timeline is not cached (see `build_tables`)."""
    rows_df = rows_df.cache()
    stream = rows_df.where(F.col("error").isNull()).select(*STREAM_COLUMNS)
    return _tables(stream, rows_df, nodes_df)


def build_split_tables(broker_rows_df, other_rows_df, nodes_df=None) -> dict:
    """The tables from `read_job_split`'s two reads. The timeline is built from the
    broker rows, which are not cached (the timeline is their only reader); the other
    rows are cached (three tables scan them). upgrade_readiness takes the timeline's
    per-broker summary in place of the broker rows its stream lacks; `readiness_over`
    caches that summary (a row per broker; two branches of the plan read it, so the
    timeline is scanned once) and lists it under "cached" for write_outputs to release."""
    other_rows_df = other_rows_df.cache()
    stream = other_rows_df.where(F.col("error").isNull()).select(
        *(name for name in STREAM_COLUMNS if name != "broker"))
    timeline = transforms.broker_timeline(broker_rows_df)
    cached = []

    def readiness_over(timeline_df):
        summary = transforms.broker_summary(timeline_df).cache()
        cached.append(summary)
        return transforms.upgrade_readiness(stream, nodes_df, summary=summary, stream_has_broker_rows=False)

    return {
        "features_audit": transforms.features_audit(stream),
        "upgrade_readiness": readiness_over(timeline),
        "broker_timeline": timeline,
        "errors": transforms.errors(other_rows_df),
        "stream": stream,
        "records": other_rows_df,
        "timeline": timeline,
        "readiness_over": readiness_over,
        "cached": cached,
    }


def _tables(stream, records_df, nodes_df) -> dict:
    """The tables (and the frames they come from) over one record stream; the errors
    table from `records_df`, every row read."""
    timeline = transforms.broker_timeline(stream)

    def readiness_over(timeline_df):
        return transforms.upgrade_readiness(stream, nodes_df, timeline_df)

    return {
        "features_audit": transforms.features_audit(stream),
        "upgrade_readiness": readiness_over(timeline),
        "broker_timeline": timeline,
        "errors": transforms.errors(records_df),
        "stream": stream,
        "records": records_df,
        "timeline": timeline,
        "readiness_over": readiness_over,
    }


# The order the tables are written in: the timeline before upgrade_readiness, which
# `readiness_over` builds over the timeline's Parquet files.
WRITE_ORDER = ("broker_timeline", "features_audit", "upgrade_readiness", "errors")


def write_outputs(spark, tables: Mapping, out: Path, progress: Progress = print, fleet: str | None = None) -> RunResult:
    """Writes each table as Parquet under `out`, then the report; returns paths and row
    counts (read back from the Parquet files, so nothing is computed twice)."""
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name in WRITE_ORDER:
        path = out / name
        progress(f"pipeline: writing {name} -> {path}")
        table = tables[name]
        if name == "upgrade_readiness" and "readiness_over" in tables:
            # The timeline as written (Parquet keeps its columns' types): reading a few of
            # its columns back costs less than caching all of it or computing it again.
            table = tables["readiness_over"](spark.read.parquet(str(paths["broker_timeline"])))
        writer = table.write.mode("overwrite")
        if name == "broker_timeline":
            # A row per broker event: dictionary pages cost more to build for its
            # near-unique columns (offsets, timestamps, epochs) than they save.
            writer = writer.option("parquet.enable.dictionary", "false")
        writer.parquet(str(path))
        paths[name] = path
    for cached in ("stream", "records"):
        if cached in tables:
            tables[cached].unpersist()
    for frame in tables.get("cached", ()):
        frame.unpersist()

    # The small tables as Spark's collect() gives them, read with pyarrow: a Spark job
    # each would cost more (planning, code generation) than reading a few rows.
    collected = {name: collect_parquet(paths[name]) for name in ("upgrade_readiness", "features_audit", "errors")}
    counts = {name: len(rows) for name, rows in collected.items()}
    counts["broker_timeline"] = pyarrow.dataset.dataset(str(paths["broker_timeline"]), format="parquet").count_rows()

    report_path = report.write_report(
        out / REPORT_FILE,
        collected["upgrade_readiness"],
        collected["features_audit"],
        collected["errors"],
        fleet=fleet,
    )
    progress(f"pipeline: report -> {report_path}")
    progress("pipeline: rows " + ", ".join(f"{name}={counts[name]}" for name in TABLES))
    return RunResult(out=out, tables=paths, row_counts={name: counts[name] for name in TABLES}, report=report_path)


_TIMESTAMP_UNITS_PER_MICRO = {"us": 1, "ns": 1000}


def _has_nested_timestamp(kind: pyarrow.DataType) -> bool:
    if pyarrow.types.is_timestamp(kind):
        return True
    return any(_has_nested_timestamp(kind.field(i).type) for i in range(kind.num_fields))


def _spark_timestamp(micros: int | None):
    # pyspark's TimestampType.fromInternal: a naive datetime in the process's local time.
    if micros is None:
        return None
    return datetime.fromtimestamp(micros // 1000000).replace(microsecond=micros % 1000000)


def collect_parquet(path: Path) -> list[dict]:
    """The rows of a Parquet table Spark wrote, as `[row.asDict(recursive=True) for row
    in spark.read.parquet(path).collect()]` gives them (maps as dicts, structs as dicts,
    timestamps as naive local datetimes), in file order."""
    table = pyarrow.parquet.read_table(str(path))
    columns: dict[str, list] = {}
    for field in table.schema:
        kind = field.type
        if pyarrow.types.is_timestamp(kind) and kind.tz is None and kind.unit in _TIMESTAMP_UNITS_PER_MICRO:
            per_micro = _TIMESTAMP_UNITS_PER_MICRO[kind.unit]
            raw = table[field.name].cast(pyarrow.int64()).to_pylist()
            columns[field.name] = [None if v is None else _spark_timestamp(v // per_micro) for v in raw]
        elif _has_nested_timestamp(kind):
            raise ValueError(f"column {field.name!r} of {path}: a timestamp of type {kind} is not read here")
        else:
            columns[field.name] = table[field.name].to_pylist(maps_as_pydicts="strict")
    names = table.column_names
    return [dict(zip(names, values)) for values in zip(*(columns[name] for name in names))]


SHUFFLE_PARTITIONS = 8
# The JVM's heap when this process starts it (local mode: the driver is the executor).
# The job caches the records, the stream and the timeline; Spark's default of 1g spills
# a fleet of millions of records to disk. Ignored when a JVM is running already.
DRIVER_MEMORY = "3g"


# Class data sharing: the JVM maps the classes Spark loads at start-up from an archive
# instead of reading, parsing and verifying them from the jars again (seconds of every
# run's start-up on this machine). The archive is specific to the JVM and the jars, so
# its name carries a key of both; a run without one writes it when its JVM exits. The
# JVM checks an archive against its own class path and ignores one that does not fit;
# it cannot start from a damaged one, so an archive is only ever a complete dump,
# renamed into place, and a failed start with one removes it and starts without.
CLASS_ARCHIVE_ENV = "KRAFTWERK_SPARK_CLASS_ARCHIVE"  # a file path, or "off"
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_JVM_EXIT_TIMEOUT_S = 120.0


def class_archive_path() -> Path | None:
    """Where this JVM and these Spark jars keep their class archive (under the user's
    cache directory), the path in KRAFTWERK_SPARK_CLASS_ARCHIVE, or None when that
    says "off"."""
    setting = os.environ.get(CLASS_ARCHIVE_ENV)
    if setting is not None:
        return None if setting.strip().lower() in ("", "0", "off", "false", "no") else Path(setting)
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    jars = Path(pyspark.__file__).parent / "jars"
    names = sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
    key = hashlib.sha256("\n".join([pyspark.__version__, str(java.resolve()), *names]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kraftwerk" / f"spark-classes-{key}.jsa"


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """How one run uses the class archive: `java_options` for its JVM, and `dump`, the
    temporary file its JVM writes at exit when there is no archive yet."""
    path: Path
    java_options: str
    dump: Path | None


def plan_class_archive(path: Path | None) -> ClassArchive | None:
    if path is None:
        return None
    if path.is_file():
        return ClassArchive(path, f"-XX:SharedArchiveFile={path} {_QUIET_CDS}", None)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    dump = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    return ClassArchive(path, f"-XX:ArchiveClassesAtExit={dump} {_QUIET_CDS}", dump)


def finish_class_archive(plan: ClassArchive, jvm) -> None:
    """After the session stopped: let the JVM exit (it exits when its stdin closes), so
    that it writes its dump, then move a complete dump into place."""
    try:
        if jvm is not None and jvm.poll() is None:
            jvm.stdin.close()
            jvm.wait(timeout=_JVM_EXIT_TIMEOUT_S)
        if jvm is not None and jvm.returncode == 0 and plan.dump.is_file() and plan.dump.stat().st_size > 0:
            os.replace(plan.dump, plan.path)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        plan.dump.unlink(missing_ok=True)


def _forget_gateway(gateway) -> None:
    """Drops pyspark's handle on an exited JVM so the next session launches a new one."""
    try:
        if gateway is not None:
            gateway.close()
    except Exception:  # the JVM is gone; its sockets may already be closed
        pass
    SparkContext._gateway = None
    SparkContext._jvm = None


def spark_session(master: str, app_name: str = "kraftwerk-pipeline",
                  shuffle_partitions: int = SHUFFLE_PARTITIONS, driver_memory: str | None = DRIVER_MEMORY,
                  java_options: str = ""):
    """The session the pipeline runs in (also the benchmark's and the tests').
    `java_options`: the driver JVM's extra options (ignored when a JVM is running)."""
    # Python workers must run this interpreter (the venv), not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    session = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The aggregated tables are small (a row per cluster or per change): Spark's
        # default of 200 shuffle partitions would make hundreds of empty tasks per stage.
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # Spark sorts every partition before the shuffle of a "first row per key" window
        # to cut rows early; dedupe's keys are near unique (one row per offset once the
        # copies are skipped), so that is a second sort of every record for nothing.
        .config("spark.sql.optimizer.windowGroupLimitThreshold", "-1")
        # Shuffle files and spills stay on this machine's disk (local mode): compressing
        # them costs more CPU than the bytes it saves.
        # Static plans: the cached records keep the partitioning and order they were built
        # with (see `cluster_records`), so the windows and aggregations over them need no
        # exchange or sort of their own; adaptive execution plans each stage over a cached
        # table without knowing its partitioning and re-shuffles it. The tables are small
        # apart from the timeline, so it has little else to win here.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.shuffle.compress", "false")
        .config("spark.shuffle.spill.compress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _nodes_df(spark, fleet: Path, progress: Progress):
    """The controllers' releases from the fleet directory (pipeline/reader.py), or None
    when no node says what it runs."""
    rows = [(n.cluster, int(n.node_id), n.role, n.release) for n in fleet_nodes(fleet)]
    progress(f"pipeline: {len(rows)} nodes in the fleet")
    if not rows:
        return None
    return spark.createDataFrame(rows, NODES_SCHEMA)


def run(fleet: Path, out: Path, master: str = "local[*]", progress: Progress = print, spark=None) -> RunResult:
    """Reads every node of `fleet` (`<fleet>/<cluster>/<node>/...`) and writes the tables
    and report under `out`. Uses `spark` when given (and leaves it running), else starts
    a session on `master` and stops it afterwards."""
    fleet, out = Path(fleet), Path(out)
    own_session = spark is None
    archive = None
    if own_session:
        progress(f"pipeline: starting Spark ({master})")
        # Only a JVM this run starts can be told to use or write the archive (and be
        # made to exit for the dump).
        if SparkContext._gateway is None:
            archive = plan_class_archive(class_archive_path())
        try:
            spark = spark_session(master, java_options=archive.java_options if archive else "")
        except Exception:
            if archive is None:
                raise
            # A JVM that cannot use the archive does not start: drop it, start without.
            progress(f"pipeline: Spark did not start with the class archive {archive.path}; removing it")
            archive.path.unlink(missing_ok=True)
            archive = None
            spark = spark_session(master)
    try:
        progress(f"pipeline: reading {fleet}")
        broker_rows, other_rows = read_job_split(spark, fleet)
        nodes = _nodes_df(spark, fleet, progress)
        tables = build_split_tables(broker_rows, other_rows, nodes)
        return write_outputs(spark, tables, out, progress, fleet=str(fleet))
    finally:
        if own_session:
            jvm = getattr(spark.sparkContext._gateway, "proc", None)
            spark.stop()
            if archive is not None and archive.dump is not None:
                progress(f"pipeline: writing the class archive {archive.path} (once)")
                gateway = SparkContext._gateway
                finish_class_archive(archive, jvm)
                if jvm is not None and jvm.poll() is not None:
                    # pyspark keeps the gateway of the JVM that just exited: without
                    # this, a later session in this process would call into it.
                    _forget_gateway(gateway)


def run_command(fleet: str | Path, out: str | Path, master: str = "local[*]") -> int:
    """`kraftwerk pipeline run`: exit status 0 on success, 1 when the fleet is missing."""
    fleet = Path(fleet)
    if not fleet.is_dir():
        print(f"pipeline: fleet directory {fleet} does not exist", file=sys.stderr)
        return 1
    result = run(fleet, Path(out), master)
    print(f"pipeline: done: {result.report}")
    return 0
