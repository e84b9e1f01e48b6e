"""Shared plumbing for the server benchmarks: processes, frames, statistics, tables.

Owns: starting a formatted kraftwerk controller (and the canned floor server)
as subprocesses on 127.0.0.1 with a port file, the exact ApiVersions v3
request kafka-python sends, blocking-socket frame helpers, percentiles, the
per-process CPU counters from /proc, and markdown table output.

Rules kept here:
- Every wait is bounded (start-up deadline, socket timeouts, subprocess
  wait timeouts); every process started here is stopped by its own pid.
- Only 127.0.0.1 is ever used.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
SOCKET_TIMEOUT_S = 10.0

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")

# kafka-python 3.0.12's defaults: client_id "kafka-python-<version>",
# client_software_name "kafka-python", client_software_version "<version>".
KAFKA_PYTHON_VERSION = "3.0.12"


def command_line() -> str:
    """The command that produced this output, to print above the results."""
    return " ".join(shlex.quote(a) for a in [os.path.relpath(PYTHON, REPO)] + sys.argv)


def api_versions_v3_request(correlation_id: int = 0) -> bytes:
    """An ApiVersions v3 request frame, byte for byte as kafka-python 3.0.12 sends it.

    Header v2: api_key 18, version 3, correlation id, client_id as a
    (non-compact) nullable string, empty tagged fields; body: two compact
    strings and empty tagged fields.
    """
    client_id = f"kafka-python-{KAFKA_PYTHON_VERSION}".encode()
    name = b"kafka-python"
    version = KAFKA_PYTHON_VERSION.encode()
    payload = (
        struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
        + bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
    )
    return _SIZE.pack(len(payload)) + payload


def check_against_kafka_python(frame: bytes, correlation_id: int) -> bool | None:
    """True if kafka-python (when installed) encodes the same frame; None if it is absent."""
    try:
        from kafka.protocol.metadata.api_versions import ApiVersionsRequest
    except ImportError:
        return None
    request = ApiVersionsRequest(version=3, client_software_name="kafka-python",
                                 client_software_version=KAFKA_PYTHON_VERSION)
    request.with_header(correlation_id=correlation_id, client_id=f"kafka-python-{KAFKA_PYTHON_VERSION}")
    return bytes(request.encode(framed=True, header=True)) == frame


def set_correlation(frame: bytearray, correlation_id: int) -> None:
    """Request frames: size(4) key(2) version(2) correlation(4)."""
    _CORRELATION.pack_into(frame, 8, correlation_id)


def response_correlation(frame: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """Response frames: size(4) correlation(4)."""
    return _CORRELATION.unpack_from(frame, offset + 4)[0]


def recv_exact(sock: socket.socket, count: int) -> bytes:
    chunks = []
    remaining = count
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError(f"peer closed with {remaining} of {count} bytes missing")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    """One response frame, size prefix included."""
    head = recv_exact(sock, 4)
    return head + recv_exact(sock, _SIZE.unpack(head)[0])


def connect(port: int) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def percentile(samples: list[float], fraction: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def machine_busy_s() -> float:
    """CPU seconds all CPUs spent busy since boot (Linux /proc/stat; idle and iowait excluded)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _wait_port_file(process: subprocess.Popen, port_file: Path, what: str, log_path: Path) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if port_file.exists():
            text = port_file.read_text().strip()
            if text:
                return int(text)
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early ({process.returncode}); see {log_path}:\n"
                               f"{log_path.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not write {port_file} within {START_TIMEOUT_S} s")
        time.sleep(0.02)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


# Where `kraftwerk storage format` puts the metadata log inside a node's --log-dir. A copy of
# server.storage.bootstrap.METADATA_LOG_DIR_NAME: the load generator runs this module with only
# bench/ on sys.path, so it cannot import the server's packages.
METADATA_LOG_DIR_NAME = "__cluster_metadata-0"


