"""Soak: hostile clients on loopback while an operator's admin calls keep working.

One real controller process with Kafka's limits set low enough to reach. Hostile
clients come from their own loopback addresses (127.0.0.2-.6: Linux routes all of
127/8 to lo), so the per-IP limit is what keeps them from the operator, as on a real
network:
- slowloris: starts frames and dribbles them a byte at a time;
- oversized: frames above socket.request.max.bytes;
- garbage: random bytes;
- flood: as many connections as the kernel lets it open, held open;
- memory hog: frames just under the size limit, sent in full but never completed,
  from many connections at once (queued.max.request.bytes is what bounds them).
Meanwhile kafka-python creates a SCRAM user per round (a committed write) and
describes the cluster, from 127.0.0.1. Asserted: every admin call succeeds within a
liveness bound (10 s — not a performance target; the latencies are printed), every
acknowledged user is in the controller's metadata at the end, the server is alive, logged no handler failure,
refused the flood over the per-IP limit, and its resident memory grew by less than
the request-memory pool plus slack (without the pool the hogs alone would hold
~250 MB).

`SOAK_SECONDS` (default 15) sets the duration; every loop is bounded by it and by a count.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest

from .helpers import SOCKET_TIMEOUT_S, api_versions_request

pytestmark = pytest.mark.e2e

SOAK_S = float(os.environ.get("SOAK_SECONDS", "15"))
MAX_REQUEST_BYTES = 32 * 1024 * 1024
POOL_BYTES = 32 * 1024 * 1024
PER_IP = 40
RECEIVE_TIMEOUT_MS = 2_000
LIVENESS_BOUND_S = 10.0
MAX_CONNECTIONS_PER_HOSTILE_LOOP = 5_000
HOGS = 8
RSS_SLACK_BYTES = 80 * 1024 * 1024


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Hostile:
    """Runs hostile loops in threads until `stop` is set; counts what happened."""

    def __init__(self, port: int, seed: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def _connect(self, source: str, timeout_s: float = 2.0) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", self.port))
            return sock
        except OSError:
            sock.close()
            return None

    def slowloris(self) -> None:
        held: list[socket.socket] = []
        for _ in range(MAX_CONNECTIONS_PER_HOSTILE_LOOP):
            if self.stop.is_set():
                break
            while len(held) < PER_IP // 2:
                sock = self._connect("127.0.0.2")
                if sock is None:
                    break
                try:
                    sock.sendall(struct.pack(">i", 1000) + b"\x00")
                except OSError:
                    sock.close()
                    continue
                held.append(sock)
                self._count("slowloris_opened")
            alive = []
            for sock in held:
                try:
                    sock.sendall(b"\x00")
                    alive.append(sock)
                except OSError:
                    self._count("slowloris_closed_by_server")
                    sock.close()
            held = alive
            self.stop.wait(0.5)  # the attack's own pace: a byte per connection per half second
        for sock in held:
            sock.close()

    def _one_shot(self, source: str, payload: bytes, key: str) -> None:
        sock = self._connect(source)
        if sock is None:
            return
        try:
            sock.sendall(payload)
            sock.settimeout(3.0)
            if sock.recv(1) == b"":
                self._count(key + "_closed_by_server")
        except OSError:
            self._count(key + "_closed_by_server")
        finally:
            sock.close()

    def oversized(self) -> None:
        for _ in range(MAX_CONNECTIONS_PER_HOSTILE_LOOP):
            if self.stop.is_set():
                break
            size = MAX_REQUEST_BYTES + 1 + self.rng.randrange(1 << 20)
            self._one_shot("127.0.0.3", struct.pack(">i", size) + b"\x00" * 64, "oversized")

    def garbage(self) -> None:
        for _ in range(MAX_CONNECTIONS_PER_HOSTILE_LOOP):
            if self.stop.is_set():
                break
            junk = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200)))
            # A valid size prefix around junk reaches the decoder; a bare one the framing.
            payload = struct.pack(">i", len(junk)) + junk if self.rng.random() < 0.5 else junk
            self._one_shot("127.0.0.4", payload, "garbage")

    def flood(self) -> None:
        held: list[socket.socket] = []
        for _ in range(PER_IP * 3):
            if self.stop.is_set():
                break
            sock = self._connect("127.0.0.5")
            if sock is None:
                continue
            held.append(sock)
            self._count("flood_opened")
        self.stop.wait(SOAK_S)
        for sock in held:
            try:
                sock.settimeout(0.01)
                if sock.recv(1) == b"":
                    self._count("flood_closed_by_server")
            except socket.timeout:
                self._count("flood_still_open")
            except OSError:
                self._count("flood_closed_by_server")
            sock.close()

    def memory_hogs(self) -> None:
        body = b"\x00" * (MAX_REQUEST_BYTES - 16)
        held = []
        for _ in range(HOGS):
            sock = self._connect("127.0.0.6", timeout_s=0.5)
            if sock is None:
                continue
            held.append(sock)
            try:
                # Declare one byte more than is sent: the frame never completes.
                sock.sendall(struct.pack(">i", len(body) + 1))
            except OSError:
                continue
        senders = []
        for sock in held:
            def push(sock=sock):
                try:
                    sock.sendall(body)
                    self._count("hog_sent_full_frame")
                except OSError:
                    self._count("hog_stopped_by_server")
            thread = threading.Thread(target=push, daemon=True)
            thread.start()
            senders.append(thread)
        self.stop.wait(SOAK_S)
        for sock in held:
            sock.close()
        for thread in senders:
            thread.join(5)


def test_hostile_clients_do_not_stop_the_operator(controllers):
    from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialUpsertion

    controller = controllers.new(overrides=(
        f"socket.request.max.bytes={MAX_REQUEST_BYTES}",
        f"queued.max.request.bytes={POOL_BYTES}",
        f"max.connections.per.ip={PER_IP}",
        "max.connections=1000",
        f"kraftwerk.request.receive.timeout.ms={RECEIVE_TIMEOUT_MS}",
        "connections.max.idle.ms=60000",
    ))
    pid = controller.process.pid
    # Warm the server up (imports, first requests) before taking the memory baseline.
    with socket.create_connection(("127.0.0.1", controller.port), timeout=SOCKET_TIMEOUT_S) as sock:
        sock.sendall(api_versions_request(1))
        assert sock.recv(4)
    admin = KafkaAdminClient(bootstrap_servers=controller.address, client_id="soak-operator",
                             request_timeout_ms=int(LIVENESS_BOUND_S * 1000))
    admin.describe_cluster()
    baseline_rss = _rss_bytes(pid)
    seed = random.randrange(1 << 30)
    hostile = Hostile(controller.port, seed)
    threads = [threading.Thread(target=loop, daemon=True) for loop in
               (hostile.slowloris, hostile.oversized, hostile.garbage, hostile.flood, hostile.memory_hogs)]
    peak_rss = baseline_rss
    latencies: list[float] = []
    acknowledged: list[str] = []
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + SOAK_S
        for index in range(10_000):
            if time.monotonic() > deadline:
                break
            name = f"soak-{index}"
            started = time.monotonic()
            # A write the controller commits (a SCRAM user; no broker is needed for it).
            result = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                name, ScramMechanism.SCRAM_SHA_256, f"password-{index}", iterations=4096)])
            assert result == {name: None}, result
            admin.describe_cluster()
            elapsed = time.monotonic() - started
            latencies.append(elapsed)
            assert elapsed < LIVENESS_BOUND_S, f"an admin round took {elapsed:.1f}s (seed {seed})"
            acknowledged.append(name)
            peak_rss = max(peak_rss, _rss_bytes(pid))
    finally:
        hostile.stop.set()
        for thread in threads:
            thread.join(SOAK_S + 10)
    peak_rss = max(peak_rss, _rss_bytes(pid))
    latencies.sort()
    print(f"soak seed={seed} rounds={len(latencies)} p50={latencies[len(latencies) // 2] * 1000:.1f}ms "
          f"p99={latencies[int(len(latencies) * 0.99)] * 1000:.1f}ms rss_growth={(peak_rss - baseline_rss) >> 20}MiB "
          f"hostile={hostile.counts}")
    assert len(acknowledged) >= 5, f"the operator got too few rounds through (seed {seed})"
    users = set(admin.describe_user_scram_credentials())
    admin.close()
    assert set(acknowledged) <= users, f"acknowledged users lost: {sorted(set(acknowledged) - users)}"
    controller.assert_alive()
    assert controller.events("net.handler_failed") == []
    # The flood hit the per-IP limit and was refused, at accept time.
    assert controller.events("net.connection_refused"), "no connection was refused over max.connections.per.ip"
    assert hostile.counts.get("flood_opened", 0) > 0
    # Slow and oversized frames were cut off by the server, not by the clients giving up.
    assert hostile.counts.get("slowloris_closed_by_server", 0) > 0
    assert hostile.counts.get("oversized_closed_by_server", 0) > 0
    assert controller.events("net.request_receive_timeout")
    assert peak_rss - baseline_rss < POOL_BYTES + RSS_SLACK_BYTES, (
        f"resident memory grew by {(peak_rss - baseline_rss) >> 20} MiB (seed {seed})")
