"""Inbound KRaft RPCs: Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54),
Fetch (1) and FetchSnapshot (59), handed to the node's `RaftDriver`.

Owns: which node a request comes from (the core needs the sender's id) and
the dispatcher-facing handler. The answer itself is the core's, given by the
driver once the state it depends on is durable.

Rules kept here:
- The sender is read from the request body, as Kafka does: the candidate
  (Vote), the leader (Begin/EndQuorumEpoch), the replica (Fetch's
  ReplicaState, or ReplicaId before v15; FetchSnapshot's ReplicaId).
- Never raises for a live driver: a driver that is not running, or does not
  answer within its bound, gives a top-level error the requester retries.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.raft import messages as m
from server.raft.driver import error_response
from server.raft.messages import ApiKey, Body


def sender_of(api_key: int, body: Body) -> int:
    """The id of the node that sent a KRaft request (-1 if the body names none)."""
    if api_key == ApiKey.FETCH:
        return m.fetch_replica_id(body)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return int(body.get("replica_id", -1))
    topics = body.get("topics") or []
    partitions = topics[0].get("partitions") or [] if topics else []
    if not partitions:
        return -1
    partition = partitions[0]
    if api_key == ApiKey.VOTE:
        return int(partition.get("candidate_id", -1))
    return int(partition.get("leader_id", -1))


def offer(ctx, request, answer) -> None:
    """Dispatcher handler (answers later) for keys 1, 52, 53, 54, 59: hands the request
    to `ctx.services.raft_driver`, which calls `answer(body)` once it has the answer."""
    api_key = ctx.api_key
    driver = getattr(ctx.services, "raft_driver", None)
    if driver is None or not driver.running:
        answer(error_response(api_key, ErrorCode.BROKER_NOT_AVAILABLE))
        return
    driver.offer_request(sender_of(api_key, request), api_key, request, answer)
