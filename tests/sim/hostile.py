"""A hostile participant for the simulator: arbitrary well-formed KRaft requests, and replays.

Owns: `HostileNode`. During a window inside the fault period it sends Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch and FetchSnapshot requests to honest
nodes with any epochs (0, current -1/+0/+1/+2/+1000/+1001, MAX_EPOCH, int32 max, negative),
any ids (voters, observers, its own, negative, far out of range), any offsets,
sometimes a foreign or absent cluster id, and it replays requests it overheard
on the network. Honest nodes handle them exactly as server/raft/driver.py does
(`Simulation.deliver_request`: validate, core, refusal). Then it stops, and the
simulation's liveness check requires the quorum to elect a leader and commit.

Who it claims to be (`SimConfig.hostile`): "own" (an id no honest node has),
"voter" (it impersonates a voter) or "observer" (an observer's id). The real
driver reads the sender from the request body (server/raft/rpc.py
`sender_of`), so the claim is what it writes into its bodies; half of them
carry the claimed id, the rest any id.

Rules kept here:
- Its own random generator, derived from the seed: a seed still replays
  exactly, and the honest part of a run draws the same numbers as it would
  without the hostile node until the hostile node first reaches a node.
- Answers come back to it, never to the node it impersonates (a response
  travels on the requester's connection); deferred Fetch answers too (their
  token says so). It never answers requests: honest nodes send theirs to the
  real node of the id.
- A Fetch naming a voter as its replica is that voter's acknowledgement of
  replication. It forges those freely (any position, the leader's own end
  included) but without the voter's token, which the leader sends only to the
  voter's address: a leader that counted one would commit on a majority that
  does not exist (MajorityReachedHighWatermark). What it replays is a real
  voter's own Fetch, token and all: a delayed duplicate, which Raft tolerates.
  Every other request, and every Fetch in a non-voter's name, is free.
- Requests it cannot encode (in wire-codec seeds) are not sent: they could not
  be on a real wire.
- Bounded: one request every 1-15 ms of its window, the last MAX_OVERHEARD
  requests kept for replay.
"""

from __future__ import annotations

import random
from collections import deque
from typing import TYPE_CHECKING, Any

from protocol.errors import EncodeError
from server.raft import messages as m
from server.raft.core import DEFERRED, Role
from server.raft.messages import ApiKey
from server.raft.rpc import sender_of
from server.raft.validate import INT32_MAX, MAX_EPOCH

if TYPE_CHECKING:
    from .cluster import Simulation

MAX_OVERHEARD = 64
INT32_MIN = -(2**31)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# Past the end of any log a simulated run can write.
FAR_OFFSET = 1 << 40
FOREIGN_CLUSTER_ID = "hostile-cluster-AAAAAA"

KINDS = ("replay", "vote", "begin", "end", "fetch", "fetch_snapshot")
KIND_WEIGHTS = (25, 20, 15, 10, 20, 10)


