"""Opening an outbound connection the way a `ClientSecurity` says: TCP, then TLS, then SASL.

Owns: `open_client_stream`, used by `KafkaClient.connect` (tools, CLI) and by
`PeerConnection` (a node's connections to the controllers).

Rules kept here:
- One deadline (`timeout_s`) covers TCP connect, the TLS handshake and the SASL
  exchange; on any failure the partly opened stream is closed before the error
  propagates.
- TLS sends SNI and checks the server's host name unless
  `ssl.endpoint.identification.algorithm` is empty; the CA check always applies.
- SASL is `server.net.sasl_client.authenticate`, run only for SASL protocols.
"""

from __future__ import annotations

import ssl

import trio

from server.net.sasl_client import SaslClientError, authenticate
from server.security.client_config import ClientSecurity


class ConnectError(OSError):
    """The connection could not be opened (TCP, TLS or SASL); the message says which."""


async def open_client_stream(host: str, port: int, security: ClientSecurity | None, *, timeout_s: float,
                             client_id: str = "kraftwerk", ssl_context: ssl.SSLContext | None = None
                             ) -> trio.abc.Stream:
    """A connected stream to host:port, with TLS and SASL done as `security` says.
    `ssl_context` reuses a context built once (PeerConnection reconnects often)."""
    with trio.fail_after(timeout_s):
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if security is None or security.security_protocol == "PLAINTEXT":
            return stream
        try:
            if security.uses_tls:
                context = ssl_context or security.ssl_context()
                # SNI is for names; Python's ssl checks an IP address against the
                # certificate's IP SANs when it is given as server_hostname.
                tls = trio.SSLStream(stream, context, server_hostname=host)
                try:
                    await tls.do_handshake()
                except trio.BrokenResourceError as exc:
                    cause = exc.__cause__ or exc
                    raise ConnectError(f"TLS handshake with {host}:{port} failed: {cause}") from None
                stream = tls
            if security.uses_sasl:
                try:
                    await authenticate(stream, security.sasl_mechanism, security.sasl_username,
                                       security.sasl_password, client_id=client_id, timeout_s=timeout_s)
                except SaslClientError as exc:
                    # Its messages name the user and mechanism, never the password.
                    raise ConnectError(f"SASL authentication with {host}:{port} failed: {exc}") from None
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            raise
        return stream
