"""Controller APIs a broker forwards to the active controller (KIP-590 style).

Clients that bootstrap from a broker send UpdateFeatures, DescribeQuorum, CreateTopics,
DeleteTopics and IncrementalAlterConfigs to it (a broker names itself as the controller
in Metadata). The broker relays the request over its own connection to the active
controller — at the highest version both the client's request and the controller
allow — and answers with the controller's response. The request travels in an
Envelope (key 58) naming the client's principal and address, so the controller
authorizes it as the client, not as the broker (issue 8). No controller within the bound:
REQUEST_TIMED_OUT, and the client retries; APIs that report errors per topic or per
resource get it in every entry, since their responses have no top-level error.
"""

from __future__ import annotations

from protocol.errors import ErrorCode

TIMED_OUT_MESSAGE = "no active controller answered the forwarded request in time"


def timed_out_response(api_key: int, version: int, request) -> dict:
    return error_response(api_key, version, request, ErrorCode.REQUEST_TIMED_OUT, TIMED_OUT_MESSAGE)


def error_response(api_key: int, version: int, request, code: int, message: str) -> dict:
    """The forwarded API's own response carrying `code` everywhere it reports errors."""
    if api_key == 19:
        from server.handlers.create_topics import error_response
        return error_response(request, code, message)
    if api_key == 20:
        from server.handlers.delete_topics import error_response
        return error_response(request, version, code, message)
    if api_key == 44:
        from server.handlers.incremental_alter_configs import error_response
        return error_response(request, code, message)
    if api_key == 30:
        from server.handlers.create_acls import error_response
        return error_response(request, code, message)
    if api_key == 31:
        from server.handlers.delete_acls import error_response
        return error_response(request, code, message)
    if api_key == 51:
        from server.handlers.alter_user_scram_credentials import error_response
        return error_response(request, code, message)
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message}


async def handle(ctx, request):
    response = await ctx.node.forward_to_controller(ctx.api_key, ctx.api_version, request, ctx=ctx)
    if response is None:
        return timed_out_response(ctx.api_key, ctx.api_version, request)
    return response
