"""UnregisterBroker (key 64, v0): remove a broker's registration."""

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
            lambda state, tracker, next_offset, now_ms: commands.unregister_broker(state, request, version, config)
        )
    except NotControllerError as exc:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER,
                "error_message": f"This node is not the active controller (leader: {exc.leader_id})."}
    return result.response
