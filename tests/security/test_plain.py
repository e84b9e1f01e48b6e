"""SASL/PLAIN (server/security/plain.py) and the JAAS line it reads its users from
(server/security/jaas.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.security import scram
from server.security.jaas import JaasError, parse_jaas_config
from server.security.model import ScramMechanism
from server.security.plain import PlainError, PlainServerExchange, plain_client_message

SECRET = b"plain test secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice \\"quoted\\" pw";')


def no_scram(user, mechanism):
    return None


def exchange(users=None, lookup=no_scram) -> PlainServerExchange:
    return PlainServerExchange(users if users is not None else {"admin": "admin-secret"}, lookup, SECRET)


def test_jaas_line_parses_into_module_flag_and_options():
    config = parse_jaas_config(JAAS)
    assert config.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert config.module_short_name == "PlainLoginModule"
    assert config.control_flag == "required"
    assert config.options["username"] == "admin"
    assert config.static_users() == {"admin": "admin-secret", "alice": 'alice "quoted" pw'}


def test_jaas_repr_and_errors_never_show_values():
    config = parse_jaas_config(JAAS)
    assert "admin-secret" not in repr(config) and "quoted" not in repr(config)
    assert "admin-secret" not in str(config)
    with pytest.raises(JaasError) as caught:
        parse_jaas_config('x.PlainLoginModule required password="hunter2"')  # no ';'
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("text", [
    "",
    "x.Module",
    "x.Module mandatory;",
    'x.Module required user_a="unterminated;',
    "x.Module required key;",
    "x.Module required a=1 a=2;",
    "x.Module required; y.Other required;",
])
def test_malformed_jaas_is_refused(text):
    with pytest.raises(JaasError):
        parse_jaas_config(text)


def test_bare_word_values_and_flags_are_accepted():
    config = parse_jaas_config("a.B optional  k=v\n  other=\"x y\" ;")
    assert config.control_flag == "optional" and dict(config.options) == {"k": "v", "other": "x y"}


def test_static_user_with_the_right_password_authenticates():
    plain = exchange()
    assert plain.receive(plain_client_message("admin", "admin-secret")) == b""
    assert plain.complete and plain.username == "admin"


def test_authzid_equal_to_user_is_accepted():
    plain = exchange()
    plain.receive(plain_client_message("admin", "admin-secret", authzid="admin"))
    assert plain.complete


@pytest.mark.parametrize("message, text", [
    (plain_client_message("admin", "wrong"), "Authentication failed: Invalid username or password"),
    (plain_client_message("nobody", "admin-secret"), "Authentication failed: Invalid username or password"),
    (plain_client_message("", "x"), "Authentication failed: username not specified"),
    (plain_client_message("admin", ""), "Authentication failed: password not specified"),
    (plain_client_message("admin", "admin-secret", authzid="root"),
     "Authentication failed: Client requested an authorization id that is different from username"),
])
def test_failures_carry_kafkas_texts(message, text):
    plain = exchange()
    with pytest.raises(PlainError) as caught:
        plain.receive(message)
    assert str(caught.value) == text and caught.value.client_visible
    assert plain.failed and not plain.complete


def test_wrong_token_count_is_not_client_visible():
    with pytest.raises(PlainError) as caught:
        exchange().receive(b"only\x00two")
    assert not caught.value.client_visible and "expected 3 tokens, got 2" in str(caught.value)


def test_a_second_message_is_refused():
    plain = exchange()
    plain.receive(plain_client_message("admin", "admin-secret"))
    with pytest.raises(PlainError):
        plain.receive(plain_client_message("admin", "admin-secret"))


def test_scram_credentials_in_the_log_also_authenticate_plain():
    credential = scram.new_credential("carol", ScramMechanism.SCRAM_SHA_512, "carol-pw", iterations=4096)

    def lookup(user, mechanism):
        return credential if (user, mechanism) == ("carol", ScramMechanism.SCRAM_SHA_512) else None

    plain = exchange(users={}, lookup=lookup)
    plain.receive(plain_client_message("carol", "carol-pw"))
    assert plain.complete
    with pytest.raises(PlainError):
        exchange(users={}, lookup=lookup).receive(plain_client_message("carol", "not-carol"))


@settings(max_examples=300, deadline=None)
@given(message=st.binary(max_size=200))
def test_arbitrary_messages_only_raise_plain_error(message):
    plain = exchange(users={"admin": "admin-secret"})
    try:
        plain.receive(message)
    except PlainError:
        pass
