"""What the recovery point costs an append: MetadataLog.append with it and without it.

Two logs in the same directory tree, timed in interleaved rounds so drift in
the disk's behaviour hits both:
  with     MetadataLog.append as shipped (data pwrite, fsync, then the
           recovery point's 32-byte pwrite);
  without  the same log with the recovery point's `advance` turned into a
           no-op on that instance (what an append cost before it existed).
Prints p50/p99 in µs and the with/without ratio, plus the bare cost of the
recovery-point pwrite. Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_recovery_point.py [--iterations N] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_fsync import ROUNDS, WARMUP_APPENDS, percentile  # noqa: E402

from server.observability import configure_logging  # noqa: E402
from server.storage.log import LogConfig, MetadataLog  # noqa: E402


def time_appends(log: MetadataLog, values: list[bytes], count: int, out: list[int]) -> None:
    for _ in range(count):
        start = time.perf_counter_ns()
        log.append(values, leader_epoch=1, timestamp_ms=1_700_000_000_000)
        out.append(time.perf_counter_ns() - start)


def time_advance(log: MetadataLog, count: int) -> float:
    """Mean ns of the recovery point's pwrite alone (offsets above the log's end
    are fine here: the log is thrown away)."""
    point = log._recovery_point  # noqa: SLF001 - a benchmark looks inside
    assert point is not None
    first = point.offset + 1
    start = time.perf_counter_ns()
    for offset in range(first, first + count):
        point.advance(offset)
    return (time.perf_counter_ns() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000, help="appends per variant and shape")
    parser.add_argument("--dir", help="where to put the logs (default: a temporary directory)")
    args = parser.parse_args()
    configure_logging("WARNING")
    base = Path(tempfile.mkdtemp(prefix="bench-recovery-point-", dir=args.dir))
    try:
        config = LogConfig(segment_bytes=64 * 1024 * 1024)  # no rolls: the steady state
        print(f"directory: {base}  iterations: {args.iterations} per variant and shape")
        print(f"{'shape':<14}{'with p50':>10}{'p99':>9}{'without p50':>13}{'p99':>9}{'ratio p50':>11}")
        for records in (1, 64):
            values = [b"v" * 40] * records
            with_log = MetadataLog.open(base / f"with-{records}", config)
            without_log = MetadataLog.open(base / f"without-{records}", config)
            without_log._recovery_point.advance = lambda offset: None  # noqa: SLF001
            for log in (with_log, without_log):
                time_appends(log, values, WARMUP_APPENDS, [])
            with_samples: list[int] = []
            without_samples: list[int] = []
            per_round = max(1, args.iterations // ROUNDS)
            for _ in range(ROUNDS):
                time_appends(with_log, values, per_round, with_samples)
                time_appends(without_log, values, per_round, without_samples)
            with_p50, without_p50 = percentile(with_samples, 0.5), percentile(without_samples, 0.5)
            print(f"{records:>3} record(s) {with_p50:>10.1f}{percentile(with_samples, 0.99):>9.1f}"
                  f"{without_p50:>13.1f}{percentile(without_samples, 0.99):>9.1f}"
                  f"{with_p50 / without_p50:>11.3f}")
            print(f"    means: with {statistics.fmean(with_samples) / 1000:.1f} µs, "
                  f"without {statistics.fmean(without_samples) / 1000:.1f} µs")
            with_log.close()
            without_log.close()
        scratch = MetadataLog.open(base / "advance", config)
        print(f"recovery-point pwrite alone: {time_advance(scratch, 20_000) / 1000:.2f} µs mean")
        scratch.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
