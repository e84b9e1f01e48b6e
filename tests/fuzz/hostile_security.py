"""Hostile SASL and TLS connections from a seeded `random.Random` (no I/O here).

Owns: the plan of one hostile connection to a SASL_PLAINTEXT / SASL_SSL listener
(`SecurityPlan`: which port, whether TLS is spoken and with which trust, and the
steps: requests whose answers are checked, SCRAM client-final messages built from
the server-first the server sent, raw bytes), and `security_plan(rng, index, users)`,
which draws one. tests/fuzz/test_live_security.py runs them against a live node.

Kinds (KINDS cycles through them, so every kind appears in every run):
- handshake_mechanism: SaslHandshake with empty, overlong, near-miss, non-UTF-8
  mechanism names (and v0 with a real one);
- authenticate_first: SaslAuthenticate before any SaslHandshake;
- authenticate_random: a real handshake, then random bytes as the token;
- scram_first: a SCRAM handshake, then a mutated client-first (gs2 headers,
  escapes, nonces, extensions, iteration claims, bad UTF-8, NULs, 100 KB);
- scram_final: a well-formed client-first, then a mutated client-final built from
  the server's server-first (wrong nonce, channel binding, proof, base64,
  iteration claims, a real proof from a wrong password, 100 KB, ...);
- scram_rehandshake: client-first, then a second SaslHandshake;
- plain_token: PLAIN with missing / extra NULs, empty fields, another authzid,
  wrong passwords (static user, SCRAM user, unknown user), bad UTF-8, 100 KB;
- plain_pipelined: two PLAIN tokens sent back to back;
- pipelined: a whole exchange in one send (handshake, client-first, a made-up
  client-final; or a PLAIN token followed by a second handshake), sometimes with the
  probe request appended, so requests arrive while a token is being verified;
- before_auth: a valid request of another API before authentication;
- oversized: a size prefix above sasl.server.max.receive.size (then some bytes);
- limit_token: after a handshake, a SaslAuthenticate frame of exactly that size
  (answered with a SASL error) or one byte more (never answered);
- mutated_sasl: a SaslHandshake / SaslAuthenticate frame damaged by hostile.mutate;
- tls_garbage / tls_truncated / tls_mutated_hello / tls_untrusted / tls_plaintext:
  the TLS listener's handshake attacked (random bytes, a real ClientHello cut short
  or damaged, a client that does not trust the CA, plaintext Kafka frames).

Rules kept here:
- No plan ever holds a real password: every password it tries starts with
  `WRONG_PASSWORD_PREFIX`, so the test can also check those never reach a log.
- A `Request` says what its answer may be: `may_succeed` (ApiVersions, a handshake
  naming an enabled mechanism, a SCRAM client-first) or one of `allowed_errors`.
  SaslAuthenticate answering NONE to a final message or a PLAIN token would mean
  a hostile connection authenticated.
"""

from __future__ import annotations

import base64
import random
import ssl
import struct
from dataclasses import dataclass
from typing import Callable

from protocol.frames import encode_request
from server.security import scram
from server.security.model import ScramMechanism

from .hostile import API_KEYS, mutate, valid_frame

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_CLUSTER = 18, 17, 36, 60
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION, SASL_AUTHENTICATION_FAILED = 33, 34, 35, 58
SASL_ERRORS = frozenset((UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION,
                         SASL_AUTHENTICATION_FAILED))
ENABLED = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
WRONG_PASSWORD_PREFIX = "wrong-pw-"
PROBE_CORRELATION_ID = 0x7EADBEEF
HUGE_TOKEN_BYTES = 100_000
SASL_MAX_RECEIVE_BYTES = 524_288  # Kafka's default sasl.server.max.receive.size (the node keeps it)

SASL_KINDS = ("handshake_mechanism", "authenticate_first", "authenticate_random", "scram_first", "scram_first",
              "scram_final", "scram_final", "scram_final", "scram_rehandshake", "plain_token", "plain_token",
              "plain_pipelined", "pipelined", "pipelined", "before_auth", "oversized", "limit_token",
              "mutated_sasl")
TLS_KINDS = ("tls_garbage", "tls_truncated", "tls_mutated_hello", "tls_untrusted", "tls_plaintext")
# Kinds whose steps keep the connection's framing in sync (so they can also run inside TLS).
IN_SYNC_KINDS = frozenset(SASL_KINDS) - {"oversized", "mutated_sasl"}


