"""Smoke test of bench/bench_server.py at a tiny duration: kraftwerk's listener and the
canned floor each answer all three cases (1 connection, 64 connections, 1 connection with
32 requests pipelined) end to end, with every result field reported in its JSON and the
tables printed. No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

CASES = {"1 conn": (1, 1), "64 conns": (64, 1), "1 conn x32 pipelined": (1, 32)}
FIELDS = ("count", "elapsed_s", "rate", "p50_us", "p99_us", "server_cpu_s", "loadgen_cpu_s", "other_cpu_s",
          "response_bytes")


def test_the_server_bench_reports_every_case_for_both_servers(tmp_path):
    document, stdout = run_bench("bench_server.py", "--warmup-s", "0.05", "--duration-s", "0.2", "--rounds", "2",
                                 "--dir", str(tmp_path / "work"), json_path=tmp_path / "result.json")
    assert document["rounds"] == 2
    assert len(document["load_average_start"]) == 3 and len(document["load_average_end"]) == 3
    assert document["request_bytes"] == 55 and document["same_request_as_kafka_python"] is True
    response_bytes = document["response_bytes"]
    assert response_bytes > 8
    assert {case["case"]: (case["connections"], case["depth"]) for case in document["cases"]} == CASES
    for case in document["cases"]:
        for name in ("kraftwerk", "canned"):
            rounds = case["servers"][name]
            assert len(rounds) == 2, (case["case"], name)
            for result in rounds:
                assert set(FIELDS) <= set(result), (case["case"], name)
                assert result["count"] > 0 and result["rate"] > 0
                assert 0 < result["p50_us"] <= result["p99_us"]
                # Both servers answered with the very same bytes (sizes checked here,
                # content by the bench itself before measuring).
                assert result["response_bytes"] == response_bytes
        assert set(case["ratios"]) == {"rate", "p50", "p99", "cpu_per_request"}
        assert len(case["ratios_per_round"]) == 2
    assert "Load average (1, 5, 15 min) at start" in stdout
    assert "| 1 conn x32 pipelined | kraftwerk |" in stdout
    assert "| 1 conn x32 pipelined | canned |" in stdout
