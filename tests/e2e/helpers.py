"""Helpers that run real kraftwerk controller processes on 127.0.0.1.

Owns: formatting a fresh metadata directory, starting
`python -m cli.main controller` as a subprocess on an ephemeral port,
reading its JSON log lines (stderr goes to a file), and stopping it.

Rules kept here:
- Every wait on the external process is bounded (the port file, a log
  event, the exit) and fails with the process's own log when it runs out.
- Every process started here is stopped at teardown: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

import pytest
import structlog

from protocol.header import REQUEST_HEADER, RESPONSE_HEADER
from protocol.registry import API_MESSAGES

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 60.0
# Polling an external process's files: short enough to keep tests quick.
POLL_INTERVAL_S = 0.02
DEFAULT_METADATA_VERSION = "3.7-IV4"  # level 19


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_cli(*argv: str, timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs `kraftwerk ARGV` (as `python -m cli.main`) and returns the finished process."""
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO, env=cli_env())


def status_node_ids(text: str, field: str) -> list[int]:
    """The ids in a `metadata-quorum describe --status` line (Kafka's JSON-like node list)."""
    line = next(line for line in text.splitlines() if line.startswith(f"{field}:"))
    return sorted(node["id"] for node in json.loads(line.split(":", 1)[1]))


def new_cluster_id() -> str:
    from server.storage.meta_properties import random_uuid_string

    return random_uuid_string()


def format_directory(log_dir: Path, metadata_version: str = DEFAULT_METADATA_VERSION,
                     cluster_id: str | None = None) -> str:
    """`kraftwerk storage format`, run in this process to save an interpreter start per
    test (the command itself is tested as a subprocess in test_cli.py)."""
    from cli.main import main

    cluster_id = cluster_id or new_cluster_id()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(["storage", "format", "--cluster-id", cluster_id, "--metadata-version", metadata_version,
                       "--log-dir", str(log_dir), "--listener", "127.0.0.1:0"])
    # main() configured structlog to write into `out`; undo that for this process.
    structlog.reset_defaults()
    assert status == 0, f"format failed: {out.getvalue()}"
    return cluster_id


@dataclass
class ControllerProcess:
    host: str
    port: int
    process: subprocess.Popen
    log_path: Path
    log_dir: Path
    cluster_id: str
    overrides: tuple[str, ...] = ()
    _log_handle: object = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str | None = None, **fields) -> list[dict]:
        """Parsed JSON log lines, optionally only those with this event name and fields."""
        found = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line still being written
            if name is not None and entry.get("event") != name:
                continue
            if any(entry.get(key) != value for key, value in fields.items()):
                continue
            found.append(entry)
        return found

    def wait_for_event(self, name: str, timeout_s: float = 10.0, **fields) -> dict:
        """Bounded poll of the log file for an event the server writes asynchronously."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.events(name, **fields)
            if found:
                return found[0]
            if self.process.poll() is not None:
                pytest.fail(f"controller exited ({self.process.returncode}) before logging {name}:\n"
                            f"{self.log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {name} {fields} in the log within {timeout_s}s:\n{self.log_text()[-4000:]}")
            time.sleep(POLL_INTERVAL_S)

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"controller exited ({self.process.returncode}):\n{self.log_text()}"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signals the process and waits (bounded) for it; SIGKILL if SIGTERM is not enough."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return self.process.returncode

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)


def start_controller(log_dir: Path, cluster_id: str, overrides: tuple[str, ...] = (),
                     log_name: str = "controller.log") -> ControllerProcess:
    """Starts a controller on a formatted directory and waits (bounded) until it listens."""
    port_file = log_dir.parent / (log_name + ".port")
    port_file.unlink(missing_ok=True)
    log_path = log_dir.parent / log_name
    handle = open(log_path, "ab")
    argv = [sys.executable, "-m", "cli.main", "controller", "--log-dir", str(log_dir),
            "--listener", "127.0.0.1:0", "--port-file", str(port_file)]
    for item in overrides:
        argv += ["--override", item]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=handle, cwd=REPO, env=cli_env())
    controller = ControllerProcess("127.0.0.1", 0, process, log_path, log_dir, cluster_id, overrides, handle)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        text = port_file.read_text() if port_file.exists() else ""
        if text.endswith("\n"):
            controller.port = int(text)
            return controller
        if process.poll() is not None:
            handle.close()
            pytest.fail(f"controller exited with {process.returncode} before listening:\n"
                        f"{log_path.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            controller.kill()
            pytest.fail(f"controller did not listen within {STARTUP_TIMEOUT_S}s:\n"
                        f"{log_path.read_text(errors='replace')}")
        time.sleep(POLL_INTERVAL_S)


class ControllerFactory:
    """Formats and starts controllers for one test (or module); stops them all at the end."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: list[ControllerProcess] = []
        self._count = 0

    def new(self, metadata_version: str = DEFAULT_METADATA_VERSION, overrides: tuple[str, ...] = ()) -> ControllerProcess:
        self._count += 1
        work = self.base / f"c{self._count}"
        work.mkdir(parents=True)
        log_dir = work / "metadata"
        cluster_id = format_directory(log_dir, metadata_version)
        return self.restart_on(log_dir, cluster_id, overrides)

    def restart_on(self, log_dir: Path, cluster_id: str, overrides: tuple[str, ...] = ()) -> ControllerProcess:
        controller = start_controller(log_dir, cluster_id, overrides, log_name=f"controller-{len(self.started)}.log")
        self.started.append(controller)
        return controller

    def stop_all(self) -> None:
        for controller in self.started:
            controller.stop()


