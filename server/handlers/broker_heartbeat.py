"""BrokerHeartbeat (key 63, v0-1): liveness, catch-up, fencing and shutdown."""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.controller import commands
from server.controller.loop import NotControllerError


async def handle(ctx, request):
    node = ctx.node
    config = node.controller_config
    version = ctx.api_version
    try:
        result = await node.submit(
            lambda state, tracker, next_offset, now_ms: commands.broker_heartbeat(
                state, tracker, request, version, now_ms, config)
        )
    except NotControllerError:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "is_caught_up": False,
                "is_fenced": True, "should_shut_down": False}
    return result.response
