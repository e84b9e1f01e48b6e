"""A real ControllerNode's SASL and TLS listeners under seeded hostile connections.

One test. The node has a SASL_SSL listener and a SASL_PLAINTEXT one (and a PLAINTEXT
first listener, which is not attacked here), with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 enabled; a SCRAM user written into the
bootstrap records the way `kraftwerk storage format --add-scram` does, a PLAIN user
from `sasl.jaas.config`, and the StandardAuthorizer on with the SCRAM user as the only
super user. A seeded `random.Random` draws hostile connections
(tests/fuzz/hostile_security.py: mutated SaslHandshake / SaslAuthenticate / SCRAM /
PLAIN exchanges, requests before authentication, oversized frames, and on the TLS
listener garbage, cut or damaged ClientHellos, an untrusting client, plaintext
frames), a few at a time. Between the groups (or while one is at work) ONE
SCRAM-SHA-512 client over SASL_SSL, connected at the start and kept, does
ApiVersions + DescribeCluster + an UpdateFeatures that really commits.

Checked:
- every legitimate call succeeds and answers correctly; every acknowledged write is
  committed, and the log's group.version records are exactly the acknowledged ones;
- every answer a hostile connection gets is NONE only where that is legitimate
  (ApiVersions, a handshake naming an enabled mechanism, a SCRAM server-first), and
  otherwise a SASL error code (33, 34, 35, 58); a final SCRAM message or a PLAIN
  token is never answered NONE;
- every hostile connection still open after its steps sends a DescribeCluster
  probe and must be closed without an answer (it is not authenticated);
- every hostile connection is ended by the server (EOF or reset) in bounded time;
  a client that does not trust the CA never completes a handshake;
- `security.sasl_authenticated` is logged exactly for the legitimate connections
  (no hostile principal ever); no `net.handler_failed`, nothing at error level;
  no password (real, or any wrong one a hostile client tried) in any log event;
- afterwards new authenticated connections are served: the super user's
  DescribeCluster answers, the PLAIN user's is refused by the authorizer.

The seed is printed in every failure message; rerun one with
`FUZZ_SEED=N .venv/bin/pytest -q tests/fuzz/test_live_security.py`.
`FUZZ_EXAMPLES=N` multiplies the number of hostile connections (budget.py).
"""

from __future__ import annotations

import os
import random
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import trio
from structlog.testing import capture_logs

from net_security.helpers import Pki, ssl_config
from protocol.errors import DecodeError, ErrorCode
from protocol.frames import decode_response
from server.client import KafkaClient
from server.config import Listener, ServerConfig
from server.controller.commands import bootstrap_records
from server.controller.scram_commands import bootstrap_scram_records
from server.security.tls import client_ssl_context
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.security.client_config import ClientSecurity
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

from .budget import scaled
from .hostile_security import (
    ENABLED, PROBE_CORRELATION_ID, SASL_AUTHENTICATE, SASL_ERRORS, SASL_HANDSHAKE, SASL_MAX_RECEIVE_BYTES,
    WRONG_PASSWORD_PREFIX,
    ClientFinal, Raw, Request, SecurityPlan, Users, probe_request, security_plan)
from .test_live_server import committed_group_version_levels, legitimate_round

DEFAULT_SEED = 20261123
HOSTILE_CONNECTIONS = 1200  # CI; times FUZZ_EXAMPLES
GROUP_SIZE = 4
PER_CONNECTION_TIMEOUT_S = 12
TOTAL_TIMEOUT_S = 180
RECEIVE_BUDGET_BYTES = 1 << 20  # more than this from the server to one hostile connection is a failure
MV_3_7_IV4 = 19

ADMIN = "fuzz-admin"
ADMIN_PASSWORD = "admin-Secret-7f3a9c"  # never sent by a hostile connection
PLAIN_USER = "plain-user"
PLAIN_PASSWORD = "plain-Secret-2b8e41"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def seed() -> int:
    return int(os.environ.get("FUZZ_SEED", DEFAULT_SEED))


