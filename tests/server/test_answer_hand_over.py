"""Answers handed over to the task that completes them (server/net/listener.py).

An answer a task is still producing, next in line on a plain TCP connection with
nothing else to write, is written by whoever completes it, in that step. These
tests drive `serve_connection` with a stand-in dispatcher whose answers the test
completes itself, and check the bytes the client reads: whole, in request order,
the rest of a large answer and a close through the writer, the request timeout
still applied, and the same bytes as the generic path (a memory stream, which is
never handed over).
"""

from __future__ import annotations

import struct
import time
from dataclasses import replace

import trio
import trio.testing
from structlog.testing import capture_logs

from node_harness import connected_pair

from server.config import ServerConfig
from server.net.listener import Connection, PendingResponse, serve_connection

TIMEOUT_S = 20
_SIZE = struct.Struct(">i")


class _Dispatcher:
    """Frames are b"S<n>" (answered at once) or b"P<n>" (answered when the test says:
    `pending[n]`), padded to 8 bytes; answers are b"<n>:" followed by a body."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.pending: dict[int, PendingResponse] = {}

    def dispatch(self, conn, frame: bytes, nursery, views=None):
        kind, number = frame[:1], int(frame[1:].rstrip(b"."))
        if kind == b"S":
            return b"%d:sync;" % number
        slot = PendingResponse()
        self.pending[number] = slot
        return slot


def frame(kind: bytes, number: int) -> bytes:
    payload = (kind + b"%d" % number).ljust(8, b".")
    return _SIZE.pack(len(payload)) + payload


async def _read_exactly(stream, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:  # bounded by the test's fail_after
        chunk = await stream.receive_some(1 << 20)
        assert chunk, f"closed after {len(data)} of {count} bytes"
        data += chunk
    return bytes(data)


async def _until(condition) -> None:
    """Yields until `condition()` holds: real sockets, so the bytes may still be in the
    kernel. Bounded in real time (a test's clock may be virtual and stand still)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await trio.lowlevel.checkpoint()


async def _pending_and_settled(dispatcher: _Dispatcher, correlation: int) -> None:
    """Until request `correlation`'s answer is pending and every task has blocked: the
    writer has then either handed it over or is waiting for it."""
    await _until(lambda: correlation in dispatcher.pending)
    await trio.testing.wait_all_tasks_blocked()


async def _serve(config: ServerConfig, server) -> tuple[_Dispatcher, Connection]:
    dispatcher = _Dispatcher(config)
    return dispatcher, Connection(1, "127.0.0.1:1", server)


async def test_an_answer_is_written_by_the_task_that_completes_it():
    client, server = await connected_pair()
    dispatcher, conn = await _serve(ServerConfig(), server)
    async with client, server, trio.open_nursery() as nursery:
        with trio.fail_after(TIMEOUT_S):
            nursery.start_soon(serve_connection, conn, dispatcher)
            for round_ in range(3):
                await client.send_all(frame(b"P", round_))
                await _pending_and_settled(dispatcher, round_)
                slot = dispatcher.pending[round_]
                assert slot.deliver is not None  # handed over: nothing else is owed
                slot.set(b"%d:answer;" % round_)
                # Written in this very step, before any other task ran.
                assert slot.written
                assert await _read_exactly(client, len(b"0:answer;")) == b"%d:answer;" % round_
            nursery.cancel_scope.cancel()


async def test_answers_leave_in_request_order_around_a_handed_over_one():
    client, server = await connected_pair()
    dispatcher, conn = await _serve(ServerConfig(), server)
    async with client, server, trio.open_nursery() as nursery:
        with trio.fail_after(TIMEOUT_S):
            nursery.start_soon(serve_connection, conn, dispatcher)
            await client.send_all(frame(b"P", 1))
            await _pending_and_settled(dispatcher, 1)
            assert dispatcher.pending[1].deliver is not None
            # Behind the handed-over answer: a ready one, then another slow one, in one chunk.
            await client.send_all(frame(b"S", 2) + frame(b"P", 3) + frame(b"S", 4))
            await _pending_and_settled(dispatcher, 3)
            # The writer took answer 1 back when answer 2 queued behind it.
            assert dispatcher.pending[1].deliver is None
            dispatcher.pending[3].set(b"3:late;")
            await trio.testing.wait_all_tasks_blocked()
            dispatcher.pending[1].set(b"1:first;")
            expected = b"1:first;2:sync;3:late;4:sync;"
            assert await _read_exactly(client, len(expected)) == expected
            nursery.cancel_scope.cancel()


async def test_what_the_socket_does_not_take_at_once_follows_through_the_writer():
    client, server = await connected_pair()
    dispatcher, conn = await _serve(ServerConfig(), server)
    big = b"0:" + bytes(range(256)) * (64 * 1024) + b";"  # 16 MiB: more than loopback buffers hold
    async with client, server, trio.open_nursery() as nursery:
        with trio.fail_after(TIMEOUT_S * 3):
            nursery.start_soon(serve_connection, conn, dispatcher)
            await client.send_all(frame(b"P", 0))
            await _pending_and_settled(dispatcher, 0)
            slot = dispatcher.pending[0]
            assert slot.deliver is not None
            slot.set(big)
            assert not slot.written  # the client reads nothing yet: the writer has the rest
            await client.send_all(frame(b"S", 1))
            expected = big + b"1:sync;"
            assert await _read_exactly(client, len(expected)) == expected
            nursery.cancel_scope.cancel()


async def test_a_handed_over_close_ends_the_connection():
    client, server = await connected_pair()
    dispatcher, conn = await _serve(ServerConfig(), server)
    async with client, server:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_connection, conn, dispatcher)
                await client.send_all(frame(b"S", 0) + frame(b"P", 1))
                await _pending_and_settled(dispatcher, 1)
                assert await _read_exactly(client, len(b"0:sync;")) == b"0:sync;"
                assert dispatcher.pending[1].deliver is not None
                dispatcher.pending[1].set(None)  # the handler closes the connection
                # serve_connection returns by itself (nothing here cancels it): the
                # connection is over, as for an answer the writer waited for.
            assert not nursery.cancel_scope.cancel_called


