"""ApiVersions over PLAINTEXT, SSL and SASL_SSL: what TLS and SASL cost.

Starts ONE `kraftwerk controller` process on 127.0.0.1 with three listeners:
  CONTROLLER  PLAINTEXT
  SSL         SSL       (TLS, no client certificate)
  SECURE      SASL_SSL  (TLS, then SCRAM-SHA-256 as the user created at format time
                         with `kraftwerk storage format --add-scram ...`)
Certificates come from `trustme` (a throw-away CA and a leaf for 127.0.0.1).

A load generator in its own process sends ApiVersions v3 requests exactly as
kafka-python 3.0.12 encodes them (the frame bench_server.py uses) over blocking
or selector-driven sockets, wrapped with Python's `ssl` module on the TLS
listeners. On SASL_SSL every connection authenticates once, before the measured
window, with kraftwerk's sans-I/O SCRAM client (`server.security.scram`) driven
synchronously over the TLS socket: SaslHandshake v1, then two SaslAuthenticate v2.

Measured, for each protocol in the same run and against the same server process:
  throughput   the three shapes of bench_server.py (1 conn closed loop; 64 conns;
               1 conn x32 pipelined): warm-up, then a fixed window; req/s, p50/p99
               µs seen by the client, server CPU µs/request (/proc, window only);
  setup        N sequential new connections, each: TCP connect + TLS handshake +
               SCRAM exchange + one ApiVersions round trip + close; setups/s,
               p50/p99 ms, server CPU µs/setup and the client's CPU µs/setup
               (SCRAM's client side runs PBKDF2 with the server's 4096 iterations).
The shapes run protocol after protocol (all three for one shape, then the next
shape; each round starts with a different protocol), so slow drift in the machine's
load hits all three alike.

Rules kept: every loop is bounded in count and time, every socket has a timeout,
only 127.0.0.1 is used, the controller is stopped by its own pid.

Every cell is measured --rounds times (default 3); tables show the median over rounds,
and each ratio is the median of the per-round ratios (this protocol against PLAINTEXT
measured just before or after it), which cancels most of the drift of a shared machine.

Run: .venv/bin/python bench/bench_security.py [--rounds 3] [--duration-s 3] [--warmup-s 1]
                                              [--setups 200] [--key-type ecdsa|rsa] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common as common  # noqa: E402
import _loadgen as loadgen  # noqa: E402

# (protocol label, listener name); the map below gives each listener its protocol.
PROTOCOLS = [("PLAINTEXT", "CONTROLLER"), ("SSL", "SSL"), ("SASL_SSL", "SECURE")]
SECURITY_PROTOCOL_MAP = "CONTROLLER:PLAINTEXT,SSL:SSL,SECURE:SASL_SSL"
CASES = [  # (label, connections, requests in flight per connection), as bench_server.py
    ("1 conn", 1, 1),
    ("64 conns", 64, 1),
    ("1 conn x32 pipelined", 1, 32),
]
SCRAM_MECHANISM = "SCRAM-SHA-256"
SCRAM_USER = "bench"
SCRAM_PASSWORD = "bench-secret"  # a throw-away credential of a throw-away cluster
MAX_REQUESTS_PER_CASE = 5_000_000
SETUP_TIME_LIMIT_S = 60.0

SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION = 17, 1
SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION = 36, 2
API_VERSIONS_KEY = 18


# --------------------------------------------------------------------------
# client connections (load generator side)
# --------------------------------------------------------------------------

class Dialer:
    """Opens ready-to-use blocking connections to one listener: TCP, then TLS, then SCRAM."""

    def __init__(self, port: int, protocol: str, cafile: str | None) -> None:
        self.port = port
        self.protocol = protocol
        self.context: ssl.SSLContext | None = None
        if protocol in ("SSL", "SASL_SSL"):
            # What a Kafka client does by default: verify the chain and the host name
            # (ssl.endpoint.identification.algorithm=https). No session resumption: each
            # connection pays a full handshake, as a fresh client process does.
            self.context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
            self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.tls_version: str | None = None
        self.tls_cipher: str | None = None

    def open(self) -> socket.socket:
        sock = common.connect(self.port)
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_hostname=common.HOST)  # handshakes here
            self.tls_version = sock.version()
            self.tls_cipher = (sock.cipher() or ("?",))[0]
        if self.protocol == "SASL_SSL":
            try:
                scram_authenticate(sock, SCRAM_USER, SCRAM_PASSWORD)
            except BaseException:
                sock.close()
                raise
        return sock


def _call(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: dict):
    from protocol.frames import decode_response, encode_request

    sock.sendall(encode_request(api_key, version, correlation_id, "bench-security", body))
    answered, response = decode_response(api_key, version, common.recv_frame(sock)[4:])
    if answered != correlation_id:
        raise RuntimeError("SASL response correlation id does not match")
    return response


def scram_authenticate(sock: socket.socket, user: str, password: str) -> None:
    """SaslHandshake v1 + SCRAM's two SaslAuthenticate round trips over a blocking socket;
    the server's signature is checked by the client exchange."""
    from server.security.model import ScramMechanism
    from server.security.scram import ScramClientExchange

    handshake = _call(sock, SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION, 1, {"mechanism": SCRAM_MECHANISM})
    if handshake.error_code != 0:
        raise RuntimeError(f"SaslHandshake refused {SCRAM_MECHANISM}: error {handshake.error_code}, "
                           f"enabled {list(handshake.mechanisms or ())}")
    exchange = ScramClientExchange(ScramMechanism.from_name(SCRAM_MECHANISM), user, password)
    token = exchange.client_first()
    for step, correlation_id in enumerate((2, 3)):
        reply = _call(sock, SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION, correlation_id, {"auth_bytes": token})
        if reply.error_code != 0:
            raise RuntimeError(f"SaslAuthenticate failed: error {reply.error_code} {reply.error_message}")
        if step == 0:
            token = exchange.receive_server_first(bytes(reply.auth_bytes or b""))
        else:
            exchange.receive_server_final(bytes(reply.auth_bytes or b""))


