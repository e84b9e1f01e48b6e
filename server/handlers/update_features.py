"""UpdateFeatures (key 57, v0-2): finalize, upgrade, downgrade or delete features.

Validation and records come from the pure command; the reply leaves only
after the quorum committed the records (or at once for validate-only and
refusals). A standby answers NOT_CONTROLLER so clients go to the leader.
"""

from __future__ import annotations

from server.controller import commands
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")

# How long a feature change waits for the other controllers' ranges to become known.
QUORUM_FEATURES_WAIT_S = 2.0


async def handle(ctx, request):
    node = ctx.node
    config = node.controller_config
    version = ctx.api_version
    await node.learn_quorum_features(QUORUM_FEATURES_WAIT_S)
    result, refusal = await submit_write(
        node, lambda state, tracker, next_offset, now_ms: commands.update_features(
            state, request, version, config, node.quorum_supported_features()),
        lambda code, message: {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": []},
        gated=not request.validate_only)
    if refusal is not None:
        return refusal
    if result.error_message:
        log.info(Event.FEATURE_UPDATE_REJECTED, client_id=ctx.client_id, error=result.error_message,
                 updates={u.feature: u.max_version_level for u in request.feature_updates})
    return result.response
