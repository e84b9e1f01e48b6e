"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: credentials and both sides of the exchange.

Owns: credential derivation (`salted_password`, `credential_from_salted_password`,
`new_credential`), SASLname escaping (`escape_username`, `unescape_username`), the
server side of one exchange (`ScramServerExchange`), the client side
(`ScramClientExchange`), and `ScramError`, the only exception bad peer input raises here.

Rules kept here:
- Sans-I/O: every method takes bytes and returns bytes; nothing reads a socket, a
  clock or the metadata image. Credentials come in through a lookup callable; nonces
  come from an injectable random source (tests pin them to RFC 7677's vector).
- Anything a peer sends is parsed strictly; whatever is wrong with it (encoding,
  syntax, state, proof) becomes a `ScramError` whose `server_error` is RFC 5802's
  `e=` value. No other exception escapes `receive_*` for any input (a Hypothesis
  property checks it).
- Secrets never leave: no password, salted password, key or proof is put into an
  exception message, a repr or a log field.
- An unknown user costs what a known one costs: the exchange goes on with a fake
  credential derived from a per-server secret and the user name (stable, so the salt
  a client sees for a name does not tell whether it exists), and fails at the proof
  check like a wrong password. Kafka itself fails an unknown user at client-first;
  kraftwerk does not, on purpose.

Kafka's rules carried over (ScramSaslServer, ScramMessages, ScramFormatter):
- gs2 header: only "n" (no channel binding; Kafka's grammar has nothing else), an
  optional `a=` authzid that must equal the user name.
- Extensions after the nonce in client-first are accepted and ignored, except
  `tokenauth=true` (delegation tokens), which kraftwerk does not have and refuses.
- Iterations: at least 4096, at most 16384, for both SHA-256 and SHA-512.
- client-final: `c=` must be the base64 of the gs2 header ("biws" for "n,,") and the
  nonce must be exactly the combined one of server-first.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Callable

from server.security.model import ScramCredential, ScramMechanism

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# Bytes of randomness in a nonce and a generated salt.
NONCE_BYTES = 24
SALT_BYTES = 16
# A SCRAM message longer than this is refused before parsing (they are ~200 bytes).
MESSAGE_MAX_BYTES = 4096

_HASH_NAMES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}
SCRAM_MECHANISM_NAMES = ("SCRAM-SHA-256", "SCRAM-SHA-512")

# RFC 5802 printable: %x21-2B / %x2D-7E (no comma).
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# Kafka's extension grammar: an alphabetic key, a value of ASCII without ',' or '='
# (Kafka's ScramExtensions); RFC 5802 reserves single letters for itself.
_EXTENSION = re.compile(r"([A-Za-z]+)=([\x01-\x2b\x2d-\x3c\x3e-\x7f]+)")


class ServerError(str, enum.Enum):
    """RFC 5802 server-error-value (the `e=` attribute of server-final)."""

    INVALID_ENCODING = "invalid-encoding"
    EXTENSIONS_NOT_SUPPORTED = "extensions-not-supported"
    INVALID_PROOF = "invalid-proof"
    CHANNEL_BINDINGS_DONT_MATCH = "channel-bindings-dont-match"
    CHANNEL_BINDING_NOT_SUPPORTED = "channel-binding-not-supported"
    UNKNOWN_USER = "unknown-user"
    INVALID_USERNAME_ENCODING = "invalid-username-encoding"
    OTHER_ERROR = "other-error"


class ScramError(Exception):
    """A SCRAM exchange failed. The message is safe to log (never a secret); whether
    it may be shown to an unauthenticated client is `client_visible`."""

    def __init__(self, message: str, server_error: ServerError = ServerError.OTHER_ERROR, *,
                 client_visible: bool = False) -> None:
        super().__init__(message)
        self.server_error = server_error
        # Kafka sends its own text only for SaslAuthenticationException (an authzid
        # that differs from the user); every other failure gets the generic message.
        self.client_visible = client_visible

    @property
    def server_final(self) -> bytes:
        """The RFC 5802 server-final error message, `e=<value>`."""
        return f"e={self.server_error.value}".encode()


# ---------------------------------------------------------------------------
# Credentials
# ---------------------------------------------------------------------------

def hash_name(mechanism: ScramMechanism) -> str:
    try:
        return _HASH_NAMES[ScramMechanism(mechanism)]
    except (KeyError, ValueError):
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None


def digest_bytes(mechanism: ScramMechanism) -> int:
    return hashlib.new(hash_name(mechanism)).digest_size


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name(mechanism)).digest()


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(hash_name(mechanism), data).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2 with HMAC-H. Kafka applies no SASLprep: the
    password's UTF-8 bytes are used as they are."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Client Key")


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return _hmac(mechanism, salted, b"Server Key")


