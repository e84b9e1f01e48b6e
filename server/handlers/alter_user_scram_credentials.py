"""AlterUserScramCredentials (key 51, v0, KIP-554): upsert and delete SCRAM credentials.

Validation and records come from the pure command (server/controller/scram_commands.py);
the reply leaves only after the quorum committed the records. A standby answers
NOT_CONTROLLER for every user so clients go to the leader; brokers forward the request
(handlers/forwarded.py). Logged with user names and mechanisms only.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ControllerWrites
from server.controller import scram_commands
from server.handlers.writes import submit_write
from server.observability import Event, get_logger

log = get_logger("controller")


def _users(request) -> list[str]:
    # A dict keeps the first-seen order and finds a name in O(1): requests name thousands.
    names: dict[str, None] = {}
    for kind in (request.deletions or (), request.upsertions or ()):
        for entry in kind:
            names.setdefault(entry.name, None)
    return list(names)


def error_response(request, code: int, message: str) -> dict:
    return {"throttle_time_ms": 0, "results": [
        {"user": name, "error_code": int(code), "error_message": message} for name in _users(request)]}


async def handle(ctx, request):
    services: ControllerWrites = ctx.services
    result = await submit_write(services, lambda state, tracker, next_offset, now_ms: (
        scram_commands.alter_user_scram_credentials(state, request)))
    response = result.response
    log.info(Event.SCRAM_CREDENTIALS_ALTERED, client_id=ctx.client_id, principal=str(ctx.principal),
             altered=scram_commands.altered_summary(request, response),
             failed={r["user"]: ErrorCode(r["error_code"]).name for r in response["results"] if r["error_code"]})
    return response
