"""The listener's reads straight from a plain TCP socket (`_receiver`): what trio's
`receive_some` gives (data, EOF, the stream errors), a checkpoint on every read, and,
after the reader wrote answers itself, the checkpoint taken before the read, so a
request sent while other tasks ran is read without waiting for the socket."""

from __future__ import annotations

import os
import socket
import struct

import pytest
import trio
import trio.testing

from node_harness import connected_pair

from server.net import listener
from server.net.listener import RECEIVE_CHUNK_BYTES


@pytest.mark.parametrize("answered", [False, True])
async def test_reads_what_was_sent_then_the_end_of_the_stream(answered):
    client, server = await connected_pair()
    receive = listener._receiver(server)
    async with server:
        with trio.fail_after(10):
            await client.send_all(b"hello")
            data = bytearray()
            while len(data) < 5:  # bounded by fail_after
                chunk = await receive(answered)
                assert chunk
                data += chunk
            assert data == b"hello"
            await client.aclose()
            assert await receive(answered) == b""


@pytest.mark.parametrize("answered", [False, True])
async def test_a_read_waits_for_data_that_has_not_arrived(answered):
    client, server = await connected_pair()
    receive = listener._receiver(server)
    async with client, server:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                got = []

                async def read() -> None:
                    got.append(await receive(answered))

                nursery.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                assert not got  # parked on the socket
                await client.send_all(b"x")
            assert got == [b"x"]


async def test_a_request_sent_while_other_tasks_ran_is_read_without_waiting(monkeypatch):
    client, server = await connected_pair()
    real_checkpoint = trio.lowlevel.checkpoint

    async def checkpoint_while_the_client_sends() -> None:
        # Another task's step at the read's checkpoint: the client's next request reaches
        # the loopback socket (trio runs one round's tasks in either order, so a real
        # task could not be made to run exactly here).
        os.write(client.socket.fileno(), b"next request")
        await real_checkpoint()

    async def no_wait(fd) -> None:
        raise AssertionError("the read waited for the socket although the request had arrived")

    monkeypatch.setattr(trio.lowlevel, "checkpoint", checkpoint_while_the_client_sends)
    monkeypatch.setattr(trio.lowlevel, "wait_readable", no_wait)
    receive = listener._receiver(server)
    monkeypatch.undo()
    async with client, server:
        with trio.fail_after(10):
            assert await receive(True) == b"next request"


@pytest.mark.parametrize("answered", [False, True])
async def test_every_read_is_a_checkpoint_even_with_data_waiting(answered):
    """A cancelled read raises before taking anything."""
    client, server = await connected_pair()
    receive = listener._receiver(server)
    async with client, server:
        with trio.fail_after(10):
            await client.send_all(b"pending")
            await trio.testing.wait_all_tasks_blocked()
            with trio.CancelScope() as scope:
                scope.cancel()
                await receive(answered)
            assert scope.cancelled_caught
            assert await receive(answered) == b"pending"  # nothing was consumed by the cancelled read


@pytest.mark.parametrize("answered", [False, True])
async def test_a_reset_connection_is_a_broken_stream(answered):
    client, server = await connected_pair()
    receive = listener._receiver(server)
    # SO_LINGER 0: the close sends a reset.
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()
    async with server:
        with trio.fail_after(10):
            with pytest.raises(trio.BrokenResourceError):
                await receive(answered)


@pytest.mark.parametrize("answered", [False, True])
async def test_a_stream_closed_by_another_task_is_a_closed_stream(answered):
    client, server = await connected_pair()
    receive = listener._receiver(server)
    async with client:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                failures = []

                async def read() -> None:
                    try:
                        await receive(answered)
                    except trio.ClosedResourceError as exc:
                        failures.append(exc)

                nursery.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                await server.aclose()  # while the read waits for the socket
            assert len(failures) == 1
            with pytest.raises(trio.ClosedResourceError):
                await receive(answered)  # and after


@pytest.mark.parametrize("answered", [False, True])
async def test_other_streams_are_read_with_receive_some(answered):
    left, right = trio.testing.memory_stream_pair()
    receive = listener._receiver(right)
    with trio.fail_after(10):
        await left.send_all(b"x" * (RECEIVE_CHUNK_BYTES + 10))
        assert len(await receive(answered)) <= RECEIVE_CHUNK_BYTES


class _Steps(trio.abc.Instrument):
    """Counts the steps of one task: a read that yields ends one."""

    def __init__(self, task) -> None:
        self.task = task
        self.count = 0

    def after_task_step(self, task) -> None:
        if task is self.task:
            self.count += 1


async def test_a_read_that_did_not_wait_still_yields():
    client, server = await connected_pair()
    receive = listener._receiver(server)
    async with client, server:
        with trio.fail_after(10):
            await client.send_all(b"ready")
            await trio.testing.wait_all_tasks_blocked()
            steps = _Steps(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(steps)
            try:
                # Read first (no answer written), then the round the other tasks run in.
                assert await receive(False) == b"ready"
            finally:
                trio.lowlevel.remove_instrument(steps)
            assert steps.count == 1
