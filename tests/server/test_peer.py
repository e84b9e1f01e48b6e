"""PeerConnection against real in-process nodes: pipelining, version negotiation,
failing fast when the peer goes away, and reconnecting when it comes back."""

from __future__ import annotations

import random
import struct

import pytest
import trio
from structlog.testing import capture_logs

from node_harness import format_directory, node_config
from protocol.registry import API_MESSAGES
from server.net.framing import FrameDecoder
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


# -- try_submit: requests without a task, answered by callback ----------------------------

class _Answers:
    """Collects `on_done` calls; `wait_for(n)` returns once n have come."""

    def __init__(self) -> None:
        self.bodies: dict[int, object] = {}
        self._changed = trio.Event()

    def callback(self, index: int):
        def done(body) -> None:
            assert index not in self.bodies, "on_done called twice"
            self.bodies[index] = body
            self._changed.set()
        return done

    async def wait_for(self, count: int) -> None:
        while len(self.bodies) < count:
            await self._changed.wait()
            self._changed = trio.Event()


async def test_submitted_requests_are_answered_by_callback_with_their_own_bodies(tmp_path):
    directory = tmp_path / "metadata"
    format_directory(directory)
    node = ControllerNode(node_config(directory))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        peer = PeerConnection(PeerAddress(1, "127.0.0.1", node.port), "peer-test", random.Random(5),
                              max_in_flight_requests=4)
        await nursery.start(peer.run)
        answers = _Answers()
        with trio.fail_after(10):
            await peer.wait_connected()
            # More requests than slots, in rounds of four: every answer gives its slot back.
            for start in range(0, 40, 4):
                for index in range(start, start + 4):
                    # Alternate two APIs so a mix-up of answers would fail to decode or compare.
                    api_key, body = (55, QUORUM_BODY) if index % 2 else (60, {"endpoint_type": 1})
                    assert peer.try_submit(api_key, peer.choose_version(api_key), body, 10.0, answers.callback(index))
                # All four slots are taken: the fifth is not sent (the caller would use `request`).
                assert not peer.try_submit(60, peer.choose_version(60), {"endpoint_type": 1}, 10.0,
                                           answers.callback(-1))
                await answers.wait_for(start + 4)
        assert sorted(answers.bodies) == list(range(40))
        for index, response in answers.bodies.items():
            if index % 2:
                assert response.topics[0].partitions[0].leader_id == 1
            else:
                assert response.cluster_id == node.cluster_id
        nursery.cancel_scope.cancel()


