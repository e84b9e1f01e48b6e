"""The voters of the metadata quorum and their history in the log (KIP-853).

Owns: `Voter` and `VoterSet` (values), `VoterHistory` (which set is in effect
at which offset, and the kraft.version level), and the coding of the two
control records that carry them, KRaftVersionRecord and VotersRecord.

Rules kept here:
- kraft.version 0: the voters are the static `controller.quorum.voters`
  (no directory ids). kraft.version 1: the latest VotersRecord in the log is
  in effect from the moment it is appended or fetched, committed or not (a
  node acts on the configuration it has, as Raft's single-server changes
  require); when there is none, the static set still is.
- Truncating the log brings back the set before the truncated entries; a
  snapshot carries the set in effect at its end (`VoterHistory.at`), which
  becomes the oldest entry once the log is reset to it.
- A voter's identity at kraft.version 1 is its id and directory id: a node
  reformatted under the same id (a new directory id) is not the voter.
- One change at a time keeps any two majorities of consecutive sets
  intersecting (`VoterSet.overlaps_majority_of`); the leader enforces it,
  the history only records.
"""

from __future__ import annotations

import base64
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from protocol.errors import DecodeError
from protocol.raft_records import KRAFT_VERSION_RECORD, VOTERS_RECORD
from protocol.record_batch import ControlRecordType
from server.values import NodeId, Offset

