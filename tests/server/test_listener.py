"""The trio listener and dispatcher, in process: pipelining, order, bounds, slow peers.

Real sockets on 127.0.0.1 where the behaviour is about TCP (pipelining on
one connection); trio memory streams where the test must know exactly what
the server has consumed (`wait_all_tasks_blocked` only sees trio tasks, not
bytes in the kernel).
"""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from server.dispatch import Dispatcher
from server.net.listener import Connection, serve_connection

from node_harness import (
    FrameReader,
    api_versions_body,
    decode_response,
    request_frame,
    running_node,
    validate_only_update,
)

TIMEOUT_S = 20


def pipelined_requests(count: int) -> list[tuple[int, int, int, dict]]:
    """(api key, version, correlation id, body): sync reads interleaved with async
    UpdateFeatures that wait for the controller loop, so order is really tested."""
    kinds = [
        (18, 3, api_versions_body()),
        (57, 1, validate_only_update(20)),
        (60, 1, {"endpoint_type": 1}),
        (3, 12, {"topics": []}),
        (57, 1, validate_only_update(21)),  # v2 needs metadata.version 3.9-IV0 (gating)
        (55, 2, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}),
    ]
    return [(*kinds[index % len(kinds)][:2], 1000 + index, kinds[index % len(kinds)][2]) for index in range(count)]


async def test_fifty_pipelined_requests_are_answered_in_order(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            requests = pipelined_requests(50)
            stream = await trio.open_tcp_stream("127.0.0.1", node.port)
            async with stream:
                await stream.send_all(b"".join(request_frame(k, v, c, b) for k, v, c, b in requests))
                reader = FrameReader(stream)
                for api_key, version, correlation_id, _ in requests:
                    payload = await reader.next_payload()
                    assert payload is not None, f"connection closed before response {correlation_id}"
                    got_id, body = decode_response(api_key, version, payload)
                    assert got_id == correlation_id
                    # Metadata has no top-level error code; its cluster id proves it decoded.
                    assert body.get("error_code", ErrorCode.NONE) == ErrorCode.NONE
                    assert api_key != 3 or body.cluster_id == node.cluster_id
            # Validate-only: nothing was written by the 16 UpdateFeatures (the log holds
            # the LeaderChange record, the bootstrap record and the node's own
            # RegisterControllerRecord, KIP-919, committed before it reported started).
            assert node.state.metadata_version == 19
            assert node.metadata_log.end_offset == 3


async def test_in_flight_requests_per_connection_are_bounded(tmp_path):
    """With the controller held, the server must stop taking requests off the
    connection once `connection_max_in_flight_requests` are between read and
    written (listener.py's module docstring), and answer all of them in order
    once the controller moves again."""
    max_in_flight = 4
    total = 20
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, connection_max_in_flight_requests=max_in_flight) as node:
            gate = trio.Event()
            entered = 0
            original_submit = node.submit

            async def held_submit(command, **kwargs):
                nonlocal entered
                entered += 1
                await gate.wait()
                return await original_submit(command)

            node.submit = held_submit  # the handlers' only way into the controller
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_connection, Connection(1, "memory", server), dispatcher)
                await client.send_all(b"".join(
                    request_frame(57, 1, index, validate_only_update(20)) for index in range(total)))
                await trio.testing.wait_all_tasks_blocked()
                held = entered
                gate.set()
                reader = FrameReader(client)
                for index in range(total):
                    payload = await reader.next_payload()
                    got_id, body = decode_response(57, 1, payload)
                    assert (got_id, body.error_code) == (index, ErrorCode.NONE)
                await client.aclose()
            assert entered == total
            assert 1 <= held <= max_in_flight, (
                f"{held} requests were taken off the connection while none could be answered; "
                f"the bound is {max_in_flight}")


async def test_a_request_dribbled_one_byte_at_a_time_is_answered(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_connection, Connection(1, "memory", server), dispatcher)
                frame = request_frame(18, 3, 77, api_versions_body())
                for index in range(len(frame)):
                    await client.send_all(frame[index:index + 1])
                    # The server has consumed this byte and is waiting for the next.
                    await trio.testing.wait_all_tasks_blocked()
                payload = await FrameReader(client).next_payload()
                got_id, body = decode_response(18, 3, payload)
                assert (got_id, body.error_code) == (77, ErrorCode.NONE)
                await client.aclose()


