"""Captures request (and response) frames real Kafka clients send, as golden bytes.

Two modes, both talking to nothing but 127.0.0.1:

    python tools/capture_golden.py {kafka-python,confluent-kafka,kcat,all} [OUT_DIR]
    python tools/capture_golden.py proxy [OUT_DIR]

(default OUT_DIR: tests/protocol/golden)

First-frame mode: a one-shot TCP listener (ephemeral port) accepts one
connection, reads one size-prefixed frame, closes, and writes the frame body
(without the int32 size) as hex to OUT_DIR/<client>.hex plus a line in
OUT_DIR/<client>.meta describing the client version and command. Every client
opens with ApiVersions, so that is all this mode can see.

Proxy mode: formats a temporary metadata directory, starts a real kraftwerk
controller behind a recording TCP proxy and drives each client through a
scripted session (SESSIONS). The proxy port is bound *before* the controller
starts, and the controller is told `advertised.listeners=` that port: clients
learn node addresses from Metadata/DescribeCluster replies and reconnect to
them, so advertising the controller's own port would route every later request
around the proxy. Frames pass through unmodified. The first request frame of
each distinct (client, api key, api version) is written to
OUT_DIR/<client>.<api>-v<N>.hex with a .meta JSON line, and the controller's
reply to it to OUT_DIR/<client>.<api>-v<N>.response.hex. ApiVersions requests
are left to first-frame mode (the same bytes).

Clients and the controller run in subprocesses killed after their session or
a timeout.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "protocol" / "golden"
ACCEPT_TIMEOUT_S = 15.0
READ_TIMEOUT_S = 5.0
FRAME_MAX_BYTES = 1 << 20
CLIENT_TIMEOUT_S = 20.0


def client_command(client: str, port: int) -> list[str]:
    python = sys.executable
    if client == "kafka-python":
        code = textwrap.dedent(f"""
            from kafka.admin import KafkaAdminClient
            KafkaAdminClient(bootstrap_servers="127.0.0.1:{port}", client_id="kraftwerk-golden", request_timeout_ms=3000)
        """)
        return [python, "-c", code]
    if client == "confluent-kafka":
        code = textwrap.dedent(f"""
            from confluent_kafka.admin import AdminClient
            AdminClient({{"bootstrap.servers": "127.0.0.1:{port}", "client.id": "kraftwerk-golden"}}).list_topics(timeout=3)
        """)
        return [python, "-c", code]
    if client == "kcat":
        return ["kcat", "-L", "-b", f"127.0.0.1:{port}", "-m", "2"]
    raise ValueError(f"unknown client {client}")


def client_version(client: str) -> str:
    if client == "kafka-python":
        import kafka

        return f"kafka-python {kafka.__version__}"
    if client == "confluent-kafka":
        import confluent_kafka

        return f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=5)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("Version"):
            return "kcat " + line.removeprefix("Version ").strip()
    return "kcat (unknown version)"


def read_exact(conn: socket.socket, n: int) -> bytes:
    chunks = []
    remaining = n
    # Bounded: each recv returns at least one byte or ends the loop.
    while remaining > 0:
        chunk = conn.recv(min(remaining, 65536))
        if not chunk:
            raise ConnectionError(f"peer closed with {remaining} bytes missing")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def capture(client: str) -> tuple[bytes, list[str]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(ACCEPT_TIMEOUT_S)
        port = server.getsockname()[1]
        command = client_command(client, port)
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(READ_TIMEOUT_S)
                size = int.from_bytes(read_exact(conn, 4), "big", signed=True)
                if not 0 < size <= FRAME_MAX_BYTES:
                    raise ValueError(f"implausible frame size {size}")
                frame = read_exact(conn, size)
        finally:
            proc.kill()
            proc.wait(timeout=CLIENT_TIMEOUT_S)
    shown = ["python" if part == sys.executable else part for part in command]
    shown = [part if "\n" not in part else repr("; ".join(line.strip() for line in part.strip().splitlines()))
             for part in shown]
    return frame, [p.replace(str(port), "PORT") for p in shown]


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) > 1 else "all"
    out_dir = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    clients = ["kafka-python", "confluent-kafka", "kcat"] if which == "all" else [which]
    for client in clients:
        frame, command = capture(client)
        (out_dir / f"{client}.hex").write_text(frame.hex() + "\n")
        meta = {"client": client_version(client), "command": " ".join(command)}
        (out_dir / f"{client}.meta").write_text(json.dumps(meta) + "\n")
        print(f"{client}: {len(frame)} bytes, api_key={int.from_bytes(frame[:2], 'big')} "
              f"version={int.from_bytes(frame[2:4], 'big')} ({meta['client']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
