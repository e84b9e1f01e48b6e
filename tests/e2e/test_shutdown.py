"""Clean shutdown with real processes: SIGTERM (what `docker stop`, systemd and CI send)
stops `kraftwerk cluster up` and every node like Ctrl-C does — the brokers' controlled
shutdown first, then exit 0, no process left behind — at any moment, start-up included;
a listener port already taken is refused at start-up with one line naming the address.

No timing is asserted here: bench/bench_shutdown.py measures how long the stops take."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli import local_cluster as lc
from cli.upgrade_story import LocalCluster, log_events

from .helpers import REPO, cli_env, format_directory
from .test_cluster_up_secure import Up

pytestmark = pytest.mark.e2e

EXIT_TIMEOUT_S = 60.0  # generous: a bound on a hang, not a target (the bench has the targets)
START_TIMEOUT_S = 60.0
POLL_S = 0.02  # polling other processes' files and /proc: nothing to wait on but asking again


def poll(what: str, condition, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(POLL_S)


def processes_mentioning(text: str) -> list[str]:
    """The command lines of the running processes (zombies aside) that name `text`: every
    node of a local cluster names its directory in its arguments."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            command = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path("/proc", entry, "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue  # exited meanwhile
        if text in command and state != "Z":
            found.append(f"{entry}: {command}")
    return found


def cluster_up(tmp_path: Path, controllers: int = 3, brokers: int = 3) -> tuple[Up, Path]:
    work = tmp_path / "cluster"
    argv = ["cluster", "up", "--controllers", str(controllers), "--brokers", str(brokers), "--dir", str(work),
            "--base-port", str(lc.free_port_run(controllers)),
            "--broker-base-port", str(lc.free_port_run(max(brokers, 1)))]
    return Up(argv, tmp_path / "up.out"), work


def test_sigterm_stops_cluster_up_and_every_node_after_the_brokers_controlled_shutdown(tmp_path):
    up, work = cluster_up(tmp_path)
    try:
        output = up.wait_ready()
        assert "brokers 101, 102, 103 registered and unfenced" in output
        pids = up.node_pids()
        assert len(pids) == 6, output
        # To the process alone, as `docker stop` and systemd send it (not to its group).
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=EXIT_TIMEOUT_S) == 0, up.out_path.read_text()
        assert [pid for pid in pids if lc.process_alive(pid)] == []
        assert processes_mentioning(str(work)) == []
        for broker_id in (101, 102, 103):
            log = work / f"broker-{broker_id}.log"
            # The controller answered the heartbeat that asked to shut down: the quorum
            # fenced the broker on purpose, before any controller stopped.
            assert [e["new"] for e in log_events(log, "broker.state_changed")][-2:] == \
                ["PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"], log.read_text()[-3000:]
            assert [e["signal"] for e in log_events(log, "server.stopped")] == ["SIGTERM"]
        for node_id in (1, 2, 3):
            log = work / f"controller-{node_id}.log"
            assert [e["signal"] for e in log_events(log, "server.stopped")] == ["SIGTERM"], log.read_text()[-3000:]
            assert log_events(log, "raft.driver_stopped")
    finally:
        up.kill()


def test_sigterm_while_cluster_up_is_starting_leaves_no_node_behind(tmp_path):
    up, work = cluster_up(tmp_path)
    try:
        poll("the first node to listen", lambda: "controller 1 listening on" in up.out_path.read_text())
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=EXIT_TIMEOUT_S) == 0, up.out_path.read_text()
        output = up.out_path.read_text()
        assert "Traceback" not in output, output
        if "Press Ctrl-C to stop." not in output:
            assert "Stopped before the cluster was up" in output, output
        assert processes_mentioning(str(work)) == []
    finally:
        up.kill()


