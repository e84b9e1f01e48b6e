"""Connection and request limits, each measured on a real in-process controller.

Real sockets on 127.0.0.1 where the limit is about connections (accept-time
limits); trio memory streams where the test must know exactly what the server
has consumed (`wait_all_tasks_blocked` only sees trio tasks, not kernel buffers).
Time-based limits run on trio's MockClock (`mock_clock`): virtual time moves only
when the test jumps it.
"""

from __future__ import annotations

import struct

import trio
import trio.testing
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from server.dispatch import Dispatcher
from server.net.limits import ConnectionLimiter, MemoryPool, NetLimits
from server.net.listener import Connection, serve_connection

from .helpers import (
    TIMEOUT_S,
    FrameReader,
    api_versions_frame,
    api_versions_round_trip,
    decode_response,
    request_frame,
    start_node,
)


def events(logs, name: str) -> list[dict]:
    return [entry for entry in logs if entry["event"] == name]


async def open_connection(port: int, source: str = "127.0.0.1") -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port, local_address=source)


async def is_refused(stream: trio.SocketStream) -> bool:
    """A refused connection is closed by the server at once, before any request."""
    with trio.fail_after(5):
        try:
            data = await stream.receive_some(1)
        except trio.BrokenResourceError:
            return True
    return data == b""


def api_versions_frame_of_size(correlation_id: int, body_bytes: int) -> bytes:
    """An ApiVersions frame of exactly `body_bytes` after the size prefix (padded software name)."""
    for name_length in range(body_bytes, 0, -1):
        frame = api_versions_frame(correlation_id, "a" * name_length)
        if len(frame) - 4 == body_bytes:
            return frame
    raise AssertionError(f"no ApiVersions frame of {body_bytes} bytes")


def refused_count(node, reason: str) -> float:
    return node.metrics.registry.get_sample_value("kraftwerk_connections_refused_total", {"reason": reason}) or 0


# -- sans-I/O bookkeeping ---------------------------------------------------------

def test_connection_limiter_counts_total_and_per_ip_with_overrides():
    limiter = ConnectionLimiter(max_connections=3, max_per_ip=1, overrides={"10.0.0.9": 2})
    assert limiter.try_acquire("10.0.0.1") is None
    assert "max.connections.per.ip=1" in limiter.try_acquire("10.0.0.1")
    assert limiter.try_acquire("10.0.0.9") is None
    assert limiter.try_acquire("10.0.0.9") is None
    assert limiter.try_acquire("10.0.0.2").startswith("max.connections=3")
    limiter.release("10.0.0.9")
    assert limiter.try_acquire("10.0.0.2") is None
    assert (limiter.total, limiter.count("10.0.0.9")) == (3, 1)


async def test_memory_pool_waits_until_released_and_never_exceeds_its_capacity():
    pool = MemoryPool(100)
    assert pool.try_reserve(60)
    assert not pool.try_reserve(50)
    got = trio.Event()

    async def waiter() -> None:
        await pool.reserve(50)
        got.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not got.is_set()
        pool.release(60)
        await got.wait()
    assert pool.reserved_bytes == 50
    assert pool.high_water_bytes <= 100
    assert pool.waits == 1


# -- connection limits at accept ---------------------------------------------------

async def test_max_connections_closes_the_next_connection_at_once_and_keeps_the_others(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, max_connections=2)
            first = await open_connection(node.port)
            second = await open_connection(node.port)
            assert await api_versions_round_trip(first, 1)
            assert await api_versions_round_trip(second, 2)
            with capture_logs() as logs:
                third = await open_connection(node.port)
                assert await is_refused(third)
            assert [e["reason"] for e in events(logs, "net.connection_refused")] == ["max.connections=2 reached"]
            assert refused_count(node, "max.connections") == 1
            # The two admitted connections are still served.
            assert await api_versions_round_trip(first, 3)
            assert await api_versions_round_trip(second, 4)
            # A slot freed by a close is given to the next connection.
            await first.aclose()
            await third.aclose()
            # (wait_all_tasks_blocked returns once trio has polled the sockets and found
            # nothing more to do: the server has seen both closes by then.)
            await trio.testing.wait_all_tasks_blocked()
            fourth = await open_connection(node.port)
            assert await api_versions_round_trip(fourth, 5)
            await fourth.aclose()
            await second.aclose()
            nursery.cancel_scope.cancel()


