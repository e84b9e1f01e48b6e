"""BrokerHeartbeat (key 63, v0-1): liveness, catch-up, fencing and shutdown."""

from __future__ import annotations

from server.controller import commands


async def handle(ctx, request):
    node = ctx.node
    config = node.controller_config
    version = ctx.api_version
    result = await node.submit(
        lambda state, tracker, next_offset, now_ms: commands.broker_heartbeat(
            state, tracker, request, version, now_ms, config)
    )
    return result.response
