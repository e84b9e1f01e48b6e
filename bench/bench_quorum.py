"""A 3-voter Raft quorum of real processes: commit latency, throughput, failover.

Three measurements, each against freshly formatted voters on 127.0.0.1
(cli/local_cluster.py: real `kraftwerk controller` processes, fsync on),
each printing its command line and a markdown table:

  latency     UpdateFeatures v1 sent straight to the leader, one at a time,
              interleaved rounds of several kinds: `commit` (group.version
              0 <-> 1, so every request commits exactly one FeatureLevelRecord
              through the quorum), `commit_mv` (metadata.version 3.8-IV0 <->
              3.9-IV0: one record plus the KIP-778 snapshot every node writes
              before a metadata.version change),
              `validate` (validate_only, through the controller loop, nothing
              written), and the floor's two parts measured in the same run:
              `fsync` (os.write + os.fsync of a batch of the committed size in
              the directory that holds the voters' logs) and `rtt` (an
              ApiVersions v3 round trip to the leader). floor = fsync p50 + rtt
              p50. Also `skeleton`: one record committed by
              bench/raft_skeleton.py, three bare trio processes doing the same
              exchange with the same fsyncs and nothing else (what Python/trio
              costs before any logic). At the end the leader's finalized-features
              epoch must have advanced by exactly the number of commits and every
              follower must have replayed the same epoch and levels.
  throughput  bench_group_commit.py's cells with `--controllers 3`: C closed-loop
              proposers sending BrokerRegistration v4 (new broker id each) to the
              leader, group commit on/off; records/s and the leader's batches
              (= appends = fsyncs) per second, read back from its log.
  failover    kill -9 of the leader, then the first committed write: poll
              Metadata on the survivors for the active controller and send it
              an UpdateFeatures commit, retrying NOT_CONTROLLER, every 5 ms.
              Reported per run: kill -> a survivor names a new leader, and
              kill -> the first UpdateFeatures that came back committed. The
              killed node is restarted and must catch up (DescribeQuorum: every
              voter at the high watermark) before the next run, so there are
              always three voters. Bounded by --runs and --budget-s.

Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_quorum.py latency [--iterations 1000]
     .venv/bin/python bench/bench_quorum.py throughput [--concurrency 1,4,16,64] [--duration-s 3]
     .venv/bin/python bench/bench_quorum.py failover [--runs 20] [--budget-s 180]
            [--override controller.quorum.fetch.timeout.ms=1000]
Every subcommand takes --dir PATH (parent of the temporary directory: the disk measured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
from protocol.metadata_records import FEATURE_LEVEL_RECORD  # noqa: E402
from protocol.record_batch import encode_batch  # noqa: E402
from protocol.records import encode_metadata_record, record  # noqa: E402

VOTERS = 3
UPDATE_FEATURES_KEY, UPDATE_FEATURES_VERSION = 57, 1  # ValidateOnly and UpgradeType exist from v1
API_VERSIONS_KEY, API_VERSIONS_VERSION = 18, 3
UPGRADE, SAFE_DOWNGRADE = 1, 2
LEVEL_3_8_IV0, LEVEL_3_9_IV0 = 20, 21
METADATA_VERSION, GROUP_VERSION = "metadata.version", "group.version"
ROUNDS = 10
WARMUP_PER_KIND = 20
REPLAY_TIMEOUT_S = 10.0
FAILOVER_RUN_TIMEOUT_S = 20.0
CATCH_UP_TIMEOUT_S = 20.0
POLL_S = 0.005  # failover polling: nothing on the survivors to wait on but asking again
DEFAULT_ELECTION_TIMEOUT_MS = 1000  # ServerConfig defaults (Kafka's)
DEFAULT_FETCH_TIMEOUT_MS = 2000


# --------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------

def update_feature(conn: common.Conn, feature: str, level: int, upgrade_type: int, validate_only: bool):
    """(top-level or per-feature error code, error message, elapsed ns)."""
    body = {
        "timeout_ms": 30_000,
        "feature_updates": [{"feature": feature, "max_version_level": level,
                             "allow_downgrade": upgrade_type != UPGRADE, "upgrade_type": upgrade_type}],
        "validate_only": validate_only,
    }
    reply, elapsed_ns = conn.call(UPDATE_FEATURES_KEY, UPDATE_FEATURES_VERSION, body)
    for code, message in [(reply.error_code, reply.error_message)] + [
            (r.error_code, r.error_message) for r in reply.results or []]:
        if code:
            return code, message, elapsed_ns
    return 0, None, elapsed_ns


def finalized(conn: common.Conn) -> tuple[int, dict[str, int]]:
    """(finalized features epoch, {feature: level}) from ApiVersions v3."""
    reply, _ = conn.call(API_VERSIONS_KEY, API_VERSIONS_VERSION,
                         {"client_software_name": "bench-quorum", "client_software_version": "1"})
    return reply.finalized_features_epoch, {f.name: f.max_version_level for f in reply.finalized_features}


class Flip:
    """One feature moved between two levels, one record per commit."""

    def __init__(self, feature: str, low: int, high: int, level: int) -> None:
        self.feature, self.low, self.high, self.level = feature, low, high, level

    def target(self) -> tuple[int, int]:
        return (self.high, UPGRADE) if self.level == self.low else (self.low, SAFE_DOWNGRADE)

    def commit(self, conn: common.Conn) -> int:
        """Moves the feature to its other level; elapsed ns."""
        level, upgrade_type = self.target()
        code, message, elapsed = update_feature(conn, self.feature, level, upgrade_type, False)
        if code:
            raise RuntimeError(f"UpdateFeatures {self.feature}={level} failed: {code} {message}")
        self.level = level
        return elapsed

    def validate(self, conn: common.Conn) -> int:
        level, upgrade_type = self.target()
        code, message, elapsed = update_feature(conn, self.feature, level, upgrade_type, True)
        if code:
            raise RuntimeError(f"validate-only UpdateFeatures {self.feature}={level} failed: {code} {message}")
        return elapsed


@contextmanager
def skeleton_quorum(work: Path, followers: int = VOTERS - 1):
    """bench/raft_skeleton.py's leader and followers as processes; yields a function that
    commits one record through them and returns the elapsed ns."""
    directory = work / "skeleton"
    directory.mkdir()
    port_file = directory / "leader.port"
    log_path = directory / "skeleton.log"
    script = str(Path(__file__).resolve().parent / "raft_skeleton.py")
    with ExitStack() as stack, open(log_path, "ab") as log:
        leader = subprocess.Popen([common.PYTHON, script, "leader", "--dir", str(directory), "--followers",
                                   str(followers), "--port-file", str(port_file)], stdout=log, stderr=log)
        stack.callback(common.stop, leader)
        port = common._wait_port_file(leader, port_file, "raft skeleton leader", log_path)
        for _ in range(followers):
            follower = subprocess.Popen([common.PYTHON, script, "follower", "--dir", str(directory), "--port",
                                         str(port)], stdout=log, stderr=log)
            stack.callback(common.stop, follower)
        sock = stack.enter_context(socket.create_connection((common.HOST, port), timeout=common.SOCKET_TIMEOUT_S))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(len(b"C").to_bytes(4, "big") + b"C")
        request = len(b"r" * 88).to_bytes(4, "big") + b"r" * 88  # a FeatureLevelRecord's size

        def commit() -> int:
            started = time.perf_counter_ns()
            sock.sendall(request)
            common.recv_exact(sock, 12)
            return time.perf_counter_ns() - started

        yield commit


def commit_flip(conn: common.Conn, level: int) -> tuple[int, int, str | None, int]:
    """Moves metadata.version to the other level, reporting errors instead of raising
    (failover retries NOT_CONTROLLER). (new level, error, message, ns)."""
    target, upgrade_type = (LEVEL_3_9_IV0, UPGRADE) if level == LEVEL_3_8_IV0 else (LEVEL_3_8_IV0, SAFE_DOWNGRADE)
    code, message, elapsed = update_feature(conn, METADATA_VERSION, target, upgrade_type, False)
    return (target if code == 0 else level), code, message, elapsed


def us(samples_ns: list[int], fraction: float) -> float:
    return common.percentile(samples_ns, fraction) / 1000.0


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    overrides = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--override expects key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


# --------------------------------------------------------------------------
# 1. commit latency
# --------------------------------------------------------------------------

def run_latency(args) -> int:
    load_start = os.getloadavg()
    per_round = max(1, args.iterations // ROUNDS)
    mv_per_round = max(1, args.mv_iterations // ROUNDS)
    overrides = parse_overrides(args.override)
    sample_batch = encode_batch(0, 1, [encode_metadata_record(record(
        FEATURE_LEVEL_RECORD, {"name": GROUP_VERSION, "feature_level": 1}))], 1_700_000_000_000)
    work = common.work_dir(args.dir, "bench_quorum_latency_")
    samples: dict[str, list[int]] = {"fsync": [], "rtt": [], "skeleton": [], "validate": [], "commit": [],
                                     "commit_mv": []}
    commits = 0
    try:
        profile_dir = Path(args.profile_dir).resolve() if args.profile_dir else None
        if profile_dir:
            profile_dir.mkdir(parents=True, exist_ok=True)
        with common.kraftwerk_quorum(work, VOTERS, "3.8-IV0", overrides, profile_dir=profile_dir) as (quorum, leader), \
                skeleton_quorum(work) as skeleton_commit:
            print(f"leader: controller {leader}", file=sys.stderr)
            conn = common.Conn(quorum.port(leader), "bench-quorum")
            raw_fd = os.open(work / "fsync-floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                epoch_before, levels = finalized(conn)
                if levels.get(METADATA_VERSION) != LEVEL_3_8_IV0 or levels.get(GROUP_VERSION, 0) != 0:
                    raise RuntimeError(f"expected metadata.version {LEVEL_3_8_IV0} and no group.version after "
                                       f"format, got {levels}")
                group = Flip(GROUP_VERSION, 0, 1, 0)
                mv = Flip(METADATA_VERSION, LEVEL_3_8_IV0, LEVEL_3_9_IV0, LEVEL_3_8_IV0)

                def rtt(out):
                    _, elapsed = conn.call(API_VERSIONS_KEY, API_VERSIONS_VERSION,
                                           {"client_software_name": "bench-quorum", "client_software_version": "1"})
                    if out is not None:
                        out.append(elapsed)

                def validate(out):
                    elapsed = group.validate(conn)
                    if out is not None:
                        out.append(elapsed)

                def committing(flip: Flip):
                    def commit(out):
                        nonlocal commits
                        elapsed = flip.commit(conn)
                        commits += 1
                        if out is not None:
                            out.append(elapsed)
                    return commit

                def fsync(out):
                    started = time.perf_counter_ns()
                    os.write(raw_fd, sample_batch)
                    os.fsync(raw_fd)
                    if out is not None:
                        out.append(time.perf_counter_ns() - started)

                def skeleton(out):
                    elapsed = skeleton_commit()
                    if out is not None:
                        out.append(elapsed)

                kinds = {"fsync": (fsync, per_round), "rtt": (rtt, per_round), "skeleton": (skeleton, per_round),
                         "validate": (validate, per_round),
                         "commit": (committing(group), per_round), "commit_mv": (committing(mv), mv_per_round)}
                for run, _ in kinds.values():
                    for _ in range(WARMUP_PER_KIND):
                        run(None)
                for _ in range(ROUNDS):
                    for name, (run, count) in kinds.items():
                        for _ in range(count):
                            run(samples[name])
                epoch_after, final_levels = finalized(conn)
                expected = {GROUP_VERSION: group.level, METADATA_VERSION: mv.level}
                if any(final_levels.get(f, 0) != level for f, level in expected.items()) \
                        or epoch_after - epoch_before != commits:
                    raise RuntimeError(f"expected {commits} committed records (epoch {epoch_before} -> "
                                       f"{epoch_before + commits}, levels {expected}); got epoch {epoch_after}, "
                                       f"levels {final_levels}")
                followers_checked = check_followers_replayed(quorum, leader, (epoch_after, final_levels))
            finally:
                os.close(raw_fd)
                conn.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    load_end = os.getloadavg()
    print(f"$ {common.command_line()}")
    print(f"load average (1/5/15 min) at start {' '.join(f'{x:.2f}' for x in load_start)}, "
          f"at end {' '.join(f'{x:.2f}' for x in load_end)}")
    print(f"UpdateFeatures v1 to the leader of a {VOTERS}-voter quorum (real processes, fsync on, 127.0.0.1), one "
          f"request at a time over one connection; {per_round * ROUNDS} samples per kind ({mv_per_round * ROUNDS} "
          f"metadata.version commits) in {ROUNDS} interleaved rounds after {WARMUP_PER_KIND} warm-up each; "
          f"{commits} commits verified on the leader (finalized epoch advanced by {commits}) and on "
          f"{followers_checked} followers (same epoch and levels replayed). `commit` flips group.version 0 <-> 1 "
          f"(one FeatureLevelRecord); `commit_mv` flips metadata.version 3.8-IV0 <-> 3.9-IV0 (one record, plus the "
          f"KIP-778 snapshot every node writes before a metadata.version change). fsync writes "
          f"{len(sample_batch)} B (one FeatureLevelRecord batch) in the voters' parent directory; rtt = "
          f"ApiVersions v3 to the leader; skeleton = one 88-byte record committed by bench/raft_skeleton.py's "
          f"three bare trio processes (the same messages and fsyncs, no codec or logic). "
          f"Overrides: {overrides or 'none'}. {os.cpu_count()} CPUs shared by the "
          f"client and three controllers, nothing pinned.\n")
    f50, r50 = us(samples["fsync"], 0.50), us(samples["rtt"], 0.50)
    f99, r99 = us(samples["fsync"], 0.99), us(samples["rtt"], 0.99)
    floor50, floor99 = f50 + r50, f99 + r99
    rows = []
    for name, label in (("fsync", "fsync (os.write + os.fsync)"), ("rtt", "loopback round trip (ApiVersions)"),
                        ("skeleton", "the same commit pattern in bare trio (bench/raft_skeleton.py)"),
                        ("validate", "UpdateFeatures validate_only=true"),
                        ("commit", "UpdateFeatures committed by the quorum (group.version, 1 record)"),
                        ("commit_mv", "UpdateFeatures metadata.version (1 record + KIP-778 snapshot)")):
        p50, p99 = us(samples[name], 0.50), us(samples[name], 0.99)
        rows.append([label, len(samples[name]), f"{p50:,.0f}", f"{p99:,.0f}", f"{p50 / floor50:.2f}",
                     f"{p99 / floor99:.2f}"])
    rows.append(["floor = fsync + rtt", "-", f"{floor50:,.0f}", f"{floor99:,.0f}", "1.00", "1.00"])
    print(common.markdown_table(["kind", "samples", "p50 µs", "p99 µs", "p50 / floor p50", "p99 / floor p99"], rows))
    c50 = us(samples["commit"], 0.50)
    verdict = "met" if c50 <= 3 * floor50 else "NOT met"
    s50 = us(samples["skeleton"], 0.50)
    print(f"\ncommitted p50 / floor p50 = {c50 / floor50:.2f} (goal <= 3: {verdict}); committed p50 - validate "
          f"p50 = {c50 - us(samples['validate'], 0.50):,.0f} µs (what replication + durability add); bare-trio "
          f"skeleton p50 / floor p50 = {s50 / floor50:.2f}, committed p50 / skeleton p50 = {c50 / s50:.2f}.")
    if args.json:
        kinds = {name: {"samples": len(values), "p50_us": us(values, 0.50), "p99_us": us(values, 0.99)}
                 for name, values in samples.items()}
        Path(args.json).write_text(json.dumps({
            "load_start": load_start, "load_end": load_end, "kinds": kinds, "commits_verified": commits,
            "followers_checked": followers_checked, "floor_p50_us": floor50, "floor_p99_us": floor99,
            "commit_p50_over_floor": c50 / floor50, "commit_p50_over_skeleton": c50 / s50}, indent=2))
    return 0


def check_followers_replayed(quorum: common.Quorum, leader: int, expected: tuple[int, dict[str, int]]) -> int:
    """Every follower replays the leader's last commit within REPLAY_TIMEOUT_S; returns how many were checked."""
    checked = 0
    for node_id in quorum.alive():
        if node_id == leader:
            continue
        deadline = time.monotonic() + REPLAY_TIMEOUT_S
        with common.Conn(quorum.port(node_id), "bench-quorum-check") as conn:
            while True:
                seen = finalized(conn)
                if seen == expected:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"follower {node_id} shows (epoch, level) {seen}, leader {expected}")
                time.sleep(0.05)
        checked += 1
    return checked


