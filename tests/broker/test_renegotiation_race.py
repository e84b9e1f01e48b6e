"""The KIP-778 renegotiation race: a controller answers ApiVersions before it has
replayed the metadata.version change the broker already replayed.

Each node replays the committed metadata log in a task of its own, so on a busy
host a broker can see an upgrade first and ask the controller while the
controller's image is still at the old level: the answer carries the old gated
ranges. A broker that took that answer kept BrokerRegistration v1 after an
upgrade to 3.7-IV2 (tests/e2e/test_upgrade_story.py on a loaded machine). The
ordering is forced here, without sleeps: the leader's connection answers the
first re-ask exactly as a lagging controller does (its previous answer: old
ranges, old FinalizedFeaturesEpoch), and only later ones reach the controller.
"""

from __future__ import annotations

import trio

from protocol.errors import ErrorCode
from server.broker.lifecycle import BrokerState
from server.net.peer import PeerConnection

from .harness import running_cluster

TIMEOUT_S = 30
MV_3_5_IV2, MV_3_7_IV2 = 11, 17
BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63


class AnswersBeforeReplaying:
    """A controller connection whose first `stale_answers` renegotiations are answered
    as by a controller that has not replayed the change yet; the rest reach it."""

    def __init__(self, peer: PeerConnection, stale_answers: int) -> None:
        self._peer = peer
        self.stale_answers = stale_answers
        self.asked = 0
        self.answered_stale = trio.Event()

    def __getattr__(self, name: str):
        return getattr(self._peer, name)

    async def renegotiate(self, timeout_s: float) -> bool:
        self.asked += 1
        if self.stale_answers:
            # A lagging controller's answer is the one it gave before the change: the
            # peer's ranges and epoch stay as they are.
            self.stale_answers -= 1
            self.answered_stale.set()
            return True
        return await self._peer.renegotiate(timeout_s)


async def test_an_answer_from_a_controller_that_has_not_replayed_the_change_is_not_taken(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(102, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            real = broker.controller_peer(1)
            assert broker.lifecycle.negotiated_version(real, BROKER_REGISTRATION) == 1
            lagging = AnswersBeforeReplaying(real, stale_answers=2)
            broker._controller_peers._peers[1] = lagging
            stale_epoch = real.finalized_features_epoch

            reply = await cluster.update_metadata_version(MV_3_7_IV2)
            assert reply.error_code == ErrorCode.NONE
            await broker.wait_renegotiated(MV_3_7_IV2)

            # The stale answers were given (the race happened) and were not taken: the
            # broker asked again until the controller's answer covered what it replayed.
            assert lagging.answered_stale.is_set() and lagging.stale_answers == 0
            assert lagging.asked >= 3
            assert real.finalized_features_epoch > stale_epoch
            assert real.finalized_features["metadata.version"] == MV_3_7_IV2
            assert broker.lifecycle.negotiated_version(lagging, BROKER_REGISTRATION) == 4
            assert broker.lifecycle.negotiated_version(lagging, BROKER_HEARTBEAT) == 2
            assert broker.controller_api_versions[BROKER_REGISTRATION][1] >= 4


async def test_a_controller_that_never_catches_up_is_reported_not_current(tmp_path):
    # Bounded: a controller that keeps answering with the old ranges does not hold the
    # broker forever; the renegotiation is logged as not done with the leader.
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(103, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            real = broker.controller_peer(1)
            lagging = AnswersBeforeReplaying(real, stale_answers=10**6)
            broker._controller_peers._peers[1] = lagging
            reply = await cluster.update_metadata_version(MV_3_7_IV2)
            assert reply.error_code == ErrorCode.NONE
            await broker.wait_renegotiated(MV_3_7_IV2)
            assert 2 <= lagging.asked <= 100
            assert broker.lifecycle.negotiated_version(lagging, BROKER_REGISTRATION) == 1
            assert BROKER_REGISTRATION not in broker.controller_api_versions or \
                broker.controller_api_versions[BROKER_REGISTRATION][1] < 4