# --------------------------------------------------------------------------
# load generator (runs in its own process: `bench_security.py --loadgen ...`)
# --------------------------------------------------------------------------

def _loadgen_setup(dialer: Dialer, count: int, time_limit_s: float):
    """`count` sequential connections: open (TCP + TLS + SCRAM), one ApiVersions, close."""
    request = common.api_versions_v3_request(1_000)
    clock = time.perf_counter
    # One unmeasured connection first: imports and first-use costs stay out of the window.
    dialer.open().close()
    latencies: list[float] = []
    started = clock()
    yield "start", started
    deadline = started + time_limit_s
    for _ in range(count):
        begun = clock()
        if begun > deadline:
            break
        sock = dialer.open()
        try:
            sock.sendall(request)
            if common.response_correlation(common.recv_frame(sock)) != 1_000:
                raise RuntimeError("correlation id mismatch")
        finally:
            sock.close()
        latencies.append(clock() - begun)
    yield "done", (clock(), latencies, 0)


def run_loadgen(args) -> int:
    dialer = Dialer(args.port, args.protocol, args.cafile)
    if args.setups:
        steps = _loadgen_setup(dialer, args.setups, SETUP_TIME_LIMIT_S)
    else:
        steps = loadgen.steps(dialer.open, args)
    result = loadgen.measure(steps, args.server_pid)
    result["tls"] = f"{dialer.tls_version} {dialer.tls_cipher}" if dialer.tls_version else None
    json.dump(result, sys.stdout)
    return 0


# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------

def write_certificates(work: Path, key_type: str) -> tuple[Path, Path]:
    """(keystore PEM: key + chain, truststore PEM: the CA) for 127.0.0.1, from trustme."""
    import trustme

    kind = trustme.KeyType.RSA if key_type == "rsa" else trustme.KeyType.ECDSA
    ca = trustme.CA(key_type=kind)
    leaf = ca.issue_cert(common.HOST, "localhost", key_type=kind)
    keystore = work / "server-keystore.pem"
    truststore = work / "ca.pem"
    leaf.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    ca.cert_pem.write_to_path(str(truststore))
    return keystore, truststore