def stored_key(mechanism: ScramMechanism, key: bytes) -> bytes:
    return _hash(mechanism, key)


def check_iterations(iterations: int) -> str | None:
    """Kafka's bounds (the same for SHA-256 and SHA-512); a reason, or None if fine."""
    if iterations < MIN_ITERATIONS:
        return "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return "Too many iterations"
    return None


def credential_from_salted_password(user: str, mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """What the log stores, from what AlterUserScramCredentials carries."""
    mechanism = ScramMechanism(mechanism)
    return ScramCredential(user, mechanism, bytes(salt), stored_key(mechanism, client_key(mechanism, salted)),
                           server_key(mechanism, salted), iterations)


def new_credential(user: str, mechanism: ScramMechanism, password: str, *, salt: bytes | None = None,
                   iterations: int = MIN_ITERATIONS,
                   random_bytes: Callable[[int], bytes] = os.urandom) -> ScramCredential:
    """A credential for `password` (a random salt unless one is given)."""
    reason = check_iterations(iterations)
    if reason is not None:
        raise ValueError(f"{reason}: {iterations} (allowed {MIN_ITERATIONS}-{MAX_ITERATIONS})")
    if salt is None:
        salt = random_bytes(SALT_BYTES)
    if not salt:
        raise ValueError("the salt must not be empty")
    return credential_from_salted_password(user, mechanism, salt,
                                           salted_password(mechanism, password, salt, iterations), iterations)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """True if `password` derives `credential` (used by PLAIN against SCRAM credentials)."""
    salted = salted_password(credential.mechanism, password, credential.salt, credential.iterations)
    derived = stored_key(credential.mechanism, client_key(credential.mechanism, salted))
    return hmac.compare_digest(derived, credential.stored_key)


def fake_credential(user: str, mechanism: ScramMechanism, secret: bytes) -> ScramCredential:
    """A credential for a user that does not exist: stable per (secret, user), so a
    client asking twice sees the same salt, and useless (its keys match no password)."""
    mechanism = ScramMechanism(mechanism)
    seed = _hmac(mechanism, secret, b"kraftwerk fake credential\x00" + user.encode("utf-8"))
    size = digest_bytes(mechanism)
    return ScramCredential(user, mechanism, seed[:SALT_BYTES], _hmac(mechanism, seed, b"stored")[:size],
                           _hmac(mechanism, seed, b"server")[:size], MIN_ITERATIONS)


# ---------------------------------------------------------------------------
# Message syntax
# ---------------------------------------------------------------------------

def escape_username(name: str) -> str:
    """RFC 5802 saslname: '=' as '=3D', ',' as '=2C' ('=' first, or '=2C' would be mangled)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(saslname: str) -> str:
    """The user name of a saslname; any '=' not followed by 2C or 3D, or a bare ',', is an error."""
    if "," in saslname:
        raise ScramError("a comma in the user name is not escaped", ServerError.INVALID_USERNAME_ENCODING)
    parts = saslname.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        if part.startswith("2C"):
            out.append("," + part[2:])
        elif part.startswith("3D"):
            out.append("=" + part[2:])
        else:
            raise ScramError("an '=' in the user name is not followed by 2C or 3D",
                             ServerError.INVALID_USERNAME_ENCODING)
    return "".join(out)


def _text(message: bytes) -> str:
    if not isinstance(message, (bytes, bytearray, memoryview)):
        raise ScramError("a SCRAM message must be bytes", ServerError.INVALID_ENCODING)
    if len(message) > MESSAGE_MAX_BYTES:
        raise ScramError(f"SCRAM message of {len(message)} bytes is longer than {MESSAGE_MAX_BYTES}",
                         ServerError.INVALID_ENCODING)
    try:
        text = bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8", ServerError.INVALID_ENCODING) from None
    if "\x00" in text:
        raise ScramError("SCRAM message contains NUL", ServerError.INVALID_ENCODING)
    return text


def _attribute(part: str, name: str) -> str:
    """The value of `name=value`, or ScramError."""
    if not part.startswith(name + "="):
        raise ScramError(f"expected the {name}= attribute", ServerError.INVALID_ENCODING)
    return part[len(name) + 1:]


def _nonce(value: str) -> str:
    if not _PRINTABLE.fullmatch(value):
        raise ScramError("nonce is empty or not printable", ServerError.INVALID_ENCODING)
    return value


def _b64decode(value: str, what: str) -> bytes:
    if len(value) % 4 or not _BASE64.fullmatch(value):
        raise ScramError(f"{what} is not base64", ServerError.INVALID_ENCODING)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not base64", ServerError.INVALID_ENCODING) from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    authzid: str
    username: str
    client_nonce: str
    bare: str
    extensions: tuple[tuple[str, str], ...]


def parse_client_first(message: bytes) -> ClientFirst:
    text = _text(message)
    # gs2-header = cbind-flag "," [ authzid ] ","
    flag, sep, rest = text.partition(",")
    if not sep:
        raise ScramError("client-first has no gs2 header", ServerError.INVALID_ENCODING)
    if flag != "n":
        # "y" / "p=..." ask about channel binding, which Kafka's SCRAM never offers.
        raise ScramError(f"gs2 channel binding flag {flag[:8]!r} is not supported",
                         ServerError.CHANNEL_BINDING_NOT_SUPPORTED)
    authz_part, sep, bare = rest.partition(",")
    if not sep:
        raise ScramError("client-first gs2 header is not terminated", ServerError.INVALID_ENCODING)
    authzid = ""
    if authz_part:
        authzid = unescape_username(_attribute(authz_part, "a"))
        if not authzid:
            raise ScramError("empty authzid", ServerError.INVALID_ENCODING)
    parts = bare.split(",")
    if parts[0].startswith("m="):
        raise ScramError("mandatory extension m= is not supported", ServerError.EXTENSIONS_NOT_SUPPORTED)
    if len(parts) < 2:
        raise ScramError("client-first needs n= and r=", ServerError.INVALID_ENCODING)
    username = unescape_username(_attribute(parts[0], "n"))
    if not username:
        raise ScramError("empty user name", ServerError.INVALID_USERNAME_ENCODING)
    client_nonce = _nonce(_attribute(parts[1], "r"))
    extensions = []
    for part in parts[2:]:
        match = _EXTENSION.fullmatch(part)
        if match is None:
            raise ScramError("malformed extension in client-first", ServerError.INVALID_ENCODING)
        extensions.append((match.group(1), match.group(2)))
    return ClientFirst(f"n,{authz_part},", authzid, username, client_nonce, bare, tuple(extensions))


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int
    text: str


def parse_server_first(message: bytes) -> ServerFirst:
    text = _text(message)
    parts = text.split(",")
    if parts[0].startswith("m="):
        raise ScramError("mandatory extension m= is not supported", ServerError.EXTENSIONS_NOT_SUPPORTED)
    if len(parts) < 3:
        raise ScramError("server-first needs r=, s= and i=", ServerError.INVALID_ENCODING)
    nonce = _nonce(_attribute(parts[0], "r"))
    salt = _b64decode(_attribute(parts[1], "s"), "salt")
    iterations_text = _attribute(parts[2], "i")
    if not iterations_text.isdigit() or len(iterations_text) > 9:
        raise ScramError("iteration count is not a number", ServerError.INVALID_ENCODING)
    return ServerFirst(nonce, salt, int(iterations_text), text)


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: str
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(message: bytes) -> ClientFinal:
    text = _text(message)
    without_proof, sep, proof_text = text.rpartition(",p=")
    if not sep:
        raise ScramError("client-final has no proof", ServerError.INVALID_ENCODING)
    parts = without_proof.split(",")
    if len(parts) < 2:
        raise ScramError("client-final needs c= and r=", ServerError.INVALID_ENCODING)
    channel_binding = _attribute(parts[0], "c")
    _b64decode(channel_binding, "channel binding")
    nonce = _nonce(_attribute(parts[1], "r"))
    for part in parts[2:]:
        if _EXTENSION.fullmatch(part) is None:
            raise ScramError("malformed extension in client-final", ServerError.INVALID_ENCODING)
    proof = _b64decode(proof_text, "proof")
    return ClientFinal(channel_binding, nonce, proof, without_proof)


def random_nonce(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """Printable and comma-free: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(random_bytes(NONCE_BYTES)).decode("ascii").rstrip("=")


# ---------------------------------------------------------------------------
# The server side
# ---------------------------------------------------------------------------

class ExchangeState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive_client_first"
    RECEIVE_CLIENT_FINAL = "receive_client_final"
    COMPLETE = "complete"
    FAILED = "failed"


CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]


