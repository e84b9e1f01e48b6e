"""Smoke test of bench/bench_brokers.py's fan-out at its smallest size: a 3-voter quorum
and two broker agents stepping metadata.version three times, every result field
reported (steps, messages per broker, CPU, the wait for a quiet cluster before each step,
the heap's size and the idle brokers' collector time, the harness's floor with its CPU and
garbage-collector time), exit code 0.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from server.collector import SERVING_YOUNG_GENERATION_OBJECTS

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

BROKERS = 2


def test_the_fanout_bench_reports_its_fields_for_two_brokers(tmp_path):
    (tmp_path / "work").mkdir()
    report, stdout = run_bench("bench_brokers.py", "fanout", "--brokers", str(BROKERS), "--budget-s", "240",
                               "--gc-freeze", "--settle", "--dir", str(tmp_path / "work"),
                               json_path=tmp_path / "result.json")
    assert len(report["load_start"]) == 3 and len(report["load_end"]) == 3
    # --gc-freeze freezes the heap as `kraftwerk broker` does; --settle waits for a quiet cluster before each step.
    assert report["gc_freeze"] is True and report["settle"] is True
    # By default the brokers' process collects its youngest generation as a serving process does.
    assert report["serving_thresholds"] is True
    assert report["gc_thresholds"][0] == SERVING_YOUNG_GENERATION_OBJECTS
    assert report["skipped"] == []
    cell = report["results"][str(BROKERS)]
    assert cell["brokers"] == BROKERS and cell["note"] == ""
    assert [step["to"] for step in cell["steps"]] == ["3.7-IV2", "3.7-IV3", "3.7-IV4"]
    for step in cell["steps"]:
        assert step["renegotiated"] == BROKERS, step
        assert step["missed"] == []
        # Each broker's DescribeCluster range is gated at 3.7-IV0: max 1 at every step.
        assert step["describe_cluster_max"] == {"1": BROKERS}
        assert step["renegotiated_median_s"] <= step["renegotiated_max_s"]
        assert step["all_s"] is not None
        # Every broker asked each of the three controllers (controller and forwarding connections).
        assert step["sent_per_broker"]["ApiVersions"] >= 3
        assert len(step["cpu_s"]) == 2
        assert step["settle_s"] is not None and step["settle_s"] >= 0
    assert cell["all_ms_per_broker"] is not None
    # The heap every full collection walks, and the idle brokers' CPU with the collector's share of it.
    assert cell["heap_objects"] > 0
    assert len(cell["idle_cpu"]) == 2 and cell["idle_gc"][0] >= 0 and cell["idle_gc"][1] >= 0
    floor = cell["floor"]
    assert floor["api_versions_answered"] == 3 * BROKERS
    assert floor["api_versions_cpu_s"] >= 0 and floor["api_versions_gc_s"] >= 0 and floor["api_versions_gc_full"] >= 0
    assert floor["snapshot_bytes_median"] > 0  # each broker snapshotted before a metadata.version change
    assert floor["total_s"] == pytest.approx(floor["append_s"] + floor["snapshot_s"] + floor["api_versions_s"])
    assert "| N | to | renegotiated |" in stdout
    assert "| N | N appends+fsync ms (serial) |" in stdout
    assert "load average at start:" in stdout


def test_the_apiversions_floor_bench_reports_its_fields(tmp_path):
    # The floor's N x 3 ApiVersions without broker images (bench_brokers.py apiversions).
    (tmp_path / "work").mkdir()
    report, stdout = run_bench("bench_brokers.py", "apiversions", "--brokers", str(BROKERS), "--rounds", "2",
                               "--ballast-k", "1", "--dir", str(tmp_path / "work"), json_path=tmp_path / "result.json")
    assert len(report["load_start"]) == 3 and len(report["load_end"]) == 3 and report["ballast_k"] == 1
    [cell] = report["results"]
    assert cell["brokers"] == BROKERS and len(cell["rounds"]) == 2
    for row in cell["rounds"]:
        assert row["answered"] == 3 * BROKERS  # one answer per broker and controller
        assert row["wall_s"] > 0 and len(row["cpu_s"]) == 4 and row["gc_s"] >= 0 and row["gc_full"] >= 0
    assert "| N | requests | wall ms (median round) |" in stdout
    assert "load average at start:" in stdout
