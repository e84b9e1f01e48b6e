"""UpdateFeatures (key 57, v0-2): finalize, upgrade, downgrade or delete features.

Validation and records come from the pure command; the reply leaves only
after the quorum committed the records (or at once for validate-only and
refusals). A standby answers NOT_CONTROLLER so clients go to the leader.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.controller import commands
from server.controller.loop import NotControllerError, WritesBlockedError
from server.observability import Event, get_logger

log = get_logger("controller")

# How long a feature change waits for the other controllers' ranges to become known.
QUORUM_FEATURES_WAIT_S = 2.0


async def handle(ctx, request):
    node = ctx.node
    config = node.controller_config
    version = ctx.api_version
    await node.learn_quorum_features(QUORUM_FEATURES_WAIT_S)
    try:
        result = await node.submit(
            lambda state, tracker, next_offset, now_ms: commands.update_features(
                state, request, version, config, node.quorum_supported_features()),
            gated=not request.validate_only,
        )
    except WritesBlockedError as exc:
        # KIP-866: ZooKeeper is too far behind; REQUEST_TIMED_OUT is retriable for every client.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(exc),
                "results": []}
    except NotControllerError as exc:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER,
                "error_message": f"This node is not the active controller (leader: {exc.leader_id}).",
                "results": []}
    if result.error_message:
        log.info(Event.FEATURE_UPDATE_REJECTED, client_id=ctx.client_id, error=result.error_message,
                 updates={u.feature: u.max_version_level for u in request.feature_updates})
    return result.response
