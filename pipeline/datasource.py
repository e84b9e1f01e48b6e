"""The `kraftwerk` Spark data source: a fleet's metadata logs as a DataFrame.

Owns: `KraftwerkDataSource` (Spark's Python Data Source API), `register` and
`read_records`. Usage:

    register(spark)
    df = spark.read.format("kraftwerk").load("/path/to/fleet")

Rules kept here:
- The only module of the pipeline that imports pyspark; the reading itself is
  `pipeline.reader.read_file`, so Spark and the plain-Python baseline give the
  same rows by construction.
- One input partition per file (segment or snapshot): work splits by file, and
  a corrupt file costs only its own task's rows, never the job (the reader
  turns bad bytes into error rows instead of raising).
- The file list is taken once, on the driver, when the reader is planned; the
  partitions carry plain `FleetFile` values, so executors need only the path
  to be visible (a local or shared file system).
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.reader import FleetFile, fleet_files, read_file
from pipeline.schema import RECORD_SCHEMA

FORMAT_NAME = "kraftwerk"


class FleetFilePartition(InputPartition):
    """One file of the fleet: the unit of work of one Spark task."""

    def __init__(self, fleet_file: FleetFile) -> None:
        super().__init__(fleet_file)
        self.fleet_file = fleet_file


class KraftwerkReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        files = fleet_files(self.path)
        # Spark needs at least one partition; an empty fleet gives an empty one.
        return [FleetFilePartition(f) for f in files] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        fleet_file = getattr(partition, "fleet_file", None)
        if fleet_file is None:
            return iter(())
        return read_file(fleet_file)


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
        return KraftwerkReader(path)


def register(spark: SparkSession) -> None:
    """Makes `format("kraftwerk")` available in `spark` (idempotent)."""
    spark.dataSource.register(KraftwerkDataSource)


def read_records(spark: SparkSession, path: str) -> DataFrame:
    register(spark)
    return spark.read.format(FORMAT_NAME).load(str(path))
