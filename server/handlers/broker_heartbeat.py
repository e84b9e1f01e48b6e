"""BrokerHeartbeat (key 63, v0-1): liveness, catch-up, fencing and shutdown."""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.api.errors import ApiError
from server.controller import commands
from server.controller.loop import NotControllerError
from server.handlers.writes import not_controller_message


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    try:
        result = await services.submit(
            lambda state, tracker, next_offset, now_ms: commands.broker_heartbeat(
                state, tracker, request, version, now_ms, config)
        )
    except NotControllerError as exc:
        raise ApiError(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id)) from None
    return result.response
