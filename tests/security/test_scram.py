"""SCRAM (server/security/scram.py): RFC 7677's vector, round trips, and every way an
exchange must fail; a Hypothesis property that bad client input only ever raises ScramError."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.security import scram
from server.security.model import ScramMechanism
from server.security.scram import ScramClientExchange, ScramError, ScramServerExchange, ServerError

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SECRET = b"test fake-credential secret"

# RFC 7677 section 3.
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")


def rfc_server_signature() -> bytes:
    """v= of the RFC 7677 exchange, computed here from RFC 5802's definitions with
    hashlib/hmac only (independent of the code under test). The value printed in RFC
    7677 differs after its 12th byte; the proof p= above, which hashes the same
    AuthMessage, matches the RFC exactly."""
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", RFC_SALT, 4096)
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    auth_message = RFC_CLIENT_FIRST[3:] + b"," + RFC_SERVER_FIRST + b"," + RFC_CLIENT_FINAL.rpartition(b",p=")[0]
    return b"v=" + base64.b64encode(hmac.new(server_key, auth_message, "sha256").digest())


def lookup_for(*credentials):
    table = {(c.user, c.mechanism): c for c in credentials}
    return lambda user, mechanism: table.get((user, ScramMechanism(mechanism)))


RFC_CREDENTIAL = scram.new_credential("user", SHA256, "pencil", salt=RFC_SALT)


def rfc_server(**kwargs) -> ScramServerExchange:
    return ScramServerExchange(SHA256, lookup_for(RFC_CREDENTIAL), SECRET, server_nonce=RFC_SERVER_NONCE, **kwargs)


def test_rfc7677_vector_server_side():
    server = rfc_server()
    assert server.receive(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.receive(RFC_CLIENT_FINAL) == rfc_server_signature()
    assert server.complete and server.username == "user"


def test_rfc7677_vector_client_side():
    client = ScramClientExchange(SHA256, "user", "pencil", client_nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.client_first() == RFC_CLIENT_FIRST
    assert client.receive_server_first(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.receive_server_final(rfc_server_signature())
    assert client.state == "complete"


def test_rfc_server_signature_prefix_matches_the_rfc():
    # Guards the helper above: the first 12 bytes agree with the RFC's printed value.
    printed = base64.b64decode("6rriTRBi23WpRR/wcaZ7f7k4bYOvOv2oEbMg4SYiWt8=")
    assert base64.b64decode(rfc_server_signature()[2:])[:12] == printed[:12]


def test_credential_derivation_matches_rfc5802_definitions():
    salted = hashlib.pbkdf2_hmac("sha512", b"secret", b"salt-bytes", 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    credential = scram.new_credential("bob", SHA512, "secret", salt=b"salt-bytes")
    assert credential.stored_key == hashlib.sha512(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    assert credential.iterations == 4096 and credential.salt == b"salt-bytes"
    assert "secret" not in repr(credential) and credential.stored_key.hex() not in repr(credential)


def run_exchange(mechanism, credential_user, credential_password, user, password, **server_kwargs):
    credential = scram.new_credential(credential_user, mechanism, credential_password, iterations=4096)
    server = ScramServerExchange(mechanism, lookup_for(credential), SECRET, **server_kwargs)
    client = ScramClientExchange(mechanism, user, password)
    client_final = client.receive_server_first(server.receive(client.client_first()))
    client.receive_server_final(server.receive(client_final))
    return server, client


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_round_trip(mechanism):
    server, client = run_exchange(mechanism, "alice", "wonderland", "alice", "wonderland")
    assert server.complete and client.state == "complete"


def test_round_trip_with_escaped_user_name():
    server, client = run_exchange(SHA512, "a=b,c", "pw", "a=b,c", "pw")
    assert server.username == "a=b,c"


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_wrong_password_fails(mechanism):
    with pytest.raises(ScramError) as caught:
        run_exchange(mechanism, "alice", "wonderland", "alice", "looking-glass")
    assert caught.value.server_error is ServerError.INVALID_PROOF
    assert "looking-glass" not in str(caught.value) and "wonderland" not in str(caught.value)


def test_unknown_user_goes_through_both_steps_and_fails_at_the_proof():
    server = ScramServerExchange(SHA256, lookup_for(), SECRET)
    client = ScramClientExchange(SHA256, "mallory", "guess")
    server_first = server.receive(client.client_first())  # no early refusal
    assert server_first.startswith(b"r=")
    with pytest.raises(ScramError) as caught:
        server.receive(client.receive_server_first(server_first))
    assert caught.value.server_error is ServerError.INVALID_PROOF
    assert server.state is scram.ExchangeState.FAILED and not server.user_known


def test_unknown_user_gets_the_same_salt_every_time():
    def salt_seen() -> bytes:
        server = ScramServerExchange(SHA256, lookup_for(), SECRET)
        return scram.parse_server_first(server.receive(b"n,,n=ghost,r=abc")).salt

    assert salt_seen() == salt_seen()
    other = ScramServerExchange(SHA256, lookup_for(), SECRET)
    assert scram.parse_server_first(other.receive(b"n,,n=ghost2,r=abc")).salt != salt_seen()


def test_tampered_proof_fails():
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    proof = bytearray(base64.b64decode(RFC_CLIENT_FINAL.rpartition(b"p=")[2]))
    proof[0] ^= 1
    tampered = RFC_CLIENT_FINAL.rpartition(b"p=")[0] + b"p=" + base64.b64encode(bytes(proof))
    with pytest.raises(ScramError) as caught:
        server.receive(tampered)
    assert caught.value.server_error is ServerError.INVALID_PROOF


def test_truncated_proof_fails():
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.receive(RFC_CLIENT_FINAL.rpartition(b"p=")[0] + b"p=" + base64.b64encode(b"\x00" * 31))


def test_nonce_mismatch_fails():
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        server.receive(RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))


def test_channel_binding_must_match_the_gs2_header():
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError) as caught:
        server.receive(RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))  # "y,,"
    assert caught.value.server_error is ServerError.CHANNEL_BINDINGS_DONT_MATCH


def test_replayed_client_final_fails_on_the_same_and_on_a_new_exchange():
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    server.receive(RFC_CLIENT_FINAL)
    with pytest.raises(ScramError):
        server.receive(RFC_CLIENT_FINAL)  # nothing is accepted after completion
    fresh = ScramServerExchange(SHA256, lookup_for(RFC_CREDENTIAL), SECRET)  # a random server nonce
    fresh.receive(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        fresh.receive(RFC_CLIENT_FINAL)


def test_failed_exchange_stays_failed():
    server = rfc_server()
    with pytest.raises(ScramError):
        server.receive(b"garbage")
    with pytest.raises(ScramError):
        server.receive(RFC_CLIENT_FIRST)


def test_authzid_equal_to_user_is_accepted_and_a_different_one_refused():
    credential = scram.new_credential("user", SHA256, "pencil", salt=RFC_SALT)
    server = ScramServerExchange(SHA256, lookup_for(credential), SECRET)
    assert server.receive(b"n,a=user,n=user,r=abc").startswith(b"r=abc")
    other = ScramServerExchange(SHA256, lookup_for(credential), SECRET)
    with pytest.raises(ScramError) as caught:
        other.receive(b"n,a=admin,n=user,r=abc")
    assert caught.value.client_visible and "authorization id" in str(caught.value)


def test_authzid_channel_binding_is_the_base64_of_its_gs2_header():
    credential = scram.new_credential("user", SHA256, "pencil", salt=RFC_SALT)
    server = ScramServerExchange(SHA256, lookup_for(credential), SECRET, server_nonce="S")
    server.receive(b"n,a=user,n=user,r=abc")
    with pytest.raises(ScramError) as caught:
        server.receive(b"c=biws,r=abcS,p=" + base64.b64encode(bytes(32)))
    assert caught.value.server_error is ServerError.CHANNEL_BINDINGS_DONT_MATCH


def test_extensions_are_ignored_except_tokenauth():
    credential = scram.new_credential("user", SHA256, "pencil")
    ok = ScramServerExchange(SHA256, lookup_for(credential), SECRET)
    assert ok.receive(b"n,,n=user,r=abc,foo=bar").startswith(b"r=abc")
    refused = ScramServerExchange(SHA256, lookup_for(credential), SECRET)
    with pytest.raises(ScramError) as caught:
        refused.receive(b"n,,n=user,r=abc,tokenauth=true")
    assert caught.value.server_error is ServerError.EXTENSIONS_NOT_SUPPORTED


@pytest.mark.parametrize("message", [
    b"y,,n=user,r=abc",  # channel binding flags other than n
    b"p=tls-unique,,n=user,r=abc",
    b"n,,m=ext,n=user,r=abc",  # mandatory extension
    b"n,,n=us=er,r=abc",  # bad escape
    b"n,,n=,r=abc",
    b"n,,r=abc",
    b"n,,n=user",
    b"n,,n=user,r=",
    b"n,,n=user,r=a\x7fb",
    b"\xff\xfe",
    b"n,,n=user,r=abc\x00",
])
def test_malformed_client_first_is_refused(message):
    with pytest.raises(ScramError):
        rfc_server().receive(message)


def test_sasl_name_escaping():
    assert scram.escape_username("a=b,c") == "a=3Db=2Cc"
    assert scram.unescape_username("a=3Db=2Cc") == "a=b,c"
    assert scram.unescape_username(scram.escape_username("=2C")) == "=2C"
    for bad in ("a=4Fb", "a=", "a,b", "=2"):
        with pytest.raises(ScramError):
            scram.unescape_username(bad)


def test_iteration_bounds():
    assert scram.check_iterations(4095) == "Too few iterations"
    assert scram.check_iterations(16385) == "Too many iterations"
    assert scram.check_iterations(4096) is None and scram.check_iterations(16384) is None
    with pytest.raises(ValueError):
        scram.new_credential("a", SHA256, "pw", iterations=1000)


def test_client_refuses_a_server_that_does_not_know_the_credential():
    # A server holding another password's credential answers with a wrong v=.
    credential = scram.new_credential("alice", SHA256, "other")
    server = ScramServerExchange(SHA256, lookup_for(credential), SECRET)
    client = ScramClientExchange(SHA256, "alice", "mine")
    client_final = client.receive_server_first(server.receive(client.client_first()))
    with pytest.raises(ScramError):
        server.receive(client_final)
    with pytest.raises(ScramError, match="signature"):
        client.receive_server_final(b"v=" + base64.b64encode(bytes(32)))


def test_client_refuses_a_nonce_that_does_not_extend_its_own():
    client = ScramClientExchange(SHA256, "alice", "pw", client_nonce="mine")
    client.client_first()
    with pytest.raises(ScramError, match="nonce"):
        client.receive_server_first(b"r=theirs,s=c2FsdA==,i=4096")


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=300), final=st.binary(max_size=300))
def test_arbitrary_client_messages_only_raise_scram_error(first, final):
    server = ScramServerExchange(SHA256, lookup_for(RFC_CREDENTIAL), SECRET)
    try:
        server.receive(first)
    except ScramError:
        return
    try:
        server.receive(final)
    except ScramError:
        pass


@settings(max_examples=300, deadline=None)
@given(final=st.text(max_size=200).map(lambda t: t.encode("utf-8")))
def test_arbitrary_client_final_after_a_valid_first_only_raises_scram_error(final):
    server = rfc_server()
    server.receive(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.receive(final)


@settings(max_examples=200, deadline=None)
@given(name=st.text(min_size=1, max_size=40).filter(lambda n: "\x00" not in n))
def test_escaping_round_trips(name):
    assert scram.unescape_username(scram.escape_username(name)) == name
