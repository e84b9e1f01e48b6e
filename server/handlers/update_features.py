"""UpdateFeatures (key 57, v0-2): finalize, upgrade, downgrade or delete features.

Validation and records come from the pure command; the reply leaves only
after the quorum committed the records (or at once for validate-only and
refusals). A standby answers NOT_CONTROLLER so clients go to the leader.
"""

from __future__ import annotations

from dataclasses import replace

from server.api.context import ControllerWrites
from server.controller import commands
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")

# How long a feature change waits for the other controllers' ranges to become known.
QUORUM_FEATURES_WAIT_S = 2.0


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    config = services.controller_config
    version = ctx.api_version
    await services.learn_quorum_features(QUORUM_FEATURES_WAIT_S)
    result = await submit_write(
        services, lambda state, tracker, next_offset, now_ms: commands.update_features(
            state, request, version, config, services.quorum_supported_features(), services.kraft_version()),
        gated=not request.validate_only)
    response = result.response
    if result.kraft_version_upgrade is not None:
        # kraft.version is the Raft layer's (KIP-853): the voters go into the log now.
        error, message = await services.upgrade_kraft_version(result.kraft_version_upgrade,
                                                              bool(request.validate_only) if version >= 1 else False)
        if error:
            response = commands.update_features_refusal(version, error, message)
            result = replace(result, error_message=response["error_message"])
    if result.error_message:
        log.info(Event.FEATURE_UPDATE_REJECTED, client_id=ctx.client_id, error=result.error_message,
                 updates={u.feature: u.max_version_level for u in request.feature_updates})
    return response
