"""The client side of Kafka's SASL flow, over a stream that is already open (TCP or TLS).

Owns: `authenticate(stream, mechanism, username, password)`: SaslHandshake v1, then
SaslAuthenticate requests carrying PLAIN's single message or SCRAM's client-first and
client-final (`server.security.scram.ScramClientExchange`), with increasing
correlation ids; the server's SCRAM signature is verified, so a server that does not
know the credential is not trusted. Any failure raises `SaslClientError`.

Used by kraftwerk's own clients (the CLI, peer connections, the broker agent) before
their first other request on a SASL_PLAINTEXT / SASL_SSL listener. ApiVersions is not
needed first (Kafka's servers accept SaslHandshake as the first request).

Rules kept here:
- Bounded: the whole exchange runs under `timeout_s`; at most three round trips;
  response frames are capped like any other client's.
- No password in an exception message, a repr or a log.
"""

from __future__ import annotations

import itertools

import trio

from protocol.errors import DecodeError, ErrorCode
from protocol.frames import decode_response, encode_request
from server.net.framing import FrameDecoder, FrameError
from server.security import scram
from server.security.model import ScramMechanism
from server.security.plain import plain_client_message

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
SASL_HANDSHAKE_VERSION = 1
RESPONSE_MAX_BYTES = 1024 * 1024
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """SASL authentication did not succeed (refused, failed, or the connection broke)."""


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class _Conversation:
    def __init__(self, stream: trio.abc.Stream, client_id: str, first_correlation_id: int) -> None:
        self._stream = stream
        self._client_id = client_id
        self._correlation = itertools.count(first_correlation_id)
        self._decoder = FrameDecoder(RESPONSE_MAX_BYTES)

    async def call(self, api_key: int, version: int, body: dict):
        correlation_id = next(self._correlation)
        await self._stream.send_all(encode_request(api_key, version, correlation_id, self._client_id, body))
        while True:
            payload = self._decoder.next_frame()
            if payload is not None:
                break
            data = await self._stream.receive_some(65536)
            if not data:
                raise SaslClientError("the server closed the connection during SASL authentication")
            self._decoder.receive_data(data)
        answered, response = decode_response(api_key, version, payload)
        if answered != correlation_id:
            raise SaslClientError("SASL response correlation id does not match the request")
        return response


async def authenticate(stream: trio.abc.Stream, mechanism: str, username: str, password: str, *,
                       client_id: str = "kraftwerk", timeout_s: float = 10.0,
                       authenticate_version: int = 2, first_correlation_id: int = 1) -> None:
    """Authenticates the connection on `stream` as `username`; returns when the server
    has accepted it, raises `SaslClientError` otherwise."""
    if mechanism not in MECHANISMS:
        raise SaslClientError(f"kraftwerk's client does not implement SASL mechanism {mechanism!r} "
                              f"(it implements {', '.join(MECHANISMS)})")
    if not 0 <= authenticate_version <= 2:
        raise SaslClientError(f"SaslAuthenticate v{authenticate_version} does not exist (0-2)")
    conversation = _Conversation(stream, client_id, first_correlation_id)

    async def send_token(token: bytes) -> bytes:
        response = await conversation.call(SASL_AUTHENTICATE_KEY, authenticate_version, {"auth_bytes": token})
        if response.error_code != ErrorCode.NONE:
            detail = f": {response.error_message}" if response.error_message else ""
            raise SaslClientError(f"SASL authentication as {username!r} with {mechanism} failed "
                                  f"({_error_name(response.error_code)}){detail}")
        return bytes(response.auth_bytes or b"")

    try:
        with trio.fail_after(timeout_s):
            handshake = await conversation.call(SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION, {"mechanism": mechanism})
            if handshake.error_code != ErrorCode.NONE:
                enabled = ", ".join(handshake.mechanisms or ()) or "none"
                raise SaslClientError(f"the server refused SASL mechanism {mechanism} "
                                      f"({_error_name(handshake.error_code)}; enabled: {enabled})")
            if mechanism == "PLAIN":
                await send_token(plain_client_message(username, password))
                return
            exchange = scram.ScramClientExchange(ScramMechanism.from_name(mechanism), username, password)
            server_first = await send_token(exchange.client_first())
            server_final = await send_token(exchange.receive_server_first(server_first))
            exchange.receive_server_final(server_final)
    except trio.TooSlowError:
        raise SaslClientError(f"SASL authentication did not finish within {timeout_s} s") from None
    except scram.ScramError as exc:
        raise SaslClientError(f"SCRAM exchange failed: {exc}") from None
    except (DecodeError, FrameError) as exc:
        raise SaslClientError(f"undecodable SASL response: {exc}") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise SaslClientError(f"connection lost during SASL authentication: {exc}") from None
