"""A real ZooKeeper 3.8 server as a child process, for tests, benches and `cluster up`.

Owns: `ZooKeeperProcess` (write zoo.cfg, start Debian's ZooKeeper as a plain java
process on 127.0.0.1, wait until it serves, stop/kill/restart it) and
`zookeeper_missing()` (why ZooKeeper cannot run here, or None).

Rules kept here:
- Only 127.0.0.1; the port is the caller's and kept across restarts, so a
  client's connect string stays valid. It is never picked here: a port probed
  free inside the kernel's ephemeral range can be taken by any outgoing
  connection before ZooKeeper binds it (or between a stop and the restart), and
  the reservation below that range lives with the local cluster tooling
  (cli/local_cluster.py `free_port_run`), which this package must not import.
- Readiness is the four-letter word `srvr` answering with the server's stats (a
  server that is up but not yet serving answers "not currently serving requests",
  which is not ready). Every wait is a bounded loop with a deadline; a failure
  raises `ZooKeeperStartError` carrying the tail of the server's log.
- The server's stdout/stderr go to `<data_dir>/zookeeper.log`, never to a pipe: a
  chatty JVM must not block on a full pipe buffer.
- Blocking by design (subprocess + sockets): trio code calls it through
  `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
LOCALHOST = "127.0.0.1"

# Between readiness probes: short enough to notice readiness quickly, long enough not
# to spin a core of a 2-core machine while the JVM starts.
_PROBE_INTERVAL_S = 0.05
_PROBE_SOCKET_TIMEOUT_S = 1.0
_LOG_TAIL_BYTES = 4000


class ZooKeeperStartError(RuntimeError):
    """ZooKeeper did not come up (exited, or did not serve before the deadline)."""


def zookeeper_missing() -> str | None:
    """Why a ZooKeeper server cannot be started here, or None when it can."""
    if shutil.which("java") is None:
        return "java is not installed (apt-get install default-jre-headless)"
    if not ZOOKEEPER_JAR.is_file():
        return f"{ZOOKEEPER_JAR} is missing (apt-get install zookeeper)"
    return None


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port`. SO_REUSEADDR, as the server sets
    it, so connections of an earlier run lingering in TIME_WAIT do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOCALHOST, port))
        except OSError:
            return False
    return True


def four_letter_word(port: int, word: str, timeout_s: float = _PROBE_SOCKET_TIMEOUT_S) -> str:
    """Sends a ZooKeeper four-letter command and returns the whole answer (OSError if none)."""
    with socket.create_connection((LOCALHOST, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        # The server closes the connection after answering; cap the answer's size.
        for _ in range(256):
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    """zoo.cfg knobs kraftwerk sets. `force_sync=False` skips fsync per write: test and
    bench tooling only (a kill -9 of the server still loses nothing the OS has)."""

    # A client's session timeout is clamped to [2, 20] ticks by the server.
    tick_time_ms: int = 2000
    force_sync: bool = False
    max_heap_mb: int = 1024


class ZooKeeperProcess:
    """One standalone ZooKeeper server on 127.0.0.1:`port`, data in `data_dir`.

    `port`: one reserved for this server (tests and tools: `free_port_run(1)`)."""

    def __init__(self, data_dir: Path, port: int, settings: ZooKeeperSettings | None = None) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"ZooKeeper needs a fixed port (1-65535), got {port}")
        self.data_dir = Path(data_dir)
        self.port = port
        self.settings = settings or ZooKeeperSettings()
        self._process: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ properties

    @property
    def hosts(self) -> str:
        """The connect string: "127.0.0.1:PORT"."""
        return f"{LOCALHOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.settings.tick_time_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOCALHOST}",
            # No Jetty admin server: it would take port 8080 for every instance.
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok",
            # Tests open many sessions from one address.
            "maxClientCnxns=0",
            f"forceSync={'yes' if self.settings.force_sync else 'no'}",
            # Keep the data dir small over long benches.
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
        ]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return self.config_path

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts the server and returns once `srvr` answers; raises ZooKeeperStartError."""
        if self.is_running():
            raise RuntimeError(f"ZooKeeper on port {self.port} is already running")
        reason = zookeeper_missing()
        if reason is not None:
            raise ZooKeeperStartError(reason)
        if not port_is_free(self.port):
            # Checked first because readiness is probed on the port: another server
            # there would answer `srvr` and pass for this one.
            raise ZooKeeperStartError(f"port {self.port} on {LOCALHOST} is already in use")
        self.write_config()
        command = [
            "java",
            f"-Xmx{self.settings.max_heap_mb}m",
            # Serial GC: one JVM per test on a small machine; no parallel GC threads.
            "-XX:+UseSerialGC",
            "-cp",
            f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
            MAIN_CLASS,
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting: {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                # Its own process group: a test runner's Ctrl-C does not reach it before
                # our cleanup does, and we signal exactly this process.
                start_new_session=True,
            )
        try:
            self.wait_serving(timeout_s)
        except BaseException:
            self.kill()
            raise

    def wait_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last_answer = ""
        while True:
            if self._process is None or self._process.poll() is not None:
                code = self._process.returncode if self._process is not None else None
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with status {code} while starting:\n{self.log_tail()}"
                )
            try:
                last_answer = four_letter_word(self.port, "srvr")
            except OSError as exc:
                last_answer = f"({exc})"
            if "Zookeeper version" in last_answer and "Mode:" in last_answer:
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.hosts} did not serve within {timeout_s}s "
                    f"(last srvr answer: {last_answer.strip()!r}):\n{self.log_tail()}"
                )
            time.sleep(_PROBE_INTERVAL_S)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Idempotent."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        self._process = None

    def kill(self) -> None:
        """SIGKILL (for fault tests): no shutdown, the data dir keeps what was written."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass
            process.wait(timeout=10)
        self._process = None

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stops (gracefully) and starts again on the same port with the same data."""
        self.stop()
        self.start(timeout_s)

    def srvr(self) -> str:
        return four_letter_word(self.port, "srvr")

    def log_tail(self, limit_bytes: int = _LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - limit_bytes))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> ZooKeeperProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"ZooKeeperProcess({self.hosts}, {state}, data_dir={str(self.data_dir)!r})"
