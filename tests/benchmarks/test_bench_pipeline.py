"""Smoke test of bench/bench_pipeline.py at a tiny size: one 2-cluster fleet, the
plain-Python baseline, Spark on local[1] and one end-to-end `kraftwerk pipeline run`,
every cluster's answer checked by the bench itself (it exits non-zero on a mismatch),
every result field reported. No timing is asserted: timing targets live in bench/,
never in tests."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from .bench_runner import run_bench

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.e2e

BENCH_TIMEOUT_S = 900.0


def test_the_pipeline_bench_reports_its_fields_at_a_tiny_size(tmp_path):
    if shutil.which("java") is None:
        pytest.skip("java is not installed (PySpark needs Java 17)")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    result, stdout = run_bench("bench_pipeline.py", "--sizes", "3000", "--clusters", "2", "--masters", "local[1]",
                               "--workers", "1", "--no-warmup", "--e2e", "--budget-s", "800",
                               "--fleet-dir", str(tmp_path / "fleets"), json_path=tmp_path / "result.json",
                               timeout_s=BENCH_TIMEOUT_S, env=env)
    assert result["masters"] == ["local[1]"] and result["copies"] == "stream"
    assert len(result["load_start"]) == len(result["load_end"]) == 3
    assert result["pending"] == []
    (size,) = result["sizes"]
    assert size["size"] == 3000 and size["answers_checked"]
    assert 0 < size["records"] <= 3000
    assert size["rows"] > size["records"]  # three controller copies plus snapshots
    assert size["files"] > 0 and size["bytes"] > 0
    for key in ("raw_read_s", "baseline_s"):
        assert size[key] > 0, key
    assert set(size["spark_s"]) == set(size["e2e_s"]) == {"local[1]"}
    assert size["spark_s"]["local[1]"] > 0 and size["e2e_s"]["local[1]"] > 0
    assert "| records | rows | files | MB | raw read s | baseline s |" in stdout
    assert "rate / raw read rate" in stdout
