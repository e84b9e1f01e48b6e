"""Smoke test of bench/bench_quorum.py latency at a tiny size: a 3-voter quorum of real
processes, the fsync and round-trip floors and the bare-trio skeleton, every kind
sampled and every commit verified on the leader and both followers.
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
KINDS = ("fsync", "rtt", "skeleton", "validate", "commit", "commit_mv")


def test_the_commit_latency_bench_reports_every_kind_against_its_floor(tmp_path):
    out = tmp_path / "result.json"
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_quorum.py"), "latency", "--iterations", "20",
         "--mv-iterations", "10", "--dir", str(tmp_path), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    results = json.loads(out.read_text())
    for kind in KINDS:
        stats = results["kinds"][kind]
        assert stats["samples"] >= 10, kind
        assert 0 < stats["p50_us"] <= stats["p99_us"], kind
    assert results["followers_checked"] == 2
    # 20 group.version flips and 10 metadata.version flips, plus the warm-up's.
    assert results["commits_verified"] >= 30
    assert results["floor_p50_us"] == results["kinds"]["fsync"]["p50_us"] + results["kinds"]["rtt"]["p50_us"]
    assert len(results["load_start"]) == len(results["load_end"]) == 3
    assert "| UpdateFeatures committed by the quorum (group.version, 1 record) |" in finished.stdout
    assert "load average (1/5/15 min) at start" in finished.stdout