async def test_a_handed_over_answer_still_times_out(mock_clock):
    client, server = await connected_pair()
    dispatcher, conn = await _serve(replace(ServerConfig(), request_timeout_ms=1_000), server)
    async with client, server:
        with trio.fail_after(TIMEOUT_S):
            with capture_logs() as logs:
                async with trio.open_nursery() as nursery:
                    served = []

                    async def serve() -> None:
                        await serve_connection(conn, dispatcher)
                        served.append(True)

                    nursery.start_soon(serve)
                    # A first round trip, then the request whose answer never comes.
                    await client.send_all(frame(b"S", 0))
                    assert await _read_exactly(client, len(b"0:sync;")) == b"0:sync;"
                    await trio.testing.wait_all_tasks_blocked()
                    await client.send_all(frame(b"P", 1))
                    await _pending_and_settled(dispatcher, 1)
                    assert dispatcher.pending[1].deliver is not None
                    mock_clock.jump(0.9)
                    await trio.testing.wait_all_tasks_blocked()
                    assert not served
                    mock_clock.jump(0.2)
                    # The connection ends by itself (bounded in real time: the clock is virtual).
                    await _until(lambda: served)
            assert [e["timeout_ms"] for e in logs if e["event"] == "net.request_timed_out"] == [1_000]


async def _scenario_bytes(client, server, expected_length: int) -> tuple[bytes, bool]:
    """One fixed mix of ready and later answers; (bytes the client read, whether any
    answer was handed over)."""
    dispatcher, conn = await _serve(ServerConfig(), server)
    handed = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, conn, dispatcher)
        sent = [(b"P", 0), (b"S", 1), (b"P", 2), (b"P", 3), (b"S", 4)]
        for index, (kind, number) in enumerate(sent):
            await client.send_all(frame(kind, number))
            await trio.testing.wait_all_tasks_blocked()
            if kind == b"P":
                await _pending_and_settled(dispatcher, number)
                slot = dispatcher.pending[number]
                handed |= slot.deliver is not None
                if number != 2:
                    slot.set(b"%d:later;" % number)
        await trio.testing.wait_all_tasks_blocked()
        dispatcher.pending[2].set(b"2:last;")
        data = await _read_exactly(client, expected_length)
        nursery.cancel_scope.cancel()
    return data, handed


async def test_the_bytes_match_the_generic_path():
    expected = b"0:later;1:sync;2:last;3:later;4:sync;"
    with trio.fail_after(TIMEOUT_S):
        client, server = await connected_pair()
        async with client, server:
            over_tcp, handed = await _scenario_bytes(client, server, len(expected))
        assert handed
        left, right = trio.testing.memory_stream_pair()
        generic, handed = await _scenario_bytes(left, right, len(expected))
        assert not handed  # not a plain TCP stream: the writer writes everything
    assert over_tcp == generic == expected