@contextmanager
def secure_controller(work: Path, keystore: Path, truststore: Path, metadata_version: str = "3.8-IV0",
                      profile: Path | None = None):
    """A formatted, running controller with the three listeners; yields (process, {protocol: port}).

    The port file reports the first listener's port only, so all three ports are picked
    up front (`free_ports`: the kernel's choice, released just before the server binds)."""
    log_dir = work / "controller-1"
    log_path = work / "controller-1.log"
    port_file = work / "controller-1.port"
    config_path = work / "controller-1.properties"
    ports = dict(zip((name for name, _ in PROTOCOLS), common.free_ports(len(PROTOCOLS))))
    listeners = ",".join(f"{listener}://{common.HOST}:{ports[protocol]}" for protocol, listener in PROTOCOLS)
    config_path.write_text("\n".join([
        "node.id=1",
        "process.roles=controller",
        f"listeners={listeners}",
        f"listener.security.protocol.map={SECURITY_PROTOCOL_MAP}",
        "controller.listener.names=CONTROLLER",
        f"metadata.log.dir={log_dir}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        f"ssl.truststore.location={truststore}",
        f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
        "",
    ]))
    cli = [common.PYTHON, "-m", "cli.main"]
    subprocess.run(cli + ["storage", "format", "--cluster-id", common.random_cluster_id(),
                          "--metadata-version", metadata_version, "--log-dir", str(log_dir),
                          "--add-scram", f"{SCRAM_MECHANISM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"],
                   cwd=common.REPO, check=True, capture_output=True, timeout=60)
    if profile is not None:  # cProfile writes it when the controller exits on SIGTERM
        cli = [common.PYTHON, "-m", "cProfile", "-o", str(profile), "-m", "cli.main"]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(cli + ["controller", "--config", str(config_path), "--port-file", str(port_file)],
                                   cwd=common.REPO, stdout=log_file, stderr=log_file)
    try:
        first = common._wait_port_file(process, port_file, "kraftwerk controller", log_path)
        if first != ports["PLAINTEXT"]:
            raise RuntimeError(f"the controller reports port {first}, expected {ports['PLAINTEXT']}")
        yield process, ports
    finally:
        common.stop(process)


def run_loadgen_process(port: int, protocol: str, cafile: Path, server_pid: int, args, *,
                        connections: int = 1, depth: int = 1, setups: int = 0) -> dict:
    command = [common.PYTHON, str(Path(__file__).resolve()), "--loadgen", "--port", str(port),
               "--protocol", protocol, "--cafile", str(cafile), "--server-pid", str(server_pid),
               "--connections", str(connections), "--depth", str(depth), "--setups", str(setups),
               "--warmup-s", str(args.warmup_s), "--duration-s", str(args.duration_s),
               "--max-requests", str(args.max_requests)]
    timeout = (SETUP_TIME_LIMIT_S if setups else args.warmup_s + args.duration_s + loadgen.DRAIN_TIMEOUT_S) + 60
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=common.REPO)
    if result.returncode != 0:
        raise RuntimeError(f"load generator ({protocol}) failed:\n{result.stderr}")
    return json.loads(result.stdout)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _per_unit(run: dict, key: str) -> float:
    return run[key] / run["count"] if run["count"] else float("nan")


# The figures of one loadgen run, by column: throughput, latencies, CPU per unit of work.
METRICS = {
    "rate": lambda run: run["rate"],
    "p50_us": lambda run: run["p50_us"],
    "p99_us": lambda run: run["p99_us"],
    "server_cpu_us": lambda run: _per_unit(run, "server_cpu_s") * 1e6,
    "client_cpu_us": lambda run: _per_unit(run, "loadgen_cpu_s") * 1e6,
    "other_cpu_s": lambda run: run["other_cpu_s"],
}


def summarize(runs: list[dict]) -> dict[str, float]:
    """The median over rounds of each metric."""
    return {name: _median([metric(run) for run in runs]) for name, metric in METRICS.items()}


