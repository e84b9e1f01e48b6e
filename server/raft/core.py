"""The KRaft consensus core: a deterministic step machine with no I/O.

Owns: the election and replication state of one node of the `__cluster_metadata`
quorum (roles Unattached, Prospective (pre-vote, KIP-996), Candidate, Leader,
Follower, Resigned; observers are non-voters that only fetch), the timers, the
leader's view of every replica, the high watermark and a follower's snapshot
download.

Interface, in the style of etcd-raft's Ready/Advance:
- inputs: `handle_request`, `handle_response`, `tick`, `propose`, `resign`,
  `note_flushed`; time (`now_ms`) and a `random.Random` are passed in, the core
  never reads a clock or does I/O.
- output: `ready()` hands the driver a `Ready` (quorum state to persist, log
  operations, whether to flush them, messages to send, the new high watermark,
  the new role); the driver does it in that order and calls `advance`.
  Between `ready()` and `advance()` no other method may be called.

Rules kept here:
- Persist before acting: a vote grant, a new epoch or leadership is only in a
  Ready's `quorum_state`, and the driver persists it before sending anything
  from the same Ready. A follower voter's appends are flushed before its next
  Fetch (its fetch offset counts toward the high watermark).
- The leader counts itself toward the high watermark only up to the offset the
  driver reports as flushed; the high watermark moves when a majority of voters
  has an offset, only past the leader's epoch start (its LeaderChange record),
  and never backwards.
- No message can crash the core. Requests reach it validated
  (server/raft/validate.py: epochs in [0, MAX_EPOCH], ids, offsets, cluster
  id); what is well-formed but still unacceptable (a second leader claimed for
  an epoch, a divergence that would truncate committed data, undecodable
  records) raises `RaftProtocolError`, which the driver answers as a refusal
  of that one message, before the core has changed anything for it. The core's
  own invariants (committed data is never truncated, a leader never loads a
  snapshot, the Ready/advance protocol) raise `RaftInvariantError`: a bug.
- Epoch arithmetic is checked: a node never campaigns past MAX_EPOCH (it logs
  and waits for a leader instead), so no persisted or encoded epoch overflows;
  and requests may move a node's epoch at most MAX_EPOCH_JUMP above the highest
  epoch it learned from answers to its own requests, however many arrive.
- A voter that hears a live leader ignores higher epochs from Vote,
  BeginQuorumEpoch and EndQuorumEpoch requests (the Raft thesis' disruptive-
  server rule, §4.2.3, as etcd's CheckQuorum applies it): a lone node cannot
  move the quorum's epoch while the leader is healthy. The leader's own
  EndQuorumEpoch lifts the rule for its successor; a leader still honours a
  higher-epoch Vote from a voter that has stopped fetching from it (a node
  stranded at a higher epoch can only come back through an election).
- A voter's Fetch counts (toward the high watermark and as contact for check
  quorum and the disruptive-server rule) only when it carries the token this
  leader sent that voter in BeginQuorumEpoch, to the voter's own address. Any
  other Fetch in a voter's name is answered like an observer's and makes the
  leader send the voter its token again. So a peer that can only reach the
  listener cannot commit an entry on a copy that does not exist.
- Bounded: one Fetch in flight per follower, at most one parked Fetch per
  replica, at most MAX_OBSERVERS observers tracked (the least recently heard
  is forgotten first), batches capped in records, snapshot downloads capped
  in bytes.
- The voters are what the log says (KIP-853, server/voters.py): the latest
  VotersRecord appended or fetched, else the static set; every append,
  truncation and installed snapshot updates the history before the next step.
  The leader changes one voter at a time (the previous change committed), an
  added voter counts toward the high watermark only from its first fetch as a
  voter (an observer's offset is not durable), and a leader that removed
  itself resigns once the change commits. A node votes on log completeness
  whatever its voter set says of the candidate (the Raft thesis, §4.1); a
  candidate counts only its own voters' grants.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from protocol.errors import DecodeError, ErrorCode
from protocol.raft_records import LEADER_CHANGE_MESSAGE
from protocol.record_batch import ControlRecordType
from server.raft import messages as m
from server.raft.log import Batch, PassThroughRecordsCodec, RaftLog, RecordsCodec
from server.raft.messages import ApiKey, Body
from server.raft.quorum_state import QuorumState
from server.observability import Event
from server.raft.validate import MAX_EPOCH, REQUEST_REFUSED, RESPONSE_REFUSED
from server.voters import (BOOTSTRAP_OFFSET, Voter, VoterHistory, VoterSet, encode_kraft_version_record,
                           encode_voters_record, voter_control_records)
from server.values import EpochEndOffset, LeaderEpoch, NodeId, Offset, SnapshotId

# How far above the highest epoch it learned from answers to its own requests a node
# lets requests (Vote, BeginQuorumEpoch, EndQuorumEpoch) move it. Requests are what
# an unauthenticated peer can send; an honest voter that fell far behind learns the
# quorum's epoch from the answers to its own pre-votes, votes and fetches, which this
# bound does not limit. Without it two spoofed frames could push the quorum to
# MAX_EPOCH, after which it can never elect again; with it that takes millions of
# forced elections.
MAX_EPOCH_JUMP = 1000

# Observers (brokers) the leader keeps state for; any id may fetch, so the map is capped.
MAX_OBSERVERS = 1024
# An observer counts as caught up for AddRaftVoter only if it fetched this recently (Kafka: 1 hour).
CAUGHT_UP_FETCH_MAX_AGE_MS = 3_600_000
# Failed fetches in a row after which a follower reports its leader unreachable: one
# can be a dropped connection to a live leader, two (a retry backoff apart) rarely are.
LEADER_UNREACHABLE_FAILURES = 2

CONFLICTING_LEADER = Event.RAFT_CONFLICTING_LEADER
BAD_RESPONSE = RESPONSE_REFUSED


class RaftProtocolError(Exception):
    """A message the core cannot accept: answered (or, for a response, dropped) as a refusal."""

    def __init__(self, error: ErrorCode, event: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.event = event
        self.reason = reason


class RaftInvariantError(Exception):
    """The core's own rules were broken: a bug, never caused by a message."""


