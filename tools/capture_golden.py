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
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for protocol.registry (api names) when run as a script
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


# -- proxy mode ---------------------------------------------------------------

CONTROLLER_START_TIMEOUT_S = 20.0
PROXY_IDLE_TIMEOUT_S = 30.0
PROXY_MAX_CONNECTIONS = 64
PROXY_MAX_FRAMES_PER_CONNECTION = 1000
CONNECTION_DRAIN_TIMEOUT_S = 5.0
API_VERSIONS_KEY = 18
METADATA_VERSION = "3.7-IV4"

# client -> Python code or argv template; PORT is replaced by the proxy port.
# Each step is wrapped so that one refused request does not hide the frames
# of the steps after it.
SESSIONS: dict[str, str | list[str]] = {
    "kafka-python": textwrap.dedent("""
        from kafka.admin import KafkaAdminClient
        admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:PORT", client_id="kraftwerk-golden", request_timeout_ms=5000)
        steps = [
            ("describe_cluster", lambda: admin.describe_cluster()),
            ("describe_features", lambda: admin.describe_features()),
            ("update_features", lambda: admin.update_features({"metadata.version": 20}, validate_only=True)),
            ("describe_metadata_quorum", lambda: admin.describe_metadata_quorum()),
        ]
        for name, step in steps:
            try:
                print(name, step(), flush=True)
            except Exception as exc:
                print(name, "FAILED", repr(exc), flush=True)
        admin.close()
    """),
    "confluent-kafka": textwrap.dedent("""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": "127.0.0.1:PORT", "client.id": "kraftwerk-golden"})
        steps = [
            ("list_topics", lambda: admin.list_topics(timeout=5)),
            ("describe_cluster", lambda: admin.describe_cluster(request_timeout=5).result(timeout=10)),
        ]
        for name, step in steps:
            try:
                print(name, step(), flush=True)
            except Exception as exc:
                print(name, "FAILED", repr(exc), flush=True)
    """),
    "kcat": ["kcat", "-L", "-b", "127.0.0.1:PORT", "-m", "5"],
}

# What each session does, for the .meta files (the code itself is above).
SESSION_SUMMARIES = {
    "kafka-python": 'KafkaAdminClient(bootstrap_servers="127.0.0.1:PORT", client_id="kraftwerk-golden", '
                    'request_timeout_ms=5000): describe_cluster(); describe_features(); '
                    'update_features({"metadata.version": 20}, validate_only=True); describe_metadata_quorum(); close()',
    "confluent-kafka": 'AdminClient({"bootstrap.servers": "127.0.0.1:PORT", "client.id": "kraftwerk-golden"}): '
                       'list_topics(timeout=5); describe_cluster(request_timeout=5).result(timeout=10)',
    "kcat": "kcat -L -b 127.0.0.1:PORT -m 5",
}


def session_command(client: str, port: int) -> list[str]:
    session = SESSIONS[client]
    if isinstance(session, str):
        return [sys.executable, "-c", session.replace("PORT", str(port))]
    return [part.replace("PORT", str(port)) for part in session]


def read_frame(conn: socket.socket) -> bytes | None:
    """One size-prefixed frame body, or None on a clean close between frames."""
    first = conn.recv(4)
    if not first:
        return None
    size_bytes = first + (read_exact(conn, 4 - len(first)) if len(first) < 4 else b"")
    size = int.from_bytes(size_bytes, "big", signed=True)
    if not 0 < size <= FRAME_MAX_BYTES:
        raise ValueError(f"implausible frame size {size}")
    return read_exact(conn, size)


@dataclass
class Exchange:
    request: bytes
    response: bytes | None = None

    @property
    def api(self) -> tuple[int, int]:
        return int.from_bytes(self.request[0:2], "big"), int.from_bytes(self.request[2:4], "big")

    @property
    def correlation_id(self) -> int:
        return int.from_bytes(self.request[4:8], "big", signed=True)


@dataclass
class Connection:
    client: str
    index: int
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)