@dataclass(frozen=True)
class Users:
    """Names the hostile side may claim (never their passwords)."""

    scram_user: str
    plain_user: str


@dataclass(frozen=True)
class Request:
    api_key: int
    version: int
    correlation_id: int
    frame: bytes
    may_succeed: bool = False
    allowed_errors: frozenset[int] = SASL_ERRORS


@dataclass(frozen=True)
class ClientFinal:
    """A SaslAuthenticate whose token is built from the server-first just received."""

    version: int
    correlation_id: int
    build: Callable[[bytes], bytes]

    def request(self, server_first: bytes) -> Request:
        return authenticate_request(self.version, self.correlation_id, self.build(server_first))


@dataclass(frozen=True)
class Raw:
    data: bytes


Part = Request | ClientFinal | Raw


@dataclass(frozen=True)
class SecurityPlan:
    kind: str
    listener: str  # "sasl_plaintext" or "sasl_ssl"
    tls: str  # "none" (raw TCP, even to the TLS port), "trusted", "untrusted"
    steps: tuple[tuple[Part, ...], ...]  # each step's parts are sent together, then their answers read
    in_sync: bool  # the steps keep Kafka framing: a probe can follow and be checked

    def describe(self) -> str:
        shown = []
        for step in self.steps:
            for part in step:
                if isinstance(part, Request):
                    shown.append(f"req(api={part.api_key} v{part.version} {part.frame[:48].hex()}..)")
                elif isinstance(part, ClientFinal):
                    shown.append("client-final(built)")
                else:
                    shown.append(f"raw({len(part.data)}B {part.data[:32].hex()}..)")
        return f"{self.kind} on {self.listener} tls={self.tls}: " + " ".join(shown)


# -- frames --------------------------------------------------------------------------

def _frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return encode_request(api_key, version, correlation_id, "hostile-sasl", body)


def api_versions_request(correlation_id: int) -> Request:
    return Request(API_VERSIONS, 3, correlation_id, _frame(API_VERSIONS, 3, correlation_id, {
        "client_software_name": "hostile", "client_software_version": "1"}), may_succeed=True,
        allowed_errors=frozenset())


def handshake_request(version: int, correlation_id: int, mechanism: str, *, may_succeed: bool) -> Request:
    return Request(SASL_HANDSHAKE, version, correlation_id,
                   _frame(SASL_HANDSHAKE, version, correlation_id, {"mechanism": mechanism}), may_succeed)


def authenticate_request(version: int, correlation_id: int, token: bytes, *, may_succeed: bool = False) -> Request:
    return Request(SASL_AUTHENTICATE, version, correlation_id,
                   _frame(SASL_AUTHENTICATE, version, correlation_id, {"auth_bytes": token}), may_succeed)


def sized_authenticate_request(version: int, correlation_id: int, payload_bytes: int, fill: bytes) -> Request:
    """A SaslAuthenticate whose frame (without the size prefix) is exactly `payload_bytes` long."""
    length = payload_bytes
    for _ in range(4):  # the token's length prefix may change size: converge
        frame = _frame(SASL_AUTHENTICATE, version, correlation_id, {"auth_bytes": fill * length})
        missing = payload_bytes - (len(frame) - 4)
        if missing == 0:
            return authenticate_request(version, correlation_id, fill * length)
        length += missing
    raise AssertionError("could not size the frame")


def probe_request() -> Request:
    """A request no unauthenticated connection may have answered."""
    return Request(DESCRIBE_CLUSTER, 0, PROBE_CORRELATION_ID,
                   _frame(DESCRIBE_CLUSTER, 0, PROBE_CORRELATION_ID, {}), may_succeed=False,
                   allowed_errors=frozenset())


def _with_raw_bytes(frame: bytes, placeholder: bytes, raw: bytes) -> bytes:
    """`frame` with `placeholder` (same length as `raw`) swapped for bytes the encoder refuses."""
    assert len(placeholder) == len(raw) and frame.count(placeholder) == 1
    return frame.replace(placeholder, raw)


def _bad_utf8(rng: random.Random, size: int) -> bytes:
    out = bytearray(rng.randbytes(size))
    out[rng.randrange(size)] = rng.choice((0xFF, 0xFE, 0xC0, 0x80))
    return bytes(out)


def wrong_password(rng: random.Random) -> str:
    return WRONG_PASSWORD_PREFIX + rng.randbytes(6).hex()


# -- SCRAM messages ------------------------------------------------------------------

def _nonce(rng: random.Random) -> str:
    return base64.urlsafe_b64encode(rng.randbytes(18)).decode("ascii").rstrip("=")


