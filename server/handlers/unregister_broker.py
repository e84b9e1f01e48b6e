"""UnregisterBroker (key 64, v0): remove a broker's registration."""

from __future__ import annotations

from server.controller import commands


async def handle(ctx, request):
    node = ctx.node
    config = node.controller_config
    version = ctx.api_version
    result = await node.submit(
        lambda state, tracker, next_offset, now_ms: commands.unregister_broker(state, request, version, config)
    )
    return result.response
