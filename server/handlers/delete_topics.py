"""DeleteTopics (key 20, v0-6): remove topics (RemoveTopicRecord), by name or topic id.

Answered after the quorum committed the records. A standby answers NOT_CONTROLLER for
every topic; brokers forward the request (handlers/forwarded.py).
"""

from __future__ import annotations

import uuid

from server.api.context import ControllerWrites
from server.controller import topics
from server.handlers.writes import submit_write
from server.observability import Event, get_logger
from server.security import item_checks

log = get_logger("controller")
_NO_ID = uuid.UUID(int=0)


def error_response(request, version: int, code: int, message: str) -> dict:
    if version >= 6:
        entries = [(t.name, t.topic_id) for t in request.topics]
    else:
        entries = [(name, _NO_ID) for name in request.topic_names]
    return {"throttle_time_ms": 0, "responses": [
        {"name": name if version >= 6 else (name or ""), "topic_id": topic_id, "error_code": int(code),
         "error_message": message} for name, topic_id in entries]}


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    version = ctx.api_version
    # topics the principal may not delete are answered here, the rest go on.
    authorized, refused = item_checks.delete_topics(ctx, request, version)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: topics.delete_topics(state, authorized, version))
    log.info(Event.TOPICS_DELETED, client_id=ctx.client_id,
             deleted=[r["name"] for r in result.response["responses"] if not r["error_code"]],
             failed={str(r["name"] or r["topic_id"]): r["error_code"]
                     for r in result.response["responses"] if r["error_code"]})
    if refused:
        return {**result.response, "responses": refused + result.response["responses"]}
    return result.response
