"""pipeline/stream.py and the data source's `copies="stream"` mode: the rows built in
the source per cluster are exactly `transforms.dedupe`'s over Spark, plus every error
row, on hand-built records (stale copies, several snapshots, a cluster with no log),
on the reader's fleet (copies of different lengths) and on damaged fake fleets, for the
compiled and the pure-Python decoders alike."""

from __future__ import annotations

import random
import shutil

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from pipeline import columnar, stream, transforms  # noqa: E402
from pipeline.datasource import COPIES_STREAM, KraftwerkReader, cluster_groups, read_records, record_schema  # noqa: E402
from pipeline.fake_fleet import FleetSpec, write_fleet  # noqa: E402
from pipeline.reader import SOURCE_LOG, fleet_files  # noqa: E402
from pipeline.schema import RECORD_FIELDS, RECORD_SCHEMA  # noqa: E402
from pipeline_transforms.fleet import fleet_rows  # noqa: E402

NO_JSON = tuple(name for name in RECORD_FIELDS if name != "fields_json")


def spark_expected(records_df, columns) -> list[str]:
    """dedupe's rows plus every error row, as sorted reprs of dicts of `columns`."""
    kept = transforms.dedupe(records_df).select(*columns)
    errors = records_df.where(F.col("error").isNotNull()).select(*columns)
    return sorted(repr(row.asDict(recursive=True)) for row in kept.unionByName(errors).collect())


def as_reprs(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist())


def test_cluster_stream_is_dedupe_on_the_hand_built_fleet(spark):
    rows = fleet_rows()
    expected = spark_expected(spark.createDataFrame(rows, RECORD_SCHEMA), RECORD_FIELDS)
    rng = random.Random(3)
    for attempt in range(3):
        got = []
        for cluster in sorted({row[0] for row in rows}):
            mine = [row for row in rows if row[0] == cluster]
            if attempt:
                rng.shuffle(mine)  # the answer cannot depend on the order rows come in
            table = pa.Table.from_batches([columnar.rows_to_batch(mine, RECORD_FIELDS)])
            got.append(stream.cluster_stream(table, RECORD_FIELDS))
        assert as_reprs(pa.concat_tables(got)) == expected


def test_cluster_stream_keeps_only_the_columns_asked_for(spark):
    rows = [row for row in fleet_rows() if row[0] == "alpha"]
    table = pa.Table.from_batches([columnar.rows_to_batch(rows, RECORD_FIELDS)])
    columns = ("offset", "cluster", "error")
    got = stream.cluster_stream(table, columns)
    assert got.column_names == list(columns)
    expected = spark_expected(spark.createDataFrame(rows, RECORD_SCHEMA), columns)
    assert as_reprs(got) == expected


def read_stream(root, columns, native: bool, monkeypatch, partitions=None) -> list[str]:
    monkeypatch.setenv(columnar.NATIVE_ENV, "1" if native else "0")
    reader = KraftwerkReader(str(root), 32 << 20, 1 << 20, record_schema(columns), 8192, COPIES_STREAM, partitions)
    batches = [batch for part in reader.partitions() for batch in reader.read(part)]
    table = pa.Table.from_batches(batches, columnar.schema_for(record_schema(columns).fieldNames()))
    return as_reprs(table)


def natives():
    return (True, False) if columnar._columnar is not None else (False,)


def test_stream_mode_is_dedupe_on_the_readers_fleet(spark, fleet, monkeypatch):
    # east: two controllers whose logs differ in length (not copies of each other), one
    # snapshot; west: one controller.
    expected = spark_expected(read_records(spark, str(fleet), columns=NO_JSON), NO_JSON)
    for native in natives():
        assert read_stream(fleet, NO_JSON, native, monkeypatch) == expected


