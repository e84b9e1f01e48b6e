"""Failover through a broker: kill -9 of the controller leader -> the first write a
client gets acknowledged through a broker, beside the same through the controllers.

A real cluster (cli/upgrade_story.py LocalCluster: 3 controllers, 1 broker, fsync on,
127.0.0.1, Kafka's default quorum timeouts: election 1000 ms, fetch 2000 ms). Per run,
two clients start the moment the leader is killed, each on connections opened before
the kill:

  broker      CreateTopics v7 to the broker (which forwards it in an Envelope), again
              at once after any error until one is acknowledged;
  controller  CreateTopics v7 to each surviving controller in turn (NOT_CONTROLLER:
              the next one), every 5 ms, as bench_quorum.py's failover does.

Each creates a topic of its own per run, so "acknowledged" means committed by the new
leader. A TOPIC_ALREADY_EXISTS answer would mean a forward that was applied but
reported as a failure (the broker retried a lost answer non-idempotently): counted and
printed; the goal is none. The killed controller is restarted and must catch up
(DescribeQuorum: every voter at the high watermark) before the next run.

Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_broker_failover.py [--runs 20] [--budget-s 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as common  # noqa: E402

from cli.upgrade_story import LocalCluster  # noqa: E402

CREATE_TOPICS_KEY, CREATE_TOPICS_VERSION = 19, 7
NOT_CONTROLLER, TOPIC_ALREADY_EXISTS = 41, 36
ELECTION_TIMEOUT_MS = 1000
RUN_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 30.0
POLL_S = 0.005  # asking the controllers again: there is nothing on them to wait on
BROKER = 101


def create_topic(conn: common.Conn, name: str) -> int:
    reply, _ = conn.call(CREATE_TOPICS_KEY, CREATE_TOPICS_VERSION, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                    "configs": []}],
        "timeout_ms": 15_000, "validate_only": False})
    return reply.topics[0].error_code


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def quorum_view(cluster: LocalCluster, among: list[int]):
    for node_id in among:
        try:
            with common.Conn(port_of(cluster.address(node_id)), "bench-failover-probe", timeout_s=5.0) as conn:
                part = common.describe_quorum(conn)
            if part is not None and part.leader_id in among:
                return part
        except OSError:
            continue
    return None


def wait_caught_up(cluster: LocalCluster, controllers: list[int]) -> int:
    """The leader's id once every voter is at its high watermark."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline:
        part = quorum_view(cluster, controllers)
        if part is not None and len(part.current_voters) == len(controllers) and all(
                v.log_end_offset >= part.high_watermark for v in part.current_voters):
            return part.leader_id
        time.sleep(0.05)
    raise RuntimeError(f"the voters did not catch up within {CATCH_UP_TIMEOUT_S} s")


