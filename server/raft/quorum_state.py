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
- A file that cannot be valid is refused when read, naming the file, what is
  wrong and the way out (`QuorumStateError`): unparseable, an epoch outside
  [0, MAX_EPOCH], a leader or voted id outside the configured voters, another
  cluster's id. Start-up turns that into a clean refusal (exit 1), never a
  traceback; guessing a state instead could let a node vote twice in an epoch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from protocol.raft_records import QUORUM_STATE_DATA
from server.raft.validate import MAX_EPOCH
from server.storage.durable import write_file_atomically
from server.values import LeaderEpoch, NodeId

QUORUM_STATE_FILE_NAME = "quorum-state"
# Version 0 of QuorumStateData (the static-voters layout).
QUORUM_STATE_DATA_VERSION = 0
NO_ID = -1


@dataclass(frozen=True, slots=True)
class QuorumState:
    epoch: LeaderEpoch = 0
    leader_id: NodeId | None = None
    voted_id: NodeId | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch {self.epoch} is negative")


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be trusted."""


# The way out of a damaged file, for the operator.
QUORUM_STATE_HINT = (
    "stop the node, move the file aside and start the node again: it rejoins the quorum at its current "
    "epoch (it forgets any vote it cast in that epoch, so do this on one voter at a time)"
)


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


def encode_quorum_state(state: QuorumState, cluster_id: str, voters: frozenset[NodeId]) -> bytes:
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


def _integer(document: dict, key: str, default: int | None = None) -> int:
    value = document.get(key, default)
    # JSON true/false are ints to Python; a float or a string is no id or epoch either.
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise QuorumStateError(f"{key} is {value!r}, not an integer")
    return value


def _decode(data: bytes) -> tuple[QuorumState, str]:
    """The state and the file's clusterId ("" if absent); QuorumStateError if
    the bytes cannot be a valid file on their own."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise QuorumStateError(f"not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise QuorumStateError(f"not a JSON object but {type(document).__name__}")
    if "leaderEpoch" not in document:
        raise QuorumStateError("leaderEpoch is missing")
    epoch = _integer(document, "leaderEpoch")
    leader_id = _integer(document, "leaderId", NO_ID)
    voted_id = _integer(document, "votedId", NO_ID)
    version = _integer(document, "data_version", QUORUM_STATE_DATA_VERSION)
    cluster_id = document.get("clusterId", "")
    if not isinstance(cluster_id, str):
        raise QuorumStateError(f"clusterId is {cluster_id!r}, not a string")
    if version not in QUORUM_STATE_DATA.versions:
        raise QuorumStateError(f"data_version {version} is not one we know")
    if not 0 <= epoch <= MAX_EPOCH:
        raise QuorumStateError(f"leaderEpoch {epoch} is outside [0, {MAX_EPOCH}]")
    for key, value in (("leaderId", leader_id), ("votedId", voted_id)):
        if value < NO_ID:
            raise QuorumStateError(f"{key} {value} is negative (only {NO_ID}, none, is allowed)")
    state = QuorumState(
        epoch=epoch,
        leader_id=None if leader_id == NO_ID else leader_id,
        voted_id=None if voted_id == NO_ID else voted_id,
    )
    return state, cluster_id


def check_quorum_state(state: QuorumState, file_cluster_id: str, cluster_id: str, voters: frozenset[NodeId]) -> None:
    """What the stored state must agree with in the node's configuration."""
    # Kafka's own files may carry an empty clusterId: nothing to compare then.
    if file_cluster_id and file_cluster_id != cluster_id:
        raise QuorumStateError(
            f"it belongs to cluster {file_cluster_id}, but this node's meta.properties says {cluster_id}: "
            "is metadata.log.dir pointing at another node's directory?"
        )
    for name, node_id in (("leaderId", state.leader_id), ("votedId", state.voted_id)):
        if node_id is not None and node_id not in voters:
            raise QuorumStateError(
                f"{name} {node_id} is not one of the configured voters ({', '.join(map(str, sorted(voters)))}): "
                "the file is damaged, or controller.quorum.voters lost a voter"
            )


def read_quorum_state(
    directory: str | os.PathLike[str], cluster_id: str | None = None, voters: frozenset[int] | None = None
) -> QuorumState:
    """The stored state, or the initial one (epoch 0) if no file exists yet.

    Given `cluster_id` and `voters` it is also checked against them. Every
    refusal is a `QuorumStateError` that names the file, what is wrong and
    the way out.
    """
    path = os.path.join(os.fspath(directory), QUORUM_STATE_FILE_NAME)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return QuorumState()
    try:
        state, file_cluster_id = _decode(data)
        if cluster_id is not None and voters is not None:
            check_quorum_state(state, file_cluster_id, cluster_id, voters)
    except QuorumStateError as exc:
        raise QuorumStateError(f"quorum-state file {path} cannot be valid: {exc}; {QUORUM_STATE_HINT}") from None
    return state


def write_quorum_state(
    directory: str | os.PathLike[str], state: QuorumState, cluster_id: str, voters: frozenset[int]
) -> None:
    """Writes atomically and durably: tmp file, fsync, rename, fsync the directory."""
    directory = os.fspath(directory)
    path = os.path.join(directory, QUORUM_STATE_FILE_NAME)
    write_file_atomically(path, encode_quorum_state(state, cluster_id, voters))

class FileQuorumStateStore:
    """The durable store a trio driver uses (call `write` from a worker thread)."""

    def __init__(self, directory: str | os.PathLike[str], cluster_id: str, voters: frozenset[NodeId] | None) -> None:
        """`voters`: the static voters the file's ids are checked against; None for a dynamic
        quorum (KIP-853), whose voters live in the log (the file then lists none)."""
        self._directory = os.fspath(directory)
        self._cluster_id = cluster_id
        self._voters = voters
        self._current = read_quorum_state(self._directory, cluster_id, voters)

    def read(self) -> QuorumState:
        return self._current

    def write(self, state: QuorumState) -> None:
        check_transition(self._current, state)
        write_quorum_state(self._directory, state, self._cluster_id, self._voters or frozenset())
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
