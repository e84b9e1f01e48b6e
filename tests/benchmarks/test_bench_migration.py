"""Smoke test of bench/bench_migration.py at a tiny size: a ZooKeeper-mode cluster of
100 partitions migrated by a 3-voter quorum (the copy and its write downtime), then one
short dual-write rate, end to end, with every result field reported; and the offline
round-cost mode. No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.zk.process import zookeeper_missing

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

BENCH_TIMEOUT_S = 600.0


def run_migration_bench(tmp_path: Path, *args: str) -> tuple[dict, str]:
    return run_bench("bench_migration.py", *args, json_path=tmp_path / "result.json", timeout_s=BENCH_TIMEOUT_S)


def test_the_migration_bench_reports_the_copy_and_the_dual_write_lag_at_100_partitions(tmp_path):
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    (tmp_path / "work").mkdir()
    results, stdout = run_migration_bench(tmp_path, "--sizes", "100", "--rates", "20", "--duration-s", "2",
                                "--no-zk-fsync", "--dir", str(tmp_path / "work"))
    assert results["not_run"] == []
    assert len(results["load_start"]) == 3 and len(results["load_end"]) == 3
    (copy,) = results["copies"]
    assert copy["partitions"] == 100 and copy["topics"] == 10
    # 3 brokers + 10 topics + 100 partitions + 10 topic configs + Begin, MigrationState, End
    assert copy["copy_records"] == 3 + 10 + 100 + 10 + 3
    assert copy["copy_s"] > 0 and copy["records_per_s"] > 0
    assert copy["copies_started"] == len(copy["leaders"]) >= 1
    assert copy["probe_count"] > 0 and copy["max_wait_s"] >= 0 and copy["wait_us_per_partition"] >= 0
    if Path("/proc/self/stat").exists():  # the controllers' CPU during the copy, from /proc
        assert copy["copy_cpu_s"] >= copy["copy_cpu_s_leader"] >= 0
    (rate,) = results["rates"]
    assert rate["rate"] == 20 and rate["records_per_write"] == 1
    assert rate["sent"] >= rate["ok"] > 0
    assert rate["zk_checked"] > 0 and rate["zk_mismatches"] == 0  # ZooKeeper holds every acknowledged write
    assert "### Copy time and controller write downtime against metadata size" in stdout
    assert "### Dual-write lag" in stdout
    assert not list((tmp_path / "work").glob("bench_migration_*")), "the work directory was not removed"


def test_the_round_cost_mode_reports_both_ways_per_size(tmp_path):
    results, stdout = run_migration_bench(tmp_path, "--round-cost", "--sizes", "100,1000")
    assert [row["partitions"] for row in results["round_cost"]] == [100, 1000]
    for row in results["round_cost"]:
        assert row["rounds"] >= 2 and row["whole_ms"] > 0 and row["scoped_ms"] > 0
    assert "whole image: ms per round" in stdout
