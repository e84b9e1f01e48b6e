"""`kraftwerk cluster up --zookeeper` as an operator runs it: a real process that starts a
real ZooKeeper, seeds it, starts ZooKeeper-mode brokers and a KRaft quorum migrating
them, stops at MigrationActive and prints what to do next. The printed commands must be
commands our CLI accepts, and following them must move a broker to KRaft mode."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.main import build_parser
from cli.local_cluster import free_port_run, run_cli
from server.zk.process import port_is_free, zookeeper_missing

from .helpers import kill_processes_under

pytestmark = pytest.mark.e2e

UP_TIMEOUT_S = 240
CLI = [sys.executable, "-m", "cli.main"]


@pytest.fixture(autouse=True)
def _needs_zookeeper():
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")


def ports() -> tuple[int, int, int]:
    """Controllers, brokers and ZooKeeper on one run of six free ports."""
    base = free_port_run(6)
    return base, base + 3, base + 5


def up_argv(work: Path, controller_port: int, broker_port: int, zk_port: int, *extra: str) -> list[str]:
    return ["cluster", "up", "--zookeeper", "--controllers", "3", "--brokers", "2", "--dir", str(work),
            "--base-port", str(controller_port), "--broker-base-port", str(broker_port),
            "--zookeeper-port", str(zk_port), *extra]


def kraftwerk_commands(output: str) -> list[list[str]]:
    """Every printed `kraftwerk ...` command (several may share a line after a comment)."""
    commands = []
    for line in output.splitlines():
        text = line.split("#", 1)[0]
        for match in re.finditer(r"kraftwerk (.*)$", text):
            commands.append(shlex.split(match.group(1)))
    return commands


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_up_zookeeper_exit_prints_the_operator_steps(tmp_path):
    controller_port, broker_port, zk_port = ports()
    work = tmp_path / "zk-cluster"
    result = run_cli(*up_argv(work, controller_port, broker_port, zk_port, "--exit"), timeout_s=UP_TIMEOUT_S)
    output = result.stdout
    assert result.returncode == 0, result.stderr + output

    # What runs where.
    assert f"ZooKeeper on 127.0.0.1:{zk_port}" in output
    for broker_id, port in ((1, broker_port), (2, broker_port + 1)):
        assert f"ZooKeeper-mode broker {broker_id} listening on 127.0.0.1:{port}" in output
    for offset, node_id in enumerate((3000, 3001, 3002)):
        assert f"KRaft controller {node_id} (kafka.metadata.migration.enable=true) listening on " \
               f"127.0.0.1:{controller_port + offset}" in output
    assert "the migration is MigrationActive" in output
    assert "ZooKeeper brokers [1, 2]" in output
    assert len(re.findall(r"metrics http://127\.0\.0\.1:\d+/metrics", output)) == 5

    # The commands: every one parses with our CLI, and the expected ones are there.
    commands = kraftwerk_commands(output)
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)
    assert ["migration", "status", "--bootstrap-server", f"127.0.0.1:{controller_port}"] in commands
    assert ["migration", "rollback", "--zookeeper", f"127.0.0.1:{zk_port}"] in commands
    cluster_id = re.search(r"cluster id (\S+)\)", output).group(1)
    for broker_id, port in ((1, broker_port), (2, broker_port + 1)):
        config = work / "kraft" / f"broker-{broker_id}.properties"
        assert ["storage", "format", "--cluster-id", cluster_id, "--metadata-version", "3.7-IV4",
                "--config", str(config)] in commands
        assert ["broker", "--config", str(config)] in commands
        properties = dict(line.split("=", 1) for line in config.read_text().splitlines()
                          if line and not line.startswith("#"))
        assert properties["node.id"] == str(broker_id)
        assert properties["process.roles"] == "broker"
        assert properties["listeners"] == f"PLAINTEXT://127.0.0.1:{port}"
        assert properties["controller.quorum.voters"] == ",".join(
            f"{3000 + i}@127.0.0.1:{controller_port + i}" for i in range(3))
    for node_id in (3000, 3001, 3002):
        assert ["controller", "--config", str(work / f"controller-{node_id}.properties")] in commands

    # --exit stopped everything it started.
    for pid in map(int, re.findall(r"\(pid (\d+),", output)):
        assert not pid_alive(pid)
    assert port_is_free(zk_port)


def test_following_the_printed_steps_moves_a_broker_to_kraft_mode(tmp_path):
    controller_port, broker_port, zk_port = ports()
    work = tmp_path / "zk-cluster"
    out_path = tmp_path / "cluster-up.out"
    log = out_path.open("w")
    up = subprocess.Popen(CLI + up_argv(work, controller_port, broker_port, zk_port), stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
    broker = None
    broker_log = (tmp_path / "broker-1-kraft.log").open("w")
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while "Press Ctrl-C to stop." not in out_path.read_text():
            assert up.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, "cluster up --zookeeper did not come up"
            time.sleep(0.2)  # polling another process's output: there is no event to wait on
        output = out_path.read_text()

        # The steps for broker 1, as printed.
        lines = output.splitlines()
        start = lines.index("  # broker 1")
        kill, fmt, run = (line.strip() for line in lines[start + 1:start + 4])
        pid = int(kill.split()[2])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        formatted = run_cli(*shlex.split(fmt)[1:])
        assert formatted.returncode == 0, formatted.stderr
        port_file = tmp_path / "broker-1.port"
        broker = subprocess.Popen(CLI + shlex.split(run)[1:] + ["--port-file", str(port_file)],
                                  stdout=broker_log, stderr=subprocess.STDOUT, start_new_session=True)

        # `migration status` (the printed command) lists broker 1 in KRaft mode.
        status_argv = shlex.split(next(line for line in lines if "kraftwerk migration status" in line))[1:]
        deadline = time.monotonic() + 90
        while True:
            status = run_cli(*status_argv)
            if status.returncode == 0 and "KRaftBrokers:           [1]" in status.stdout \
                    and "ZooKeeperBrokers:       [2]" in status.stdout:
                break
            assert broker.poll() is None, (tmp_path / "broker-1-kraft.log").read_text()
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(0.5)
        assert "MigrationState:         MigrationActive (4)" in status.stdout

        broker.send_signal(signal.SIGTERM)  # a controlled shutdown, while the controllers still run
        assert broker.wait(timeout=60) == 0
        # Ctrl-C stops the cluster up process and what it started.
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(timeout=60) == 0
    finally:
        for process in (broker, up):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        kill_processes_under(work)
        log.close()
        broker_log.close()
