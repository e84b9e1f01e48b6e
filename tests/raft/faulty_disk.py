"""A metadata log disk that fails on demand: the test double for ENOSPC and EIO.

(tests/raft/ has no __init__.py: this module is imported by plain name, like raft_harness.)

Owns: `FaultyDisk`, a `server.storage.log.FileOps` (what `MetadataLog.open(...,
file_ops=...)` calls for pwrite, fsync and ftruncate) that passes every call to `os`
until a test calls `fail(...)`, and again after `heal()`.

Rules kept here:
- It fails the way a real disk does, so recovery meets what it would meet:
  - ENOSPC on pwrite: the first write while failing is short (half the bytes land,
    as on a disk that fills mid-write) and the log's write loop then gets the error:
    a torn tail is left behind for recovery to cut;
  - EIO on fsync: the bytes were written (they sit in the page cache, readable, so
    a reopen finds whole batches that were never made durable) and the fsync fails.
- `hold_fsyncs()` makes fsync wait (in the calling worker thread, bounded by
  HOLD_BOUND_S) until `release()`: a leader's own fsync can then be made to
  fail *after* its followers' copies committed the entry. Only for a node whose
  fsyncs run in worker threads (a leader's); a follower fsyncs small appends on
  the event loop, which a hold would stall.
- Thread-safe: the log calls it from trio's worker threads while the test task
  switches it; one lock guards the mode and the counters.
- No module-level state: every node gets its own instance.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterable

OPERATIONS = frozenset({"pwrite", "fsync", "ftruncate"})
# A held fsync goes on by itself after this long (a test that forgot `release` fails, not hangs).
HOLD_BOUND_S = 30.0


class FaultyDisk:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._error: int | None = None
        self._operations: frozenset[str] = frozenset()
        self._short_write_pending = False
        self._released = threading.Event()
        self._released.set()
        # Counters for assertions: system calls that raised, and that went through.
        self.failures = 0
        self.writes = 0
        self.fsyncs = 0
        self.held = 0

    def fail(self, error: int, operations: Iterable[str] = ("pwrite", "fsync", "ftruncate")) -> None:
        """From now on, `operations` raise OSError(`error`) (see the module rules)."""
        chosen = frozenset(operations)
        if not chosen <= OPERATIONS:
            raise ValueError(f"unknown operations {sorted(chosen - OPERATIONS)}")
        with self._lock:
            self._error = error
            self._operations = chosen
            self._short_write_pending = error == errno.ENOSPC and "pwrite" in chosen

    def heal(self) -> None:
        """Space returned, or the device came back: every call goes through again."""
        with self._lock:
            self._error = None
            self._operations = frozenset()
            self._short_write_pending = False

    def hold_fsyncs(self) -> None:
        """fsync waits from now on until `release()` (see the module rules)."""
        self._released.clear()
        self.held = 0

    def release(self) -> None:
        self._released.set()

    @property
    def failing(self) -> bool:
        with self._lock:
            return self._error is not None

    def _raise(self, operation: str) -> None:
        code = self._error
        self.failures += 1
        raise OSError(code, f"{os.strerror(code)} (injected on {operation})")

    # -- FileOps ------------------------------------------------------------------------

    def pwrite(self, fd: int, data, position: int, /) -> int:
        with self._lock:
            if "pwrite" in self._operations:
                if self._short_write_pending and len(data) > 1:
                    self._short_write_pending = False
                    self.writes += 1
                    return os.pwrite(fd, data[: len(data) // 2], position)
                self._raise("pwrite")
            self.writes += 1
        return os.pwrite(fd, data, position)

    def fsync(self, fd: int, /) -> None:
        if not self._released.is_set():
            with self._lock:
                self.held += 1
            self._released.wait(HOLD_BOUND_S)
        with self._lock:
            if "fsync" in self._operations:
                self._raise("fsync")
            self.fsyncs += 1
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int, /) -> None:
        with self._lock:
            if "ftruncate" in self._operations:
                self._raise("ftruncate")
        os.ftruncate(fd, length)