def _claimable_user(rng: random.Random, users: Users) -> str:
    return rng.choice((users.scram_user, users.scram_user, users.plain_user, "nobody", "a=2Cb", "ünïcödé",
                       "x" * 300))


def scram_client_first_mutated(rng: random.Random, users: Users) -> bytes:
    user = scram.escape_username(_claimable_user(rng, users))
    nonce = _nonce(rng)
    variant = rng.randrange(22)
    if variant == 0:
        return rng.choice((b"y,,", b"p=tls-server-end-point,,", b"q,,", b",,", b"n", b"n,", b"")) + \
            f"n={user},r={nonce}".encode()
    if variant == 1:
        return f"n,a=someone-else,n={user},r={nonce}".encode()
    if variant == 2:
        return f"n,x=1,n={user},r={nonce}".encode()
    if variant == 3:
        return f"n,,n={rng.choice(('a=2Xb', 'a,b', '', '=', 'a=3'))},r={nonce}".encode()
    if variant == 4:
        return f"n,,n={user}".encode()
    if variant == 5:
        return f"n,,n={user},r={rng.choice(('', chr(0x7F), 'a b', 'é'))}".encode()
    if variant == 6:
        return f"n,,m=ext,n={user},r={nonce}".encode()
    if variant == 7:
        return f"n,,n={user},r={nonce},tokenauth=true".encode()
    if variant == 8:
        # Iteration / size claims the server must not believe or act on.
        claim = rng.choice(("i=4294967296", "i=99999999999999999999", "i=-1", "s=AAAA", "i=16384"))
        return f"n,,n={user},r={nonce},{claim}".encode()
    if variant == 9:
        return f"n,,n={user},r={nonce},foo".encode()
    if variant == 10:
        text = f"n,,n={user},r={nonce}".encode()
        cut = rng.randint(0, len(text))
        return text[:cut] + rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")) + text[cut:]
    if variant == 11:
        text = f"n,,n={user},r={nonce}".encode()
        cut = rng.randint(0, len(text))
        return text[:cut] + b"\x00" + text[cut:]
    if variant == 12:
        return f"n,,n={user},r={nonce}".encode() + b"x" * HUGE_TOKEN_BYTES
    if variant == 13:
        # Just around the server's 4096-byte cap for a SCRAM message.
        base = f"n,,n={user},r=".encode()
        return base + b"A" * (scram.MESSAGE_MAX_BYTES - len(base) + rng.choice((-1, 0, 1)))
    if variant == 14:
        return rng.randbytes(rng.randint(0, 200))
    if variant == 15:
        return f"n,,r={nonce},n={user}".encode()
    if variant == 16:
        return f"n,,n={user},r={nonce},c=biws,p=AAAA".encode()  # a client-final glued on
    if variant == 17:
        return f"n,a={user},n={user},r={nonce}".encode()  # authzid == user: accepted
    if variant == 18:
        return f"n,,n={user},r={nonce}".encode()  # valid shape (the final step will fail)
    if variant == 19:
        return ("n,,n=" + "=2C" * rng.randint(1, 2000) + f",r={nonce}").encode()
    if variant == 20:
        return mutate(rng, f"n,,n={user},r={nonce}".encode())
    return b""


