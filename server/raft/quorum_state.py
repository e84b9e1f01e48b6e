"""The persisted election state of one node: Kafka's `quorum-state` file.

Owns: `QuorumState` (epoch, leader id, voted id), the JSON layout of Kafka's
QuorumStateData (v0 field names, as `kafka-storage`/KafkaRaftClient write it:
clusterId, leaderId, leaderEpoch, votedId, appliedOffset, currentVoters,
data_version), the atomic file write, and an in-memory store for the simulator.

Rules kept here:
- A vote or a new epoch is acted on only after it is durable: `write_quorum_state`
  returns after the temporary file is fsynced, renamed over the old one and the
  directory is fsynced, so a crash leaves either the old or the new state, never
  a torn one.
- Epochs never go backwards: both stores refuse to persist a lower epoch, and
  within an epoch a vote, once cast, never changes to another candidate.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from protocol.raft_records import QUORUM_STATE_DATA
from server.storage.durable import write_file_atomically

QUORUM_STATE_FILE_NAME = "quorum-state"
# Version 0 of QuorumStateData (the static-voters layout).
QUORUM_STATE_DATA_VERSION = 0
NO_ID = -1


@dataclass(frozen=True, slots=True)
class QuorumState:
    epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch {self.epoch} is negative")


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be trusted."""


def check_transition(old: QuorumState, new: QuorumState) -> None:
    """The persisted-state rules every store applies before writing."""
    if new.epoch < old.epoch:
        raise QuorumStateError(f"quorum state epoch would go back from {old.epoch} to {new.epoch}")
    if new.epoch == old.epoch:
        if old.voted_id is not None and new.voted_id not in (None, old.voted_id):
            raise QuorumStateError(f"vote in epoch {new.epoch} would change from {old.voted_id} to {new.voted_id}")
        if old.leader_id is not None and new.leader_id not in (None, old.leader_id):
            raise QuorumStateError(
                f"leader of epoch {new.epoch} would change from {old.leader_id} to {new.leader_id}"
            )


def encode_quorum_state(state: QuorumState, cluster_id: str, voters: frozenset[int]) -> bytes:
    document = {
        # Kafka's JSON converter writes the fields of QuorumStateData in camelCase.
        "clusterId": cluster_id,
        "leaderId": NO_ID if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": NO_ID if state.voted_id is None else state.voted_id,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": voter} for voter in sorted(voters)],
        "data_version": QUORUM_STATE_DATA_VERSION,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode_quorum_state(data: bytes) -> QuorumState:
    try:
        document = json.loads(data)
        epoch = int(document["leaderEpoch"])
        leader_id = int(document.get("leaderId", NO_ID))
        voted_id = int(document.get("votedId", NO_ID))
        version = int(document.get("data_version", QUORUM_STATE_DATA_VERSION))
    except (ValueError, KeyError, TypeError) as exc:
        raise QuorumStateError(f"unreadable quorum-state: {exc!r}") from None
    if version not in QUORUM_STATE_DATA.versions:
        raise QuorumStateError(f"quorum-state data_version {version} is not one we know")
    return QuorumState(
        epoch=epoch,
        leader_id=None if leader_id == NO_ID else leader_id,
        voted_id=None if voted_id == NO_ID else voted_id,
    )


def read_quorum_state(directory: str | os.PathLike[str]) -> QuorumState:
    """The stored state, or the initial one (epoch 0) if no file exists yet."""
    path = os.path.join(os.fspath(directory), QUORUM_STATE_FILE_NAME)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return QuorumState()
    return decode_quorum_state(data)


def write_quorum_state(
    directory: str | os.PathLike[str], state: QuorumState, cluster_id: str, voters: frozenset[int]
) -> None:
    """Writes atomically and durably: tmp file, fsync, rename, fsync the directory."""
    directory = os.fspath(directory)
    path = os.path.join(directory, QUORUM_STATE_FILE_NAME)
    write_file_atomically(path, encode_quorum_state(state, cluster_id, voters))

class FileQuorumStateStore:
    """The durable store a trio driver uses (call `write` from a worker thread)."""

    def __init__(self, directory: str | os.PathLike[str], cluster_id: str, voters: frozenset[int]) -> None:
        self._directory = os.fspath(directory)
        self._cluster_id = cluster_id
        self._voters = voters
        self._current = read_quorum_state(self._directory)

    def read(self) -> QuorumState:
        return self._current

    def write(self, state: QuorumState) -> None:
        check_transition(self._current, state)
        write_quorum_state(self._directory, state, self._cluster_id, self._voters)
        self._current = state


@dataclass
class MemoryQuorumStateStore:
    """The simulator's store: every write is durable at once; keeps history for invariant checks."""

    current: QuorumState = field(default_factory=QuorumState)
    writes: int = 0

    def read(self) -> QuorumState:
        return self.current

    def write(self, state: QuorumState) -> None:
        check_transition(self.current, state)
        self.current = state
        self.writes += 1
