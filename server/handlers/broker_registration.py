"""BrokerRegistration (key 62, v0-4): a broker joins (fenced) and gets its epoch."""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.api.errors import ApiError
from server.controller import commands
from server.controller.loop import NotControllerError
from server.handlers.writes import not_controller_message
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    try:
        result = await services.submit(
            lambda state, tracker, next_offset, now_ms: commands.register_broker(
                state, tracker, request, version, now_ms, next_offset, config)
        )
    except NotControllerError as exc:
        raise ApiError(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id)) from None
    if result.error_message:
        log.warning(Event.BROKER_REGISTRATION_REJECTED, broker_id=request.broker_id,
                    error_code=result.response.get("error_code"), error=result.error_message)
    return result.response
