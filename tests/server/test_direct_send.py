"""Answers written straight to the socket: whole, in order, and the rest by send_all."""

from __future__ import annotations

import trio
import trio.testing

from node_harness import connected_pair

from server.net.direct_io import send_all_now, write_now


async def _read_exactly(stream, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:  # bounded by the test's fail_after
        chunk = await stream.receive_some(1 << 20)
        assert chunk, "closed early"
        data += chunk
    return bytes(data)


async def test_a_small_answer_is_taken_at_once_and_arrives_whole():
    client, server = await connected_pair()
    async with client, server:
        with trio.fail_after(10):
            assert write_now(server, b"abc") == 3
            await send_all_now(server, b"defg")
            assert await _read_exactly(client, 7) == b"abcdefg"


async def test_what_the_socket_cannot_take_at_once_follows_in_order():
    client, server = await connected_pair()
    payload = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than loopback buffers hold
    async with client, server:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                received = []

                async def read_all() -> None:
                    received.append(await _read_exactly(client, len(payload) + 2))

                nursery.start_soon(read_all)
                await send_all_now(server, payload)
                await send_all_now(server, b"!!")
        assert received[0] == payload + b"!!"


async def test_a_closed_stream_fails_like_send_all_and_other_streams_use_send_all():
    client, server = await connected_pair()
    await server.aclose()
    try:
        write_now(server, b"x")
    except trio.BrokenResourceError:
        pass
    else:
        raise AssertionError("a write to a closed stream succeeded")
    await client.aclose()
    # Not a plain TCP stream (TLS, memory): nothing written directly.
    left, right = trio.testing.memory_stream_pair()
    assert write_now(left, b"x") == 0
    with trio.fail_after(10):
        await send_all_now(left, b"xyz")
        assert await right.receive_some(10) == b"xyz"