async def test_max_connections_per_ip_and_its_override(tmp_path):
    """127.0.0.1 has an override of 2; any other address (127.0.0.2 here) gets 1."""
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, max_connections_per_ip=1,
                                    max_connections_per_ip_overrides=(("127.0.0.1", 2),))
            local = [await open_connection(node.port) for _ in range(2)]
            for index, stream in enumerate(local):
                assert await api_versions_round_trip(stream, index)
            other = await open_connection(node.port, source="127.0.0.2")
            assert await api_versions_round_trip(other, 10)
            with capture_logs() as logs:
                assert await is_refused(await open_connection(node.port))
                assert await is_refused(await open_connection(node.port, source="127.0.0.2"))
            assert [e["reason"] for e in events(logs, "net.connection_refused")] == [
                "max.connections.per.ip=2 reached for 127.0.0.1", "max.connections.per.ip=1 reached for 127.0.0.2"]
            assert refused_count(node, "max.connections.per.ip") == 2
            assert await api_versions_round_trip(local[0], 20)
            assert await api_versions_round_trip(other, 21)
            nursery.cancel_scope.cancel()


# -- request size --------------------------------------------------------------------

async def test_a_frame_above_socket_request_max_bytes_is_refused_before_its_body(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, socket_request_max_bytes=4096)
            big = await open_connection(node.port)
            with capture_logs() as logs:
                await big.send_all(struct.pack(">i", 4097))  # only the size prefix
                assert await FrameReader(big).next_payload() is None
            [event] = events(logs, "net.frame_rejected")
            assert "socket.request.max.bytes=4096" in event["error"]
            # Exactly at the limit is fine (ApiVersions padded to 4096 bytes).
            fits = await open_connection(node.port)
            frame = api_versions_frame_of_size(1, 4096)
            await fits.send_all(frame)
            payload = await FrameReader(fits).next_payload()
            assert payload is not None and decode_response(18, 3, payload)[0] == 1
            nursery.cancel_scope.cancel()


async def test_a_whole_frame_over_the_limits_in_one_chunk_is_refused(tmp_path):
    # A chunk that is exactly one whole frame is served without the decoder: the
    # same limits must hold for it (socket.request.max.bytes, and before SASL
    # authentication sasl.server.max.receive.size), over TCP and over a stream that
    # hands out bytearrays.
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, socket_request_max_bytes=4096,
                                    sasl_server_max_receive_size=1000)
            big = await open_connection(node.port)
            with capture_logs() as logs:
                await big.send_all(api_versions_frame_of_size(1, 4097))
                assert await FrameReader(big).next_payload() is None
            [event] = events(logs, "net.frame_rejected")
            assert "socket.request.max.bytes=4096" in event["error"]

            dispatcher = Dispatcher(node, node.served_apis)
            client, server = trio.testing.memory_stream_pair()
            conn = Connection(1, "memory", server, listener_name="SASL", security_protocol="SASL_PLAINTEXT")
            conn.sasl = _PendingSasl()
            with capture_logs() as logs:
                async with trio.open_nursery() as inner:
                    inner.start_soon(serve_connection, conn, dispatcher)
                    await client.send_all(api_versions_frame_of_size(2, 999))
                    payload = await FrameReader(client).next_payload()
                    assert decode_response(18, 3, payload)[0] == 2
                    # Refused: serve_connection returns (the nursery ends) without answering.
                    await client.send_all(api_versions_frame_of_size(3, 1001))
            [event] = events(logs, "net.frame_rejected")
            assert "sasl.server.max.receive.size=1000" in event["error"]
            nursery.cancel_scope.cancel()


class _PendingSasl:
    """Stands in for a server SASL session: the dispatcher and listener only read
    `authenticated`."""

    def __init__(self, authenticated: bool = False) -> None:
        self.authenticated = authenticated


