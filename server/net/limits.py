"""Connection and request-memory limits shared by all listeners of one node.

Owns: `ConnectionLimiter` (Kafka's `max.connections`, `max.connections.per.ip`
and `max.connections.per.ip.overrides`, counted at accept), `MemoryPool`
(Kafka's `queued.max.request.bytes`: the bytes of requests that have been
announced by their size prefix and not yet decoded, over all connections), and
`NetLimits`, which bundles them with their metrics for a node.

Rules kept here:
- Sans-I/O counting: `ConnectionLimiter` is plain bookkeeping; the listener
  closes a refused connection at once (Kafka closes a connection over its per-IP
  limit the same way; for the total limit Kafka's acceptor waits for a slot,
  kraftwerk closes, so that a flood cannot hold the accept queue).
- A reservation is released exactly once (the listener holds at most one per
  connection and releases it when the request is decoded or the connection ends).
- Waiting for memory is bounded by the caller (connections.max.idle.ms); the wait
  loop only turns when memory was released.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge

from server.config import ServerConfig


class ConnectionLimiter:
    """Counts open connections in total and per client address."""

    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(overrides or {})
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_per_ip)

    def count(self, host: str) -> int:
        return self._per_ip.get(host, 0)

    def try_acquire(self, host: str) -> str | None:
        """Counts a new connection from `host`; returns the reason when it is over a
        limit (and then counts nothing)."""
        if self.total >= self.max_connections:
            return f"max.connections={self.max_connections} reached"
        limit = self.limit_for(host)
        if self._per_ip.get(host, 0) >= limit:
            return f"max.connections.per.ip={limit} reached for {host}"
        self.total += 1
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        return None

    def release(self, host: str) -> None:
        count = self._per_ip.get(host, 0)
        if count <= 1:
            self._per_ip.pop(host, None)
        else:
            self._per_ip[host] = count - 1
        self.total = max(0, self.total - 1)


class MemoryPool:
    """A byte budget for requests being received (`queued.max.request.bytes`).

    `capacity_bytes < 0` is unbounded (Kafka's default). `high_water_bytes` records the
    most ever reserved at once, so tests can check the bound held."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.reserved_bytes = 0
        self.high_water_bytes = 0
        self.waits = 0  # reservations that had to wait (a connection was muted)
        self._released = trio.Event()

    @property
    def bounded(self) -> bool:
        return self.capacity_bytes >= 0

    def fits_ever(self, size: int) -> bool:
        return not self.bounded or size <= self.capacity_bytes

    def try_reserve(self, size: int) -> bool:
        if self.bounded and self.reserved_bytes + size > self.capacity_bytes:
            return False
        self.reserved_bytes += size
        self.high_water_bytes = max(self.high_water_bytes, self.reserved_bytes)
        return True

    async def reserve(self, size: int) -> None:
        """Waits until `size` bytes fit (the caller bounds the wait)."""
        if not self.fits_ever(size):
            raise ValueError(f"{size} bytes can never fit in queued.max.request.bytes={self.capacity_bytes}")
        if self.try_reserve(size):
            return
        self.waits += 1
        while not self.try_reserve(size):
            await self._released.wait()

    def release(self, size: int) -> None:
        if size <= 0:
            return
        self.reserved_bytes -= size
        released, self._released = self._released, trio.Event()
        released.set()


@dataclass
class NetLimits:
    """One node's shared limits and their metrics (created once per node, used by every
    listener of that node)."""

    connections: ConnectionLimiter
    memory: MemoryPool
    refused: Counter
    memory_reserved: Gauge
    handshake_failures: Counter
    timeouts: Counter

    @classmethod
    def from_config(cls, config: ServerConfig, registry: CollectorRegistry) -> "NetLimits":
        return cls(
            connections=ConnectionLimiter(config.max_connections, config.max_connections_per_ip,
                                          dict(config.max_connections_per_ip_overrides)),
            memory=MemoryPool(config.queued_max_request_bytes),
            refused=Counter("kraftwerk_connections_refused", "Connections closed at accept for a limit",
                            ["reason"], registry=registry),
            memory_reserved=Gauge("kraftwerk_request_memory_reserved_bytes",
                                  "Bytes of requests being received (queued.max.request.bytes pool)",
                                  registry=registry),
            handshake_failures=Counter("kraftwerk_tls_handshake_failures", "TLS handshakes that failed or timed out",
                                       ["listener"], registry=registry),
            timeouts=Counter("kraftwerk_request_timeouts", "Connections closed for a request timeout",
                             ["kind"], registry=registry),
        )