async def _scripted_peer(behaviour: str, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A peer that negotiates ApiVersions properly and then, to DescribeCluster, stays
    silent, answers bytes that do not decode, or closes the connection."""
    response = API_MESSAGES[18][1]

    async def serve(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder(1 << 24)
        async with stream:
            async for data in stream:
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not None:
                    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                    if api_key == 18:
                        payload = struct.pack(">i", correlation_id) + response.encode(version, {
                            "error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4},
                                                          {"api_key": 60, "min_version": 0, "max_version": 1}]})
                    elif behaviour == "silent":
                        continue
                    elif behaviour == "garbage":
                        payload = struct.pack(">i", correlation_id) + b"\xff\xff\xff"
                    else:
                        return
                    await stream.send_all(struct.pack(">i", len(payload)) + payload)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(serve, listeners)


@pytest.mark.parametrize("behaviour", ["silent", "garbage", "close"])
async def test_a_submitted_request_the_peer_never_answers_usefully_gets_none_once(behaviour):
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_scripted_peer, behaviour)
        peer = PeerConnection(PeerAddress(7, "127.0.0.1", port), "peer-test", random.Random(6),
                              max_in_flight_requests=2)
        await nursery.start(peer.run)
        answers = _Answers()
        with trio.fail_after(10):
            await peer.wait_connected()
            started = trio.current_time()
            assert peer.try_submit(60, 0, {}, 0.3, answers.callback(0))
            await answers.wait_for(1)
        assert answers.bodies == {0: None}
        if behaviour == "silent":
            # Answered by the deadline, not before it.
            assert trio.current_time() - started >= 0.3
        else:
            assert trio.current_time() - started < 0.3
        # Its slot came back: two more fit (the second slot was never taken).
        if peer.connected:
            assert peer.try_submit(60, 0, {}, 5.0, answers.callback(1))
            assert peer.try_submit(60, 0, {}, 5.0, answers.callback(2))
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("early", [False, True])
async def test_an_undecodable_answer_to_a_task_request_is_logged_once_and_raised(early):
    # The same report as a submitted request's: one structured line, and the caller
    # sees the peer as unavailable (with or without a consumer fed from the read loop).
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_scripted_peer, "garbage")
        peer = PeerConnection(PeerAddress(7, "127.0.0.1", port), "peer-test", random.Random(13))
        await nursery.start(peer.run)
        fed = []
        with trio.fail_after(10):
            await peer.wait_connected()
            with capture_logs() as logs:
                with pytest.raises(PeerUnavailable, match="undecodable DescribeCluster"):
                    await peer.request(60, {}, 5.0, version=0, on_response=fed.append if early else None)
        bad = [entry for entry in logs if entry["event"] == "net.peer_bad_response"]
        assert len(bad) == 1 and bad[0]["peer"] == 7 and bad[0]["api"] == "DescribeCluster"
        assert fed == []
        # The stream stays usable: the next exchange on the same connection is answered.
        with trio.fail_after(10):
            with pytest.raises(PeerUnavailable):
                await peer.request(60, {}, 5.0, version=0)
        assert peer.connects == 1
        nursery.cancel_scope.cancel()


async def test_an_idle_connection_sets_no_timer_until_something_is_submitted(autojump_clock):
    """Virtual time: a minute passes instantly. The expiry task sleeps without a deadline
    while nothing is submitted (hundreds of idle connections would otherwise each wake
    once a second), and still answers a silent peer's request at its deadline."""

    class ExpirySteps(trio.abc.Instrument):
        def __init__(self) -> None:
            self.steps = 0

        def before_task_step(self, task) -> None:
            if task.name.endswith("_expire_submitted"):
                self.steps += 1

    async with trio.open_nursery() as nursery:
        port = await nursery.start(_scripted_peer, "silent")
        peer = PeerConnection(PeerAddress(7, "127.0.0.1", port), "peer-test", random.Random(14))
        await nursery.start(peer.run)
        with trio.fail_after(120):
            await peer.wait_connected()
            await trio.sleep(1)  # the expiry task has started and gone to sleep
            counter = ExpirySteps()
            trio.lowlevel.add_instrument(counter)
            try:
                await trio.sleep(60)
                assert counter.steps == 0
                answers = _Answers()
                started = trio.current_time()
                assert peer.try_submit(60, 0, {}, 5.0, answers.callback(0))
                await answers.wait_for(1)
            finally:
                trio.lowlevel.remove_instrument(counter)
        assert answers.bodies == {0: None}
        assert 5.0 <= trio.current_time() - started < 6.0
        nursery.cancel_scope.cancel()


async def test_nothing_is_submitted_to_a_peer_that_is_not_connected():
    peer = PeerConnection(PeerAddress(9, "127.0.0.1", 1), "peer-test", random.Random(7))
    answers = _Answers()
    assert not peer.try_submit(60, 0, {}, 1.0, answers.callback(0))
    assert answers.bodies == {}


async def test_a_connection_adopts_a_current_answer_from_another_connection_to_the_same_node(tmp_path):
    directory = tmp_path / "metadata"
    format_directory(directory)
    node = ControllerNode(node_config(directory))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        address = PeerAddress(1, "127.0.0.1", node.port)
        first = PeerConnection(address, "peer-test", random.Random(8))
        second = PeerConnection(address, "peer-test-forward", random.Random(9))
        elsewhere = PeerConnection(PeerAddress(1, "127.0.0.1", 1), "peer-test", random.Random(10))
        for peer in (first, second):
            await nursery.start(peer.run)
        with trio.fail_after(10):
            await first.wait_connected()
            await second.wait_connected()
        asked = second.negotiations
        # An answer that is not newer than its own is not taken; nor by a connection that is down.
        second.finalized_features_epoch = first.finalized_features_epoch + 1
        assert not second.adopt_negotiation(first)
        assert not elsewhere.adopt_negotiation(first)
        # A newer one is: the versions and features, without an exchange of its own.
        second.finalized_features_epoch = -1
        second.api_versions = {}
        assert second.adopt_negotiation(first)
        assert second.api_versions == first.api_versions and second.api_versions is not first.api_versions
        assert second.finalized_features == first.finalized_features
        assert second.supported_features == first.supported_features
        assert second.finalized_features_epoch == first.finalized_features_epoch
        assert second.negotiations == asked
        # Another node's address: never (a connection's versions are its node's).
        other = PeerConnection(PeerAddress(2, "127.0.0.1", node.port), "peer-test", random.Random(11))
        other.api_versions = {18: (0, 1)}
        other.finalized_features_epoch = first.finalized_features_epoch + 10
        assert not second.adopt_negotiation(other)
        assert second.api_versions == first.api_versions
        nursery.cancel_scope.cancel()


async def test_a_submitted_request_the_socket_takes_in_part_is_finished_by_a_task_without_corrupting_the_stream():
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_scripted_peer, "garbage")
        peer = PeerConnection(PeerAddress(7, "127.0.0.1", port), "peer-test", random.Random(12))
        await nursery.start(peer.run)
        answers = _Answers()
        with trio.fail_after(20):
            await peer.wait_connected()
            # SaslAuthenticate v2 with 8 MiB of auth bytes: more than a loopback socket takes at once.
            assert peer.try_submit(36, 2, {"auth_bytes": b"x" * (8 << 20)}, 10.0, answers.callback(0))
            # Nothing else is sent while the rest goes out: the next request waits for it.
            assert not peer.try_submit(60, 0, {}, 10.0, answers.callback(1))
            await answers.wait_for(1)
            # The peer read the whole frame and answered it (bytes that do not decode): the
            # stream is intact, the same connection serves the next request.
            assert peer.try_submit(60, 0, {}, 10.0, answers.callback(2))
            await answers.wait_for(2)
        assert answers.bodies == {0: None, 2: None}
        assert peer.connected and peer.connects == 1
        nursery.cancel_scope.cancel()
