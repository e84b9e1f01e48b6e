"""What a handler receives with each request.

Owns: `RequestContext` (the request's identity: API, version, correlation id,
client, connection, principal) and the node services a handler may use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.security.model import KafkaPrincipal

if TYPE_CHECKING:
    from server.net.listener import Connection
    from server.nodes.controller import ControllerNode


class RequestContext:
    """What a handler may know about the request it is answering."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "connection", "node", "principal",
                 "client_host", "forwarded_by")

    def __init__(self, api_key, api_version, correlation_id, client_id, connection, node) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.connection: Connection = connection
        self.node: "ControllerNode" = node
        # Whom the request is authorized as: the connection's principal, or, for a
        # request a broker forwarded in an Envelope, the client's (issue 8).
        self.principal: KafkaPrincipal = connection.principal
        self.client_host: str = connection.host
        # The forwarding broker's principal when the request came in an Envelope.
        self.forwarded_by: KafkaPrincipal | None = None
