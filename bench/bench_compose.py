"""The compose cluster (docker-compose.yml + deploy/docker-compose.host.yml) beside the
same topology as local processes, in one run:

  up        `up -d` -> every service healthy (Docker's healthchecks: 2 s interval),
            beside LocalCluster(3 controllers, 3 brokers).bring_up() -> every node
            answering (the processes `kraftwerk cluster up` starts);
  failover  `docker kill` of the controller leader -> the first CreateTopics
            acknowledged through broker 101 and through the surviving controllers
            (bench_broker_failover.one_run, the same clients), median of --runs,
            beside kill -9 of the leader of a LocalCluster (3 controllers, 1 broker);
  stop      `stop` of all six containers (SIGTERM to each node, exit 0 expected)
            beside LocalCluster.stop_all();
  images    the size of every image scripts/compose-images built.

Needs a Docker engine (scripts/docker-engine start) and root. Timing targets live
here, never in tests.

Run: .venv/bin/python bench/bench_compose.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _common as common  # noqa: E402
import bench_broker_failover as failover  # noqa: E402

from cli.upgrade_story import LocalCluster  # noqa: E402
from compose.harness import (  # noqa: E402
    DOCKER, HOST_FILE, REPO, ComposeProject, Engine, build_images, image_size_bytes)

CONTROLLER_PORTS = {1: 9093, 2: 9094, 3: 9095}
BROKER_PORTS = {101: 9092, 102: 9192, 103: 9292}
SERVICES = [f"controller-{n}" for n in CONTROLLER_PORTS] + [f"broker-{n}" for n in BROKER_PORTS]
IMAGES = ("kraftwerk-base:bookworm", "kraftwerk-python:bookworm", "kraftwerk:0.1.0", "kraftwerk-java:bookworm",
          "kraftwerk-zookeeper:3.8", "kraftwerk-kafka:4.4.0")


class ComposeCluster:
    """The view bench_broker_failover needs (`address`, `stop(kill=True)`, `start`) of
    the compose cluster."""

    def __init__(self, compose: ComposeProject) -> None:
        self.compose = compose
        self.containers = {n: compose.container_id(f"controller-{n}") for n in CONTROLLER_PORTS}

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{CONTROLLER_PORTS.get(node_id) or BROKER_PORTS[node_id]}"

    def stop(self, node_id: int, kill: bool = True) -> None:
        # The engine's own client, on a container id looked up beforehand: docker-compose's
        # start-up (most of a second) would otherwise count as failover time.
        container = self.containers[node_id]
        subprocess.run([DOCKER, "kill" if kill else "stop", container], check=True, capture_output=True, timeout=60)

    def start(self, node_id: int) -> None:
        self.compose.run("start", f"controller-{node_id}")
        self.compose.wait_healthy([f"controller-{node_id}"])


def failovers(cluster, controllers: list[int], runs: int, deadline: float) -> list[dict]:
    results = []
    leader = failover.wait_caught_up(cluster, controllers)
    for run in range(runs):
        if time.monotonic() > deadline:
            print(f"stopped by --budget-s after {run} runs")
            break
        result = failover.one_run(cluster, run, leader, controllers)
        cluster.start(leader)
        leader = failover.wait_caught_up(cluster, controllers)
        results.append(result)
        print(f"  run {run}: broker {result['broker_ms']:.0f} ms, controllers {result['controller_ms']:.0f} ms",
              flush=True)
    return results


def measure_compose(runs: int, deadline: float) -> dict:
    compose = ComposeProject(name=f"kwbench-{uuid.uuid4().hex[:6]}", files=(REPO / "docker-compose.yml", HOST_FILE))
    try:
        started = time.monotonic()
        compose.run("up", "-d")
        up_returned_s = time.monotonic() - started
        healthy_s = up_returned_s + compose.wait_healthy(SERVICES)
        print(f"compose: up -d returned after {up_returned_s:.1f} s, all healthy after {healthy_s:.1f} s", flush=True)
        results = failovers(ComposeCluster(compose), list(CONTROLLER_PORTS), runs, deadline)
        started = time.monotonic()
        compose.run("stop")
        stop_s = time.monotonic() - started
        exit_codes = {s: compose.inspect(s)["State"]["ExitCode"] for s in SERVICES}
        return {"up_returned_s": up_returned_s, "healthy_s": healthy_s, "failovers": results, "stop_s": stop_s,
                "exit_codes": exit_codes}
    finally:
        compose.down()


def measure_local(runs: int, deadline: float, work: Path) -> dict:
    topology = LocalCluster(work / "up", controllers=3, brokers=3, metadata_version="3.7-IV4")
    try:
        started = time.monotonic()
        topology.bring_up()
        up_s = time.monotonic() - started
        started = time.monotonic()
        topology.stop_all()
        stop_s = time.monotonic() - started
    finally:
        topology.stop_all()
    print(f"local: 3+3 up after {up_s:.1f} s, stopped in {stop_s:.1f} s", flush=True)
    cluster = LocalCluster(work / "failover", controllers=3, brokers=1, metadata_version="3.7-IV4")
    try:
        cluster.bring_up()
        results = failovers(cluster, [s.node_id for s in cluster.controllers], runs, deadline)
    finally:
        cluster.stop_all()
    return {"healthy_s": up_s, "stop_s": stop_s, "failovers": results}


def image_sizes() -> dict[str, int]:
    """The size of each image of IMAGES that is built (the ZooKeeper and Kafka images may not be)."""
    sizes = {}
    for tag in IMAGES:
        try:
            sizes[tag] = image_size_bytes(tag)
        except subprocess.CalledProcessError:
            continue
    return sizes


def median_ms(results: list[dict], key: str) -> float:
    return common.percentile(sorted(r[key] for r in results), 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="failovers per cluster (default 10)")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--dir", default=None, help="work directory of the local peer")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    engine = Engine.start()
    work = common.work_dir(args.dir, "bench_compose_")
    load_before = os.getloadavg()
    deadline = time.monotonic() + args.budget_s
    try:
        started = time.monotonic()
        build_images("kraftwerk")
        build_s = time.monotonic() - started
        ours = measure_compose(args.runs, deadline)
        peer = measure_local(args.runs, deadline, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        engine.stop()
    sizes = image_sizes()
    load_after = os.getloadavg()
    print()
    print(f"$ {common.command_line()}")
    print(f"load average before: {load_before[0]:.2f}, after: {load_after[0]:.2f}; kraftwerk image build "
          f"(cached layers, the package reinstalled): {build_s:.1f} s")
    rows = [
        ["up -> all healthy (s)", f"{ours['healthy_s']:.1f}", f"{peer['healthy_s']:.1f}",
         f"{ours['healthy_s'] / peer['healthy_s']:.2f}"],
        ["stop, all nodes (s)", f"{ours['stop_s']:.1f}", f"{peer['stop_s']:.1f}",
         f"{ours['stop_s'] / peer['stop_s']:.2f}"],
    ]
    if ours["failovers"] and peer["failovers"]:
        for key, label in (("broker_ms", "leader killed -> write acked via broker, median (ms)"),
                           ("controller_ms", "leader killed -> write acked via controllers, median (ms)")):
            ours_ms, peer_ms = median_ms(ours["failovers"], key), median_ms(peer["failovers"], key)
            rows.append([f"{label} [{len(ours['failovers'])} / {len(peer['failovers'])} runs]", f"{ours_ms:,.0f}",
                         f"{peer_ms:,.0f}", f"{ours_ms / peer_ms:.2f}"])
    print(common.markdown_table(["what", "compose", "local processes", "compose / local"], rows))
    print(f"\ncontainers' exit codes after stop: {ours['exit_codes']}")
    print(common.markdown_table(["image", "size (MB)"], [[tag, f"{size / 1e6:,.0f}"] for tag, size in sizes.items()]))
    if args.json:
        Path(args.json).write_text(json.dumps({"compose": ours, "local": peer, "image_sizes": sizes,
                                               "build_s": build_s, "load_average_start": load_before[0],
                                               "load_average_end": load_after[0]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
