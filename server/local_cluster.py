"""Real controller and broker processes on 127.0.0.1, for `kraftwerk demo`,
`kraftwerk cluster up`, benchmarks and tests.

Owns: writing a node's properties file, formatting its directory with the
real `kraftwerk storage format`, starting `kraftwerk controller` or
`kraftwerk broker` as a child process (ready once it writes its port file),
and stopping it (SIGTERM, then SIGKILL). Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# A broker reports its port only once its image has caught up (up to 30 s of its own).
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PORT_FILE_POLL_S = 0.02  # polling a child process's port file: there is no event to wait on

CLI = [sys.executable, "-m", "server.cli"]


class LocalClusterError(Exception):
    """A local process could not be formatted, started or reached."""


@dataclass(frozen=True, slots=True)
class ControllerSpec:
    """One local node: a controller (the default) or, with role="broker", a broker agent."""

    node_id: int
    port: int
    directory: Path  # holds the properties file, the log file and the metadata dir
    role: str = "controller"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def config_path(self) -> Path:
        return self.directory / f"{self.name}.properties"

    @property
    def metadata_dir(self) -> Path:
        return self.directory / self.name

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def port_file(self) -> Path:
        return self.directory / f"{self.name}.port"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def broker_spec(node_id: int, port: int, directory: Path) -> ControllerSpec:
    return ControllerSpec(node_id, port, directory, role="broker")


@dataclass
class ControllerProcess:
    spec: ControllerSpec
    process: subprocess.Popen
    port: int
    _log_handle: object = field(repr=False, default=None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None


def voters_property(specs: list[ControllerSpec]) -> str:
    return ",".join(f"{s.node_id}@127.0.0.1:{s.port}" for s in specs)


def write_config(spec: ControllerSpec, voters: list[ControllerSpec], extra: dict[str, str] | None = None) -> Path:
    if spec.role == "broker":
        lines = [
            f"# Broker {spec.node_id}, written by kraftwerk's local cluster tooling.",
            f"node.id={spec.node_id}",
            "process.roles=broker",
            f"listeners=PLAINTEXT://127.0.0.1:{spec.port}",
            f"metadata.log.dir={spec.metadata_dir}",
            f"controller.quorum.voters={voters_property(voters)}",
        ]
    else:
        lines = [
            f"# Controller {spec.node_id}, written by kraftwerk's local cluster tooling.",
            f"node.id={spec.node_id}",
            "process.roles=controller",
            f"listeners=CONTROLLER://127.0.0.1:{spec.port}",
            f"metadata.log.dir={spec.metadata_dir}",
        ]
        if len(voters) > 1:
            lines.append(f"controller.quorum.voters={voters_property(voters)}")
    for key, value in (extra or {}).items():
        lines.append(f"{key}={value}")
    spec.directory.mkdir(parents=True, exist_ok=True)
    spec.config_path.write_text("\n".join(lines) + "\n")
    return spec.config_path


def run_cli(*argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=timeout_s)


def format_controller(spec: ControllerSpec, cluster_id: str, metadata_version: str | None) -> None:
    if (spec.metadata_dir / "meta.properties").exists():
        return
    argv = ["storage", "format", "--cluster-id", cluster_id, "--config", str(spec.config_path)]
    if metadata_version:
        argv += ["--metadata-version", metadata_version]
    result = run_cli(*argv)
    if result.returncode != 0:
        raise LocalClusterError(f"formatting {spec.role} {spec.node_id} failed: {result.stderr.strip()}")


def start_controller(spec: ControllerSpec, extra_args: tuple[str, ...] = ()) -> ControllerProcess:
    """Starts `kraftwerk <role> --config ... [extra_args]` and waits for its port file."""
    spec.port_file.unlink(missing_ok=True)
    handle = open(spec.log_path, "ab")
    process = subprocess.Popen(
        CLI + [spec.role, "--config", str(spec.config_path), "--port-file", str(spec.port_file), *extra_args],
        stdout=handle, stderr=handle, start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = spec.port_file.read_text().strip() if spec.port_file.exists() else ""
        if text:
            return ControllerProcess(spec, process, int(text), handle)
        if process.poll() is not None:
            handle.close()
            raise LocalClusterError(f"{spec.role} {spec.node_id} exited with {process.returncode}; "
                                    f"see {spec.log_path}")
        if time.monotonic() > deadline:
            process.kill()
            handle.close()
            raise LocalClusterError(f"{spec.role} {spec.node_id} did not start within {START_TIMEOUT_S:.0f} s")
        time.sleep(PORT_FILE_POLL_S)


def stop_controller(controller: ControllerProcess, kill: bool = False) -> None:
    process = controller.process
    if process.poll() is None:
        if kill:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
    if controller._log_handle is not None:
        controller._log_handle.close()
        controller._log_handle = None


def poll_until(what: str, condition: Callable[[], bool], *, timeout_s: float, poll_s: float,
               retry_on: tuple[type[BaseException], ...], error: type[Exception]) -> None:
    """Asks `condition()` again every `poll_s` until it holds; an exception in `retry_on`
    (a node starting, restarting or frozen) counts as "not yet". Raises `error` after
    `timeout_s`. Other processes' state has no event to wait on: asking again is all."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except retry_on:
            pass
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def free_port_run(count: int, attempts: int = 50) -> int:
    """The first of `count` consecutive free loopback ports (probed, then released: a
    best effort, for tests and benchmarks that need voter addresses up front)."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        probes = []
        try:
            for offset in range(count):
                sock = socket.socket()
                probes.append(sock)
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
    raise LocalClusterError(f"no run of {count} free ports found")


def plan(directory: Path, controllers: int, base_port: int) -> list[ControllerSpec]:
    return [ControllerSpec(node_id, base_port + node_id - 1, directory) for node_id in range(1, controllers + 1)]


def plan_brokers(directory: Path, brokers: int, base_port: int, first_id: int = 101) -> list[ControllerSpec]:
    """Broker N (ids from 101, clear of the controllers') listens on base_port + N - first_id."""
    return [broker_spec(node_id, base_port + node_id - first_id, directory)
            for node_id in range(first_id, first_id + brokers)]


start_node = start_controller
stop_node = stop_controller
format_node = format_controller