class ScramServerExchange:
    """One server-side SCRAM exchange: client-first -> server-first, client-final ->
    server-final. Any failure moves it to FAILED for good; nothing is accepted after
    COMPLETE (a replayed client-final fails)."""

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, fake_secret: bytes, *,
                 server_nonce: str | None = None,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.mechanism = ScramMechanism(mechanism)
        hash_name(self.mechanism)  # refuse a non-SCRAM mechanism early
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._server_nonce = server_nonce
        self._random_bytes = random_bytes
        self.state = ExchangeState.RECEIVE_CLIENT_FIRST
        self.username: str | None = None
        # Whether the user had a real credential (for the server's log only).
        self.user_known = False
        self._client_first: ClientFirst | None = None
        self._server_first: str | None = None
        self._nonce: str | None = None
        self._credential: ScramCredential | None = None

    def __repr__(self) -> str:
        return f"ScramServerExchange({self.mechanism.mechanism_name}, state={self.state.value}, user={self.username!r})"

    @property
    def complete(self) -> bool:
        return self.state is ExchangeState.COMPLETE

    def _fail(self, error: ScramError) -> ScramError:
        self.state = ExchangeState.FAILED
        self._credential = None
        return error

    def receive_client_first(self, message: bytes) -> bytes:
        if self.state is not ExchangeState.RECEIVE_CLIENT_FIRST:
            raise self._fail(ScramError(f"client-first received in state {self.state.value}"))
        try:
            first = parse_client_first(message)
        except ScramError as exc:
            raise self._fail(exc) from None
        self.username = first.username
        for key, value in first.extensions:
            if key == "tokenauth" and value.lower() == "true":
                raise self._fail(ScramError("delegation token authentication is not supported",
                                            ServerError.EXTENSIONS_NOT_SUPPORTED))
        if first.authzid and first.authzid != first.username:
            raise self._fail(ScramError(
                "Authentication failed: Client requested an authorization id that is different from username",
                client_visible=True))
        try:
            credential = self._lookup(first.username, self.mechanism)
        except Exception:  # a lookup bug must not tell the client anything
            credential = None
        self.user_known = credential is not None
        if credential is None:
            credential = fake_credential(first.username, self.mechanism, self._fake_secret)
        elif credential.iterations < MIN_ITERATIONS:
            raise self._fail(ScramError(f"stored credential has {credential.iterations} iterations, "
                                        f"fewer than the minimum {MIN_ITERATIONS}"))
        server_nonce = self._server_nonce if self._server_nonce is not None else random_nonce(self._random_bytes)
        self._nonce = first.client_nonce + server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._client_first = first
        self._credential = credential
        self.state = ExchangeState.RECEIVE_CLIENT_FINAL
        return self._server_first.encode("ascii")

    def receive_client_final(self, message: bytes) -> bytes:
        if self.state is not ExchangeState.RECEIVE_CLIENT_FINAL:
            raise self._fail(ScramError(f"client-final received in state {self.state.value}"))
        try:
            final = parse_client_final(message)
        except ScramError as exc:
            raise self._fail(exc) from None
        first = self._client_first
        credential = self._credential
        assert first is not None and credential is not None and self._server_first is not None
        if final.channel_binding != _b64(first.gs2_header.encode("utf-8")):
            raise self._fail(ScramError("channel binding does not match the gs2 header",
                                        ServerError.CHANNEL_BINDINGS_DONT_MATCH))
        # Kafka's ScramSaslServer accepts a final nonce that *ends with* the server's
        # nonce, and librdkafka relies on it: its client-final repeats its own nonce in
        # front of the server's (c=biws,r=<client nonce><server nonce>). The proof covers
        # the message as sent, so the extra prefix gives a replay nothing.
        sent, expected = final.nonce.encode("utf-8"), self._nonce.encode("utf-8")
        if len(sent) < len(expected) or not hmac.compare_digest(sent[len(sent) - len(expected):], expected):
            raise self._fail(ScramError("Invalid client nonce in the final client message.",
                                        ServerError.INVALID_ENCODING))
        size = digest_bytes(self.mechanism)
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode("utf-8")
        client_signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        proof = final.proof if len(final.proof) == size else bytes(size)
        recovered_client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        proof_ok = hmac.compare_digest(stored_key(self.mechanism, recovered_client_key), credential.stored_key)
        if not (proof_ok and len(final.proof) == size and self.user_known):
            raise self._fail(ScramError("Invalid client credentials" if self.user_known
                                        else "Invalid client credentials (unknown user)",
                                        ServerError.INVALID_PROOF))
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self._credential = None
        self.state = ExchangeState.COMPLETE
        return f"v={_b64(server_signature)}".encode("ascii")

    def receive(self, message: bytes) -> bytes:
        """The next client message, whichever step it is."""
        if self.state is ExchangeState.RECEIVE_CLIENT_FIRST:
            return self.receive_client_first(message)
        return self.receive_client_final(message)


