"""SaslAuthenticate (key 36, v0-2): one SASL token in, one out.

The exchange lives in `server.security.sasl.ServerSaslSession.authenticate`; this
handler applies its outcome: on success the connection's principal becomes
`User:<name>` (so every later request is authorized as that user), on failure the
answer is written and the connection closed (Kafka's behaviour), and both are
logged with principal / mechanism / peer, never a password.

Async on purpose: PLAIN checked against a SCRAM credential runs PBKDF2 (up to 16384
iterations of SHA-512, tens of milliseconds), which must not stall the node's event
loop, so a PLAIN token is verified in a worker thread (hashlib releases the GIL).
SCRAM steps cost a few HMACs and run inline. A second SaslAuthenticate pipelined
while one is being verified is a protocol violation: ILLEGAL_SASL_STATE, closed.
A failed authentication is answered after `connection.failed.authentication.delay.ms`
(Kafka's, default 100 ms), then the connection closes.

On a listener without SASL Kafka's KafkaApis answers ILLEGAL_SASL_STATE ("SaslAuthenticate
request received after successful authentication") and keeps the connection; so does this.
"""

from __future__ import annotations

import trio

from protocol.errors import ErrorCode
from server.observability import Event, get_logger
from server.security.sasl import AUTHENTICATED_AGAIN_MESSAGE, PLAIN, SaslState

log = get_logger("security")


async def handle(ctx, request):
    conn = ctx.connection
    session = conn.sasl
    if session is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": AUTHENTICATED_AGAIN_MESSAGE,
                "auth_bytes": b"", "session_lifetime_ms": 0}
    token = bytes(request.auth_bytes or b"")
    if session.busy:
        outcome = session.refuse_concurrent()
    else:
        session.busy = True
        try:
            if session.mechanism == PLAIN and session.state is SaslState.AUTHENTICATE:
                outcome = await trio.to_thread.run_sync(session.authenticate, token)
            else:
                outcome = session.authenticate(token)
        finally:
            session.busy = False
    if outcome.completed:
        conn.principal = session.principal
        log.info(Event.SASL_AUTHENTICATED, connection=conn.connection_id, peer=conn.peer,
                 listener=conn.listener_name, mechanism=session.mechanism, principal=str(session.principal))
    elif outcome.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
        log.warning(Event.SASL_AUTHENTICATION_FAILED, connection=conn.connection_id, peer=conn.peer,
                    listener=conn.listener_name, mechanism=session.mechanism, user=session.claimed_user,
                    reason=outcome.reason)
        delay_ms = session.config.failed_authentication_delay_ms
        if delay_ms > 0:
            # Kafka's connection.failed.authentication.delay.ms: answer (and close) late.
            await trio.sleep(delay_ms / 1000)
    elif outcome.error_code != ErrorCode.NONE:
        log.warning(Event.SASL_AUTHENTICATION_FAILED, connection=conn.connection_id, peer=conn.peer,
                    listener=conn.listener_name, mechanism=session.mechanism,
                    error=ErrorCode(outcome.error_code).name, reason=outcome.reason)
    if outcome.close:
        conn.close()
    return {"error_code": outcome.error_code, "error_message": outcome.error_message,
            "auth_bytes": outcome.auth_bytes, "session_lifetime_ms": outcome.session_lifetime_ms}
