"""The per-connection SASL state machine (server/security/sasl.py), its configuration,
and the SaslHandshake / SaslAuthenticate handlers driven with a fake request context."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import trio
import trio.testing
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from server.config import ServerConfig
from server.handlers import sasl_authenticate, sasl_handshake
from server.net.listener import Connection
from server.security import scram
from server.security.model import ANONYMOUS, KafkaPrincipal, ScramMechanism
from server.security.plain import plain_client_message
from server.security.sasl import (
    DEFAULT_ENABLED_MECHANISMS,
    SaslServerConfig,
    SaslServerContext,
    SaslState,
    ServerSaslSession,
    generic_failure_message,
    new_sasl_session,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
ALICE = scram.new_credential("alice", SHA256, "alice-secret")


def lookup(user, mechanism):
    return ALICE if (user, ScramMechanism(mechanism)) == ("alice", SHA256) else None


def config_with(**extra) -> ServerConfig:
    return replace(ServerConfig(), extra=dict(extra))


def session(**extra) -> ServerSaslSession:
    config = SaslServerConfig.from_server_config(config_with(**extra), "SASL_PLAINTEXT")
    return ServerSaslSession(config, lookup, b"secret")


# -- configuration ---------------------------------------------------------------

def test_default_mechanisms_when_nothing_is_configured():
    config = SaslServerConfig.from_server_config(ServerConfig(), "SASL_PLAINTEXT")
    assert config.enabled_mechanisms == DEFAULT_ENABLED_MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert config.plain_jaas is None and dict(config.plain_users) == {}


def test_listener_prefixed_keys_override_the_global_ones():
    config = SaslServerConfig.from_server_config(config_with(**{
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512, SCRAM-SHA-256",
        "sasl.jaas.config": 'x.PlainLoginModule required user_global="g";',
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }), "SASL_PLAINTEXT")
    assert config.enabled_mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert dict(config.plain_users) == {"admin": "admin-secret"}
    assert config.jaas_source == "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    other = SaslServerConfig.from_server_config(config_with(**{
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": 'x.PlainLoginModule required user_global="g";',
    }), "SASL_SSL")
    assert other.enabled_mechanisms == ("PLAIN",) and dict(other.plain_users) == {"global": "g"}
    assert "admin-secret" not in repr(config)


@pytest.mark.parametrize("value", ["GSSAPI", "PLAIN,OAUTHBEARER", " , "])
def test_unimplemented_or_empty_mechanism_lists_are_configuration_errors(value):
    with pytest.raises(ValueError):
        SaslServerConfig.from_server_config(config_with(**{"sasl.enabled.mechanisms": value}), "SASL_PLAINTEXT")


def test_a_non_plain_login_module_contributes_no_users():
    config = SaslServerConfig.from_server_config(config_with(**{
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="a" password="b" user_x="y";'}), "SASL_PLAINTEXT")
    assert dict(config.plain_users) == {}


def test_bad_jaas_is_a_configuration_error_without_the_password():
    with pytest.raises(ValueError) as caught:
        SaslServerConfig.from_server_config(config_with(**{"sasl.jaas.config": 'x.P required user_a="pw1'}),
                                            "SASL_PLAINTEXT")
    assert "pw1" not in str(caught.value)


def test_context_keeps_one_secret_and_one_config_per_listener():
    context = SaslServerContext(ServerConfig(), random_bytes=lambda n: b"\x01" * n)
    assert context.fake_secret == b"\x01" * 32
    assert context.listener_config("SASL_PLAINTEXT") is context.listener_config("SASL_PLAINTEXT")


# -- the state machine ---------------------------------------------------------------

def scram_login(s: ServerSaslSession, user: str, password: str):
    client = scram.ScramClientExchange(SHA256, user, password)
    first = s.authenticate(client.client_first())
    assert first.error_code == 0 and not first.completed
    final = s.authenticate(client.receive_server_first(first.auth_bytes))
    return client, final


def test_scram_session_authenticates_and_sets_the_principal():
    s = session()
    assert s.handshake(1, "SCRAM-SHA-256").error_code == ErrorCode.NONE
    assert s.state is SaslState.AUTHENTICATE and not s.authenticated
    client, final = scram_login(s, "alice", "alice-secret")
    assert final.error_code == 0 and final.completed and final.session_lifetime_ms == 0
    client.receive_server_final(final.auth_bytes)
    assert s.authenticated and s.principal == KafkaPrincipal("User", "alice") and s.mechanism == "SCRAM-SHA-256"


def test_wrong_password_and_unknown_user_get_the_same_generic_answer():
    answers = []
    for user, password in (("alice", "nope"), ("nobody", "alice-secret")):
        s = session()
        s.handshake(1, "SCRAM-SHA-256")
        _, final = scram_login(s, user, password)
        answers.append((final.error_code, final.error_message, final.close, final.auth_bytes))
        assert s.state is SaslState.FAILED and not s.authenticated
    assert answers[0] == answers[1] == (ErrorCode.SASL_AUTHENTICATION_FAILED,
                                        generic_failure_message("SCRAM-SHA-256"), True, b"")
    assert answers[0][1] == ("Authentication failed during authentication due to invalid credentials "
                             "with SASL mechanism SCRAM-SHA-256")


def test_plain_session_with_static_users():
    s = session(**{"sasl.jaas.config": JAAS})
    assert s.handshake(1, "PLAIN").mechanisms == DEFAULT_ENABLED_MECHANISMS
    outcome = s.authenticate(plain_client_message("admin", "admin-secret"))
    assert outcome.completed and s.principal == KafkaPrincipal("User", "admin")


def test_plain_failure_uses_kafkas_text():
    s = session(**{"sasl.jaas.config": JAAS})
    s.handshake(1, "PLAIN")
    outcome = s.authenticate(plain_client_message("admin", "wrong"))
    assert outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and outcome.close
    assert outcome.error_message == "Authentication failed: Invalid username or password"


def test_unsupported_mechanism_lists_the_enabled_ones_and_closes():
    s = session(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    outcome = s.handshake(1, "PLAIN")
    assert (outcome.error_code, outcome.mechanisms, outcome.close) == (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM, ("SCRAM-SHA-512",), True)
    assert s.state is SaslState.FAILED
    # Mechanism names are case-sensitive, as in Kafka.
    assert session().handshake(1, "scram-sha-256").error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_handshake_v0_is_answered_and_closed():
    s = session()
    outcome = s.handshake(0, "PLAIN")
    assert (outcome.error_code, outcome.close) == (ErrorCode.UNSUPPORTED_VERSION, True)
    assert outcome.mechanisms == DEFAULT_ENABLED_MECHANISMS and s.state is SaslState.FAILED


def test_second_handshake_during_the_exchange_is_illegal_and_closes():
    s = session()
    s.handshake(1, "SCRAM-SHA-256")
    outcome = s.handshake(1, "PLAIN")
    assert (outcome.error_code, outcome.close) == (ErrorCode.ILLEGAL_SASL_STATE, True)


def test_authenticate_before_handshake_is_illegal_and_closes():
    s = session()
    outcome = s.authenticate(b"n,,n=alice,r=abc")
    assert (outcome.error_code, outcome.close) == (ErrorCode.ILLEGAL_SASL_STATE, True)
    assert s.state is SaslState.FAILED


def test_after_authentication_both_requests_are_illegal_but_keep_the_connection():
    s = session()
    s.handshake(1, "SCRAM-SHA-256")
    scram_login(s, "alice", "alice-secret")
    again = s.authenticate(b"anything")
    assert (again.error_code, again.close) == (ErrorCode.ILLEGAL_SASL_STATE, False)
    assert again.error_message == "SaslAuthenticate request received after successful authentication"
    handshake = s.handshake(1, "SCRAM-SHA-256")
    assert (handshake.error_code, handshake.mechanisms, handshake.close) == (ErrorCode.ILLEGAL_SASL_STATE, (), False)
    assert s.authenticated


def test_session_reads_credentials_at_exchange_time():
    table = {}
    s = ServerSaslSession(SaslServerConfig("SASL_PLAINTEXT"), lambda u, m: table.get((u, m)), b"k")
    s.handshake(1, "SCRAM-SHA-256")
    table[("alice", SHA256)] = ALICE  # added after the session was created
    _, final = scram_login(s, "alice", "alice-secret")
    assert final.completed


# -- the handlers, with a fake context -------------------------------------------------

def fake_ctx(conn, api_version, credentials=None):
    table = credentials or {("alice", int(SHA256)): ALICE}
    node = SimpleNamespace(config=config_with(**{"sasl.jaas.config": JAAS}),
                           state=SimpleNamespace(scram_credential=lambda u, m: table.get((u, int(m)))))
    return SimpleNamespace(connection=conn, api_version=api_version, services=node, client_id="test")


def sasl_connection():
    conn = Connection(7, "127.0.0.1:40000", None, listener_name="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
    return conn


async def test_handlers_authenticate_a_connection_and_log_without_secrets():
    conn = sasl_connection()
    ctx = fake_ctx(conn, 1)
    conn.sasl = new_sasl_session(ctx.services, "SASL_PLAINTEXT")
    assert not conn.authenticated
    with capture_logs() as logs:
        answer = sasl_handshake.handle(ctx, SimpleNamespace(mechanism="PLAIN"))
        assert answer == {"error_code": 0, "mechanisms": list(DEFAULT_ENABLED_MECHANISMS)}
        reply = await sasl_authenticate.handle(fake_ctx(conn, 2), SimpleNamespace(
            auth_bytes=plain_client_message("admin", "admin-secret")))
    assert reply["error_code"] == 0 and reply["session_lifetime_ms"] == 0
    assert conn.authenticated and conn.principal == KafkaPrincipal("User", "admin") and not conn.closing
    events = [entry["event"] for entry in logs]
    assert "security.sasl_handshake" in events and "security.sasl_authenticated" in events
    authenticated = next(e for e in logs if e["event"] == "security.sasl_authenticated")
    assert authenticated["principal"] == "User:admin" and authenticated["mechanism"] == "PLAIN"
    assert "admin-secret" not in repr(logs)


async def test_failed_authentication_is_answered_logged_and_closes_the_connection():
    conn = sasl_connection()
    ctx = fake_ctx(conn, 1)
    conn.sasl = new_sasl_session(ctx.services, "SASL_PLAINTEXT")
    sasl_handshake.handle(ctx, SimpleNamespace(mechanism="SCRAM-SHA-256"))
    client = scram.ScramClientExchange(SHA256, "alice", "hunter2")
    with capture_logs() as logs:
        first = await sasl_authenticate.handle(ctx, SimpleNamespace(auth_bytes=client.client_first()))
        final = await sasl_authenticate.handle(ctx, SimpleNamespace(
            auth_bytes=client.receive_server_first(first["auth_bytes"])))
    assert final["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert final["error_message"] == generic_failure_message("SCRAM-SHA-256")
    assert conn.closing and not conn.authenticated and conn.principal == ANONYMOUS
    failed = next(e for e in logs if e["event"] == "security.sasl_authentication_failed")
    assert failed["user"] == "alice" and failed["peer"] == "127.0.0.1:40000"
    assert "hunter2" not in repr(logs)


async def test_handlers_on_a_listener_without_sasl_answer_illegal_state_and_keep_the_connection():
    conn = Connection(8, "127.0.0.1:40001", None)
    ctx = fake_ctx(conn, 1)
    assert sasl_handshake.handle(ctx, SimpleNamespace(mechanism="PLAIN")) == {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    reply = await sasl_authenticate.handle(ctx, SimpleNamespace(auth_bytes=b"x"))
    assert reply["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and not conn.closing


def test_unsupported_mechanism_handshake_closes_the_connection():
    conn = sasl_connection()
    ctx = fake_ctx(conn, 1)
    conn.sasl = new_sasl_session(ctx.services, "SASL_PLAINTEXT")
    answer = sasl_handshake.handle(ctx, SimpleNamespace(mechanism="GSSAPI"))
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM and conn.closing


def test_new_sasl_session_reuses_the_nodes_context():
    node = SimpleNamespace(config=ServerConfig(), state=None)
    first = new_sasl_session(node, "SASL_PLAINTEXT")
    second = new_sasl_session(node, "SASL_PLAINTEXT")
    assert first is not second and first.config is second.config
    assert node.sasl_server_context.fake_secret == first._fake_secret
    # No image yet (node.state None): every user is unknown, nothing raises.
    first.handshake(1, "SCRAM-SHA-256")
    assert first.authenticate(b"n,,n=alice,r=abc").error_code == 0


async def test_a_token_pipelined_while_plain_is_verified_is_refused_and_nothing_authenticates():
    import threading

    release = threading.Event()
    carol = scram.new_credential("carol", SHA256, "carol-pw")

    def slow_lookup(user, mechanism):
        release.wait(10)  # holds the worker thread until the second token was handled
        return carol if (user, int(mechanism)) == ("carol", int(SHA256)) else None

    conn = sasl_connection()
    ctx = fake_ctx(conn, 1)
    ctx.services.state = SimpleNamespace(scram_credential=slow_lookup)
    conn.sasl = new_sasl_session(ctx.services, "SASL_PLAINTEXT")
    sasl_handshake.handle(ctx, SimpleNamespace(mechanism="PLAIN"))
    replies = []

    async def send(token):
        replies.append(await sasl_authenticate.handle(ctx, SimpleNamespace(auth_bytes=token)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, plain_client_message("carol", "carol-pw"))
            await trio.testing.wait_all_tasks_blocked()  # the first is in its worker thread
            assert conn.sasl.busy
            await send(plain_client_message("carol", "carol-pw"))
            release.set()
    assert [r["error_code"] for r in replies] == [ErrorCode.ILLEGAL_SASL_STATE] * 2
    assert conn.closing and not conn.authenticated and conn.principal == ANONYMOUS


@settings(max_examples=200, deadline=None)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]),
       version=st.integers(0, 1), tokens=st.lists(st.binary(max_size=120), max_size=4))
def test_any_sequence_of_requests_yields_outcomes_never_exceptions(mechanism, version, tokens):
    s = session(**{"sasl.jaas.config": JAAS})
    outcomes = [s.handshake(version, mechanism)]
    for token in tokens:
        outcomes.append(s.authenticate(token))
    for outcome in outcomes:
        assert outcome.error_code in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                      ErrorCode.UNSUPPORTED_VERSION, ErrorCode.ILLEGAL_SASL_STATE,
                                      ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert s.authenticated == (s.state is SaslState.COMPLETE)
    assert not s.authenticated  # random tokens never carry a valid proof or password


def test_failed_authentication_delay_is_configurable():
    assert session().config.failed_authentication_delay_ms == 100  # Kafka's default
    config = SaslServerConfig.from_server_config(
        config_with(**{"connection.failed.authentication.delay.ms": "0"}), "SASL_PLAINTEXT")
    assert config.failed_authentication_delay_ms == 0
    with pytest.raises(ValueError):
        SaslServerConfig.from_server_config(
            config_with(**{"connection.failed.authentication.delay.ms": "-5"}), "SASL_PLAINTEXT")


async def test_a_failed_authentication_is_answered_after_the_delay(autojump_clock):
    conn = sasl_connection()
    ctx = fake_ctx(conn, 1)
    conn.sasl = new_sasl_session(ctx.services, "SASL_PLAINTEXT")
    sasl_handshake.handle(ctx, SimpleNamespace(mechanism="SCRAM-SHA-256"))
    client = scram.ScramClientExchange(SHA256, "alice", "wrong")
    started = trio.current_time()
    first = await sasl_authenticate.handle(ctx, SimpleNamespace(auth_bytes=client.client_first()))
    assert trio.current_time() == started  # a step of a good exchange is not delayed
    final = await sasl_authenticate.handle(ctx, SimpleNamespace(
        auth_bytes=client.receive_server_first(first["auth_bytes"])))
    assert final["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert trio.current_time() - started == pytest.approx(0.1)