def _combined_nonce(server_first: bytes) -> str:
    """The nonce of a server-first, or a made-up one if it is unreadable."""
    try:
        return scram.parse_server_first(server_first).nonce
    except scram.ScramError:
        return "unreadable-server-first"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def scram_client_final_builder(rng: random.Random, mechanism: str, variant: int, client_first: bytes,
                               client_nonce: str, user: str) -> Callable[[bytes], bytes]:
    """A function server-first -> a hostile client-final. All random choices are drawn now,
    so the plan depends only on the seed."""
    size = scram.digest_bytes(ScramMechanism.from_name(mechanism))
    proof = rng.randbytes(size)
    short_proof = rng.randbytes(rng.choice((0, 1, size - 1, size + 1, 16)))
    cut = rng.random()
    bad = rng.choice((b"\xff", b"\xc3\x28", b"\x00", b"\x00\x00"))
    mutation_rng = random.Random(rng.getrandbits(64))
    password = wrong_password(rng)
    other_nonce = _nonce(rng)
    claim = rng.choice(("i=4294967296", "i=99999999999999999999", "i=0", "i=-5", "s=" + _b64(b"salt")))

    def build(server_first: bytes) -> bytes:
        nonce = _combined_nonce(server_first)
        shape = f"c=biws,r={nonce},p={_b64(proof)}"
        if variant == 0:
            return shape.encode()  # valid shape, random proof
        if variant == 1:
            return f"c=biws,r={client_nonce},p={_b64(proof)}".encode()  # the client's half only
        if variant == 2:
            return f"c=biws,r={nonce}x,p={_b64(proof)}".encode()
        if variant == 3:
            return f"c=biws,r={other_nonce},p={_b64(proof)}".encode()
        if variant == 4:
            binding = ("eSws", "", "biws=", "!!!!", "cD10bHMtdW5pcXVlLCw=", _b64(b"n,a=x,"))[int(cut * 6)]
            return f"c={binding},r={nonce},p={_b64(proof)}".encode()
        if variant == 5:
            return f"c=biws,r={nonce},p={('@@@@', 'abc', '', '====', 'AB=C')[int(cut * 5)]}".encode()
        if variant == 6:
            return f"c=biws,r={nonce},p={_b64(short_proof)}".encode()
        if variant == 7:
            return f"c=biws,r={nonce}".encode()  # no proof
        if variant == 8:
            return f"c=biws,r={nonce},{claim},p={_b64(proof)}".encode()
        if variant == 9:
            text = shape.encode()
            at = int(cut * len(text))
            return text[:at] + bad + text[at:]
        if variant == 10:
            return shape.encode() + b"A" * HUGE_TOKEN_BYTES
        if variant == 11:
            # A real proof, for a wrong password: what a client with a typo sends.
            client = scram.ScramClientExchange(ScramMechanism.from_name(mechanism), user, password,
                                               client_nonce=client_nonce)
            client.client_first()
            try:
                return client.receive_server_first(server_first)
            except scram.ScramError:
                return shape.encode()
        if variant == 12:
            return server_first  # the server's own message sent back
        if variant == 13:
            return client_first  # client-first again
        if variant == 14:
            return f"r={nonce},c=biws,p={_b64(proof)}".encode()  # attributes swapped
        if variant == 15:
            return f"c=biws,r={nonce},p={_b64(proof)},p={_b64(proof)}".encode()
        if variant == 16:
            return b""
        return mutate(mutation_rng, shape.encode())

    return build


SCRAM_FINAL_VARIANTS = 18


# -- PLAIN tokens --------------------------------------------------------------------

def plain_token(rng: random.Random, users: Users) -> bytes:
    password = wrong_password(rng)
    user = rng.choice((users.plain_user, users.scram_user, "nobody"))
    variant = rng.randrange(14)
    if variant == 0:
        return f"{user}{password}".encode()  # no NUL
    if variant == 1:
        return f"\x00{user}".encode()  # one NUL
    if variant == 2:
        return f"\x00{user}\x00{password}\x00".encode()  # a trailing NUL
    if variant == 3:
        return f"\x00\x00{user}\x00{password}".encode()  # a leading extra NUL
    if variant == 4:
        return b"\x00\x00"  # empty user and password
    if variant == 5:
        return f"\x00{user}\x00".encode()  # empty password
    if variant == 6:
        return f"\x00\x00{password}".encode()  # empty user
    if variant == 7:
        return f"someone-else\x00{user}\x00{password}".encode()  # authzid is another user
    if variant == 8:
        return f"{user}\x00{user}\x00{password}".encode()  # authzid == user, wrong password
    if variant == 9:
        return f"\x00{user}\x00{password}".encode()  # plainly wrong
    if variant == 10:
        return b"\x00" + _bad_utf8(rng, 12) + b"\x00" + password.encode()
    if variant == 11:
        return f"\x00{user}\x00".encode() + b"p" * HUGE_TOKEN_BYTES
    if variant == 12:
        return b""
    return b"\x00" * rng.randint(3, 40)


# -- plans ---------------------------------------------------------------------------

class _Ids:
    def __init__(self, rng: random.Random) -> None:
        self.next = rng.randint(0, 2**30)

    def __call__(self) -> int:
        self.next += 1
        return self.next


