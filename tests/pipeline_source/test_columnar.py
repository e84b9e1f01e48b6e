"""pipeline/columnar.py: the compiled decoder (pipeline/_columnar.c) and the pure-Python
path give the same Arrow columns on every record of fake fleets, damaged ones
included; the Arrow schema is Spark's; skipping byte-identical copies drops exactly the
rows `dedupe` could never keep, and no error row."""

from __future__ import annotations

import random
import shutil

import pytest

pa = pytest.importorskip("pyarrow")

from pipeline import columnar  # noqa: E402
from pipeline.fake_fleet import FleetSpec, write_fleet  # noqa: E402
from pipeline.reader import SOURCE_LOG, fleet_files, read_file  # noqa: E402
from pipeline.schema import RECORD_FIELDS  # noqa: E402

NO_JSON = tuple(name for name in RECORD_FIELDS if name != "fields_json")
ERROR = RECORD_FIELDS.index("error")

needs_native = pytest.mark.skipif(
    columnar._columnar is None, reason="pipeline._columnar is not built (pip install -e . builds it)")


def table(batches, columns) -> pa.Table:
    return pa.Table.from_batches(batches, columnar.schema_for(columns)).combine_chunks()


def assert_same_file(f, columns=NO_JSON) -> pa.Table:
    native = table(columnar.file_batches(f, columns, native=True), columns)
    python = table(columnar.file_batches(f, columns, native=False), columns)
    for name in columns:
        assert native[name].equals(python[name]), (f.relative_path, name)
    return native


@pytest.fixture(scope="module")
def fake_fleet(tmp_path_factory):
    # Small segments: many files, batches of every kind (control, registration, fencing,
    # feature levels, unregistrations), snapshots with replay-offset headers.
    root = tmp_path_factory.mktemp("columnar") / "fleet"
    write_fleet(root, FleetSpec(clusters=3, records_per_cluster=4000, seed=11, segment_bytes=32 * 1024))
    return root


def test_arrow_schema_is_sparks_own(spark):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from pipeline.schema import RECORD_SCHEMA

    assert to_arrow_schema(StructType.fromDDL(RECORD_SCHEMA)) == columnar.ARROW_SCHEMA


def test_python_path_gives_the_readers_rows_in_any_column_order(fake_fleet):
    f = fleet_files(fake_fleet)[0]
    columns = ("error", "offset", "broker", "cluster", "fields_json")
    got = table(columnar.file_batches(f, columns, native=False), columns).to_pylist()
    rows = list(read_file(f))
    assert len(got) == len(rows)
    for row, item in zip(rows, got, strict=True):
        for name in columns:
            value = item[name]
            if isinstance(value, dict):
                value = tuple(value.values())
            assert value == row[RECORD_FIELDS.index(name)]


@needs_native
def test_compiled_and_python_paths_agree_on_every_record_of_a_fleet(fake_fleet):
    total = 0
    for f in fleet_files(fake_fleet):
        total += assert_same_file(f).num_rows
    assert total == sum(1 for f in fleet_files(fake_fleet) for _ in read_file(f))


@needs_native
def test_fields_json_is_always_the_python_readers(fake_fleet):
    f = fleet_files(fake_fleet)[0]
    assert table(columnar.file_batches(f, RECORD_FIELDS), RECORD_FIELDS).equals(
        table(columnar.file_batches(f, RECORD_FIELDS, native=False), RECORD_FIELDS))


@needs_native
def test_compiled_and_python_paths_agree_on_the_reader_tests_fleet(fleet):
    # Hand-built records: racks, log dirs, controlled shutdowns, two clusters, a snapshot.
    for f in fleet_files(fleet):
        assert_same_file(f)


@needs_native
def test_damaged_bytes_give_the_same_rows_and_errors_on_both_paths(fake_fleet, tmp_path):
    # Random damage of every kind: flipped bits inside records (CRC errors), in lengths
    # and base offsets (resynchronising, continuity errors), cut tails. The compiled path
    # must hand every such batch to the Python reader, so both give the same error rows.
    rng = random.Random(5)
    segments = [f for f in fleet_files(fake_fleet) if f.source == SOURCE_LOG]
    errors_seen = 0
    for round_ in range(40):
        f = rng.choice(segments)
        copy = tmp_path / "damaged" / f.relative_path
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f.path, copy)
        data = bytearray(copy.read_bytes())
        if round_ % 5 == 4:
            data = data[: rng.randrange(1, len(data))]
        else:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        copy.write_bytes(bytes(data))
        damaged = columnar.FleetFile(f.cluster, f.cluster_id, f.node_id, f.source, str(copy), f.relative_path)
        result = assert_same_file(damaged)
        errors_seen += result["error"].null_count < result.num_rows
    assert errors_seen >= 30  # the damage was seen, so error rows were compared


