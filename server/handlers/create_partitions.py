"""CreatePartitions (key 37, v0-3): raise topics' partition counts, with optional
explicit assignments and validate-only.

The pure command (server/controller/topics.py) checks each topic and places the new
replicas as CreateTopics does; the reply leaves once the quorum committed the
PartitionRecords (at once for validate-only and refusals). A standby answers
NOT_CONTROLLER for every topic; brokers forward the request (handlers/forwarded.py).
"""

from __future__ import annotations

from server.api.context import ControllerWrites
from server.controller import topics
from server.handlers.writes import submit_write
from server.security import item_checks


def error_response(request, code: int, message: str) -> dict:
    """Every topic of the request answered with `code` (used when nothing was decided)."""
    return {"throttle_time_ms": 0, "results": [
        {"name": t.name, "error_code": int(code), "error_message": message} for t in request.topics]}


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    version = ctx.api_version
    # topics the principal may not alter are answered here, the rest go on.
    authorized, refused = item_checks.create_partitions(ctx, request)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: topics.create_partitions(state, authorized, version),
        gated=not request.validate_only)
    if refused:
        return {**result.response, "results": refused + result.response["results"]}
    return result.response