def _sasl_steps(rng: random.Random, kind: str, users: Users) -> tuple[tuple[Part, ...], ...]:
    ids = _Ids(rng)
    steps: list[tuple[Part, ...]] = []
    if rng.random() < 0.5:
        steps.append((api_versions_request(ids()),))
    auth_version = rng.randint(0, 2)
    if kind == "handshake_mechanism":
        choice = rng.randrange(8)
        if choice == 0:
            steps.append((handshake_request(0, ids(), rng.choice(ENABLED), may_succeed=False),))
        elif choice == 1:
            # Not UTF-8: swap a placeholder for raw bytes after encoding.
            placeholder = b"M" * 16
            frame = _with_raw_bytes(_frame(SASL_HANDSHAKE, 1, ids.next + 1, {"mechanism": placeholder.decode()}),
                                    placeholder, _bad_utf8(rng, 16))
            steps.append((Request(SASL_HANDSHAKE, 1, ids(), frame),))
        else:
            mechanism = rng.choice((
                "", "plain", "PLAIN ", " PLAIN", "PLAIN\x00", "SCRAM-SHA-1", "SCRAM-SHA-256-PLUS", "GSSAPI",
                "OAUTHBEARER", "SCRAM-SHA-512,PLAIN", "A" * rng.randint(65, 32767), "\u00e9" * 200,
                rng.randbytes(20).hex()))
            steps.append((handshake_request(1, ids(), mechanism, may_succeed=False),))
    elif kind == "authenticate_first":
        steps.append((authenticate_request(auth_version, ids(), rng.randbytes(rng.randint(0, 64))),))
    elif kind == "authenticate_random":
        mechanism = rng.choice(ENABLED)
        steps.append((handshake_request(1, ids(), mechanism, may_succeed=True),))
        token = rng.randbytes(rng.choice((0, 1, 16, 200, 4097)))
        steps.append((authenticate_request(auth_version, ids(), token),))
    elif kind == "scram_first":
        mechanism = rng.choice(SCRAM_MECHANISMS)
        steps.append((handshake_request(1, ids(), mechanism, may_succeed=True),))
        # A client-first the server accepts is answered with a server-first (NONE);
        # then a final message with a random proof must fail.
        steps.append((authenticate_request(auth_version, ids(), scram_client_first_mutated(rng, users),
                                           may_succeed=True),))
        steps.append((ClientFinal(auth_version, ids(), scram_client_final_builder(
            rng, mechanism, 0, b"", "", users.scram_user)),))
    elif kind in ("scram_final", "scram_rehandshake"):
        mechanism = rng.choice(SCRAM_MECHANISMS)
        user = _claimable_user(rng, users)
        client_nonce = _nonce(rng)
        client_first = f"n,,n={scram.escape_username(user)},r={client_nonce}".encode()
        steps.append((handshake_request(1, ids(), mechanism, may_succeed=True),))
        steps.append((authenticate_request(auth_version, ids(), client_first, may_succeed=True),))
        if kind == "scram_rehandshake":
            steps.append((handshake_request(1, ids(), mechanism, may_succeed=False),))
        else:
            variant = rng.randrange(SCRAM_FINAL_VARIANTS)
            steps.append((ClientFinal(auth_version, ids(), scram_client_final_builder(
                rng, mechanism, variant, client_first, client_nonce, user)),))
    elif kind == "plain_token":
        steps.append((handshake_request(1, ids(), "PLAIN", may_succeed=True),))
        steps.append((authenticate_request(auth_version, ids(), plain_token(rng, users)),))
    elif kind == "plain_pipelined":
        steps.append((handshake_request(1, ids(), "PLAIN", may_succeed=True),))
        password = wrong_password(rng)
        first = authenticate_request(auth_version, ids(), f"\x00{users.scram_user}\x00{password}".encode())
        second = authenticate_request(auth_version, ids(), plain_token(rng, users))
        steps.append((first, second))
    elif kind == "pipelined":
        # Everything in one send: later requests reach the server while earlier ones
        # (PLAIN runs in a worker thread) are still being verified.
        scram_mechanism = rng.choice(SCRAM_MECHANISMS)
        client_nonce = _nonce(rng)
        client_first = f"n,,n={scram.escape_username(users.scram_user)},r={client_nonce}".encode()
        made_up_final = f"c=biws,r={client_nonce}{_nonce(rng)},p={_b64(rng.randbytes(64))}".encode()
        plain_wrong = f"\x00{users.scram_user}\x00{wrong_password(rng)}".encode()
        variant = rng.randrange(4)
        if variant == 0:
            parts = [handshake_request(1, ids(), scram_mechanism, may_succeed=True),
                     authenticate_request(auth_version, ids(), client_first, may_succeed=True),
                     authenticate_request(auth_version, ids(), made_up_final)]
        elif variant == 1:
            parts = [handshake_request(1, ids(), "PLAIN", may_succeed=True),
                     authenticate_request(auth_version, ids(), plain_wrong),
                     handshake_request(1, ids(), "PLAIN", may_succeed=False)]
        elif variant == 2:
            parts = [handshake_request(1, ids(), "PLAIN", may_succeed=True),
                     authenticate_request(auth_version, ids(), plain_wrong)]
        else:
            parts = [handshake_request(1, ids(), scram_mechanism, may_succeed=True),
                     authenticate_request(auth_version, ids(), client_first, may_succeed=True),
                     authenticate_request(auth_version, ids(), client_first)]
        if rng.random() < 0.5:
            parts.append(probe_request())  # must never be answered
        steps.append(tuple(parts))
    elif kind == "limit_token":
        mechanism = rng.choice(ENABLED)
        steps.append((handshake_request(1, ids(), mechanism, may_succeed=True),))
        over = rng.random() < 0.5
        size = SASL_MAX_RECEIVE_BYTES + (1 if over else 0)
        request = sized_authenticate_request(auth_version, ids(), size, rng.choice((b"A", b"\x00", b"\xff")))
        if over:
            # Over sasl.server.max.receive.size: refused at the size prefix, never answered.
            request = Request(request.api_key, request.version, request.correlation_id, request.frame,
                              allowed_errors=frozenset())
        steps.append((request,))
    elif kind == "before_auth":
        if rng.random() < 0.5:
            steps.append((handshake_request(1, ids(), rng.choice(ENABLED), may_succeed=True),))
        api_key = rng.choice(tuple(k for k in API_KEYS if k not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)))
        frame = valid_frame(rng, api_key)
        # Whatever the server does with it, it must not answer: a Raw part, then the probe.
        steps.append((Raw(frame),))
    elif kind == "oversized":
        limit = SASL_MAX_RECEIVE_BYTES
        claim = rng.choice((limit + 1, limit + 1024, 1 << 20, 2**31 - 1))
        steps.append((Raw(struct.pack(">i", claim) + rng.randbytes(rng.choice((0, 100, 4096, 65536)))),))
    elif kind == "mutated_sasl":
        api_key = rng.choice((SASL_HANDSHAKE, SASL_AUTHENTICATE))
        frame = valid_frame(rng, api_key)
        body = mutate(rng, frame[4:])
        steps.append((Raw(struct.pack(">i", len(body)) + body),))
    else:
        raise ValueError(kind)
    return tuple(steps)


