"""DeleteAcls (key 31, v1-3): remove the ACLs each filter matches.

The pure command (server/controller/acl_commands.py) writes a
RemoveAccessControlEntryRecord per matched ACL; the reply leaves once the quorum
committed them. Without an authorizer: SECURITY_DISABLED, as Kafka. A standby answers
NOT_CONTROLLER for every filter; brokers forward the request (handlers/forwarded.py).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerServices
from server.api.errors import ApiError
from server.controller import acl_commands
from server.handlers.create_acls import SECURITY_DISABLED_MESSAGE
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("security")


def error_response(request, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": int(code), "error_message": message, "matching_acls": []} for _ in request.filters]}


async def handle(ctx, request):
    services: ControllerServices = ctx.services
    if services.authorizer is None:
        raise ApiError(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: acl_commands.delete_acls(state, request, next_offset))
    log.info(Event.ACLS_DELETED, principal=str(ctx.principal), client_id=ctx.client_id,
             deleted=len(result.records),
             failed=[r["error_message"] for r in result.response["filter_results"] if r["error_code"]])
    return result.response
