"""SASL/PLAIN (RFC 4616) on the server: `authzid NUL authcid NUL password`.

Owns: `PlainServerExchange` (one message in, success or `PlainError`) and
`plain_client_message` for the client side.

Where a password is checked, in this order:
1. the static users of the listener's PlainLoginModule JAAS line
   (`user_NAME="password"`, Kafka's PlainServerCallbackHandler);
2. kraftwerk's addition: any SCRAM credential of that user in the metadata log
   (SCRAM-SHA-256 and SCRAM-SHA-512): the password is run through the stored salt
   and iteration count and the resulting StoredKey compared. One set of users then
   serves both mechanisms, managed with AlterUserScramCredentials.

Kafka's rules carried over (PlainSaslServer): exactly three NUL-separated fields;
empty user or password fail; an authzid that is not empty and not the user fails.
Kafka's client-visible texts are used for those; every other failure gets the
listener's generic message (see server/security/sasl.py).

Rules kept here:
- Constant-time comparisons (`hmac.compare_digest`); a user that exists nowhere still
  costs one PBKDF2 over a fake credential, so timing does not tell it apart from a
  SCRAM user with a wrong password.
- Passwords never reach an exception message, a repr or a log field.
"""

from __future__ import annotations

import hmac
from typing import Callable, Mapping

from server.security import scram
from server.security.model import ScramCredential, ScramMechanism

PLAIN_MESSAGE_MAX_BYTES = 4096


class PlainError(Exception):
    """PLAIN authentication failed. `client_visible`: Kafka sends this text to the client
    (its SaslAuthenticationException); otherwise the generic message is sent."""

    def __init__(self, message: str, *, client_visible: bool = False) -> None:
        super().__init__(message)
        self.client_visible = client_visible


class PlainServerExchange:
    """One PLAIN exchange: a single client message, then complete or failed."""

    def __init__(self, static_users: Mapping[str, str],
                 lookup: Callable[[str, ScramMechanism], ScramCredential | None], fake_secret: bytes) -> None:
        self._static_users = static_users
        self._lookup = lookup
        self._fake_secret = fake_secret
        self.username: str | None = None
        self.complete = False
        self.failed = False

    def __repr__(self) -> str:
        return f"PlainServerExchange(user={self.username!r}, complete={self.complete})"

    def _fail(self, message: str, client_visible: bool = False) -> PlainError:
        self.failed = True
        return PlainError(message, client_visible=client_visible)

    def receive(self, message: bytes) -> bytes:
        if self.complete or self.failed:
            raise self._fail("PLAIN takes exactly one message")
        if len(message) > PLAIN_MESSAGE_MAX_BYTES:
            raise self._fail(f"SASL/PLAIN message of {len(message)} bytes is too long")
        try:
            text = bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("SASL/PLAIN message is not UTF-8") from None
        tokens = text.split("\x00")
        if len(tokens) != 3:
            raise self._fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise self._fail("Authentication failed: username not specified", True)
        self.username = username
        if not password:
            raise self._fail("Authentication failed: password not specified", True)
        if authzid and authzid != username:
            raise self._fail(
                "Authentication failed: Client requested an authorization id that is different from username", True)
        if not self._password_matches(username, password):
            raise self._fail("Authentication failed: Invalid username or password", True)
        self.complete = True
        return b""

    def _password_matches(self, username: str, password: str) -> bool:
        expected = self._static_users.get(username)
        if expected is not None and hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8")):
            return True
        credentials = []
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            try:
                credential = self._lookup(username, mechanism)
            except Exception:  # a lookup bug: treat as no credential, never leak it
                credential = None
            if credential is not None:
                credentials.append(credential)
        if not credentials:
            if expected is None:
                # Nobody by that name: spend what a user with both SCRAM credentials at the
                # default iteration count would cost.
                for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
                    scram.password_matches(scram.fake_credential(username, mechanism, self._fake_secret), password)
            return False
        matched = False
        for credential in credentials:
            matched |= scram.password_matches(credential, password)
        return matched


def plain_client_message(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode("utf-8")