class RecordingProxy:
    """Forwards whole frames both ways between clients and the controller and
    records them per connection. Frames are relayed byte for byte; only the
    recorder looks inside (api key, version, correlation id)."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.upstream: tuple[str, int] | None = None
        self.client = "unknown"
        self.connections: list[Connection] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)

    def accept_loop(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set() and len(self.connections) < PROXY_MAX_CONNECTIONS:
            try:
                downstream, _ = self.listener.accept()
            except TimeoutError:
                continue
            assert self.upstream is not None
            upstream = socket.create_connection(self.upstream, timeout=PROXY_IDLE_TIMEOUT_S)
            downstream.settimeout(PROXY_IDLE_TIMEOUT_S)
            record = Connection(self.client, len(self.connections))
            self.connections.append(record)
            requests = threading.Thread(target=self.relay_requests, args=(downstream, upstream, record), daemon=True)
            responses = threading.Thread(target=self.relay_responses, args=(upstream, downstream, record), daemon=True)
            requests.start()
            responses.start()
            threading.Thread(target=self.close_when_done, args=(requests, responses, downstream, upstream, record),
                             daemon=True).start()

    @staticmethod
    def relay_requests(src: socket.socket, dst: socket.socket, record: Connection) -> None:
        try:
            for _ in range(PROXY_MAX_FRAMES_PER_CONNECTION):
                frame = read_frame(src)
                if frame is None:
                    break
                with record.lock:
                    record.exchanges.append(Exchange(frame))
                dst.sendall(len(frame).to_bytes(4, "big") + frame)
        except (OSError, ValueError, ConnectionError):
            pass
        finally:
            # Half-close so the controller sees the client leave and closes too.
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    @staticmethod
    def relay_responses(src: socket.socket, dst: socket.socket, record: Connection) -> None:
        try:
            for _ in range(PROXY_MAX_FRAMES_PER_CONNECTION):
                frame = read_frame(src)
                if frame is None:
                    break
                correlation_id = int.from_bytes(frame[0:4], "big", signed=True)
                with record.lock:
                    for exchange in record.exchanges:
                        if exchange.response is None and exchange.correlation_id == correlation_id:
                            exchange.response = frame
                            break
                dst.sendall(len(frame).to_bytes(4, "big") + frame)
        except (OSError, ValueError, ConnectionError):
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    @staticmethod
    def close_when_done(requests, responses, downstream, upstream, record: Connection) -> None:
        requests.join(PROXY_IDLE_TIMEOUT_S)
        responses.join(PROXY_IDLE_TIMEOUT_S)
        downstream.close()
        upstream.close()
        record.done.set()


def run(command: list[str], timeout_s: float = 10.0) -> str:
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT, check=True)
    return out.stdout.strip()


def start_controller(work: Path, proxy_port: int) -> tuple[subprocess.Popen, int, str]:
    cli = [sys.executable, "-m", "cli.main"]
    log_dir = work / "metadata"
    port_file = work / "port"
    cluster_id = run(cli + ["storage", "random-uuid"])
    run(cli + ["storage", "format", "--cluster-id", cluster_id, "--metadata-version", METADATA_VERSION,
               "--log-dir", str(log_dir), "--listener", "127.0.0.1:0"])
    log = (work / "controller.log").open("w")
    proc = subprocess.Popen(
        cli + ["controller", "--log-dir", str(log_dir), "--listener", "127.0.0.1:0", "--port-file", str(port_file),
               "--override", f"advertised.listeners=CONTROLLER://127.0.0.1:{proxy_port}"],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
    )
    deadline = time.monotonic() + CONTROLLER_START_TIMEOUT_S
    # Bounded by the deadline: the port file appears once the listener is bound.
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text().strip()), cluster_id
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=CLIENT_TIMEOUT_S)
    raise RuntimeError(f"controller did not start; see {work / 'controller.log'}")


def drive(proxy: RecordingProxy, client: str, proxy_port: int) -> list[Connection]:
    before = len(proxy.connections)
    proxy.client = client
    proc = subprocess.run(session_command(client, proxy_port), capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S, cwd=ROOT)
    for line in (proc.stdout + proc.stderr).splitlines()[-20:]:
        print(f"  [{client}] {line}", file=sys.stderr)
    connections = proxy.connections[before:]
    for connection in connections:
        connection.done.wait(CONNECTION_DRAIN_TIMEOUT_S)
    return connections


def fixture_stem(client: str, api_key: int, api_version: int, variant: int) -> str:
    from protocol.registry import api_name

    suffix = "" if variant == 1 else f".{variant}"
    return f"{client}.{api_name(api_key).lower()}-v{api_version}{suffix}"


def capture_via_proxy(out_dir: Path) -> None:
    from protocol.registry import api_name

    with tempfile.TemporaryDirectory(prefix="kraftwerk-golden-") as tmp, \
            socket.create_server(("127.0.0.1", 0)) as listener:
        proxy_port = listener.getsockname()[1]
        controller, controller_port, cluster_id = start_controller(Path(tmp), proxy_port)
        proxy = RecordingProxy(listener)
        proxy.upstream = ("127.0.0.1", controller_port)
        proxy.thread.start()
        try:
            for client in SESSIONS:
                connections = drive(proxy, client, proxy_port)
                version = client_version(client)
                # Distinct by everything but the correlation id: a client may send
                # the same API version with different bodies (librdkafka asks
                # for brokers only, topics [], then for all topics, null).
                variants: dict[tuple[int, int], list[bytes]] = {}
                for connection in connections:
                    with connection.lock:
                        exchanges = list(connection.exchanges)
                    for exchange in exchanges:
                        api_key, api_version = exchange.api
                        summary = (f"{client} conn {connection.index}: {api_name(api_key)} v{api_version} "
                                   f"corr {exchange.correlation_id}, {len(exchange.request)} bytes, "
                                   f"response {'none' if exchange.response is None else len(exchange.response)}")
                        print(summary)
                        body = exchange.request[:4] + exchange.request[8:]
                        known = variants.setdefault((api_key, api_version), [])
                        if api_key == API_VERSIONS_KEY or body in known:
                            continue
                        known.append(body)
                        stem = fixture_stem(client, api_key, api_version, len(known))
                        (out_dir / f"{stem}.hex").write_text(exchange.request.hex() + "\n")
                        meta = {"client": version, "command": SESSION_SUMMARIES[client], "api": api_name(api_key),
                                "api_key": api_key, "api_version": api_version, "variant": len(known),
                                "connection": connection.index, "correlation_id": exchange.correlation_id,
                                "server": f"kraftwerk controller, metadata.version {METADATA_VERSION}, behind a "
                                          "recording proxy",
                                # What the reply must carry: the advertised
                                # endpoint is the proxy's port.
                                "cluster_id": cluster_id, "advertised_port": proxy_port}
                        (out_dir / f"{stem}.meta").write_text(json.dumps(meta) + "\n")
                        if exchange.response is not None:
                            (out_dir / f"{stem}.response.hex").write_text(exchange.response.hex() + "\n")
        finally:
            proxy.stop.set()
            proxy.thread.join(CONNECTION_DRAIN_TIMEOUT_S)
            controller.terminate()
            try:
                controller.wait(timeout=CLIENT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                controller.kill()
                controller.wait(timeout=CLIENT_TIMEOUT_S)


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) > 1 else "all"
    out_dir = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    out_dir.mkdir(parents=True, exist_ok=True)
    if which == "proxy":
        capture_via_proxy(out_dir)
        return 0
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
