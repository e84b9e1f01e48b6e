"""Writes a client sends a standby controller go to the active one.

Clients bootstrapped from the controllers send writes to whichever controller they
picked (most send the configs, ACL, quota and SCRAM writes to any node; only the
controller APIs to the one Metadata names). Kafka's standby controllers refuse them
with NOT_CONTROLLER; a kraftwerk standby relays them to the active controller in an
Envelope, as a broker does (server/nodes/forwarding.py: same forward id, same
read-your-writes wait), so every client works through every controller. A request that
came in an Envelope is not relayed again (the broker that sent it retries on
NOT_CONTROLLER); nor while this node leads but is not active yet, or no other node is
known to lead: the write is then refused NOT_CONTROLLER, which clients retry.
"""

from __future__ import annotations

from typing import Any, Callable

from server.api.context import ControllerServices


def forwarded_when_standby(handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` (an async one) on the active controller; elsewhere a relay to it."""

    async def handle(ctx, request):
        services: ControllerServices = ctx.services
        leader = services.active_controller_id()
        if ctx.forwarded_by is None and leader not in (-1, services.node_id) and not services.is_active_controller():
            response = await services.forward_to_controller(ctx.api_key, ctx.api_version, request, ctx=ctx)
            if response is not None:
                return response
        return await handler(ctx, request)

    handle.__wrapped__ = handler
    return handle
