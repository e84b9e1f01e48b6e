"""RemoveRaftVoter (key 81, v0, KIP-853): an operator removes a controller from the voters.

The Raft leader decides (server/raft/driver.py `remove_voter`); the answer comes once
the smaller voter set commits, and a leader that removed itself then resigns.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.primitives import ZERO_UUID
from server.api.context import RaftEndpoint


def voter_change_response(error: ErrorCode, message: str | None) -> dict:
    # Kafka leaves the message null on success.
    return {"throttle_time_ms": 0, "error_code": int(error), "error_message": message if error else None}


def directory_id_of(value):
    """The request's directory id; the zero uuid is none."""
    return None if value is None or value == ZERO_UUID else value


async def handle(ctx, request):
    services: RaftEndpoint = ctx.services
    driver = services.raft_driver
    if driver is None:
        return voter_change_response(ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    error, message = await driver.remove_voter(request.voter_id, directory_id_of(request.voter_directory_id),
                                               cluster_id=request.cluster_id)
    return voter_change_response(error, message)
