"""AlterPartition (key 56, v2-3): a partition leader proposes a new ISR
(server/controller/partitions.py)."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller.alter_partition import alter_partition
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: alter_partition(
            state, request, version, config), gated=False)
    if result.error_message:
        log.info(Event.ALTER_PARTITION_REFUSED, broker_id=request.broker_id,
                 error_code=result.response.get("error_code"), reasons=result.error_message)
    return result.response