# --------------------------------------------------------------------------
# 2. throughput (bench_group_commit.py against the quorum)
# --------------------------------------------------------------------------

def run_throughput(args) -> int:
    import bench_group_commit

    argv = ["--controllers", str(VOTERS), "--concurrency", args.concurrency, "--modes", args.modes,
            "--duration-s", str(args.duration_s), "--warmup-s", str(args.warmup_s)]
    if args.dir:
        argv += ["--dir", args.dir]
    return bench_group_commit.main(argv)


# --------------------------------------------------------------------------
# 3. failover
# --------------------------------------------------------------------------

class Survivors:
    """Open connections to the live nodes, reopened after an error, all with short timeouts."""

    def __init__(self, quorum: common.Quorum, node_ids: list[int]) -> None:
        self.quorum = quorum
        self.node_ids = node_ids
        self.conns: dict[int, common.Conn] = {}

    def conn(self, node_id: int) -> common.Conn:
        if node_id not in self.conns:
            self.conns[node_id] = common.Conn(self.quorum.port(node_id), "bench-quorum-failover", timeout_s=5.0)
        return self.conns[node_id]

    def drop(self, node_id: int) -> None:
        conn = self.conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node_id in list(self.conns):
            self.drop(node_id)


def one_failover(quorum: common.Quorum, leader: int, level: int) -> dict:
    survivors_ids = [n for n in quorum.alive() if n != leader]
    survivors = Survivors(quorum, survivors_ids)
    result = {"old_leader": leader, "elected_ms": None, "committed_ms": None, "new_leader": None,
              "not_controller": 0, "level": level}
    try:
        for node_id in survivors_ids:  # connect before the kill: only the failover is timed
            survivors.conn(node_id)
        started = time.perf_counter()
        quorum.kill(leader)
        deadline = started + FAILOVER_RUN_TIMEOUT_S
        while time.perf_counter() < deadline:
            for node_id in survivors_ids:
                try:
                    named = common.metadata_controller_id(survivors.conn(node_id))
                    if named not in survivors_ids:
                        continue
                    if result["elected_ms"] is None:
                        result["elected_ms"] = (time.perf_counter() - started) * 1000
                    new_level, code, message, _ = commit_flip(survivors.conn(named), result["level"])
                    if code == 0:
                        result["committed_ms"] = (time.perf_counter() - started) * 1000
                        result["new_leader"] = named
                        result["level"] = new_level
                        return result
                    if code == common.NOT_CONTROLLER:
                        result["not_controller"] += 1
                    else:  # e.g. the level moved under us: read it back and go on
                        result["level"] = finalized(survivors.conn(named))[1][METADATA_VERSION]
                except OSError:
                    survivors.drop(node_id)
            time.sleep(POLL_S)
        raise RuntimeError(f"no committed write within {FAILOVER_RUN_TIMEOUT_S} s of killing leader {leader}")
    finally:
        survivors.close()