# ---------------------------------------------------------------------------
# The client side
# ---------------------------------------------------------------------------

class ScramClientExchange:
    """One client-side exchange: `client_first()`, `receive_server_first(bytes) ->
    client-final`, `receive_server_final(bytes)` (verifies the server's signature)."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, *,
                 client_nonce: str | None = None,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.mechanism = ScramMechanism(mechanism)
        hash_name(self.mechanism)
        self.username = username
        self._password = password
        self._client_nonce = client_nonce if client_nonce is not None else random_nonce(random_bytes)
        self._bare = f"n={escape_username(username)},r={self._client_nonce}"
        self._server_signature: bytes | None = None
        self.state = "initial"

    def __repr__(self) -> str:
        return f"ScramClientExchange({self.mechanism.mechanism_name}, user={self.username!r}, state={self.state})"

    def client_first(self) -> bytes:
        if self.state != "initial":
            raise ScramError(f"client-first asked for in state {self.state}")
        self.state = "sent_client_first"
        return f"n,,{self._bare}".encode("utf-8")

    def receive_server_first(self, message: bytes) -> bytes:
        if self.state != "sent_client_first":
            raise ScramError(f"server-first received in state {self.state}")
        self.state = "failed"
        if bytes(message[:2]) == b"e=":
            raise ScramError("the server refused client-first: " + _text(message)[2:66])
        first = parse_server_first(message)
        if not first.nonce.startswith(self._client_nonce) or len(first.nonce) == len(self._client_nonce):
            raise ScramError("server nonce does not extend the client nonce")
        reason = check_iterations(first.iterations)
        if reason is not None:
            raise ScramError(f"server asked for {first.iterations} iterations: {reason.lower()}")
        salted = salted_password(self.mechanism, self._password, first.salt, first.iterations)
        self._password = ""
        without_proof = f"c=biws,r={first.nonce}"
        auth_message = f"{self._bare},{first.text},{without_proof}".encode("utf-8")
        key = client_key(self.mechanism, salted)
        signature = _hmac(self.mechanism, stored_key(self.mechanism, key), auth_message)
        proof = bytes(a ^ b for a, b in zip(key, signature))
        self._server_signature = _hmac(self.mechanism, server_key(self.mechanism, salted), auth_message)
        self.state = "sent_client_final"
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def receive_server_final(self, message: bytes) -> None:
        if self.state != "sent_client_final":
            raise ScramError(f"server-final received in state {self.state}")
        self.state = "failed"
        text = _text(message)
        if text.startswith("e="):
            raise ScramError(f"the server refused the proof: {text[2:66]}")
        verifier = _b64decode(_attribute(text.split(",")[0], "v"), "server signature")
        assert self._server_signature is not None
        if not hmac.compare_digest(verifier, self._server_signature):
            raise ScramError("the server's signature is wrong (it does not know this credential)")
        self.state = "complete"
