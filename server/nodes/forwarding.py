"""Relaying a client's request to the active controller, and reading after it.

Owns: `Forwarder`, which a broker uses for every controller API a client sends it
(KIP-590) and a standby controller for the writes a client sent it, and the read
barrier both use before answering a read from their own image.

Rules kept here:
- The active controller is whoever the quorum names now (the node's Raft driver): a
  forward whose answer was lost, or that the controller refused with NOT_CONTROLLER,
  is sent again as soon as the driver names another leader (at the latest every
  FORWARD_RETRY_S; a leader still named but not active yet, every NOT_ACTIVE_RETRY_S),
  under the same forward id, so a write the controller applied is answered, never
  applied twice (server/controller/idempotence.py).
- An answer goes back to the client only once this node's image holds everything the
  controller had replayed when it answered (read-your-writes through the same node),
  bounded by READ_YOUR_WRITES_WAIT_S.
- Forwards and barriers use connections of their own (`ControllerConnections`), never the Raft
  driver's: that one carries a long-polled Fetch the leader may hold, and answers on
  one connection leave in order.
- The read barrier: a node that is not the active controller asks the leader how far
  its image is (FinalizedFeaturesEpoch of an ApiVersions answer: the offset of the last
  record it replayed, which covers every write it has acknowledged) and waits until its
  own image is there. Bounded by READ_BARRIER_TIMEOUT_S: with no leader reachable the
  read is answered from the image as it is (stale but available, as in Kafka).
- A read on a node that knows no live leader (none named, or its fetches to it keep
  failing, as right after a kill) first waits for one, at most `leader_wait_s`: without
  it, a broker would answer from an image that misses writes the new leader has
  acknowledged, and a controller would name no active controller — a client told
  "none" may not ask again for minutes (Kafka's Java Admin with bootstrap.controllers
  keeps such metadata until metadata.max.age.ms).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import trio

from protocol.api_keys import ApiKey
from protocol.errors import DecodeError, ErrorCode
from protocol.frames import decode_response, encode_request
from server.api.errors import ApiError
from server.controller.answers import (
    COMMITTED_OFFSET_TAG,
    FORWARD_ID_BYTES,
    FORWARD_ID_TAG,
    decode_offset,
    tagged,
    with_tag,
)
from server.controller.replayer import Replayer
from server.net.peer import PeerAddress, PeerConnection, PeerUnavailable
from server.observability import Event, get_logger
from server.raft.driver import RaftDriver
from server.security.client_config import ClientSecurity
from server.security.envelope import ENVELOPE_KEY, address_bytes, serialize_principal

log = get_logger("forwarding")

FORWARD_TIMEOUT_S = 10.0
# A forward that failed with the leader unchanged is tried again after this, at the latest.
FORWARD_RETRY_S = 0.2
# The leader answered NOT_CONTROLLER although the quorum still names it: elected, its
# controller not active yet (it replays up to its first commit). Asked again this soon.
NOT_ACTIVE_RETRY_S = 0.02
# How long a forwarded write's answer waits for this node's image to reach the write;
# past it the answer goes out anyway.
READ_YOUR_WRITES_WAIT_S = 5.0
# How long a read waits to learn the leader's offset and to replay up to it.
READ_BARRIER_TIMEOUT_S = 1.0
BARRIER_CLIENT = {"client_software_name": "kraftwerk-read-barrier", "client_software_version": "1"}


def leader_wait_s(fetch_timeout_ms: int, election_timeout_ms: int) -> float:
    """How long a read that finds no live leader waits for one: a follower's detection
    of a dead leader (its fetch timeout) and the election after it."""
    return (fetch_timeout_ms + election_timeout_ms) / 1000


class ControllerConnections:
    """This node's own connections of one purpose to the controllers (not the Raft
    driver's: see the module's rules): one to each controller the configuration names,
    started with the node, and in a dynamic quorum (KIP-853) one to a controller the
    log names, opened when first asked for (`lookup` gives its address). Each follows
    its controller when that controller's listener moves (UpdateRaftVoter)."""

    def __init__(self, peers: dict[int, PeerAddress], client_id: str, security: ClientSecurity | None,
                 rng: random.Random, lookup: Callable[[int], PeerAddress | None] | None = None) -> None:
        self._client_id = client_id
        self._security = security
        self._rng = rng
        self._lookup = lookup
        self._peers = {node_id: self._new(address) for node_id, address in peers.items()}
        self._running: set[int] = set()
        self._nursery: trio.Nursery | None = None

    def _new(self, address: PeerAddress) -> PeerConnection:
        peer = PeerConnection(address, self._client_id, random.Random(self._rng.random()))
        peer.security = self._security
        return peer

    def attach(self, nursery: trio.Nursery) -> None:
        """Connections opened or moved from now on run in `nursery` (the node's)."""
        self._nursery = nursery

    def detach(self) -> None:
        self._nursery = None

    async def start(self, nursery: trio.Nursery) -> None:
        """Starts every connection not yet running (the configured ones)."""
        self.attach(nursery)
        for node_id, peer in list(self._peers.items()):
            if node_id not in self._running:
                self._running.add(node_id)
                await nursery.start(peer.run)

    def existing(self, node_id: int | None) -> PeerConnection | None:
        return self._peers.get(node_id) if node_id is not None else None

    def connection(self, node_id: int | None) -> PeerConnection | None:
        """The connection to controller `node_id`, opened now if the log names it and
        none exists; None when neither the configuration nor the log knows it."""
        peer = self.existing(node_id)
        if peer is not None or node_id is None or self._lookup is None or self._nursery is None:
            return peer
        address = self._lookup(node_id)
        if address is None:
            return None
        peer = self._peers[node_id] = self._new(address)
        self._running.add(node_id)
        self._nursery.start_soon(peer.run)
        return peer

    def moved(self, address: PeerAddress) -> None:
        peer = self._peers.get(address.node_id)
        if peer is not None and self._nursery is not None:
            self._nursery.start_soon(peer.move_to, address)

    def all(self) -> list[PeerConnection]:
        return list(self._peers.values())


