"""UpdateFeatures latency: validate-only vs committed, against the disk's fsync floor.

Starts a formatted `kraftwerk controller` (metadata.version 3.8-IV0) on
127.0.0.1 in a temporary directory and, over one blocking connection, one
request at a time, times three things in interleaved rounds (so drift in the
disk or the machine hits all three alike):
  validate  UpdateFeatures v1, validate_only=true, upgrade metadata.version
            3.8-IV0 -> 3.9-IV0 (goes through the controller loop, writes nothing);
  commit    UpdateFeatures v1 that really changes metadata.version, alternating
            upgrade to 3.9-IV0 and safe (lossless) downgrade to 3.8-IV0, so every
            request appends one FeatureLevelRecord batch and fsyncs it;
  fsync     os.write + os.fsync of a record-sized buffer (the committed batch's
            size) appended to a file in the same directory: the floor.
Every reply is checked (error code 0), and at the end the finalized-features
epoch must have advanced by one offset per commit, so each commit did write.
Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_commit.py [--iterations 1000] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import time
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from protocol.header import REQUEST_HEADER, RESPONSE_HEADER  # noqa: E402
from protocol.record_batch import encode_batch  # noqa: E402
from protocol.records import encode_metadata_record, record  # noqa: E402
from protocol.metadata_records import FEATURE_LEVEL_RECORD  # noqa: E402
from protocol.registry import API_MESSAGES  # noqa: E402

UPDATE_FEATURES_KEY = 57
UPDATE_FEATURES_VERSION = 1  # ValidateOnly and UpgradeType exist from v1
API_VERSIONS_KEY = 18
UPGRADE, SAFE_DOWNGRADE = 1, 2
LEVEL_3_8_IV0, LEVEL_3_9_IV0 = 20, 21
ROUNDS = 10
WARMUP_PER_KIND = 20
_SIZE = struct.Struct(">i")


class Client:
    """One blocking connection to kraftwerk; one request at a time."""

    def __init__(self, port: int) -> None:
        self.sock = common.connect(port)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict, header_version: int, response_header_version: int):
        self.correlation += 1
        request, response = API_MESSAGES[api_key]
        payload = REQUEST_HEADER.encode(header_version, {
            "request_api_key": api_key, "request_api_version": version,
            "correlation_id": self.correlation, "client_id": "bench-commit",
        }) + request.encode(version, body)
        frame = _SIZE.pack(len(payload)) + payload
        started = time.perf_counter_ns()
        self.sock.sendall(frame)
        answer = common.recv_frame(self.sock)
        elapsed_ns = time.perf_counter_ns() - started
        stream = BytesIO(answer[4:])
        header = RESPONSE_HEADER.decode(response_header_version, stream)
        if header.correlation_id != self.correlation:
            raise RuntimeError("correlation id mismatch")
        return response.decode(version, stream), elapsed_ns

    def update_metadata_version(self, level: int, upgrade_type: int, validate_only: bool) -> int:
        body = {
            "timeout_ms": 30_000,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": level,
                                 "allow_downgrade": upgrade_type != UPGRADE, "upgrade_type": upgrade_type}],
            "validate_only": validate_only,
        }
        # UpdateFeatures is flexible in every version: request header v2, response header v1.
        reply, elapsed_ns = self.call(UPDATE_FEATURES_KEY, UPDATE_FEATURES_VERSION, body, 2, 1)
        errors = [reply.error_code] + [r.error_code for r in reply.results or []]
        if any(errors):
            raise RuntimeError(f"UpdateFeatures to {level} failed: {reply.error_code} {reply.error_message} "
                               f"{[(r.feature, r.error_code, r.error_message) for r in reply.results or []]}")
        return elapsed_ns

    def finalized(self) -> tuple[int, int]:
        """(finalized features epoch, metadata.version level) from ApiVersions v3."""
        body = {"client_software_name": "bench-commit", "client_software_version": "1"}
        reply, _ = self.call(API_VERSIONS_KEY, 3, body, 2, 0)
        levels = {f.name: f.max_version_level for f in reply.finalized_features}
        return reply.finalized_features_epoch, levels["metadata.version"]

    def close(self) -> None:
        self.sock.close()


def us(samples_ns: list[int], fraction: float) -> float:
    return common.percentile(samples_ns, fraction) / 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000, help="timed samples per kind")
    parser.add_argument("--dir", default=None, help="parent of the temporary directory (the disk to measure)")
    args = parser.parse_args(argv)
    per_round = max(1, args.iterations // ROUNDS)

    # The floor writes what a commit writes: one batch with one FeatureLevelRecord.
    sample_batch = encode_batch(0, 1, [encode_metadata_record(record(
        FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": LEVEL_3_9_IV0}))], 1_700_000_000_000)
    work = common.work_dir(args.dir, "bench_commit_")
    samples: dict[str, list[int]] = {"validate": [], "commit": [], "fsync": []}
    commits = 0
    try:
        with common.kraftwerk_controller(work, metadata_version="3.8-IV0") as (_, port):
            client = Client(port)
            raw_fd = os.open(work / "fsync-floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                epoch_before, level = client.finalized()
                if level != LEVEL_3_8_IV0:
                    raise RuntimeError(f"expected metadata.version {LEVEL_3_8_IV0} after format, got {level}")

                def validate(out: list[int] | None) -> None:
                    elapsed = client.update_metadata_version(LEVEL_3_9_IV0, UPGRADE, validate_only=True)
                    if out is not None:
                        out.append(elapsed)

                def commit(out: list[int] | None) -> None:
                    nonlocal level, commits
                    if level == LEVEL_3_8_IV0:
                        elapsed = client.update_metadata_version(LEVEL_3_9_IV0, UPGRADE, validate_only=False)
                        level = LEVEL_3_9_IV0
                    else:
                        elapsed = client.update_metadata_version(LEVEL_3_8_IV0, SAFE_DOWNGRADE, validate_only=False)
                        level = LEVEL_3_8_IV0
                    commits += 1
                    if out is not None:
                        out.append(elapsed)

                def fsync(out: list[int] | None) -> None:
                    started = time.perf_counter_ns()
                    os.write(raw_fd, sample_batch)
                    os.fsync(raw_fd)
                    if out is not None:
                        out.append(time.perf_counter_ns() - started)

                kinds = {"validate": validate, "commit": commit, "fsync": fsync}
                for run in kinds.values():
                    for _ in range(WARMUP_PER_KIND):
                        run(None)
                for _ in range(ROUNDS):
                    for name, run in kinds.items():
                        for _ in range(per_round):
                            run(samples[name])
                epoch_after, final_level = client.finalized()
                if final_level != level or epoch_after - epoch_before != commits:
                    raise RuntimeError(f"expected {commits} committed records (epoch {epoch_before} -> "
                                       f"{epoch_before + commits}, level {level}); got epoch {epoch_after}, "
                                       f"level {final_level}")
            finally:
                os.close(raw_fd)
                client.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"$ {common.command_line()}")
    print(f"UpdateFeatures v1 over one connection on 127.0.0.1, one request at a time; {per_round * ROUNDS} "
          f"samples per kind in {ROUNDS} interleaved rounds, after {WARMUP_PER_KIND} warm-up each; "
          f"{commits} commits verified (finalized epoch advanced by {commits}); fsync floor writes "
          f"{len(sample_batch)} B (one FeatureLevelRecord batch) per sample; dir {work.parent}; "
          f"{os.cpu_count()} CPUs shared by client and server, nothing pinned.\n")
    floor50, floor99 = us(samples["fsync"], 0.50), us(samples["fsync"], 0.99)
    rows = []
    for name, label in (("fsync", "fsync floor (os.write + os.fsync)"),
                        ("validate", "UpdateFeatures validate_only=true"),
                        ("commit", "UpdateFeatures committed (1 record)")):
        p50, p99 = us(samples[name], 0.50), us(samples[name], 0.99)
        rows.append([label, len(samples[name]), f"{p50:.0f}", f"{p99:.0f}", f"{p50 / floor50:.2f}",
                     f"{p99 / floor99:.2f}"])
    print(common.markdown_table(["kind", "samples", "p50 µs", "p99 µs", "p50 / fsync p50", "p99 / fsync p99"], rows))
    v50, c50 = us(samples["validate"], 0.50), us(samples["commit"], 0.50)
    print(f"\ncommitted p50 - fsync p50 = {c50 - floor50:.0f} µs (kraftwerk's own cost around the fsync); "
          f"committed p50 - validate p50 = {c50 - v50:.0f} µs (what durability adds).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
