"""AlterConfigs (key 33, v0-2): the legacy API that replaces a topic's or a broker's
whole set of dynamic configs (IncrementalAlterConfigs changes single keys).

Answered after the quorum committed the ConfigRecords (keys given are set, keys not
given are removed). A standby answers NOT_CONTROLLER for every resource; brokers
forward the request (handlers/forwarded.py).
"""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller import topics
from server.handlers.writes import submit_write
from server.observability import Event, get_logger
from server.security import item_checks

log = get_logger("controller")


def error_response(request, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "responses": [
        {"error_code": int(code), "error_message": message, "resource_type": r.resource_type,
         "resource_name": r.resource_name} for r in request.resources]}


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    version = ctx.api_version
    # resources the principal may not alter are answered here, the rest go on.
    authorized, refused = item_checks.config_resources(ctx, request, alter=True, api="AlterConfigs")
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: topics.alter_configs(state, authorized, version),
        gated=not request.validate_only)
    log.info(Event.CONFIGS_ALTERED, client_id=ctx.client_id, records=len(result.records), replace=True,
             failed={f"{r['resource_type']}:{r['resource_name']}": r["error_code"]
                     for r in result.response["responses"] if r["error_code"]})
    if refused:
        return {**result.response, "responses": refused + result.response["responses"]}
    return result.response
