"""The server side of SASL on a SASL_PLAINTEXT / SASL_SSL listener (Kafka's KIP-43 / KIP-152 flow).

Owns: `SaslServerConfig` (what a listener enables, read from the node's config),
`SaslServerContext` (per node: those configs, parsed once per listener, and the
secret behind fake SCRAM credentials), `ServerSaslSession` (one per connection, a
sans-I/O state machine the SaslHandshake / SaslAuthenticate handlers drive) and
`new_sasl_session(node, listener_name)`, which the listener calls for every new
connection on a SASL listener and stores in `conn.sasl`.

Configuration (Kafka's keys; unknown to server/config.py, so read from
`ServerConfig.extra`):
- `listener.name.<listener lower>.sasl.enabled.mechanisms`, else
  `sasl.enabled.mechanisms`; kraftwerk's default when neither is set is
  `PLAIN,SCRAM-SHA-256,SCRAM-SHA-512`, every mechanism it implements (Kafka's
  default, GSSAPI, is not implemented). A name kraftwerk does not implement is a
  configuration error (ValueError), as is an empty list.
- `listener.name.<listener lower>.plain.sasl.jaas.config`, else `sasl.jaas.config`:
  a PlainLoginModule line whose `user_NAME="password"` options are PLAIN's static
  users. Any other login module there contributes no users.
- `connection.failed.authentication.delay.ms` (Kafka's, default 100): a failed
  SaslAuthenticate is answered only after this delay, then the connection closes,
  which slows down password guessing by clients that reconnect at once.

The flow, with Kafka's answers (SaslServerAuthenticator, KafkaApis):
- SaslHandshake v1 names a mechanism: enabled -> NONE and the enabled list, then
  SaslAuthenticate requests carry the mechanism's tokens; not enabled ->
  UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, and the connection closes.
- SaslHandshake v0 means raw SASL tokens without Kafka framing follow; kraftwerk
  serves only the v1 flow, so a v0 handshake is answered UNSUPPORTED_VERSION (35)
  with the enabled list and the connection closes (clients that read ApiVersions
  use v1).
- A second SaslHandshake during the exchange, or SaslAuthenticate before a
  handshake: ILLEGAL_SASL_STATE (34), connection closed.
- A failed exchange: SASL_AUTHENTICATION_FAILED (58), then the connection closes
  after the answer is written. The message is Kafka's generic one ("Authentication
  failed during authentication due to invalid credentials with SASL mechanism X"),
  except where Kafka itself sends a specific text (PLAIN's "Invalid username or
  password", an authzid that differs from the user).
- Once authenticated: SaslHandshake -> ILLEGAL_SASL_STATE with no mechanisms and
  SaslAuthenticate -> ILLEGAL_SASL_STATE ("SaslAuthenticate request received after
  successful authentication"), the connection stays open (Kafka's KafkaApis
  answers; the same on a listener without SASL). There is no re-authentication
  (KIP-368): SaslAuthenticate v1+ reports session_lifetime_ms 0.

Rules kept here:
- `ServerSaslSession` does no I/O and reads no node: credentials come through a
  lookup callable (`node.state.scram_credential`, the committed image, read at the
  moment of each exchange), outcomes are values the handlers act on.
- No password, salted password or key reaches a log field, repr or message.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping

from protocol.errors import ErrorCode
from server.security import scram
from server.security.jaas import JaasConfig, JaasError, parse_jaas_config
from server.security.model import KafkaPrincipal, ScramCredential, ScramMechanism
from server.security.plain import PlainError, PlainServerExchange

if TYPE_CHECKING:
    from server.config import ServerConfig

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ENABLED_MECHANISMS = SUPPORTED_MECHANISMS
ENABLED_MECHANISMS_KEY = "sasl.enabled.mechanisms"
JAAS_CONFIG_KEY = "sasl.jaas.config"
FAILED_AUTHENTICATION_DELAY_KEY = "connection.failed.authentication.delay.ms"
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
PLAIN_LOGIN_MODULE = "PlainLoginModule"
AUTHENTICATED_AGAIN_MESSAGE = "SaslAuthenticate request received after successful authentication"
FAKE_SECRET_BYTES = 32


def generic_failure_message(mechanism: str) -> str:
    """Kafka's text for a failed exchange; it tells nothing about why."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def listener_prefix(listener_name: str) -> str:
    """Kafka's per-listener config prefix: `listener.name.<name in lower case>.`"""
    return f"listener.name.{listener_name.lower()}."