ZERO_DIRECTORY_ID = uuid.UUID(int=0)
# The kraft.version range a kraftwerk voter supports.
KRAFT_VERSION_MIN = 0
KRAFT_VERSION_MAX = 1
# The offset of entries that come from the bootstrap checkpoint (snapshot 0-0): before the log.
BOOTSTRAP_OFFSET = -1


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: NodeId
    # None for a static voter (kraft.version 0 knows no directory ids).
    directory_id: uuid.UUID | None = None
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 0

    def is_node(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        """This voter is that node: same id, and the same directory id when the voter has one."""
        return self.node_id == node_id and (self.directory_id is None or self.directory_id == directory_id)

    def supports_kraft_version(self, level: int) -> bool:
        return self.min_kraft_version <= level <= self.max_kraft_version

    def describe(self) -> str:
        """Kafka's `ReplicaKey` text, which its error messages carry."""
        directory = "<undefined>" if self.directory_id is None else _uuid_text(self.directory_id)
        return f"ReplicaKey(id={self.node_id}, directoryId={directory})"


def replica_key_text(node_id: int, directory_id: uuid.UUID | None) -> str:
    return Voter(node_id, directory_id).describe()


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Voters by id (ids are unique within a set), sorted by id."""

    voters: tuple[Voter, ...]

    def __post_init__(self) -> None:
        ids = [voter.node_id for voter in self.voters]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a voter set names an id twice: {sorted(ids)}")
        if list(ids) != sorted(ids):
            object.__setattr__(self, "voters", tuple(sorted(self.voters, key=lambda voter: voter.node_id)))

    @classmethod
    def static(cls, ids: Iterable[int]) -> VoterSet:
        return cls(tuple(Voter(node_id) for node_id in sorted(ids)))

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(voter.node_id for voter in self.voters)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def __len__(self) -> int:
        return len(self.voters)

    def __iter__(self) -> Iterator[Voter]:
        return iter(self.voters)

    def get(self, node_id: int) -> Voter | None:
        for voter in self.voters:
            if voter.node_id == node_id:
                return voter
        return None

    def contains(self, node_id: int, directory_id: uuid.UUID | None) -> bool:
        voter = self.get(node_id)
        return voter is not None and voter.is_node(node_id, directory_id)

    def with_voter(self, voter: Voter) -> VoterSet:
        """This set with `voter` added, or replacing the voter of the same id."""
        return VoterSet(tuple(v for v in self.voters if v.node_id != voter.node_id) + (voter,))

    def without(self, node_id: int, directory_id: uuid.UUID | None) -> VoterSet | None:
        """This set less that voter; None if it is not a voter or is the last one."""
        if not self.contains(node_id, directory_id) or len(self.voters) == 1:
            return None
        return VoterSet(tuple(v for v in self.voters if v.node_id != node_id))

    def overlaps_majority_of(self, other: VoterSet) -> bool:
        """Any majority of this set intersects any majority of `other`: at most one
        voter (by id and directory id) was added or removed."""
        mine = {(v.node_id, v.directory_id) for v in self.voters}
        theirs = {(v.node_id, v.directory_id) for v in other.voters}
        return len(mine ^ theirs) <= 1

    def keys_text(self) -> str:
        return "[" + ", ".join(voter.describe() for voter in self.voters) + "]"


@dataclass(slots=True)
class VoterHistory:
    """The voter sets and kraft.version levels the log holds, by the offset that wrote them."""

    static: VoterSet
    # (offset, set), offsets increasing; BOOTSTRAP_OFFSET for the bootstrap checkpoint's.
    _voter_offsets: list[int]
    _voter_sets: list[VoterSet]
    _version_offsets: list[int]
    _versions: list[int]

    @classmethod
    def of_static(cls, static: VoterSet) -> VoterHistory:
        return cls(static, [], [], [], [])

    # -- reading ---------------------------------------------------------------
    @property
    def latest(self) -> VoterSet:
        return self._voter_sets[-1] if self._voter_sets else self.static

    @property
    def latest_offset(self) -> int | None:
        """The offset of the VotersRecord in effect; None while the static set is."""
        return self._voter_offsets[-1] if self._voter_offsets else None

    @property
    def kraft_version(self) -> int:
        return self._versions[-1] if self._versions else 0

    def at(self, offset: Offset) -> VoterSet:
        """The set in effect once the entry at `offset` is in the log."""
        index = bisect_right(self._voter_offsets, offset) - 1
        return self._voter_sets[index] if index >= 0 else self.static

    def kraft_version_at(self, offset: Offset) -> int:
        index = bisect_right(self._version_offsets, offset) - 1
        return self._versions[index] if index >= 0 else 0

    def has_voters_record_at(self, offset: Offset) -> bool:
        index = bisect_right(self._voter_offsets, offset) - 1
        return index >= 0

    def entries(self) -> list[tuple[int, VoterSet]]:
        return list(zip(self._voter_offsets, self._voter_sets))

    # -- changing -----------------------------------------------------------------
    def add_voters(self, offset: Offset, voter_set: VoterSet) -> None:
        if self._voter_offsets and offset <= self._voter_offsets[-1]:
            raise ValueError(f"voter set at {offset} is not after the one at {self._voter_offsets[-1]}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voter_set)

    def add_kraft_version(self, offset: Offset, level: int) -> None:
        if self._version_offsets and offset <= self._version_offsets[-1]:
            raise ValueError(f"kraft.version at {offset} is not after the one at {self._version_offsets[-1]}")
        self._version_offsets.append(offset)
        self._versions.append(level)

    def truncate_from(self, end_offset: Offset) -> None:
        """Forgets what the entries at `end_offset` and after wrote (the log was truncated there)."""
        cut = bisect_right(self._voter_offsets, end_offset - 1)
        del self._voter_offsets[cut:], self._voter_sets[cut:]
        cut = bisect_right(self._version_offsets, end_offset - 1)
        del self._version_offsets[cut:], self._versions[cut:]

    def reset_to_snapshot(self, last_offset: Offset, kraft_version: int | None, voter_set: VoterSet | None) -> None:
        """The log was replaced by a snapshot whose last entry is `last_offset`."""
        self._voter_offsets, self._voter_sets = ([last_offset], [voter_set]) if voter_set is not None else ([], [])
        self._version_offsets, self._versions = ([last_offset], [kraft_version]) if kraft_version else ([], [])

    def apply_control(self, offset: Offset, control_type: int, value: bytes) -> None:
        """Records what a control record at `offset` says, if it is about the voters."""
        if control_type == ControlRecordType.VOTERS:
            self.add_voters(offset, decode_voters_record(value))
        elif control_type == ControlRecordType.KRAFT_VERSION:
            self.add_kraft_version(offset, decode_kraft_version_record(value))


# -- the control records ------------------------------------------------------------

def encode_voters_record(voter_set: VoterSet) -> bytes:
    return VOTERS_RECORD.encode(0, {"version": 0, "voters": [
        {"voter_id": voter.node_id, "voter_directory_id": voter.directory_id or ZERO_DIRECTORY_ID,
         "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in voter.endpoints],
         "kraft_version_feature": {"min_supported_version": voter.min_kraft_version,
                                    "max_supported_version": voter.max_kraft_version}}
        for voter in voter_set.voters]})


def decode_voters_record(value: bytes) -> VoterSet:
    data = VOTERS_RECORD.decode(0, value)
    voters = []
    for item in data.voters:
        feature = item.kraft_version_feature
        directory_id = item.voter_directory_id
        voters.append(Voter(item.voter_id, None if directory_id == ZERO_DIRECTORY_ID else directory_id,
                            tuple(Endpoint(e.name, e.host, e.port) for e in item.endpoints),
                            feature.min_supported_version, feature.max_supported_version))
    try:
        return VoterSet(tuple(voters))
    except ValueError as exc:
        raise DecodeError(f"VotersRecord: {exc}") from None


def encode_kraft_version_record(level: int) -> bytes:
    return KRAFT_VERSION_RECORD.encode(0, {"version": 0, "kraft_version": level})


def decode_kraft_version_record(value: bytes) -> int:
    level = KRAFT_VERSION_RECORD.decode(0, value).kraft_version
    if not 0 <= level <= KRAFT_VERSION_MAX:
        raise DecodeError(f"KRaftVersionRecord: unknown kraft.version {level}")
    return level


def snapshot_voter_records(kraft_version: int, voter_set: VoterSet | None) -> list[tuple[int, bytes]]:
    """The (control type, value) records a snapshot's header batch carries (KIP-853): none at
    kraft.version 0 (the voters are the static configuration's), else the level and the set."""
    if kraft_version < 1:
        return []
    records = [(int(ControlRecordType.KRAFT_VERSION), encode_kraft_version_record(kraft_version))]
    if voter_set is not None:
        records.append((int(ControlRecordType.VOTERS), encode_voters_record(voter_set)))
    return records


def voter_control_records(records: Sequence[tuple[int, bytes]]) -> tuple[int | None, VoterSet | None]:
    """The kraft.version and voter set that (control type, value) records name, last one winning."""
    level: int | None = None
    voter_set: VoterSet | None = None
    for control_type, value in records:
        if control_type == ControlRecordType.KRAFT_VERSION:
            level = decode_kraft_version_record(value)
        elif control_type == ControlRecordType.VOTERS:
            voter_set = decode_voters_record(value)
    return level, voter_set


def _uuid_text(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
