"""AllocateProducerIds (KIP-730): blocks of producer ids for the brokers' idempotent
and transactional producers.

Owns the command; the state keeps the last ProducerIdsRecord (ControllerState.
producer_ids). Kafka's rules (ProducerIdControlManager): only a registered broker at
its current epoch gets a block (STALE_BROKER_EPOCH otherwise, with Kafka's wording);
each block is PRODUCER_ID_BLOCK_SIZE ids starting where the last one ended, recorded
by one ProducerIdsRecord whose NextProducerId is the end of the new block, so no id is
handed out twice across failovers and restarts; the ids run out below 2^63.
"""

from __future__ import annotations

from typing import Any

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller.commands import ControllerResult
from server.controller.state import ControllerState

PRODUCER_ID_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = (1 << 63) - 1


def _refusal(code: int, message: str) -> ControllerResult:
    return ControllerResult([], {"throttle_time_ms": 0, "error_code": code, "producer_id_start": -1,
                                 "producer_id_len": 0}, error_message=message)


def allocate_producer_ids(state: ControllerState, request: Any) -> ControllerResult:
    broker_id = request.broker_id
    broker_epoch = request.broker_epoch
    registration = state.broker(broker_id)
    if registration is None:
        return _refusal(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
    if registration.epoch != broker_epoch:
        return _refusal(ErrorCode.STALE_BROKER_EPOCH,
                        f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}")
    start = state.producer_ids.next_producer_id
    if start > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        return _refusal(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds as the next block's end "
                                                         "producerId has exceeded the int64 type limit")
    return ControllerResult(
        [record(mr.PRODUCER_IDS_RECORD, {"broker_id": broker_id, "broker_epoch": broker_epoch,
                                         "next_producer_id": start + PRODUCER_ID_BLOCK_SIZE}, version=0)],
        {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id_start": start,
         "producer_id_len": PRODUCER_ID_BLOCK_SIZE},
    )