class HostileNode:
    def __init__(self, sim: Simulation, identity: str, cluster_id: str) -> None:
        self.sim = sim
        self.sim_cluster_id = cluster_id
        self.identity = identity
        self.rng = random.Random(f"{sim.seed}/hostile")
        self.voters = sorted(sim.voter_ids)
        self.non_voters = sorted(node_id for node_id in sim.nodes if node_id not in sim.voter_ids)
        self.own_id = max(sim.nodes) + 1
        if identity == "voter":
            self.claimed_id = self.rng.choice(self.voters)
        elif identity == "observer" and self.non_voters:
            self.claimed_id = self.rng.choice(self.non_voters)
        elif identity == "observer":
            self.claimed_id = self.own_id + 1  # an observer that has not started yet
        else:
            self.claimed_id = self.own_id
        fault_ms = sim.config.fault_duration_ms
        self.start_ms = self.rng.randrange(0, fault_ms // 2)
        self.stop_ms = fault_ms
        self.overheard: deque[tuple[int, int, int, Any]] = deque(maxlen=MAX_OVERHEARD)

    # -- hooks the simulation calls ------------------------------------------------

    def start(self) -> None:
        self.sim.schedule(self.start_ms, self.act)

    def overhear(self, source: int, destination: int, api_key: int, body: Any) -> None:
        self.overheard.append((source, destination, api_key, body))

    def receive(self, api_key: int, request_body: Any, response_body: Any) -> None:
        """An answer on the hostile node's connection: counted per API, answered or refused (top-level error)."""
        error = response_body.get("error_code", 0) if response_body is not None else -1
        outcome = "answered" if not error else "refused"
        self.sim.count(f"hostile.{outcome}")
        self.sim.count(f"hostile.{outcome}.{ApiKey(api_key).name}")

    # -- acting ----------------------------------------------------------------------

    def act(self) -> None:
        sim = self.sim
        if sim.now >= self.stop_ms:
            return
        rng = self.rng
        destination, api_key, body = self.forge()
        payload = body
        if sim.config.wire_codec:
            try:
                payload = sim.wire(api_key, "request", body)
            except EncodeError:
                sim.count("hostile.unencodable")
                payload = None
        if payload is not None:
            delay = rng.randint(1, 5) + (rng.randrange(0, 40) if rng.random() < 0.2 else 0)
            sim.schedule(sim.now + delay, self.deliver, destination, api_key, body, payload)
            sim.count("hostile.sent")
        sim.schedule(sim.now + rng.randrange(1, 16), self.act)

    def deliver(self, destination: int, api_key: int, body: Any, payload: Any) -> None:
        sim = self.sim
        node = sim.nodes[destination]
        if node.core is None:
            return
        answer = sim.deliver_request(node, sender_of(api_key, payload), api_key, payload, (None, body))
        if answer is not DEFERRED:
            self.receive(api_key, body, answer)
        sim.drain(node)

    # -- forging -----------------------------------------------------------------------

    def forge(self) -> tuple[int, int, Any]:
        rng = self.rng
        kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
        if kind == "replay" and self.overheard:
            source, destination, api_key, body = rng.choice(self.overheard)
            if rng.random() < 0.4:
                destination = rng.choice(sorted(self.sim.nodes))
            return destination, api_key, body
        destination = self.target()
        if kind == "vote" or kind == "replay":
            return destination, ApiKey.VOTE, m.vote_request(
                self.cluster_id(), self.addressee(destination), self.epoch(), self.sender(),
                self.epoch(), self.offset(), rng.random() < 0.5)
        if kind == "begin":
            return destination, ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(
                self.cluster_id(), self.addressee(destination), self.sender(), self.epoch())
        if kind == "end":
            preferred = [self.any_id() for _ in range(rng.randrange(0, 4))]
            return destination, ApiKey.END_QUORUM_EPOCH, m.end_quorum_epoch_request(
                self.cluster_id(), self.sender(), self.epoch(), preferred)
        if kind == "fetch_snapshot":
            return destination, ApiKey.FETCH_SNAPSHOT, m.fetch_snapshot_request(
                self.cluster_id(), self.sender(), self.epoch(), (self.offset(), self.epoch()), self.offset(),
                rng.choice((0, 1, 512, INT32_MAX, -1)))
        return destination, ApiKey.FETCH, self.forge_fetch()

    def forge_fetch(self) -> Any:
        rng = self.rng
        replica = self.sender()
        if replica in self.voters:
            own = [body for source, _, api_key, body in self.overheard if source == replica and api_key == ApiKey.FETCH]
            if own and rng.random() < 0.5:
                return rng.choice(own)
            if rng.random() < 0.5:
                # A plausible position the voter may not hold: the leader's end, in its epoch,
                # with no token or a guessed one.
                leader = self.sim.current_leader()
                if leader is not None and leader.core is not None:
                    core = leader.core
                    return m.fetch_request(self.cluster_id(), replica, core.epoch, core.end_offset, core.last_epoch,
                                           0, 1 << 20, token=rng.choice((None, rng.getrandbits(63))))
            # A position no leader accepts.
            epoch = self.epoch()
            offset, last_epoch = rng.choice((
                (-1, max(0, min(epoch, INT32_MAX))),
                (FAR_OFFSET + rng.randrange(0, 1 << 20), max(0, min(epoch, INT32_MAX))),
                (INT64_MAX, max(0, min(epoch, INT32_MAX))),
                (self.offset(), -1),
                (self.offset(), epoch + 1 if epoch < INT32_MAX else INT32_MIN),
            ))
        else:
            epoch, offset, last_epoch = self.epoch(), self.offset(), self.epoch()
        body = m.fetch_request(self.cluster_id(), replica, epoch, offset, last_epoch,
                               rng.choice((0, 1, 50, INT32_MAX, -1)), rng.choice((0, 1, 4096, INT32_MAX, -1)))
        if rng.random() < 0.2:
            # The pre-v15 shape: the replica only in ReplicaId.
            body["replica_state"] = {"replica_id": -1, "replica_epoch": -1}
        return body

    def target(self) -> int:
        """Half the time a node without a live leader: only those take a higher epoch from a message."""
        rng = self.rng
        nodes = self.sim.nodes
        if rng.random() < 0.5:
            electing = [node_id for node_id, node in sorted(nodes.items())
                        if node.core is not None and node.core.role not in (Role.LEADER, Role.FOLLOWER)]
            if electing:
                return rng.choice(electing)
        return rng.choice(sorted(nodes))

    # -- value pools -------------------------------------------------------------------

    def current_epoch(self) -> int:
        return max((node.core.epoch for node in self.sim.nodes.values() if node.core is not None), default=0)

    def epoch(self) -> int:
        rng = self.rng
        now = self.current_epoch()
        # now + 1000/1001 straddle the core's largest accepted jump (MAX_EPOCH_JUMP).
        value = rng.choice((0, now - 1, now, now, now + 1, now + 1, now + 2, now + 1000, now + 1001,
                            now + rng.randrange(2, 5000), MAX_EPOCH, MAX_EPOCH - 1, INT32_MAX, -1, INT32_MIN,
                            rng.randrange(0, now + 3)))
        return max(INT32_MIN, min(value, INT32_MAX))

    def offset(self) -> int:
        rng = self.rng
        end = max((node.log.end_offset for node in self.sim.nodes.values()), default=0)
        return rng.choice((0, 1, end - 1, end, end + 1, rng.randrange(0, end + 2), INT32_MAX, INT64_MAX, -1,
                           INT64_MIN))

    def any_id(self) -> int:
        return self.rng.choice((*self.voters, *self.non_voters, self.own_id, self.claimed_id, -1, -2, 1000,
                                INT32_MAX, INT32_MIN))

    def sender(self) -> int:
        return self.claimed_id if self.rng.random() < 0.5 else self.any_id()

    def addressee(self, destination: int) -> int:
        roll = self.rng.random()
        return destination if roll < 0.7 else (-1 if roll < 0.85 else self.any_id())

    def cluster_id(self) -> str | None:
        roll = self.rng.random()
        return self.sim_cluster_id if roll < 0.85 else (None if roll < 0.93 else FOREIGN_CLUSTER_ID)
