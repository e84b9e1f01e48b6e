"""The `kraftwerk` Spark data source: a fleet's metadata logs as a DataFrame.

Owns: `KraftwerkDataSource` (Spark's Python Data Source API), `register` and
`read_records`. Usage:

    register(spark)
    df = spark.read.format("kraftwerk").load("/path/to/fleet")

Rules kept here:
- The only module of the pipeline that imports pyspark; the reading itself is
  `pipeline.reader.read_file`, so Spark and the plain-Python baseline give the
  same rows by construction.
- Work splits by file (segment or snapshot), never inside one, and the copies of a
  file held by a cluster's controllers (same cluster, same name) stay in one task, so
  that `.option("copies", "distinct")` can compare them (pipeline/columnar.py says
  why skipping byte-identical copies leaves every answer as it was; the default,
  "all", gives every row of every file). `.option("copies", "stream")` reads a whole
  cluster in one task and gives its record stream, the rows `transforms.dedupe` keeps
  (pipeline/stream.py builds them in Arrow), plus every error row (read the `error`
  column to tell them apart): the per-cluster work done where the rows are decoded,
  so Spark neither shuffles nor sorts every record to find them. In that mode
  `.option("streamRows", "broker")` gives only the stream rows the broker timeline is
  built from (pipeline/stream.py `broker_rows`) and `"other"` every other row (the
  rest of the stream and the error rows; default `"all"`): a job that reads the fleet
  twice, once per kind, needs no cache of every row. Small files are
  packed into partitions of up to `maxPartitionBytes` (option, default 32 MiB; each file also counts
  `openCostInBytes`, default 1 MiB), as Spark packs small files for its own file
  sources, because every task has a fixed cost (~0.4 s here: a Python worker, imports,
  planning); with `numPartitions` the groups are instead spread over that many
  partitions of about equal size (largest first onto the least loaded), which is what
  keeps every core busy to the end. A corrupt file costs only its own rows, never the
  job (the reader turns bad bytes into error rows).
- Column pruning: a schema given with `.schema(...)` (a subset of RECORD_SCHEMA's
  columns, same types) is the set of columns read; the job leaves out what no
  transform reads (`fields_json`, `record_version`). Without `fields_json` the
  compiled decoder (pipeline/_columnar.c) does the reading when it is built.
- The file list is taken once, on the driver, when the reader is planned; the
  partitions carry plain `FleetFile` values, so executors need only the path
  to be visible (a local or shared file system).
- Rows reach Spark as `pyarrow.RecordBatch`es of about `arrowBatchRows` rows (option,
  default 8192) in the Arrow schema Spark derives from `RECORD_SCHEMA`, built by
  pipeline/columnar.py without a Python object per row: yielding Python tuples makes
  PySpark convert and type-check every value of every row in Python.
  `.option("arrow", "false")` keeps the tuple path, so the two can be compared; both
  carry the very rows `read_file` yields.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from itertools import chain

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import columnar, stream
from pipeline.reader import FleetFile, fleet_files
from pipeline.schema import RECORD_FIELDS, RECORD_SCHEMA

FORMAT_NAME = "kraftwerk"


DEFAULT_MAX_PARTITION_BYTES = 32 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 1024 * 1024
DEFAULT_ARROW_BATCH_ROWS = 8192


COPIES_ALL = "all"
COPIES_DISTINCT = "distinct"
COPIES_STREAM = "stream"
COPIES = (COPIES_ALL, COPIES_DISTINCT, COPIES_STREAM)

STREAM_ROWS_ALL = "all"
STREAM_ROWS_BROKER = "broker"
STREAM_ROWS_OTHER = "other"
STREAM_ROWS = (STREAM_ROWS_ALL, STREAM_ROWS_BROKER, STREAM_ROWS_OTHER)


class FleetFilesPartition(InputPartition):
    """Whole files of the fleet, as groups of copies (pipeline.columnar.copy_groups):
    the unit of work of one Spark task."""

    def __init__(self, groups: tuple[tuple[FleetFile, ...], ...]) -> None:
        super().__init__(groups)
        self.groups = groups

    @property
    def fleet_files(self) -> tuple[FleetFile, ...]:
        return tuple(f for group in self.groups for f in group)


def _file_size(f: FleetFile) -> int:
    try:
        return os.path.getsize(f.path)
    except OSError:
        return 0  # the reader reports it as an error row


def spread_groups(groups: list[tuple[FleetFile, ...]], partitions: int, open_cost_bytes: int
                  ) -> list[tuple[tuple[FleetFile, ...], ...]]:
    """`groups` over at most `partitions` partitions of about equal size (size + open cost
    per file): largest group first onto the least loaded partition. Each partition's
    groups keep the fleet's order; empty partitions are left out."""
    loads = [0] * max(partitions, 1)
    members: list[list[int]] = [[] for _ in loads]
    weights = [sum(_file_size(f) + open_cost_bytes for f in group) for group in groups]
    for index in sorted(range(len(groups)), key=lambda i: (-weights[i], i)):
        target = min(range(len(loads)), key=lambda p: (loads[p], p))
        loads[target] += weights[index]
        members[target].append(index)
    return [tuple(groups[i] for i in sorted(m)) for m in members if m]


