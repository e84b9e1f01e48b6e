"""Real controller and broker processes on 127.0.0.1, for `kraftwerk demo`,
`kraftwerk cluster up`, benchmarks and tests.

Owns: writing a node's properties file, formatting its directory with the
real `kraftwerk storage format`, starting `kraftwerk controller` or
`kraftwerk broker` as a child process (ready once it writes its port file),
and stopping it (SIGTERM, then SIGKILL): a cluster's nodes in two waves, the brokers
together, then the controllers together (`stop_nodes`). Every wait is bounded.

Also owns `kraftwerk cluster up --secure`: `secure_material` (a CA and a node
certificate made with the openssl command, random passwords, the operator's client
properties; secrets only in files of mode 0600 under a 0700 directory) and
`SecureLocalCluster` (every listener SASL_SSL, nodes logging in with PLAIN against
static users, the operator with SCRAM, the StandardAuthorizer with the nodes and the
operator as super users).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import trio

from server.client import ClientError, KafkaClient
from server.config import load_properties
from server.security.client_config import ClientSecurity
from server.storage.meta_properties import random_uuid_string, read_meta_properties

# A broker reports its port only once its image has caught up (up to 30 s of its own).
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PORT_FILE_POLL_S = 0.02  # polling a child process's port file: there is no event to wait on

CLI = [sys.executable, "-m", "cli.main"]


class LocalClusterError(Exception):
    """A local process could not be formatted, started or reached."""


@dataclass(frozen=True, slots=True)
class ControllerSpec:
    """One local node: a controller (the default) or, with role="broker", a broker agent."""

    node_id: int
    port: int
    directory: Path  # holds the properties file, the log file and the metadata dir
    role: str = "controller"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def config_path(self) -> Path:
        return self.directory / f"{self.name}.properties"

    @property
    def metadata_dir(self) -> Path:
        return self.directory / self.name

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def port_file(self) -> Path:
        return self.directory / f"{self.name}.port"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def broker_spec(node_id: int, port: int, directory: Path) -> ControllerSpec:
    return ControllerSpec(node_id, port, directory, role="broker")


@dataclass
class ControllerProcess:
    spec: ControllerSpec
    process: subprocess.Popen
    port: int
    _log_handle: object = field(repr=False, default=None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None


def voters_property(specs: list[ControllerSpec]) -> str:
    return ",".join(f"{s.node_id}@127.0.0.1:{s.port}" for s in specs)


def write_config(spec: ControllerSpec, voters: list[ControllerSpec], extra: dict[str, str] | None = None,
                 broker_listener: str = "PLAINTEXT", bootstrap_servers: str | None = None) -> Path:
    """Writes the node's properties file; `broker_listener` names a broker's client listener.
    With `bootstrap_servers` the quorum is dynamic (KIP-853): no controller.quorum.voters,
    the controllers to ask first instead."""
    if spec.role == "broker":
        lines = [
            f"# Broker {spec.node_id}, written by kraftwerk's local cluster tooling.",
            f"node.id={spec.node_id}",
            "process.roles=broker",
            f"listeners={broker_listener}://127.0.0.1:{spec.port}",
            f"metadata.log.dir={spec.metadata_dir}",
            f"controller.quorum.bootstrap.servers={bootstrap_servers}" if bootstrap_servers
            else f"controller.quorum.voters={voters_property(voters)}",
        ]
    else:
        lines = [
            f"# Controller {spec.node_id}, written by kraftwerk's local cluster tooling.",
            f"node.id={spec.node_id}",
            "process.roles=controller",
            f"listeners=CONTROLLER://127.0.0.1:{spec.port}",
            f"metadata.log.dir={spec.metadata_dir}",
        ]
        if bootstrap_servers:
            lines += ["controller.listener.names=CONTROLLER", f"controller.quorum.bootstrap.servers={bootstrap_servers}"]
        elif len(voters) > 1:
            lines.append(f"controller.quorum.voters={voters_property(voters)}")
    for key, value in (extra or {}).items():
        lines.append(f"{key}={value}")
    spec.directory.mkdir(parents=True, exist_ok=True)
    spec.config_path.write_text("\n".join(lines) + "\n")
    return spec.config_path


def run_cli(*argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=timeout_s)


def format_controller(spec: ControllerSpec, cluster_id: str, metadata_version: str | None,
                      extra_args: tuple[str, ...] = ()) -> None:
    if (spec.metadata_dir / "meta.properties").exists():
        return
    argv = ["storage", "format", "--cluster-id", cluster_id, "--config", str(spec.config_path), *extra_args]
    if metadata_version:
        argv += ["--metadata-version", metadata_version]
    result = run_cli(*argv)
    if result.returncode != 0:
        raise LocalClusterError(f"formatting {spec.role} {spec.node_id} failed: {result.stderr.strip()}")


def start_controller(spec: ControllerSpec, extra_args: tuple[str, ...] = ()) -> ControllerProcess:
    """Starts `kraftwerk <role> --config ... [extra_args]` and waits for its port file."""
    spec.port_file.unlink(missing_ok=True)
    handle = open(spec.log_path, "ab")
    process = subprocess.Popen(
        CLI + [spec.role, "--config", str(spec.config_path), "--port-file", str(spec.port_file), *extra_args],
        stdout=handle, stderr=handle, start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = spec.port_file.read_text().strip() if spec.port_file.exists() else ""
        if text:
            return ControllerProcess(spec, process, int(text), handle)
        if process.poll() is not None:
            handle.close()
            raise LocalClusterError(f"{spec.role} {spec.node_id} exited with {process.returncode}; "
                                    f"see {spec.log_path}")
        if time.monotonic() > deadline:
            process.kill()
            handle.close()
            raise LocalClusterError(f"{spec.role} {spec.node_id} did not start within {START_TIMEOUT_S:.0f} s")
        time.sleep(PORT_FILE_POLL_S)


def stop_controller(controller: ControllerProcess, kill: bool = False) -> None:
    process = controller.process
    if process.poll() is None:
        if kill:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
    if controller._log_handle is not None:
        controller._log_handle.close()
        controller._log_handle = None


def stop_nodes(processes: dict[int, ControllerProcess], hurry: Callable[[], bool] = lambda: False,
               also_controllers: tuple[int, ...] = ()) -> None:
    """Stops every node of `processes` (and empties it): the brokers all at once, then the
    controllers all at once (with the processes `also_controllers` names, controllers
    this process did not start). Brokers go first because a broker's controlled shutdown
    needs the quorum; nodes of one kind go together because each waits only on the
    quorum, never on its peers. A node still running after STOP_TIMEOUT_S, or as soon as
    `hurry()` says so (the operator asked twice), is killed."""
    nodes = list(processes.values())
    processes.clear()
    brokers = [_Stoppable.of(node.process) for node in nodes if node.spec.role == "broker"]
    controllers = [_Stoppable.of(node.process) for node in nodes if node.spec.role != "broker"]
    controllers += [_Stoppable(pid, lambda pid=pid: process_alive(pid)) for pid in also_controllers]
    try:
        for wave in (brokers, controllers):
            _stop_wave(wave, hurry)
    finally:
        for node in nodes:
            if node._log_handle is not None:
                node._log_handle.close()
                node._log_handle = None


def stop_children(work: Path, hurry: Callable[[], bool] = lambda: False) -> list[int]:
    """Stops (SIGTERM, then SIGKILL) and reaps the child processes of this process whose
    arguments name `work`: the nodes of that cluster a start interrupted half-way never
    recorded (other children, e.g. a test's, are left alone). Linux (/proc); returns their pids."""
    pids = _child_pids(str(work))
    _stop_wave([_Stoppable(pid, lambda pid=pid: _child_alive(pid)) for pid in pids], hurry)
    return pids


@dataclass(frozen=True, slots=True)
class _Stoppable:
    pid: int
    alive: Callable[[], bool]  # reaps the process when it is our child

    @staticmethod
    def of(process: subprocess.Popen) -> "_Stoppable":
        return _Stoppable(process.pid, lambda: process.poll() is None)


def _signal(pid: int, number: int, group: bool = False) -> None:
    try:
        if group:
            # A node leads a session of its own: the group takes anything it started too.
            try:
                os.killpg(pid, number)
                return
            except ProcessLookupError:
                pass  # not a group leader
        os.kill(pid, number)
    except (ProcessLookupError, PermissionError):
        pass  # gone already, or no longer ours to signal


def _stop_wave(wave: list[_Stoppable], hurry: Callable[[], bool]) -> None:
    for item in wave:
        if item.alive():
            _signal(item.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    # Bounded by the deadline; other processes' exits have no event this loop could wait on.
    while any(item.alive() for item in wave) and time.monotonic() < deadline and not hurry():
        time.sleep(PORT_FILE_POLL_S)
    for item in wave:
        if item.alive():
            _signal(item.pid, signal.SIGKILL, group=True)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(item.alive() for item in wave) and time.monotonic() < deadline:
        time.sleep(PORT_FILE_POLL_S)


def _child_pids(mentioning: str) -> list[int]:
    """The pids whose parent is this process (/proc/<pid>/stat's fourth field) and whose
    arguments contain `mentioning`."""
    own = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
            command = Path("/proc", entry, "cmdline").read_bytes()
        except OSError:
            continue  # exited meanwhile
        # The command name (second field) may hold spaces and parentheses: split after its last ")".
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(own) and mentioning.encode() in command:
            found.append(int(entry))
    return found


def _child_alive(pid: int) -> bool:
    """Whether child `pid` still runs; reaps it once it has exited."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False  # reaped already (by its Popen object)
    return done == 0


# -- growing a running `cluster up --standalone` quorum (KIP-853) -------------------------

ADD_CONTROLLER_TIMEOUT_S = 60.0
ADD_CONTROLLER_RETRY_S = 0.5  # the new controller is still catching up: ask again


def pid_file(spec: ControllerSpec) -> Path:
    """Where `cluster add-controller` notes a process that `cluster up` did not start itself."""
    return spec.directory / f"{spec.name}.pid"


def running_controllers(work: Path) -> list[ControllerSpec]:
    """The controllers of a local cluster directory, from their properties files."""
    specs = []
    for path in sorted(work.glob("controller-*.properties")):
        properties = load_properties(path.read_text())
        listener = properties.get("listeners", "")
        port = int(listener.rsplit(":", 1)[1]) if ":" in listener else 0
        specs.append(ControllerSpec(int(properties["node.id"]), port, work))
    return sorted(specs, key=lambda spec: spec.node_id)


def grow_quorum(work: Path) -> tuple[ControllerSpec, str]:
    """`kraftwerk cluster add-controller`: formats controller N+1 (`--no-initial-controllers`,
    finding the quorum through the controllers there are), starts it in the background and
    asks the quorum to add it (`metadata-quorum add-controller`) once it has caught up.
    Returns its spec and the tool's answer."""
    existing = running_controllers(work)
    if not existing:
        raise LocalClusterError(f"{work} holds no local cluster (run `kraftwerk cluster up --standalone` first)")
    first = existing[0]
    meta = read_meta_properties(first.metadata_dir)
    if meta is None:
        raise LocalClusterError(f"{first.metadata_dir} is not formatted")
    template = load_properties(first.config_path.read_text())
    if "controller.quorum.voters" in template and "controller.quorum.bootstrap.servers" not in template:
        raise LocalClusterError("this cluster has static voters: upgrade kraft.version to 1 first "
                                "(`kraftwerk features upgrade --feature kraft.version=1`)")
    bootstrap = ",".join(spec.address for spec in existing)
    spec = ControllerSpec(existing[-1].node_id + 1, free_port_run(1), work)
    extra = {key: value for key, value in template.items()
             if key.startswith(("broker.", "kraftwerk.")) and key != "node.id"}
    write_config(spec, [], extra, bootstrap_servers=bootstrap)
    format_controller(spec, meta.cluster_id, None, ("--no-initial-controllers",))
    process = start_controller(spec)
    pid_file(spec).write_text(f"{process.process.pid}\n")
    deadline = time.monotonic() + ADD_CONTROLLER_TIMEOUT_S
    # Bounded by the deadline: a refusal for "lagging behind" or "not ready" passes once
    # the new controller has fetched the log.
    while True:
        result = run_cli("metadata-quorum", "--bootstrap-controller", bootstrap, "--command-config",
                         str(spec.config_path), "add-controller")
        if result.returncode == 0:
            return spec, result.stdout.strip()
        if time.monotonic() > deadline:
            raise LocalClusterError(f"controller {spec.node_id} was not added: {(result.stdout + result.stderr).strip()}")
        time.sleep(ADD_CONTROLLER_RETRY_S)


def added_controller_pids(work: Path) -> list[int]:
    """The running controllers `cluster add-controller` started for the cluster in `work`."""
    pids = []
    for path in sorted(work.glob("controller-*.pid")):
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            continue
        if process_alive(pid):
            pids.append(pid)
    return pids


def stop_added_controllers(work: Path, hurry: Callable[[], bool] = lambda: False) -> list[int]:
    """Stops (SIGTERM, all at once, then SIGKILL) the controllers `cluster add-controller`
    started, and forgets them."""
    pids = added_controller_pids(work)
    _stop_wave([_Stoppable(pid, lambda pid=pid: process_alive(pid)) for pid in pids], hurry)
    for path in work.glob("controller-*.pid"):
        path.unlink(missing_ok=True)
    return pids


def poll_until(what: str, condition: Callable[[], bool], *, timeout_s: float, poll_s: float,
               retry_on: tuple[type[BaseException], ...], error: type[Exception]) -> None:
    """Asks `condition()` again every `poll_s` until it holds; an exception in `retry_on`
    (a node starting, restarting or frozen) counts as "not yet". Raises `error` after
    `timeout_s`. Other processes' state has no event to wait on: asking again is all."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except retry_on:
            pass
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


# Ports for nodes whose addresses must be known up front (voters, brokers, ZooKeeper) are
# taken below the kernel's ephemeral range (Linux: 32768-60999 by default). A port probed
# free inside that range can be handed to any process's outgoing connection before the
# node binds it — or between a node's stop and its restart on the same port: on a busy
# host that happened (`OSError: [Errno 98] Address already in use`). Below the range only
# an explicit bind takes a port, and every kraftwerk process reserves its ports in
# PORT_RESERVATIONS_DIR first, so two test runs (or two tests of one run) never share one.
RESERVED_PORTS_LOW = 20_000
EPHEMERAL_PORTS_LOW_DEFAULT = 32_768
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_RESERVATIONS_DIR = Path(tempfile.gettempdir()) / "kraftwerk-port-reservations"


def ephemeral_ports_low() -> int:
    """The first port the kernel hands out to outgoing connections."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_PORTS_LOW_DEFAULT


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reserved(port: int, directory: Path) -> bool:
    """Whether a live process (this one included: a port is never handed out twice in
    one process, its previous node may still be shutting down) reserved `port`."""
    try:
        pid = int((directory / str(port)).read_text() or "0")
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # unreadable: treat as taken, there are plenty of others
    return pid > 0 and process_alive(pid)


def _bindable(port: int) -> bool:
    # SO_REUSEADDR, as the node's listener sets it: connections of an earlier node
    # lingering in TIME_WAIT do not make a port unusable, a listener does.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_is_free(port: int) -> bool:
    """Whether a node could listen on 127.0.0.1:`port` now (no listener holds it)."""
    return _bindable(port)


def free_port_run(count: int, directory: Path | None = None) -> int:
    """The first of `count` consecutive loopback ports reserved for this process until it
    exits (for tests, benchmarks and clusters that need voter addresses up front): below
    the ephemeral range, bindable now, and reserved by no other live process."""
    directory = directory or PORT_RESERVATIONS_DIR
    low, high = RESERVED_PORTS_LOW, min(ephemeral_ports_low(), EPHEMERAL_PORTS_LOW_DEFAULT)
    span = high - low - count + 1
    if count < 1 or span < 1:
        raise LocalClusterError(f"no room for {count} ports between {low} and {high}")
    directory.mkdir(parents=True, exist_ok=True)
    start = secrets.randbelow(span)
    with open(directory / ".lock", "a") as lock:
        # One allocator at a time across processes: check-then-reserve must not interleave.
        fcntl.flock(lock, fcntl.LOCK_EX)
        for step in range(span):  # bounded: every candidate base at most once
            base = low + (start + step) % span
            ports = range(base, base + count)
            if any(_reserved(port, directory) for port in ports) or not all(map(_bindable, ports)):
                continue
            for port in ports:
                (directory / str(port)).write_text(str(os.getpid()))
            return base
    raise LocalClusterError(f"no run of {count} free ports between {low} and {high}")


def plan(directory: Path, controllers: int, base_port: int) -> list[ControllerSpec]:
    return [ControllerSpec(node_id, base_port + node_id - 1, directory) for node_id in range(1, controllers + 1)]


def plan_brokers(directory: Path, brokers: int, base_port: int, first_id: int = 101) -> list[ControllerSpec]:
    """Broker N (ids from 101, clear of the controllers') listens on base_port + N - first_id."""
    return [broker_spec(node_id, base_port + node_id - first_id, directory)
            for node_id in range(first_id, first_id + brokers)]


start_node = start_controller
stop_node = stop_controller
format_node = format_controller


# -- `cluster up --secure`: certificates, credentials and a SASL_SSL cluster ------------

SECURE_DIRECTORY = "secure"
PASSWORDS_FILE = "passwords.properties"
OPENSSL_TIMEOUT_S = 30.0
CERTIFICATE_VALIDITY_DAYS = 365
SECURE_PROBE_TIMEOUT_S = 10.0
SECURE_POLL_S = 0.1  # asking other processes again: there is no event to wait on
# Nodes log in to the controllers with PLAIN against static users in the controller
# listener's JAAS line: SCRAM credentials live in the metadata log, which a controller
# has not committed before the first election (nor, after a full restart, before the
# quorum has a leader again), so controllers could never authenticate each other.
NODE_MECHANISM = "PLAIN"
# Operators use SCRAM: their credentials are UserScramCredentialRecords written at format time.
OPERATOR_MECHANISM = "SCRAM-SHA-512"
CONTROLLER_USER, BROKER_USER, OPERATOR_USER = "controller", "broker", "admin"
SECURE_LISTENER = "SASL_SSL"  # the brokers' client listener
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

# openssl's request and extension settings, passed with -config so that no system
# openssl.cnf is needed. Node certificates name 127.0.0.1 and localhost (host names are
# checked: ssl.endpoint.identification.algorithm=https) and serve as client
# certificates too; CA:TRUE is critical and the leaf carries authorityKeyIdentifier
# (what strict X.509 checks ask for).
_OPENSSL_CONFIG = """\
[ req ]
distinguished_name = subject
prompt = no
[ subject ]
O = kraftwerk local cluster
[ ca_extensions ]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ node_extensions ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True, slots=True)
class SecureMaterial:
    """What `cluster up --secure` generates once in <dir>/secure (mode 0700) and reuses
    with --keep: a CA, the nodes' key and certificate, the users' passwords (0600 files
    only, never printed or logged) and the operator's client properties."""

    directory: Path
    passwords: dict[str, str] = field(repr=False)

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore_path(self) -> Path:
        return self.directory / "node-keystore.pem"

    @property
    def passwords_path(self) -> Path:
        return self.directory / PASSWORDS_FILE

    @property
    def command_config_path(self) -> Path:
        """Kafka client properties for User:admin: `--command-config` of kraftwerk and Kafka's tools."""
        return self.directory / "admin-client.properties"

    @property
    def librdkafka_config_path(self) -> Path:
        """The same for librdkafka (`kcat -F`)."""
        return self.directory / "admin-librdkafka.properties"

    def scram_arguments(self) -> tuple[str, ...]:
        """`storage format --add-scram` for the operator (controllers' bootstrap records)."""
        return ("--add-scram", f"{OPERATOR_MECHANISM}=[name={OPERATOR_USER},password={self.passwords[OPERATOR_USER]}]")

    def node_properties(self, role: str) -> dict[str, str]:
        """The security settings of one node (a controller or a broker)."""
        user = BROKER_USER if role == "broker" else CONTROLLER_USER
        login = f'{PLAIN_LOGIN_MODULE} required username="{user}" password="{self.passwords[user]}"'
        properties = {
            "listener.security.protocol.map": f"CONTROLLER:SASL_SSL,{SECURE_LISTENER}:SASL_SSL",
            "controller.listener.names": "CONTROLLER",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore_path),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "sasl.mechanism.controller.protocol": NODE_MECHANISM,
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": ";".join(f"User:{name}" for name in (CONTROLLER_USER, BROKER_USER, OPERATOR_USER)),
        }
        if role == "broker":
            properties[f"listener.name.{SECURE_LISTENER.lower()}.sasl.enabled.mechanisms"] = OPERATOR_MECHANISM
            properties["listener.name.controller.plain.sasl.jaas.config"] = login + ";"
        else:
            # On a controller the line is both its own login and the listener's static users.
            static = " ".join(f'user_{name}="{self.passwords[name]}"' for name in (CONTROLLER_USER, BROKER_USER))
            properties["listener.name.controller.sasl.enabled.mechanisms"] = f"{NODE_MECHANISM},{OPERATOR_MECHANISM}"
            properties["listener.name.controller.plain.sasl.jaas.config"] = f"{login} {static};"
        return properties

    def operator_security(self) -> ClientSecurity:
        return ClientSecurity("SASL_SSL", ssl_cafile=str(self.ca_path), sasl_mechanism=OPERATOR_MECHANISM,
                              sasl_username=OPERATOR_USER, sasl_password=self.passwords[OPERATOR_USER])


def _write_private(path: Path, text: str) -> None:
    """Creates (or replaces) a file only its owner can read."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def _openssl(*argv: str, cwd: Path) -> None:
    try:
        result = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True,
                                timeout=OPENSSL_TIMEOUT_S)
    except FileNotFoundError:
        raise LocalClusterError("--secure generates its certificates with the openssl command, which is not "
                                "installed (Debian/Ubuntu: apt-get install openssl)") from None
    except subprocess.TimeoutExpired:
        raise LocalClusterError(f"openssl {argv[0]} did not finish within {OPENSSL_TIMEOUT_S:.0f} s") from None
    if result.returncode != 0:
        raise LocalClusterError(f"openssl {argv[0]} failed: {result.stderr.strip()}")


def generate_certificates(directory: Path) -> None:
    """A CA and one node certificate (EC P-256, SHA-256, 127.0.0.1 and localhost) signed
    by it, with the openssl command: ca.pem (every node's and client's truststore) and
    node-keystore.pem (key and certificate, Kafka's PEM keystore). The CA key is deleted
    once the certificate is signed: nothing else may be issued under a CA every node trusts."""
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)
    key_options = ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    days = str(CERTIFICATE_VALIDITY_DAYS)
    try:
        _openssl("genpkey", *key_options, "-out", "ca-key.pem", cwd=directory)
        _openssl("req", "-new", "-x509", "-config", config.name, "-extensions", "ca_extensions", "-key", "ca-key.pem",
                 "-subj", "/O=kraftwerk local cluster/CN=kraftwerk local CA", "-days", days, "-sha256",
                 "-out", "ca.pem", cwd=directory)
        _openssl("genpkey", *key_options, "-out", "node-key.pem", cwd=directory)
        _openssl("req", "-new", "-config", config.name, "-key", "node-key.pem",
                 "-subj", "/O=kraftwerk local cluster/CN=localhost", "-out", "node.csr", cwd=directory)
        _openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                 "-set_serial", f"0x{secrets.token_hex(16)}", "-days", days, "-sha256", "-extfile", config.name,
                 "-extensions", "node_extensions", "-out", "node-cert.pem", cwd=directory)
        _write_private(directory / "node-keystore.pem",
                       (directory / "node-key.pem").read_text() + (directory / "node-cert.pem").read_text())
    finally:
        for name in ("ca-key.pem", "node-key.pem", "node-cert.pem", "node.csr", "openssl.cnf"):
            (directory / name).unlink(missing_ok=True)


def _client_files(material: SecureMaterial) -> None:
    password = material.passwords[OPERATOR_USER]
    _write_private(material.command_config_path, "\n".join([
        f"# User:{OPERATOR_USER} (a super user) of the local cluster: {OPERATOR_MECHANISM} over TLS.",
        "# kraftwerk ... --command-config FILE, and Kafka's own tools (--command-config).",
        "security.protocol=SASL_SSL",
        f"sasl.mechanism={OPERATOR_MECHANISM}",
        f'sasl.jaas.config={SCRAM_LOGIN_MODULE} required username="{OPERATOR_USER}" password="{password}";',
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={material.ca_path}",
    ]) + "\n")
    _write_private(material.librdkafka_config_path, "\n".join([
        f"# User:{OPERATOR_USER} of the local cluster, in librdkafka's names (kcat -F FILE).",
        "security.protocol=SASL_SSL",
        f"sasl.mechanisms={OPERATOR_MECHANISM}",
        f"sasl.username={OPERATOR_USER}",
        f"sasl.password={password}",
        f"ssl.ca.location={material.ca_path}",
    ]) + "\n")


def secure_material(directory: Path) -> SecureMaterial:
    """The material in `directory`, generated when it is not there yet."""
    passwords_path = directory / PASSWORDS_FILE
    if passwords_path.exists() and (directory / "ca.pem").exists() and (directory / "node-keystore.pem").exists():
        passwords = load_properties(passwords_path.read_text())
        if all(passwords.get(user) for user in (CONTROLLER_USER, BROKER_USER, OPERATOR_USER)):
            material = SecureMaterial(directory, passwords)
            _client_files(material)
            return material
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    generate_certificates(directory)
    # URL-safe characters only: nothing to escape in a JAAS line or a properties file.
    passwords = {user: secrets.token_urlsafe(24) for user in (CONTROLLER_USER, BROKER_USER, OPERATOR_USER)}
    _write_private(passwords_path, "".join(f"{user}={password}\n" for user, password in passwords.items()))
    material = SecureMaterial(directory, passwords)
    _client_files(material)
    return material


class SecureLocalCluster:
    """Controllers (ids 1..) and brokers (ids 101..) on 127.0.0.1 whose every listener is
    SASL_SSL, with the StandardAuthorizer and the nodes and the operator as super users
    (what `kraftwerk cluster up --secure` runs; docs/security.md). The same interface as
    cli/upgrade_story.py's LocalCluster where `cluster up` uses it; its probes log
    in as the operator."""

    def __init__(self, work: Path, controllers: int, brokers: int, controller_base_port: int | None = None,
                 broker_base_port: int | None = None, release: str | None = None,
                 metadata_version: str | None = None) -> None:
        self.work = work
        self.controllers = plan(work, controllers, controller_base_port or free_port_run(controllers))
        self.brokers = plan_brokers(work, brokers, broker_base_port or free_port_run(max(brokers, 1)))
        self.release = release
        self.metadata_version = metadata_version
        formatted = read_meta_properties(self.controllers[0].metadata_dir) \
            if self.controllers[0].metadata_dir.exists() else None
        if formatted is not None and not (work / SECURE_DIRECTORY / PASSWORDS_FILE).exists():
            # Its log holds no credential for a new operator password: nobody could log in.
            raise LocalClusterError(f"{work} holds a cluster formatted without --secure; start a fresh one "
                                    "(without --keep, or another --dir)")
        self.material = secure_material(work / SECURE_DIRECTORY)
        self.cluster_id = formatted.cluster_id if formatted is not None else random_uuid_string()
        self.processes: dict[int, ControllerProcess] = {}

    @property
    def specs(self) -> list[ControllerSpec]:
        return self.controllers + self.brokers

    def spec(self, node_id: int) -> ControllerSpec:
        return next(s for s in self.specs if s.node_id == node_id)

    def _write_config(self, spec: ControllerSpec) -> None:
        extra = self.material.node_properties(spec.role)
        if spec.role == "broker":
            extra["broker.heartbeat.interval.ms"] = "500"  # quick liveness for a local cluster
        else:
            extra["broker.session.timeout.ms"] = "9000"
        if self.release:
            extra["kraftwerk.release"] = self.release
        write_config(spec, self.controllers, extra, broker_listener=SECURE_LISTENER)
        spec.config_path.chmod(0o600)  # it holds the node's password

    def format(self) -> None:
        for spec in self.specs:
            self._write_config(spec)
            scram = self.material.scram_arguments() if spec.role == "controller" else ()
            format_node(spec, self.cluster_id, self.metadata_version, scram)

    def start(self, node_id: int) -> ControllerProcess:
        spec = self.spec(node_id)
        self._write_config(spec)
        process = start_node(spec)
        self.processes[node_id] = process
        return process

    def stop(self, node_id: int, kill: bool = False) -> None:
        process = self.processes.pop(node_id, None)
        if process is not None:
            stop_node(process, kill=kill)

    def stop_all(self) -> None:
        stop_nodes(self.processes)

    # -- probes, as the operator ------------------------------------------------------
    def ask(self, address: str, api_key: int | None, body: dict | None = None, *, log_in: bool = True):
        """One request to `address` as User:admin (api_key None: the ApiVersions answer).
        Without `log_in`, TLS only: ApiVersions is all a SASL listener answers then."""
        host, port = address.rsplit(":", 1)
        security = (self.material.operator_security() if log_in
                    else ClientSecurity("SSL", ssl_cafile=str(self.material.ca_path)))

        async def exchange():
            with trio.fail_after(SECURE_PROBE_TIMEOUT_S):
                async with await KafkaClient.connect(host, int(port), security=security,
                                                     timeout_s=SECURE_PROBE_TIMEOUT_S) as client:
                    if api_key is None:
                        return client.api_versions_response
                    return await client.call(api_key, body or {})

        return trio.run(exchange)

    def _any_controller(self, probe: Callable[[str], bool]) -> bool:
        for spec in self.controllers:
            process = self.processes.get(spec.node_id)
            if process is None or not process.alive():
                continue
            try:
                if probe(spec.address):
                    return True
            except (ClientError, OSError, trio.TooSlowError):
                continue  # starting, restarting, or the operator's credential not replayed yet
        return False

    def finalized_metadata_version(self, address: str) -> int:
        """From ApiVersions before any login: a node that has not replayed the bootstrap
        records yet has no operator credential, and a login would fail (and be logged)."""
        reply = self.ask(address, None, log_in=False)
        return {f.name: f.max_version_level for f in reply.finalized_features or ()}.get("metadata.version", 0)

    def unfenced_brokers(self, address: str) -> list[int]:
        if self.finalized_metadata_version(address) <= 0:
            return []  # the operator's credential is not replayed there yet
        reply = self.ask(address, 60, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        return sorted(b.broker_id for b in reply.brokers if b.broker_id >= 100)

    def _wait(self, what: str, probe: Callable[[str], bool]) -> None:
        poll_until(what, lambda: self._any_controller(probe), timeout_s=START_TIMEOUT_S, poll_s=SECURE_POLL_S,
                   retry_on=(), error=LocalClusterError)

    def wait_bootstrapped(self) -> None:
        """A leader committed the bootstrap records (the operator's SCRAM credential among them)."""
        self._wait("the quorum to elect a leader and bootstrap",
                   lambda address: self.finalized_metadata_version(address) > 0)

    def wait_unfenced(self, broker_ids: list[int]) -> None:
        self._wait(f"brokers {broker_ids} to be unfenced",
                   lambda address: set(broker_ids) <= set(self.unfenced_brokers(address)))
