"""Smoke test of bench/bench_shutdown.py at its smallest size: one run of a 1 + 1
`cluster up` stopped by SIGTERM, and its two floors, end to end, with every result field
reported, exit code 0 everywhere and no process left behind.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e


def test_the_shutdown_bench_reports_its_fields_for_one_controller_and_one_broker(tmp_path):
    report, stdout = run_bench("bench_shutdown.py", "--runs", "1", "--controllers", "1", "--brokers", "1",
                               "--dir", str(tmp_path / "work"), json_path=tmp_path / "result.json")
    results = report["results"]
    assert results["size"] == "1+1"
    assert results["exit_codes"] == [0] and results["left_behind"] == 0
    for key in ("ours", "ours_brokers_stopped", "ours_controllers_stopped", "ours_up", "bare", "bare_tree"):
        stats = results[key]
        assert stats["runs"] == 1, key
        assert stats["min_s"] <= stats["median_s"] <= stats["max_s"], key
    (run,) = results["runs"]
    assert run["nodes"] == 2 and run["exit_code"] == 0
    assert "| `cluster up` 1+1: SIGTERM -> exit |" in stdout
    assert "| floor: one bare Python process |" in stdout