def format_directory(directory: Path) -> str:
    """`storage format --add-scram` for both SCRAM mechanisms of ADMIN."""
    cluster_id = random_uuid_string()
    directory.mkdir(parents=True)
    scram_users = [f"{mechanism}=[name={ADMIN},password={ADMIN_PASSWORD}]"
                   for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    write_bootstrap_checkpoint(directory, bootstrap_records(MV_3_7_IV4)
                               + bootstrap_scram_records(scram_users, MV_3_7_IV4))
    write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=1,
                                                    directory_id=random_uuid_string()))
    return cluster_id


def node_config(directory: Path, pki: Pki) -> ServerConfig:
    return ServerConfig(
        # A single node has no controller peers, but it still builds the client side it
        # would use for them from its first listener; a PLAINTEXT one needs no credentials
        # of its own (as tests/net_security/test_client_security.py does). Not fuzzed here.
        listener=Listener("CONTROLLER", "127.0.0.1", 0),
        listeners=(Listener("CONTROLLER", "127.0.0.1", 0), Listener("SECURE", "127.0.0.1", 0, "SASL_SSL"),
                   Listener("SASLPLAIN", "127.0.0.1", 0, "SASL_PLAINTEXT")),
        listener_ssl=(("SECURE", ssl_config(pki.server)),),
        ssl_handshake_timeout_ms=5_000,
        sasl_server_max_receive_size=SASL_MAX_RECEIVE_BYTES,
        metadata_log_dir=directory,
        extra={
            "sasl.enabled.mechanisms": ",".join(ENABLED),
            "sasl.jaas.config": f'{PLAIN_MODULE} required user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN}",
            # Kafka's default is 100 ms; kept short (not 0) so the delayed-close path runs.
            "connection.failed.authentication.delay.ms": "20",
        },
    )


@dataclass
class Run:
    """What the hostile side saw, for the assertions and the report."""

    failures: list[str]
    kinds: Counter
    outcomes: Counter
    answers: Counter  # (api key, error code) of every answer a hostile connection read