def test_cluster_up_refuses_a_port_in_use_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = lc.free_port_run(1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        work = tmp_path / "cluster"
        result = lc.run_cli("cluster", "up", "--controllers", "1", "--brokers", "0", "--exit", "--dir", str(work),
                            "--base-port", str(port), timeout_s=EXIT_TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot listen on 127.0.0.1:{port} (a controller of this cluster): "
                           "address already in use"), line
    assert not work.exists()  # refused before anything was formatted


@pytest.mark.parametrize("taken_by", ["CONTROLLER", "metrics"])
def test_a_controller_whose_port_is_in_use_exits_1_naming_the_address(tmp_path, taken_by):
    log_dir = tmp_path / "metadata"
    format_directory(log_dir)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = lc.free_port_run(2)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        # The listener on the taken port, or the listener free and the metrics endpoint on it.
        listener_port, metrics_port = (port, port + 1) if taken_by == "CONTROLLER" else (port + 1, port)
        result = subprocess.run([sys.executable, "-m", "cli.main", "controller", "--log-dir", str(log_dir),
                                 "--listener", f"127.0.0.1:{listener_port}",
                                 "--override", f"kraftwerk.metrics.port={metrics_port}"], capture_output=True,
                                text=True, timeout=EXIT_TIMEOUT_S, cwd=REPO, env=cli_env())
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert errors == [f"Error: cannot listen on 127.0.0.1:{port} (listener {taken_by}): address already in use; "
                      "another process listens there (is this node already running?)"], result.stderr
    # One structured line for the log pipeline, naming the same address.
    events = [line for line in result.stderr.splitlines() if '"net.listener_bind_failed"' in line]
    assert len(events) == 1 and f'"port": {port}' in events[0] and '"host": "127.0.0.1"' in events[0], result.stderr


def unshare_works() -> bool:
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                               timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def test_a_controller_that_is_pid_1_of_its_container_stops_on_sigterm_with_exit_0(tmp_path):
    # `docker stop` sends SIGTERM to PID 1 of the container, here the controller that
    # `/bin/sh -c "... && exec kraftwerk controller ..."` became. PID 1 gets no default
    # action: without a handler of its own it would ignore SIGTERM until the SIGKILL.
    if not unshare_works():
        pytest.skip("unshare --pid (a PID namespace) is not permitted here")
    log_dir = tmp_path / "metadata"
    format_directory(log_dir)
    port_file, log_path = tmp_path / "controller.port", tmp_path / "controller.log"
    command = (f"test -d {log_dir} && exec {sys.executable} -m cli.main controller --log-dir {log_dir} "
               f"--listener 127.0.0.1:0 --port-file {port_file}")
    with log_path.open("ab") as log:
        # --kill-child: the namespace's init (the controller) dies with unshare at teardown.
        namespace = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "/bin/sh", "-c",
                                      command],
                                     stdout=log, stderr=log, cwd=REPO, env=cli_env())
    try:
        poll("the controller to listen", lambda: port_file.exists() and port_file.read_text().endswith("\n"))
        (controller,) = Path(f"/proc/{namespace.pid}/task/{namespace.pid}/children").read_text().split()
        status = Path(f"/proc/{controller}/status").read_text()
        assert next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1] == "1"
        os.kill(int(controller), signal.SIGTERM)
        assert namespace.wait(timeout=EXIT_TIMEOUT_S) == 0, log_path.read_text()[-3000:]
        assert [e["signal"] for e in log_events(log_path, "server.stopped")] == ["SIGTERM"]
    finally:
        if namespace.poll() is None:
            namespace.kill()
            namespace.wait(timeout=EXIT_TIMEOUT_S)


def test_sigterm_stops_a_broker_after_the_quorum_agreed_to_its_controlled_shutdown(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", controllers=1, brokers=1, metadata_version="3.7-IV4")
    try:
        cluster.bring_up()
        broker = cluster.processes[101]
        broker.process.send_signal(signal.SIGTERM)
        assert broker.process.wait(timeout=EXIT_TIMEOUT_S) == 0, broker.spec.log_path.read_text()[-3000:]
        log = broker.spec.log_path
        assert log_events(log, "broker.controlled_shutdown")
        assert log_events(log, "broker.state_changed")[-1]["new"] == "SHUTTING_DOWN", log.read_text()[-3000:]
        # The quorum's own view: the broker is fenced (no session had to expire for it).
        cluster.wait_until("broker 101 to be fenced", lambda: 101 not in cluster.unfenced())
        assert cluster.alive(1)
    finally:
        cluster.stop_all()


def test_sigterm_stops_a_broker_that_is_still_starting_with_exit_0(tmp_path):
    # Its quorum never comes up: the broker waits for metadata, serving nothing yet, and
    # has nothing to hand over. SIGTERM then must not kill it by the default action.
    work = tmp_path / "cluster"
    controller = lc.ControllerSpec(1, lc.free_port_run(1), work)
    broker = lc.broker_spec(101, lc.free_port_run(1), work)
    cluster_id = lc.random_uuid_string()
    for spec in (controller, broker):
        lc.write_config(spec, [controller])
        lc.format_controller(spec, cluster_id, "3.7-IV4")
    with broker.log_path.open("ab") as log:
        process = subprocess.Popen(lc.CLI + ["broker", "--config", str(broker.config_path)], stdout=log,
                                   stderr=log, cwd=REPO, env=cli_env())
    try:
        # Once its storage is open the command has its own handlers (the interpreter's
        # start-up before that is out of reach of any handler).
        poll("the broker to open its storage", lambda: log_events(broker.log_path, "storage.log_opened"))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=EXIT_TIMEOUT_S) == 0, broker.log_path.read_text()[-3000:]
        (stopping,) = log_events(broker.log_path, "server.stopping")
        assert stopping["signal"] == "SIGTERM" and stopping["serving"] is False
        assert not log_events(broker.log_path, "broker.controlled_shutdown")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=EXIT_TIMEOUT_S)
