"""`kraftwerk cluster up --secure` as an operator runs it: real processes, 3 controllers
and a broker, every listener SASL_SSL with a generated CA, the authorizer on.

- it comes up (the nodes elect, bootstrap and register over their authenticated,
  authorized connections) and prints the commands to reach it; the printed commands
  work with the printed --command-config file, and a write (a metadata.version upgrade)
  commits through the broker;
- a client without credentials gets nothing; the secrets are files of mode 0600 and
  appear in no output or log;
- Ctrl-C stops it; `cluster up --secure --keep` restarts every node from its directory
  with the same credentials, and the write is still there; SIGTERM stops it like Ctrl-C;
- no node's own Raft, registration or heartbeat traffic was ever refused.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cli.main import build_parser
from cli.local_cluster import CLI, free_port_run, run_cli

from .helpers import status_node_ids

pytestmark = pytest.mark.e2e

UP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.2  # polling another process's output: there is no event to wait on


def up_argv(work: Path, controller_port: int, broker_port: int, *extra: str) -> list[str]:
    return ["cluster", "up", "--secure", "--controllers", "3", "--brokers", "1", "--dir", str(work),
            "--base-port", str(controller_port), "--broker-base-port", str(broker_port),
            "--metadata-version", "3.7-IV4", *extra]


def printed_commands(output: str) -> list[list[str]]:
    return [shlex.split(match.group(1)) for match in re.finditer(r"^\s+kraftwerk (.*)$", output, re.MULTILINE)]


class Up:
    """One `cluster up` process that stays up until Ctrl-C."""

    def __init__(self, argv: list[str], out_path: Path) -> None:
        self.out_path = out_path
        self._out = out_path.open("w")
        self.process = subprocess.Popen(CLI + argv, stdout=self._out, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def wait_ready(self) -> str:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while "Press Ctrl-C to stop." not in self.out_path.read_text():
            assert self.process.poll() is None, self.out_path.read_text()
            assert time.monotonic() < deadline, "cluster up --secure did not come up:\n" + self.out_path.read_text()
            time.sleep(POLL_S)
        return self.out_path.read_text()

    def node_pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"\(pid (\d+),", self.out_path.read_text())]

    def interrupt(self, signal_number: int = signal.SIGINT) -> int:
        os.killpg(self.process.pid, signal_number)
        return self.process.wait(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        """Teardown after a failure: the process and every node it started."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        for pid in self.node_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_secure_cluster_comes_up_takes_a_write_and_restarts(tmp_path):
    controller_port, broker_port = free_port_run(3), free_port_run(1)
    work = tmp_path / "secure-cluster"
    secure = work / "secure"
    first = Up(up_argv(work, controller_port, broker_port), tmp_path / "up-1.out")
    try:
        output = first.wait_ready()
        assert "brokers 101 registered and unfenced" in output
        config = Path(re.search(r"--command-config (\S+)", output).group(1))
        assert config == secure / "admin-client.properties"

        # The secrets: files only their owner reads, in a directory only the owner opens.
        assert mode(secure) == 0o700
        for path in (config, secure / "passwords.properties", secure / "node-keystore.pem",
                     secure / "admin-librdkafka.properties", *work.glob("*.properties")):
            assert mode(path) == 0o600, path
        passwords = dict(line.split("=", 1) for line in (secure / "passwords.properties").read_text().split())
        assert set(passwords) == {"controller", "broker", "admin"}
        assert not any(password in output for password in passwords.values())
        controller_config = (work / "controller-1.properties").read_text()
        assert "listener.security.protocol.map=CONTROLLER:SASL_SSL" in controller_config
        assert "super.users=User:controller;User:broker;User:admin" in controller_config

        # Every printed kraftwerk command parses, and the read commands work as printed.
        commands = printed_commands(output)
        assert len(commands) == 2
        parser = build_parser()
        for argv in commands:
            assert argv[-2:] == ["--command-config", str(config)]
            parser.parse_args(argv)
            result = run_cli(*argv)
            assert result.returncode == 0, result.stdout + result.stderr
            if argv[0] == "metadata-quorum":
                assert status_node_ids(result.stdout, "CurrentVoters") == [1, 2, 3]
                assert status_node_ids(result.stdout, "CurrentObservers") == [101]
            else:
                assert "FinalizedVersionLevel: 3.7-IV4" in result.stdout

        # Without the client properties (PLAINTEXT against SASL_SSL) there is nothing to get.
        broker = f"127.0.0.1:{broker_port}"
        anonymous = run_cli("features", "describe", "--bootstrap-server", broker, "--timeout-s", "5")
        assert anonymous.returncode != 0

        # A write through the broker, as the operator: it commits.
        upgraded = run_cli("features", "upgrade", "--metadata", "3.8-IV0", "--bootstrap-server", broker,
                           "--command-config", str(config))
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        assert "metadata.version was upgraded to 3.8-IV0." in upgraded.stdout

        kcat = shutil.which("kcat")
        if kcat is not None:
            # librdkafka's own SCRAM client with the printed librdkafka properties.
            listed = subprocess.run([kcat, "-L", "-b", broker, "-F", str(secure / "admin-librdkafka.properties"),
                                     "-m", "20"], capture_output=True, text=True, timeout=60)
            assert listed.returncode == 0, listed.stdout + listed.stderr
            assert "broker 101 at 127.0.0.1" in listed.stdout, listed.stdout + listed.stderr

        assert first.interrupt() == 0
    finally:
        first.kill()
    for pid in first.node_pids():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    # Every node restarts from its directory, with the same credentials.
    second = Up(up_argv(work, controller_port, broker_port, "--keep"), tmp_path / "up-2.out")
    try:
        output = second.wait_ready()
        assert "brokers 101 registered and unfenced" in output
        described = run_cli("features", "describe", "--bootstrap-server", f"127.0.0.1:{broker_port}",
                            "--command-config", str(secure / "admin-client.properties"))
        assert described.returncode == 0, described.stderr
        assert "FinalizedVersionLevel: 3.8-IV0" in described.stdout
        # A `kill` (SIGTERM) stops it like Ctrl-C: the nodes it started stop too.
        assert second.interrupt(signal.SIGTERM) == 0
    finally:
        second.kill()
    for pid in second.node_pids():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    logs = {path.name: path.read_text(errors="replace") for path in work.glob("*.log")}
    assert sorted(logs) == ["broker-101.log", "controller-1.log", "controller-2.log", "controller-3.log"]
    for name, text in logs.items():
        started = "broker.started" if name.startswith("broker") else "server.started"
        assert text.count(f'"{started}"') == 2, name  # once per run
        assert '"security.authorization_failed"' not in text, name
        assert '"security.sasl_authentication_failed"' not in text, name
        assert "Traceback" not in text, name
        assert not any(password in text for password in passwords.values()), name
    if kcat is None:
        # Everything else was checked; the librdkafka login was not (a failure with CI=true).
        pytest.skip("kcat is not installed (apt-get install kcat; scripts/setup --test installs it)")
