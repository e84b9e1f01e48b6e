"""The KRaft RPC bodies the core sends and reads, as plain dicts with our snake_case field names.

Owns: building request/response bodies for Vote (52), BeginQuorumEpoch (53),
EndQuorumEpoch (54), Fetch (1) and FetchSnapshot (59) in the shape of
protocol/apis/<api>.py (so the trio transport only encodes/decodes them), the
wire versions used between our own nodes, and the single-partition accessors.

Rules kept here:
- Bodies carry every field the chosen version needs; the codec fills the rest
  with defaults. They work on dicts and on decoded construct Containers alike.
- A leader names each voter a random token in its BeginQuorumEpoch (sent to the
  voter's configured address); the voter's Fetch and FetchSnapshot requests carry it
  back, and the leader's EndQuorumEpoch carries it again (only the real leader can
  hurry its followers into an election). Both travel as the tagged field VOTER_TOKEN_TAG, which other Kafka
  implementations ignore. A voter's fetch position counts toward the high watermark
  only with its token, so whoever can reach a PLAINTEXT controller listener cannot
  speak for a voter's copy of the log.
- Only `__cluster_metadata` partition 0 exists; Fetch v13+ names it by the
  fixed metadata topic id (Kafka's Uuid.METADATA_TOPIC_ID, 0x...01).
- Pre-vote (KIP-996) is VoteRequest v2's `PreVote`; our declarations stop at
  v1, so between kraftwerk nodes the flag travels as the tagged field
  PRE_VOTE_TAG (kraftwerk's private range) of a v1 request. A node that does not
  know the tag reads a pre-vote as a real vote for the same candidate in the
  epoch the candidate would campaign for next, which is safe: that is the vote
  the candidate asks for once it wins the pre-vote.
"""

from __future__ import annotations

import uuid
from enum import IntEnum
from typing import Any

from protocol.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)
ZERO_UUID = uuid.UUID(int=0)


class ApiKey(IntEnum):
    FETCH = 1
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    FETCH_SNAPSHOT = 59


# The tagged field of a VoteRequest v1 that marks it a pre-vote (value b"\x01").
PRE_VOTE_TAG = 10000

# The tagged field (8 bytes, big-endian) of BeginQuorumEpoch, Fetch and FetchSnapshot
# requests that carries a leader's token for one voter.
VOTER_TOKEN_TAG = 10001

# One version of each API between our own nodes.
WIRE_VERSIONS = {
    ApiKey.FETCH: 17,
    ApiKey.VOTE: 1,
    ApiKey.BEGIN_QUORUM_EPOCH: 1,
    ApiKey.END_QUORUM_EPOCH: 1,
    ApiKey.FETCH_SNAPSHOT: 1,
}

Body = dict[str, Any]


def leader_fields(leader_id: int | None, epoch: int) -> Body:
    return {"leader_id": -1 if leader_id is None else leader_id, "leader_epoch": epoch}


# -- Vote ---------------------------------------------------------------------

def vote_request(cluster_id: str, voter_id: int, candidate_epoch: int, candidate_id: int,
                 last_offset_epoch: int, last_offset: int, pre_vote: bool,
                 voter_directory_id: uuid.UUID | None = None, candidate_directory_id: uuid.UUID | None = None) -> Body:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter_id,
        "pre_vote": pre_vote,
        "_unknown_tagged_fields": [(PRE_VOTE_TAG, b"\x01")] if pre_vote else [],
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": METADATA_PARTITION,
            "candidate_epoch": candidate_epoch,
            "candidate_id": candidate_id,
            "last_offset_epoch": last_offset_epoch,
            "last_offset": last_offset,
            "candidate_directory_id": candidate_directory_id or ZERO_UUID,
            "voter_directory_id": voter_directory_id or ZERO_UUID,
        }]}],
    }


def is_pre_vote(body: Body) -> bool:
    """A Vote request that only asks whether the voter would vote (KIP-996)."""
    if body.get("pre_vote"):
        return True
    return any(tag == PRE_VOTE_TAG and value == b"\x01" for tag, value in body.get("_unknown_tagged_fields") or ())


def vote_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE, leader_id: int | None = None,
                  epoch: int = -1, granted: bool = False) -> Body:
    partitions = [] if error else [{
        "partition_index": METADATA_PARTITION, "error_code": int(partition_error),
        **leader_fields(leader_id, epoch), "vote_granted": granted,
    }]
    return {"error_code": int(error), "topics": [{"topic_name": METADATA_TOPIC, "partitions": partitions}]
            if partitions else []}


# -- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------

def _token_field(token: int | None) -> list[tuple[int, bytes]]:
    return [] if token is None else [(VOTER_TOKEN_TAG, token.to_bytes(8, "big"))]


def voter_token(body: Body) -> int | None:
    """The voter token a request carries, if any."""
    for tag, value in body.get("_unknown_tagged_fields") or ():
        if tag == VOTER_TOKEN_TAG and len(value) == 8:
            return int.from_bytes(value, "big")
    return None


def begin_quorum_epoch_request(cluster_id: str, voter_id: int, leader_id: int, epoch: int,
                               token: int | None = None, voter_directory_id: uuid.UUID | None = None) -> Body:
    return {
        "cluster_id": cluster_id,
        "voter_id": voter_id,
        "_unknown_tagged_fields": _token_field(token),
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": METADATA_PARTITION, "leader_id": leader_id, "leader_epoch": epoch,
            "voter_directory_id": voter_directory_id or ZERO_UUID,
        }]}],
    }


def addressed_directory_id(partition: Body) -> uuid.UUID | None:
    """The directory id a Vote or BeginQuorumEpoch is addressed to (None: any)."""
    value = partition.get("voter_directory_id")
    return None if value is None or value == ZERO_UUID else value


def end_quorum_epoch_request(cluster_id: str, leader_id: int, epoch: int, preferred: list[int],
                             token: int | None = None) -> Body:
    return {
        "cluster_id": cluster_id,
        "_unknown_tagged_fields": _token_field(token),
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": METADATA_PARTITION, "leader_id": leader_id, "leader_epoch": epoch,
            "preferred_successors": list(preferred),
            "preferred_candidates": [{"candidate_id": node} for node in preferred],
        }]}],
    }


def epoch_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE,
                   leader_id: int | None = None, epoch: int = -1) -> Body:
    """The shape BeginQuorumEpoch and EndQuorumEpoch responses share."""
    partitions = [] if error else [{
        "partition_index": METADATA_PARTITION, "error_code": int(partition_error), **leader_fields(leader_id, epoch),
    }]
    return {"error_code": int(error), "topics": [{"topic_name": METADATA_TOPIC, "partitions": partitions}]
            if partitions else []}


# -- Fetch --------------------------------------------------------------------

def fetch_request(cluster_id: str, replica_id: int, leader_epoch: int, fetch_offset: int,
                  last_fetched_epoch: int, max_wait_ms: int, max_bytes: int, token: int | None = None,
                  directory_id: uuid.UUID | None = None) -> Body:
    return {
        "cluster_id": cluster_id,
        "_unknown_tagged_fields": _token_field(token),
        "replica_id": replica_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait_ms": max_wait_ms,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "topics": [{"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [{
            "partition": METADATA_PARTITION,
            "current_leader_epoch": leader_epoch,
            "fetch_offset": fetch_offset,
            "last_fetched_epoch": last_fetched_epoch,
            "log_start_offset": -1,
            "partition_max_bytes": max_bytes,
            "replica_directory_id": directory_id or ZERO_UUID,
        }]}],
    }


def fetch_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE, *,
                   leader_id: int | None = None, epoch: int = -1, high_watermark: int = -1,
                   log_start_offset: int = -1, records: object = None,
                   diverging: tuple[int, int] | None = None, snapshot_id: tuple[int, int] | None = None) -> Body:
    if error:
        return {"error_code": int(error), "session_id": 0, "responses": []}
    partition: Body = {
        "partition_index": METADATA_PARTITION,
        "error_code": int(partition_error),
        "high_watermark": high_watermark,
        "log_start_offset": log_start_offset,
        # Absent tagged structs are sent at their defaults (-1), which is how
        # Kafka's readers test for "not set".
        "diverging_epoch": {"epoch": diverging[0] if diverging else -1,
                            "end_offset": diverging[1] if diverging else -1},
        "current_leader": leader_fields(leader_id, epoch),
        "snapshot_id": {"end_offset": snapshot_id[0] if snapshot_id else -1,
                        "epoch": snapshot_id[1] if snapshot_id else -1},
        "records": records,
    }
    return {"error_code": 0, "session_id": 0, "responses": [
        {"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [partition]}]}


def fetch_partition(body: Body) -> Body | None:
    """The one partition of a Fetch request or response, or None if the body names anything else."""
    topics = body.get("topics") if "topics" in body else body.get("responses")
    if not topics or len(topics) != 1:
        return None
    topic = topics[0]
    if topic.get("topic_id") != METADATA_TOPIC_ID and topic.get("topic") != METADATA_TOPIC:
        return None
    partitions = topic["partitions"]
    if len(partitions) != 1:
        return None
    partition = partitions[0]
    index = partition.get("partition", partition.get("partition_index"))
    return partition if index == METADATA_PARTITION else None


def fetch_replica_id(body: Body) -> int:
    """The replica a Fetch request comes from: ReplicaState.ReplicaId, or ReplicaId before v15 (-1: none)."""
    state = body.get("replica_state") or {}
    replica = state.get("replica_id", -1)
    if replica is None or replica < 0:
        replica = body.get("replica_id", -1)
    return -1 if replica is None else int(replica)


def fetch_directory_id(partition: Body) -> uuid.UUID | None:
    """The fetching replica's directory id (Fetch v17+), None when it sent none."""
    value = partition.get("replica_directory_id")
    return None if value is None or value == ZERO_UUID else value


# -- FetchSnapshot --------------------------------------------------------------

def fetch_snapshot_request(cluster_id: str, replica_id: int, leader_epoch: int,
                           snapshot_id: tuple[int, int], position: int, max_bytes: int,
                           token: int | None = None) -> Body:
    return {
        "cluster_id": cluster_id,
        "_unknown_tagged_fields": _token_field(token),
        "replica_id": replica_id,
        "max_bytes": max_bytes,
        "topics": [{"name": METADATA_TOPIC, "partitions": [{
            "partition": METADATA_PARTITION,
            "current_leader_epoch": leader_epoch,
            "snapshot_id": {"end_offset": snapshot_id[0], "epoch": snapshot_id[1]},
            "position": position,
        }]}],
    }


def fetch_snapshot_response(error: ErrorCode, partition_error: ErrorCode = ErrorCode.NONE, *,
                            leader_id: int | None = None, epoch: int = -1,
                            snapshot_id: tuple[int, int] = (-1, -1), size: int = 0, position: int = 0,
                            data: bytes = b"") -> Body:
    if error:
        return {"error_code": int(error), "topics": []}
    return {"error_code": 0, "topics": [{"name": METADATA_TOPIC, "partitions": [{
        "index": METADATA_PARTITION,
        "error_code": int(partition_error),
        "snapshot_id": {"end_offset": snapshot_id[0], "epoch": snapshot_id[1]},
        "current_leader": leader_fields(leader_id, epoch),
        "size": size,
        "position": position,
        "unaligned_records": data,
    }]}]}


def single_partition(body: Body, topic_key: str = "topic_name") -> Body | None:
    """The one partition of a Vote/BeginQuorumEpoch/EndQuorumEpoch/FetchSnapshot body, if it is ours."""
    topics = body.get("topics")
    if not topics or len(topics) != 1 or topics[0].get(topic_key) != METADATA_TOPIC:
        return None
    partitions = topics[0]["partitions"]
    if len(partitions) != 1:
        return None
    partition = partitions[0]
    index = partition.get("partition_index", partition.get("partition", partition.get("index")))
    return partition if index == METADATA_PARTITION else None


def error_response(api_key: int, error) -> Body:
    """A top-level error answer for any KRaft RPC (the requester backs off and retries)."""
    if api_key == ApiKey.FETCH:
        return fetch_response(error)
    if api_key == ApiKey.VOTE:
        return vote_response(error)
    if api_key == ApiKey.FETCH_SNAPSHOT:
        return fetch_snapshot_response(error)
    return epoch_response(error)
