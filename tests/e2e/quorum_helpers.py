"""A local quorum of real controller processes on 127.0.0.1, for tests/e2e/test_quorum.py.

Owns: `LocalQuorum` (format, start, kill -9, SIGSTOP/SIGCONT, restart and stop
the controllers of one test, on top of `cli.local_cluster`), blocking
one-request-per-connection calls to a controller (ApiVersions, DescribeQuorum,
UpdateFeatures), reading a node's structured log events, and reading a
stopped node's metadata log.

Rules kept here:
- Every wait is bounded by an explicit deadline; the only sleeps are short
  intervals between polls of another process's state (its log file, its
  answers), because a separate process gives this one nothing to wait on.
- The processes are always stopped at teardown, a paused one resumed first
  (SIGTERM is not delivered to a stopped process until it continues).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cli import local_cluster as lc
from server.storage.bootstrap import METADATA_LOG_DIR_NAME

from .helpers import encode_request, read_response

SOCKET_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.05
METADATA_TOPIC = "__cluster_metadata"
MV = "metadata.version"
# A controller's log event once its registration (a write of its own) is committed.
CONTROLLER_SELF_REGISTERED = "controller.self_registered"

API_VERSIONS = 18
DESCRIBE_QUORUM = 55
UPDATE_FEATURES = 57

UPGRADE = 1
NOT_CONTROLLER = 41
SAFE_DOWNGRADE = 2

T = TypeVar("T")


class QuorumTestError(AssertionError):
    """A bounded wait ran out, or a process did something a test cannot continue from."""


def free_port_run(count: int) -> int:
    return lc.free_port_run(count)


def poll_until(what: str, probe: Callable[[], T | None], timeout_s: float,
               interval_s: float = POLL_INTERVAL_S) -> T:
    """Calls `probe` until it returns something other than None (bounded by `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value is not None:
                return value
        except OSError as exc:  # a process that is down, not yet listening, or slow to answer
            last_error = exc
        if time.monotonic() > deadline:
            raise QuorumTestError(f"timed out after {timeout_s:g} s waiting for {what}"
                                  + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval_s)


# ---------------------------------------------------------------------------
# Blocking calls to one controller
# ---------------------------------------------------------------------------

def call(address: str, api_key: int, version: int, body: dict, timeout_s: float = SOCKET_TIMEOUT_S):
    """One request on a fresh connection; the decoded response body."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(encode_request(api_key, version, 1, body, client_id="kraftwerk-quorum-e2e"))
        correlation_id, response = read_response(sock, api_key, version)
    assert correlation_id == 1
    return response


@dataclass(frozen=True, slots=True)
class Finalized:
    epoch: int
    levels: tuple[tuple[str, int], ...]  # sorted (feature, max level) pairs

    def level(self, feature: str) -> int | None:
        return dict(self.levels).get(feature)


def finalized(address: str) -> Finalized:
    """The finalized features and their epoch, as ApiVersions v3 reports them."""
    body = call(address, API_VERSIONS, 3, {"client_software_name": "kraftwerk-quorum-e2e",
                                           "client_software_version": "1.0"})
    assert body.error_code == 0, body
    levels = tuple(sorted((f.name, f.max_version_level) for f in body.finalized_features or []))
    return Finalized(body.finalized_features_epoch, levels)


def describe_quorum(address: str):
    """Partition 0 of `__cluster_metadata` from DescribeQuorum v2 (a standby forwards to the leader)."""
    body = call(address, DESCRIBE_QUORUM, 2,
                {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    assert body.error_code == 0, body
    return body.topics[0].partitions[0]


def update_features(address: str, feature: str, level: int, upgrade_type: int, timeout_ms: int = 5_000):
    """UpdateFeatures v1 to one controller; the decoded response (error_code 41 from a standby)."""
    return call(address, UPDATE_FEATURES, 1, {
        "timeout_ms": timeout_ms,
        "feature_updates": [{"feature": feature, "max_version_level": level,
                             "allow_downgrade": upgrade_type != UPGRADE, "upgrade_type": upgrade_type}],
        "validate_only": False,
    }, timeout_s=timeout_ms / 1000 + SOCKET_TIMEOUT_S)


# ---------------------------------------------------------------------------
# The processes
# ---------------------------------------------------------------------------

def read_events(path: Path, name: str, start_byte: int = 0) -> list[dict]:
    """The JSON log lines of event `name` written at or after byte `start_byte`."""
    if not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(start_byte)
        text = handle.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        line = line.strip()
        # The name test first: decoding every line of a long log is most of the cost.
        if not line.startswith("{") or f'"{name}"' not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line still being written
        if entry.get("event") == name:
            found.append(entry)
    return found


class LocalQuorum:
    """The controllers of one test, addressed by node id (1..count)."""

    def __init__(self, directory: Path, count: int = 3, metadata_version: str = "3.8-IV0",
                 extra: dict[str, str] | None = None) -> None:
        from server.storage.meta_properties import random_uuid_string

        self.specs = {spec.node_id: spec for spec in lc.plan(directory, count, free_port_run(count))}
        self.processes: dict[int, lc.ControllerProcess] = {}
        self.paused: set[int] = set()
        # Where each node's current incarnation starts in its (appended-to) log file.
        self.log_marks: dict[int, int] = {}
        cluster_id = random_uuid_string()
        voters = list(self.specs.values())
        for spec in voters:
            lc.write_config(spec, voters, extra)
            lc.format_controller(spec, cluster_id, metadata_version)

    # -- lifecycle ------------------------------------------------------------
    def start(self, node_id: int) -> None:
        spec = self.specs[node_id]
        self.log_marks[node_id] = spec.log_path.stat().st_size if spec.log_path.exists() else 0
        self.processes[node_id] = lc.start_controller(spec)

    def start_all(self) -> None:
        for node_id in self.specs:
            self.start(node_id)

    def kill(self, node_id: int) -> None:
        """kill -9: no chance to flush or say goodbye."""
        lc.stop_controller(self.processes.pop(node_id), kill=True)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process keeps its sockets but neither reads nor answers, like a partition."""
        os.kill(self.processes[node_id].process.pid, signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        os.kill(self.processes[node_id].process.pid, signal.SIGCONT)
        self.paused.discard(node_id)

    def stop_all(self) -> None:
        for node_id in list(self.paused):
            self.resume(node_id)
        for node_id in list(self.processes):
            lc.stop_controller(self.processes.pop(node_id))

    # -- addressing -----------------------------------------------------------
    def address(self, node_id: int) -> str:
        return self.specs[node_id].address

    @property
    def live(self) -> list[int]:
        return sorted(node_id for node_id, p in self.processes.items() if p.alive() and node_id not in self.paused)

    def bootstrap_servers(self) -> str:
        return ",".join(self.address(node_id) for node_id in sorted(self.specs))

    def assert_alive(self) -> None:
        for node_id, process in self.processes.items():
            if not process.alive():
                raise QuorumTestError(f"controller {node_id} exited ({process.process.returncode}):\n"
                                      + self.log_tail(node_id))

    def log_tail(self, node_id: int, chars: int = 4000) -> str:
        path = self.specs[node_id].log_path
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def events(self, node_id: int, name: str, current_only: bool = True) -> list[dict]:
        start = self.log_marks.get(node_id, 0) if current_only else 0
        return read_events(self.specs[node_id].log_path, name, start)

    def metadata_log_dir(self, node_id: int) -> Path:
        return self.specs[node_id].metadata_dir / METADATA_LOG_DIR_NAME

    # -- the quorum's state, polled ---------------------------------------------
    def wait_for_leader(self, timeout_s: float, min_epoch: int = 0, exclude: tuple[int, ...] = ()):
        """The leader's DescribeQuorum partition once every live node names the same live leader
        of an epoch of at least `min_epoch`."""

        def probe():
            self.assert_alive()
            views = [describe_quorum(self.address(node_id)) for node_id in self.live]
            first = views[0]
            if first.error_code != 0 or first.leader_id not in self.live or first.leader_id in exclude:
                return None
            if first.leader_epoch < min_epoch:
                return None
            if any((v.error_code, v.leader_id, v.leader_epoch) != (0, first.leader_id, first.leader_epoch)
                   for v in views):
                return None
            return first

        return poll_until("a leader every live controller agrees on", probe, timeout_s)

    def wait_until_replicated(self, timeout_s: float, voters: tuple[int, ...] | None = None):
        """The leader's DescribeQuorum partition once the given voters (default: all live ones)
        hold the whole log and the high watermark covers it."""

        def probe():
            self.assert_alive()
            view = describe_quorum(self.address(self.live[0]))  # a standby forwards to the leader
            if view.error_code != 0 or view.leader_id not in self.live:
                return None
            ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
            wanted = voters if voters is not None else tuple(self.live)
            if ends.get(view.leader_id) != view.high_watermark:
                return None
            if any(ends.get(node_id) != view.high_watermark for node_id in wanted):
                return None
            return view

        return poll_until("every voter to hold the whole committed log", probe, timeout_s)

    def wait_until_settled(self, timeout_s: float):
        """`wait_until_replicated` once every live controller's current process has
        registered itself: each registration is a write of its own, so until then the log
        may still grow with nobody writing to it. The leader's DescribeQuorum partition."""
        deadline = time.monotonic() + timeout_s
        for node_id in self.live:
            self.wait_for_event(node_id, CONTROLLER_SELF_REGISTERED, max(0.0, deadline - time.monotonic()))
        return self.wait_until_replicated(max(0.0, deadline - time.monotonic()))

    def update_on_leader(self, feature: str, level: int, upgrade_type: int, timeout_s: float) -> int:
        """UpdateFeatures sent to whichever live node leads, retried (same level, so harmless
        even if a try was committed unseen) while leadership moves; the leader's id."""

        def attempt():
            self.assert_alive()
            leader_id = describe_quorum(self.address(self.live[0])).leader_id
            if leader_id not in self.live:
                return None
            response = update_features(self.address(leader_id), feature, level, upgrade_type)
            if response.error_code == NOT_CONTROLLER:
                return None
            assert response.error_code == 0, response
            return leader_id

        return poll_until(f"the leader to accept {feature}={level}", attempt, timeout_s)

    def wait_for_event(self, node_id: int, name: str, timeout_s: float,
                       accept: Callable[[dict], bool] = lambda entry: True) -> dict:
        def probe():
            self.assert_alive()
            return next((entry for entry in self.events(node_id, name) if accept(entry)), None)

        try:
            return poll_until(f"{name} from controller {node_id}", probe, timeout_s)
        except QuorumTestError as exc:
            raise QuorumTestError(f"{exc}\n{self.log_tail(node_id)}") from None


# ---------------------------------------------------------------------------
# A stopped node's metadata log
# ---------------------------------------------------------------------------

def read_log_batches(directory: Path) -> tuple[int, list[Any]]:
    """(log start offset, every batch) of a stopped node's metadata log, read with the
    server's own MetadataLog (which verifies CRCs and offsets on open)."""
    from server.storage.log import MetadataLog

    with MetadataLog.open(directory) as log:
        start = log.start_offset
        batches = []
        offset = start
        for _ in range(100_000):  # bound: far more batches than a test writes
            if offset >= log.end_offset:
                break
            chunk = log.read(offset)
            assert chunk, f"no batch at offset {offset} below the end {log.end_offset}"
            batches.extend(b for b in chunk if b.next_offset > offset)
            offset = chunk[-1].next_offset
        return start, batches


def feature_levels_in(batches: list[Any], feature: str) -> list[int]:
    """The levels of `feature`'s FeatureLevelRecords, in log order."""
    from protocol.records import decode_metadata_record

    levels = []
    for batch in batches:
        if batch.is_control:
            continue
        for item in batch.records:
            decoded = decode_metadata_record(item.value)
            if decoded.name == "FeatureLevelRecord" and decoded.data["name"] == feature:
                levels.append(decoded.data["feature_level"])
    return levels


def collapse_repeats(values: list[T]) -> list[T]:
    """[a, a, b, b, a] -> [a, b, a]."""
    out: list[T] = []
    for value in values:
        if not out or out[-1] != value:
            out.append(value)
    return out
