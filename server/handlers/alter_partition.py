"""AlterPartition (key 56, v2-3): a partition leader proposes a new ISR
(server/controller/partitions.py)."""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.api.errors import ApiError
from server.controller.loop import NotControllerError
from server.controller.alter_partition import alter_partition
from server.handlers.writes import not_controller_message
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    try:
        result = await services.submit(
            lambda state, tracker, next_offset, now_ms: alter_partition(state, request, version, config))
    except NotControllerError as exc:
        raise ApiError(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id)) from None
    if result.error_message:
        log.info(Event.ALTER_PARTITION_REFUSED, broker_id=request.broker_id,
                 error_code=result.response.get("error_code"), reasons=result.error_message)
    return result.response
