"""ControllerRegistration (key 70, v0): a controller registers itself with the active
controller (KIP-919; server/controller/controller_registration.py). The sender is
server/nodes/controller_registration.py."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller.controller_registration import register_controller
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    # A standby answers NOT_CONTROLLER (submit_write), as Kafka's do: the sender asks
    # the leader the quorum names next.
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: register_controller(state, request), gated=False)
    if result.error_message:
        log.info(Event.CONTROLLER_REGISTRATION_REFUSED, controller_id=request.controller_id,
                 error_code=result.response.get("error_code"), reason=result.error_message)
    else:
        log.info(Event.CONTROLLER_REGISTERED, controller_id=request.controller_id,
                 incarnation_id=str(request.incarnation_id),
                 listeners=[f"{item.name}://{item.host}:{item.port}" for item in request.listeners])
    return result.response
