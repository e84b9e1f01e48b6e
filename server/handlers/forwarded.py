"""Controller APIs a broker forwards to the active controller (KIP-590 style).

Clients that bootstrap from a broker send it the controller APIs (a broker names
itself as the controller in Metadata); the APIs whose broker handler is this one in the
API catalog (server/api/catalog.py) are relayed over the broker's own connection to the
active controller — at the highest version both the client's request and the controller
allow — and answered with the controller's response. The request travels in an
Envelope (key 58) naming the client's principal and address, so the controller
authorizes it as the client, not as the broker. No controller within the bound:
REQUEST_TIMED_OUT (an ApiError, which the dispatcher answers in the API's own error
shape: in every per-topic or per-resource entry where the response has no top-level
error), and the client retries.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerForwarding
from server.api.errors import ApiError

TIMED_OUT_MESSAGE = "no active controller answered the forwarded request in time"


async def handle(ctx, request):
    services: ControllerForwarding = ctx.services
    response = await services.forward_to_controller(ctx.api_key, ctx.api_version, request, ctx=ctx)
    if response is None:
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT, TIMED_OUT_MESSAGE)
    return response
