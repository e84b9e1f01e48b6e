"""Envelope (key 58, v0): a request a broker forwards on behalf of a client.

The dispatcher has already authorized the Envelope itself as the forwarding broker
(CLUSTER_ACTION on CLUSTER, its catalog entry). Here the request inside is decoded and
served as if the client had sent it to this controller: the same version gate, the same
authorizer check — as the client's principal and address — and the same handler; a
handler's ApiError becomes the inner API's own error response. The inner response
(header and body, no size prefix) goes back in ResponseData.

Envelope-level errors (Kafka's): INVALID_REQUEST for an API brokers do not forward (the
API catalog, server/api/catalog.py, says which they do),
a version this controller's software does not serve, or an inner request that does not
decode; PRINCIPAL_DESERIALIZATION_FAILURE when the principal or address does not decode;
NOT_CONTROLLER when this node is not the active controller (any more): the broker sends
the Envelope again to the one the quorum names, as Kafka's brokers do.

kraftwerk's brokers add two tagged fields of their own (server/controller/answers.py):
a forward id in the request, under which the inner request's writes are applied at most
once however often the broker retries (server/controller/idempotence.py), and, in the
response, the offset of the last record this controller had replayed when it answered,
so the broker can hold the answer until its own image has the write.

A version the software serves but the finalized metadata.version gates away (KIP-778)
reaches here from a broker that has not replayed the change yet, on behalf of a client
that broker's ApiVersions offered it to: it is answered as the dispatcher answers a
direct client told that version earlier — UNSUPPORTED_VERSION in the inner API's own
response, so the client sees its API's error rather than an Envelope failure.
"""

from __future__ import annotations

from io import BytesIO

from protocol.errors import DecodeError, ErrorCode
from protocol.header import REQUEST_HEADER, encode_response_header, peek_api
from protocol.registry import api_name
from server.api.context import ControllerServices, RequestContext
from server.api.errors import ApiError
from server.controller.answers import COMMITTED_OFFSET_TAG, FORWARD_ID_BYTES, FORWARD_ID_TAG, encode_offset, \
    tagged, with_tag
from server.controller.idempotence import IdempotentWrites
from server.observability import Event, get_logger
from server.security.envelope import EnvelopeError, address_text, deserialize_principal

log = get_logger("net")

PRINCIPAL_DESERIALIZATION_FAILURE = 97


def _gated_message(name: str, version: int) -> str:
    # Not server/gating.py's wording (it names the level needed): gating reads the API
    # catalog, which imports this handler.
    return (f"{name} v{version} is not allowed at the cluster's finalized metadata.version (the forwarding "
            "broker had not applied the change yet); ask ApiVersions again and use a version it lists")


def _error(code: int) -> dict:
    return {"response_data": None, "error_code": code}


async def handle(ctx, request):
    services: ControllerServices = ctx.services
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
    api = services.served_apis.get(api_key)
    # Forwardable: brokers relay it to the active controller (its catalog entry).
    if api is None or not api.forwardable or not api.min_version <= version <= api.max_version:
        log.warning(Event.UNSUPPORTED_VERSION, connection=ctx.connection.connection_id, api=api_name(api_key),
                    api_version=version, forwarded_by=str(ctx.principal), reason="not forwardable here")
        return _error(ErrorCode.INVALID_REQUEST)
    allowed = services.advertised_ranges().get(api_key)
    gated = allowed is None or not allowed[0] <= version <= allowed[1]
    stream = BytesIO(frame)
    try:
        header = REQUEST_HEADER.decode(api.request_header_version(version), stream)
        inner = api.request.decode(version, stream)
    except DecodeError as exc:
        log.warning(Event.REQUEST_DECODE_FAILED, connection=ctx.connection.connection_id, api=api_name(api_key),
                    api_version=version, forwarded_by=str(ctx.principal), error=str(exc))
        return _error(ErrorCode.INVALID_REQUEST)
    forward_id = tagged(request, FORWARD_ID_TAG)
    if forward_id is not None and len(forward_id) != FORWARD_ID_BYTES:
        forward_id = None  # not one of ours: served as Kafka would, without the guarantee
    # Under a forward id the inner request's writes are applied at most once.
    inner_ctx = RequestContext(api_key, version, header.correlation_id, header.client_id, ctx.connection,
                               services if forward_id is None else
                               IdempotentWrites(services, forward_id, api_key, version))
    inner_ctx.principal = principal
    inner_ctx.client_host = client_host
    inner_ctx.forwarded_by = ctx.principal
    body = None
    if gated:
        # The broker's image is behind this controller's: it offered the client a version
        # the new metadata.version gates away.
        log.info(Event.GATED_VERSION, connection=ctx.connection.connection_id, api=api.name, api_version=version,
                 allowed="none" if allowed is None else f"{allowed[0]}-{allowed[1]}",
                 forwarded_by=str(ctx.principal), outcome="unsupported_version")
        body = api.error_response(inner, version, ErrorCode.UNSUPPORTED_VERSION, _gated_message(api.name, version))
    authorizer = services.authorizer
    if body is None and authorizer is not None:
        body = authorizer.check_request(inner_ctx, api, inner)
    if body is None:
        try:
            body = api.handler(inner_ctx, inner)
            if api.is_async:
                body = await body
        except ApiError as exc:
            if exc.code == ErrorCode.NOT_CONTROLLER:
                return _error(ErrorCode.NOT_CONTROLLER)
            # The inner API's own error shape, as the dispatcher would answer it directly.
            body = api.error_response(inner, version, exc.code, exc.message)
    out = BytesIO()
    out.write(encode_response_header(header.correlation_id, api.response_header_version(version)))
    api.response.encode_into(version, body, out)
    answer = {"response_data": out.getvalue(), "error_code": ErrorCode.NONE}
    image = services.image
    if forward_id is None or image is None:
        return answer
    return with_tag(answer, COMMITTED_OFFSET_TAG, encode_offset(image.last_applied_offset))
