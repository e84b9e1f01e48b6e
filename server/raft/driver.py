"""The trio shell around the Raft core: one task owns the core and does its I/O.

Owns: `RaftDriver` (the task that feeds the core inbound requests, responses,
proposals and timer ticks, and carries out every `Ready`), the outbound
`PeerConnection`s to the other voters, the waiters for proposals and for the
high watermark, `CommittedReader` (the committed entries, in order, for the
controller to replay) and the raft.* log events.

The contract with the core, for every Ready, in this order:
  1. persist `quorum_state` (fsync + atomic rename, in a worker thread);
  2. apply `log_ops`. A follower's or observer's (truncate / append / install
     snapshot) are durable when `apply` returns, which meets
     `flush_before_send`. A leader's (appends only) are staged in memory: the
     leader sends before its own fsync, as KRaft allows;
  3. a node that is not leader sends nothing while it has a staged tail (a
     former leader's is made durable first: its fetch offset and its votes
     speak for it);
  4. release answers and send requests/responses;
  5. `advance(ready, flushed end offset, now)`.
A leader's staged tail is written and fsynced by the driver's writer thread
(one OS thread for the driver's lifetime, fed by a queue), one write at a time
(appends staged meanwhile share the next fsync); its completion comes back
into the inbox and the driver task calls `note_flushed`. The core counts the leader toward the high
watermark only up to its flushed end, so a commit always rests on a majority
of durable copies, and the leader's commit path has no worker-thread hop.

Rules kept here:
- Only the driver task calls the core. Everyone else hands it an input over a
  bounded channel (backpressure, not unbounded queues) and waits for a reply;
  properties (`role`, `epoch`, `high_watermark`, ...) are plain reads. Inbound
  RPCs are offered without waiting (`offer_request`): the driver calls the
  dispatcher's `answer`, so no task per request waits; with the inbox full the
  requester is told BROKER_NOT_AVAILABLE and retries.
- Persist before acting: an answer the core gives at once (a vote grant, a
  BeginQuorumEpoch ack) is held back until the state it depends on is
  durable, i.e. until the Ready that follows it has been persisted.
- A response is matched to its request by the identity of the request body:
  the exact object from the Ready goes back to `handle_response`.
- A request that fails or times out is reported as `None`.
- Time is trio's clock in whole milliseconds; timers are `next_deadline_ms()`.
- A storage failure (a write or fsync raising: ENOSPC, EIO) takes the log
  *offline*, never the node: the core is discarded (its view of the log may
  hold what never became durable); a leader sends EndQuorumEpoch so the
  others elect at once; the waiters of its unfinished proposals get
  `StorageFailedError` (never "committed" for an entry this node could not
  make durable); held and deferred answers become KAFKA_STORAGE_ERROR (a
  follower never acknowledges, a voter never grants, what may not be
  durable). Offline, the driver answers every KRaft request with
  KAFKA_STORAGE_ERROR (retriable) and every proposal or call with
  `StorageFailedError`, and retries the disk with backoff (`storage_retry`,
  100 ms doubling to 5 s): `MetadataRaftLog.reopen` (recovery decides what
  is on disk), then a new core from the persisted quorum state, exactly as a
  restart builds it (a former leader comes back resigned). The high
  watermark this node published never goes back, so the committed reader
  continues where it was; entries it already read are refetched identically
  from the leader. Corruption found on reopen (`CorruptLogError`) is fatal.
- Bounded: the input channel, the inputs taken per round, the Ready rounds
  per drain, and the per-epoch commit marks.
"""

from __future__ import annotations

import errno
import queue
import threading
import time
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import trio

from protocol.errors import KAFKA_ERROR_MESSAGES, ErrorCode
from server.net.peer import BackoffPolicy, PeerAddress, PeerConnection, PeerUnavailable
from server.observability import Event, get_logger
from server.raft import messages as m
from server.raft.core import (
    DEFERRED,
    Append,
    NotLeader,
    QuorumInfo,
    RaftConfig,
    RaftCore,
    RaftProtocolError,
    Ready,
    Role,
)
from server.raft.messages import WIRE_VERSIONS, ZERO_UUID, ApiKey, Body
from server.raft.validate import PeerRules, Refusal, check_request, check_response, refusal_response
from server.raft.storage import MetadataRaftLog, StoredRecordsCodec, decode_stored
from server.storage.log import LogClosedError, LogFailedError, OffsetOutOfRangeError
from server.storage.snapshot import snapshot_path
from server.client import ClientError, KafkaClient
from server.values import SnapshotId
from server.voters import KRAFT_VERSION_MAX, Endpoint, Voter, VoterHistory, VoterSet, snapshot_voter_records

# (error code, message) of a voter change; a None message is Kafka's default text for the code.
VoterChangeAnswer = tuple[ErrorCode, "str | None"]
KRAFT_VERSION_FEATURE = "kraft.version"
UPDATE_RAFT_VOTER = 82

_log = get_logger("raft")

_ROLE_EVENTS = {
    Role.LEADER: Event.RAFT_BECAME_LEADER,
    Role.FOLLOWER: Event.RAFT_BECAME_FOLLOWER,
    Role.CANDIDATE: Event.RAFT_ELECTION_STARTED,
    Role.PROSPECTIVE: Event.RAFT_PRE_VOTE_STARTED,
    Role.UNATTACHED: Event.RAFT_BECAME_UNATTACHED,
    Role.RESIGNED: Event.RAFT_RESIGNED,
}

DEFAULT_INBOX_CAPACITY = 4096
REFUSAL_LOG_LINES_PER_S = 20
# Errors a peer gives when it will never accept this node's KRaft requests as they are.
_PEER_REFUSALS = frozenset({ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.INCONSISTENT_CLUSTER_ID,
                            ErrorCode.INCONSISTENT_VOTER_SET})
PEER_REFUSAL_LOG_INTERVAL_MS = 60_000
# Inputs handed to the core before the next Ready is drained: large enough to
# group many proposals into one append (one fsync), small enough to keep
# answers flowing.
MAX_INPUTS_PER_ROUND = 512
MAX_READY_ROUNDS = 1000
# Leaderships whose final high watermark is remembered for late commit waiters.
MAX_COMMIT_MARKS = 16
# How a node whose log went offline retries its disk (reopen + recovery).
DEFAULT_STORAGE_RETRY = BackoffPolicy(initial_ms=100, max_ms=5_000)


class NotLeaderError(Exception):
    """The node cannot accept (or lost) a proposal: where the leader is, if known."""

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class DriverStopped(Exception):
    """The driver is not running (not started yet, or stopped)."""


class StorageFailedError(NotLeaderError):
    """This node's metadata log is offline after a disk failure (ENOSPC, EIO on a
    write or fsync): it accepts no proposal and acknowledges nothing until the disk
    works again. Retriable. A proposal it ends has an unknown outcome (it may have
    reached a majority through the followers' copies). A NotLeaderError, so callers
    that step aside on a lost leadership keep doing so."""

    def __init__(self, epoch: int, reason: str) -> None:
        super().__init__(None, epoch)
        self.reason = reason
        self.args = (f"the metadata log is offline after a disk failure ({reason})",)


def is_storage_failure(error: BaseException) -> bool:
    """A failed write, fsync or truncation of the log or the quorum-state file (the
    MetadataLog reports its own as LogFailedError from then on, or LogClosedError
    after a reopen that failed)."""
    return isinstance(error, (OSError, LogFailedError, LogClosedError))


def describe_failure(error: BaseException) -> str:
    """`ENOSPC: [Errno 28] No space left on device`, for logs and error messages."""
    if isinstance(error, LogFailedError) and error.__cause__ is not None:
        error = error.__cause__  # the write or fsync that failed the log first
    code = getattr(error, "errno", None)
    name = errno.errorcode.get(code) if isinstance(code, int) else None
    return f"{name}: {error}" if name else repr(error)


class CommittedBatch(NamedTuple):
    """Committed entries base_offset .. base_offset + len(values) - 1, all of `epoch`.

    `control_type` is set for KRaft control batches (LeaderChange, ...): they
    carry no metadata records and the controller skips them."""

    base_offset: int
    epoch: int
    values: tuple[bytes, ...]
    control_type: int | None
    timestamp_ms: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


class SnapshotLoaded(NamedTuple):
    """The reader jumped over a log prefix: load this snapshot file, then continue at its end."""

    snapshot_id: SnapshotId
    path: str


class _Reply:
    __slots__ = ("event", "value", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any) -> None:
        if not self.event.is_set():
            self.value = value
            self.event.set()

    def fail(self, error: BaseException) -> None:
        if not self.event.is_set():
            self.error = error
            self.event.set()


error_response = m.error_response