@pytest.fixture(scope="module")
def damaged_fleet(tmp_path_factory):
    # Small segments (many files), snapshots with replay-offset headers; one segment
    # damaged in all three copies (the same error rows thrice), one copy of another
    # damaged (its rows differ from its twins' and compete), one copy of a third
    # segment cut short, one snapshot copy removed.
    root = tmp_path_factory.mktemp("stream") / "fleet"
    write_fleet(root, FleetSpec(clusters=3, records_per_cluster=3000, seed=17, segment_bytes=24 * 1024))
    groups = [g for g in columnar.copy_groups(fleet_files(root)) if len(g) == 3]
    logs = [g for g in groups if g[0].source == SOURCE_LOG]
    for f in logs[1]:
        data = bytearray(open(f.path, "rb").read())
        data[300] ^= 0xFF
        open(f.path, "wb").write(bytes(data))
    data = bytearray(open(logs[-1][1].path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(logs[-1][1].path, "wb").write(bytes(data))
    data = open(logs[len(logs) // 2][0].path, "rb").read()
    open(logs[len(logs) // 2][0].path, "wb").write(data[: len(data) // 3])
    snapshots = [g for g in groups if g[0].source != SOURCE_LOG]
    if snapshots:
        (root / snapshots[0][0].relative_path).unlink()
    return root


def test_stream_mode_is_dedupe_plus_every_error_on_a_damaged_fleet(spark, damaged_fleet, monkeypatch):
    full = read_records(spark, str(damaged_fleet), columns=NO_JSON)
    assert full.where(F.col("error").isNotNull()).count() >= 4
    expected = spark_expected(full, NO_JSON)
    for native in natives():
        assert read_stream(damaged_fleet, NO_JSON, native, monkeypatch, partitions=2) == expected


def test_stream_mode_through_spark_gives_the_same_rows(spark, damaged_fleet):
    columns = ("cluster", "node_id", "file", "offset", "record_type", "broker", "error")
    got = read_records(spark, str(damaged_fleet), columns=columns, copies=COPIES_STREAM, partitions=2)
    assert got.rdd.getNumPartitions() == 2
    assert sorted(repr(row.asDict(recursive=True)) for row in got.collect()) == spark_expected(
        read_records(spark, str(damaged_fleet), columns=NO_JSON), columns)


def test_a_cluster_is_never_split_over_partitions(tmp_path):
    root = tmp_path / "fleet"
    write_fleet(root, FleetSpec(clusters=3, records_per_cluster=500, seed=2, segment_bytes=8 * 1024))
    clusters = cluster_groups(fleet_files(root))
    assert [len({f.cluster for f in files}) for files in clusters] == [1, 1, 1]
    for wanted in (None, 1, 2, 5):
        reader = KraftwerkReader(str(root), 1, 0, record_schema(NO_JSON), 8192, COPIES_STREAM, wanted)
        parts = reader.partitions()
        seen = [files[0].cluster for part in parts for files in part.clusters]
        assert sorted(seen) == sorted({f.cluster for f in fleet_files(root)})
        assert len(parts) == (3 if wanted in (None, 5) else wanted)


def test_stream_mode_needs_arrow(spark, tmp_path):
    with pytest.raises(Exception, match="arrow"):
        spark.read.format("kraftwerk").option("copies", COPIES_STREAM).option("arrow", "false").load(
            str(tmp_path)).collect()


def test_the_split_stream_rows_are_the_stream_divided_by_the_timelines_predicate(spark, damaged_fleet):
    # "broker": exactly the stream rows transforms.broker_rows() keeps; "other": every
    # other row of the stream plus every error row; together, the whole stream.
    columns = ("cluster", "cluster_id", "offset", "record_type", "feature", "broker", "error")
    whole = read_records(spark, str(damaged_fleet), columns=columns, copies=COPIES_STREAM, partitions=2)

    def rows(frame):
        return sorted(repr(row.asDict(recursive=True)) for row in frame.collect())

    def split(kind, wanted=columns):
        return read_records(spark, str(damaged_fleet), columns=wanted, copies=COPIES_STREAM, partitions=2,
                            stream_rows=kind)

    is_broker = transforms.broker_rows()
    broker, other = rows(split("broker")), rows(split("other"))
    assert broker == rows(whole.where(is_broker))
    assert other == rows(whole.where(~is_broker | F.col("record_type").isNull()))
    assert sorted(broker + other) == rows(whole)
    assert any("'error': None" not in row for row in other)  # the damage's error rows
    # The split does not need the columns it splits by to be asked for.
    narrow = ("cluster", "offset")
    assert rows(split("broker", narrow)) == rows(whole.where(is_broker).select(*narrow))


def test_stream_rows_needs_the_stream_mode_and_a_known_kind(spark, damaged_fleet):
    with pytest.raises(Exception, match="streamRows"):
        read_records(spark, str(damaged_fleet), columns=NO_JSON, copies="distinct", stream_rows="broker").collect()
    with pytest.raises(Exception, match="streamRows"):
        read_records(spark, str(damaged_fleet), columns=NO_JSON, copies=COPIES_STREAM, stream_rows="brokers").collect()
