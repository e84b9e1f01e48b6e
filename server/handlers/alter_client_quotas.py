"""AlterClientQuotas (key 49, v0-1): client quotas set and removed as ClientQuotaRecords.

The pure command (server/controller/quotas.py) validates each entry as Kafka's controller
does; the reply leaves once the quorum committed the records (validate-only: at once,
nothing written). A standby answers NOT_CONTROLLER for every entry so clients go to the
leader; brokers forward the request (handlers/forwarded.py). ALTER_CONFIGS on CLUSTER is
checked before (the catalog entry's rule).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.controller import quotas
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


def error_response(request, code: int, message: str | None) -> dict:
    return quotas.alter_error_response(request, code, message)


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    result = await submit_write(services, lambda state, tracker, next_offset, now_ms: (
        quotas.alter_client_quotas(state, request)))
    entries = result.response["entries"]
    log.info(Event.CLIENT_QUOTAS_ALTERED, client_id=ctx.client_id, principal=str(ctx.principal),
             validate_only=bool(request.validate_only), records=len(result.records), entities=len(entries),
             failed=[ErrorCode(e["error_code"]).name for e in entries if e["error_code"]])
    return result.response
