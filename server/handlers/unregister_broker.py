"""UnregisterBroker (key 64, v0): remove a broker's registration."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller import commands
from server.handlers.writes import submit_write


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    # Removing a broker that is gone is never held back by a migration's write-behind.
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: commands.unregister_broker(
            state, request, version, config), gated=False)
    return result.response
