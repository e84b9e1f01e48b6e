"""CreateAcls (key 30, v1-3): new ACLs as AccessControlEntryRecords.

The pure command (server/controller/acl_commands.py) validates each creation; the reply
leaves once the quorum committed the records. Without an authorizer the request is
answered with SECURITY_DISABLED, as Kafka does. A standby answers NOT_CONTROLLER for
every creation, so admin clients go to the leader; brokers forward the request
(handlers/forwarded.py). ALTER on CLUSTER is checked before (server/security/api_rules.py).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerServices
from server.api.errors import ApiError
from server.controller import acl_commands
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("security")

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured."


def error_response(request, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "results": [
        {"error_code": int(code), "error_message": message} for _ in request.creations]}


async def handle(ctx, request):
    services: ControllerServices = ctx.services
    if services.authorizer is None:
        raise ApiError(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: acl_commands.create_acls(state, request, next_offset))
    results = result.response["results"]
    log.info(Event.ACLS_CREATED, principal=str(ctx.principal), client_id=ctx.client_id,
             created=len(result.records), requested=len(results),
             failed=[r["error_message"] for r in results if r["error_code"]])
    return result.response
