"""The `kraftwerk` Spark data source against the plain-Python reader: same
rows, one partition per file. Shares one Spark session (conftest `spark`)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import StructType  # noqa: E402

from pipeline.datasource import KraftwerkDataSource, read_records, register  # noqa: E402
from pipeline.reader import fleet_files, read_fleet  # noqa: E402
from pipeline.schema import RECORD_FIELDS, RECORD_SCHEMA  # noqa: E402


def as_plain(value):
    """A Spark value as the reader yields it (Rows -> tuples, recursively)."""
    if isinstance(value, tuple):  # Row is a tuple subclass
        return tuple(as_plain(item) for item in value)
    if isinstance(value, list):
        return [as_plain(item) for item in value]
    return value


def sort_key(row):
    return (row[4], row[5] if row[5] is not None else -2, repr(row))


def test_the_source_declares_the_record_schema():
    assert KraftwerkDataSource.name() == "kraftwerk"
    assert KraftwerkDataSource({}).schema() == RECORD_SCHEMA


def test_spark_rows_equal_the_plain_python_rows_for_a_two_cluster_fleet(spark, fleet):
    df = read_records(spark, str(fleet))
    assert tuple(df.columns) == RECORD_FIELDS
    assert df.schema == StructType.fromDDL(RECORD_SCHEMA)
    spark_rows = sorted((as_plain(row) for row in df.collect()), key=sort_key)
    python_rows = sorted(read_fleet(fleet), key=sort_key)
    assert spark_rows == python_rows
    assert {row[0] for row in spark_rows} == {"east", "west"}


def test_work_splits_by_whole_files_packed_up_to_a_byte_bound(spark, fleet):
    register(spark)
    files = fleet_files(fleet)
    assert len(files) == 4
    # Small files share a partition (every task has a fixed cost) ...
    assert spark.read.format("kraftwerk").load(str(fleet)).rdd.getNumPartitions() == 1
    # ... and with a bound below any one file's size, each file is a partition of its own.
    one_each = spark.read.format("kraftwerk").option("maxPartitionBytes", "1").load(str(fleet))
    assert one_each.rdd.getNumPartitions() == 4
    assert sorted(one_each.collect()) == sorted(read_records(spark, str(fleet)).collect())


def test_pack_groups_keeps_whole_groups_in_order(tmp_path):
    from pipeline.datasource import pack_groups
    from pipeline.reader import FleetFile

    groups = []
    for index, size in enumerate((10, 30, 25, 70, 5)):
        path = tmp_path / f"{index}.log"
        path.write_bytes(b"x" * size)
        groups.append((FleetFile("c", None, 1, "log", str(path), path.name),))
    # Two copies of one file stay together even past the bound.
    copies = []
    for node in (1, 2):
        path = tmp_path / f"copy-{node}.log"
        path.write_bytes(b"x" * 20)
        copies.append(FleetFile("c", None, node, "log", str(path), path.name))
    groups.insert(1, tuple(copies))
    partitions = pack_groups(groups, max_bytes=50, open_cost_bytes=2)
    assert [[[f.relative_path for f in group] for group in partition] for partition in partitions] == [
        [["0.log"]], [["copy-1.log", "copy-2.log"]], [["1.log"]], [["2.log"]], [["3.log"]], [["4.log"]]]


def test_nested_columns_are_queryable(spark, fleet):
    df = read_records(spark, str(fleet))
    brokers = df.where("broker is not null and record_type = 'RegisterBrokerRecord'").select(
        "cluster", "node_id", "broker.broker_id", "broker.mv_min", "broker.mv_max", "broker.log_dirs")
    rows = sorted(tuple(row) for row in brokers.collect())
    # RegisterBrokerRecord of broker 4 in the logs of east/1, east/2; broker 7 in east/1's snapshot.
    assert [row[:5] for row in rows] == [("east", 1, 4, 7, 22), ("east", 1, 7, 7, 22), ("east", 2, 4, 7, 22)]
    levels = df.where("feature.name = 'metadata.version'").groupBy("cluster").count()
    assert dict((row["cluster"], row["count"]) for row in levels.collect()) == {"east": 3, "west": 1}


def test_corrupt_files_show_up_as_error_rows_not_failed_jobs(spark, fleet):
    (target,) = [f for f in fleet_files(fleet) if f.relative_path.startswith("west/")]
    with open(target.path, "r+b") as file:
        file.seek(100)
        byte = file.read(1)
        file.seek(100)
        file.write(bytes([byte[0] ^ 0xFF]))
    df = read_records(spark, str(fleet))
    errors = df.where("error is not null").collect()
    assert len(errors) == 1 and errors[0]["cluster"] == "west"
    assert sorted((as_plain(r) for r in df.collect()), key=sort_key) == sorted(read_fleet(fleet), key=sort_key)


def test_an_empty_fleet_reads_as_an_empty_frame(spark, tmp_path):
    assert read_records(spark, str(tmp_path)).count() == 0