def wait_caught_up(quorum: common.Quorum, leader: int) -> tuple[int, int]:
    """Until the leader's DescribeQuorum shows every voter at its high watermark; (epoch, high watermark)."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    with common.Conn(quorum.port(leader), "bench-quorum-catch-up") as conn:
        while True:
            part = common.describe_quorum(conn)
            if part is not None and part.leader_id == leader and len(part.current_voters) == VOTERS and all(
                    v.log_end_offset >= part.high_watermark for v in part.current_voters):
                return part.leader_epoch, part.high_watermark
            if time.monotonic() > deadline:
                raise RuntimeError(f"the voters did not catch up within {CATCH_UP_TIMEOUT_S} s: {part}")
            time.sleep(0.05)


def run_failover(args) -> int:
    overrides = parse_overrides(args.override)
    election_ms = int(overrides.get("controller.quorum.election.timeout.ms", DEFAULT_ELECTION_TIMEOUT_MS))
    fetch_ms = int(overrides.get("controller.quorum.fetch.timeout.ms", DEFAULT_FETCH_TIMEOUT_MS))
    work = common.work_dir(args.dir, "bench_quorum_failover_")
    runs: list[dict] = []
    budget_deadline = time.monotonic() + args.budget_s
    stopped_by_budget = False
    try:
        with common.kraftwerk_quorum(work, VOTERS, "3.8-IV0", overrides) as (quorum, leader):
            with common.Conn(quorum.port(leader), "bench-quorum") as conn:
                level = finalized(conn)[1][METADATA_VERSION]
            epoch, _ = wait_caught_up(quorum, leader)
            for _ in range(args.runs):
                if time.monotonic() > budget_deadline:
                    stopped_by_budget = True
                    break
                result = one_failover(quorum, leader, level)
                result["old_epoch"] = epoch
                level = result["level"]
                killed, leader = leader, result["new_leader"]
                quorum.start(killed)
                epoch, _ = wait_caught_up(quorum, leader)
                result["new_epoch"] = epoch
                runs.append(result)
            # Every committed flip is on every voter: the leader's level is the level we tracked.
            with common.Conn(quorum.port(leader), "bench-quorum") as conn:
                final = finalized(conn)
            if final[1][METADATA_VERSION] != level:
                raise RuntimeError(f"tracked metadata.version {level}, the leader has {final[1]}")
            followers_checked = check_followers_replayed(quorum, leader, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    committed = [r["committed_ms"] for r in runs]
    elected = [r["elected_ms"] for r in runs]
    print(f"$ {common.command_line()}")
    print(f"{VOTERS} voters (real processes, fsync on, 127.0.0.1); per run: kill -9 of the leader's process "
          f"group, then every {POLL_S * 1000:g} ms ask each survivor (Metadata v12) who the active controller is "
          f"and send it an UpdateFeatures commit (metadata.version flip), retrying NOT_CONTROLLER; the killed node "
          f"is restarted and caught up before the next run. {len(runs)} runs"
          f"{' (stopped by --budget-s)' if stopped_by_budget else ''}; final level checked on the leader and "
          f"{followers_checked} followers. controller.quorum.election.timeout.ms={election_ms} (randomised in "
          f"[{election_ms}, {2 * election_ms}) ms), controller.quorum.fetch.timeout.ms={fetch_ms}. Overrides: "
          f"{overrides or 'none'}.\n")
    rows = [[i + 1, r["old_leader"], r["new_leader"], f"{r['old_epoch']} -> {r['new_epoch']}",
             f"{r['elected_ms']:,.0f}", f"{r['committed_ms']:,.0f}", r["not_controller"]] for i, r in enumerate(runs)]
    print(common.markdown_table(["run", "killed", "new leader", "epoch", "kill -> new leader named ms",
                                 "kill -> first commit ms", "NOT_CONTROLLER replies"], rows))
    print()
    summary = []
    for label, values in (("kill -> new leader named", elected), ("kill -> first committed write", committed)):
        summary.append([label, len(values), f"{common.percentile(values, 0.5):,.0f}",
                        f"{common.percentile(values, 0.9):,.0f}", f"{min(values):,.0f}", f"{max(values):,.0f}",
                        f"{common.percentile(values, 0.5) / election_ms:.2f}",
                        f"{common.percentile(values, 0.5) / fetch_ms:.2f}"])
    print(common.markdown_table(["ms", "runs", "median", "p90", "min", "max", "median / election timeout",
                                 "median / fetch timeout"], summary))
    median = common.percentile(committed, 0.5)
    verdict = "met" if median < 2 * election_ms else "NOT met"
    print(f"\nmedian kill -> first committed write {median:,.0f} ms vs 2 x election timeout {2 * election_ms} ms: "
          f"{verdict}. A follower notices a dead leader only when its fetch timeout ({fetch_ms} ms) passes "
          f"without a successful fetch, then runs (pre-)vote rounds; so expect roughly fetch timeout minus the "
          f"age of the last fetch, plus one election.")
    return 0


# --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="measure", required=True)
    lat = sub.add_parser("latency", help="UpdateFeatures commit latency vs fsync + round trip")
    lat.add_argument("--iterations", type=int, default=1000, help="timed samples per kind")
    lat.add_argument("--mv-iterations", type=int, default=200, help="timed metadata.version commits")
    lat.add_argument("--profile-dir", default=None,
                     help="run the controllers under cProfile, writing DIR/controller-<id>-<n>.prof")
    lat.add_argument("--json", default=None, help="also write the results to this file")
    thr = sub.add_parser("throughput", help="bench_group_commit.py cells against a 3-voter quorum")
    thr.add_argument("--concurrency", default="1,4,16,64")
    thr.add_argument("--modes", default="on,off")
    thr.add_argument("--duration-s", type=float, default=3.0)
    thr.add_argument("--warmup-s", type=float, default=0.5)
    fail = sub.add_parser("failover", help="kill -9 of the leader -> first committed write")
    fail.add_argument("--runs", type=int, default=20)
    fail.add_argument("--budget-s", type=float, default=180.0, help="no new run starts after this many seconds")
    for p in (lat, fail):
        p.add_argument("--override", action="append", help="key=value for every voter's properties (repeatable)")
    for p in (lat, thr, fail):
        p.add_argument("--dir", default=None, help="parent of the temporary work directory (the disk measured)")
    args = parser.parse_args(argv)
    os.chdir(common.REPO)  # local_cluster runs `python -m cli.main` from the current directory
    from server.observability import configure_logging
    configure_logging("warning")
    return {"latency": run_latency, "throughput": run_throughput, "failover": run_failover}[args.measure](args)


if __name__ == "__main__":
    raise SystemExit(main())
