"""UpdateMetadata (key 6, v8): the controller of the moment tells a ZooKeeper-mode
broker who it is, which brokers are live and the partitions' states.

Served by the ZooKeeper-mode broker agent only (server/zkbroker/). The rules (stale
controller epoch -> STALE_CONTROLLER_EPOCH, stale broker epoch -> STALE_BROKER_EPOCH,
live brokers replaced, partition states upserted) live in the sans-I/O cache
(server/zkbroker/cache.py); this handler applies and logs.
"""

from __future__ import annotations

from server.api.context import ZkBrokerServices
from server.observability import get_logger

log = get_logger("zkbroker")

EVENT_APPLIED = "zkbroker.update_metadata"
EVENT_REFUSED = "zkbroker.update_metadata_refused"


def handle(ctx, request):
    services: ZkBrokerServices = ctx.services
    outcome = services.apply_update_metadata(request)
    if outcome.error_code:
        log.warning(EVENT_REFUSED, broker_id=services.node_id, controller_id=request.controller_id,
                    controller_epoch=request.controller_epoch, broker_epoch=request.broker_epoch,
                    error_code=int(outcome.error_code), reason=outcome.reason)
    else:
        cache = services.metadata_cache
        log.info(EVENT_APPLIED, broker_id=services.node_id, controller_id=cache.controller_id,
                 controller_epoch=cache.controller_epoch, is_kraft_controller=cache.is_kraft_controller,
                 update_type=int(request.type), live_brokers=sorted(cache.live_brokers),
                 topics=len(cache.topics), partitions=cache.partition_count())
    return {"error_code": int(outcome.error_code)}