class _NotActive(Exception):
    """The peer answered an Envelope NOT_CONTROLLER."""


class Forwarder:
    def __init__(self, node_id: int, driver: RaftDriver, peers: ControllerConnections,
                 replayer: Replayer, leader_wait_s: float) -> None:
        self._node_id = node_id
        self._leader_wait_s = leader_wait_s
        self._driver = driver
        self._peers = peers
        self._replayer = replayer
        # The (epoch, leader) whose connection was last nudged (_leader_peer).
        self._nudged: tuple[int, int] | None = None

    # -- forwarding ----------------------------------------------------------------------
    async def forward(self, api_key: int, version: int, request, ctx=None) -> dict | None:
        """The active controller's answer to a client's request (None if no other node
        led and answered within FORWARD_TIMEOUT_S, or this node became the leader:
        the caller then answers itself). With the client's request context `ctx`, the
        request goes in an Envelope carrying the client's principal and address
        whenever the controller serves Envelope."""
        driver = self._driver
        forward_id = os.urandom(FORWARD_ID_BYTES)
        with trio.move_on_after(FORWARD_TIMEOUT_S):
            while True:
                leader = driver.leader_id
                if leader == self._node_id:
                    return None
                peer = self._leader_peer(leader)
                if peer is None:
                    await self._wait_leader_change(leader, FORWARD_RETRY_S)
                    continue
                if not peer.connected:
                    # A dead leader (until the quorum names another) or a new one this
                    # node's connection to is being re-established: whichever comes first.
                    await self._wait_leader_change_or_connection(leader, peer, FORWARD_RETRY_S)
                    continue
                theirs = peer.api_versions.get(api_key)
                if theirs is None:
                    return None
                use = min(version, theirs[1])
                committed = None
                try:
                    if ctx is not None and ENVELOPE_KEY in peer.api_versions:
                        response, committed = await self._forward_in_envelope(peer, api_key, use, request, ctx,
                                                                              forward_id)
                    else:
                        response = await peer.request(api_key, dict(request), FORWARD_TIMEOUT_S, version=use)
                except _NotActive:
                    await self._wait_leader_change(leader, NOT_ACTIVE_RETRY_S)
                    continue
                except (PeerUnavailable, trio.TooSlowError) as exc:
                    log.info(Event.BROKER_FORWARD_FAILED, api_key=api_key, controller_id=leader, error=str(exc))
                    await self._wait_leader_change(leader, FORWARD_RETRY_S)
                    continue
                if response.get("error_code") == ErrorCode.NOT_CONTROLLER:
                    await self._wait_leader_change(leader, NOT_ACTIVE_RETRY_S)
                    continue
                if committed is not None:
                    await self._wait_image_reaches(committed)
                return response
        return None

    async def _forward_in_envelope(self, peer: PeerConnection, api_key: int, version: int, request, ctx,
                                   forward_id: bytes):
        """The controller's answer and its committed offset (None if it did not say).
        Raises PeerUnavailable when the answer was lost, _NotActive when the peer is not
        the active controller (yet, or any more): the caller asks again, under the same
        forward id."""
        inner = encode_request(api_key, version, ctx.correlation_id, ctx.client_id, dict(request))
        envelope = await peer.request(ENVELOPE_KEY, with_tag({
            "request_data": inner[4:],  # without the size prefix, as Kafka embeds it
            "request_principal": serialize_principal(ctx.principal),
            "client_host_address": address_bytes(ctx.client_host),
        }, FORWARD_ID_TAG, forward_id), FORWARD_TIMEOUT_S, version=0)
        if envelope.error_code == ErrorCode.NOT_CONTROLLER:
            raise _NotActive()
        if envelope.error_code != ErrorCode.NONE or envelope.response_data is None:
            # Not retriable (this node may not forward, or the request is not forwardable):
            # the client gets the refusal in its own API's error shape (the dispatcher
            # answers the ApiError with the API's catalog entry).
            log.warning(Event.BROKER_FORWARD_FAILED, api_key=api_key, error_code=envelope.error_code,
                        error="the controller refused the envelope")
            raise ApiError(envelope.error_code or ErrorCode.UNKNOWN_SERVER_ERROR,
                           f"the active controller refused this node's forwarded request "
                           f"(error {envelope.error_code})")
        try:
            response = decode_response(api_key, version, bytes(envelope.response_data))[1]
        except DecodeError as exc:
            raise PeerUnavailable(f"undecodable forwarded response: {exc}") from None
        return response, decode_offset(tagged(envelope, COMMITTED_OFFSET_TAG))

    def _leader_peer(self, leader: int | None) -> PeerConnection | None:
        """The connection to `leader`. A leader the quorum names is up; a connection to
        it still waiting out a reconnect backoff (it restarted since it broke) is told so,
        once per epoch, and reconnects now."""
        peer = self._peers.connection(leader)
        if peer is not None and not peer.connected and not self._driver.leader_unreachable:
            named = (self._driver.epoch, leader)
            if named != self._nudged:
                self._nudged = named
                peer.note_alive()
        return peer

    async def wait_live_leader(self, timeout_s: float) -> None:
        """Until the Raft driver names a leader whose fetches do not keep failing (this
        node included), at most `timeout_s`."""
        driver = self._driver
        with trio.move_on_after(timeout_s):
            while driver.leader_id is None or driver.leader_unreachable:
                await driver.wait_changed()

    async def _wait_leader_change_or_connection(self, leader: int, peer: PeerConnection, timeout_s: float) -> None:
        """Until the Raft driver names a leader other than `leader` or `peer` (the
        leader's connection) is connected, at most `timeout_s`."""
        async def leader_changed(scope: trio.CancelScope) -> None:
            await self._wait_leader_change(leader, timeout_s)
            scope.cancel()

        async def connected(scope: trio.CancelScope) -> None:
            await peer.wait_connected()
            scope.cancel()

        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(leader_changed, nursery.cancel_scope)
                nursery.start_soon(connected, nursery.cancel_scope)

    async def _wait_leader_change(self, leader: int | None, timeout_s: float) -> None:
        """Until the Raft driver names a leader other than `leader` (at once if it
        already does), at most `timeout_s`."""
        driver = self._driver
        with trio.move_on_after(timeout_s):
            while driver.leader_id == leader:
                await driver.wait_changed()

    async def _wait_image_reaches(self, offset: int) -> None:
        with trio.move_on_after(READ_YOUR_WRITES_WAIT_S) as waited:
            await self._replayer.wait_replayed(offset + 1)
        if waited.cancelled_caught:
            log.warning(Event.BROKER_FORWARD_FAILED, error="answered before this node's image reached the write",
                        offset=offset, replayed_end_offset=self._replayer.replayed_end_offset)

    # -- reading -------------------------------------------------------------------------
    async def read_barrier(self) -> None:
        """Until this node's image holds everything the leader had replayed when asked
        (see the module docstring); at once on the leader itself. A node that knows no
        live leader first waits for one."""
        await self.wait_live_leader(self._leader_wait_s)
        # A connection being re-established (the leader restarted, or was elected after
        # this node's connection to it broke) is waited for within the bound: skipping
        # the barrier then would answer from an image that misses acknowledged writes.
        # A leader that dies meanwhile is not waited for: the next one is asked.
        with trio.move_on_after(READ_BARRIER_TIMEOUT_S):
            while True:
                leader = self._driver.leader_id
                if leader is None or leader == self._node_id:
                    return
                peer = self._leader_peer(leader)
                if peer is None:
                    return
                answer = await self._ask_unless_leader_changes(peer, leader)
                if answer is not None:
                    break
                if self._driver.leader_id == leader:
                    return
            offset = answer.finalized_features_epoch
            if answer.error_code == ErrorCode.NONE and offset is not None and offset >= 0:
                await self._replayer.wait_replayed(offset + 1)

    async def _ask_unless_leader_changes(self, peer: PeerConnection, leader: int):
        """The barrier's ApiVersions answer from `leader`, or None once the Raft driver
        names another leader or the exchange fails."""
        answer = None

        async def ask(scope: trio.CancelScope) -> None:
            nonlocal answer
            try:
                answer = await peer.request(ApiKey.API_VERSIONS, BARRIER_CLIENT, READ_BARRIER_TIMEOUT_S, version=3)
            except (PeerUnavailable, trio.TooSlowError):
                pass
            scope.cancel()

        async def leader_changed(scope: trio.CancelScope) -> None:
            await self._wait_leader_change(leader, READ_BARRIER_TIMEOUT_S)
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, nursery.cancel_scope)
            nursery.start_soon(leader_changed, nursery.cancel_scope)
        return answer
