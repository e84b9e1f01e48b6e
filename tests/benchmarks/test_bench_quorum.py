"""Smoke test of bench/bench_quorum.py latency at a tiny size: a 3-voter quorum of real
processes, the fsync and round-trip floors and the bare-trio skeleton, every kind
sampled and every commit verified on the leader and both followers.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

KINDS = ("fsync", "rtt", "skeleton", "validate", "commit", "commit_mv")


def test_the_commit_latency_bench_reports_every_kind_against_its_floor(tmp_path):
    results, stdout = run_bench("bench_quorum.py", "latency", "--iterations", "20", "--mv-iterations", "10",
                                "--dir", str(tmp_path), json_path=tmp_path / "result.json")
    for kind in KINDS:
        stats = results["kinds"][kind]
        assert stats["samples"] >= 10, kind
        assert 0 < stats["p50_us"] <= stats["p99_us"], kind
    assert results["followers_checked"] == 2
    # 20 group.version flips and 10 metadata.version flips, plus the warm-up's.
    assert results["commits_verified"] >= 30
    assert results["floor_p50_us"] == results["kinds"]["fsync"]["p50_us"] + results["kinds"]["rtt"]["p50_us"]
    assert len(results["load_start"]) == len(results["load_end"]) == 3
    assert "| UpdateFeatures committed by the quorum (group.version, 1 record) |" in stdout
    assert "load average (1/5/15 min) at start" in stdout
