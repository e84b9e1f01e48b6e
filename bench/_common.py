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


# Where `kraftwerk storage format` puts the metadata log inside a node's --log-dir
# (server.node.METADATA_LOG_DIR_NAME; not imported, so _common needs no server import).
METADATA_LOG_DIR_NAME = "__cluster_metadata-0"


def random_cluster_id() -> str:
    """A fresh cluster id from `kraftwerk storage random-uuid`."""
    return subprocess.run([PYTHON, "-m", "server.cli", "storage", "random-uuid"], cwd=REPO, check=True,
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
    cli = [PYTHON, "-m", "server.cli"]
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