def pack_groups(groups: list[tuple[FleetFile, ...]], max_bytes: int, open_cost_bytes: int
                ) -> list[tuple[tuple[FleetFile, ...], ...]]:
    """Consecutive groups (copies of one file) packed so that each partition's size (plus
    an open cost per file) stays within `max_bytes`; a group is never split, and one
    larger than that is a partition of its own."""
    out: list[tuple[tuple[FleetFile, ...], ...]] = []
    current: list[tuple[FleetFile, ...]] = []
    current_bytes = 0
    for group in groups:
        size = sum(_file_size(f) + open_cost_bytes for f in group)
        if current and current_bytes + size > max_bytes:
            out.append(tuple(current))
            current, current_bytes = [], 0
        current.append(group)
        current_bytes += size
    if current:
        out.append(tuple(current))
    return out


class ClustersPartition(InputPartition):
    """Whole clusters (every file of each), the unit of work of one Spark task in
    `copies="stream"` mode."""

    def __init__(self, clusters: tuple[tuple[FleetFile, ...], ...]) -> None:
        super().__init__(clusters)
        self.clusters = clusters


def cluster_groups(files: Iterable[FleetFile]) -> list[tuple[FleetFile, ...]]:
    """`files` by cluster, in the fleet's order."""
    clusters: dict[str, list[FleetFile]] = {}
    for f in files:
        clusters.setdefault(f.cluster, []).append(f)
    return [tuple(group) for group in clusters.values()]


class KraftwerkReader(DataSourceReader):
    def __init__(self, path: str, max_partition_bytes: int, open_cost_bytes: int, schema: StructType,
                 arrow_batch_rows: int | None, copies: str = COPIES_ALL, partitions: int | None = None,
                 stream_rows: str = STREAM_ROWS_ALL) -> None:
        self.path = path
        self.max_partition_bytes = max_partition_bytes
        self.open_cost_bytes = open_cost_bytes
        self.schema = schema
        self.columns = tuple(schema.fieldNames())
        self.arrow_batch_rows = arrow_batch_rows  # None: yield tuples
        self.copies = copies
        self.partitions_wanted = partitions
        self.stream_rows = stream_rows

    def partitions(self) -> list[InputPartition]:
        files = fleet_files(self.path)
        if self.copies == COPIES_STREAM:
            # A cluster is never split: its stream is decided over all of its files.
            clusters = cluster_groups(files)
            wanted = self.partitions_wanted
            if wanted is None:
                planned = pack_groups(clusters, self.max_partition_bytes, self.open_cost_bytes)
            else:
                planned = spread_groups(clusters, wanted, self.open_cost_bytes)
            return [ClustersPartition(part) for part in planned] or [InputPartition(None)]
        # Copies are kept together only when they are to be compared; otherwise every
        # file is its own group and the rows come in the reader's file order.
        groups = columnar.copy_groups(files) if self.copies == COPIES_DISTINCT else [(f,) for f in files]
        if self.partitions_wanted is not None:
            planned = spread_groups(groups, self.partitions_wanted, self.open_cost_bytes)
        else:
            planned = pack_groups(groups, self.max_partition_bytes, self.open_cost_bytes)
        # Spark needs at least one partition; an empty fleet gives an empty one.
        return [FleetFilesPartition(part) for part in planned] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator:
        if self.copies == COPIES_STREAM:
            return self._read_streams(getattr(partition, "clusters", None) or ())
        groups = getattr(partition, "groups", None) or ()
        distinct = self.copies == COPIES_DISTINCT
        if self.arrow_batch_rows is None:
            indexes = [RECORD_FIELDS.index(name) for name in self.columns]
            rows = chain.from_iterable(columnar.group_rows(group, distinct) for group in groups)
            return (tuple(row[i] for i in indexes) for row in rows)
        batches = chain.from_iterable(columnar.group_batches(group, self.columns, distinct) for group in groups)
        return columnar.rebatch(batches, self.arrow_batch_rows)

    def _read_streams(self, clusters: tuple[tuple[FleetFile, ...], ...]) -> Iterator:
        # The choice reads NEEDED_COLUMNS whatever the query asked for (and the split of
        # the rows by kind the broker column); byte-identical copies are skipped (they
        # cannot change the stream, pipeline/columnar.py).
        split = self.stream_rows != STREAM_ROWS_ALL
        wanted = set(self.columns) | set(stream.NEEDED_COLUMNS) | ({"broker"} if split else set())
        read_columns = tuple(name for name in RECORD_FIELDS if name in wanted)
        schema = columnar.schema_for(read_columns)
        kept_columns = read_columns if split else self.columns
        for files in clusters:
            batches = [b for group in columnar.copy_groups(files)
                       for b in columnar.group_batches(group, read_columns, distinct=True)]
            rows = stream.cluster_stream(pa.Table.from_batches(batches, schema), kept_columns)
            if split:
                is_broker = stream.broker_rows(rows)
                rows = rows.filter(is_broker if self.stream_rows == STREAM_ROWS_BROKER else pc.invert(is_broker))
                rows = rows.select(list(self.columns))
            yield from columnar.rebatch(rows.to_batches(), self.arrow_batch_rows)


