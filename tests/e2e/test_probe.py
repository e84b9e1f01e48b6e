"""`python -m cli.probe HOST:PORT`, the compose files' healthcheck: exit 0 only when a
node answered ApiVersions without an error; otherwise exit 1 and one line naming the
address and why (nothing listening, a peer that speaks something else, a closed
connection), never a traceback."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading

import pytest

from e2e.helpers import REPO, cli_env

pytestmark = pytest.mark.e2e

PROBE_TIMEOUT_S = 30.0


def probe(address: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.probe", address, "--timeout-s", "2", *extra],
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=REPO, env=cli_env())


def frame(correlation_id: int, error_code: int) -> bytes:
    """An ApiVersions v3 answer with no API keys: header v0, then error code, an empty
    compact array, throttle time and no tagged fields."""
    payload = struct.pack(">ih", correlation_id, error_code) + b"\x01" + struct.pack(">i", 0) + b"\x00"
    return struct.pack(">i", len(payload)) + payload


def one_shot_server(answer: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listener that reads one request and writes `answer` back, then closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_a_serving_controller_is_healthy(controller):
    done = probe(controller.address)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_nothing_listening_is_unhealthy_in_one_line():
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
    done = probe(f"127.0.0.1:{port}")
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"127.0.0.1:{port}: no answer")


@pytest.mark.parametrize(("answer", "words"), [
    (b"", "closed the connection"),
    (struct.pack(">i", 1 << 30), "is not an ApiVersions response"),
    (struct.pack(">i", 6) + b"\x00\x00\x00\x01\xff", "closed the connection"),
    # UNSUPPORTED_VERSION comes in v0's layout (how a client learns the server's range).
    (struct.pack(">i", 10) + struct.pack(">ihi", 1, 35, 0), "error code 35"),
    (frame(7, 0), "another request"),
])
def test_what_is_not_an_answer_is_unhealthy(answer, words):
    server, thread = one_shot_server(answer)
    with server:
        done = probe(f"127.0.0.1:{server.getsockname()[1]}")
        thread.join(PROBE_TIMEOUT_S)
    assert done.returncode == 1
    assert words in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_address_without_a_port_is_a_usage_error():
    done = probe("localhost")
    assert done.returncode == 2 and "is not HOST:PORT" in done.stderr
