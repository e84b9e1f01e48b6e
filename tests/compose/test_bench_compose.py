"""Smoke test of bench/bench_compose.py with one failover per cluster: it builds, brings
the compose cluster and the local peer up, fails each over once, stops them and reports
every field (every container exiting 0 on SIGTERM). No timing is asserted: timing
targets live in bench/, never in tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.compose]

REPO = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 900.0


def test_the_compose_bench_reports_its_fields_with_one_failover(tmp_path, kraftwerk_image):
    out = tmp_path / "result.json"
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_compose.py"), "--runs", "1", "--dir", str(tmp_path),
         "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    result = json.loads(out.read_text())
    for side in ("compose", "local"):
        assert result[side]["healthy_s"] > 0
        assert result[side]["stop_s"] >= 0
        (failover,) = result[side]["failovers"]
        assert failover["broker_ms"] > 0 and failover["controller_ms"] > 0
        assert failover["already_exists"] == 0, "a forwarded write applied but reported as failed"
    assert set(result["compose"]["exit_codes"].values()) == {0}, result["compose"]["exit_codes"]
    assert result["image_sizes"]["kraftwerk:0.1.0"] > 0
