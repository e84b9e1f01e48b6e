"""The `kraftwerk` Spark data source: a fleet's metadata logs as a DataFrame.

Owns: `KraftwerkDataSource` (Spark's Python Data Source API), `register` and
`read_records`. Usage:

    register(spark)
    df = spark.read.format("kraftwerk").load("/path/to/fleet")

Rules kept here:
- The only module of the pipeline that imports pyspark; the reading itself is
  `pipeline.reader.read_file`, so Spark and the plain-Python baseline give the
  same rows by construction.
- Work splits by file (segment or snapshot), never inside one: small files are
  packed into partitions of up to `maxPartitionBytes` (option, default 32 MiB;
  each file also counts `openCostInBytes`, default 1 MiB), as Spark packs small
  files for its own file sources, because every task has a fixed cost (~0.4 s
  here: a Python worker, imports, planning). A corrupt file costs only its own
  rows, never the job (the reader turns bad bytes into error rows).
- The file list is taken once, on the driver, when the reader is planned; the
  partitions carry plain `FleetFile` values, so executors need only the path
  to be visible (a local or shared file system).
- Rows reach Spark as `pyarrow.RecordBatch`es of up to `arrowBatchRows` rows (option,
  default 8192) in the Arrow schema Spark derives from `RECORD_SCHEMA`: yielding
  Python tuples makes PySpark convert and type-check every value of every row in
  Python (most of a task's time). `.option("arrow", "false")` keeps the tuple path,
  so the two can be compared; both carry the very rows `read_file` yields.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from itertools import chain, islice

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.reader import FleetFile, fleet_files, read_file
from pipeline.schema import RECORD_SCHEMA

FORMAT_NAME = "kraftwerk"


DEFAULT_MAX_PARTITION_BYTES = 32 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 1024 * 1024
DEFAULT_ARROW_BATCH_ROWS = 8192


class FleetFilesPartition(InputPartition):
    """Whole files of the fleet: the unit of work of one Spark task."""

    def __init__(self, fleet_files: tuple[FleetFile, ...]) -> None:
        super().__init__(fleet_files)
        self.fleet_files = fleet_files


def pack_files(files: list[FleetFile], max_bytes: int, open_cost_bytes: int) -> list[tuple[FleetFile, ...]]:
    """Consecutive files grouped so that each group's size (plus an open cost per file)
    stays within `max_bytes`; a file larger than that is a group of its own."""
    groups: list[tuple[FleetFile, ...]] = []
    current: list[FleetFile] = []
    current_bytes = 0
    for f in files:
        try:
            size = os.path.getsize(f.path) + open_cost_bytes
        except OSError:
            size = open_cost_bytes  # the reader reports it as an error row
        if current and current_bytes + size > max_bytes:
            groups.append(tuple(current))
            current, current_bytes = [], 0
        current.append(f)
        current_bytes += size
    if current:
        groups.append(tuple(current))
    return groups


def arrow_batches(rows: Iterable[tuple], schema: StructType, batch_rows: int) -> Iterator:
    """`rows` (tuples in `schema`'s column order) as `pyarrow.RecordBatch`es of up to
    `batch_rows` rows, typed exactly as Spark's own Arrow conversion of `schema`
    types them (pyspark's `to_arrow_schema`, as its Python data source runner
    calls it): Spark checks only the column names of a batch a reader yields."""
    # deferred import: pyarrow (~0.1 s) is needed only in the Spark workers that read;
    # the driver, which imports this module to register the data source, never loads it.
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    types = [f.type for f in arrow_schema]
    rows = iter(rows)
    # Bounded: every round takes at least one row from `rows` or ends.
    while True:
        chunk = list(islice(rows, batch_rows))
        if not chunk:
            return
        # zip(*chunk) turns the rows into columns in C; pyarrow then converts each
        # column (the struct columns from their tuples) in C as well.
        columns = zip(*chunk)
        arrays = [pa.array(column, type=arrow_type) for column, arrow_type in zip(columns, types)]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


class KraftwerkReader(DataSourceReader):
    def __init__(self, path: str, max_partition_bytes: int, open_cost_bytes: int, schema: StructType,
                 arrow_batch_rows: int | None) -> None:
        self.path = path
        self.max_partition_bytes = max_partition_bytes
        self.open_cost_bytes = open_cost_bytes
        self.schema = schema
        self.arrow_batch_rows = arrow_batch_rows  # None: yield tuples

    def partitions(self) -> list[InputPartition]:
        groups = pack_files(fleet_files(self.path), self.max_partition_bytes, self.open_cost_bytes)
        # Spark needs at least one partition; an empty fleet gives an empty one.
        return [FleetFilesPartition(group) for group in groups] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator:
        files = getattr(partition, "fleet_files", None) or ()
        rows = chain.from_iterable(read_file(fleet_file) for fleet_file in files)
        if self.arrow_batch_rows is None:
            return rows
        return arrow_batches(rows, self.schema, self.arrow_batch_rows)


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
        return KraftwerkReader(path, max_bytes, open_cost, schema, batch_rows if arrow == "true" else None)


def register(spark: SparkSession) -> None:
    """Makes `format("kraftwerk")` available in `spark` (idempotent)."""
    spark.dataSource.register(KraftwerkDataSource)


def read_records(spark: SparkSession, path: str, max_partition_bytes: int | None = None,
                 arrow: bool = True) -> DataFrame:
    register(spark)
    reader = spark.read.format(FORMAT_NAME)
    if max_partition_bytes is not None:
        reader = reader.option("maxPartitionBytes", str(max_partition_bytes))
    if not arrow:
        reader = reader.option("arrow", "false")
    return reader.load(str(path))