class ResponseReader:
    """Whole response frames from a stream, within a byte budget; None at EOF or reset."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.received = 0

    async def _more(self) -> bool:
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        if not data:
            return False
        self.received += len(data)
        if self.received > RECEIVE_BUDGET_BYTES:
            raise AssertionError(f"the server sent more than {RECEIVE_BUDGET_BYTES} bytes")
        self.buffer += data
        return True

    async def next_payload(self) -> bytes | None:
        while True:
            if len(self.buffer) >= 4:
                size = struct.unpack_from(">i", self.buffer, 0)[0]
                if len(self.buffer) >= 4 + size:
                    payload = bytes(self.buffer[4:4 + size])
                    del self.buffer[:4 + size]
                    return payload
            if not await self._more():
                return None

    async def drain(self) -> None:
        """Everything until EOF (bytes not parsed: a TLS port may send alerts)."""
        while await self._more():
            pass


def check_answer(request: Request, payload: bytes) -> tuple[int, bytes]:
    """(error code, auth bytes) of the answer to `request`; AssertionError when it is not allowed."""
    try:
        correlation_id, body = decode_response(request.api_key, request.version, payload)
    except DecodeError as exc:
        raise AssertionError(f"undecodable answer to api {request.api_key} v{request.version}: {exc}") from None
    assert correlation_id == request.correlation_id, (
        f"answer with correlation id {correlation_id}, expected {request.correlation_id}")
    code = body.error_code
    if code == ErrorCode.NONE:
        assert request.may_succeed, f"api {request.api_key} v{request.version} answered NONE: {body}"
    else:
        assert code in request.allowed_errors, f"api {request.api_key} answered error {code}: {body}"
    if request.api_key == SASL_HANDSHAKE and code in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_SASL_MECHANISM):
        assert list(body.mechanisms) == list(ENABLED), body
    auth_bytes = b""
    if request.api_key == SASL_AUTHENTICATE:
        auth_bytes = bytes(body.auth_bytes or b"")
        if code == ErrorCode.NONE:
            # Only a SCRAM server-first may come back NONE; anything else is a login.
            assert auth_bytes.startswith(b"r=") and b"v=" not in auth_bytes, (
                f"SaslAuthenticate answered NONE with {auth_bytes[:80]!r}: a hostile connection authenticated")
    return code, auth_bytes


async def _close(stream: trio.abc.Stream) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(2):
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def _play(plan: SecurityPlan, stream: trio.abc.Stream, tcp: trio.SocketStream, run: Run) -> str:
    """Runs the plan's steps and the ending; returns the outcome's name."""
    frames_out = plan.listener == "sasl_plaintext" or plan.tls == "trusted"
    reader = ResponseReader(stream)
    server_first = b""
    sasl_error = False
    closed = False
    try:
        for step in plan.steps:
            data = bytearray()
            requests: list[Request] = []
            for part in step:
                if isinstance(part, Raw):
                    data += part.data
                    continue
                request = part.request(server_first) if isinstance(part, ClientFinal) else part
                requests.append(request)
                data += request.frame
            await stream.send_all(bytes(data))
            for request in requests:
                payload = await reader.next_payload()
                if payload is None:
                    closed = True
                    break
                code, auth_bytes = check_answer(request, payload)
                run.answers[(request.api_key, int(code))] += 1
                if code in SASL_ERRORS:
                    sasl_error = True
                elif request.api_key == SASL_AUTHENTICATE:
                    server_first = auth_bytes
            if closed or sasl_error:
                break
        if not closed:
            if plan.in_sync and not sasl_error:
                await stream.send_all(probe_request().frame)
            if stream is tcp:
                await tcp.send_eof()
            if frames_out:
                # Nothing more may be answered: the connection is not authenticated, and
                # after a SASL error the server closes it.
                while (payload := await reader.next_payload()) is not None:
                    if plan.in_sync or payload[:4] == struct.pack(">i", PROBE_CORRELATION_ID):
                        raise AssertionError(f"answered after the steps: {payload[:64].hex()} "
                                             "(a request before authentication was served)")
            else:
                await reader.drain()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        closed = True  # a reset: the server ended it
    if sasl_error:
        return "sasl_error_answered"
    return "closed_without_sasl_error"


async def run_hostile(plan: SecurityPlan, ports: dict[str, int], contexts: dict[str, object], run: Run) -> None:
    tcp = await trio.open_tcp_stream("127.0.0.1", ports[plan.listener])
    stream: trio.abc.Stream = tcp
    outcome = "unfinished"
    try:
        with trio.move_on_after(PER_CONNECTION_TIMEOUT_S) as scope:
            if plan.tls == "untrusted":
                tls = trio.SSLStream(tcp, contexts["untrusted"], server_hostname="127.0.0.1")
                stream = tls
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError:
                    outcome = "tls_refused"
                else:
                    run.failures.append(f"a client trusting another CA completed a handshake: {plan.describe()}")
                    outcome = "tls_accepted"
            else:
                if plan.tls == "trusted":
                    tls = trio.SSLStream(tcp, contexts["trusted"], server_hostname="127.0.0.1")
                    await tls.do_handshake()
                    stream = tls
                try:
                    outcome = await _play(plan, stream, tcp, run)
                except AssertionError as exc:
                    run.failures.append(f"{exc}: {plan.describe()}")
                    outcome = "failed"
        if scope.cancelled_caught:
            run.failures.append(f"not closed by the server within {PER_CONNECTION_TIMEOUT_S}s: {plan.describe()}")
    finally:
        await _close(stream)
    run.kinds[f"{plan.kind}@{plan.listener}"] += 1
    run.outcomes[outcome] += 1


async def test_hostile_sasl_and_tls_connections_do_not_disturb_a_scram_client(tmp_path):
    run_seed = seed()
    rng = random.Random(run_seed)
    context = (f"seed {run_seed} (rerun: FUZZ_SEED={run_seed} "
               ".venv/bin/pytest -q tests/fuzz/test_live_security.py)")
    total = scaled(HOSTILE_CONNECTIONS)
    users = Users(scram_user=ADMIN, plain_user=PLAIN_USER)
    plans = [security_plan(rng, index, users) for index in range(total)]
    run = Run([], Counter(), Counter(), Counter())
    acknowledged: list[int] = []
    pki = Pki(tmp_path / "pki")
    contexts = {"trusted": client_ssl_context(pki.cafile), "untrusted": client_ssl_context(pki.other_cafile)}
    admin = ClientSecurity("SASL_SSL", ssl_cafile=pki.cafile, sasl_mechanism="SCRAM-SHA-512",
                           sasl_username=ADMIN, sasl_password=ADMIN_PASSWORD)
    plain = ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=PLAIN_USER,
                           sasl_password=PLAIN_PASSWORD)
    directory = tmp_path / "metadata"
    format_directory(directory)
    try:
        with capture_logs() as logs, trio.fail_after(TOTAL_TIMEOUT_S * scaled(1)):
            node = ControllerNode(node_config(directory, pki))
            async with trio.open_nursery() as nursery:
                await nursery.start(node.run)
                ports = {"sasl_ssl": node.bound_ports["SECURE"], "sasl_plaintext": node.bound_ports["SASLPLAIN"]}
                client = await KafkaClient.connect("127.0.0.1", ports["sasl_ssl"], client_id="well-behaved",
                                                   security=admin, timeout_s=20)
                async with client:
                    level = 1
                    for start in range(0, total, GROUP_SIZE):
                        group = plans[start:start + GROUP_SIZE]
                        where = f"{context}, during/after hostile connections {start}-{start + len(group) - 1}"
                        async with trio.open_nursery() as hostile:
                            for plan in group:
                                hostile.start_soon(run_hostile, plan, ports, contexts, run)
                            if start // GROUP_SIZE % 2:
                                await legitimate_round(client, node, level, where)
                        if not start // GROUP_SIZE % 2:
                            await legitimate_round(client, node, level, where)
                        acknowledged.append(level)
                        level = 1 - level
                # Still serving new authenticated connections, and the authorizer is on.
                async with await KafkaClient.connect("127.0.0.1", ports["sasl_ssl"], security=admin,
                                                     timeout_s=20) as fresh:
                    cluster = await fresh.call(60, {"endpoint_type": 2})
                    assert cluster.error_code == ErrorCode.NONE, (context, cluster.error_message)
                    assert cluster.cluster_id == node.cluster_id, context
                async with await KafkaClient.connect("127.0.0.1", ports["sasl_plaintext"], security=plain,
                                                     timeout_s=20) as unprivileged:
                    cluster = await unprivileged.call(60, {"endpoint_type": 2})
                    assert cluster.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, context
                assert committed_group_version_levels(node) == acknowledged, context
                nursery.cancel_scope.cancel()
    except BaseException as exc:
        exc.add_note(context)
        raise
    print(f"{context}: {total} hostile connections, kinds {dict(sorted(run.kinds.items()))}, "
          f"outcomes {dict(sorted(run.outcomes.items()))}, answers (api, error) {dict(sorted(run.answers.items()))}")
    assert not run.failures, f"{context}: {len(run.failures)} failures: " + "; ".join(run.failures[:5])
    assert sum(run.kinds.values()) == total, context
    assert len(acknowledged) == -(-total // GROUP_SIZE), context

    handler_failures = [e for e in logs if e["event"] == "net.handler_failed"]
    assert not handler_failures, f"{context}: {handler_failures[:3]}"
    errors = [e for e in logs if e.get("log_level") in ("error", "critical")]
    assert not errors, f"{context}: {errors[:3]}"
    # Exactly the legitimate logins: the kept client, the fresh one, the PLAIN user.
    logins = Counter(e.get("principal") for e in logs if e["event"] == "security.sasl_authenticated")
    assert logins == Counter({f"User:{ADMIN}": 2, f"User:{PLAIN_USER}": 1}), (context, logins)
    for event in logs:
        text = repr(event)
        for secret in (ADMIN_PASSWORD, PLAIN_PASSWORD, WRONG_PASSWORD_PREFIX):
            assert secret not in text, f"{context}: a password reached the log: {event['event']}"
    # The hostile side really reached every refusal path.
    events = Counter(e["event"] for e in logs)
    for expected in ("security.sasl_authentication_failed", "security.request_before_authentication",
                     "security.tls_handshake_failed", "net.frame_rejected", "security.sasl_handshake"):
        assert events[expected] > 0, (context, expected, sorted(events))
