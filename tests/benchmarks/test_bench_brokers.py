"""Smoke test of bench/bench_brokers.py's fan-out at its smallest size: a 3-voter quorum
and two broker agents stepping metadata.version three times, every result field
reported (steps, messages per broker, CPU, the harness's floor), exit code 0.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

BROKERS = 2


def test_the_fanout_bench_reports_its_fields_for_two_brokers(tmp_path):
    (tmp_path / "work").mkdir()
    report, stdout = run_bench("bench_brokers.py", "fanout", "--brokers", str(BROKERS), "--budget-s", "240",
                               "--dir", str(tmp_path / "work"), json_path=tmp_path / "result.json")
    assert len(report["load_start"]) == 3 and len(report["load_end"]) == 3
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
    assert cell["all_ms_per_broker"] is not None
    floor = cell["floor"]
    assert floor["api_versions_answered"] == 3 * BROKERS
    assert floor["snapshot_bytes_median"] > 0  # each broker snapshotted before a metadata.version change
    assert floor["total_s"] == pytest.approx(floor["append_s"] + floor["snapshot_s"] + floor["api_versions_s"])
    assert "| N | to | renegotiated |" in stdout
    assert "| N | N appends+fsync ms (serial) |" in stdout
    assert "load average at start:" in stdout
