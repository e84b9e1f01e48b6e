"""librdkafka's SCRAM client-final: `r=<client nonce><server nonce>` where the server
nonce already starts with the client's, so the client nonce appears twice. Kafka's
server accepts a final nonce that ends with the server's; kraftwerk does the same (kcat
built on librdkafka 2.0 could not log in before). The proof still covers the whole
message as sent, so nothing else is relaxed."""

from __future__ import annotations

import base64

import pytest

from server.security import scram
from server.security.model import ScramMechanism
from server.security.scram import ScramError, ScramServerExchange

SHA512 = ScramMechanism.SCRAM_SHA_512
SECRET = b"test fake-credential secret"
PASSWORD = "pw-123_abc"
CLIENT_NONCE = "`>6Yv[i`?x<zpt\\ZDJeXdQ=}lIA4P^dK"  # librdkafka's alphabet: '-' to '~'


def server_for(password: str = PASSWORD) -> ScramServerExchange:
    credential = scram.new_credential("admin", SHA512, password, salt=b"0123456789abcdef")
    return ScramServerExchange(SHA512, lambda user, mechanism: credential if user == "admin" else None, SECRET)


def final_message(server_first: bytes, nonce: str, password: str = PASSWORD) -> bytes:
    """A client-final for `nonce`, with the proof computed over exactly what is sent."""
    attributes = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = scram.salted_password(SHA512, password, base64.b64decode(attributes["s"]), int(attributes["i"]))
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"n=admin,r={CLIENT_NONCE},{server_first.decode()},{without_proof}".encode()
    key = scram.client_key(SHA512, salted)
    signature = scram._hmac(SHA512, scram.stored_key(SHA512, key), auth_message)
    proof = bytes(a ^ b for a, b in zip(key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def server_nonce_of(server_first: bytes) -> str:
    return server_first.decode().split(",")[0][2:]


def test_a_final_nonce_with_the_client_nonce_repeated_in_front_is_accepted():
    server = server_for()
    server_first = server.receive(f"n,,n=admin,r={CLIENT_NONCE}".encode())
    nonce = server_nonce_of(server_first)
    assert nonce.startswith(CLIENT_NONCE)
    answer = server.receive(final_message(server_first, CLIENT_NONCE + nonce))
    assert answer.startswith(b"v=")


def test_the_standard_final_nonce_is_still_accepted():
    server = server_for()
    server_first = server.receive(f"n,,n=admin,r={CLIENT_NONCE}".encode())
    assert server.receive(final_message(server_first, server_nonce_of(server_first))).startswith(b"v=")


@pytest.mark.parametrize("change", ["truncated", "other server nonce", "client nonce only"])
def test_a_final_nonce_that_does_not_end_with_the_servers_is_refused(change):
    server = server_for()
    server_first = server.receive(f"n,,n=admin,r={CLIENT_NONCE}".encode())
    nonce = server_nonce_of(server_first)
    wrong = {"truncated": nonce[:-1], "other server nonce": nonce[:-1] + ("A" if nonce[-1] != "A" else "B"),
             "client nonce only": CLIENT_NONCE + CLIENT_NONCE}[change]
    with pytest.raises(ScramError, match="nonce"):
        server.receive(final_message(server_first, wrong))


def test_a_wrong_password_with_the_repeated_nonce_is_refused():
    server = server_for()
    server_first = server.receive(f"n,,n=admin,r={CLIENT_NONCE}".encode())
    nonce = server_nonce_of(server_first)
    with pytest.raises(ScramError, match="credentials"):
        server.receive(final_message(server_first, CLIENT_NONCE + nonce, password="wrong"))
