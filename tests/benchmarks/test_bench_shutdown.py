"""Smoke test of bench/bench_shutdown.py at its smallest size: one run of a 1 + 1
`cluster up` stopped by SIGTERM, and its two floors, end to end, with every result field
reported, exit code 0 everywhere and no process left behind.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 300.0


def test_the_shutdown_bench_reports_its_fields_for_one_controller_and_one_broker(tmp_path):
    out = tmp_path / "result.json"
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_shutdown.py"), "--runs", "1", "--controllers", "1",
         "--brokers", "1", "--dir", str(tmp_path / "work"), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    results = json.loads(out.read_text())["results"]
    assert results["size"] == "1+1"
    assert results["exit_codes"] == [0] and results["left_behind"] == 0
    for key in ("ours", "ours_brokers_stopped", "ours_controllers_stopped", "ours_up", "bare", "bare_tree"):
        stats = results[key]
        assert stats["runs"] == 1, key
        assert stats["min_s"] <= stats["median_s"] <= stats["max_s"], key
    (run,) = results["runs"]
    assert run["nodes"] == 2 and run["exit_code"] == 0
    assert "| `cluster up` 1+1: SIGTERM -> exit |" in finished.stdout
    assert "| floor: one bare Python process |" in finished.stdout
