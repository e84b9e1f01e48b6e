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
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.reader import FleetFile, fleet_files, read_file
from pipeline.schema import RECORD_SCHEMA

FORMAT_NAME = "kraftwerk"


DEFAULT_MAX_PARTITION_BYTES = 32 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 1024 * 1024


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


class KraftwerkReader(DataSourceReader):
    def __init__(self, path: str, max_partition_bytes: int, open_cost_bytes: int) -> None:
        self.path = path
        self.max_partition_bytes = max_partition_bytes
        self.open_cost_bytes = open_cost_bytes

    def partitions(self) -> list[InputPartition]:
        groups = pack_files(fleet_files(self.path), self.max_partition_bytes, self.open_cost_bytes)
        # Spark needs at least one partition; an empty fleet gives an empty one.
        return [FleetFilesPartition(group) for group in groups] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        for fleet_file in getattr(partition, "fleet_files", None) or ():
            yield from read_file(fleet_file)


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
        return KraftwerkReader(path, max_bytes, open_cost)


def register(spark: SparkSession) -> None:
    """Makes `format("kraftwerk")` available in `spark` (idempotent)."""
    spark.dataSource.register(KraftwerkDataSource)


def read_records(spark: SparkSession, path: str, max_partition_bytes: int | None = None) -> DataFrame:
    register(spark)
    reader = spark.read.format(FORMAT_NAME)
    if max_partition_bytes is not None:
        reader = reader.option("maxPartitionBytes", str(max_partition_bytes))
    return reader.load(str(path))
