"""The pipeline transforms, the job's outputs and the report, on a small hand-built fleet
(tests/pipeline_transforms/fleet.py).

Spark actions are few on purpose: the job writes every table once and the tests read
the Parquet back; only the stream and the no-controllers readiness are collected
directly.
"""

from __future__ import annotations

import pytest

from server.controller.features import is_lossless_downgrade
from .fleet import NODES, NODES_SCHEMA, fleet_rows

pytest.importorskip("pyspark")

from pipeline import jobs, transforms  # noqa: E402
from pipeline.schema import RECORD_SCHEMA  # noqa: E402


@pytest.fixture(scope="module")
def records(spark):
    # Cached: a DataFrame made from Python rows is otherwise re-read through Python
    # workers by every branch of every plan, which dominates the run time.
    frame = spark.createDataFrame(fleet_rows(), RECORD_SCHEMA).cache()
    frame.count()
    yield frame
    frame.unpersist()


@pytest.fixture(scope="module")
def stream_rows(records):
    return transforms.dedupe(records).orderBy("cluster", "offset").collect()


@pytest.fixture(scope="module")
def job(spark, records, tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline-out")
    nodes = spark.createDataFrame(NODES, NODES_SCHEMA)
    lines: list[str] = []
    result = jobs.write_outputs(spark, jobs.build_tables(records, nodes), out, progress=lines.append, fleet="test-fleet")
    tables = {
        name: [row.asDict(recursive=True) for row in spark.read.parquet(str(path)).collect()]
        for name, path in result.tables.items()
    }
    return result, tables, lines


def by_cluster(rows):
    return {row["cluster"]: row for row in rows}


# ---------------------------------------------------------------- stream


def test_copies_across_controllers_and_snapshots_become_one_stream(stream_rows):
    alpha = [(r.offset, r.source, r.record_type) for r in stream_rows if r.cluster == "alpha"]
    # Logs start at 10: the bridging snapshot (end 12) supplies the registrations below
    # it, and its metadata.version (not set in the log before 12) just below the log start.
    assert alpha == [
        (2, "snapshot", "RegisterBrokerRecord"),
        (3, "snapshot", "RegisterBrokerRecord"),
        (9, "snapshot", "FeatureLevelRecord"),
        (10, "log", "UnfenceBrokerRecord"),
        (11, "log", "NoOpRecord"),
        (12, "log", "FeatureLevelRecord"),
        (13, "log", "FeatureLevelRecord"),
        (14, "log", "FeatureLevelRecord"),
        (15, "log", "FeatureLevelRecord"),
        (16, "log", "BrokerRegistrationChangeRecord"),
        (17, "log", "RegisterBrokerRecord"),
        # Node 3's stale epoch-1 NoOp at 18 loses to the epoch-2 record.
        (18, "log", "UnregisterBrokerRecord"),
    ]
    # The older snapshot's broker 102 (unregistered since) is not resurrected.
    broker_ids = {r.broker.broker_id for r in stream_rows if r.broker is not None}
    assert 102 not in broker_ids
    # A snapshot-only cluster keeps its whole (newest) snapshot.
    assert [r.offset for r in stream_rows if r.cluster == "gamma"] == [3, 4, 5, 8]
    assert all(r.error is None and r.record_type not in ("SnapshotHeader", "SnapshotFooter") for r in stream_rows)


def test_error_rows_are_counted_per_file_and_kept_out_of_the_stream(job, stream_rows):
    _, tables, _ = job
    counts = {(r["cluster"], r["node_id"], r["source"]): r["errors"] for r in tables["errors"]}
    assert counts == {("alpha", 2, "log"): 2, ("alpha", 3, "snapshot"): 1}
    assert 19 not in [r.offset for r in stream_rows if r.cluster == "alpha"]


# ---------------------------------------------------------------- audit


def test_features_audit_directions_and_lossy_flags(job):
    _, tables, _ = job
    alpha_mv = sorted(
        (r for r in tables["features_audit"] if r["cluster"] == "alpha" and r["feature"] == "metadata.version"),
        key=lambda r: r["offset"],
    )
    assert [(r["offset"], r["old_level"], r["new_level"], r["direction"], r["lossy"]) for r in alpha_mv] == [
        (9, None, 8, "bootstrap", False),
        (12, 8, 10, "upgrade", False),
        (13, 10, 9, "downgrade", False),
        (14, 9, 11, "upgrade", False),
        (15, 11, 7, "downgrade", True),
    ]
    # The flags agree with the catalog's own rule.
    assert is_lossless_downgrade(10, 9) and not is_lossless_downgrade(11, 7)
    assert alpha_mv[-1]["old_version"] == "3.5-IV2" and alpha_mv[-1]["new_version"] == "3.3-IV3"
    assert alpha_mv[0]["timestamp"] is not None and alpha_mv[0]["cluster_id"] == "ALPHA-ID"

    beta = sorted((r for r in tables["features_audit"] if r["cluster"] == "beta"), key=lambda r: r["offset"])
    # metadata.version 14 written again at offset 7 is not a change.
    assert [(r["offset"], r["feature"], r["direction"]) for r in beta] == [
        (0, "metadata.version", "bootstrap"),
        (1, "group.version", "bootstrap"),
        (2, "transaction.version", "bootstrap"),
        (6, "group.version", "disable"),
    ]
    assert all(r["old_version"] is None for r in beta if r["feature"] != "metadata.version")


# ---------------------------------------------------------------- timeline


def test_broker_timeline_events(job):
    _, tables, _ = job
    alpha = sorted(
        (r for r in tables["broker_timeline"] if r["cluster"] == "alpha"),
        key=lambda r: (r["broker_id"], r["offset"], r["event_index"]),
    )
    assert [(r["broker_id"], r["offset"], r["event"], r["fenced"], r["release"]) for r in alpha] == [
        (100, 2, "register", True, "3.6"),
        (100, 10, "unfence", False, "3.6"),
        (100, 16, "fence", True, "3.6"),
        (100, 16, "controlled_shutdown", True, "3.6"),
        (101, 3, "register", False, "3.5"),
        (103, 17, "register", True, "3.5"),
        (103, 18, "unregister", None, "3.5"),
    ]
    assert {r["broker_epoch"] for r in alpha if r["broker_id"] == 100} == {2}
    gamma_releases = {r["broker_id"]: r["release"] for r in tables["broker_timeline"] if r["cluster"] == "gamma"}
    assert gamma_releases == {300: "4.0", 301: "3.9", 302: "3.9"}


# ---------------------------------------------------------------- readiness


def test_readiness_names_the_blockers_and_ignores_unregistered_brokers(job):
    _, tables, _ = job
    readiness = by_cluster(tables["upgrade_readiness"])
    alpha = readiness["alpha"]
    assert alpha["metadata_version_level"] == 7 and alpha["metadata_version"] == "3.3-IV3"
    assert [b["broker_id"] for b in alpha["brokers"]] == [100, 101]  # 103 unregistered
    assert (alpha["supported_mv_level"], alpha["target_mv_level"]) == (11, 14)
    assert [(b["role"], b["node_id"], b["release"]) for b in alpha["blockers"]] == [
        ("broker", 101, "3.5"),
        ("controller", 3, "3.5"),
    ]
    assert alpha["verdict"] == (
        "can upgrade to 3.5-IV2; blocked above by broker 101 (release 3.5); controller 3 (release 3.5)"
    )

    gamma = readiness["gamma"]
    assert gamma["verdict"] == "blocked by brokers 301, 302 (release 3.9)"
    # A controller of unknown release is listed but judges nothing.
    assert [(c["node_id"], c["release"], c["mv_max"]) for c in gamma["controllers"]] == [(1, "unknown", None)]


def test_readiness_without_blockers(job):
    _, tables, _ = job
    beta = by_cluster(tables["upgrade_readiness"])["beta"]
    assert beta["blockers"] == []
    assert beta["verdict"] == "up to date"
    assert beta["other_features"] == {"transaction.version": 2}  # group.version was disabled
    assert beta["broker_count"] == 2


def test_readiness_without_nodes_judges_brokers_only(records):
    rows = by_cluster(
        row.asDict(recursive=True)
        for row in transforms.upgrade_readiness(transforms.dedupe(records)).collect()
    )
    assert rows["alpha"]["verdict"] == "can upgrade to 3.5-IV2; blocked above by broker 101 (release 3.5)"
    assert rows["alpha"]["controllers"] == []
    assert rows["beta"]["verdict"] == "up to date"


def test_readiness_over_a_stream_without_its_broker_rows_and_their_timeline(spark, records):
    # The job's split read: the timeline stands for the broker rows the stream lacks
    # (their clusters, ids, last offsets and timestamps included); same rows, any order.
    nodes = spark.createDataFrame(NODES, NODES_SCHEMA)
    stream = transforms.dedupe(records)
    expected = sorted(repr(row) for row in transforms.upgrade_readiness(stream, nodes).collect())
    without = stream.where(~transforms.broker_rows())
    timeline = transforms.broker_timeline(stream)
    over = transforms.upgrade_readiness(without, nodes, timeline, stream_has_broker_rows=False)
    assert sorted(repr(row) for row in over.collect()) == expected
    # The same from the timeline's summary, as the job gives it (cached).
    summary = transforms.broker_summary(timeline).cache()
    try:
        over = transforms.upgrade_readiness(without, nodes, summary=summary, stream_has_broker_rows=False)
        assert sorted(repr(row) for row in over.collect()) == expected
    finally:
        summary.unpersist()
    # The broker rows are most of a cluster's last offsets here: without the timeline
    # standing for them, the answer would differ.
    assert sorted(repr(row) for row in transforms.upgrade_readiness(without, nodes, transforms.broker_timeline(stream)).collect()) != expected
    with pytest.raises(ValueError, match="timeline"):
        transforms.upgrade_readiness(without, nodes, stream_has_broker_rows=False)


# ---------------------------------------------------------------- job and report


def test_job_writes_tables_and_counts_rows(job):
    result, tables, lines = job
    assert set(result.tables) == set(jobs.TABLES)
    for name in jobs.TABLES:
        assert result.tables[name].is_dir()
        assert result.row_counts[name] == len(tables[name])
    assert result.row_counts["upgrade_readiness"] == 3
    assert any("report" in line for line in lines)


def test_report_is_self_contained_and_mentions_every_cluster(job):
    result, _, _ = job
    html = result.report.read_text(encoding="utf-8")
    assert result.report.name == "report.html"
    assert "<svg" in html and "<style>" in html
    assert "http" not in html and "<script" not in html and "<link" not in html
    for cluster in ("alpha", "beta", "gamma"):
        assert cluster in html
    assert "blocked by brokers 301, 302 (release 3.9)" in html
    assert "bad magic" in html  # the errors table


def test_small_tables_read_back_with_pyarrow_are_sparks_rows(job):
    # write_outputs reads the small tables for the report with pyarrow: the rows must be
    # those Spark's collect() gives (maps, structs, arrays, naive timestamps), every table.
    result, tables, _ = job
    for name in jobs.TABLES:
        mine = jobs.collect_parquet(result.tables[name])
        assert sorted(map(repr, mine)) == sorted(map(repr, tables[name])), name
    assert any(row["errors"] for row in tables["errors"])
    assert any(row["timestamp"] is not None for row in tables["features_audit"])
