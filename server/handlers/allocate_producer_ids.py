"""AllocateProducerIds (key 67, v0): a broker asks for a block of producer ids
(server/controller/producer_ids.py)."""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.api.errors import ApiError
from server.controller.loop import NotControllerError
from server.controller.producer_ids import allocate_producer_ids
from server.handlers.writes import not_controller_message


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    try:
        result = await services.submit(
            lambda state, tracker, next_offset, now_ms: allocate_producer_ids(state, request))
    except NotControllerError as exc:
        raise ApiError(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id)) from None
    return result.response