class KraftwerkDataSource(DataSource):
    """`spark.read.format("kraftwerk").load(path)`: one row per metadata record
    (pipeline/schema.py), from every segment and snapshot under `path`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        path = self.options.get("path")
        if not path:
            raise ValueError("the kraftwerk data source needs a path: spark.read.format('kraftwerk').load(path)")
        max_bytes = int(self.options.get("maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES))
        open_cost = int(self.options.get("openCostInBytes", DEFAULT_OPEN_COST_BYTES))
        if max_bytes <= 0 or open_cost < 0:
            raise ValueError("maxPartitionBytes must be positive and openCostInBytes not negative")
        arrow = str(self.options.get("arrow", "true")).strip().lower()
        if arrow not in ("true", "false"):
            raise ValueError(f"the arrow option is 'true' or 'false', not {arrow!r}")
        batch_rows = int(self.options.get("arrowBatchRows", DEFAULT_ARROW_BATCH_ROWS))
        if batch_rows <= 0:
            raise ValueError("arrowBatchRows must be positive")
        copies = str(self.options.get("copies", COPIES_ALL)).strip().lower()
        if copies not in COPIES:
            raise ValueError(f"the copies option is one of {', '.join(map(repr, COPIES))}, not {copies!r}")
        if copies == COPIES_STREAM and arrow != "true":
            raise ValueError("copies='stream' builds Arrow batches: it cannot be read with arrow='false'")
        stream_rows = str(self.options.get("streamRows", STREAM_ROWS_ALL)).strip().lower()
        if stream_rows not in STREAM_ROWS:
            raise ValueError(f"the streamRows option is one of {', '.join(map(repr, STREAM_ROWS))}, not {stream_rows!r}")
        if stream_rows != STREAM_ROWS_ALL and copies != COPIES_STREAM:
            raise ValueError("the streamRows option splits the record stream: it needs copies='stream'")
        partitions = self.options.get("numPartitions")
        if partitions is not None:
            partitions = int(partitions)
            if partitions <= 0:
                raise ValueError("numPartitions must be positive")
        _check_columns(schema)
        return KraftwerkReader(path, max_bytes, open_cost, schema, batch_rows if arrow == "true" else None,
                               copies, partitions, stream_rows)


def _check_columns(schema: StructType) -> None:
    """A schema given to the reader must be some of RECORD_SCHEMA's columns, same types."""
    full = {f.name: f.dataType for f in _record_struct().fields}
    for f in schema.fields:
        if f.name not in full:
            raise ValueError(f"the kraftwerk data source has no column {f.name!r} (columns: {', '.join(full)})")
        if f.dataType != full[f.name]:
            raise ValueError(f"column {f.name!r} is {full[f.name].simpleString()}, not {f.dataType.simpleString()}")


def record_schema(columns: Iterable[str]) -> StructType:
    """RECORD_SCHEMA's struct type narrowed to `columns` (in RECORD_FIELDS order)."""
    wanted = set(columns)
    return StructType([f for f in _record_struct().fields if f.name in wanted])


def _record_struct() -> StructType:
    # RECORD_SCHEMA as a StructType without a SparkContext (a reader's worker has none):
    # from the Arrow schema, which tests/pipeline_source checks against RECORD_SCHEMA.
    return from_arrow_schema(columnar.ARROW_SCHEMA)


def register(spark: SparkSession) -> None:
    """Makes `format("kraftwerk")` available in `spark` (idempotent)."""
    spark.dataSource.register(KraftwerkDataSource)


def read_records(spark: SparkSession, path: str, max_partition_bytes: int | None = None,
                 arrow: bool = True, columns: Iterable[str] | None = None, copies: str | None = None,
                 partitions: int | None = None, stream_rows: str | None = None) -> DataFrame:
    """`spark.read.format("kraftwerk").load(path)` with the options spelled as arguments:
    `columns` (a subset of RECORD_FIELDS; None = all), `copies` ("all", "distinct" or "stream"),
    `partitions` (numPartitions), `stream_rows` (streamRows: "all", "broker" or "other")."""
    register(spark)
    reader = spark.read.format(FORMAT_NAME)
    if columns is not None:
        reader = reader.schema(record_schema(columns))
    if max_partition_bytes is not None:
        reader = reader.option("maxPartitionBytes", str(max_partition_bytes))
    if not arrow:
        reader = reader.option("arrow", "false")
    if copies is not None:
        reader = reader.option("copies", copies)
    if partitions is not None:
        reader = reader.option("numPartitions", str(partitions))
    if stream_rows is not None:
        reader = reader.option("streamRows", stream_rows)
    return reader.load(str(path))