def paired_ratio(runs: list[dict], bases: list[dict], name: str) -> float:
    """The median over rounds of (this protocol / PLAINTEXT) within the same round: the two
    ran back to back, so a load change between rounds cancels out."""
    metric = METRICS[name]
    # /proc counts CPU in clock ticks (10 ms): a tiny window may show none at all.
    return _median([metric(run) / metric(base) if metric(base) else float("nan") for run, base in zip(runs, bases)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=3.0, help="measured seconds per case, protocol, round")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds before each case")
    parser.add_argument("--rounds", type=int, default=3, help="repeat the whole matrix; medians are reported")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS_PER_CASE, help="cap per case")
    parser.add_argument("--setups", type=int, default=200, help="sequential new connections per protocol and round")
    parser.add_argument("--key-type", choices=("ecdsa", "rsa"), default="ecdsa",
                        help="certificate keys (trustme's default is ECDSA P-256; rsa is 2048-bit)")
    parser.add_argument("--dir", default=None, help="parent of the temporary work directory")
    parser.add_argument("--profile", default=None, help="cProfile the controller into this file (skews timings)")
    loadgen.add_process_arguments(parser)
    parser.add_argument("--protocol", help=argparse.SUPPRESS)
    parser.add_argument("--cafile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loadgen:
        return run_loadgen(args)
    if not 1 <= args.setups <= 10_000:
        parser.error("--setups must be between 1 and 10000")
    if not 1 <= args.rounds <= 20:
        parser.error("--rounds must be between 1 and 20")

    work = common.work_dir(args.dir, "bench-security-")
    print(f"$ {common.command_line()}")
    load_before = os.getloadavg()
    began = time.monotonic()
    keystore, truststore = write_certificates(work, args.key_type)
    names = [protocol for protocol, _ in PROTOCOLS]
    results: dict[tuple[str, str], list[dict]] = {(label, p): [] for label, _, _ in CASES for p in names}
    setups: dict[str, list[dict]] = {p: [] for p in names}
    profile = Path(args.profile).resolve() if args.profile else None
    with secure_controller(work, keystore, truststore, profile=profile) as (process, ports):
        for round_index in range(args.rounds):
            # Each round starts with a different protocol, so none always runs first.
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for label, connections, depth in CASES:
                for protocol in order:
                    results[label, protocol].append(run_loadgen_process(
                        ports[protocol], protocol, truststore, process.pid, args,
                        connections=connections, depth=depth))
            for protocol in order:
                setups[protocol].append(run_loadgen_process(ports[protocol], protocol, truststore, process.pid, args,
                                                            setups=args.setups))
    load_after = os.getloadavg()
    tls = next((run["tls"] for runs in results.values() for run in runs if run["tls"]), None)
    print(f"\nwork dir {work}; {len(os.sched_getaffinity(0))} CPUs; load average before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; wall {time.monotonic() - began:.0f} s")
    print(f"TLS: {tls}, {args.key_type} keys (trustme), no session resumption; SASL: {SCRAM_MECHANISM}, "
          f"4096 iterations; medians of {args.rounds} round(s)\n")

    rows = []
    for label, _, _ in CASES:
        for protocol in names:
            runs = results[label, protocol]
            m = summarize(runs)
            rates = [run["rate"] for run in runs]
            rows.append([label, protocol, f"{m['rate']:,.0f}", f"{min(rates):,.0f}–{max(rates):,.0f}",
                         f"{m['p50_us']:,.0f}", f"{m['p99_us']:,.0f}", f"{m['server_cpu_us']:.1f}",
                         f"{m['client_cpu_us']:.1f}", f"{m['other_cpu_s']:.2f}"])
    print(common.markdown_table(["case", "protocol", "req/s", "req/s min–max", "p50 µs", "p99 µs",
                                 "server CPU µs/req", "client CPU µs/req", "other CPU s"], rows))
    print()
    ratio_rows = []
    for label, _, _ in CASES:
        bases = results[label, "PLAINTEXT"]
        for protocol in ("SSL", "SASL_SSL"):
            runs = results[label, protocol]
            ratio_rows.append([label, f"{protocol}/PLAINTEXT"] + [
                f"{paired_ratio(runs, bases, name):.2f}" for name in ("rate", "p50_us", "p99_us", "server_cpu_us")])
    print(common.markdown_table(["case", "ratio", "req/s", "p50", "p99", "server CPU/req"], ratio_rows))
    print()
    setup_rows = []

    def pooled_us(runs: list[dict], key: str) -> float:
        # Summed over rounds: /proc counts in 10 ms ticks, coarse against one round's total.
        count = sum(run["count"] for run in runs)
        return sum(run[key] for run in runs) / count * 1e6 if count else float("nan")

    base_server_us = pooled_us(setups["PLAINTEXT"], "server_cpu_s")
    for protocol in names:
        runs = setups[protocol]
        m = summarize(runs)
        server_us = pooled_us(runs, "server_cpu_s")
        setup_rows.append([protocol, sum(run["count"] for run in runs), f"{m['rate']:,.0f}",
                           f"{paired_ratio(runs, setups['PLAINTEXT'], 'rate'):.2f}",
                           f"{m['p50_us'] / 1000:.2f}", f"{m['p99_us'] / 1000:.2f}",
                           f"{server_us:,.0f}", f"{server_us / base_server_us:.2f}" if base_server_us else "-",
                           f"{pooled_us(runs, 'loadgen_cpu_s'):,.0f}"])
    print(common.markdown_table(["new connection (connect+TLS+SCRAM+1 ApiVersions+close)", "n", "setups/s",
                                 "× PLAINTEXT", "p50 ms", "p99 ms", "server CPU µs/setup", "× PLAINTEXT",
                                 "client CPU µs/setup"], setup_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
