"""AddRaftVoter (key 80, v0-1, KIP-853): an operator adds a controller to the quorum's voters.

The Raft leader decides (server/raft/driver.py `add_voter`, the checks in Kafka's
order and words); any other controller answers NOT_LEADER_OR_FOLLOWER, as Kafka's
do. v1's AckWhenCommitted=false answers once the new voter set is appended.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import RaftEndpoint
from server.handlers.remove_raft_voter import directory_id_of, voter_change_response
from server.voters import Endpoint


async def handle(ctx, request):
    services: RaftEndpoint = ctx.services
    driver = services.raft_driver
    if driver is None:
        return voter_change_response(ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    endpoints = tuple(Endpoint(item.name, item.host, item.port) for item in request.listeners)
    error, message = await driver.add_voter(request.voter_id, directory_id_of(request.voter_directory_id), endpoints,
                                            ack_when_committed=ctx.api_version < 1 or request.ack_when_committed,
                                            cluster_id=request.cluster_id)
    return voter_change_response(error, message)
