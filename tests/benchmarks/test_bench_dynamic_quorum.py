"""Smoke test of bench/bench_dynamic_quorum.py at its smallest size: it runs end to end
(a standalone controller filled with 1,000 records, a second one added through a snapshot,
a writer timed throughout, the new voter restarted) and reports every result field.
No timing is asserted: timing targets live in bench/, never in tests."""

from __future__ import annotations

import pytest

from .bench_runner import run_bench

pytestmark = pytest.mark.e2e

PHASES = ("before", "catch_up", "add", "after")


def test_the_dynamic_quorum_bench_reports_its_fields_at_1k_records(tmp_path):
    report, stdout = run_bench("bench_dynamic_quorum.py", "--sizes", "1000", "--dir", str(tmp_path / "work"),
                               "--catch-up-timeout-s", "120", "--add-timeout-s", "60", "--timeout-s", "240",
                               json_path=tmp_path / "result.json")
    (result,) = report["results"]
    assert "error" not in result, result["error"]
    assert result["records"] == 1000
    for key in ("fill_s", "fill_records_per_s", "snapshot_end_offset", "snapshot_file_bytes",
                "load_average_start", "load_average_end"):
        assert result[key] is not None, key
    # The new controller caught up through a snapshot covering the fill, not by replaying the log.
    assert result["snapshot_end_offset"] >= result["fill_end_offset"]
    assert result["catch_up"]["snapshot_installed_end_offset"] >= result["fill_end_offset"]
    for key in ("spawn_to_listening_s", "spawn_to_snapshot_installed_s", "spawn_to_image_loaded_s",
                "snapshot_installed_to_caught_up_s", "spawn_to_caught_up_s"):
        assert result["catch_up"][key] is not None, key
    for key in ("cli_wall_s", "cli_start_to_counted_s", "cli_start_to_voters_record_appended_s",
                "voters_record_appended_to_committed_ms", "node2_first_fetch_to_voter_s"):
        assert result["add"][key] is not None, key
    assert result["add"]["cli_output"].startswith("Added controller 2 with directory id ")
    for phase in PHASES:
        stats = result["writes"][phase]
        assert stats["writes"] >= 1 and stats["errors"] == 0, (phase, stats)
        assert stats["p50_ms"] is not None and stats["max_ms"] is not None, (phase, stats)
    assert result["restart"]["spawn_to_caught_up_s"] is not None
    assert "| 1,000 | add |" in stdout
