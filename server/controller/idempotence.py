"""Forwarded writes applied at most once, however often a broker sends them.

A broker forwards a client's write in an Envelope; when the answer is lost (the active
controller died after committing, the connection dropped) the broker sends the same
Envelope again, to whichever controller leads then. Without help the retry runs again:
a topic that was created is answered TOPIC_ALREADY_EXISTS — an error for a change that
was applied. So:

- The broker names each client request with a random 16-byte *forward id*, carried in
  a tagged field of the EnvelopeRequest (tag FORWARD_ID_TAG; Kafka's controllers skip
  tags they do not know, so Kafka peers are unaffected).
- A write command run for such an Envelope appends, to the records it commits, one
  NoOpRecord whose tagged field (ANSWER_TAG) holds the forward id and the command's
  answer. Kafka's brokers and controllers replay a NoOpRecord as nothing and skip the
  unknown tag, so the log stays Kafka's format.
- Replaying that record remembers the answer (server/controller/answers.py,
  `ForwardedAnswers`: bounded, oldest forgotten first). A command for a forward id already remembered is not run again:
  its remembered answer is returned and nothing is written. Because the controller
  loop replays a command's records into its speculative state at once, a retry that
  arrives while the first attempt is still being committed finds it too.

Commands that write nothing (refusals, validate-only) are not remembered: running them
again changes nothing. Not in snapshots: a retry comes within seconds of its first
attempt; one that misses the window runs again, as in Kafka.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from server.controller.answers import answer_record
from server.controller.commands import ControllerResult
from server.controller.features import IBP_3_3_IV1

Command = Callable[..., ControllerResult]


def idempotent(command: Command, key: bytes, api_key: int, api_version: int) -> Command:
    """`command` run at most once for `key` (see the module docstring)."""

    def run(state, tracker, next_offset: int, now_ms: int) -> ControllerResult:
        remembered = state.forwarded_answer(key)
        if remembered is not None and (remembered.api_key, remembered.api_version) == (api_key, api_version):
            return ControllerResult([], remembered.response, error_message=remembered.error_message)
        result = command(state, tracker, next_offset, now_ms)
        level = state.metadata_version
        if not result.records or level is None or level < IBP_3_3_IV1:
            return result
        remember = answer_record(key, api_key, api_version, result.response, result.error_message)
        return replace(result, records=[*result.records, remember])

    return run


class IdempotentWrites:
    """The controller services a forwarded request's handler sees: the node's own, with
    every write made idempotent under the Envelope's forward id (the n-th write of the
    request gets write index n, so a handler that writes twice is remembered twice)."""

    def __init__(self, services: Any, forward_id: bytes, api_key: int, api_version: int) -> None:
        self._services = services
        self._forward_id = forward_id
        self._api = (api_key, api_version)
        self._writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._services, name)

    async def submit(self, command: Command, *, gated: bool = False) -> ControllerResult:
        key = self._forward_id + self._writes.to_bytes(2, "big")
        self._writes += 1
        return await self._services.submit(idempotent(command, key, *self._api), gated=gated)
