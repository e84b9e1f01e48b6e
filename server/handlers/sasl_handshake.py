"""SaslHandshake (key 17, v0-1): choose the SASL mechanism of a connection.

The decisions live in `server.security.sasl.ServerSaslSession.handshake`; this
handler applies them: log, close the connection when Kafka would (an unsupported
mechanism, a handshake in the middle of an exchange, v0), answer.

On a listener without SASL (`conn.sasl` is None) Kafka's KafkaApis answers
ILLEGAL_SASL_STATE with no mechanisms and keeps the connection; so does this.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.observability import Event, get_logger

log = get_logger("security")


def handle(ctx, request):
    conn = ctx.connection
    session = conn.sasl
    if session is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    outcome = session.handshake(ctx.api_version, request.mechanism or "")
    log.info(Event.SASL_HANDSHAKE, connection=conn.connection_id, peer=conn.peer, listener=conn.listener_name,
             mechanism=(request.mechanism or "")[:64], api_version=ctx.api_version,
             error=ErrorCode(outcome.error_code).name, reason=outcome.reason)
    if outcome.close:
        conn.close()
    return {"error_code": outcome.error_code, "mechanisms": list(outcome.mechanisms)}