class Role(Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: NodeId
    # The static voters (controller.quorum.voters): the quorum at kraft.version 0, and until
    # the log names others. Empty for a node of a dynamic quorum (its voters are in the log).
    voters: frozenset[NodeId]
    cluster_id: str
    # This node's metadata log directory id (meta.properties directory.id): with its id, its
    # identity as a voter at kraft.version 1.
    directory_id: uuid.UUID | None = None
    # Ids the driver maps to controller.quorum.bootstrap.servers (negative, as Kafka's): where
    # an observer that knows no leader asks.
    bootstrap_ids: tuple[NodeId, ...] = ()
    # Kafka's controller.quorum.* defaults.
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    # How long a leader parks a Fetch with nothing new (KRaft long poll).
    fetch_max_wait_ms: int = 500
    # How long a leader may hold back a Fetch answer whose only news is a higher
    # high watermark, hoping to send it together with the next records. A commit
    # otherwise costs every follower a second Fetch round trip (the answer that
    # carries the new high watermark, then the Fetch that parks again), which on
    # the leader doubles the network work per commit. Followers and observers
    # learn a high watermark at most this much later; 0 answers at once (KRaft).
    high_watermark_linger_ms: int = 5
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024
    max_snapshot_bytes: int = 1 << 30
    retry_backoff_ms: int = 20
    max_batch_records: int = 10_000
    pre_vote: bool = True
    # Added to the core's clock for the timestamps of the batches it writes: the driver
    # makes them wall-clock epoch milliseconds, as Kafka writes them (its brokers' and
    # tools' views of metadata age read them); the simulator keeps its own clock (0).
    timestamp_offset_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms", "fetch_max_wait_ms",
                     "fetch_max_bytes", "snapshot_chunk_bytes", "retry_backoff_ms", "max_batch_records"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RaftConfig.{name} must be positive")
        if self.high_watermark_linger_ms < 0:
            raise ValueError("RaftConfig.high_watermark_linger_ms must not be negative")


# -- log operations the driver applies, in order -------------------------------

class TruncateTo(NamedTuple):
    offset: Offset


class Append(NamedTuple):
    batch: Batch


class InstallSnapshot(NamedTuple):
    snapshot_id: SnapshotId
    data: bytes


LogOp = TruncateTo | Append | InstallSnapshot


class OutboundRequest(NamedTuple):
    destination: NodeId
    api_key: ApiKey
    body: Body


class OutboundResponse(NamedTuple):
    """The late answer to a request `handle_request` deferred; `token` is what the driver passed in."""

    destination: NodeId
    api_key: ApiKey
    token: Any
    body: Body


class RoleChange(NamedTuple):
    role: Role
    epoch: LeaderEpoch
    leader_id: NodeId | None


class NotLeader(NamedTuple):
    """`propose` on a node that cannot accept writes: where the leader is, if known."""

    leader_id: NodeId | None
    epoch: LeaderEpoch


class _Deferred:
    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = _Deferred()


@dataclass(slots=True)
class Ready:
    quorum_state: QuorumState | None = None
    log_ops: list[LogOp] = field(default_factory=list)
    # Appends must be durable before `requests`/`responses` go out.
    flush_before_send: bool = False
    requests: list[OutboundRequest] = field(default_factory=list)
    responses: list[OutboundResponse] = field(default_factory=list)
    high_watermark: Offset | None = None
    role_change: RoleChange | None = None
    # The voter set in effect, when it changed (the driver connects to new voters first).
    voter_set: VoterSet | None = None

    @property
    def appends(self) -> list[Batch]:
        return [op.batch for op in self.log_ops if isinstance(op, Append)]


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one replica in its epoch."""

    end_offset: Offset = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_sent_high_watermark: Offset = -1
    begin_epoch_acked: bool = False
    begin_epoch_sent_ms: int = -1
    # A Fetch with this leader's token for the voter has arrived.
    token_confirmed: bool = False
    # The directory id its latest Fetch named (None: none, or not fetched yet).
    directory_id: uuid.UUID | None = None
    # The leader's log end when the replica last fetched (for "caught up", Kafka's rule).
    leader_end_at_fetch: Offset = -1


@dataclass(slots=True)
class _ParkedFetch:
    token: Any
    body: Body
    deadline_ms: int


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: SnapshotId
    chunks: list[bytes]
    position: int = 0


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """What DescribeQuorum reports (only meaningful on the leader)."""

    leader_id: NodeId | None
    epoch: LeaderEpoch
    high_watermark: Offset
    voters: dict[NodeId, ReplicaState]
    observers: dict[NodeId, ReplicaState]
    # The voter set in effect (directory ids, endpoints) and the kraft.version level.
    voter_set: VoterSet = VoterSet(())
    kraft_version: int = 0


class RaftCore:
    """See the module docstring."""

    def __init__(self, config: RaftConfig, log: RaftLog, quorum_state: QuorumState, rng: random.Random,
                 now_ms: int, records_codec: RecordsCodec | None = None,
                 voter_history: VoterHistory | None = None) -> None:
        self.config = config
        self.log = log
        self._rng = rng
        self._codec = records_codec or PassThroughRecordsCodec()
        # Which voters are in effect, by offset (KIP-853): the static set until the log says otherwise.
        self._history = voter_history if voter_history is not None else self.load_voter_history(config, log, self._codec)
        self._now_ms = now_ms
        self._state = quorum_state
        # The last state handed out for persisting (what the store compares the next one with).
        self._handed_state = quorum_state
        # The highest epoch known from a source that cannot be spoofed: answers to this
        # node's own requests (sent to configured addresses) and its own won elections.
        # Requests may move the node at most MAX_EPOCH_JUMP above it, however often.
        self._trusted_epoch = quorum_state.epoch
        self.role = Role.UNATTACHED
        # -- the part of the log not yet applied by the driver --
        self._pending_ops: list[LogOp] = []
        self._handed_ops: list[LogOp] = []
        self._ready_outstanding = False
        # -- outputs accumulated for the next Ready --
        self._out_state: QuorumState | None = None
        self._out_requests: list[OutboundRequest] = []
        self._out_responses: list[OutboundResponse] = []
        self._out_role: RoleChange | None = None
        self._out_high_watermark: int | None = None
        self._out_voters: VoterSet | None = None
        # -- the node's view of what is committed (never goes back) --
        self.high_watermark = 0
        # -- timers --
        self._election_deadline_ms: int | None = None
        self._fetch_deadline_ms: int | None = None
        # -- election --
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._rejected_from_lower_epoch = False
        # -- fetching (follower / observer) --
        self._fetch_in_flight: Body | None = None
        self._fetch_sent_ms = 0
        self._fetch_backoff_until_ms = 0
        self._fetch_target: int | None = None
        # Follower (voter or observer): fetches to its leader that failed in a row since
        # it last heard from it.
        self._leader_fetch_failures = 0
        # The (epoch, leader) whose loss last started an early pre-vote (_campaign_early).
        self._early_campaign: tuple[int, int | None] | None = None
        # Last successful exchange with the leader (pre-vote refusals rely on it).
        self._last_leader_contact_ms = -1
        self._snapshot_download: _SnapshotDownload | None = None
        # -- leader --
        self._epoch_start_offset = -1
        self._leader_high_watermark: int | None = None
        self._flushed_end_offset = log.end_offset
        self._voter_states: dict[int, ReplicaState] = {}
        self._observer_states: dict[int, ReplicaState] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        # Leader: the token each voter gets in BeginQuorumEpoch. Follower: the one it got.
        self._voter_tokens: dict[int, int] = {}
        self._leader_token: int | None = None
        # Set once this node could not campaign because its epoch reached MAX_EPOCH.
        self.epoch_exhausted = False
        # The leader the latest vote answers named: a candidate asks it too when its own voter
        # set does not name it (see _start_election_round).
        self._leader_hint: int | None = None
        self._initialise_role(now_ms)

    @staticmethod
    def load_voter_history(config: RaftConfig, log: RaftLog, codec: RecordsCodec) -> VoterHistory:
        """What the newest snapshot and the log after it say about the voters. Reads every
        control batch of the log (the driver may pass a history it built more cheaply)."""
        history = VoterHistory.of_static(VoterSet.static(config.voters))
        snapshot = log.latest_snapshot_id()
        scan_from = log.start_offset
        if snapshot is not None:
            # The log may still hold entries the snapshot covers (not compacted yet).
            scan_from = max(scan_from, snapshot.end_offset)
            size = log.snapshot_size(snapshot) or 0
            records = codec.snapshot_control_records(
                lambda position, max_bytes: log.read_snapshot(snapshot, position, max_bytes), size)
            level, voter_set = voter_control_records(records)
            history.reset_to_snapshot(snapshot.end_offset - 1, level, voter_set)
        for batch in log.control_batches(scan_from):
            if batch.base_offset >= scan_from:
                _apply_control(history, batch)
        return history

    # ------------------------------------------------------------------
    # Public state
    # ------------------------------------------------------------------

    @property
    def epoch(self) -> LeaderEpoch:
        return self._state.epoch

    @property
    def voters(self) -> VoterSet:
        """The voter set in effect: the latest in the log, committed or not (KIP-853)."""
        return self._history.latest

    @property
    def kraft_version(self) -> int:
        return self._history.kraft_version

    @property
    def voter_history(self) -> VoterHistory:
        """Read-only use: what a snapshot at an offset must carry (`VoterHistory.at`)."""
        return self._history

    @property
    def is_voter(self) -> bool:
        return self.voters.contains(self.config.node_id, self.config.directory_id)

    @property
    def _may_campaign(self) -> bool:
        """A voter, or a voter of the set before an uncommitted change that removed it: it may
        still be needed to elect a leader that commits the change (the Raft thesis, §4.1)."""
        if self.is_voter:
            return True
        latest = self._history.latest_offset
        if latest is None or latest < self.high_watermark:
            return False
        return self._history.at(latest - 1).contains(self.config.node_id, self.config.directory_id)

    @property
    def leader_id(self) -> NodeId | None:
        return self._state.leader_id

    @property
    def voted_id(self) -> NodeId | None:
        return self._state.voted_id

    @property
    def leader_unreachable(self) -> bool:
        """A follower whose last fetches to its leader all failed: the leader is probably
        gone, although no election has named another yet (what clients are told then)."""
        return self.role is Role.FOLLOWER and self._leader_fetch_failures >= LEADER_UNREACHABLE_FAILURES

    @property
    def quorum_state(self) -> QuorumState:
        return self._state

    @property
    def leader_high_watermark(self) -> Offset | None:
        """The leader's high watermark, or None until it has committed in its epoch (or not leader)."""
        return self._leader_high_watermark if self.role is Role.LEADER else None

    @property
    def epoch_start_offset(self) -> Offset:
        return self._epoch_start_offset

    @property
    def end_offset(self) -> Offset:
        """End of the log including operations not yet applied by the driver."""
        end, _ = self._view_end()
        return end

    @property
    def last_epoch(self) -> LeaderEpoch:
        _, epoch = self._view_end()
        return epoch

    def describe(self) -> QuorumInfo:
        return QuorumInfo(
            leader_id=self.leader_id,
            epoch=self.epoch,
            high_watermark=self.high_watermark,
            voters={voter: _copy_replica(state) for voter, state in self._voter_states.items()},
            observers={node: _copy_replica(state) for node, state in self._observer_states.items()},
            voter_set=self.voters,
            kraft_version=self.kraft_version,
        )

    # ------------------------------------------------------------------
    # Ready / advance
    # ------------------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(self._out_state or self._pending_ops or self._out_requests or self._out_responses
                    or self._out_role or self._out_high_watermark is not None or self._out_voters is not None)

    def ready(self) -> Ready:
        if self._ready_outstanding:
            raise RaftInvariantError("ready() called twice without advance()")
        ops = self._pending_ops
        ready = Ready(
            quorum_state=self._out_state,
            log_ops=ops,
            # A voter's fetch offset counts toward the high watermark: durable first. A node
            # the leader already counts (it sent a token) may not know yet it was added.
            flush_before_send=bool(ops) and self.role is not Role.LEADER
            and (self.is_voter or self._leader_token is not None),
            requests=self._out_requests,
            responses=self._out_responses,
            high_watermark=self._out_high_watermark,
            role_change=self._out_role,
            voter_set=self._out_voters,
        )
        self._handed_ops = ops
        self._pending_ops = []
        if self._out_state is not None:
            self._handed_state = self._out_state
        self._out_state = None
        self._out_requests = []
        self._out_responses = []
        self._out_role = None
        self._out_high_watermark = None
        self._out_voters = None
        self._ready_outstanding = True
        return ready

    def advance(self, ready: Ready, flushed_end_offset: Offset, now_ms: int) -> None:
        """The driver did everything `ready` asked; `flushed_end_offset` is the log's durable end."""
        if not self._ready_outstanding:
            raise RaftInvariantError("advance() without ready()")
        self._ready_outstanding = False
        self._handed_ops = []
        self._now_ms = now_ms
        self._flushed_end_offset = flushed_end_offset
        if self.role is Role.LEADER:
            self._update_leader_high_watermark()
            if ready.appends:
                # New data is readable now: answer the fetches that were waiting for it.
                self._complete_parked(now_ms, only_expired=False)

    def note_flushed(self, flushed_end_offset: Offset, now_ms: int) -> None:
        """The driver flushed the log outside a Ready (a leader's group commit)."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        self._flushed_end_offset = flushed_end_offset
        if self.role is Role.LEADER:
            self._update_leader_high_watermark()

    def _check_not_in_ready(self) -> None:
        if self._ready_outstanding:
            raise RaftInvariantError("core called between ready() and advance()")

    # ------------------------------------------------------------------
    # The log as the core sees it (applied log + operations not applied yet)
    # ------------------------------------------------------------------

    def _view_end(self) -> tuple[int, int]:
        end = self.log.end_offset
        epoch = self.log.last_epoch
        for op in (*self._handed_ops, *self._pending_ops):
            if isinstance(op, Append):
                end, epoch = op.batch.next_offset, op.batch.epoch
            elif isinstance(op, TruncateTo):
                if op.offset < end:
                    # Truncations are computed against the applied log (a
                    # follower only truncates with nothing else pending).
                    end, epoch = op.offset, self.log.epoch_before(op.offset)
            else:
                end, epoch = op.snapshot_id.end_offset, op.snapshot_id.epoch
        return end, epoch

    def _leader_end_offset_for_epoch(self, epoch: int) -> EpochEndOffset | None:
        # A leader's unapplied operations are only appends in its own epoch.
        if epoch >= self.epoch:
            return EpochEndOffset(self.epoch, self.end_offset) if epoch == self.epoch else None
        answer = self.log.end_offset_for_epoch(epoch)
        if answer is None:
            # The asked epoch lies between the log's last epoch and ours.
            return EpochEndOffset(self.log.last_epoch, self.log.end_offset)
        return answer

    # ------------------------------------------------------------------
    # Transitions
    # ------------------------------------------------------------------

    def _initialise_role(self, now_ms: int) -> None:
        state = self._state
        me = self.config.node_id
        if state.leader_id == me:
            # A leader that restarts cannot continue: its unflushed tail may be gone.
            self._become_resigned(now_ms, announce=True)
        elif state.leader_id is not None:
            self._become_follower(state.epoch, state.leader_id, now_ms)
        elif state.voted_id == me and self._may_campaign:
            self._set_role(Role.CANDIDATE)
            self._start_election_round(now_ms)
        else:
            self._become_unattached(state.epoch, now_ms)
        if self.is_voter and len(self.voters) == 1 and self.role is not Role.LEADER:
            self._become_candidate(now_ms)

    def _persist(self, state: QuorumState) -> None:
        if state != self._state:
            self._state = state
            self._out_state = state

    def _set_role(self, role: Role) -> None:
        previous = self.role
        self.role = role
        if previous is Role.LEADER and role is not Role.LEADER:
            self._leave_leadership()
        if role is not Role.FOLLOWER:
            self._fetch_deadline_ms = None
            self._snapshot_download = None
        # A response to a fetch sent in another role or epoch is ignored.
        self._fetch_in_flight = None
        self._out_role = RoleChange(role, self._state.epoch, self._state.leader_id)

    def _random_election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return self._rng.randrange(timeout, 2 * timeout)

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        if epoch > self._state.epoch:
            self._persist(QuorumState(epoch=epoch))
        self._set_role(Role.UNATTACHED)
        self._fetch_target = None
        self._election_deadline_ms = now_ms + self._random_election_timeout() if self._may_campaign else None
        self._maybe_send_fetch(now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int, token: int | None = None) -> None:
        handed = self._handed_state
        if handed.epoch == epoch and handed.leader_id not in (None, leader_id):
            # A leader belief of this epoch was dropped but that is not durable yet: the
            # store never replaces an epoch's leader in one write. The next message will do.
            return
        if epoch != self.epoch or leader_id != self.leader_id:
            self._last_leader_contact_ms = -1
            self._leader_token = None
        if token is not None:
            self._leader_token = token
        voted = self._state.voted_id if epoch == self._state.epoch else None
        self._persist(QuorumState(epoch=epoch, leader_id=leader_id, voted_id=voted))
        self._set_role(Role.FOLLOWER)
        self._election_deadline_ms = None
        self._fetch_target = leader_id
        self._fetch_in_flight = None
        self._fetch_backoff_until_ms = 0
        self._leader_fetch_failures = 0
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        self._maybe_send_fetch(now_ms)

    def _epoch_exhausted(self, now_ms: int) -> bool:
        """At MAX_EPOCH no election can start: wait (unattached) for a leader to announce itself."""
        if self._state.epoch < MAX_EPOCH:
            return False
        self.epoch_exhausted = True
        if self.role is not Role.UNATTACHED:
            self._become_unattached(self.epoch, now_ms)
        self._election_deadline_ms = now_ms + self._random_election_timeout()
        return True

    def _become_prospective(self, now_ms: int) -> None:
        if not self._may_campaign:
            # A node the log removed from the voters (or never named) only observes.
            self._become_unattached(self.epoch, now_ms)
            return
        if self._epoch_exhausted(now_ms):
            return
        if not self.config.pre_vote:
            self._become_candidate(now_ms)
            return
        self._set_role(Role.PROSPECTIVE)
        self._start_election_round(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        if self._epoch_exhausted(now_ms):
            return
        self._persist(QuorumState(epoch=self._state.epoch + 1, voted_id=self.config.node_id))
        self._set_role(Role.CANDIDATE)
        self._start_election_round(now_ms)

    def _start_election_round(self, now_ms: int) -> None:
        self._granted = {self.config.node_id}
        self._rejected = set()
        self._rejected_from_lower_epoch = False
        self._election_deadline_ms = now_ms + self._random_election_timeout()
        if self._maybe_win(now_ms):
            return
        pre_vote = self.role is Role.PROSPECTIVE
        candidate_epoch = self.epoch + 1 if pre_vote else self.epoch
        end, last_epoch = self._view_end()
        asked = [(voter.node_id, voter.directory_id) for voter in self.voters.voters]
        hint = self._leader_hint
        if hint is not None and hint not in self.voters.ids:
            # A leader this node's log does not name as a voter (a change it has not fetched):
            # only that leader can take back a voter stranded above its epoch (_is_stranded_voter).
            asked.append((hint, None))
        for voter_id, directory_id in asked:
            if voter_id != self.config.node_id:
                body = m.vote_request(self.config.cluster_id, voter_id, candidate_epoch, self.config.node_id,
                                      last_epoch, end, pre_vote, directory_id, self.config.directory_id)
                self._out_requests.append(OutboundRequest(voter_id, ApiKey.VOTE, body))

    def _maybe_win(self, now_ms: int) -> bool:
        # Only grants from this node's own voter set count (it may have changed since it asked).
        if len(self._granted & self.voters.ids) >= self.voters.majority:
            if self.role is Role.PROSPECTIVE:
                self._become_candidate(now_ms)
            else:
                self._become_leader(now_ms)
            return True
        # Lost once the voters left to answer cannot make a majority (with an even count
        # that is before a majority has refused: in a set of two, one refusal decides).
        if self.role is Role.PROSPECTIVE and len(self._rejected & self.voters.ids) > len(self.voters) - self.voters.majority:
            # KIP-996: a lost pre-vote changes nothing durable. Go back to the
            # leader we knew (the others may still hear it), or wait and retry.
            leader = self._state.leader_id
            if self._rejected_from_lower_epoch:
                # We are stranded above the quorum's epoch (an earlier
                # candidacy whose votes were lost): pre-votes can never pass,
                # since those voters hear their leader. A real election is the
                # only way back, and only a node that once won a pre-vote gets here.
                self._become_candidate(now_ms)
            elif leader is not None and leader != self.config.node_id:
                self._become_follower(self.epoch, leader, now_ms)
            else:
                self._become_unattached(self.epoch, now_ms)
            return True
        return False

    def _become_leader(self, now_ms: int) -> None:
        me = self.config.node_id
        self._trusted_epoch = max(self._trusted_epoch, self.epoch)
        self._persist(QuorumState(epoch=self.epoch, leader_id=me, voted_id=self._state.voted_id))
        self._set_role(Role.LEADER)
        self._election_deadline_ms = None
        self._leader_high_watermark = None
        self._voter_states = {voter: ReplicaState(last_fetch_ms=now_ms) for voter in self.voters.ids}
        self._voter_tokens = {voter: self._rng.getrandbits(63) for voter in sorted(self.voters.ids) if voter != me}
        self._observer_states = {}
        self._parked = {}
        end, _ = self._view_end()
        self._epoch_start_offset = end
        # KRaft opens every epoch with a LeaderChangeMessage control record;
        # committing it is what lets the high watermark move in this epoch.
        value = LEADER_CHANGE_MESSAGE.encode(0, {
            "version": 0, "leader_id": me,
            "voters": [{"voter_id": voter} for voter in sorted(self.voters.ids)],
            "granting_voters": [{"voter_id": voter} for voter in sorted(self._granted)],
        })
        self._pending_ops.append(Append(Batch(end, self.epoch, (value,), int(ControlRecordType.LEADER_CHANGE),
                                              now_ms + self.config.timestamp_offset_ms)))
        if self.kraft_version >= 1 and self._history.latest_offset == BOOTSTRAP_OFFSET:
            # The voters came from the bootstrap checkpoint, which nodes formatted without
            # one (--no-initial-controllers, brokers) never see: the log must say them
            # (and the level, which the controllers' images report as kraft.version).
            self._append_control(ControlRecordType.KRAFT_VERSION, encode_kraft_version_record(self.kraft_version),
                                 now_ms)
            self._append_voters(self.voters, now_ms)
        self._out_role = RoleChange(Role.LEADER, self.epoch, me)
        for voter in sorted(self.voters.ids):
            if voter != me:
                self._send_begin_epoch(voter, now_ms)

    def _become_resigned(self, now_ms: int, announce: bool) -> None:
        self._set_role(Role.RESIGNED)
        self._election_deadline_ms = now_ms + self._random_election_timeout()
        if announce:
            self._out_requests.extend(self.resignation_requests())

    def resignation_requests(self) -> list[OutboundRequest]:
        """The EndQuorumEpoch of this leadership to every other voter, best-placed
        successor first. The driver also sends them for a core it discards after a disk
        failure, whose Ready loop ends there."""
        preferred = sorted((voter for voter in self.voters.ids if voter != self.config.node_id),
                           key=lambda voter: (-self._voter_states.get(voter, ReplicaState()).end_offset, voter))
        # With the voter's token: only the real leader can hurry its followers into an election.
        return [OutboundRequest(voter, ApiKey.END_QUORUM_EPOCH,
                                m.end_quorum_epoch_request(self.config.cluster_id, self.config.node_id, self.epoch,
                                                           preferred, self._voter_tokens.get(voter)))
                for voter in preferred]

    def _leave_leadership(self) -> None:
        self._leader_high_watermark = None
        parked, self._parked = self._parked, {}
        # Parked fetches get their answer from the new role (an error naming the new state).
        for replica_id, fetch in sorted(parked.items()):
            self._answer_parked(replica_id, fetch)

    def _answer_parked(self, replica_id: int, fetch: _ParkedFetch) -> None:
        body = self._fetch_response_for(replica_id, fetch.body, self._now_ms, allow_park=False)
        if body is DEFERRED:
            raise RaftInvariantError("a Fetch answered without parking was deferred")
        self._out_responses.append(OutboundResponse(replica_id, ApiKey.FETCH, fetch.token, body))

    def _observe_epoch(self, epoch: int, leader_id: int | None, now_ms: int) -> bool:
        """Reacts to an epoch/leader seen in a response; True if the role changed."""
        if epoch > self._trusted_epoch:
            self._trusted_epoch = epoch
        if leader_id is not None and leader_id < 0:
            leader_id = None
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.config.node_id:
                self._become_follower(epoch, leader_id, now_ms)
            elif not self.is_voter:
                # An observer only needs the epoch of a leader it can follow. A higher epoch
                # without one may come from a node stranded above the quorum (an ex-voter
                # that cannot learn of its removal): taking it would strand the observer too.
                return False
            else:
                self._become_unattached(epoch, now_ms)
            return True
        # A leader of our epoch we did not know yet is news; the one we already
        # gave up on (we are prospective because it went quiet) is not.
        # One leader per epoch: a node that knows the epoch's leader (itself, after a
        # restart) never takes another's word for a different one.
        if (epoch == self.epoch and leader_id is not None and leader_id != self.config.node_id
                and self._state.leader_id is None
                and self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)):
            self._become_follower(epoch, leader_id, now_ms)
            return True
        return False

    # ------------------------------------------------------------------
    # Timers
    # ------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """The earliest time `tick` has something to do (None: only messages can wake it)."""
        candidates: list[int] = []
        if self._election_deadline_ms is not None:
            candidates.append(self._election_deadline_ms)
        if self._fetch_deadline_ms is not None:
            candidates.append(self._fetch_deadline_ms)
        if self.role is Role.LEADER:
            candidates.append(self._check_quorum_deadline())
            candidates.extend(fetch.deadline_ms for fetch in self._parked.values())
            candidates.append(self._begin_epoch_resend_deadline())
        elif self._wants_fetch():
            if self._fetch_in_flight is not None:
                candidates.append(self._fetch_sent_ms + self._fetch_request_timeout_ms())
            else:
                candidates.append(self._fetch_backoff_until_ms)
        return min(candidates) if candidates else None

    def _fetch_request_timeout_ms(self) -> int:
        return self.config.fetch_max_wait_ms + self.config.request_timeout_ms

    def _check_quorum_deadline(self) -> int:
        # The time by which the majority-th most recent voter contact expires.
        return self._majority_contact_ms() + self.config.fetch_timeout_ms * 3 // 2

    def _begin_epoch_resend_deadline(self) -> int:
        pending = [state.begin_epoch_sent_ms + self.config.request_timeout_ms
                   for voter, state in self._voter_states.items()
                   if voter != self.config.node_id and not state.token_confirmed]
        return min(pending) if pending else 1 << 62

    def tick(self, now_ms: int) -> None:
        self._check_not_in_ready()
        self._now_ms = now_ms
        role = self.role
        if role is Role.LEADER:
            if now_ms >= self._check_quorum_deadline():
                # Check quorum: a leader that a majority has not fetched from
                # for 1.5 x fetch timeout is probably partitioned away.
                self._become_resigned(now_ms, announce=True)
                return
            self._complete_parked(now_ms, only_expired=True)
            for voter, state in sorted(self._voter_states.items()):
                if (voter != self.config.node_id and not state.token_confirmed
                        and now_ms >= state.begin_epoch_sent_ms + self.config.request_timeout_ms):
                    self._send_begin_epoch(voter, now_ms)
            return
        if self._election_deadline_ms is not None and now_ms >= self._election_deadline_ms:
            # Unattached, Prospective, Candidate and Resigned all start (another) election.
            self._become_prospective(now_ms)
            return
        if self._fetch_deadline_ms is not None and now_ms >= self._fetch_deadline_ms:
            if self._may_campaign:
                self._become_prospective(now_ms)
            else:
                # An observer that lost its leader goes back to discovering one.
                self._persist(QuorumState(epoch=self.epoch))
                self._become_unattached(self.epoch, now_ms)
            return
        if self._fetch_in_flight is not None and now_ms >= self._fetch_sent_ms + self._fetch_request_timeout_ms():
            self._fetch_in_flight = None  # lost: send another
            self._count_leader_fetch_failure(now_ms)
        self._maybe_send_fetch(now_ms)

    # ------------------------------------------------------------------
    # Proposals and shutdown
    # ------------------------------------------------------------------

    def propose(self, values: list[bytes], now_ms: int) -> tuple[Offset, Offset] | NotLeader:
        """Appends `values` as one batch if this node is the leader; returns (base offset, epoch)."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        if self.role is not Role.LEADER:
            return NotLeader(self.leader_id if self.role is Role.FOLLOWER else None, self.epoch)
        if not values:
            raise ValueError("propose needs at least one value")
        if len(values) > self.config.max_batch_records:
            raise ValueError(f"{len(values)} records exceed max_batch_records={self.config.max_batch_records}")
        base = self.end_offset
        self._pending_ops.append(Append(Batch(base, self.epoch, tuple(values), None,
                                              now_ms + self.config.timestamp_offset_ms)))
        return base, self.epoch

    # ------------------------------------------------------------------
    # The voter set (KIP-853)
    # ------------------------------------------------------------------

    def voter_change_refusal(self, change_in_progress: bool, adding: bool) -> tuple[ErrorCode, str | None] | None:
        """Why the leader cannot start a voter change now, in Kafka's order and words (None: it can).
        `change_in_progress`: the driver is still checking an earlier request's new voter."""
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        if change_in_progress:
            return ErrorCode.REQUEST_TIMED_OUT, "Request timed out waiting for leader to handle previous voter change request"
        if self._leader_high_watermark is None:
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to establish HWM and fence previous voter changes")
        if self.kraft_version < 1:
            verb = "adding" if adding else "removing"
            return ErrorCode.UNSUPPORTED_VERSION, f"Cluster doesn't support {verb} voter because the kraft.version feature is 0"
        latest = self._history.latest_offset
        if latest is None or latest >= self._leader_high_watermark:
            shown = "Optional.empty" if latest is None else f"Optional[{latest}]"
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"Request timed out waiting for voters to commit the latest voter change at {shown} "
                    f"with HWM {self._leader_high_watermark}")
        return None

    def add_voter_refusal(self, voter: Voter, change_in_progress: bool = False) -> tuple[ErrorCode, str | None] | None:
        """Why `voter` cannot be added now (before the driver asks it its ApiVersions), or None."""
        refusal = self.voter_change_refusal(change_in_progress, adding=True)
        if refusal is not None:
            return refusal
        voters = self.voters
        if voter.node_id in voters.ids:
            return (ErrorCode.DUPLICATE_VOTER,
                    f"The voter id for {voter.describe()} is already part of the set of voters {voters.keys_text()}.")
        return None

    def add_voter(self, voter: Voter, now_ms: int, change_in_progress: bool = False) -> tuple[ErrorCode, str | None] | Offset:
        """Leader: appends the voter set with `voter` added; returns the VotersRecord's offset
        (the change is done when it commits), or Kafka's error. Nothing changes on an error."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        refusal = self.add_voter_refusal(voter, change_in_progress)
        if refusal is not None:
            return refusal
        voters = self.voters
        state = self._observer_states.get(voter.node_id)
        if (state is None or state.directory_id != voter.directory_id or state.last_caught_up_ms < 0
                or now_ms - state.last_fetch_ms > CAUGHT_UP_FETCH_MAX_AGE_MS):
            return ErrorCode.REQUEST_TIMED_OUT, f"Aborted add voter operation for {voter.describe()} since it is lagging behind"
        return self._append_voters(voters.with_voter(voter), now_ms)

    def remove_voter(self, node_id: NodeId, directory_id: uuid.UUID | None,
                     now_ms: int, change_in_progress: bool = False) -> tuple[ErrorCode, str | None] | Offset:
        """Leader: appends the voter set without that voter; as `add_voter`. A leader that
        removes itself leads until the change commits, then resigns."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        refusal = self.voter_change_refusal(change_in_progress, adding=False)
        if refusal is not None:
            return refusal
        voters = self.voters
        remaining = voters.without(node_id, directory_id)
        if remaining is None:
            return (ErrorCode.VOTER_NOT_FOUND, f"Cannot remove voter {Voter(node_id, directory_id).describe()} "
                                               f"from the set of voters {voters.keys_text()}")
        return self._append_voters(remaining, now_ms)

    def upgrade_kraft_version(self, level: int, voter_set: VoterSet, now_ms: int,
                              validate_only: bool = False) -> tuple[ErrorCode, str] | Offset | None:
        """Leader: kraft.version 0 -> 1 (KIP-853). Writes KRaftVersionRecord, then the static
        voters as a VotersRecord (`voter_set`: each with its directory id, endpoints and
        supported range, as the driver learnt them); returns the VotersRecord's offset (the
        upgrade is done when it commits), None for nothing to do, or Kafka's refusal."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        current = self.kraft_version
        name = f"KRAFT_VERSION_{level}"
        if self.role is not Role.LEADER:
            return (ErrorCode.NOT_CONTROLLER,
                    "Upgrade kraft version failed because the replica is not the current leader")
        if level == current:
            return None
        if level < current:
            return (ErrorCode.INVALID_UPDATE_VERSION, f"Invalid upgrade of kraft.version from version "
                                                      f"KRAFT_VERSION_{current} to {name} because the new version "
                                                      f"is a downgrade")
        if voter_set.ids != self.voters.ids:
            return (ErrorCode.INVALID_UPDATE_VERSION, f"Unable to update kraft.version to {name} due to missing "
                                                      f"voters {sorted(voter_set.ids)} compared to "
                                                      f"{sorted(self.voters.ids)}")
        if any(voter.directory_id is None or not voter.supports_kraft_version(level) for voter in voter_set):
            return (ErrorCode.INVALID_UPDATE_VERSION,
                    f"Invalid upgrade of kraft.version to {name} because not all of the voters support it")
        if validate_only:
            return None
        self._append_control(ControlRecordType.KRAFT_VERSION, encode_kraft_version_record(level), now_ms)
        return self._append_voters(voter_set, now_ms)

    def update_voter(self, voter: Voter, request_epoch: int, now_ms: int,
                     change_in_progress: bool = False) -> tuple[ErrorCode, str | None] | Offset | None:
        """Leader: a voter's own new endpoints and kraft.version range (UpdateRaftVoter,
        KIP-853). Kafka's checks in Kafka's order; at kraft.version 1 the voter set is
        appended with that voter replaced (answered at once: returns the offset), at 0 there
        is nothing to write (None)."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        if request_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        if request_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH, None
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        if voter.node_id < 0 or voter.directory_id is None or not voter.endpoints:
            return ErrorCode.INVALID_REQUEST, None
        if (voter.min_kraft_version < 0 or voter.max_kraft_version < 0
                or voter.max_kraft_version < voter.min_kraft_version):
            return ErrorCode.INVALID_REQUEST, None
        if change_in_progress:
            return ErrorCode.REQUEST_TIMED_OUT, None
        if self._leader_high_watermark is None:
            return ErrorCode.REQUEST_TIMED_OUT, None
        latest = self._history.latest_offset
        if self.kraft_version >= 1 and (latest is None or latest >= self._leader_high_watermark):
            return ErrorCode.REQUEST_TIMED_OUT, None
        if not voter.supports_kraft_version(self.kraft_version):
            return ErrorCode.INVALID_REQUEST, None
        if not self.voters.contains(voter.node_id, voter.directory_id if self.kraft_version >= 1 else None):
            return ErrorCode.VOTER_NOT_FOUND, None
        if self.kraft_version < 1:
            return None
        current = self.voters.get(voter.node_id)
        if current == voter:
            return None
        return self._append_voters(self.voters.with_voter(voter), now_ms)

    def _append_voters(self, voter_set: VoterSet, now_ms: int) -> Offset:
        return self._append_control(ControlRecordType.VOTERS, encode_voters_record(voter_set), now_ms)

    def _append_control(self, control_type: ControlRecordType, value: bytes, now_ms: int) -> Offset:
        offset, _ = self._view_end()
        batch = Batch(offset, self.epoch, (value,), int(control_type), now_ms + self.config.timestamp_offset_ms)
        self._append_control_aware(batch, now_ms)
        return offset

    def _append_control_aware(self, batch: Batch, now_ms: int) -> None:
        """Queues an append; a voters record in it takes effect now (KIP-853: when appended)."""
        self._pending_ops.append(Append(batch))
        if batch.control_type is None:
            return
        previous = self.voters
        _apply_control(self._history, batch)
        self._voters_changed(previous, now_ms)

    def _snapshot_voters(self, data: bytes) -> tuple[int | None, VoterSet | None]:
        try:
            records = self._codec.snapshot_control_records(
                lambda position, max_bytes: data[position:position + max_bytes], len(data))
            return voter_control_records(records)
        except (DecodeError, ValueError) as exc:
            raise RaftProtocolError(ErrorCode.CORRUPT_MESSAGE, BAD_RESPONSE, f"snapshot voters: {exc}") from None

    def _voters_changed(self, previous: VoterSet, now_ms: int) -> None:
        """Brings the roles and the leader's bookkeeping in line with a new voter set."""
        voters = self.voters
        if voters == previous:
            return
        self._out_voters = voters
        me = self.config.node_id
        if self.role is Role.LEADER:
            for voter in sorted(voters.ids - self._voter_states.keys()):
                # An added voter keeps when it last fetched and caught up, but not its offset:
                # an observer's fetch offset is not durable (observers flush lazily), so the
                # voter counts toward the high watermark from its first fetch as a voter.
                state = self._observer_states.pop(voter, None) or ReplicaState(last_fetch_ms=now_ms)
                state.token_confirmed = False
                state.end_offset = -1
                self._voter_states[voter] = state
                if voter != me:
                    self._voter_tokens[voter] = self._rng.getrandbits(63)
                    self._send_begin_epoch(voter, now_ms)
            for voter in sorted(self._voter_states.keys() - voters.ids):
                state = self._voter_states.pop(voter)
                self._voter_tokens.pop(voter, None)
                if voter != me and len(self._observer_states) < MAX_OBSERVERS:
                    self._observer_states[voter] = state
            self._update_leader_high_watermark()
            return
        if self._may_campaign:
            if self.role is Role.UNATTACHED and self._election_deadline_ms is None:
                self._election_deadline_ms = now_ms + self._random_election_timeout()
        elif self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            # No longer a voter: it cannot win, and must not disturb the quorum.
            self._become_unattached(self.epoch, now_ms)
        elif self.role is Role.UNATTACHED:
            self._election_deadline_ms = None

    def _resign_if_removed(self, now_ms: int) -> None:
        """A leader that committed its own removal steps down (KIP-853)."""
        latest = self._history.latest_offset
        if (self.role is Role.LEADER and not self.is_voter and latest is not None
                and self._leader_high_watermark is not None and self._leader_high_watermark > latest):
            self._become_resigned(now_ms, announce=True)

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: stop writing and ask the others to elect a successor now."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        if self.role is Role.LEADER:
            self._become_resigned(now_ms, announce=True)

    # ------------------------------------------------------------------
    # Requests
    # ------------------------------------------------------------------

    def handle_request(self, sender_id: NodeId, api_key: int, body: Body, now_ms: int, token: Any = None) -> Body | _Deferred:
        """Answers one request now, or returns DEFERRED and answers later in `Ready.responses` with `token`."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        cluster_id = body.get("cluster_id")
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return self._error_response(api_key, ErrorCode.INCONSISTENT_CLUSTER_ID)
        if api_key == ApiKey.FETCH:
            return self._fetch_response_for(sender_id, body, now_ms, allow_park=True, token=token)
        if api_key == ApiKey.VOTE:
            return self._handle_vote(body, now_ms)
        if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
            return self._handle_begin_epoch(body, now_ms)
        if api_key == ApiKey.END_QUORUM_EPOCH:
            return self._handle_end_epoch(body, now_ms)
        if api_key == ApiKey.FETCH_SNAPSHOT:
            return self._handle_fetch_snapshot(sender_id, body, now_ms)
        raise RaftProtocolError(ErrorCode.INVALID_REQUEST, REQUEST_REFUSED, f"api key {api_key} is not a KRaft RPC")

    @staticmethod
    def _error_response(api_key: int, error: ErrorCode) -> Body:
        return m.error_response(api_key, error)

    def _hears_leader(self, now_ms: int) -> bool:
        """A live leader is known: this node leads with a majority fetching from it, or
        follows a leader it heard from within the fetch timeout and can still reach."""
        if self.role is Role.FOLLOWER:
            return (self._last_leader_contact_ms >= 0 and not self.leader_unreachable
                    and now_ms - self._last_leader_contact_ms < self.config.fetch_timeout_ms)
        if self.role is Role.LEADER:
            return self._majority_contact_ms() > now_ms - self.config.fetch_timeout_ms
        return False

    def _majority_contact_ms(self) -> int:
        """The time by which a majority of voters (the leader counting itself) had fetched."""
        times = sorted((state.last_fetch_ms if voter != self.config.node_id else self._now_ms)
                       for voter, state in self._voter_states.items())
        return times[len(times) - self.voters.majority]

    def _ignores_epoch_from(self, sender: int, epoch: int, now_ms: int, vote: bool) -> bool:
        """The disruptive-server rule: a higher epoch from a message is ignored while a live
        leader is heard; except that a leader accepts a Vote from a voter that stopped fetching
        from it (stranded at a higher epoch, only an election brings it back)."""
        if epoch <= self.epoch or not self._hears_leader(now_ms):
            return False
        return not (vote and self._is_stranded_voter(sender, now_ms))

    def _is_stranded_voter(self, voter: int, now_ms: int) -> bool:
        """On the leader: a voter that has not fetched (with its token) for the fetch timeout."""
        if self.role is not Role.LEADER:
            return False
        state = self._voter_states.get(voter)
        return state is not None and state.last_fetch_ms <= now_ms - self.config.fetch_timeout_ms

    def _handle_vote(self, body: Body, now_ms: int) -> Body:
        partition = m.single_partition(body)
        if partition is None:
            return m.vote_response(ErrorCode.INVALID_REQUEST)
        candidate_epoch = partition["candidate_epoch"]
        candidate_id = partition["candidate_id"]
        last_epoch = partition["last_offset_epoch"]
        last_offset = partition["last_offset"]
        pre_vote = m.is_pre_vote(body)
        if last_offset < 0 or last_epoch < 0 or last_epoch > candidate_epoch:
            return m.vote_response(ErrorCode.INVALID_REQUEST)
        if candidate_epoch < self.epoch:
            return m.vote_response(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.epoch)
        addressed = m.addressed_directory_id(partition)
        if addressed is not None and self.config.directory_id is not None and addressed != self.config.directory_id:
            # Asked as a voter this node is not (the id's directory was replaced: KIP-853).
            return m.vote_response(ErrorCode.NONE, ErrorCode.INVALID_VOTER_KEY, self.leader_id, self.epoch,
                                   granted=False)
        if not self.voters.ids:
            return m.vote_response(ErrorCode.NONE, ErrorCode.INCONSISTENT_VOTER_SET, self.leader_id, self.epoch,
                                   granted=False)
        # A node votes whatever its own voter set says of the candidate or of itself (the Raft
        # thesis, §4.1): the candidate counts only its voters' grants, and a quorum whose
        # latest changes differ across nodes may need the vote of a node a change removed
        # or added to elect anyone.
        end, my_last_epoch = self._view_end()
        log_ok = (last_epoch, last_offset) >= (my_last_epoch, end)
        if pre_vote:
            # Pre-votes change nothing. A voter that hears a live leader refuses,
            # so a partitioned node cannot disrupt the quorum.
            # Not bounded by the epoch jump either: the answer is what lets a voter stranded
            # far above the quorum's epoch find out (and become a candidate, see _maybe_win).
            granted = candidate_epoch > self.epoch and log_ok and not self._hears_leader(now_ms)
            return self._vote_answer(candidate_id, granted)
        # A stranded voter may have been moved up to a bound by a spoofed frame and then
        # campaigned for a while: the leader lets it back from twice as far.
        self._check_epoch_jump(candidate_epoch, 2 if self._is_stranded_voter(candidate_id, now_ms) else 1)
        if self._ignores_epoch_from(candidate_id, candidate_epoch, now_ms, vote=True):
            return self._vote_answer(candidate_id, False)
        if candidate_epoch > self.epoch:
            self._become_unattached(candidate_epoch, now_ms)
        state = self._state
        granted = (
            self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and state.leader_id is None
            and state.voted_id in (None, candidate_id)
            and log_ok
        )
        if granted:
            self._persist(QuorumState(epoch=self.epoch, voted_id=candidate_id))
            if self.role is not Role.UNATTACHED:
                self._set_role(Role.UNATTACHED)
            # Granting a vote restarts the election timer (give the candidate time to win).
            self._election_deadline_ms = now_ms + self._random_election_timeout()
        return self._vote_answer(candidate_id, granted)

    def _vote_answer(self, candidate_id: int, granted: bool) -> Body:
        """A refusal says when the candidate is not a voter here: a voter that was removed
        must not read it as the quorum being behind its epoch (_handle_vote_response)."""
        error = ErrorCode.NONE if granted or candidate_id in self.voters.ids else ErrorCode.INCONSISTENT_VOTER_SET
        return m.vote_response(ErrorCode.NONE, error, self.leader_id, self.epoch, granted=granted)

    def _check_epoch_jump(self, epoch: int, jumps: int = 1) -> None:
        bound = jumps * MAX_EPOCH_JUMP
        if epoch > self.epoch and epoch > self._trusted_epoch + bound:
            raise RaftProtocolError(ErrorCode.INVALID_REQUEST, REQUEST_REFUSED,
                                    f"epoch {epoch} is more than {bound} above the epoch {self._trusted_epoch} "
                                    f"this node has from its own requests")

    def _check_leader_claim(self, epoch: int, leader_id: int) -> None:
        """Raft elects at most one leader per epoch: a second claim is refused, not believed."""
        if epoch == self.epoch and self.leader_id is not None and self.leader_id != leader_id:
            raise RaftProtocolError(ErrorCode.INVALID_REQUEST, CONFLICTING_LEADER,
                                    f"node {leader_id} claims epoch {epoch}, which node {self.leader_id} leads")

    def _handle_begin_epoch(self, body: Body, now_ms: int) -> Body:
        partition = m.single_partition(body)
        if partition is None:
            return m.epoch_response(ErrorCode.INVALID_REQUEST)
        epoch, leader_id = partition["leader_epoch"], partition["leader_id"]
        if epoch < self.epoch:
            return m.epoch_response(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.epoch)
        addressed = m.addressed_directory_id(partition)
        if addressed is not None and self.config.directory_id is not None and addressed != self.config.directory_id:
            return m.epoch_response(ErrorCode.NONE, ErrorCode.INVALID_VOTER_KEY, self.leader_id, self.epoch)
        self._check_epoch_jump(epoch)
        self._check_leader_claim(epoch, leader_id)
        if leader_id == self.config.node_id or self._ignores_epoch_from(leader_id, epoch, now_ms, vote=False):
            return m.epoch_response(ErrorCode.NONE, ErrorCode.NONE, self.leader_id, self.epoch)
        token = m.voter_token(body)
        if epoch > self.epoch or self.role is not Role.FOLLOWER:
            self._become_follower(epoch, leader_id, now_ms, token)
        elif token is not None:
            # The leader sends the token again when it did not recognise our Fetch (we restarted).
            self._leader_token = token
        return m.epoch_response(ErrorCode.NONE, ErrorCode.NONE, self.leader_id, self.epoch)

    def _handle_end_epoch(self, body: Body, now_ms: int) -> Body:
        partition = m.single_partition(body)
        if partition is None:
            return m.epoch_response(ErrorCode.INVALID_REQUEST)
        epoch, leader_id = partition["leader_epoch"], partition["leader_id"]
        if epoch < self.epoch:
            return m.epoch_response(ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.epoch)
        if leader_id not in self.voters.ids and not (
                leader_id == self.leader_id and epoch == self.epoch and self._leader_token is not None
                and m.voter_token(body) == self._leader_token):
            # Only the leader this voter follows may say it is gone after removing itself
            # (KIP-853), with the token it gave this voter: anyone else is not a voter here.
            return m.epoch_response(ErrorCode.NONE, ErrorCode.INCONSISTENT_VOTER_SET, self.leader_id, self.epoch)
        self._check_epoch_jump(epoch)
        self._check_leader_claim(epoch, leader_id)
        if leader_id == self.config.node_id or self._ignores_epoch_from(leader_id, epoch, now_ms, vote=False):
            return m.epoch_response(ErrorCode.NONE, ErrorCode.NONE, self.leader_id, self.epoch)
        if epoch > self.epoch or self.leader_id is None:
            self._become_follower(epoch, leader_id, now_ms)
        if (self.role is Role.FOLLOWER and self.leader_id == leader_id and self._may_campaign
                and self._leader_token is not None and m.voter_token(body) == self._leader_token):
            # The leader says it is gone (with the token it gave this voter, so it is the
            # leader): its successor's Vote is no longer disruptive.
            self._last_leader_contact_ms = -1
            preferred = list(partition.get("preferred_successors") or [])
            if not preferred:
                preferred = [c["candidate_id"] for c in partition.get("preferred_candidates") or []]
            # The best-placed successor campaigns first; the others back off
            # exponentially by their position so they do not split the vote.
            if self.config.node_id in preferred:
                position = preferred.index(self.config.node_id)
                backoff = min(self.config.retry_backoff_ms * (1 << min(position, 16)), self.config.election_timeout_ms)
            else:
                backoff = self._random_election_timeout()
            self._fetch_deadline_ms = min(self._fetch_deadline_ms or now_ms + backoff, now_ms + backoff)
        return m.epoch_response(ErrorCode.NONE, ErrorCode.NONE, self.leader_id, self.epoch)

    # -- Fetch (leader side) --------------------------------------------------

    def _fetch_leader_error(self, request_epoch: int) -> ErrorCode | None:
        if request_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def _fetch_response_for(self, replica_id: int, body: Body, now_ms: int, allow_park: bool,
                            token: Any = None) -> Body | _Deferred:
        partition = m.fetch_partition(body)
        if partition is None:
            return m.fetch_response(ErrorCode.INVALID_REQUEST)
        replica_state = body.get("replica_state") or {}
        replica = replica_state.get("replica_id", -1)
        if replica is None or replica < 0:
            replica = body.get("replica_id", -1)
        fetch_offset = partition["fetch_offset"]
        last_fetched_epoch = partition["last_fetched_epoch"]
        request_epoch = partition["current_leader_epoch"]
        leader = dict(leader_id=self.leader_id, epoch=self.epoch)
        if replica < 0 or fetch_offset < 0 or not 0 <= last_fetched_epoch <= request_epoch:
            return m.fetch_response(ErrorCode.NONE, ErrorCode.INVALID_REQUEST, **leader)
        error = self._fetch_leader_error(request_epoch)
        if error is not None:
            return m.fetch_response(ErrorCode.NONE, error, **leader)
        directory_id = m.fetch_directory_id(partition)
        is_voter = self.voters.contains(replica, directory_id)
        if is_voter and not self._trusted_voter(replica, body, now_ms):
            # Answered, but it changes nothing of the voter's: no position, no contact, no long poll.
            state = ReplicaState()
            is_voter = allow_park = False
        else:
            states = self._voter_states if is_voter else self._observer_states
            state = states.get(replica)
            if state is None:
                if not is_voter and len(states) >= MAX_OBSERVERS:
                    self._forget_observer(min(states, key=lambda node: states[node].last_fetch_ms))
                state = states[replica] = ReplicaState()
        previous_fetch_ms = state.last_fetch_ms
        state.last_fetch_ms = now_ms
        state.directory_id = directory_id
        high_watermark = self._leader_high_watermark if self._leader_high_watermark is not None else -1
        common = dict(leader, high_watermark=high_watermark, log_start_offset=self.log.start_offset)
        # Divergence and snapshot checks (KRaft's validateOffsetAndEpoch).
        snapshot = self.log.latest_snapshot_id()
        if snapshot is not None and (fetch_offset < self.log.start_offset or last_fetched_epoch < snapshot.epoch):
            # Below the log start, or in an epoch older than the snapshot's:
            # the epoch history that could settle divergence is inside the
            # snapshot, so the follower loads the snapshot (committed data only).
            return m.fetch_response(ErrorCode.NONE, snapshot_id=tuple(snapshot), **common)
        if fetch_offset > 0 or last_fetched_epoch > 0:
            answer = self._leader_end_offset_for_epoch(last_fetched_epoch)
            if answer is None or answer.epoch != last_fetched_epoch or answer.end_offset < fetch_offset:
                if answer is None:
                    answer = EpochEndOffset(self.epoch, self.end_offset)
                if answer.end_offset < self.log.start_offset and snapshot is not None:
                    return m.fetch_response(ErrorCode.NONE, snapshot_id=tuple(snapshot), **common)
                return m.fetch_response(ErrorCode.NONE, diverging=tuple(answer), **common)
        # A valid position: it counts toward the high watermark.
        state.end_offset = fetch_offset
        # Kafka's rule: caught up now at the leader's end, or as of the previous fetch when it
        # reached the end the leader had then (a replica fetching while writes go on is never
        # exactly at the end when it asks).
        if fetch_offset >= self.log.end_offset:
            state.last_caught_up_ms = now_ms
        elif previous_fetch_ms >= 0 and fetch_offset >= state.leader_end_at_fetch >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, previous_fetch_ms)
        state.leader_end_at_fetch = self.log.end_offset
        if is_voter:
            self._update_leader_high_watermark()
            high_watermark = self._leader_high_watermark if self._leader_high_watermark is not None else -1
        batches = self.log.read(fetch_offset, min(body.get("max_bytes", self.config.fetch_max_bytes),
                                                  self.config.fetch_max_bytes))
        if not batches and allow_park:
            wait_ms = min(int(body.get("max_wait_ms", 0)), self.config.fetch_max_wait_ms)
            if high_watermark > state.last_sent_high_watermark:
                # Only the high watermark is new: it may wait briefly for the next records.
                wait_ms = min(wait_ms, self.config.high_watermark_linger_ms)
            if wait_ms > 0:
                # Long poll: answer when data arrives or the wait ends. A replica has one
                # parked Fetch; an older one (a retry, or someone else in its name) is
                # answered now, so every request gets exactly one answer.
                older = self._parked.pop(replica, None)
                if older is not None:
                    self._answer_parked(replica, older)
                self._parked[replica] = _ParkedFetch(token, body, now_ms + wait_ms)
                return DEFERRED
        state.last_sent_high_watermark = high_watermark
        common["high_watermark"] = high_watermark
        return m.fetch_response(ErrorCode.NONE, records=self._codec.encode(batches) if batches else None, **common)

    def _trusted_voter(self, voter: int, body: Body, now_ms: int) -> bool:
        """A leader's check that a request in a voter's name carries that voter's token."""
        expected = self._voter_tokens.get(voter)
        state = self._voter_states.get(voter)
        if state is None:
            return False
        if expected is not None and m.voter_token(body) == expected:
            state.token_confirmed = True
            return True
        # A voter that restarted has lost its token: send it again (rate-limited; only
        # the voter's own address gets it).
        if now_ms >= state.begin_epoch_sent_ms + self.config.retry_backoff_ms:
            self._send_begin_epoch(voter, now_ms)
        return False

    def _forget_observer(self, replica_id: int) -> None:
        fetch = self._parked.pop(replica_id, None)
        if fetch is not None:
            # Answered while its state still exists (answering would otherwise track it again).
            self._answer_parked(replica_id, fetch)
        del self._observer_states[replica_id]

    def _complete_parked(self, now_ms: int, only_expired: bool) -> None:
        if not self._parked:
            return
        for replica_id in sorted(self._parked):
            fetch = self._parked.get(replica_id)
            if fetch is None or only_expired and now_ms < fetch.deadline_ms:
                continue
            del self._parked[replica_id]
            self._answer_parked(replica_id, fetch)

    def _shorten_parked(self, deadline_ms: int) -> None:
        if deadline_ms <= self._now_ms:
            self._complete_parked(self._now_ms, only_expired=False)
            return
        for replica_id, fetch in self._parked.items():
            if fetch.deadline_ms > deadline_ms:
                fetch.deadline_ms = deadline_ms

    def _update_leader_high_watermark(self) -> None:
        if self.role is not Role.LEADER:
            return
        me = self.config.node_id
        offsets = sorted(
            (min(self._flushed_end_offset, self.end_offset) if voter == me else state.end_offset
             for voter, state in self._voter_states.items()),
            reverse=True,
        )
        candidate = offsets[self.voters.majority - 1]
        if candidate > self._epoch_start_offset and (
                self._leader_high_watermark is None or candidate > self._leader_high_watermark):
            self._leader_high_watermark = candidate
            self._set_high_watermark(candidate)
            # Followers waiting in a long poll learn the new high watermark with the
            # next records, or within the linger bound if none come.
            self._shorten_parked(self._now_ms + self.config.high_watermark_linger_ms)
            self._resign_if_removed(self._now_ms)

    def _set_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = offset
            self._out_high_watermark = offset

    def _send_begin_epoch(self, voter: int, now_ms: int) -> None:
        self._voter_states[voter].begin_epoch_sent_ms = now_ms
        described = self.voters.get(voter)
        body = m.begin_quorum_epoch_request(self.config.cluster_id, voter, self.config.node_id, self.epoch,
                                            self._voter_tokens.get(voter),
                                            described.directory_id if described is not None else None)
        self._out_requests.append(OutboundRequest(voter, ApiKey.BEGIN_QUORUM_EPOCH, body))

    # -- FetchSnapshot (leader side) -------------------------------------------

    def _handle_fetch_snapshot(self, sender_id: int, body: Body, now_ms: int) -> Body:
        partition = m.single_partition(body, topic_key="name")
        if partition is None:
            return m.fetch_snapshot_response(ErrorCode.INVALID_REQUEST)
        leader = dict(leader_id=self.leader_id, epoch=self.epoch)
        error = self._fetch_leader_error(partition["current_leader_epoch"])
        if error is not None:
            return m.fetch_snapshot_response(ErrorCode.NONE, error, **leader)
        if self._trusted_voter(sender_id, body, now_ms):
            # A follower busy loading a snapshot is still in contact (check quorum).
            self._voter_states[sender_id].last_fetch_ms = now_ms
        wanted = SnapshotId(partition["snapshot_id"]["end_offset"], partition["snapshot_id"]["epoch"])
        size = self.log.snapshot_size(wanted)
        if size is None:
            return m.fetch_snapshot_response(ErrorCode.NONE, ErrorCode.SNAPSHOT_NOT_FOUND, **leader)
        position = partition["position"]
        if not 0 <= position <= size:
            return m.fetch_snapshot_response(ErrorCode.NONE, ErrorCode.POSITION_OUT_OF_RANGE, **leader)
        max_bytes = min(body.get("max_bytes", self.config.snapshot_chunk_bytes), self.config.snapshot_chunk_bytes)
        data = self.log.read_snapshot(wanted, position, max_bytes)
        if data is None:
            return m.fetch_snapshot_response(ErrorCode.NONE, ErrorCode.SNAPSHOT_NOT_FOUND, **leader)
        return m.fetch_snapshot_response(ErrorCode.NONE, snapshot_id=tuple(wanted), size=size, position=position,
                                         data=bytes(data), **leader)

    # ------------------------------------------------------------------
    # Responses
    # ------------------------------------------------------------------

    def handle_response(self, sender_id: NodeId, api_key: int, request_body: Body, response_body: Body | None,
                        now_ms: int) -> None:
        """A response (or None: the request failed or timed out) to a request from a Ready."""
        self._check_not_in_ready()
        self._now_ms = now_ms
        if api_key == ApiKey.FETCH:
            self._handle_fetch_response(request_body, response_body, now_ms)
        elif api_key == ApiKey.FETCH_SNAPSHOT:
            self._handle_fetch_snapshot_response(request_body, response_body, now_ms)
        elif response_body is None or response_body.get("error_code"):
            return
        elif api_key == ApiKey.VOTE:
            self._handle_vote_response(sender_id, request_body, response_body, now_ms)
        elif api_key == ApiKey.BEGIN_QUORUM_EPOCH:
            partition = m.single_partition(response_body)
            if partition is None:
                return
            if self._observe_epoch(partition["leader_epoch"], partition["leader_id"], now_ms):
                return
            if (self.role is Role.LEADER and partition["error_code"] == 0
                    and partition["leader_epoch"] == self.epoch and sender_id in self._voter_states):
                self._voter_states[sender_id].begin_epoch_acked = True
        elif api_key == ApiKey.END_QUORUM_EPOCH:
            partition = m.single_partition(response_body)
            if partition is not None:
                self._observe_epoch(partition["leader_epoch"], partition["leader_id"], now_ms)

    def _handle_vote_response(self, sender_id: int, request_body: Body, response_body: Body, now_ms: int) -> None:
        partition = m.single_partition(response_body)
        request = m.single_partition(request_body)
        if partition is None or request is None:
            return
        epoch = partition["leader_epoch"]
        leader_id = partition["leader_id"]
        if self._observe_epoch(epoch, leader_id, now_ms):
            return
        if leader_id is not None and leader_id >= 0 and leader_id != self.config.node_id:
            self._leader_hint = leader_id
        pre_vote = m.is_pre_vote(request_body)
        if pre_vote:
            if self.role is not Role.PROSPECTIVE or request["candidate_epoch"] != self.epoch + 1:
                return
        elif self.role is not Role.CANDIDATE or request["candidate_epoch"] != self.epoch or epoch != self.epoch:
            return
        if partition["error_code"] == 0 and partition["vote_granted"]:
            self._granted.add(sender_id)
            self._rejected.discard(sender_id)
        elif sender_id not in self._granted:
            self._rejected.add(sender_id)
            if pre_vote and epoch < self.epoch and partition["error_code"] != ErrorCode.INCONSISTENT_VOTER_SET:
                self._rejected_from_lower_epoch = True
        self._maybe_win(now_ms)

    # -- Fetch (follower side) ------------------------------------------------

    def _wants_fetch(self) -> bool:
        if self.role is Role.FOLLOWER:
            return True
        # Observers without a leader ask the voters who it is.
        return self.role is Role.UNATTACHED and not self.is_voter

    def _maybe_send_fetch(self, now_ms: int) -> None:
        if not self._wants_fetch() or self._fetch_in_flight is not None or now_ms < self._fetch_backoff_until_ms:
            return
        if self.role is Role.FOLLOWER:
            target = self._follower_fetch_target()
        else:
            # An observer that knows no leader asks a bootstrap server or a voter its log names
            # (Kafka asks only the bootstrap servers: a removed controller whose bootstrap
            # servers name only itself would never find the leader again).
            me = self.config.node_id
            candidates = tuple(node for node in self.config.bootstrap_ids if node != me) + tuple(
                sorted(self.voters.ids - {me}))
            target = self._rng.choice(candidates) if candidates else None
        if target is None:
            if self.role is Role.FOLLOWER:
                raise RaftInvariantError("a follower without a leader fetches")
            return
        self._fetch_target = target
        self._fetch_sent_ms = now_ms
        download = self._snapshot_download
        if download is not None:
            body = m.fetch_snapshot_request(self.config.cluster_id, self.config.node_id, self.epoch,
                                            tuple(download.snapshot_id), download.position,
                                            self.config.snapshot_chunk_bytes, self._leader_token)
            api_key = ApiKey.FETCH_SNAPSHOT
        else:
            end, last_epoch = self._view_end()
            body = m.fetch_request(self.config.cluster_id, self.config.node_id, self.epoch, end, last_epoch,
                                   self.config.fetch_max_wait_ms, self.config.fetch_max_bytes,
                                   self._leader_token if self.role is Role.FOLLOWER else None,
                                   self.config.directory_id)
            api_key = ApiKey.FETCH
        self._fetch_in_flight = body
        self._out_requests.append(OutboundRequest(target, api_key, body))

    def _follower_fetch_target(self) -> int | None:
        """The leader; for an observer whose fetches to it keep failing, every other
        attempt goes to another voter instead (in turn). Observers get no
        BeginQuorumEpoch: without asking around, an observer would learn of a new leader
        only at its fetch timeout, on top of the voters' own election; a voter of a later
        epoch names its leader in the refusal (`_observe_epoch` follows it), one of the
        same epoch names the old one and the next attempt goes back to it."""
        failures = self._leader_fetch_failures
        # A snapshot is downloaded from the leader only (its chunks must all be its own).
        if self.is_voter or failures % 2 == 0 or self._snapshot_download is not None:
            return self.leader_id
        others = sorted(v for v in self.voters.ids if v != self.leader_id)
        if not others:
            return self.leader_id
        return others[(failures // 2) % len(others)]

    def _fetch_failed(self, now_ms: int) -> None:
        self._fetch_in_flight = None
        self._fetch_backoff_until_ms = now_ms + self.config.retry_backoff_ms
        self._count_leader_fetch_failure(now_ms)

    def _count_leader_fetch_failure(self, now_ms: int) -> None:
        if self.role is not Role.FOLLOWER:
            return
        self._leader_fetch_failures += 1
        if self._may_campaign and self._leader_fetch_failures == LEADER_UNREACHABLE_FAILURES:
            self._campaign_early(now_ms)

    def _campaign_early(self, now_ms: int) -> None:
        """A leader process that dies closes its connections, so its followers' fetches
        fail at once; waiting out the fetch timeout then only delays the election. A voter
        that cannot reach its leader starts a pre-vote soon, the voters in a fixed order
        (so they do not split the vote). The pre-vote wins only where a majority cannot
        reach the leader either (`_hears_leader`). Once per leader and epoch: after a lost
        pre-vote the fetch timeout applies, as it always does to a silent leader."""
        leadership = (self.epoch, self.leader_id)
        if self._early_campaign == leadership:
            return
        self._early_campaign = leadership
        others = sorted(v for v in self.voters.ids if v != self.leader_id)
        position = others.index(self.config.node_id) if self.config.node_id in others else len(others)
        backoff = min(self.config.retry_backoff_ms * (1 << min(position, 16)), self.config.election_timeout_ms)
        self._fetch_deadline_ms = min(self._fetch_deadline_ms or now_ms + backoff, now_ms + backoff)

    def _handle_fetch_response(self, request_body: Body, response_body: Body | None, now_ms: int) -> None:
        if request_body is not self._fetch_in_flight:
            return  # stale, duplicated or from an earlier role
        if response_body is None or response_body.get("error_code"):
            self._fetch_failed(now_ms)
            return
        partition = m.fetch_partition(response_body)
        if partition is None:
            self._fetch_failed(now_ms)
            return
        current = partition.get("current_leader") or {}
        leader_epoch = current.get("leader_epoch", -1)
        leader_id = current.get("leader_id", -1)
        if self._observe_epoch(leader_epoch, leader_id, now_ms):
            return
        # Only the leader's own answer can disown it: another voter an observer asks
        # around (`_follower_fetch_target`) may lag an epoch behind.
        if (self.role is Role.FOLLOWER and self._fetch_target == self.leader_id
                and self._disowned_by_leader(leader_epoch, leader_id, now_ms)):
            return
        if (partition["error_code"] or self.role is not Role.FOLLOWER or leader_epoch != self.epoch
                or self._fetch_target != self.leader_id):
            # Errors back off and retry; a follower whose leader resigned or
            # restarted keeps failing until its fetch timeout starts an election.
            self._fetch_failed(now_ms)
            return
        if self._pending_ops:
            raise RaftInvariantError("a follower fetches only with its log applied")
        diverging = partition.get("diverging_epoch") or {}
        snapshot = partition.get("snapshot_id") or {}
        truncate_to: int | None = None
        batches: list[Batch] = []
        # A response the core cannot use is refused before it counts as contact with the leader.
        try:
            if diverging.get("epoch", -1) >= 0 and diverging.get("end_offset", -1) >= 0:
                truncate_to = self._diverging_truncation(diverging["epoch"], diverging["end_offset"])
            elif not (snapshot.get("end_offset", -1) >= 0 and snapshot.get("epoch", -1) >= 0):
                batches = self._decode_fetched(partition.get("records"))
                _check_voter_records(batches)
            elif snapshot["end_offset"] < self.high_watermark:
                raise RaftProtocolError(ErrorCode.INVALID_REQUEST, BAD_RESPONSE,
                                        f"a snapshot ending at {snapshot['end_offset']} would drop committed data "
                                        f"(high watermark {self.high_watermark})")
        except RaftProtocolError:
            self._fetch_failed(now_ms)
            raise
        self._fetch_in_flight = None
        self._fetch_deadline_ms = max(self._fetch_deadline_ms or 0, now_ms + self.config.fetch_timeout_ms)
        self._last_leader_contact_ms = now_ms
        self._leader_fetch_failures = 0
        if truncate_to is not None:
            if truncate_to < self.log.end_offset:
                self._pending_ops.append(TruncateTo(truncate_to))
                previous = self.voters
                self._history.truncate_from(truncate_to)
                self._voters_changed(previous, now_ms)
        elif snapshot.get("end_offset", -1) >= 0 and snapshot.get("epoch", -1) >= 0:
            self._snapshot_download = _SnapshotDownload(SnapshotId(snapshot["end_offset"], snapshot["epoch"]), [])
        else:
            self._append_fetched(batches)
            high_watermark = partition["high_watermark"]
            if high_watermark >= 0:
                self._set_high_watermark(min(high_watermark, self.end_offset))
        self._maybe_send_fetch(now_ms)

    def _disowned_by_leader(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """The node this follower takes for its epoch's leader answered its own Fetch (over
        the connection to its configured address, so it is that node) with an older epoch,
        or naming another leader for this epoch: it never led this epoch. The belief came
        from a spoofed BeginQuorumEpoch; drop it (durably, on its own: the leader of an epoch
        is never replaced in one write) and learn the real one from the next message."""
        if not (0 <= epoch < self.epoch or epoch == self.epoch and leader_id >= 0 and leader_id != self.leader_id):
            return False
        self._persist(QuorumState(epoch=self.epoch, voted_id=self._state.voted_id))
        self._become_unattached(self.epoch, now_ms)
        return True

    def _diverging_truncation(self, epoch: int, end_offset: int) -> int:
        """Where a diverging epoch from the leader truncates the log to."""
        local = self.log.end_offset_for_epoch(epoch)
        if local is None:
            local = EpochEndOffset(self.log.last_epoch, self.log.end_offset)
        offset = min(local.end_offset, end_offset, self.log.end_offset)
        if offset < self.high_watermark:
            raise RaftProtocolError(ErrorCode.INVALID_REQUEST, BAD_RESPONSE,
                                    f"a diverging epoch would truncate committed data "
                                    f"(to {offset}, high watermark {self.high_watermark})")
        # Nothing local can be trusted below the snapshot; fetch from the leader's start.
        return max(offset, self.log.start_offset)

    def _decode_fetched(self, records: object) -> list[Batch]:
        try:
            return self._codec.decode(records)
        except (DecodeError, TypeError, ValueError) as exc:
            raise RaftProtocolError(ErrorCode.CORRUPT_MESSAGE, BAD_RESPONSE, f"fetched records: {exc}") from None

    def _append_fetched(self, batches: list[Batch]) -> None:
        end, last_epoch = self._view_end()
        for batch in batches:
            if batch.next_offset <= end:
                continue  # already have it
            if batch.base_offset != end or batch.epoch < last_epoch or batch.epoch > self.epoch:
                break  # a gap or a misordered batch: refetch from our end
            self._append_control_aware(batch, self._now_ms)
            end, last_epoch = batch.next_offset, batch.epoch

    def _handle_fetch_snapshot_response(self, request_body: Body, response_body: Body | None, now_ms: int) -> None:
        if request_body is not self._fetch_in_flight:
            return
        download = self._snapshot_download
        partition = None if response_body is None or response_body.get("error_code") else \
            m.single_partition(response_body, topic_key="name")
        if partition is None or download is None:
            self._fetch_failed(now_ms)
            return
        current = partition.get("current_leader") or {}
        if self._observe_epoch(current.get("leader_epoch", -1), current.get("leader_id", -1), now_ms):
            return
        error = partition["error_code"]
        if error:
            if error in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE):
                self._snapshot_download = None  # the leader moved on: ask Fetch for the current one
            self._fetch_failed(now_ms)
            return
        self._fetch_in_flight = None
        self._fetch_deadline_ms = max(self._fetch_deadline_ms or 0, now_ms + self.config.fetch_timeout_ms)
        self._last_leader_contact_ms = now_ms
        got = SnapshotId(partition["snapshot_id"]["end_offset"], partition["snapshot_id"]["epoch"])
        size = partition["size"]
        data = bytes(partition["unaligned_records"] or b"")
        if got != download.snapshot_id or partition["position"] != download.position or size > self.config.max_snapshot_bytes:
            self._snapshot_download = None
            self._fetch_failed(now_ms)
            return
        download.chunks.append(data)
        download.position += len(data)
        if download.position > size or (not data and download.position < size):
            self._snapshot_download = None
            self._fetch_failed(now_ms)
            return
        if download.position == size:
            if self.role is Role.LEADER:
                raise RaftInvariantError("a leader never loads a snapshot")
            self._snapshot_download = None
            data = b"".join(download.chunks)
            try:
                level, voter_set = self._snapshot_voters(data)
            except RaftProtocolError:
                self._fetch_failed(now_ms)
                raise
            self._pending_ops.append(InstallSnapshot(download.snapshot_id, data))
            previous = self.voters
            self._history.reset_to_snapshot(download.snapshot_id.end_offset - 1, level, voter_set)
            self._voters_changed(previous, now_ms)
            # A leader only snapshots committed data.
            self._set_high_watermark(download.snapshot_id.end_offset)
        self._maybe_send_fetch(now_ms)


def _check_voter_records(batches: list[Batch]) -> None:
    """Fetched voter records must decode before any of the batches is taken in."""
    for batch in batches:
        if batch.control_type in (ControlRecordType.VOTERS, ControlRecordType.KRAFT_VERSION):
            try:
                voter_control_records([(batch.control_type, value) for value in batch.values])
            except (DecodeError, ValueError) as exc:
                raise RaftProtocolError(ErrorCode.CORRUPT_MESSAGE, BAD_RESPONSE, f"fetched voter records: {exc}") from None


def _apply_control(history: VoterHistory, batch: Batch) -> None:
    """What a control batch says about the voters, into `history` (KRaft writes one control
    type per batch here; other control batches say nothing about voters)."""
    if batch.control_type is None:
        return
    for index, value in enumerate(batch.values):
        history.apply_control(batch.base_offset + index, batch.control_type, value)


def _copy_replica(state: ReplicaState) -> ReplicaState:
    return dataclasses.replace(state)
