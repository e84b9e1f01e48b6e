"""PeerConnection against real in-process nodes: pipelining, version negotiation,
failing fast when the peer goes away, and reconnecting when it comes back."""

from __future__ import annotations

import random

import pytest
import trio

from node_harness import format_directory, node_config
from server.net.peer import BackoffPolicy, PeerAddress, PeerConnection, PeerUnavailable
from server.nodes.controller import ControllerNode

QUORUM_BODY = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}


async def test_pipelined_requests_are_matched_to_their_answers(tmp_path):
    directory = tmp_path / "metadata"
    format_directory(directory)
    node = ControllerNode(node_config(directory))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        peer = PeerConnection(PeerAddress(1, "127.0.0.1", node.port), "peer-test", random.Random(1))
        await nursery.start(peer.run)
        results: dict[int, object] = {}

        async def ask(index: int) -> None:
            # Alternate two APIs so a mix-up of answers would fail to decode or compare.
            if index % 2:
                results[index] = await peer.request(55, QUORUM_BODY, timeout_s=10)
            else:
                results[index] = await peer.request(60, {"endpoint_type": 1}, timeout_s=10)

        async with trio.open_nursery() as requests:
            for index in range(40):
                requests.start_soon(ask, index)
        assert peer.choose_version(55) == 2 and peer.api_versions[18] == (0, 5)
        for index, response in results.items():
            if index % 2:
                assert response.topics[0].partitions[0].leader_id == 1
            else:
                assert response.cluster_id == node.cluster_id
        nursery.cancel_scope.cancel()


async def test_requests_fail_fast_when_the_peer_stops_and_work_again_after_it_restarts(tmp_path):
    directory = tmp_path / "metadata"
    format_directory(directory)
    config = node_config(directory)
    async with trio.open_nursery() as outer:
        first = ControllerNode(config)
        node_scope = trio.CancelScope()

        first_stopped = trio.Event()

        async def run_node(node, scope, stopped, task_status=trio.TASK_STATUS_IGNORED):
            with scope:
                await node.run(task_status=task_status)
            stopped.set()

        port = await outer.start(run_node, first, node_scope, first_stopped)
        peer = PeerConnection(PeerAddress(1, "127.0.0.1", port), "peer-test", random.Random(2),
                              backoff=BackoffPolicy(initial_ms=10, max_ms=50))
        await outer.start(peer.run)
        assert (await peer.request(60, {"endpoint_type": 1}, timeout_s=10)).error_code == 0

        node_scope.cancel()  # the peer process "dies"; its listener closes
        with pytest.raises((PeerUnavailable, trio.TooSlowError)):
            # Either the drop is noticed (PeerUnavailable) or nobody answers in time.
            await peer.request(60, {"endpoint_type": 1}, timeout_s=0.5)

        await first_stopped.wait()  # its log lock is released only once it has fully stopped
        # Restart on the same port and directory: the connection heals by itself.
        second = ControllerNode(node_config(directory, listener=config.listener.__class__(
            "CONTROLLER", "127.0.0.1", port)))
        await outer.start(run_node, second, trio.CancelScope(), trio.Event())
        response = await peer.request(60, {"endpoint_type": 1}, timeout_s=10)
        assert response.cluster_id == second.cluster_id
        assert peer.connects == 2
        outer.cancel_scope.cancel()


async def test_an_unreachable_peer_times_out_instead_of_hanging():
    # Port 1 on loopback: nothing listens, connects are refused, backoff retries.
    peer = PeerConnection(PeerAddress(9, "127.0.0.1", 1), "peer-test", random.Random(3),
                          backoff=BackoffPolicy(initial_ms=5, max_ms=20))
    async with trio.open_nursery() as nursery:
        await nursery.start(peer.run)
        with pytest.raises(trio.TooSlowError):
            await peer.request(60, {"endpoint_type": 1}, timeout_s=0.2)
        assert not peer.connected
        nursery.cancel_scope.cancel()


def test_backoff_grows_is_bounded_and_jittered():
    policy = BackoffPolicy(initial_ms=50, max_ms=1000, multiplier=2.0, jitter=0.2)
    rng = random.Random(4)
    delays = [policy.delay_ms(attempt, rng) for attempt in range(10)]
    assert 40 <= delays[0] <= 60
    assert all(800 <= d <= 1200 for d in delays[5:])
    assert len(set(delays)) == len(delays)  # jittered
