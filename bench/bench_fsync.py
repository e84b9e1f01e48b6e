"""Append + fsync latency of MetadataLog against the raw floor on the same disk.

For each shape (1 and 64 records per batch) it times, in the same run and the
same directory:
  raw  os.write + os.fsync of the very bytes the log would write (the floor:
       what the disk and kernel cost, with no Python log code at all);
  log  MetadataLog.append(values) (encode, CRC, pwrite, fsync, index update,
       plus the occasional segment roll with its directory fsync).
The two are interleaved in rounds so drift in the disk's behaviour hits both.
It prints p50/p99 in µs and the log/raw ratio. Timing targets live here,
never in tests.

Run: .venv/bin/python bench/bench_fsync.py [--iterations N] [--dir PATH]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.record_batch import encode_batch  # noqa: E402
from server.observability import configure_logging  # noqa: E402
from server.storage.log import LogConfig, MetadataLog  # noqa: E402

ROUNDS = 10
WARMUP_APPENDS = 20


def percentile(samples: list[int], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index] / 1000.0  # ns -> µs


def time_raw(fd: int, data: bytes, count: int, out: list[int]) -> None:
    for _ in range(count):
        start = time.perf_counter_ns()
        os.write(fd, data)
        os.fsync(fd)
        out.append(time.perf_counter_ns() - start)


def time_log(log: MetadataLog, values: list[bytes], count: int, out: list[int]) -> None:
    for _ in range(count):
        start = time.perf_counter_ns()
        log.append(values, leader_epoch=1, timestamp_ms=1_700_000_000_000)
        out.append(time.perf_counter_ns() - start)


def time_encode(values: list[bytes], count: int) -> float:
    start = time.perf_counter_ns()
    for offset in range(count):
        encode_batch(offset, 1, values, 1_700_000_000_000)
    return (time.perf_counter_ns() - start) / count / 1000.0


def run_shape(base_dir: Path, records_per_batch: int, value_bytes: int, iterations: int) -> dict:
    values = [bytes([65 + i % 26]) * value_bytes for i in range(records_per_batch)]
    batch = encode_batch(0, 1, values, 1_700_000_000_000)
    shape_dir = base_dir / f"shape{records_per_batch}"
    raw_path = shape_dir / "raw.bin"
    shape_dir.mkdir()
    raw_fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    log = MetadataLog.open(shape_dir / "log", LogConfig())
    raw_samples: list[int] = []
    log_samples: list[int] = []
    try:
        time_raw(raw_fd, batch, WARMUP_APPENDS, [])
        time_log(log, values, WARMUP_APPENDS, [])
        per_round = max(1, iterations // ROUNDS)
        for _ in range(ROUNDS):
            time_raw(raw_fd, batch, per_round, raw_samples)
            time_log(log, values, per_round, log_samples)
    finally:
        log.close()
        os.close(raw_fd)
    return {
        "records": records_per_batch,
        "batch_bytes": len(batch),
        "raw_p50": percentile(raw_samples, 0.50),
        "raw_p99": percentile(raw_samples, 0.99),
        "log_p50": percentile(log_samples, 0.50),
        "log_p99": percentile(log_samples, 0.99),
        "log_mean": statistics.fmean(log_samples) / 1000.0,
        "raw_mean": statistics.fmean(raw_samples) / 1000.0,
        "encode_us": time_encode(values, 2000),
        "samples": len(log_samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000, help="timed appends per shape and variant")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: system temp)")
    args = parser.parse_args(argv)
    configure_logging(level="warning", stream=sys.stderr)  # segment rolls must not interleave with the table
    base_dir = Path(tempfile.mkdtemp(prefix="bench_fsync_", dir=args.dir))
    try:
        results = [run_shape(base_dir, count, args.value_bytes, args.iterations) for count in (1, 64)]
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    print(f"append+fsync latency, {args.value_bytes}-byte values, {results[0]['samples']} samples per cell, dir {base_dir.parent}")
    header = (
        f"{'records/batch':>13} {'batch B':>8} {'raw p50 µs':>11} {'raw p99 µs':>11} "
        f"{'log p50 µs':>11} {'log p99 µs':>11} {'p50 ratio':>10} {'p99 ratio':>10} {'encode µs':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['records']:>13} {r['batch_bytes']:>8} {r['raw_p50']:>11.1f} {r['raw_p99']:>11.1f} "
            f"{r['log_p50']:>11.1f} {r['log_p99']:>11.1f} {r['log_p50'] / r['raw_p50']:>10.2f} "
            f"{r['log_p99'] / r['raw_p99']:>10.2f} {r['encode_us']:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