class Client(threading.Thread):
    """One client's first acknowledged write after `started`."""

    def __init__(self, cluster: LocalCluster, node_ids: list[int], name: str, started: threading.Event) -> None:
        super().__init__(daemon=True)
        self.cluster, self.node_ids, self.name, self.started = cluster, node_ids, name, started
        self.conns = {n: common.Conn(port_of(cluster.address(n)), "bench-failover", timeout_s=20.0)
                      for n in node_ids}
        self.acknowledged_s: float | None = None
        self.errors: dict[int, int] = {}
        self.already_exists = 0
        self.t0 = 0.0

    def run(self) -> None:
        self.started.wait()
        deadline = self.t0 + RUN_TIMEOUT_S
        while time.perf_counter() < deadline:
            for node_id in self.node_ids:
                try:
                    conn = self.conns.get(node_id) or common.Conn(
                        port_of(self.cluster.address(node_id)), "bench-failover", timeout_s=20.0)
                    self.conns[node_id] = conn
                    code = create_topic(conn, self.name)
                except OSError:
                    conn = self.conns.pop(node_id, None)
                    if conn is not None:
                        conn.close()
                    continue
                if code == 0:
                    self.acknowledged_s = time.perf_counter() - self.t0
                    return
                if code == TOPIC_ALREADY_EXISTS:
                    self.already_exists += 1
                    self.acknowledged_s = time.perf_counter() - self.t0
                    return
                self.errors[code] = self.errors.get(code, 0) + 1
            time.sleep(POLL_S)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def one_run(cluster: LocalCluster, run: int, leader: int, controllers: list[int]) -> dict:
    survivors = [n for n in controllers if n != leader]
    started = threading.Event()
    through_broker = Client(cluster, [BROKER], f"failover-broker-{run}", started)
    through_controllers = Client(cluster, survivors, f"failover-controller-{run}", started)
    try:
        through_broker.start()
        through_controllers.start()
        t0 = time.perf_counter()
        through_broker.t0 = through_controllers.t0 = t0
        cluster.stop(leader, kill=True)
        started.set()
        through_broker.join(RUN_TIMEOUT_S + 5)
        through_controllers.join(RUN_TIMEOUT_S + 5)
    finally:
        through_broker.close()
        through_controllers.close()
    if through_broker.acknowledged_s is None or through_controllers.acknowledged_s is None:
        raise RuntimeError(f"run {run}: no acknowledged write within {RUN_TIMEOUT_S} s "
                           f"(broker errors {through_broker.errors}, controller errors {through_controllers.errors})")
    return {"broker_ms": through_broker.acknowledged_s * 1000, "controller_ms": through_controllers.acknowledged_s * 1000,
            "already_exists": through_broker.already_exists, "broker_errors": through_broker.errors,
            "controller_errors": through_controllers.errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--dir", default=None, help="work directory (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the nodes' logs)")
    args = parser.parse_args(argv)
    work = common.work_dir(args.dir, "bench_broker_failover_")
    cluster = LocalCluster(work, controllers=3, brokers=1, metadata_version="3.7-IV4")
    controllers = [s.node_id for s in cluster.controllers]
    runs: list[dict] = []
    load_before = os.getloadavg()
    budget_deadline = time.monotonic() + args.budget_s
    try:
        cluster.bring_up()
        leader = wait_caught_up(cluster, controllers)
        for run in range(args.runs):
            if time.monotonic() > budget_deadline:
                print(f"stopped by --budget-s after {run} runs")
                break
            result = one_run(cluster, run, leader, controllers)
            cluster.start(leader)
            leader = wait_caught_up(cluster, controllers)
            runs.append(result)
            print(f"run {run}: broker {result['broker_ms']:.0f} ms, controllers {result['controller_ms']:.0f} ms, "
                  f"errors {result['broker_errors']} / {result['controller_errors']}", flush=True)
    finally:
        cluster.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if not runs:
        return 1
    broker = sorted(r["broker_ms"] for r in runs)
    controller = sorted(r["controller_ms"] for r in runs)
    print()
    print(f"$ {common.command_line()}")
    print(f"load average before: {load_before[0]:.2f}, after: {os.getloadavg()[0]:.2f}; "
          f"election timeout {ELECTION_TIMEOUT_MS} ms, fetch timeout 2000 ms")
    rows = [[path, len(values), f"{common.percentile(values, 0.5):,.0f}", f"{max(values):,.0f}",
             f"{common.percentile(values, 0.5) / ELECTION_TIMEOUT_MS:.2f}"]
            for path, values in (("through the broker", broker), ("through the controllers", controller))]
    print(common.markdown_table(["path", "runs", "median ms", "max ms", "median / election timeout"], rows))
    ratio = [r["broker_ms"] / r["controller_ms"] for r in runs]
    print(f"\nbroker / controllers per run: median {common.percentile(sorted(ratio), 0.5):.2f}; "
          f"TOPIC_ALREADY_EXISTS (applied but reported as failed): {sum(r['already_exists'] for r in runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
