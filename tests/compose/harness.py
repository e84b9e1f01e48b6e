"""Compose clusters for the tests: the engine, the images, and one compose project.

Owns: starting a Docker engine when none answers (scripts/docker-engine) and stopping
only the one it started, building the images (scripts/compose-images), and
`ComposeProject`, which runs `docker-compose` for one project name with bounded waits
(up, health, kill, logs, down -v).

Rules kept here:
- Every wait polls observable state (`docker inspect`, a client's answer) against a
  deadline; nothing sleeps to synchronise.
- A project is always brought down with its volumes, even when its test fails, so no
  container outlives the test that started it.
- What cannot run here skips with the reason naming the component; with CI=true the
  suite turns that skip into a failure (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")
DOCKER_COMPOSE = "docker-compose"
HOST_FILE = REPO / "deploy" / "docker-compose.host.yml"
ENGINE_TIMEOUT_S = 300.0  # may install Debian packages first
IMAGE_TIMEOUT_S = 900.0  # a cold build: debootstrap, Python, pip, a JRE
COMPOSE_TIMEOUT_S = 180.0
HEALTHY_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.5


class ComposeUnavailable(RuntimeError):
    """The engine or an image cannot be had here; the message names what is missing."""


@dataclass
class Engine:
    started_here: bool

    @classmethod
    def start(cls) -> "Engine":
        if os.geteuid() != 0 and subprocess.run([DOCKER, "info"], capture_output=True).returncode != 0:
            raise ComposeUnavailable("Docker engine: none answers and starting one needs root")
        result = subprocess.run(["bash", str(REPO / "scripts" / "docker-engine"), "start"], capture_output=True,
                                text=True, timeout=ENGINE_TIMEOUT_S)
        if result.returncode != 0:
            raise ComposeUnavailable(f"Docker engine (docker.io, docker-compose): scripts/docker-engine start "
                                     f"failed: {result.stderr.strip()[-2000:]}")
        return cls(started_here=result.stdout.strip().endswith("started"))

    def stop(self) -> None:
        if self.started_here:
            subprocess.run(["bash", str(REPO / "scripts" / "docker-engine"), "stop"], timeout=60)


def build_images(*images: str) -> None:
    result = subprocess.run(["bash", str(REPO / "scripts" / "compose-images"), *images], capture_output=True,
                            text=True, timeout=IMAGE_TIMEOUT_S)
    if result.returncode != 0:
        raise ComposeUnavailable(f"compose images {' '.join(images)}: scripts/compose-images failed: "
                                 f"{(result.stdout + result.stderr).strip()[-3000:]}")


def image_size_bytes(tag: str) -> int:
    out = subprocess.run([DOCKER, "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True,
                         text=True, check=True, timeout=30)
    return int(out.stdout.strip())


@dataclass
class ComposeProject:
    """One compose project (`-p name`) over one or more compose files."""

    name: str
    files: tuple[Path, ...]
    env: dict[str, str] = field(default_factory=dict)

    def command(self, *args: str) -> list[str]:
        argv = [DOCKER_COMPOSE, "-p", self.name]
        for path in self.files:
            argv += ["-f", str(path)]
        return argv + list(args)

    def run(self, *args: str, timeout_s: float = COMPOSE_TIMEOUT_S, check: bool = True,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env, **(extra_env or {})}
        result = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout_s, env=env,
                                cwd=REPO)
        if check and result.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return result

    def container_id(self, service: str) -> str | None:
        out = self.run("ps", "-q", service, check=False).stdout.strip()
        return out.splitlines()[0] if out else None

    def inspect(self, service: str) -> dict | None:
        container = self.container_id(service)
        if container is None:
            return None
        out = subprocess.run([DOCKER, "inspect", container], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return None
        return json.loads(out.stdout)[0]

    def health(self, service: str) -> str:
        """healthy / unhealthy / starting, or the container's state when it has no health (exited, ...)."""
        state = (self.inspect(service) or {}).get("State")
        if not state:
            return "missing"
        if not state.get("Running"):
            return f"{state.get('Status')} (exit {state.get('ExitCode')})"
        return (state.get("Health") or {}).get("Status", "running")

    def wait_healthy(self, services: list[str], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        """Seconds until every service is healthy; raises with each one's state and log tail."""
        start = time.monotonic()
        deadline = start + timeout_s
        while True:
            states = {service: self.health(service) for service in services}
            if all(state == "healthy" for state in states.values()):
                return time.monotonic() - start
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- {s} ({states[s]}):\n{self.logs(s)[-1500:]}" for s in services
                                  if states[s] != "healthy")
                raise AssertionError(f"not healthy after {timeout_s:.0f} s: {states}\n{tails}")
            time.sleep(POLL_INTERVAL_S)

    def logs(self, service: str) -> str:
        result = self.run("logs", "--no-color", service, check=False, timeout_s=60)
        return result.stdout + result.stderr

    def down(self) -> None:
        self.run("down", "-v", "--remove-orphans", "--timeout", "10", check=False)


def poll(predicate, timeout_s: float, what: str):
    """predicate() until it returns a truthy value (returned) or timeout_s passes."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - a node still starting answers with errors
            last_error = exc
        else:
            if value:
                return value
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last error: {last_error!r})")
