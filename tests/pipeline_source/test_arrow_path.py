"""The data source's two ways of handing rows to Spark — Arrow record batches (the
default) and Python tuples (`.option("arrow", "false")`) — give the same DataFrame,
on a fleet written by the fake-fleet generator (real controller code) with one
segment damaged. Shares one Spark session (conftest `spark`)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.types import StructType  # noqa: E402

from pipeline.columnar import rebatch, rows_to_batch  # noqa: E402
from pipeline.datasource import read_records, register  # noqa: E402
from pipeline.fake_fleet import FleetSpec, write_fleet  # noqa: E402
from pipeline.reader import SOURCE_LOG, fleet_files, read_fleet  # noqa: E402
from pipeline.schema import RECORD_FIELDS, RECORD_SCHEMA  # noqa: E402

# Small segments so that the fleet has many files and a partition holds several.
SPEC = FleetSpec(clusters=2, records_per_cluster=1500, seed=3, segment_bytes=16 * 1024)


def as_plain(value):
    """A Spark value as the reader yields it (Rows -> tuples, recursively)."""
    if isinstance(value, tuple):  # Row is a tuple subclass
        return tuple(as_plain(item) for item in value)
    if isinstance(value, list):
        return [as_plain(item) for item in value]
    return value


def damage(path: str, position: int) -> None:
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture(scope="module")
def damaged_fleet(tmp_path_factory):
    fleet = tmp_path_factory.mktemp("arrow") / "fleet"
    write_fleet(fleet, SPEC)
    segments = [f for f in fleet_files(fleet) if f.source == SOURCE_LOG]
    # A byte inside the second batch of one segment (a CRC error row), and the
    # length field of another's first batch (an error row found by resynchronising).
    damage(segments[1].path, 200)
    damage(segments[-1].path, 10)
    return fleet


def test_arrow_and_tuple_paths_give_the_same_dataframe_with_error_rows(spark, damaged_fleet):
    register(spark)
    python_rows = list(read_fleet(damaged_fleet))
    errors = [row for row in python_rows if row[RECORD_FIELDS.index("error")] is not None]
    assert len(errors) >= 2  # the damage shows up, so the error rows are compared too

    # A small batch size and a small partition bound: batches end inside files, files
    # share batches, and there are a few partitions (not one per file: tasks are slow).
    def load(**options):
        reader = spark.read.format("kraftwerk").option("maxPartitionBytes", str(320 * 1024))
        for key, value in {"openCostInBytes": "0", **options}.items():
            reader = reader.option(key, value)
        return reader.load(str(damaged_fleet))

    arrow_df = load(arrowBatchRows="100")
    tuple_df = load(arrow="false")
    assert 1 < arrow_df.rdd.getNumPartitions() <= 8
    assert arrow_df.schema == tuple_df.schema == StructType.fromDDL(RECORD_SCHEMA)

    # Same rows in the same order (partitions keep the file order), value for value.
    arrow_rows = [as_plain(row) for row in arrow_df.collect()]
    tuple_rows = [as_plain(row) for row in tuple_df.collect()]
    assert len(arrow_rows) == len(python_rows)
    assert arrow_rows == tuple_rows == python_rows
    # And Spark sees no difference either: nothing is in one but not the other.
    assert arrow_df.exceptAll(tuple_df).count() == 0
    assert tuple_df.exceptAll(arrow_df).count() == 0
    assert arrow_df.where("error is not null").count() == len(errors)


def test_the_default_read_is_the_arrow_path_with_the_same_rows(spark, damaged_fleet):
    default = [as_plain(row) for row in read_records(spark, str(damaged_fleet)).collect()]
    tuples = [as_plain(row) for row in read_records(spark, str(damaged_fleet), arrow=False).collect()]
    assert default == tuples


def test_the_python_paths_batches_split_rows_at_the_batch_size_and_keep_every_row(spark, damaged_fleet):
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = StructType.fromDDL(RECORD_SCHEMA)
    rows = list(read_fleet(damaged_fleet))
    batches = list(rebatch([rows_to_batch(rows, RECORD_FIELDS)], 1000))
    assert [b.num_rows for b in batches] == [1000] * (len(rows) // 1000) + [len(rows) % 1000]
    assert all(b.schema == to_arrow_schema(schema) for b in batches)
    # Row by row, the batches hold the reader's values (structs come back as dicts).
    back = [row for b in batches for row in b.to_pylist()]
    for original, converted in zip(rows, back, strict=True):
        as_tuple = tuple(
            tuple(value.values()) if isinstance(value, dict) else value
            for value in (converted[name] for name in RECORD_FIELDS))
        assert as_tuple == original
    assert list(back[0]) == list(RECORD_FIELDS)
    assert list(rebatch([rows_to_batch([], RECORD_FIELDS)], 1000)) == []


@pytest.mark.parametrize("option, value", [("arrow", "maybe"), ("arrowBatchRows", "0")])
def test_bad_arrow_options_are_refused(spark, damaged_fleet, option, value):
    register(spark)
    with pytest.raises(Exception, match=option):
        spark.read.format("kraftwerk").option(option, value).load(str(damaged_fleet)).count()