def _refuse_answer(answer: _Answer) -> None:
    """Answers an inbound KRaft request with KAFKA_STORAGE_ERROR (retriable)."""
    answer.set(error_response(answer._api_key, ErrorCode.KAFKA_STORAGE_ERROR))


class _Answer:
    """An inbound request's reply delivered by calling `answer(body)`: no task waits
    for it (see `offer_request`). `fail` answers BROKER_NOT_AVAILABLE."""

    __slots__ = ("_answer", "_api_key", "_outstanding")

    def __init__(self, answer: Callable[[Body], None], api_key: int, outstanding: set) -> None:
        self._answer = answer
        self._api_key = api_key
        self._outstanding = outstanding

    def set(self, value: Body) -> None:
        if self._answer is not None:
            answer, self._answer = self._answer, None
            self._outstanding.discard(self)
            answer(value)

    def fail(self, error: BaseException) -> None:
        self.set(error_response(self._api_key, ErrorCode.BROKER_NOT_AVAILABLE))


class _Request(NamedTuple):
    sender_id: int
    api_key: int
    body: Body
    reply: _Answer


class _Response(NamedTuple):
    source_id: int
    api_key: int
    request_body: Body
    response_body: Body | None


class _Propose(NamedTuple):
    values: list[bytes]
    reply: _Reply


class _Flushed(NamedTuple):
    """The background write of the leader's staged tail completed (or failed: `error`).
    `generation` names the core it was written for (see `_take_offline`)."""

    generation: int
    error: BaseException | None


class _Offline(NamedTuple):
    """What a node whose log is offline still reports."""

    reason: str
    epoch: int
    # The other node this one followed when the disk failed (None if it led or knew none).
    leader_id: int | None
    since_ms: int


class _Call(NamedTuple):
    """Runs `function(driver)` (sync or async) in the driver task, between Readies."""

    function: Callable[[RaftDriver], Any]
    reply: _Reply


class _WriterThread:
    """The leader's log writer: one OS thread for the driver's lifetime, fed by a queue.
    A write handed to `trio.to_thread` cost the event loop a task, a thread-cache hand-off
    and two scheduling rounds on every commit; here the loop only enqueues, and the
    thread reports back with `run_sync_soon` (the callback runs in the trio thread)."""

    def __init__(self, name: str) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[Any], None], argument: Any,
               done: Callable[[BaseException | None], None]) -> None:
        self._jobs.put((write, argument, done))

    def stop(self) -> None:
        """The thread ends once the writes handed to it before are done."""
        self._jobs.put(None)

    def _work(self) -> None:
        # Bounded: one job per round; `stop` ends it.
        while True:
            job = self._jobs.get()
            if job is None:
                return
            write, argument, done = job
            error: BaseException | None = None
            try:
                write(argument)
            except BaseException as exc:  # reported to the driver, which decides
                error = exc
            try:
                self._token.run_sync_soon(done, error)
            except trio.RunFinishedError:
                return


def trio_now_ms() -> int:
    return math.floor(trio.current_time() * 1000)


