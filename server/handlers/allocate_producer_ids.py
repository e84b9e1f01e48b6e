"""AllocateProducerIds (key 67, v0): a broker asks for a block of producer ids
(server/controller/producer_ids.py)."""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller.producer_ids import allocate_producer_ids
from server.handlers.writes import submit_write


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    # An inter-node RPC: never held back by a migration's write-behind (gated=False).
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: allocate_producer_ids(state, request), gated=False)
    return result.response