def test_identical_copies_give_only_their_error_rows(fake_fleet, tmp_path):
    root = tmp_path / "fleet"
    shutil.copytree(fake_fleet, root)
    files = fleet_files(root)
    groups = columnar.copy_groups(files)
    assert sorted(f.relative_path for g in groups for f in g) == sorted(f.relative_path for f in files)
    assert all(len({f.cluster for f in g}) == 1 for g in groups)
    # Damage the same byte of all three copies of one segment: same bytes, same errors.
    group = next(g for g in groups if g[0].source == SOURCE_LOG and len(g) == 3)
    for f in group:
        data = bytearray(open(f.path, "rb").read())
        data[300] ^= 0xFF
        open(f.path, "wb").write(bytes(data))
    # Make the last copy of another group differ from its twins.
    other = next(g for g in groups if g[0].source == SOURCE_LOG and len(g) == 3 and g is not group)
    data = bytearray(open(other[2].path, "rb").read())
    data[400] ^= 0xFF
    open(other[2].path, "wb").write(bytes(data))

    for native in ((True, False) if columnar._columnar is not None else (False,)):
        for g in (group, other):
            every = table(columnar.group_batches(g, NO_JSON, distinct=False, native=native), NO_JSON).to_pylist()
            kept = table(columnar.group_batches(g, NO_JSON, distinct=True, native=native), NO_JSON).to_pylist()
            first = g[0].relative_path
            # Every error row is still there, each under its own file.
            assert [r for r in kept if r["error"]] == [r for r in every if r["error"]]
            assert {r["file"] for r in every if r["error"]} == ({f.relative_path for f in g} if g is group
                                                                else {g[2].relative_path})
            # The good rows kept: the first copy's, plus a copy's that differs from it.
            good = [r for r in every if r["error"] is None]
            keep_files = {first} if g is group else {first, g[2].relative_path}
            assert [r for r in kept if r["error"] is None] == [r for r in good if r["file"] in keep_files]
        # The tuple path keeps the same rows.
        rows = list(columnar.group_rows(group, distinct=True))
        assert [row[ERROR] is not None for row in rows].count(True) == 3 * sum(
            1 for row in read_file(group[0]) if row[ERROR] is not None)


def test_rebatch_keeps_every_row_in_order():
    schema = columnar.schema_for(("offset",))
    batches = [pa.RecordBatch.from_pylist([{"offset": i} for i in range(start, start + n)], schema=schema)
               for start, n in ((0, 3), (3, 0), (3, 10), (13, 1), (14, 25))]
    out = list(columnar.rebatch(batches, 8))
    assert [b.num_rows for b in out] == [8, 8, 8, 8, 7]
    assert [row["offset"] for b in out for row in b.to_pylist()] == list(range(39))


def test_the_jobs_read_gives_the_same_tables_as_every_row_of_every_copy(spark, fake_fleet, tmp_path):
    # The job reads only the transforms' columns and skips byte-identical copies; its
    # four tables must be those of the full read, on a fleet where one segment is damaged
    # in all three copies (same error rows thrice) and another in one copy only (a copy
    # that differs, so its rows are kept and compete in dedupe).
    from pipeline.datasource import read_records
    from pipeline.jobs import (TABLES, build_split_tables, build_stream_tables, build_tables, read_job_records,
                               read_job_split, read_job_stream)

    root = tmp_path / "fleet"
    shutil.copytree(fake_fleet, root)
    groups = [g for g in columnar.copy_groups(fleet_files(root)) if g[0].source == SOURCE_LOG and len(g) == 3]
    for f in groups[1]:
        data = bytearray(open(f.path, "rb").read())
        data[300] ^= 0xFF
        open(f.path, "wb").write(bytes(data))
    data = bytearray(open(groups[-1][1].path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(groups[-1][1].path, "wb").write(bytes(data))

    def tables(records):
        built = build_tables(records)
        try:
            return {name: sorted(repr(row) for row in built[name].collect()) for name in TABLES}
        finally:
            for cached in ("stream", "records", "timeline"):
                built[cached].unpersist()

    full = tables(read_records(spark, str(root)))
    job = tables(read_job_records(spark, root))
    assert len(full["errors"]) == 4  # three copies of one segment, one of another
    assert job == full
    # The job's own read: each cluster's stream built in the source.
    built = build_stream_tables(read_job_stream(spark, root))
    try:
        assert {name: sorted(repr(row) for row in built[name].collect()) for name in TABLES} == full
    finally:
        built["records"].unpersist()
    # The job's two reads (broker rows, the rest), with upgrade_readiness built over the
    # timeline as the job builds it.
    built = build_split_tables(*read_job_split(spark, root))
    try:
        assert {name: sorted(repr(row) for row in built[name].collect()) for name in TABLES} == full
        over = built["readiness_over"](built["timeline"])
        assert sorted(repr(row) for row in over.collect()) == full["upgrade_readiness"]
    finally:
        for frame in (built["records"], *built["cached"]):
            frame.unpersist()
