"""BrokerHeartbeat (key 63, v0-2): liveness, catch-up, fencing and shutdown."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller import commands
from server.handlers.writes import submit_write


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: commands.broker_heartbeat(
            state, tracker, request, version, now_ms, config, next_offset=next_offset), gated=False)
    return result.response