def random_cluster_id() -> str:
    """A fresh cluster id from `kraftwerk storage random-uuid`."""
    return subprocess.run([PYTHON, "-m", "cli.main", "storage", "random-uuid"], cwd=REPO, check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def kraftwerk_metadata_log_dir(work: Path) -> Path:
    """The metadata log directory of the controller `kraftwerk_controller(work)` runs (open it after stop)."""
    return work / "controller-1" / METADATA_LOG_DIR_NAME


@contextmanager
def kraftwerk_controller(work: Path, metadata_version: str = "3.8-IV0", extra_args: list[str] | None = None,
                         cluster_id: str | None = None):
    """A formatted, running `kraftwerk controller` on 127.0.0.1:<ephemeral>; yields (process, port).

    `cluster_id`: format with this id (requests that must name the cluster need it);
    a random one when None.
    """
    log_dir = work / "controller-1"
    log_path = work / "controller-1.log"
    port_file = work / "controller-1.port"
    cli = [PYTHON, "-m", "cli.main"]
    if cluster_id is None:
        cluster_id = random_cluster_id()
    subprocess.run(cli + ["storage", "format", "--cluster-id", cluster_id, "--metadata-version", metadata_version,
                          "--log-dir", str(log_dir)], cwd=REPO, check=True, capture_output=True, timeout=60)
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            cli + ["controller", "--listener", f"{HOST}:0", "--log-dir", str(log_dir), "--port-file", str(port_file)]
            + (extra_args or []),
            cwd=REPO, stdout=log_file, stderr=log_file,
        )
    try:
        yield process, _wait_port_file(process, port_file, "kraftwerk controller", log_path)
    finally:
        stop(process)


@contextmanager
def canned_server(work: Path, response_frame: bytes):
    """bench/canned_server.py answering every request with `response_frame` (correlation patched)."""
    response_path = work / "canned-response.bin"
    response_path.write_bytes(response_frame)
    port_file = work / "canned.port"
    log_path = work / "canned.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            [PYTHON, str(REPO / "bench" / "canned_server.py"), "--response-file", str(response_path),
             "--port-file", str(port_file)],
            cwd=REPO, stdout=log_file, stderr=log_file,
        )
    try:
        yield process, _wait_port_file(process, port_file, "canned server", log_path)
    finally:
        stop(process)


def work_dir(parent: str | None, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


# --------------------------------------------------------------------------
# a Raft quorum of real controller processes (cli/local_cluster.py)
# --------------------------------------------------------------------------

NOT_CONTROLLER = 41
UPDATE_FEATURES_KEY = 57
METADATA_KEY, METADATA_VERSION = 3, 12
DESCRIBE_QUORUM_KEY, DESCRIBE_QUORUM_VERSION = 55, 0
LEADER_POLL_S = 0.005  # between rounds of asking the survivors who leads; nothing to wait on instead


def free_ports(count: int) -> list[int]:
    """`count` ports the kernel just handed out on 127.0.0.1 (voters need them before they start)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Conn:
    """One blocking connection speaking any API through the project's own codec; one request at a time."""

    def __init__(self, port: int, client_id: str = "bench", timeout_s: float = SOCKET_TIMEOUT_S) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict):
        """(decoded response, send-to-reply ns)."""
        from io import BytesIO

        from protocol.header import REQUEST_HEADER, RESPONSE_HEADER, request_header_version, response_header_version
        from protocol.registry import API_MESSAGES

        self.correlation += 1
        request, response = API_MESSAGES[api_key]
        payload = REQUEST_HEADER.encode(request_header_version(request, version), {
            "request_api_key": api_key, "request_api_version": version,
            "correlation_id": self.correlation, "client_id": self.client_id,
        }) + request.encode(version, body)
        frame = _SIZE.pack(len(payload)) + payload
        started = time.perf_counter_ns()
        self.sock.sendall(frame)
        answer = recv_frame(self.sock)
        elapsed_ns = time.perf_counter_ns() - started
        stream = BytesIO(answer[4:])
        header = RESPONSE_HEADER.decode(response_header_version(request, version), stream)
        if header.correlation_id != self.correlation:
            raise RuntimeError("correlation id mismatch")
        return response.decode(version, stream), elapsed_ns

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def metadata_controller_id(conn: Conn) -> int:
    reply, _ = conn.call(METADATA_KEY, METADATA_VERSION, {"topics": [], "allow_auto_topic_creation": False})
    return reply.controller_id


