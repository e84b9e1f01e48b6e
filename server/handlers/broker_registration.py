"""BrokerRegistration (key 62, v0-4): a broker joins (fenced) and gets its epoch."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller import commands
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: commands.register_broker(
            state, tracker, request, version, now_ms, next_offset, config), gated=False)
    if result.error_message:
        log.warning(Event.BROKER_REGISTRATION_REJECTED, broker_id=request.broker_id,
                    error_code=result.response.get("error_code"), error=result.error_message)
    return result.response