async def test_a_bad_frame_closes_only_its_own_connection(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            good = await trio.open_tcp_stream("127.0.0.1", node.port)
            bad = await trio.open_tcp_stream("127.0.0.1", node.port)
            async with good, bad:
                good_reader = FrameReader(good)
                await good.send_all(request_frame(18, 3, 1, api_versions_body()))
                assert decode_response(18, 3, await good_reader.next_payload())[0] == 1
                with capture_logs() as logs:
                    # Half of a valid request, then an unknown API on the same connection.
                    await bad.send_all(struct.pack(">ihhi", 10, 9999, 0, 5) + b"\xff\xff\x00\x00")
                    assert await FrameReader(bad).next_payload() is None
                assert [e["api_key"] for e in logs if e["event"] == "net.unknown_api"] == [9999]
                await good.send_all(request_frame(18, 3, 2, api_versions_body()))
                assert decode_response(18, 3, await good_reader.next_payload())[0] == 2


async def test_idle_connection_is_closed_after_connections_max_idle_ms(tmp_path, mock_clock):
    # mock_clock: virtual time stands still unless the test jumps it, so the
    # real-socket round trips below cannot race the idle timer.
    async with running_node(tmp_path, connections_max_idle_ms=60_000) as node:
        stream = await trio.open_tcp_stream("127.0.0.1", node.port)
        async with stream:
            reader = FrameReader(stream)
            await stream.send_all(request_frame(18, 3, 1, api_versions_body()))
            assert decode_response(18, 3, await reader.next_payload())[0] == 1
            mock_clock.jump(59)
            await trio.testing.wait_all_tasks_blocked()
            await stream.send_all(request_frame(18, 3, 2, api_versions_body()))
            assert decode_response(18, 3, await reader.next_payload())[0] == 2
            with capture_logs() as logs:
                mock_clock.jump(61)
                assert await reader.next_payload() is None  # closed by the server
            assert [e["idle_ms"] for e in logs if e["event"] == "net.connection_idle_timeout"] == [60_000]


async def _serve(conn: Connection, dispatcher: Dispatcher, server) -> None:
    """One connection over a memory stream, closed when served, as serve_listener does."""
    try:
        await serve_connection(conn, dispatcher)
    finally:
        await server.aclose()


async def test_graceful_close_answers_what_was_read_then_ends_the_connection(tmp_path):
    """Connection.close (a node closing a connection whose ApiVersions answer a
    metadata.version change made stale): every request read before the connection is
    idle gets its answer — also one that arrives after close() was called — and the
    connection ends at the first idle moment."""
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            gate = trio.Event()
            original_submit = node.submit

            async def held_submit(command, **kwargs):
                await gate.wait()
                return await original_submit(command)

            node.submit = held_submit
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            conn = Connection(1, "memory", server)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve, conn, dispatcher, server)
                await client.send_all(request_frame(57, 1, 1, validate_only_update(20)))
                await trio.testing.wait_all_tasks_blocked()
                conn.close()
                assert not conn.idle  # the UpdateFeatures is in flight: not closed yet
                await client.send_all(request_frame(18, 3, 2, api_versions_body()))
                await trio.testing.wait_all_tasks_blocked()
                gate.set()
                reader = FrameReader(client)
                got_id, body = decode_response(57, 1, await reader.next_payload())
                assert (got_id, body.error_code) == (1, ErrorCode.NONE)
                # The ApiVersions read while the UpdateFeatures was in flight is answered too
                # (it was read: dropping it would leave the client's request unanswered) ...
                got_id, body = decode_response(18, 3, await reader.next_payload())
                assert (got_id, body.error_code) == (2, ErrorCode.NONE)
                # ... and then, idle, the connection ends.
                assert await reader.next_payload() is None


@pytest.mark.parametrize("waiting", [1, 3])
async def test_graceful_close_answers_frames_read_while_waiting_for_an_in_flight_slot(tmp_path, waiting):
    """Frames the reader has taken off the connection while it waits for an in-flight
    slot are requests read: a graceful close that becomes due when the writer hands the
    slots back must still answer them, in order, before the connection ends (also when
    nothing is left in the decoder, with one frame waiting)."""
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, connection_max_in_flight_requests=2) as node:
            gate = trio.Event()
            original_submit = node.submit

            async def held_submit(command, **kwargs):
                await gate.wait()
                return await original_submit(command)

            node.submit = held_submit
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            conn = Connection(1, "memory", server)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve, conn, dispatcher, server)
                # One chunk: two UpdateFeatures take both slots, the ApiVersions wait.
                waiting_ids = range(3, 3 + waiting)
                await client.send_all(request_frame(57, 1, 1, validate_only_update(20))
                                      + request_frame(57, 1, 2, validate_only_update(20))
                                      + b"".join(request_frame(18, 3, index, api_versions_body())
                                                 for index in waiting_ids))
                await trio.testing.wait_all_tasks_blocked()
                conn.close()
                assert not conn.idle
                gate.set()
                reader = FrameReader(client)
                for index, api_key, version in [(1, 57, 1), (2, 57, 1)] + [(i, 18, 3) for i in waiting_ids]:
                    payload = await reader.next_payload()
                    assert payload is not None, f"closed before answering request {index}"
                    got_id, body = decode_response(api_key, version, payload)
                    assert (got_id, body.error_code) == (index, ErrorCode.NONE)
                assert await reader.next_payload() is None  # then, idle, it ends


async def test_pipelined_requests_answered_by_tasks_start_in_the_order_they_were_sent(tmp_path):
    """One chunk of requests that each get a task (UpdateFeatures): the tasks take their
    first steps in request order, so what they start (a command for the controller loop,
    a SASL step) happens in the order the client sent them. trio runs the tasks of one
    scheduling round in either order, so chunks are repeated until a listener that starts
    them all in one round would have been caught (each chunk: 1/2 chance of order)."""
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path) as node:
            client, server = trio.testing.memory_stream_pair()
            dispatcher = Dispatcher(node, node.served_apis)
            conn = Connection(1, "memory", server)
            started = []
            run_async = dispatcher._run_async

            async def recording_run_async(api, ctx, *args):
                started.append(ctx.correlation_id)
                await run_async(api, ctx, *args)

            dispatcher._run_async = recording_run_async

            async with trio.open_nursery() as nursery:
                nursery.start_soon(_serve, conn, dispatcher, server)
                reader = FrameReader(client)
                chunks, per_chunk = 12, 4
                for chunk in range(chunks):
                    ids = [chunk * per_chunk + index for index in range(per_chunk)]
                    await client.send_all(b"".join(request_frame(57, 1, i, validate_only_update(20)) for i in ids))
                    for i in ids:
                        got_id, body = decode_response(57, 1, await reader.next_payload())
                        assert (got_id, body.error_code) == (i, ErrorCode.NONE)
                nursery.cancel_scope.cancel()
            assert started == list(range(chunks * per_chunk))