async def test_before_sasl_authentication_frames_are_capped_at_sasl_server_max_receive_size(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, sasl_server_max_receive_size=1000)
            dispatcher = Dispatcher(node, node.served_apis)

            async def serve(conn: Connection) -> None:
                await serve_connection(conn, dispatcher)

            # Unauthenticated: 1001 bytes is over the limit, the connection is closed.
            client, server = trio.testing.memory_stream_pair()
            conn = Connection(1, "memory", server, listener_name="SASL", security_protocol="SASL_PLAINTEXT")
            conn.sasl = _PendingSasl()
            with capture_logs() as logs:
                async with trio.open_nursery() as inner:
                    inner.start_soon(serve, conn)
                    # ApiVersions is allowed before authentication and small: answered.
                    await client.send_all(api_versions_frame(1))
                    payload = await FrameReader(client).next_payload()
                    assert decode_response(18, 3, payload)[0] == 1
                    await client.send_all(struct.pack(">i", 1001))
            [event] = events(logs, "net.frame_rejected")
            assert "sasl.server.max.receive.size=1000" in event["error"]

            # Authenticated: the same size is fine (the server waits for the body).
            client, server = trio.testing.memory_stream_pair()
            conn = Connection(2, "memory", server, listener_name="SASL", security_protocol="SASL_PLAINTEXT")
            conn.sasl = _PendingSasl(authenticated=False)
            with capture_logs() as logs:
                async with trio.open_nursery() as inner:
                    inner.start_soon(serve, conn)
                    await client.send_all(api_versions_frame(1))
                    assert await FrameReader(client).next_payload() is not None
                    conn.sasl.authenticated = True  # what a successful SaslAuthenticate does
                    frame = api_versions_frame(2, "b" * 1200)
                    await client.send_all(frame)
                    payload = await FrameReader(client).next_payload()
                    assert payload is not None and decode_response(18, 3, payload)[0] == 2
                    await client.aclose()
            assert events(logs, "net.frame_rejected") == []
            nursery.cancel_scope.cancel()


# -- time limits (virtual time) --------------------------------------------------------

async def test_idle_connection_is_closed_after_connections_max_idle_ms(tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path, connections_max_idle_ms=60_000)
        stream = await open_connection(node.port)
        assert await api_versions_round_trip(stream, 1)
        mock_clock.jump(59)
        await trio.testing.wait_all_tasks_blocked()
        assert await api_versions_round_trip(stream, 2)
        with capture_logs() as logs:
            mock_clock.jump(61)
            assert await FrameReader(stream).next_payload() is None
        assert [e["idle_ms"] for e in events(logs, "net.connection_idle_timeout")] == [60_000]
        nursery.cancel_scope.cancel()


async def test_a_half_sent_frame_is_closed_after_the_receive_timeout(tmp_path, mock_clock):
    """Slowloris: a frame that has started must be complete within
    kraftwerk.request.receive.timeout.ms, however slowly its bytes trickle in."""
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path, request_receive_timeout_ms=10_000)
        # Completed in time: answered, even though it came in three pieces.
        timely = await open_connection(node.port)
        frame = api_versions_frame(1)
        await timely.send_all(frame[:3])
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(5)
        await timely.send_all(frame[3:10])
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(4.5)
        await timely.send_all(frame[10:])
        payload = await FrameReader(timely).next_payload()
        assert payload is not None and decode_response(18, 3, payload)[0] == 1

        slow = await open_connection(node.port)
        with capture_logs() as logs:
            await slow.send_all(frame[:10])
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(6)
            await slow.send_all(frame[10:12])  # still trickling: does not reset the clock
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(4.5)
            assert await FrameReader(slow).next_payload() is None
        [event] = events(logs, "net.request_receive_timeout")
        assert event["timeout_ms"] == 10_000
        # Between frames there is no receive deadline (only the idle timeout).
        assert await api_versions_round_trip(timely, 2)
        nursery.cancel_scope.cancel()


async def test_an_async_request_unanswered_after_the_request_timeout_closes_its_connection(tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path, request_timeout_ms=5_000)
        gate = trio.Event()
        original_submit = node.submit

        async def held_submit(command, **kwargs):
            await gate.wait()
            return await original_submit(command)

        node.submit = held_submit
        stream = await open_connection(node.port)
        update = {"timeout_ms": 1000, "validate_only": True, "feature_updates": [
            {"feature": "metadata.version", "max_version_level": 20, "upgrade_type": 1}]}
        with capture_logs() as logs:
            await stream.send_all(request_frame(57, 1, 7, update))
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(4.9)
            await trio.testing.wait_all_tasks_blocked()
            assert events(logs, "net.request_timed_out") == []
            mock_clock.jump(0.2)
            assert await FrameReader(stream).next_payload() is None
        [event] = events(logs, "net.request_timed_out")
        assert event["timeout_ms"] == 5_000
        gate.set()
        nursery.cancel_scope.cancel()