# ---------------------------------------------------------------------------
# Raw-socket helpers (blocking sockets, every call bounded by a timeout)
# ---------------------------------------------------------------------------

SOCKET_TIMEOUT_S = 10.0


def encode_request(api_key: int, version: int, correlation_id: int, body: dict,
                   header_version: int | None = None, client_id: str = "e2e-test") -> bytes:
    """A size-prefixed request frame built with kraftwerk's protocol declarations."""
    from protocol.header import request_header_version

    request_message = API_MESSAGES[api_key][0]
    if header_version is None:
        header_version = request_header_version(request_message, version)
    out = BytesIO()
    REQUEST_HEADER.encode_into(header_version, {"request_api_key": api_key, "request_api_version": version,
                                                "correlation_id": correlation_id, "client_id": client_id}, out)
    request_message.encode_into(version, body, out)
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def api_versions_request(correlation_id: int, version: int = 3, name: str = "kraftwerk-e2e",
                         software_version: str = "1.0") -> bytes:
    return encode_request(18, version, correlation_id,
                          {"client_software_name": name, "client_software_version": software_version})


def connect(controller: ControllerProcess) -> socket.socket:
    sock = socket.create_connection((controller.host, controller.port), timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def local_peer(sock: socket.socket) -> str:
    """How the server names this client in its logs (`peer` field)."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = []
    remaining = count
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError(f"connection closed with {remaining} of {count} bytes unread")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket, api_key: int, version: int, body_version: int | None = None):
    """Reads one response frame: (correlation id, decoded body)."""
    from protocol.header import response_header_version

    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    stream = BytesIO(recv_exactly(sock, size))
    header = RESPONSE_HEADER.decode(response_header_version(API_MESSAGES[api_key][0], version), stream)
    body = API_MESSAGES[api_key][1].decode(version if body_version is None else body_version, stream)
    assert stream.tell() == size, "response has trailing bytes"
    return header.correlation_id, body


def assert_closed_by_server(sock: socket.socket) -> None:
    """The server ends the connection without sending anything (EOF or reset)."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the server to close the connection, got {data[:64]!r}"


def api_versions_round_trip(sock: socket.socket, correlation_id: int) -> None:
    sock.sendall(api_versions_request(correlation_id))
    got_id, body = read_response(sock, 18, 3)
    assert got_id == correlation_id
    assert body.error_code == 0
    assert {k.api_key for k in body.api_keys} >= {18, 3, 57, 60}


def kill_processes_under(directory: Path) -> list[int]:
    """SIGKILL every process whose command line names `directory` (the nodes and the
    ZooKeeper a `cluster up` started run in sessions of their own and outlive it when
    it is killed); returns their pids. For teardown after a failure."""
    needle = str(directory).encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed
