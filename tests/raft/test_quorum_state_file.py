"""The quorum-state file: a file that cannot be valid is refused, named and explained."""

from __future__ import annotations

import json

import pytest

from server.raft.quorum_state import (
    QUORUM_STATE_FILE_NAME,
    FileQuorumStateStore,
    QuorumState,
    QuorumStateError,
    read_quorum_state,
    write_quorum_state,
)
from server.raft.validate import MAX_EPOCH

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
VOTERS = frozenset({1, 2, 3})


def document(**changes) -> dict:
    base = {"clusterId": CLUSTER, "leaderId": 2, "leaderEpoch": 7, "votedId": 2, "appliedOffset": 0,
            "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    base.update(changes)
    return base


def write_raw(directory, data) -> None:
    (directory / QUORUM_STATE_FILE_NAME).write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())


def test_a_valid_file_is_read_and_checked(tmp_path):
    write_quorum_state(tmp_path, QuorumState(epoch=MAX_EPOCH, leader_id=3, voted_id=1), CLUSTER, VOTERS)
    assert FileQuorumStateStore(tmp_path, CLUSTER, VOTERS).read() == QuorumState(MAX_EPOCH, 3, 1)
    # Kafka's own files may leave clusterId empty; none at all is fine too.
    write_raw(tmp_path, document(clusterId=""))
    assert FileQuorumStateStore(tmp_path, CLUSTER, VOTERS).read() == QuorumState(7, 2, 2)
    write_raw(tmp_path, {"leaderEpoch": 0})
    assert FileQuorumStateStore(tmp_path, CLUSTER, VOTERS).read() == QuorumState()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (document(leaderEpoch=MAX_EPOCH + 1), f"leaderEpoch {MAX_EPOCH + 1} is outside \\[0, {MAX_EPOCH}\\]"),
        (document(leaderEpoch=-1), "leaderEpoch -1 is outside"),
        (document(leaderEpoch=2**63), "is outside"),
        (document(leaderId=9), "leaderId 9 is not one of the configured voters \\(1, 2, 3\\)"),
        (document(votedId=4), "votedId 4 is not one of the configured voters"),
        (document(leaderId=-2), "leaderId -2 is negative"),
        (document(clusterId="AAAAAAAAAAAAAAAAAAAAAA"), "belongs to cluster AAAAAAAAAAAAAAAAAAAAAA"),
        (document(leaderEpoch="7"), "leaderEpoch is '7', not an integer"),
        (document(leaderEpoch=True), "leaderEpoch is True, not an integer"),
        (document(leaderEpoch=7.5), "not an integer"),
        (document(data_version=9), "data_version 9 is not one we know"),
        ({"leaderId": 1}, "leaderEpoch is missing"),
        ([1, 2], "not a JSON object"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_a_file_that_cannot_be_valid_is_refused_with_its_name(tmp_path, data, reason):
    write_raw(tmp_path, data)
    with pytest.raises(QuorumStateError, match=reason) as excinfo:
        FileQuorumStateStore(tmp_path, CLUSTER, VOTERS)
    message = str(excinfo.value)
    assert str(tmp_path / QUORUM_STATE_FILE_NAME) in message
    assert "move the file aside" in message


def test_without_a_configuration_only_the_file_itself_is_checked(tmp_path):
    write_raw(tmp_path, document(leaderId=9, clusterId="other"))
    assert read_quorum_state(tmp_path) == QuorumState(7, 9, 2)
    write_raw(tmp_path, document(leaderEpoch=MAX_EPOCH + 1))
    with pytest.raises(QuorumStateError, match="outside"):
        read_quorum_state(tmp_path)