class RaftDriver:
    """See the module docstring.

    `quorum_store` is a `FileQuorumStateStore` (or anything with read()/write(state));
    `peers` maps the other voters' ids to their addresses (the node's own id is ignored).
    """

    def __init__(
        self,
        config: RaftConfig,
        storage: MetadataRaftLog,
        quorum_store,
        peers: dict[int, PeerAddress],
        rng: random.Random,
        *,
        client_id: str | None = None,
        peer_backoff: BackoffPolicy = BackoffPolicy(),
        inbox_capacity: int = DEFAULT_INBOX_CAPACITY,
        clock_ms: Callable[[], int] = trio_now_ms,
        on_refusal: Callable[[Refusal], None] | None = None,
        storage_retry: BackoffPolicy = DEFAULT_STORAGE_RETRY,
        on_storage_change: Callable[[bool], None] | None = None,
        listener_name: str | None = None,
        peer_security=None,
        voter_history: VoterHistory | None = None,
    ) -> None:
        self.config = config
        # No static voters: a dynamic quorum's node, which learns the voters from the log.
        self._rules = PeerRules(config.cluster_id, config.node_id, config.voters, dynamic=not config.voters)
        # Dynamic quorums (KIP-853): the controller listener whose endpoint a voter is reached
        # on, and the credentials of connections opened to voters the log adds.
        self._listener_name = listener_name
        self._peer_security = peer_security
        # What the log says of the voters, read once at start-up (the first core takes it;
        # a core rebuilt after a disk failure reads the log again).
        self._initial_history = voter_history
        self._peer_backoff = peer_backoff
        # An AddRaftVoter/RemoveRaftVoter is being handled (Kafka allows one at a time).
        self._voter_change_pending = False
        # How the driver's own appends (voter records) are put in line with the records of
        # the node's controller, which predicts offsets (ControllerLoop.raft_append); None:
        # appended at once.
        self.append_gate: Callable[[Callable[[], Any]], Any] | None = None
        # Told when a controller the log names moved (the node moves its own connections to it).
        self.on_peer_moved: Callable[[PeerAddress], None] | None = None
        # Where this node is reached on the controller listener (the node sets it once bound):
        # its own entry when kraft.version 1 writes the static voters into the log.
        self.own_endpoints: tuple[Endpoint, ...] = ()
        self._on_refusal = on_refusal
        self.storage = storage
        self._store = quorum_store
        self._rng = rng
        self._clock_ms = clock_ms
        self._client_id = client_id or f"kraftwerk-raft-{config.node_id}"
        self._peers = {
            node_id: PeerConnection(address, self._client_id, random.Random(rng.random()), backoff=peer_backoff)
            for node_id, address in sorted(peers.items()) if node_id != config.node_id
        }
        missing = sorted(voter for voter in config.voters if voter != config.node_id and voter not in self._peers)
        if missing:
            raise ValueError(f"no address for voters {missing}")
        self._send_channel, self._receive_channel = trio.open_memory_channel(inbox_capacity)
        self._core: RaftCore | None = None
        self._nursery: trio.Nursery | None = None
        self._running = False
        self._changed = trio.Event()
        # Set on every change except a leader's or follower's plain append and a flush
        # report: what waiters for committed entries follow (the replay task, commit
        # waiters). A plain append moves no high watermark, and waking them for it cost
        # each a task switch per commit.
        self._progress = trio.Event()
        # Set on changes of role, epoch, leader readiness or the voter set only: what the
        # controller's leadership task follows (waking it at every commit cost a task
        # switch each).
        self._role_changed = trio.Event()
        self._leader_ready_seen = False
        self._leader_unreachable_seen = False
        self._last_leader_id: int | None = None
        self._high_watermark = 0
        # Answers the core gave at once, held until the next Ready is persisted.
        self._held: list[tuple[_Answer, Body]] = []
        # Inbound requests not answered yet (for failing them at shutdown).
        self._outstanding: set[_Answer] = set()
        # epoch -> high watermark when this node's leadership of that epoch ended.
        self._commit_marks: dict[int, int] = {}
        self._leader_epoch: int | None = None
        # A background write of the leader's staged tail is running (the writer thread's),
        # or is due at the driver loop's next turn (`_flush_due`).
        self._flushing = False
        self._flush_due = False
        self._writer: _WriterThread | None = None
        self.snapshot_generation = 0
        # Counters for tests, metrics and benchmarks.
        self.appends = 0
        self.appended_batches = 0
        self.quorum_state_writes = 0
        self.requests_sent: dict[ApiKey, int] = {key: 0 for key in ApiKey}
        # Messages refused at the boundary or by the core, by (event, error name).
        self.refused: dict[tuple[str, str], int] = {}
        self._epoch_exhausted_logged = False
        # (event, api key, error) -> (second, lines logged in it, refusals not logged since).
        self._refusal_log: dict[tuple[str, int, str], tuple[int, int, int]] = {}
        # (peer, error) -> when this node last logged that the peer refuses it.
        self._peer_refusal_logged_ms: dict[tuple[int, int], int] = {}
        # -- storage failures (see the module docstring) --
        self._storage_retry = storage_retry
        # Called with True when the log goes offline, False when it is back (metrics).
        self._on_storage_change = on_storage_change
        # Set while the log is offline: what the node still reports meanwhile.
        self._offline: _Offline | None = None
        # Bumped whenever a core is discarded or built: background writes and responses
        # from an older generation are for a core that no longer exists.
        self._generation = 0
        # Inputs taken from the inbox but not handled when a storage failure struck.
        self._unhandled: list = []
        # epoch -> why this node's leadership of that epoch ended in a storage failure.
        self._failed_leaderships: dict[int, str] = {}
        self._storage_attempt = 0
        self._online_since_ms = 0
        self._retry_rng: random.Random | None = None
        self.storage_failures = 0
        # Reopen attempts that failed (the disk still refused a write), over the node's life.
        self.storage_recovery_failures = 0

    # ------------------------------------------------------------------
    # State (plain reads, any task)
    # ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def role(self) -> Role:
        return self._core.role if self._core is not None else Role.UNATTACHED

    @property
    def epoch(self) -> int:
        return self._core.epoch if self._core is not None else self._store.read().epoch

    @property
    def leader_id(self) -> int | None:
        if self._core is not None:
            return self._core.leader_id
        # Offline: the other node this one last followed (never itself), so clients re-route.
        return self._offline.leader_id if self._offline is not None else None

    @property
    def last_leader_id(self) -> int | None:
        """The leader now, or else the last one this node knew of (None if it never knew
        one): what a client is told while an election runs (see ControllerNode)."""
        leader = self.leader_id
        return leader if leader is not None else self._last_leader_id

    @property
    def leader_unreachable(self) -> bool:
        """This follower's last fetches to its leader all failed (see RaftCore)."""
        return self._core is not None and self._core.leader_unreachable

    @property
    def storage_offline(self) -> bool:
        """True while the log is offline after a disk failure (see the module docstring)."""
        return self._offline is not None

    @property
    def storage_error(self) -> str | None:
        """Why the log is offline (None while it is not)."""
        return self._offline.reason if self._offline is not None else None

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def high_watermark(self) -> int:
        """Entries below this offset are committed (and applied to this node's log)."""
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        """End of this node's log (on a leader it may include appends not fsynced yet:
        see `flushed_end_offset`)."""
        return self.storage.end_offset

    @property
    def flushed_end_offset(self) -> int:
        """End of the durable (written and fsynced) part of this node's log."""
        return self.storage.flushed_end_offset

    @property
    def next_offset(self) -> int:
        """The offset the next proposal gets on the leader (includes accepted, unwritten proposals)."""
        return self._core.end_offset if self._core is not None else self.storage.end_offset

    @property
    def epoch_start_offset(self) -> int:
        """On the leader: the offset of its epoch's LeaderChange record (-1 otherwise)."""
        core = self._core
        return core.epoch_start_offset if core is not None and core.role is Role.LEADER else -1

    @property
    def leader_ready(self) -> bool:
        """Leader whose high watermark passed its epoch start: everything before its epoch is
        committed, so a controller that has replayed up to the high watermark may accept writes."""
        core = self._core
        return core is not None and core.role is Role.LEADER and core.leader_high_watermark is not None

    def describe(self) -> QuorumInfo:
        if self._core is None:
            raise DriverStopped("the raft driver has not started")
        return self._core.describe()

    def describe_partition(self, wall_clock_ms: int) -> dict:
        """The DescribeQuorum partition (v0-v2 shape). Only the leader knows the
        replicas; others answer NOT_LEADER_OR_FOLLOWER with what they know."""
        core = self._core
        if core is None or core.role is not Role.LEADER:
            return {"partition_index": 0, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                    "error_message": None, "leader_id": -1 if self.leader_id is None else self.leader_id,
                    "leader_epoch": self.epoch, "high_watermark": self._high_watermark,
                    "current_voters": [], "observers": []}
        now = self._clock_ms()
        info = core.describe()

        def wall(monotonic_ms: int) -> int:
            return -1 if monotonic_ms < 0 else wall_clock_ms - (now - monotonic_ms)

        def replica(node_id: int, state) -> dict:
            # DescribeQuorum v2 (KIP-853): a voter's directory id is the voter set's, an
            # observer's what its fetches named.
            voter = info.voter_set.get(node_id)
            if voter is not None:
                directory_id = voter.directory_id  # None for a static voter, as Kafka shows it
            else:
                directory_id = self.config.directory_id if node_id == self.config.node_id else state.directory_id
            if node_id == self.config.node_id:
                return {"replica_id": node_id, "replica_directory_id": directory_id or ZERO_UUID,
                        "log_end_offset": self.storage.end_offset,
                        "last_fetch_timestamp": wall_clock_ms, "last_caught_up_timestamp": wall_clock_ms}
            return {"replica_id": node_id, "replica_directory_id": directory_id or ZERO_UUID,
                    "log_end_offset": state.end_offset,
                    "last_fetch_timestamp": wall(state.last_fetch_ms),
                    "last_caught_up_timestamp": wall(state.last_caught_up_ms)}

        return {
            "partition_index": 0, "error_code": 0, "error_message": None,
            "leader_id": self.config.node_id, "leader_epoch": info.epoch,
            "high_watermark": info.high_watermark,
            "current_voters": [replica(node, state) for node, state in sorted(info.voters.items())],
            "observers": [replica(node, state) for node, state in sorted(info.observers.items())],
        }

    def peer(self, node_id: int) -> PeerConnection | None:
        """The connection to another voter (e.g. to forward a request to the leader)."""
        return self._peers.get(node_id)

    def peer_address(self, node_id: int) -> PeerAddress | None:
        peer = self._peers.get(node_id)
        return peer.address if peer is not None else None

    @property
    def kraft_version(self) -> int | None:
        return self._core.kraft_version if self._core is not None else None

    @property
    def dynamic_voters(self) -> VoterSet | None:
        """The voter set the log holds at kraft.version 1 (KIP-853); None for static voters."""
        core = self._core
        if core is None or core.kraft_version < 1:
            return None
        return core.voters

    async def wait_changed(self) -> None:
        """Returns at the next change of role, epoch, leader, high watermark, snapshot,
        of the leader's flushed end offset or of `leader_unreachable`."""
        await self._changed.wait()

    async def wait_role_changed(self) -> None:
        """Returns at the next change of role, epoch, leader, `leader_ready` or the voter
        set (and when the driver stops)."""
        await self._role_changed.wait()

    def _notify(self, role: bool = False, progress: bool = True) -> None:
        if self.leader_id is not None:
            self._last_leader_id = self.leader_id
        self._changed.set()
        self._changed = trio.Event()
        if progress or role:
            self._progress.set()
            self._progress = trio.Event()
        if role:
            self._role_changed.set()
            self._role_changed = trio.Event()

    # ------------------------------------------------------------------
    # API for the controller and the RPC handlers
    # ------------------------------------------------------------------

    async def propose(self, values: list[bytes]) -> tuple[int, int]:
        """Appends `values` as one batch on the leader; returns (base offset, epoch).

        Returns once the core accepted them (not yet durable or committed: see
        `wait_committed`). Raises NotLeaderError where this node is not leader."""
        if not values:
            raise ValueError("propose needs at least one value")
        if self._offline is not None:
            raise self._storage_failed_error()
        reply = _Reply()
        await self._submit(_Propose(list(values), reply))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.value

    async def wait_committed(self, offset: int, epoch: int | None = None) -> None:
        """Waits until `offset` is committed.

        With the `epoch` that `propose` returned: raises NotLeaderError if this
        node stops being leader of that epoch before the entry commits. The
        outcome is then unknown (a later leader may still commit it), as with
        Kafka's NOT_CONTROLLER: callers report failure and clients retry."""
        # Bounded: each round waits for a change of the driver's state.
        while True:
            if epoch is None:
                if self._high_watermark > offset:
                    return
            else:
                mark = self._commit_marks.get(epoch)
                # Leadership as the driver has published it, not the core's live role: the
                # core can end a leadership in the same step that commits an entry (a leader
                # committing its own removal resigns at once), and a waiter woken before that
                # step's Ready is processed must still see the commit, which the Ready's
                # commit mark records.
                leading = self._leader_epoch == epoch
                if leading and self._high_watermark > offset:
                    return
                if not leading:
                    if mark is not None and mark > offset:
                        return
                    failure = self._failed_leaderships.get(epoch)
                    if failure is not None:
                        raise StorageFailedError(epoch, failure)
                    raise NotLeaderError(self.leader_id, self.epoch)
            if not self._running:
                await trio.lowlevel.checkpoint_if_cancelled()
                raise DriverStopped("the raft driver stopped")
            await self._progress.wait()

    def offer_request(self, sender_id: int, api_key: int, body: Body, answer: Callable[[Body], None]) -> None:
        """Hands an inbound KRaft RPC to the driver task without waiting (what
        server/raft/rpc.py calls); `answer(response body)` is called exactly once: by
        the driver task once the answer's state is durable, or at once with
        BROKER_NOT_AVAILABLE when the driver is not running, its inbox is full (the
        requester retries), or it stops first."""
        refusal = check_request(api_key, body, self._rules)
        if refusal is not None:
            # Refused on the caller's task: a hostile frame never reaches the core's inbox.
            self._note_refusal(refusal, sender_id)
            answer(refusal_response(refusal))
            return
        reply = _Answer(answer, int(api_key), self._outstanding)
        if not self._running:
            reply.fail(DriverStopped("the raft driver is not running"))
            return
        self._outstanding.add(reply)
        try:
            self._send_channel.send_nowait(_Request(sender_id, int(api_key), body, reply))
        except (trio.WouldBlock, trio.ClosedResourceError):
            reply.fail(DriverStopped("the raft driver cannot take the request"))

    def _note_refused_by_peer(self, peer_id: int, api_key: int, error_code: int, now_ms: int) -> None:
        """A peer refuses this node's KRaft requests (a wrong principal or super.users, another
        cluster's id): say so on this side too, once a minute per peer and error."""
        key = (peer_id, error_code)
        if now_ms < self._peer_refusal_logged_ms.get(key, -PEER_REFUSAL_LOG_INTERVAL_MS) + PEER_REFUSAL_LOG_INTERVAL_MS:
            return
        self._peer_refusal_logged_ms[key] = now_ms
        _log.error(Event.RAFT_REFUSED_BY_PEER, node_id=self.config.node_id, peer_id=peer_id, api_key=int(api_key),
                   error=ErrorCode(error_code).name)

    def _note_refusal(self, refusal: Refusal, sender_id: int) -> None:
        key = (refusal.event, refusal.error.name)
        self.refused[key] = self.refused.get(key, 0) + 1
        if self._on_refusal is not None:
            self._on_refusal(refusal)
        # A flood of hostile frames must not become a flood of log lines: at most
        # REFUSAL_LOG_LINES_PER_S lines per second for each kind of refusal (event, API,
        # error); the metric counts them all, and the next line says how many were not logged.
        kind = (refusal.event, int(refusal.api_key), refusal.error.name)
        now_s = self._clock_ms() // 1000
        window_s, logged, suppressed = self._refusal_log.get(kind, (now_s, 0, 0))
        if window_s != now_s:
            window_s, logged = now_s, 0
        if logged >= REFUSAL_LOG_LINES_PER_S:
            self._refusal_log[kind] = (window_s, logged, suppressed + 1)
            return
        self._refusal_log[kind] = (window_s, logged + 1, 0)
        _log.warning(refusal.event, node_id=self.config.node_id, api_key=int(refusal.api_key),
                     sender_id=sender_id, error=refusal.error.name, reason=refusal.reason,
                     not_logged_before=suppressed)

    async def resign(self) -> None:
        """Graceful shutdown of a leader: EndQuorumEpoch to the others, so they elect at once.
        A node whose log is offline has already resigned (see `_take_offline`)."""
        try:
            await self.call(lambda driver: driver._core.resign(driver._clock_ms()))
        except StorageFailedError:
            pass

    async def compact(self, snapshot_id: SnapshotId) -> int:
        """After the controller wrote snapshot file `snapshot_id` (committed state only):
        make it the snapshot followers fetch and delete the log before it. Returns the new log start."""
        if snapshot_id.end_offset > self._high_watermark:
            raise ValueError(f"snapshot {snapshot_id} is beyond the high watermark {self._high_watermark}")

        async def run(driver: RaftDriver) -> int:
            latest = driver.storage.latest_snapshot_id()
            if latest is not None and latest > snapshot_id:
                # A snapshot the leader sent was installed meanwhile (a follower far behind):
                # it already moved the log start past this one, and deleted older files.
                return driver.storage.start_offset
            start = await driver.storage.compact(snapshot_id)
            _log.info(Event.RAFT_LOG_COMPACTED, node_id=driver.config.node_id, end_offset=snapshot_id.end_offset,
                      epoch=snapshot_id.epoch, log_start_offset=start)
            driver._notify()
            return start

        try:
            return await self.call(run)
        except StorageFailedError:
            # The log is (or went) offline: the snapshot file stands, and the next
            # snapshot after the disk recovers moves the log start.
            return self.storage.start_offset

    async def call(self, function: Callable[[RaftDriver], Any]) -> Any:
        """Runs `function(driver)` in the driver task (between Readies); returns its result."""
        reply = _Reply()
        await self._submit(_Call(function, reply))
        await reply.event.wait()
        if reply.error is not None:
            raise reply.error
        return reply.value

    def committed_reader(self, from_offset: int, max_bytes: int = 1024 * 1024) -> CommittedReader:
        return CommittedReader(self, from_offset, max_bytes)

    async def _submit(self, item) -> None:
        if not self._running:
            raise DriverStopped("the raft driver is not running")
        try:
            try:
                # No scheduling round when there is room (callers wait for the reply next).
                self._send_channel.send_nowait(item)
            except trio.WouldBlock:
                await self._send_channel.send(item)
        except trio.ClosedResourceError:
            raise DriverStopped("the raft driver stopped") from None

    # ------------------------------------------------------------------
    # The driver task
    # ------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Runs until cancelled (or a storage failure, which propagates)."""
        if self._core is not None:
            raise RuntimeError("a RaftDriver runs once; build a new one to restart")
        now = self._clock_ms()
        self._core = self._new_core(now)
        self._high_watermark = self._core.high_watermark
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for peer in self._peers.values():
                    await nursery.start(peer.run)
                self._follow_voters(self._core)
                nursery.start_soon(self._keep_own_entry_current)
                self._writer = _WriterThread(f"raft-writer-{self.config.node_id}")
                self._running = True
                core = self._core
                _log.info(Event.RAFT_DRIVER_STARTED, node_id=self.config.node_id, epoch=core.epoch,
                          voters=sorted(core.voters.ids), kraft_version=core.kraft_version,
                          log_start_offset=self.storage.start_offset, log_end_offset=self.storage.end_offset)
                if core.kraft_version >= 1:
                    _log.info(Event.RAFT_VOTERS_CHANGED, node_id=self.config.node_id, voters=sorted(core.voters.ids),
                              kraft_version=core.kraft_version, is_voter=core.is_voter)
                task_status.started()
                await self._serve()
        finally:
            self._running = False
            self._nursery = None
            if self._writer is not None:
                self._writer.stop()
                # A write in flight finishes before the log can be closed or reopened.
                with trio.CancelScope(shield=True):
                    await self.storage.wait_writer()
            for reply in list(self._outstanding):
                reply.fail(DriverStopped("the raft driver stopped"))
            for reply, _ in self._held:
                reply.fail(DriverStopped("the raft driver stopped"))
            self._held = []
            # Wakes submitters blocked on a full channel (ClosedResourceError -> DriverStopped).
            self._send_channel.close()
            self._fail_queued()
            self._notify(role=True)
            _log.info(Event.RAFT_DRIVER_STOPPED, node_id=self.config.node_id)

    def _fail_queued(self) -> None:
        # Bounded by the channel capacity.
        while True:
            try:
                item = self._receive_channel.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            reply = getattr(item, "reply", None)
            if reply is not None:
                reply.fail(DriverStopped("the raft driver stopped"))

    def _follow_voters(self, core: RaftCore) -> None:
        """A voter set from the log (kraft.version 1): the boundary rules follow it, and the
        voters it adds get connections (before this Ready's requests to them go out)."""
        if core.kraft_version < 1 and core.voters.ids == self.config.voters:
            return
        self._rules = PeerRules(self.config.cluster_id, self.config.node_id, core.voters.ids, dynamic=True)
        for voter in core.voters:
            self.learn_address(voter.node_id, voter.endpoints)

    def learn_address(self, node_id: int, endpoints) -> None:
        """A connection to `node_id` at the endpoint of the controller listener (or its first
        endpoint) among `endpoints` (server.voters.Endpoint); one that exists moves there."""
        if node_id == self.config.node_id or not endpoints:
            return
        endpoint = next((e for e in endpoints if e.name == self._listener_name), endpoints[0])
        address = PeerAddress(node_id, endpoint.host, endpoint.port)
        existing = self._peers.get(node_id)
        if existing is not None:
            if existing.address != address and self._nursery is not None:
                _log.info(Event.RAFT_PEER_MOVED, node_id=self.config.node_id, peer_id=node_id, host=address.host,
                          port=address.port)
                self._nursery.start_soon(existing.move_to, address)
                if self.on_peer_moved is not None:
                    self.on_peer_moved(address)
            return
        peer = PeerConnection(address, self._client_id, random.Random(self._rng.random()), backoff=self._peer_backoff)
        peer.security = self._peer_security
        self._peers[node_id] = peer
        _log.info(Event.RAFT_PEER_ADDED, node_id=self.config.node_id, peer_id=node_id, host=endpoint.host,
                  port=endpoint.port)
        if self._nursery is not None:
            self._nursery.start_soon(peer.run)

    # -- voter changes (KIP-853), on the leader ------------------------------------------

    async def add_voter(self, voter_id: int, directory_id: uuid.UUID | None, endpoints: tuple[Endpoint, ...],
                        ack_when_committed: bool = True, cluster_id: str | None = None) -> VoterChangeAnswer:
        """AddRaftVoter: Kafka's checks in Kafka's order; the new voter is asked its
        ApiVersions (it must support the finalized kraft.version) and must be a caught-up
        observer; the answer comes once the new voter set commits (at once without
        `ack_when_committed`), bounded by the request timeout."""
        refusal = self._voter_request_refusal(voter_id, directory_id, endpoints, "Add", cluster_id)
        if refusal is None:
            refusal = await self.call(lambda driver: driver._core.add_voter_refusal(
                Voter(voter_id, directory_id), driver._voter_change_pending))
        if refusal is not None:
            return self._refused(refusal, "add", voter_id)
        self._voter_change_pending = True
        try:
            with trio.move_on_after(self.config.request_timeout_ms / 1000):
                candidate = Voter(voter_id, directory_id, endpoints)
                probed = await self._probe_new_voter(candidate)
                if isinstance(probed, tuple):
                    return self._refused(probed, "add", voter_id)
                result = await self._gated_call(
                    lambda driver: (driver._core.epoch, driver._core.add_voter(probed, driver._clock_ms())))
                return await self._await_voter_change(result, "add", voter_id, ack_when_committed)
            return self._refused((ErrorCode.REQUEST_TIMED_OUT, None), "add", voter_id)
        finally:
            self._voter_change_pending = False

    async def remove_voter(self, voter_id: int, directory_id: uuid.UUID | None,
                           cluster_id: str | None = None) -> VoterChangeAnswer:
        """RemoveRaftVoter: as `add_voter`, without the new voter's checks; a leader that
        removes itself resigns once the change commits (the Raft core does)."""
        refusal = self._voter_request_refusal(voter_id, directory_id, None, "Remove", cluster_id)
        if refusal is not None:
            return self._refused(refusal, "remove", voter_id)
        result = await self._gated_call(lambda driver: (driver._core.epoch, driver._core.remove_voter(
            voter_id, directory_id, driver._clock_ms(), driver._voter_change_pending)))
        self._voter_change_pending = True
        try:
            with trio.move_on_after(self.config.request_timeout_ms / 1000):
                return await self._await_voter_change(result, "remove", voter_id, True)
            return self._refused((ErrorCode.REQUEST_TIMED_OUT, None), "remove", voter_id)
        finally:
            self._voter_change_pending = False

    async def update_voter(self, voter_id: int, directory_id: uuid.UUID | None, endpoints: tuple[Endpoint, ...],
                           kraft_version_range: tuple[int, int], request_epoch: int,
                           cluster_id: str | None = None) -> ErrorCode:
        """UpdateRaftVoter (KIP-853): a voter tells the leader where it is reached now and what
        kraft.version it supports; at kraft.version 1 the voter set is rewritten with it
        (answered at once, as Kafka does)."""
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if not any(self._listener_name is None or endpoint.name == self._listener_name for endpoint in endpoints):
            return ErrorCode.INVALID_REQUEST
        low, high = kraft_version_range
        voter = Voter(voter_id, directory_id, endpoints, low, high)
        outcome = await self._gated_call(lambda driver: driver._core.update_voter(
            voter, request_epoch, driver._clock_ms(), driver._voter_change_pending))
        if isinstance(outcome, tuple):
            return outcome[0]
        if outcome is not None:
            _log.info(Event.RAFT_VOTERS_CHANGED, node_id=self.config.node_id, voters=sorted(self._core.voters.ids),
                      kraft_version=self._core.kraft_version, is_voter=self._core.is_voter, updated=voter_id)
        return ErrorCode.NONE

    def leader_endpoint(self) -> Endpoint | None:
        """Where this node is reached as the leader (UpdateRaftVoter's CurrentLeader)."""
        return next((e for e in self.own_endpoints if e.name == self._listener_name),
                    self.own_endpoints[0] if self.own_endpoints else None)

    async def _keep_own_entry_current(self) -> None:
        """A follower voter whose entry in the log's voter set is not where it is reached now
        (its listener moved) asks the leader to update it (UpdateRaftVoter), at most once per
        fetch timeout, as Kafka's voters do."""
        interval_s = self.config.fetch_timeout_ms / 1000
        # Bounded: every round waits for a change of role, leader or voter set, or the interval.
        while True:
            with trio.move_on_after(interval_s):
                await self._role_changed.wait()
            core = self._core
            if core is None or core.role is not Role.FOLLOWER or core.kraft_version < 1 or not self.own_endpoints:
                continue
            me = core.voters.get(self.config.node_id)
            wanted = Voter(self.config.node_id, self.config.directory_id, self.own_endpoints, 0, KRAFT_VERSION_MAX)
            if me is None or not core.is_voter or me == wanted:
                continue
            peer = self._peers.get(core.leader_id) if core.leader_id is not None else None
            if peer is None:
                continue
            body = {"cluster_id": self.config.cluster_id, "current_leader_epoch": core.epoch,
                    "voter_id": self.config.node_id, "voter_directory_id": self.config.directory_id,
                    "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in self.own_endpoints],
                    "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": KRAFT_VERSION_MAX}}
            try:
                response = await peer.request(UPDATE_RAFT_VOTER, body, self.config.request_timeout_ms / 1000,
                                              version=0)
            except (PeerUnavailable, trio.TooSlowError):
                continue
            _log.info(Event.RAFT_VOTER_UPDATE_SENT, node_id=self.config.node_id, leader_id=core.leader_id,
                      error=ErrorCode(getattr(response, "error_code", 0)).name)
            # Asked at most once per interval, whatever the answer (Kafka's pace).
            await trio.sleep(interval_s)

    async def upgrade_kraft_version(self, level: int, validate_only: bool = False) -> VoterChangeAnswer:
        """kraft.version 0 -> 1 on the leader (UpdateFeatures, KIP-853): the static voters go
        into the log with the directory ids their fetches named, the endpoints this node
        reaches them at and the kraft.version ranges their ApiVersions gave. Answers once the
        records commit (at once for `validate_only`)."""
        def upgrade(driver: RaftDriver):
            core = driver._core
            return core.epoch, core.upgrade_kraft_version(level, driver._static_voter_set(), driver._clock_ms(),
                                                          validate_only)
        epoch, outcome = await self._gated_call(upgrade)
        if outcome is None:
            return ErrorCode.NONE, None
        if isinstance(outcome, tuple):
            return outcome
        try:
            with trio.fail_after(self.config.request_timeout_ms / 1000):
                await self.wait_committed(outcome, epoch)
        except (NotLeaderError, StorageFailedError, DriverStopped):
            return ErrorCode.NOT_CONTROLLER, None
        except trio.TooSlowError:
            return ErrorCode.REQUEST_TIMED_OUT, None
        _log.info(Event.RAFT_VOTERS_CHANGED, node_id=self.config.node_id, voters=sorted(self._core.voters.ids),
                  kraft_version=level, is_voter=self._core.is_voter)
        return ErrorCode.NONE, None

    def _static_voter_set(self) -> VoterSet:
        """The voters as the leader knows them at kraft.version 0, with what KIP-853 records of each."""
        core = self._core
        states = core.describe().voters
        voters = []
        for voter_id in sorted(core.voters.ids):
            if voter_id == self.config.node_id:
                voters.append(Voter(voter_id, self.config.directory_id, self.own_endpoints, 0, KRAFT_VERSION_MAX))
                continue
            state = states.get(voter_id)
            peer = self._peers.get(voter_id)
            low, high = (peer.supported_features or {}).get(KRAFT_VERSION_FEATURE, (0, 0)) if peer else (0, 0)
            endpoints = ((Endpoint(self._listener_name or "", peer.address.host, peer.address.port),)
                         if peer is not None else ())
            voters.append(Voter(voter_id, state.directory_id if state is not None else None, endpoints, low, high))
        return VoterSet(tuple(voters))

    async def _gated_call(self, function: Callable[[RaftDriver], Any]) -> Any:
        gate = self.append_gate
        if gate is None:
            return await self.call(function)
        return await gate(lambda: self.call(function))

    def _voter_request_refusal(self, voter_id: int, directory_id: uuid.UUID | None,
                               endpoints: tuple[Endpoint, ...] | None, verb: str,
                               cluster_id: str | None) -> VoterChangeAnswer | None:
        own = self.config.cluster_id
        if cluster_id is not None and cluster_id != own:
            return ErrorCode.INCONSISTENT_CLUSTER_ID, f'The given id "{cluster_id}" doesn\'t match the cluster id "{own}"'
        core = self._core
        if core is None or core.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, ""  # Kafka's pre-check: the code alone
        if voter_id < 0 or directory_id is None:
            return ErrorCode.INVALID_REQUEST, f"{verb} voter request didn't include a valid voter"
        if endpoints is not None and not any(
                self._listener_name is None or endpoint.name == self._listener_name for endpoint in endpoints):
            shown = ", ".join(f"ListenerName({e.name})={e.host}:{e.port}" for e in endpoints)
            return (ErrorCode.INVALID_REQUEST, f"Add voter request didn't include the endpoint "
                                               f"(Endpoints(endpoints={{{shown}}})) for the default listener "
                                               f"ListenerName({self._listener_name})")
        return None

    async def _probe_new_voter(self, voter: Voter) -> Voter | VoterChangeAnswer:
        """Kafka asks the new voter its ApiVersions on the default listener: it must answer
        and support the finalized kraft.version. Returns the voter with its supported range."""
        endpoint = next((e for e in voter.endpoints if e.name == self._listener_name), voter.endpoints[0])
        try:
            async with await KafkaClient.connect(endpoint.host, endpoint.port, client_id=self._client_id,
                                                 security=self._peer_security,
                                                 timeout_s=self.config.request_timeout_ms / 1000) as client:
                response = client.api_versions_response
        except (ClientError, OSError, trio.TooSlowError):
            return (ErrorCode.REQUEST_TIMED_OUT,
                    "Aborted add voter operation for since API_VERSIONS returned an error BROKER_NOT_AVAILABLE")
        feature = next((f for f in getattr(response, "supported_features", None) or ()
                        if f.name == KRAFT_VERSION_FEATURE), None)
        low, high = (feature.min_version, feature.max_version) if feature is not None else (0, 0)
        level = self._core.kraft_version if self._core is not None else 0
        if not low <= level <= high:
            return (ErrorCode.INVALID_REQUEST,
                    f"Aborted add voter operation for {voter.describe()} since the kraft.version range "
                    f"(min: {low}, max: {high} doesn't support the finalized version {level}")
        return Voter(voter.node_id, voter.directory_id, voter.endpoints, low, high)

    async def _await_voter_change(self, result, verb: str, voter_id: int, ack_when_committed: bool) -> VoterChangeAnswer:
        epoch, outcome = result
        if isinstance(outcome, tuple):
            return self._refused(outcome, verb, voter_id)
        if ack_when_committed:
            try:
                await self.wait_committed(outcome, epoch)
            except (NotLeaderError, StorageFailedError, DriverStopped):
                return self._refused((ErrorCode.NOT_LEADER_OR_FOLLOWER, None), verb, voter_id)
        _log.info(Event.RAFT_VOTER_CHANGE_COMMITTED, node_id=self.config.node_id, change=verb, voter_id=voter_id,
                  offset=outcome, voters=sorted(self._core.voters.ids) if self._core is not None else None)
        return ErrorCode.NONE, None

    def _refused(self, refusal: VoterChangeAnswer, verb: str, voter_id: int) -> VoterChangeAnswer:
        error, message = refusal
        if message is None:
            message = KAFKA_ERROR_MESSAGES.get(error, "")
        _log.info(Event.RAFT_VOTER_CHANGE_REFUSED, node_id=self.config.node_id, change=verb, voter_id=voter_id,
                  error=ErrorCode(error).name, message=message)
        return error, message

    def _with_leader_endpoint(self, api_key: int, body: Body) -> Body:
        """A Fetch answer names where the leader it names can be reached (NodeEndpoints, Fetch
        v16+): how a controller that knows only bootstrap servers finds it (KIP-853)."""
        core = self._core
        if api_key != ApiKey.FETCH or core is None or core.kraft_version < 1 or core.leader_id is None:
            return body
        leader = core.voters.get(core.leader_id)
        endpoint = (next((e for e in leader.endpoints if e.name == self._listener_name), None)
                    if leader is not None else None)
        if endpoint is None or not body.get("responses"):
            return body
        return {**body, "node_endpoints": [{"node_id": leader.node_id, "host": endpoint.host,
                                            "port": endpoint.port, "rack": None}]}

    def snapshot_voter_records(self, end_offset: int) -> list[tuple[int, bytes]]:
        """The control records a snapshot ending at `end_offset` carries in its header: the
        kraft.version and the voters in effect at its last entry (empty at kraft.version 0)."""
        core = self._core
        if core is None:
            return []
        history = core.voter_history
        last = end_offset - 1
        level = history.kraft_version_at(last)
        return snapshot_voter_records(level, history.at(last) if history.has_voters_record_at(last) else None)

    def _new_core(self, now_ms: int) -> RaftCore:
        """A core from the persisted quorum state and the log as it is on disk. Its
        batches are stamped with wall-clock time (RaftConfig.timestamp_offset_ms)."""
        config = replace(self.config, timestamp_offset_ms=time.time_ns() // 1_000_000 - now_ms)
        history, self._initial_history = self._initial_history, None
        return RaftCore(config, self.storage, self._store.read(), self._rng, now_ms, StoredRecordsCodec(), history)

    async def _serve(self) -> None:
        """The driver loop, which a storage failure interrupts: the log goes offline
        until `_recover` has the disk back, then the loop resumes with a new core.
        Bounded in time: every failure is followed by at least one backoff delay."""
        while True:
            try:
                await self._loop()
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise
                self._take_offline(exc)
                await self._recover()

    async def _loop(self) -> None:
        core = self._core
        assert core is not None
        while True:
            await self._drain()
            if self._flush_due:
                # The Fetch answers the last Ready released leave first: the writer thread
                # would otherwise take the GIL from their sends (its Python runs before
                # its first system call), right on the commit path.
                await trio.lowlevel.checkpoint()
                self._hand_to_writer()
            deadline_ms = core.next_deadline_ms()
            items = self._take_ready_inputs()
            if not items:
                now = self._clock_ms()
                if deadline_ms is None:
                    items.append(await self._receive_channel.receive())
                elif deadline_ms > now:
                    # Half a millisecond late, so that the floored clock has reached the deadline.
                    with trio.move_on_at((deadline_ms + 0.5) / 1000):
                        items.append(await self._receive_channel.receive())
                items.extend(self._take_ready_inputs(MAX_INPUTS_PER_ROUND - len(items)))
            now = self._clock_ms()
            for index, item in enumerate(items):
                try:
                    await self._handle_input(item, now)
                except Exception:
                    # Answered by `_take_offline` if this is a storage failure.
                    self._unhandled = items[index:]
                    raise
            if deadline_ms is not None and now >= deadline_ms:
                core.tick(now)

    def _take_ready_inputs(self, limit: int = MAX_INPUTS_PER_ROUND) -> list:
        items = []
        while len(items) < limit:
            try:
                items.append(self._receive_channel.receive_nowait())
            except trio.WouldBlock:
                break
        return items

    async def _handle_input(self, item, now: int) -> None:
        core = self._core
        assert core is not None
        if isinstance(item, _Response):
            response = item.response_body
            if response is not None and response.get("error_code") in _PEER_REFUSALS:
                self._note_refused_by_peer(item.source_id, item.api_key, response["error_code"], now)
            refusal = check_response(item.api_key, response, self._rules)
            if refusal is not None:
                self._note_refusal(refusal, item.source_id)
                response = None
            elif response is not None and item.api_key == ApiKey.FETCH:
                for node in response.get("node_endpoints") or ():
                    # Where the leader a bootstrap server or voter names can be reached (v16+).
                    if isinstance(node.get("node_id"), int) and node["node_id"] >= 0:
                        self.learn_address(node["node_id"], (Endpoint(self._listener_name or "", node["host"],
                                                                      node["port"]),))
            try:
                core.handle_response(item.source_id, item.api_key, item.request_body, response, now)
            except RaftProtocolError as exc:
                # The core has already treated the response as a failed exchange.
                self._note_refusal(Refusal(item.api_key, exc.error, exc.event, exc.reason), item.source_id)
        elif isinstance(item, _Request):
            peer = self._peers.get(item.sender_id)
            if peer is not None:
                peer.note_alive()
            try:
                answer = core.handle_request(item.sender_id, item.api_key, item.body, now, token=item.reply)
            except RaftProtocolError as exc:
                refusal = Refusal(item.api_key, exc.error, exc.event, exc.reason)
                self._note_refusal(refusal, item.sender_id)
                answer = refusal_response(refusal)
            if answer is not DEFERRED:
                self._held.append((item.reply, self._with_leader_endpoint(item.api_key, answer)))
        elif isinstance(item, _Propose):
            try:
                result = core.propose(item.values, now)
            except ValueError as exc:
                item.reply.fail(exc)
                return
            if isinstance(result, NotLeader):
                item.reply.fail(NotLeaderError(result.leader_id, result.epoch))
            else:
                item.reply.set(result)
        elif isinstance(item, _Flushed):
            if item.generation != self._generation:
                return  # written for a core a storage failure discarded
            self._flushing = False
            if item.error is not None:
                raise item.error
            core.note_flushed(self.storage.flushed_end_offset, now)
            # A high watermark this flush moves is published by the drain that follows.
            self._notify(progress=False)
            self._start_flush()
        elif isinstance(item, _Call):
            # Drain first: a call may do I/O on the log, never between ready() and advance().
            await self._drain()
            try:
                result = item.function(self)
                if hasattr(result, "__await__"):
                    result = await result
            except Exception as exc:
                if is_storage_failure(exc):
                    # The call's own I/O (compaction) failed the log: offline, as for an append.
                    item.reply.fail(StorageFailedError(core.epoch, describe_failure(exc)))
                    raise
                item.reply.fail(exc)
            else:
                item.reply.set(result)
        else:  # pragma: no cover
            raise TypeError(f"unknown driver input {item!r}")

    async def _drain(self) -> None:
        core = self._core
        assert core is not None
        rounds = 0
        while core.has_ready():
            rounds += 1
            if rounds > MAX_READY_ROUNDS:
                raise RuntimeError("the raft core's Ready loop does not settle")
            ready = core.ready()
            await self._carry_out(ready)
            core.advance(ready, self.storage.flushed_end_offset, self._clock_ms())
        if core.epoch_exhausted and not self._epoch_exhausted_logged:
            self._epoch_exhausted_logged = True
            _log.error(Event.RAFT_EPOCH_EXHAUSTED, node_id=self.config.node_id, epoch=core.epoch,
                       hint="the epoch reached 2**31-2: this node cannot start an election; "
                            "follow docs/security.md (secure the controller listener, then re-format the quorum)")
        self._release_held()

    async def _carry_out(self, ready: Ready) -> None:
        # 1. The quorum state, durably, before anything that depends on it leaves.
        if ready.quorum_state is not None:
            await trio.to_thread.run_sync(self._store.write, ready.quorum_state)
            self.quorum_state_writes += 1
        core = self._core
        assert core is not None
        is_leader = core.role is Role.LEADER
        # 2. Log operations.
        if ready.log_ops and is_leader and not ready.flush_before_send and all(
                isinstance(op, Append) for op in ready.log_ops):
            staged = self.storage.stage([op.batch for op in ready.log_ops])
            self.appends += 1
            self.appended_batches += len(staged)
        elif ready.log_ops:
            applied = await self.storage.apply(ready.log_ops)
            if applied.appended_batches:
                self.appends += 1
                self.appended_batches += applied.appended_batches
            for offset in applied.truncated_to:
                _log.warning(Event.RAFT_LOG_TRUNCATED, node_id=self.config.node_id, offset=offset,
                             log_end_offset=self.storage.end_offset)
            for snapshot_id in applied.installed:
                self.snapshot_generation += 1
                _log.info(Event.RAFT_SNAPSHOT_INSTALLED, node_id=self.config.node_id, end_offset=snapshot_id.end_offset,
                          epoch=snapshot_id.epoch)
        # 3. What a non-leader sends (fetch offsets, votes) must be durable.
        if not is_leader and self.storage.has_staged:
            await self.storage.flush()
        changed = bool(ready.log_ops) or ready.quorum_state is not None
        # Appends alone change nothing a reader of committed entries can see.
        progress = ready.quorum_state is not None or not all(isinstance(op, Append) for op in ready.log_ops)
        if ready.high_watermark is not None and ready.high_watermark > self._high_watermark:
            self._high_watermark = ready.high_watermark
            changed = progress = True
            _log.debug(Event.RAFT_HIGH_WATERMARK_ADVANCED, node_id=self.config.node_id, high_watermark=ready.high_watermark)
        if ready.role_change is not None:
            change = ready.role_change
            changed = True
            if change.role is Role.LEADER:
                self._leader_epoch = change.epoch
            elif self._leader_epoch is not None:
                self._note_leadership_end()
            _log.info(_ROLE_EVENTS[change.role], node_id=self.config.node_id, epoch=change.epoch,
                      leader_id=change.leader_id, log_end_offset=self.storage.end_offset,
                      high_watermark=self._high_watermark)
            leader_peer = self._peers.get(change.leader_id) if change.leader_id is not None else None
            if leader_peer is not None:
                # A leader just named is up: a connection to it still backing off (it
                # restarted since) reconnects now rather than failing the first fetches.
                leader_peer.note_alive()
        if ready.voter_set is not None:
            _log.info(Event.RAFT_VOTERS_CHANGED, node_id=self.config.node_id, voters=sorted(ready.voter_set.ids),
                      kraft_version=core.kraft_version, is_voter=core.is_voter)
            self._follow_voters(core)
            changed = True
        role = ready.role_change is not None or ready.quorum_state is not None or ready.voter_set is not None
        if self.leader_ready != self._leader_ready_seen:
            self._leader_ready_seen = not self._leader_ready_seen
            role = True
        if self.leader_unreachable != self._leader_unreachable_seen:
            # Readers waiting for a live leader (server/nodes/forwarding.py) wake on both edges.
            self._leader_unreachable_seen = not self._leader_unreachable_seen
            changed = progress = True
        if changed or role:
            self._notify(role, progress)
        # 4. Answers held since before this Ready, then what the Ready sends.
        self._release_held()
        for response in ready.responses:
            token = response.token
            if isinstance(token, _Answer):
                token.set(self._with_leader_endpoint(response.api_key, response.body))
        nursery = self._nursery
        assert nursery is not None
        for request in ready.requests:
            self.requests_sent[ApiKey(request.api_key)] += 1
            self._send_request(nursery, request.destination, int(request.api_key), request.body)
        if is_leader:
            self._start_flush()

    def _start_flush(self) -> None:
        """Marks the staged tail for the writer thread (`_hand_to_writer`, at the driver
        loop's next turn) unless a write runs (the next starts when it reports back) or
        nothing is staged."""
        if self._flushing or not self.storage.has_staged or self._nursery is None or self._writer is None:
            return
        self._flushing = True
        self._flush_due = True

    def _hand_to_writer(self) -> None:
        self._flush_due = False
        if self._nursery is None or self._writer is None:
            return
        storage = self.storage
        batches = storage.begin_write()
        if batches is None:
            # A write awaited elsewhere runs (a flush before a non-append operation).
            self._nursery.start_soon(self._flush_after_write)
            return
        generation = self._generation

        def written(error: BaseException | None) -> None:
            # In the trio thread, as soon as the write ends: no task waits for it.
            storage.end_write()
            self._deliver(_Flushed(generation, error))

        self._writer.submit(storage.write_batches, batches, written)

    async def _flush_after_write(self) -> None:
        await self.storage.wait_writer()
        self._flushing = False
        self._start_flush()
        if self._flush_due:
            # Not the driver task: its loop may be waiting for input, so hand over here.
            self._hand_to_writer()

    def _deliver(self, item) -> None:
        """Puts `item` in the inbox from a callback (no task to wait for room)."""
        try:
            self._send_channel.send_nowait(item)
        except trio.WouldBlock:
            nursery = self._nursery
            if nursery is not None:
                nursery.start_soon(self._deliver_late, item)
        except trio.ClosedResourceError:
            pass  # the driver stopped

    def _note_leadership_end(self) -> None:
        # The leader role ends in this Ready: remember how far this leadership
        # committed (the high watermark was published above), for waiters that
        # wake after the role change.
        assert self._leader_epoch is not None
        self._commit_marks[self._leader_epoch] = self._high_watermark
        if len(self._commit_marks) > MAX_COMMIT_MARKS:
            del self._commit_marks[min(self._commit_marks)]
        self._leader_epoch = None

    # ------------------------------------------------------------------
    # Storage failures: offline, retry, rejoin
    # ------------------------------------------------------------------

    def _storage_failed_error(self) -> StorageFailedError:
        offline = self._offline
        if offline is None:
            return StorageFailedError(self.epoch, "the metadata log failed")
        return StorageFailedError(offline.epoch, offline.reason)

    def _refuse_offline(self, item) -> None:
        """Answers an input taken while the log is offline (or left over from the
        round a storage failure interrupted)."""
        if isinstance(item, _Request):
            _refuse_answer(item.reply)
        elif isinstance(item, (_Propose, _Call)):
            item.reply.fail(self._storage_failed_error())
        # _Response and _Flushed belong to the discarded core.

    def _take_offline(self, error: BaseException) -> None:
        """Discards the core after a storage failure; see the module docstring."""
        core = self._core
        assert core is not None
        now = self._clock_ms()
        me = self.config.node_id
        reason = describe_failure(error)
        was_leader = core.role is Role.LEADER
        epoch = core.epoch
        self._core = None
        self._generation += 1
        self._offline = _Offline(reason, epoch, core.leader_id if core.leader_id != me else None, now)
        self.storage_failures += 1
        if now - self._online_since_ms >= self._storage_retry.max_ms:
            self._storage_attempt = 0  # a fresh failure, not the same disk failing again
        if self._leader_epoch is not None:
            led = self._leader_epoch
            # Waiters for entries past this leadership's high watermark learn that the
            # disk failed (not merely that leadership moved): KAFKA_STORAGE_ERROR.
            self._note_leadership_end()
            self._failed_leaderships[led] = reason
            if len(self._failed_leaderships) > MAX_COMMIT_MARKS:
                del self._failed_leaderships[min(self._failed_leaderships)]
        _log.error(Event.STORAGE_DISK_FAILED, node_id=me, epoch=epoch, role=core.role.value, error=reason,
                   flushed_end_offset=self.storage.flushed_end_offset, high_watermark=self._high_watermark)
        if was_leader and self._nursery is not None:
            # Resign at once: the others elect without waiting for their fetch timeout.
            for request in core.resignation_requests():
                self.requests_sent[ApiKey.END_QUORUM_EPOCH] += 1
                self._send_request(self._nursery, request.destination, int(request.api_key), request.body)
        # Nothing that rests on state the failure may have left undurable goes out: held
        # answers (vote grants, acks), deferred ones (parked fetches) and the rest of the
        # interrupted round.
        held, self._held = self._held, []
        for answer, _ in held:
            _refuse_answer(answer)
        for answer in list(self._outstanding):
            _refuse_answer(answer)
        unhandled, self._unhandled = self._unhandled, []
        for item in unhandled:
            self._refuse_offline(item)
        if self._on_storage_change is not None:
            self._on_storage_change(True)
        self._notify(role=True)

    async def _recover(self) -> None:
        """Retries the disk with backoff until the log reopens, answering the inbox
        meanwhile, then builds a new core from the persisted quorum state."""
        offline = self._offline
        assert offline is not None
        if self._retry_rng is None:
            self._retry_rng = random.Random(self._rng.random())
        # Bounded in time, not count: each attempt waits a backoff delay first, and the
        # node stays up, answering, for as long as the disk stays bad.
        attempts = 0
        while True:
            attempts += 1
            delay_ms = self._storage_retry.delay_ms(self._storage_attempt, self._retry_rng)
            self._storage_attempt += 1
            with trio.move_on_after(delay_ms / 1000):
                # Bounded by the delay.
                while True:
                    self._refuse_offline(await self._receive_channel.receive())
            try:
                await self.storage.reopen()
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise  # CorruptLogError: acknowledged data is damaged; an operator decides
                _log.warning(Event.STORAGE_RECOVERY_FAILED, node_id=self.config.node_id,
                             attempt=attempts, error=describe_failure(exc))
                self.storage_recovery_failures += 1
                self._notify()
                continue
            break
        now = self._clock_ms()
        # As a restart builds it: a former leader comes back resigned, a follower fetches.
        self._core = self._new_core(now)
        self._generation += 1
        self._flushing = self._flush_due = False
        self._leader_ready_seen = False
        self._leader_unreachable_seen = False
        self._offline = None
        self._online_since_ms = now
        _log.info(Event.STORAGE_DISK_RECOVERED, node_id=self.config.node_id, offline_ms=now - offline.since_ms,
                  attempts=attempts, epoch=self._core.epoch, role=self._core.role.value,
                  log_end_offset=self.storage.end_offset, high_watermark=self._high_watermark)
        if self._on_storage_change is not None:
            self._on_storage_change(False)
        self._notify(role=True)

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for reply, body in held:
            reply.set(body)

    def _timeout_s(self, api_key: int) -> float:
        if api_key == ApiKey.FETCH:
            return (self.config.fetch_max_wait_ms + self.config.request_timeout_ms) / 1000
        return self.config.request_timeout_ms / 1000

    def _send_request(self, nursery: trio.Nursery, destination: int, api_key: int, body: Body) -> None:
        """Sends from this task when the peer's connection takes the request at once
        (the answer comes back by callback, straight into the inbox); otherwise a task
        sends it and waits (connecting, backpressure, TLS)."""
        peer = self._peers.get(destination)
        generation = self._generation

        def done(response: Body | None) -> None:
            if self._generation == generation:  # else the core that asked was discarded
                self._deliver(_Response(destination, api_key, body, response))

        if peer is None or not peer.try_submit(api_key, WIRE_VERSIONS[ApiKey(api_key)], body,
                                               self._timeout_s(api_key), done):
            nursery.start_soon(self._exchange, destination, api_key, body)

    async def _deliver_late(self, item) -> None:
        try:
            await self._send_channel.send(item)
        except trio.ClosedResourceError:
            pass

    async def _exchange(self, destination: int, api_key: int, body: Body) -> None:
        peer = self._peers.get(destination)
        response = None
        timeout_ms = self._timeout_s(api_key) * 1000
        delivered = False
        generation = self._generation

        def deliver(early: Body) -> None:
            # Straight from the peer's read loop into the inbox: the response does not
            # wait for this task to be scheduled first.
            nonlocal delivered
            if self._generation != generation:
                delivered = True  # the core that asked was discarded: drop it
                return
            try:
                self._send_channel.send_nowait(_Response(destination, api_key, body, early))
            except (trio.WouldBlock, trio.ClosedResourceError):
                return
            delivered = True

        if peer is not None:
            try:
                # A fetch to a peer that is down fails at once: the core then asks again,
                # or asks another voter (an observer looking for its leader), rather than
                # waiting out the request timeout for a reconnect.
                response = await peer.request(api_key, body, timeout_ms / 1000, version=WIRE_VERSIONS[ApiKey(api_key)],
                                              on_response=deliver,
                                              fail_fast=api_key in (ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT))
            except (PeerUnavailable, trio.TooSlowError):
                response = None
        if delivered or self._generation != generation:
            return
        try:
            await self._send_channel.send(_Response(destination, api_key, body, response))
        except trio.ClosedResourceError:
            pass


class CommittedReader:
    """The committed entries from `position` on, in order, for replay.

    `await reader.next()` returns a non-empty list of `CommittedBatch` (only
    batches wholly below the high watermark) or a single `SnapshotLoaded`
    when the reader's position fell below the log start (a snapshot was
    installed, or the log compacted past it): load that snapshot, then the
    batches continue at its end offset. Also an async iterator of single items.
    """

    def __init__(self, driver: RaftDriver, position: int, max_bytes: int) -> None:
        self._driver = driver
        self.position = position
        self._max_bytes = max_bytes
        self._buffer: list = []

    def __aiter__(self) -> CommittedReader:
        return self

    async def __anext__(self):
        if not self._buffer:
            self._buffer = await self.next()
        return self._buffer.pop(0)

    async def next(self) -> list[CommittedBatch | SnapshotLoaded]:
        driver = self._driver
        storage = driver.storage
        # Bounded: every round either returns or waits for a change of the driver's state.
        while True:
            changed = driver._progress
            start = storage.start_offset
            if self.position < start:
                snapshot_id = storage.latest_snapshot_id()
                if snapshot_id is None or snapshot_id.end_offset < start:
                    raise RuntimeError(f"log starts at {start} but no snapshot covers offset {self.position}")
                self.position = snapshot_id.end_offset
                path = snapshot_path(storage.directory, snapshot_id)
                return [SnapshotLoaded(snapshot_id, path)]
            high_watermark = driver.high_watermark
            if self.position < high_watermark:
                # The recent tail is in memory: serve it without a worker-thread hop
                # (that hop cost ~1 ms per commit on this machine); go to disk on a miss.
                batches = storage.read_cached(self.position, self._max_bytes)
                if batches is None:
                    try:
                        raw = await trio.to_thread.run_sync(storage.metadata_log.read_raw, self.position,
                                                            self._max_bytes)
                    except OffsetOutOfRangeError:
                        continue  # the log was reset or compacted meanwhile: look again
                    except (LogFailedError, LogClosedError):
                        # The log failed (the driver takes it offline) or is being reopened:
                        # read again once the driver has it back.
                        if not driver.running:
                            raise DriverStopped("the raft driver stopped") from None
                        await changed.wait()
                        continue
                    batches = decode_stored(raw)
                out: list[CommittedBatch | SnapshotLoaded] = []
                for batch in batches:
                    if batch.next_offset > high_watermark:
                        break
                    skip = self.position - batch.base_offset
                    if skip >= len(batch.values):
                        continue
                    # A reader placed inside a batch (e.g. at a snapshot end that is not
                    # a batch boundary) gets the batch's remaining entries.
                    values = batch.values[skip:] if skip > 0 else batch.values
                    out.append(CommittedBatch(self.position, batch.epoch, values, batch.control_type,
                                              batch.timestamp_ms))
                    self.position = batch.next_offset
                if out:
                    return out
            if not driver.running and driver._core is not None:
                # A reader cancelled together with the driver gets its Cancelled, not this.
                await trio.lowlevel.checkpoint_if_cancelled()
                raise DriverStopped("the raft driver stopped")
            await changed.wait()
