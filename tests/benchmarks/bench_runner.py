"""Runs one benchmark script for a smoke test as a user would: a subprocess of this
Python from the repository root, bounded in time; its exit code must be 0 (else the
tail of its output is the failure), then its `--json` results and what it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 300.0
OUTPUT_TAIL_CHARS = 4000


def run_bench(script: str, *args: str, json_path: Path, timeout_s: float = BENCH_TIMEOUT_S,
              env: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """(the results `bench/<script>` wrote to `json_path`, its standard output)."""
    finished = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args, "--json", str(json_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert finished.returncode == 0, finished.stdout[-OUTPUT_TAIL_CHARS:] + finished.stderr[-OUTPUT_TAIL_CHARS:]
    return json.loads(json_path.read_text()), finished.stdout