def _parse_mechanisms(text: str, key: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError(f"{key} enables no SASL mechanism")
    unknown = [name for name in names if name not in SUPPORTED_MECHANISMS]
    if unknown:
        raise ValueError(f"{key}: kraftwerk does not implement {', '.join(unknown)} "
                         f"(it implements {', '.join(SUPPORTED_MECHANISMS)})")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """What one listener's SASL enables."""

    listener_name: str
    enabled_mechanisms: tuple[str, ...] = DEFAULT_ENABLED_MECHANISMS
    # The PlainLoginModule JAAS line, if configured (repr shows option names only).
    plain_jaas: JaasConfig | None = None
    # The keys the values came from, for operators (`None`: the default).
    mechanisms_source: str | None = None
    jaas_source: str | None = None
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS

    @property
    def plain_users(self) -> Mapping[str, str]:
        if self.plain_jaas is None or self.plain_jaas.module_short_name != PLAIN_LOGIN_MODULE:
            return MappingProxyType({})
        return MappingProxyType(self.plain_jaas.static_users())

    @staticmethod
    def from_server_config(config: "ServerConfig", listener_name: str) -> "SaslServerConfig":
        """Reads the keys above from `config.extra`; ValueError for a bad value."""
        extra = config.extra
        prefix = listener_prefix(listener_name)
        mechanisms = DEFAULT_ENABLED_MECHANISMS
        mechanisms_source = None
        for key in (prefix + ENABLED_MECHANISMS_KEY, ENABLED_MECHANISMS_KEY):
            if key in extra:
                mechanisms = _parse_mechanisms(extra[key], key)
                mechanisms_source = key
                break
        jaas = None
        jaas_source = None
        for key in (prefix + "plain." + JAAS_CONFIG_KEY, JAAS_CONFIG_KEY):
            if extra.get(key, "").strip():
                try:
                    jaas = parse_jaas_config(extra[key])
                except JaasError as exc:
                    raise ValueError(f"{key}: {exc}") from None
                jaas_source = key
                break
        delay_text = extra.get(FAILED_AUTHENTICATION_DELAY_KEY, str(DEFAULT_FAILED_AUTHENTICATION_DELAY_MS)).strip()
        if not delay_text.isdigit():
            raise ValueError(f"{FAILED_AUTHENTICATION_DELAY_KEY}={delay_text!r} must be a whole number of ms >= 0")
        return SaslServerConfig(listener_name, mechanisms, jaas, mechanisms_source, jaas_source, int(delay_text))


class SaslServerContext:
    """Per node (not per connection): each listener's `SaslServerConfig`, parsed once,
    and the random secret fake SCRAM credentials derive from, so an unknown user's
    salt is the same on every connection to this node."""

    def __init__(self, config: "ServerConfig", random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._config = config
        self._listeners: dict[str, SaslServerConfig] = {}
        self.fake_secret = random_bytes(FAKE_SECRET_BYTES)

    def listener_config(self, listener_name: str) -> SaslServerConfig:
        found = self._listeners.get(listener_name)
        if found is None:
            found = SaslServerConfig.from_server_config(self._config, listener_name)
            self._listeners[listener_name] = found
        return found


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake
    AUTHENTICATE = "authenticate"  # mechanism chosen, tokens flowing
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeOutcome:
    error_code: int
    mechanisms: tuple[str, ...]
    close: bool = False
    reason: str | None = None  # for the server's log


@dataclass(frozen=True, slots=True)
class AuthenticateOutcome:
    error_code: int
    error_message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False
    # True for the answer that completed the exchange.
    completed: bool = False
    # For the server's log only (may say "unknown user"; never a secret).
    reason: str | None = None
    session_lifetime_ms: int = 0


CredentialLookup = Callable[[str, ScramMechanism], "ScramCredential | None"]


class ServerSaslSession:
    """One connection's SASL exchange. `authenticated`, `mechanism` and `principal`
    are what the rest of the server reads."""

    def __init__(self, config: SaslServerConfig, lookup: CredentialLookup, fake_secret: bytes, *,
                 random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self.config = config
        self._lookup = lookup
        self._fake_secret = fake_secret
        self._random_bytes = random_bytes
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        # The user name the client claimed (for logs), once known.
        self.claimed_user: str | None = None
        # Set by the SaslAuthenticate handler while a token is being verified (PLAIN
        # may take a worker thread): a pipelined second token is refused.
        self.busy = False
        self._exchange: scram.ScramServerExchange | PlainServerExchange | None = None

    def __repr__(self) -> str:
        return (f"ServerSaslSession(listener={self.config.listener_name!r}, state={self.state.value}, "
                f"mechanism={self.mechanism!r}, principal={str(self.principal) if self.principal else None!r})")

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.COMPLETE

    def handshake(self, api_version: int, mechanism: str) -> HandshakeOutcome:
        enabled = self.config.enabled_mechanisms
        if self.state is SaslState.COMPLETE:
            # KafkaApis' answer on an authenticated connection; the connection stays.
            return HandshakeOutcome(ErrorCode.ILLEGAL_SASL_STATE, (), reason="already authenticated")
        if self.state is not SaslState.HANDSHAKE:
            self._fail()
            return HandshakeOutcome(ErrorCode.ILLEGAL_SASL_STATE, (), close=True,
                                    reason="SaslHandshake during the SASL exchange")
        if api_version < 1:
            self._fail()
            return HandshakeOutcome(ErrorCode.UNSUPPORTED_VERSION, enabled, close=True,
                                    reason="SaslHandshake v0 (raw SASL tokens) is not served")
        if mechanism not in enabled:
            self._fail()
            return HandshakeOutcome(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled, close=True,
                                    reason=f"mechanism {mechanism[:64]!r} is not enabled")
        self.mechanism = mechanism
        if mechanism == PLAIN:
            self._exchange = PlainServerExchange(self.config.plain_users, self._lookup, self._fake_secret)
        else:
            self._exchange = scram.ScramServerExchange(ScramMechanism.from_name(mechanism), self._lookup,
                                                       self._fake_secret, random_bytes=self._random_bytes)
        self.state = SaslState.AUTHENTICATE
        return HandshakeOutcome(ErrorCode.NONE, enabled)

    def authenticate(self, auth_bytes: bytes) -> AuthenticateOutcome:
        if self.state is SaslState.COMPLETE:
            return AuthenticateOutcome(ErrorCode.ILLEGAL_SASL_STATE, AUTHENTICATED_AGAIN_MESSAGE,
                                       reason="already authenticated")
        if self.state is not SaslState.AUTHENTICATE:
            before = self.state is SaslState.HANDSHAKE
            self._fail()
            message = ("Unexpected SaslAuthenticate request before SaslHandshake" if before
                       else "Unexpected SaslAuthenticate request after a failed SASL exchange")
            return AuthenticateOutcome(ErrorCode.ILLEGAL_SASL_STATE, message, close=True, reason=message)
        exchange = self._exchange
        if exchange is None or self.mechanism is None:  # failed between the check and here
            return AuthenticateOutcome(ErrorCode.ILLEGAL_SASL_STATE, "SASL exchange was aborted", close=True,
                                       reason="aborted by a concurrent SaslAuthenticate")
        try:
            response = exchange.receive(bytes(auth_bytes))
        except (scram.ScramError, PlainError) as exc:
            self.claimed_user = exchange.username
            self._fail()
            message = str(exc) if exc.client_visible else generic_failure_message(self.mechanism)
            return AuthenticateOutcome(ErrorCode.SASL_AUTHENTICATION_FAILED, message, close=True, reason=str(exc))
        self.claimed_user = exchange.username
        if self.state is not SaslState.AUTHENTICATE:
            # Failed meanwhile (a pipelined token was refused while this one was checked
            # in a worker thread): the connection is closing, nothing is authenticated.
            return AuthenticateOutcome(ErrorCode.ILLEGAL_SASL_STATE, "SASL exchange was aborted", close=True,
                                       reason="aborted by a concurrent SaslAuthenticate")
        if not exchange.complete:
            return AuthenticateOutcome(ErrorCode.NONE, None, response)
        assert exchange.username is not None
        self.principal = KafkaPrincipal("User", exchange.username)
        self.state = SaslState.COMPLETE
        self._exchange = None
        return AuthenticateOutcome(ErrorCode.NONE, None, response, completed=True)

    def refuse_concurrent(self) -> AuthenticateOutcome:
        """A SaslAuthenticate arrived while the previous one is still being verified."""
        self._fail()
        message = "Unexpected SaslAuthenticate request while the previous one is being processed"
        return AuthenticateOutcome(ErrorCode.ILLEGAL_SASL_STATE, message, close=True, reason=message)

    def _fail(self) -> None:
        self.state = SaslState.FAILED
        self._exchange = None


def server_context(node) -> SaslServerContext:
    """The node's `SaslServerContext`, created on first use and kept on the node.
    (Held as `node.sasl_server_context`; ServingNode may declare it explicitly.)"""
    context = getattr(node, "sasl_server_context", None)
    if context is None:
        context = SaslServerContext(node.config)
        node.sasl_server_context = context
    return context


def credential_lookup(node) -> CredentialLookup:
    """Reads the node's committed image at call time (so a credential altered a moment
    ago counts for the next exchange)."""

    def lookup(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        state = node.state
        if state is None:
            return None
        return state.scram_credential(user, int(mechanism))

    return lookup


def new_sasl_session(node, listener_name: str) -> ServerSaslSession:
    """A session for a new connection on `listener_name` (a SASL_* listener). Raises
    ValueError if the listener's SASL configuration is bad (validate at start-up with
    `SaslServerConfig.from_server_config`)."""
    context = server_context(node)
    return ServerSaslSession(context.listener_config(listener_name), credential_lookup(node), context.fake_secret)
