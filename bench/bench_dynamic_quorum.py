"""Adding a controller to a running quorum (KIP-853): how long until it counts, and what a
writing client feels meanwhile, for metadata logs of 1k, 100k and 1M records.

Per size N, real `kraftwerk controller` processes on 127.0.0.1 (fsync on, Kafka's default
quorum timeouts), formatted as an operator does it:

  set-up    controller 1 `storage format --standalone`, filled with N SCRAM credentials
            (AlterUserScramCredentials, one request = one batch of B distinct users, one at a
            time; a metadata write a controller accepts without brokers; the salted password is
            the same for all users, which the controller cannot tell and which spares the
            client N PBKDF2 runs). metadata.log.max.record.bytes.between.snapshots is N/2
            records' worth, so the leader snapshots at N/2 and right at N and drops the log
            before: the new controller must catch up through a snapshot of N credentials
            (checked: the leader's log start offset is past the fill when node 2 starts).
  writer    one client thread writing one SCRAM credential at a time to the leader and
            timing each write, from a few seconds before node 2 starts to after the change.
  catch-up  controller 2, formatted `--no-initial-controllers`, starts as an observer; timed
            from its spawn to DescribeQuorum (at the leader) listing it as an observer whose
            log end offset reached the high watermark, with its own log's events for the
            stages (first answer from the leader, snapshot installed, image loaded).
  add       `kraftwerk metadata-quorum add-controller` (its wall time), and from the
            command's start to DescribeQuorum v2 listing node 2 in CurrentVoters with the
            leader's log end offset; the leader's events time the change itself (the
            VotersRecord appended -> committed).
  restart   node 2 stopped and started again: spawn -> listening, -> its own image recovered,
            -> caught up again (start-up over a snapshot of N records).

Writes are reported per phase (p50/p99/max/errors): before node 2 starts, while it catches
up, during the add (from the command's start to the voter counted), and after it (until the
new voter has also loaded the snapshot into its image, plus 3 s); the five slowest writes
from node 2's start on are listed with when they started. With one
voter becoming two, every commit after the change waits for the new voter's fetch.

Timing targets live here, never in tests. Report what one run measured, with the load.

Run: .venv/bin/python bench/bench_dynamic_quorum.py [--sizes 1000,100000,1000000] [--batch 2000]
         [--json FILE] [--dir DIR --keep] [--timeout-s 1800]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _common as common  # noqa: E402

from e2e.quorum_helpers import read_events  # noqa: E402

ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION = 51, 55, 2
SCRAM_SHA_256 = 1
ITERATIONS = 4096
SALT = b"bench-salt-16byt"  # 16 bytes, as Kafka's clients draw them
SALTED_PASSWORD = bytes(range(32))  # a SHA-256 sized salted password
POLL_S = 0.005  # polling another process's answers: nothing on it to wait on
STOP_TIMEOUT_S = 15.0
CLI_TIMEOUT_S = 120.0
WRITER_MAX_WRITES = 500_000
BEFORE_S = 3.0  # writes measured before node 2 starts
AFTER_S = 3.0  # and after the change
METADATA_TOPIC = "__cluster_metadata"


class BenchError(RuntimeError):
    """A step did not happen within its bound; the message says which, with the evidence."""


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------

@dataclass
class Node:
    node_id: int
    port: int
    base: Path
    process: subprocess.Popen | None = None
    log_handle: object | None = None
    spawned_at: float = 0.0  # time.time() of the latest spawn

    @property
    def address(self) -> str:
        return f"{common.HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.base / f"controller-{self.node_id}.properties"

    @property
    def data_dir(self) -> Path:
        return self.base / f"data-{self.node_id}"

    @property
    def log_path(self) -> Path:
        return self.base / f"controller-{self.node_id}.log"

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir / common.METADATA_LOG_DIR_NAME


class Cluster:
    """Controllers 1 (standalone bootstrap) and 2 (to be added); stops what it started."""

    def __init__(self, base: Path, snapshot_bytes: int, root: Path) -> None:
        self.base = base
        self.root = root  # the tree whose `cli.main` runs the controllers and the tools
        ports = common.free_ports(2)
        self.nodes = {node_id: Node(node_id, port, base) for node_id, port in zip((1, 2), ports)}
        self.cluster_id = self.cli("storage", "random-uuid").stdout.strip()
        for node in self.nodes.values():
            node.config_path.write_text("\n".join([
                "process.roles=controller",
                f"node.id={node.node_id}",
                f"listeners=CONTROLLER://{node.address}",
                "controller.listener.names=CONTROLLER",
                f"controller.quorum.bootstrap.servers={self.nodes[1].address}",
                f"log.dirs={node.data_dir}",
                f"metadata.log.dir={node.data_dir}",
                f"metadata.log.max.record.bytes.between.snapshots={snapshot_bytes}",
            ]) + "\n")
            flag = "--standalone" if node.node_id == 1 else "--no-initial-controllers"
            formatted = self.cli("storage", "format", "--config", str(node.config_path), "-t", self.cluster_id, flag)
            if formatted.returncode != 0:
                raise BenchError(f"format of controller {node.node_id} failed: {formatted.stderr}")

    def cli(self, *argv: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run([common.PYTHON, "-m", "cli.main", *argv], cwd=self.root, capture_output=True,
                              text=True, timeout=timeout_s, env=_env(self.root))

    def start(self, node_id: int, listen_timeout_s: float) -> float:
        """Spawns the controller; returns seconds from spawn to its listener accepting."""
        node = self.nodes[node_id]
        node.log_handle = open(node.log_path, "ab")
        node.spawned_at = time.time()
        started = time.monotonic()
        node.process = subprocess.Popen(
            [common.PYTHON, "-m", "cli.main", "controller", "--config", str(node.config_path)],
            stdout=subprocess.DEVNULL, stderr=node.log_handle, cwd=self.root, env=_env(self.root))
        deadline = started + listen_timeout_s
        while True:
            if node.process.poll() is not None:
                raise BenchError(f"controller {node_id} exited ({node.process.returncode}):\n"
                                 + node.log_path.read_text(errors="replace")[-3000:])
            try:
                with socket.create_connection((common.HOST, node.port), timeout=1.0):
                    return time.monotonic() - started
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"controller {node_id} did not listen within {listen_timeout_s} s")
            time.sleep(POLL_S)

    def stop(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.process is not None:
            common.stop(node.process)
            node.process = None
        if node.log_handle is not None:
            node.log_handle.close()
            node.log_handle = None

    def stop_all(self) -> None:
        for node_id in self.nodes:
            try:
                self.stop(node_id)
            except (subprocess.TimeoutExpired, OSError):
                process = self.nodes[node_id].process
                if process is not None:
                    process.kill()

    def check_alive(self) -> None:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is not None:
                raise BenchError(f"controller {node.node_id} exited ({node.process.returncode}):\n"
                                 + node.log_path.read_text(errors="replace")[-3000:])

    def rss_mib(self, node_id: int) -> float | None:
        process = self.nodes[node_id].process
        if process is None:
            return None
        try:
            with open(f"/proc/{process.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --------------------------------------------------------------------------
# log events (the controllers' JSON lines on stderr)
# --------------------------------------------------------------------------

def event_time(entry: dict) -> float:
    """The event's wall-clock time (structlog's ISO timestamp, UTC) as a time.time() value."""
    return datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()


def first_event_time(path: Path, name: str, start_byte: int = 0, accept=lambda entry: True) -> float | None:
    for entry in read_events(path, name, start_byte):
        if accept(entry):
            return event_time(entry)
    return None


# --------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------

def upsertions(names: list[str]) -> dict:
    return {"deletions": [], "upsertions": [
        {"name": name, "mechanism": SCRAM_SHA_256, "iterations": ITERATIONS, "salt": SALT,
         "salted_password": SALTED_PASSWORD} for name in names]}


def credential_record_bytes(name: str) -> int:
    """Bytes one UserScramCredentialRecord for `name` adds to the replayed total (the value
    the snapshot interval counts)."""
    from protocol.records import encode_metadata_record
    from server.controller.scram_commands import credential_record
    from server.security import scram
    from server.security.model import ScramMechanism

    credential = scram.credential_from_salted_password(name, ScramMechanism(SCRAM_SHA_256), SALT, SALTED_PASSWORD,
                                                       ITERATIONS)
    return len(encode_metadata_record(credential_record(credential)))


def write_users(conn: common.Conn, names: list[str]) -> float:
    """One AlterUserScramCredentials; ms from send to answer. Raises on any refused user."""
    reply, elapsed_ns = conn.call(ALTER_USER_SCRAM_CREDENTIALS, 0, upsertions(names))
    refused = [(r.user, r.error_code, r.error_message) for r in reply.results if r.error_code]
    if refused:
        raise BenchError(f"{len(refused)} of {len(names)} upsertions refused, e.g. {refused[:3]}")
    return elapsed_ns / 1e6


@dataclass(frozen=True)
class QuorumView:
    leader_id: int
    high_watermark: int
    voters: dict[int, int]  # id -> log end offset
    observers: dict[int, tuple[int, int]]  # id -> (log end offset, last caught-up timestamp)


def describe(port: int) -> QuorumView | None:
    with common.Conn(port, "bench-dynamic-quorum", timeout_s=5.0) as conn:
        reply, _ = conn.call(DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, {
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    if reply.error_code != 0 or not reply.topics:
        return None
    partition = reply.topics[0].partitions[0]
    if partition.error_code != 0:
        return None
    return QuorumView(partition.leader_id, partition.high_watermark,
                      {v.replica_id: v.log_end_offset for v in partition.current_voters},
                      {o.replica_id: (o.log_end_offset, o.last_caught_up_timestamp) for o in partition.observers})


def poll(what: str, probe, timeout_s: float, cluster: Cluster, evidence=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while True:
        cluster.check_alive()
        try:
            value = probe()
        except OSError:
            value = None
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s:g} s waiting for {what}{evidence()}")
        time.sleep(POLL_S)


# --------------------------------------------------------------------------
# the writer
# --------------------------------------------------------------------------

@dataclass
class Write:
    started: float  # time.time()
    ms: float
    error: str | None = None


class Writer(threading.Thread):
    """One SCRAM credential at a time to the leader, each timed; bounded in count and time."""

    def __init__(self, port: int, max_s: float) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.max_s = max_s
        self.writes: list[Write] = []
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.max_s
        conn = None
        index = 0
        while not self.done.is_set() and index < WRITER_MAX_WRITES and time.monotonic() < deadline:
            started = time.time()
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = common.Conn(self.port, "bench-writer", timeout_s=30.0)
                ms = write_users(conn, [f"writer-{index:07d}"])
                self.writes.append(Write(started, ms))
            except (OSError, BenchError, RuntimeError) as exc:
                self.writes.append(Write(started, (time.perf_counter() - t0) * 1000, repr(exc)[:200]))
                if conn is not None:
                    conn.close()
                    conn = None
                time.sleep(0.05)  # a refused or broken connection: do not spin
            index += 1
        if conn is not None:
            conn.close()


def phase_stats(writes: list[Write], start: float, end: float) -> dict:
    """Writes that overlap [start, end] (wall clock)."""
    chosen = [w for w in writes if w.started <= end and w.started + w.ms / 1000 >= start]
    ok = [w.ms for w in chosen if w.error is None]
    return {"writes": len(chosen), "errors": len(chosen) - len(ok),
            "p50_ms": round(common.percentile(ok, 0.50), 2) if ok else None,
            "p99_ms": round(common.percentile(ok, 0.99), 2) if ok else None,
            "max_ms": round(max(ok), 2) if ok else None,
            "first_errors": [w.error for w in chosen if w.error][:3]}


# --------------------------------------------------------------------------
# one size
# --------------------------------------------------------------------------

def batch_size_for(records: int, wanted: int) -> int:
    """The largest batch <= wanted that divides records/2 (the snapshot lands on a batch end)."""
    half = records // 2
    for size in range(min(wanted, max(1, half)), 0, -1):
        if half % size == 0:
            return size
    return 1


def run_size(records: int, args, base: Path) -> dict:
    load_start = os.getloadavg()
    batch = batch_size_for(records, args.batch)
    names = [f"user-{i:09d}" for i in range(records)]
    record_bytes = credential_record_bytes(names[0])
    # Snapshots at N/2 and N (see the docstring): one request is one batch, and with N/2 a
    # multiple of the batch, the second crossing lands on the fill's last batch.
    snapshot_bytes = (records // 2) * record_bytes
    base.mkdir(parents=True, exist_ok=True)
    result: dict = {"records": records, "batch": batch, "record_bytes": record_bytes,
                    "snapshot_interval_bytes": snapshot_bytes, "load_average_start": load_start}
    cluster = Cluster(base, snapshot_bytes, args.root)
    leader, observer = cluster.nodes[1], cluster.nodes[2]
    writer = None
    try:
        cluster.start(1, 60)
        def active():
            with common.Conn(leader.port, "bench-find-leader", timeout_s=5.0) as conn:
                return True if common.is_active_controller(conn) else None
        poll("controller 1 to be the active controller", active, 60, cluster)

        # -- fill -------------------------------------------------------------------------
        fill_started = time.monotonic()
        request_ms = []
        with common.Conn(leader.port, "bench-fill", timeout_s=120.0) as conn:
            for start in range(0, records, batch):
                if time.monotonic() - fill_started > args.fill_timeout_s:
                    raise BenchError(f"fill exceeded {args.fill_timeout_s} s after {start} records")
                request_ms.append(write_users(conn, names[start:start + batch]))
        fill_s = time.monotonic() - fill_started
        view = poll("the fill to commit", lambda: describe(leader.port), 30, cluster)
        fill_end = view.high_watermark
        # The second snapshot lands on the fill's end; wait for it and the log before it to go.
        def snapshot_at_end():
            taken = read_events(leader.log_path, "controller.snapshot_taken")
            ends = [entry["end_offset"] for entry in taken]
            return max(ends) if ends and max(ends) >= fill_end - 1 else None
        snapshot_end = poll("a snapshot at the end of the fill", snapshot_at_end, 600, cluster,
                            lambda: f" (snapshots: {[e['end_offset'] for e in read_events(leader.log_path, 'controller.snapshot_taken')]}, fill end {fill_end})")
        snapshot_wait_s = time.monotonic() - fill_started - fill_s
        snapshots = sorted(leader.metadata_dir.glob("*.checkpoint"))
        result.update({
            "fill_s": round(fill_s, 2), "fill_records_per_s": round(records / fill_s),
            "fill_request_p50_ms": round(common.percentile(request_ms, 0.5), 1),
            "fill_request_max_ms": round(max(request_ms), 1),
            "snapshot_wait_after_fill_s": round(snapshot_wait_s, 2),
            "fill_end_offset": fill_end, "snapshot_end_offset": snapshot_end,
            "snapshots_taken": len(read_events(leader.log_path, "controller.snapshot_taken")),
            "snapshot_file_bytes": snapshots[-1].stat().st_size if snapshots else None,
            "leader_log_bytes": sum(p.stat().st_size for p in leader.metadata_dir.glob("*.log")),
            "leader_rss_mib_after_fill": cluster.rss_mib(1),
        })

        # -- writes before ------------------------------------------------------------------
        writer = Writer(leader.port, args.timeout_s)
        writer.start()
        time.sleep(BEFORE_S)  # the quiet phase is a span of time: nothing to wait on

        # -- catch-up as an observer ---------------------------------------------------------
        catch_start = time.time()
        listen_s = cluster.start(2, 60)

        def caught_up():
            view = describe(leader.port)
            if view is None or 2 not in view.observers:
                return None
            end, caught_ms = view.observers[2]
            return view if end >= view.high_watermark and caught_ms > 0 else None

        def observer_evidence():
            refused = read_events(observer.log_path, "raft.response_refused")
            return f"; node 2 refused {len(refused)} responses, last: {refused[-1]['reason'][:200]}" if refused else ""

        poll("node 2 to catch up as an observer", caught_up, args.catch_up_timeout_s, cluster, observer_evidence)
        caught_at = time.time()
        if args.wait_image_loaded:
            poll("node 2 to load the snapshot into its image",
                 lambda: first_event_time(observer.log_path, "controller.recovered_from_snapshot"),
                 args.catch_up_timeout_s, cluster)
        follower_at = first_event_time(observer.log_path, "raft.became_follower")
        installed_at = first_event_time(observer.log_path, "raft.snapshot_installed")
        installed = read_events(observer.log_path, "raft.snapshot_installed")
        received = read_events(observer.log_path, "storage.snapshot_received")
        result["catch_up"] = {
            "spawn_to_listening_s": round(listen_s, 3),
            "spawn_to_leader_known_s": _span(catch_start, follower_at),
            "spawn_to_snapshot_installed_s": _span(catch_start, installed_at),
            "snapshot_installed_to_caught_up_s": _span(installed_at, caught_at),
            "spawn_to_caught_up_s": round(caught_at - catch_start, 3),
            "snapshot_installed_end_offset": installed[0].get("end_offset") if installed else None,
            "snapshot_bytes_fetched": received[0].get("size_bytes") if received else None,
            "spawn_to_snapshot_received_s": _span(catch_start, event_time(received[0]) if received else None),
            "observer_responses_refused": len(read_events(observer.log_path, "raft.response_refused")),
        }
        if installed_at is None:
            raise BenchError("node 2 caught up without installing a snapshot: the leader's log was not compacted")

        # -- the add ---------------------------------------------------------------------------
        loaded_before_add = first_event_time(observer.log_path, "controller.recovered_from_snapshot") is not None
        leader_mark = leader.log_path.stat().st_size
        add_start = time.time()
        t0 = time.monotonic()
        adding = subprocess.Popen(
            [common.PYTHON, "-m", "cli.main", "metadata-quorum", "--bootstrap-controller", leader.address,
             "--command-config", str(observer.config_path), "add-controller"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=args.root, env=_env(args.root))

        def counted():
            view = describe(leader.port)
            if view is None or 2 not in view.voters:
                return None
            return view if view.voters[2] == view.voters.get(view.leader_id) else None

        # A failed add-controller is recorded, not fatal: its VotersRecord may be in the log
        # already (the leader answers REQUEST_TIMED_OUT when the commit takes longer than its
        # request timeout), and what the writer sees until it commits is the point here.
        poll("node 2 counted among the voters", counted, args.add_timeout_s, cluster,
             lambda: "; add-controller said: " + (adding.stdout.read() if adding.poll() is not None else "(running)"))
        counted_at = time.time()
        counted_s = time.monotonic() - t0
        out, err = adding.communicate(timeout=CLI_TIMEOUT_S)
        cli_s = time.monotonic() - t0
        appended_at = first_event_time(leader.log_path, "raft.voters_changed", leader_mark,
                                       lambda e: 2 in e.get("voters", ()))
        committed_at = first_event_time(leader.log_path, "raft.voter_change_committed", leader_mark)
        voter_on_2 = first_event_time(observer.log_path, "raft.voters_changed", 0,
                                      lambda e: e.get("is_voter") is True)
        result["add"] = {
            "cli_wall_s": round(cli_s, 3),
            "cli_start_to_counted_s": round(counted_s, 3),
            "cli_start_to_voters_record_appended_s": _span(add_start, appended_at),
            "voters_record_appended_to_committed_ms": _ms(appended_at, committed_at),
            "node2_first_fetch_to_voter_s": _span(follower_at, voter_on_2),
            "cli_output": out.strip(),
            "cli_exit_code": adding.returncode,
            "cli_error": (out + err).strip()[-500:] if adding.returncode != 0 else None,
            "node2_image_loaded_before_add": loaded_before_add,
        }
        # "After" runs until the new voter has its image too (loading a large snapshot can
        # hold up its fetches, and so every commit), then AFTER_S more.
        loaded_at = poll("node 2 to load the snapshot into its image",
                         lambda: first_event_time(observer.log_path, "controller.recovered_from_snapshot"),
                         args.catch_up_timeout_s, cluster)
        time.sleep(AFTER_S)  # a span of writes to measure: nothing to wait on
        after_end = time.time()
        writer.done.set()
        writer.join(60)
        slowest = sorted((w for w in writer.writes if w.started >= catch_start), key=lambda w: -w.ms)[:5]
        result["slowest_writes"] = [{"start_after_add_s": round(w.started - add_start, 3), "ms": round(w.ms, 1),
                                     "error": w.error} for w in slowest]
        result["writes"] = {
            "before": phase_stats(writer.writes, 0, catch_start),
            "catch_up": phase_stats(writer.writes, catch_start, caught_at),
            "add": phase_stats(writer.writes, add_start, counted_at),
            "after": phase_stats(writer.writes, counted_at, after_end),
        }
        result["catch_up"]["spawn_to_image_loaded_s"] = _span(catch_start, loaded_at)
        result["catch_up"]["snapshot_installed_to_image_loaded_s"] = _span(installed_at, loaded_at)
        result["rss_mib"] = {"leader": cluster.rss_mib(1), "new_voter": cluster.rss_mib(2)}

        # -- restart of the new voter over its snapshot -----------------------------------------
        if not args.no_restart:
            cluster.stop(2)
            mark = observer.log_path.stat().st_size
            restart_at = time.time()
            listen_again_s = cluster.start(2, 120)

            def caught_up_again():
                view = describe(leader.port)
                return view if view and view.voters.get(2) == view.voters.get(view.leader_id) else None

            poll("node 2 to catch up after its restart", caught_up_again, args.catch_up_timeout_s, cluster)
            recovered_at = first_event_time(observer.log_path, "controller.recovered", mark)
            result["restart"] = {"spawn_to_listening_s": round(listen_again_s, 3),
                                 "spawn_to_image_recovered_s": _span(restart_at, recovered_at),
                                 "spawn_to_caught_up_s": round(time.time() - restart_at, 3)}
        return result
    except BenchError as exc:
        result["error"] = str(exc)[:3000]
        return result
    finally:
        if writer is not None:
            writer.done.set()
            writer.join(60)
        cluster.stop_all()
        result["load_average_end"] = os.getloadavg()


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000, 1)


# --------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------

def print_results(results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r]
    for r in results:
        if "error" in r:
            print(f"\n{r['records']:,} records: FAILED: {r['error']}")
    if not ok:
        return
    print("\nSet-up and catch-up (s unless noted):\n")
    print(common.markdown_table(
        ["records", "fill s", "records/s", "snapshot MiB", "spawn→listening", "→leader known",
         "→snapshot received", "→installed", "installed→caught up", "spawn→caught up", "spawn→image loaded"],
        [[f"{r['records']:,}", r["fill_s"], f"{r['fill_records_per_s']:,}",
          _mib(r["snapshot_file_bytes"]), *(r["catch_up"][k] for k in (
              "spawn_to_listening_s", "spawn_to_leader_known_s", "spawn_to_snapshot_received_s",
              "spawn_to_snapshot_installed_s", "snapshot_installed_to_caught_up_s", "spawn_to_caught_up_s",
              "spawn_to_image_loaded_s"))]
         for r in ok]))
    print("\nThe add, once caught up:\n")
    print(common.markdown_table(
        ["records", "image loaded before add", "add-controller wall s", "exit", "start→counted s",
         "start→VotersRecord appended s", "appended→committed ms", "node 2 first fetch→voter s"],
        [[f"{r['records']:,}", r["add"]["node2_image_loaded_before_add"], r["add"]["cli_wall_s"],
          r["add"]["cli_exit_code"], *(r["add"][k] for k in (
            "cli_start_to_counted_s", "cli_start_to_voters_record_appended_s",
            "voters_record_appended_to_committed_ms", "node2_first_fetch_to_voter_s"))] for r in ok]))
    for r in ok:
        if r["add"]["cli_error"]:
            print(f"\n{r['records']:,} records: add-controller said: {r['add']['cli_error']}")
    print("\nThe writer (one SCRAM upsert at a time to the leader), ms:\n")
    rows = []
    for r in ok:
        for phase in ("before", "catch_up", "add", "after"):
            s = r["writes"][phase]
            rows.append([f"{r['records']:,}", phase, s["writes"], s["errors"], s["p50_ms"], s["p99_ms"], s["max_ms"]])
    print(common.markdown_table(["records", "phase", "writes", "errors", "p50", "p99", "max"], rows))
    if any("restart" in r for r in ok):
        print("\nRestart of the new voter (s):\n")
        print(common.markdown_table(
            ["records", "spawn→listening", "spawn→image recovered", "spawn→caught up", "RSS leader MiB",
             "RSS new voter MiB"],
            [[f"{r['records']:,}", r["restart"]["spawn_to_listening_s"], r["restart"]["spawn_to_image_recovered_s"],
              r["restart"]["spawn_to_caught_up_s"], _round(r["rss_mib"]["leader"]), _round(r["rss_mib"]["new_voter"])]
             for r in ok if "restart" in r]))


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.1f}"


def _round(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000,1000000",
                        help="comma-separated metadata log sizes, in records (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=2000, help="SCRAM upsertions per fill request (default: %(default)s)")
    parser.add_argument("--dir", help="work directory (default: a new one under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    parser.add_argument("--root", type=Path, default=common.REPO,
                        help="the kraftwerk tree whose controllers and tools run (default: this one)")
    parser.add_argument("--fill-timeout-s", type=float, default=1800.0)
    parser.add_argument("--catch-up-timeout-s", type=float, default=600.0)
    parser.add_argument("--add-timeout-s", type=float, default=120.0)
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="bound on the writer per size")
    parser.add_argument("--no-restart", action="store_true", help="skip restarting the new voter")
    parser.add_argument("--wait-image-loaded", action="store_true",
                        help="add the controller only once it has also loaded the snapshot into its image "
                             "(default: as soon as DescribeQuorum shows it caught up, as an operator sees it)")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if any(size < 20 for size in sizes):
        parser.error("--sizes: at least 20 records per size")
    if args.batch < 1:
        parser.error("--batch must be positive")
    args.root = args.root.resolve()
    work = Path(args.dir) if args.dir else common.work_dir(None, "bench-dynamic-quorum-")
    work.mkdir(parents=True, exist_ok=True)
    print(f"    {common.command_line()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; work dir {work}; "
          f"controllers from {args.root}")
    results = []
    try:
        for size in sizes:
            result = run_size(size, args, work / f"n{size}")
            results.append(result)
            print(f"{size:,} records: {json.dumps(result)}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_results(results)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": common.command_line(), "results": results}, indent=2))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
