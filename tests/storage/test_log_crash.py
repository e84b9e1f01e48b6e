"""kill -9 a process mid-append loop: every acknowledged offset must survive.

The child (crash_child.py) prints "ack <first> <last>" only after `append`
returned. The test reads acknowledgements from its stdout, SIGKILLs it after
a number of them (no sleeps: the kill lands wherever the child happens to be,
often mid-write), reopens the log, and checks every acknowledged record is
there with its value. Three rounds on the same directory, so recovery of a
killed log is itself followed by appends and another kill.

A process kill keeps the page cache, so this proves ordering (ack only after
the write) and recovery of whatever the kill cut; fsync's job against power
loss is covered by the fsync-order tests in test_metadata_log.py.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from server.storage.log import LogConfig, MetadataLog

CHILD = Path(__file__).with_name("crash_child.py")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PYTHON = PROJECT_ROOT / ".venv" / "bin" / "python"
SEGMENT_BYTES = 2048  # small, so kills also land around segment rolls
ACKS_PER_ROUND = (150, 333, 77)
ROUND_DEADLINE_S = 60.0


def read_line(process: subprocess.Popen, selector: selectors.BaseSelector, deadline: float) -> str:
    """One stdout line, or an assertion if the child stalls past the deadline."""
    # Bounded by the deadline: each round waits at most the remaining time.
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "child process stalled"
        if selector.select(timeout=remaining):
            line = process.stdout.readline()
            assert line, f"child exited early with {process.wait()}: {process.stderr.read()}"
            return line


def run_and_kill(directory: Path, acks_wanted: int) -> list[tuple[int, int]]:
    process = subprocess.Popen(
        [str(PYTHON if PYTHON.exists() else sys.executable), str(CHILD), str(directory), str(SEGMENT_BYTES), "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        cwd=PROJECT_ROOT,
    )
    acks: list[tuple[int, int]] = []
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + ROUND_DEADLINE_S
        assert read_line(process, selector, deadline).startswith("ready ")
        while len(acks) < acks_wanted:
            kind, first, last = read_line(process, selector, deadline).split()
            assert kind == "ack"
            acks.append((int(first), int(last)))
        os.kill(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    return acks


def test_acknowledged_appends_survive_sigkill(tmp_path):
    directory = tmp_path / "metadata"
    all_acks: list[tuple[int, int]] = []
    for acks_wanted in ACKS_PER_ROUND:
        acks = run_and_kill(directory, acks_wanted)
        if all_acks:
            # A restarted child continues exactly after what it had acknowledged
            # (or after one more, unacknowledged, batch that made it to disk).
            assert acks[0][0] >= all_acks[-1][1] + 1
        all_acks.extend(acks)
        with MetadataLog.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES)) as log:
            records = {record.offset: record.value for batch in log.read(0, max_bytes=2**30) for record in batch.records}
            assert log.end_offset == len(records)  # gap-free from 0
            for first, last in all_acks:
                for offset in range(first, last + 1):
                    assert records.get(offset) == f"value-{offset}".encode(), offset
    assert len(os.listdir(directory)) > 3  # the kills happened across several segments
