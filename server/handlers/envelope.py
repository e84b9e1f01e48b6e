"""Envelope (key 58, v0): a request a broker forwards on behalf of a client.

The dispatcher has already authorized the Envelope itself as the forwarding broker
(CLUSTER_ACTION on CLUSTER, server/security/api_rules.py). Here the request inside is
decoded and served as if the client had sent it to this controller: the same version
gate, the same authorizer check — as the client's principal and address — and the
same handler. The inner response (header and body, no size prefix) goes back in
ResponseData.

Envelope-level errors (Kafka's): INVALID_REQUEST for an API a broker may not forward,
a version this controller does not serve, or an inner request that does not decode;
PRINCIPAL_DESERIALIZATION_FAILURE when the principal or address does not decode.
"""

from __future__ import annotations

from io import BytesIO

from protocol.errors import DecodeError, ErrorCode
from protocol.header import REQUEST_HEADER, encode_response_header, peek_api
from protocol.registry import api_name
from server.observability import Event, get_logger
from server.security.envelope import (
    FORWARDABLE_APIS,
    EnvelopeError,
    address_text,
    deserialize_principal,
)

log = get_logger("net")

PRINCIPAL_DESERIALIZATION_FAILURE = 97


def _error(code: int) -> dict:
    return {"throttle_time_ms": 0, "response_data": None, "error_code": code}


async def handle(ctx, request):
    from server.api.context import RequestContext

    node = ctx.node
    try:
        principal = deserialize_principal(request.request_principal)
        client_host = address_text(request.client_host_address)
    except EnvelopeError as exc:
        log.warning(Event.REQUEST_DECODE_FAILED, connection=ctx.connection.connection_id, api="Envelope",
                    forwarded_by=str(ctx.principal), error=str(exc))
        return _error(PRINCIPAL_DESERIALIZATION_FAILURE)
    frame = bytes(request.request_data)
    try:
        api_key, version = peek_api(frame)
    except DecodeError:
        return _error(ErrorCode.INVALID_REQUEST)
    api = node.served_apis.get(api_key)
    allowed = node.advertised_ranges().get(api_key)
    if (api_key not in FORWARDABLE_APIS or api is None or allowed is None
            or not allowed[0] <= version <= allowed[1] or not api.min_version <= version <= api.max_version):
        log.warning(Event.UNSUPPORTED_VERSION, connection=ctx.connection.connection_id, api=api_name(api_key),
                    api_version=version, forwarded_by=str(ctx.principal), reason="not forwardable here")
        return _error(ErrorCode.INVALID_REQUEST)
    stream = BytesIO(frame)
    try:
        header = REQUEST_HEADER.decode(api.request_header_version(version), stream)
        inner = api.request.decode(version, stream)
    except DecodeError as exc:
        log.warning(Event.REQUEST_DECODE_FAILED, connection=ctx.connection.connection_id, api=api_name(api_key),
                    api_version=version, forwarded_by=str(ctx.principal), error=str(exc))
        return _error(ErrorCode.INVALID_REQUEST)
    inner_ctx = RequestContext(api_key, version, header.correlation_id, header.client_id, ctx.connection, node)
    inner_ctx.principal = principal
    inner_ctx.client_host = client_host
    inner_ctx.forwarded_by = ctx.principal
    body = None
    authorizer = node.authorizer
    if authorizer is not None:
        body = authorizer.check_request(inner_ctx, api_key, inner)
    if body is None:
        body = api.handler(inner_ctx, inner)
        if api.is_async:
            body = await body
    out = BytesIO()
    out.write(encode_response_header(header.correlation_id, api.response_header_version(version)))
    api.response.encode_into(version, body, out)
    return {"throttle_time_ms": 0, "response_data": out.getvalue(), "error_code": ErrorCode.NONE}
