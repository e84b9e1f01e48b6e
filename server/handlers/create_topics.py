"""CreateTopics (key 19, v0-7): create topics with their partitions and configs.

The pure command (server/controller/topics.py) validates each topic and places its
replicas; the reply leaves once the quorum committed the records (at once for
validate-only and refusals). A standby answers NOT_CONTROLLER for every topic, so
admin clients go to the leader; brokers forward the request (handlers/forwarded.py).
NumPartitions / ReplicationFactor -1 take the controller's `num.partitions` and
`default.replication.factor` (Kafka's names and defaults, 1 and 1).
"""

from __future__ import annotations

import uuid

from server.api.context import ControllerServices
from server.controller import topics
from server.handlers.writes import submit_write
from server.observability import Event, get_logger
from server.security import item_checks

log = get_logger("controller")


def topic_defaults(extra: dict[str, str]) -> topics.TopicDefaults:
    """TopicDefaults from the server properties kraftwerk does not model itself."""
    def positive(key: str, fallback: int) -> int:
        try:
            value = int(extra.get(key, fallback))
        except ValueError:
            return fallback
        return value if value > 0 else fallback
    return topics.TopicDefaults(num_partitions=positive("num.partitions", 1),
                                replication_factor=positive("default.replication.factor", 1))


def error_response(request, code: int, message: str) -> dict:
    """Every topic of the request answered with `code` (used when nothing was decided)."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "error_code": int(code), "error_message": message, "num_partitions": -1,
         "replication_factor": -1, "configs": []} for t in request.topics]}


async def handle(ctx, request):
    services: ControllerServices = ctx.services
    version = ctx.api_version
    defaults = topic_defaults(services.config.extra)
    # topics the principal may not create are answered here, the rest go on.
    authorized, refused = item_checks.create_topics(ctx, request)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: topics.create_topics(
            state, authorized, version, uuid.uuid4, defaults),
        gated=not request.validate_only)
    failed = {t["name"]: t["error_code"] for t in result.response["topics"] if t["error_code"]}
    log.info(Event.TOPICS_CREATED, client_id=ctx.client_id,
             created=[t["name"] for t in result.response["topics"] if not t["error_code"]],
             failed=failed, validate_only=bool(request.validate_only))
    if refused:
        return {**result.response, "topics": refused + result.response["topics"]}
    return result.response
