"""Controller APIs a broker forwards to the active controller (KIP-590 style).

Clients that bootstrap from a broker send UpdateFeatures and DescribeQuorum
to it (a broker names itself as the controller in Metadata). The broker
relays the request over its own connection to the active controller — at
the highest version both the client's request and the controller allow — and
answers with the controller's response. No controller within the bound:
REQUEST_TIMED_OUT, and the client retries.
"""

from __future__ import annotations

from protocol.errors import ErrorCode


async def handle(ctx, request):
    response = await ctx.node.forward_to_controller(ctx.api_key, ctx.api_version, request)
    if response is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.REQUEST_TIMED_OUT,
                "error_message": "no active controller answered the forwarded request in time"}
    return response