# -- in-flight bound --------------------------------------------------------------------

async def test_a_pipelining_client_gets_no_more_than_the_in_flight_bound_served_at_once(tmp_path):
    bound = 3
    total = 12
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, connection_max_in_flight_requests=bound)
            gate = trio.Event()
            entered = 0
            original_submit = node.submit

            async def held_submit(command, **kwargs):
                nonlocal entered
                entered += 1
                await gate.wait()
                return await original_submit(command)

            node.submit = held_submit
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            update = {"timeout_ms": 1000, "validate_only": True, "feature_updates": [
                {"feature": "metadata.version", "max_version_level": 20, "upgrade_type": 1}]}
            async with trio.open_nursery() as inner:
                inner.start_soon(serve_connection, Connection(1, "memory", server), dispatcher)
                await client.send_all(b"".join(request_frame(57, 1, index, update) for index in range(total)))
                await trio.testing.wait_all_tasks_blocked()
                assert entered == bound  # exactly the bound: read and being worked on, no more
                gate.set()
                reader = FrameReader(client)
                for index in range(total):
                    got_id, body = decode_response(57, 1, await reader.next_payload())
                    assert (got_id, body.error_code) == (index, ErrorCode.NONE)
                await client.aclose()
            assert entered == total
            nursery.cancel_scope.cancel()


# -- queued.max.request.bytes --------------------------------------------------------------

async def test_request_memory_pool_mutes_a_connection_until_memory_is_released(tmp_path):
    pool_bytes = 3000
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, queued_max_request_bytes=pool_bytes)
            dispatcher = Dispatcher(node, node.served_apis)
            limits = NetLimits.from_config(node.config, node.metrics.registry.__class__())
            pool = limits.memory
            big = api_versions_frame(1, "a" * 2000)  # ~2 KB
            other = api_versions_frame(2, "b" * 1500)  # ~1.5 KB: does not fit next to `big`
            a_client, a_server = trio.testing.memory_stream_pair()
            b_client, b_server = trio.testing.memory_stream_pair()
            with capture_logs() as logs:
                async with trio.open_nursery() as inner:
                    inner.start_soon(serve_connection, Connection(1, "a", a_server), dispatcher, limits)
                    inner.start_soon(serve_connection, Connection(2, "b", b_server), dispatcher, limits)
                    # A announces 2 KB and sends half of it: its reservation is held.
                    await a_client.send_all(big[:1000])
                    await trio.testing.wait_all_tasks_blocked()
                    assert pool.reserved_bytes == len(big) - 4
                    # B's whole request cannot be reserved: B is muted, unanswered.
                    await b_client.send_all(other)
                    await trio.testing.wait_all_tasks_blocked()
                    assert pool.reserved_bytes == len(big) - 4
                    assert pool.waits == 1
                    b_answers: list[bytes | None] = []
                    b_answered = trio.Event()

                    async def read_b() -> None:
                        b_answers.append(await FrameReader(b_client).next_payload())
                        b_answered.set()

                    inner.start_soon(read_b)
                    await trio.testing.wait_all_tasks_blocked()
                    assert b_answers == [], "the muted connection was served"
                    # A completes; its memory is released once decoded, and B resumes.
                    await a_client.send_all(big[1000:])
                    got_a = await FrameReader(a_client).next_payload()
                    await b_answered.wait()
                    got_b = b_answers[0]
                    assert decode_response(18, 3, got_a)[0] == 1
                    assert decode_response(18, 3, got_b)[0] == 2
                    await trio.testing.wait_all_tasks_blocked()
                    assert pool.reserved_bytes == 0
                    await a_client.aclose()
                    await b_client.aclose()
            assert pool.high_water_bytes <= pool_bytes
            assert len(events(logs, "net.request_memory_exhausted")) == 1
            nursery.cancel_scope.cancel()


async def test_a_frame_larger_than_the_whole_pool_is_refused(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, queued_max_request_bytes=1000)
            stream = await open_connection(node.port)
            with capture_logs() as logs:
                await stream.send_all(struct.pack(">i", 1001))
                assert await FrameReader(stream).next_payload() is None
            [event] = events(logs, "net.frame_rejected")
            assert "queued.max.request.bytes=1000" in event["error"]
            nursery.cancel_scope.cancel()
