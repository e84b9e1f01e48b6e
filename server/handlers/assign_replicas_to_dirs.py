"""AssignReplicasToDirs (key 73, v0): a broker with several log directories reports
which directory holds each of its replicas (server/controller/directory_assignment.py)."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller.directory_assignment import assign_replicas_to_dirs
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: assign_replicas_to_dirs(state, request, config),
        gated=False)
    if result.error_message:
        log.info(Event.ASSIGN_REPLICAS_TO_DIRS_REFUSED, broker_id=request.broker_id,
                 error_code=result.response.get("error_code"), reasons=result.error_message)
    return result.response