def client_hello(server_hostname: str = "127.0.0.1") -> bytes:
    """A real TLS ClientHello (from Python's ssl over memory BIOs, no socket)."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _tls_steps(rng: random.Random, kind: str) -> tuple[str, tuple[tuple[Part, ...], ...]]:
    """(tls mode, steps) of a TLS-listener kind."""
    if kind == "tls_garbage":
        return "none", ((Raw(rng.randbytes(rng.randint(1, 2000))),),)
    if kind == "tls_truncated":
        hello = client_hello()
        return "none", ((Raw(hello[:rng.randint(1, len(hello) - 1)]),),)
    if kind == "tls_mutated_hello":
        return "none", ((Raw(mutate(rng, client_hello())),),)
    if kind == "tls_untrusted":
        return "untrusted", ()
    if kind == "tls_plaintext":
        ids = _Ids(rng)
        frames = [api_versions_request(ids()).frame]
        if rng.random() < 0.5:
            frames.append(handshake_request(1, ids(), "SCRAM-SHA-512", may_succeed=True).frame)
        return "none", ((Raw(b"".join(frames)),),)
    raise ValueError(kind)


def security_plan(rng: random.Random, index: int, users: Users, tls_share: float = 0.25) -> SecurityPlan:
    """The `index`-th hostile connection. Kinds cycle (SASL kinds, then TLS ones); a share
    of the SASL kinds that keep framing runs inside a trusted TLS session on SASL_SSL."""
    all_kinds = SASL_KINDS + TLS_KINDS
    kind = all_kinds[index % len(all_kinds)]
    if kind in TLS_KINDS:
        tls, steps = _tls_steps(rng, kind)
        return SecurityPlan(kind, "sasl_ssl", tls, steps, in_sync=False)
    steps = _sasl_steps(rng, kind, users)
    in_sync = kind in IN_SYNC_KINDS
    over_tls = kind in IN_SYNC_KINDS and rng.random() < tls_share
    return SecurityPlan(kind, "sasl_ssl" if over_tls else "sasl_plaintext", "trusted" if over_tls else "none",
                        steps, in_sync=in_sync)