def is_active_controller(conn: Conn) -> bool:
    """True if this node's controller loop accepts commands: an empty validate-only UpdateFeatures
    is answered NOT_CONTROLLER by a standby (and by a leader not ready yet), 0 by the active one."""
    reply, _ = conn.call(UPDATE_FEATURES_KEY, 1, {"timeout_ms": 5_000, "feature_updates": [],
                                                  "validate_only": True})
    if reply.error_code not in (0, NOT_CONTROLLER):
        raise RuntimeError(f"empty validate-only UpdateFeatures failed: {reply.error_code} {reply.error_message}")
    return reply.error_code == 0


def describe_quorum(conn: Conn):
    """The leader's view of partition 0 of __cluster_metadata (any node answers)."""
    reply, _ = conn.call(DESCRIBE_QUORUM_KEY, DESCRIBE_QUORUM_VERSION, {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
    return reply.topics[0].partitions[0] if reply.error_code == 0 and reply.topics else None


class Quorum:
    """`count` voters of one cluster as real processes (cli/local_cluster.py); restartable by id."""

    def __init__(self, work: Path, count: int, metadata_version: str, overrides: dict[str, str] | None = None,
                 cluster_id: str | None = None, profile_dir: Path | None = None) -> None:
        from cli import local_cluster as lc

        self._lc = lc
        # cProfile each controller into profile_dir/controller-<id>-<start>.prof (written on SIGTERM).
        self.profile_dir = profile_dir
        self._starts = 0
        self.cluster_id = cluster_id or random_cluster_id()
        ports = free_ports(count)
        self.specs = {node_id: lc.ControllerSpec(node_id, port, work)
                      for node_id, port in zip(range(1, count + 1), ports)}
        voters = list(self.specs.values())
        for spec in voters:
            lc.write_config(spec, voters, overrides)
            lc.format_controller(spec, self.cluster_id, metadata_version)
        self.processes: dict[int, object] = {}

    def start(self, node_id: int) -> None:
        if self.profile_dir is None:
            self.processes[node_id] = self._lc.start_controller(self.specs[node_id])
            return
        self._starts += 1
        output = self.profile_dir / f"controller-{node_id}-{self._starts}.prof"
        plain = self._lc.CLI
        self._lc.CLI = [PYTHON, "-m", "cProfile", "-o", str(output), "-m", "cli.main"]
        try:
            self.processes[node_id] = self._lc.start_controller(self.specs[node_id])
        finally:
            self._lc.CLI = plain

    def start_all(self) -> None:
        for node_id in self.specs:
            self.start(node_id)

    def port(self, node_id: int) -> int:
        return self.specs[node_id].port

    def pid(self, node_id: int) -> int:
        return self.processes[node_id].process.pid

    def alive(self) -> list[int]:
        return [node_id for node_id, p in self.processes.items() if p.alive()]

    def kill(self, node_id: int) -> None:
        """kill -9 (the process group), then reap it."""
        self._lc.stop_controller(self.processes[node_id], kill=True)

    def stop_all(self) -> None:
        for node_id, process in self.processes.items():
            self._lc.stop_controller(process)

    def metadata_log_dir(self, node_id: int) -> Path:
        return self.specs[node_id].metadata_dir / METADATA_LOG_DIR_NAME

    def find_active(self, timeout_s: float, among: list[int] | None = None) -> int:
        """The node whose controller accepts commands, found by asking the live nodes who leads."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node_id in among or self.alive():
                try:
                    with Conn(self.port(node_id), "bench-find-leader", timeout_s=2.0) as conn:
                        leader = metadata_controller_id(conn)
                    if leader in self.specs and leader in self.alive():
                        with Conn(self.port(leader), "bench-find-leader", timeout_s=2.0) as conn:
                            if is_active_controller(conn):
                                return leader
                except OSError:
                    pass
            time.sleep(LEADER_POLL_S)
        raise RuntimeError(f"no active controller among {among or self.alive()} within {timeout_s} s")


@contextmanager
def kraftwerk_quorum(work: Path, count: int, metadata_version: str = "3.8-IV0",
                     overrides: dict[str, str] | None = None, cluster_id: str | None = None,
                     profile_dir: Path | None = None):
    """`count` formatted, running voters on 127.0.0.1; yields (quorum, active controller id)."""
    quorum = Quorum(work, count, metadata_version, overrides, cluster_id, profile_dir)
    try:
        quorum.start_all()
        yield quorum, quorum.find_active(START_TIMEOUT_S)
    finally:
        quorum.stop_all()
