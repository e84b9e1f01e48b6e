"""UpdateRaftVoter (key 82, v0, KIP-853): a voter tells the Raft leader where it is reached
now and which kraft.version levels it supports (its listener moved, its software changed).

The leader decides (server/raft/driver.py `update_voter`); the answer carries no message,
only the code and, in a tagged field, the leader as this listener reaches it.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import RaftEndpoint
from server.handlers.remove_raft_voter import directory_id_of
from server.voters import Endpoint


async def handle(ctx, request):
    services: RaftEndpoint = ctx.services
    driver = services.raft_driver
    if driver is None:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)}
    feature = request.kraft_version_feature
    error = await driver.update_voter(
        request.voter_id, directory_id_of(request.voter_directory_id),
        tuple(Endpoint(item.name, item.host, item.port) for item in request.listeners),
        (feature.min_supported_version, feature.max_supported_version), request.current_leader_epoch,
        cluster_id=request.cluster_id)
    leader = driver.leader_endpoint() if driver.is_leader else None
    current = {"leader_id": driver.leader_id if driver.leader_id is not None else -1, "leader_epoch": driver.epoch}
    if leader is not None:
        current.update(host=leader.host, port=leader.port)
    return {"throttle_time_ms": 0, "error_code": int(error), "current_leader": current}
