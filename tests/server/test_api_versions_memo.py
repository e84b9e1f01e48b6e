"""ApiVersions answers memoized by request bytes (server/handlers/api_versions.py
`AnswerMemo`, kept per route by the dispatcher): a repeated request gets exactly the
answer, and leaves its connection exactly as, handling it would; refusals stay Kafka's;
an answer never outlives the advertised table or the features it was made under (a
stale list would make a client use versions the node no longer allows, or miss a
finalized feature); the memo is bounded; it is off while requests are logged."""

from __future__ import annotations

import struct
from dataclasses import replace

import trio
import trio.testing

from protocol.errors import ErrorCode
from server.client import KafkaClient
from server.dispatch import Dispatcher
from server.handlers import api_versions
from server.net.listener import CLOSE_STALE_API_VERSIONS, Connection, PendingResponse, serve_connection
from server.net.peer import SOFTWARE_NAME

from node_harness import FrameReader, decode_response, request_frame, running_node

TIMEOUT_S = 20
API_VERSIONS, UPDATE_FEATURES = 18, 57
MV_3_8_IV0, MV_3_9_IV0, MV_4_0_IV0 = 20, 21, 22
UPGRADE, SAFE_DOWNGRADE = 1, 2


def frame_of(version: int, correlation_id: int, body: dict) -> bytes:
    return request_frame(API_VERSIONS, version, correlation_id, body)[4:]


def memo_of(dispatcher: Dispatcher, frame: bytes):
    return dispatcher._routes[frame[:4]].memo


def forbid_decoding(dispatcher: Dispatcher, frame: bytes):
    """Until the returned function is called, a request of this frame's route that is
    decoded fails the test: it had to be answered from the memo."""
    route = dispatcher._routes[frame[:4]]
    allowed = route.decode

    def decode(frame, offset):
        raise AssertionError("decoded: not answered from the memo")
    route.decode = decode

    def allow() -> None:
        route.decode = allowed
    return allow


BODIES = [
    (3, {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}),
    (4, {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}),
    (5, {"client_software_name": "kafka-python", "client_software_version": "3.0.12",
         "cluster_id": "some-cluster", "node_id": 1}),
    (3, {"client_software_name": SOFTWARE_NAME, "client_software_version": "0.1.0"}),
    (0, {}),
    (2, {}),
    # Refused: Kafka's INVALID_REQUEST, every time.
    (3, {"client_software_name": "-bad-", "client_software_version": "1.0"}),
    (3, {"client_software_name": "ok", "client_software_version": "1.0 beta"}),
    (5, {"client_software_name": "kafka-python", "client_software_version": "3.0.12",
         "cluster_id": "some-cluster", "node_id": -1}),
]


async def test_a_repeated_request_gets_the_handled_answer_and_connection_state(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            warm = Dispatcher(node, node.served_apis)
            for index, (version, body) in enumerate(BODIES):
                first = frame_of(version, 100 + index, body)
                again = frame_of(version, 200 + index, body)
                warm_conn = Connection(1, "127.0.0.1:1", None)
                assert warm.dispatch(warm_conn, first, nursery) is not None
                allow = forbid_decoding(warm, again)
                warm_conn = Connection(2, "127.0.0.1:2", None)
                from_memo = warm.dispatch(warm_conn, again, nursery)
                allow()
                # The same request handled by a dispatcher that never saw it.
                cold_conn = Connection(3, "127.0.0.1:3", None)
                handled = Dispatcher(node, node.served_apis).dispatch(cold_conn, again, nursery)
                assert from_memo == handled, (version, body)
                assert struct.unpack_from(">i", from_memo, 4)[0] == 200 + index
                for name in ("advertised", "client_software", "renegotiates", "closing"):
                    assert getattr(warm_conn, name) == getattr(cold_conn, name), (name, version, body)
                _, answer = decode_response(API_VERSIONS, version, from_memo[4:])
                refused = "-bad-" in str(body) or "beta" in str(body) or body.get("node_id") == -1
                assert answer.error_code == (ErrorCode.INVALID_REQUEST if refused else ErrorCode.NONE)
                assert (warm_conn.advertised is None) == refused


async def test_a_memoized_answer_calls_off_a_close_pending_for_a_stale_answer(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            dispatcher = Dispatcher(node, node.served_apis)
            body = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
            conn = Connection(1, "127.0.0.1:1", None)
            dispatcher.dispatch(conn, frame_of(3, 1, body), nursery)
            forbid_decoding(dispatcher, frame_of(3, 2, body))
            conn.close(CLOSE_STALE_API_VERSIONS)
            assert conn.closing
            dispatcher.dispatch(conn, frame_of(3, 2, body), nursery)
            assert not conn.closing and conn.close_reason is None


async def ask(client: trio.abc.Stream, reader: FrameReader, frame: bytes):
    await client.send_all(struct.pack(">i", len(frame)) + frame)
    payload = await reader.next_payload()
    assert payload is not None, "the connection closed"
    return decode_response(API_VERSIONS, 3, payload)[1]


async def change_feature(port: int, feature: str, level: int, upgrade_type: int = UPGRADE) -> None:
    async with await KafkaClient.connect("127.0.0.1", port) as admin:
        reply = await admin.request(UPDATE_FEATURES, 1, {
            "timeout_ms": 5000, "validate_only": False,
            "feature_updates": [{"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}]})
        assert reply.error_code == ErrorCode.NONE, reply


def levels(answer) -> dict[str, int]:
    return {item.name: item.max_version_level for item in answer.finalized_features}


def max_version(answer, api_key: int) -> int:
    return next(item.max_version for item in answer.api_keys if item.api_key == api_key)


async def served_over_memory_stream(node, nursery):
    dispatcher = Dispatcher(node, node.served_apis)
    client, server = trio.testing.memory_stream_pair()
    conn = Connection(1, "127.0.0.1:1", server)
    nursery.start_soon(serve_connection, conn, dispatcher)
    return dispatcher, conn, client, FrameReader(client)


async def test_a_metadata_version_change_is_never_answered_from_a_stale_memo(tmp_path):
    # An upgrade replaces the advertised table (UpdateFeatures v2 needs 3.9-IV0) and the
    # features: the same request bytes must get the new list.
    body = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            dispatcher, conn, client, reader = await served_over_memory_stream(node, nursery)
            before = await ask(client, reader, frame_of(3, 1, body))
            allow = forbid_decoding(dispatcher, frame_of(3, 2, body))
            assert await ask(client, reader, frame_of(3, 2, body)) == before  # from the memo
            assert max_version(before, UPDATE_FEATURES) == 1 and levels(before)["metadata.version"] == MV_3_8_IV0
            allow()
            await change_feature(node.port, "metadata.version", MV_3_9_IV0)
            after = await ask(client, reader, frame_of(3, 3, body))
            assert levels(after)["metadata.version"] == MV_3_9_IV0
            assert max_version(after, UPDATE_FEATURES) == 2
            assert after.finalized_features_epoch > before.finalized_features_epoch
            assert conn.advertised is node.advertised_ranges()
            nursery.cancel_scope.cancel()


async def test_a_feature_change_that_keeps_the_versions_is_never_answered_from_a_stale_memo(tmp_path):
    # group.version moves the finalized features and their epoch but not the advertised
    # table (gating follows metadata.version only): a memo checked against the table
    # alone would answer with the old features.
    body = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_4_0_IV0) as node, trio.open_nursery() as nursery:
            dispatcher, conn, client, reader = await served_over_memory_stream(node, nursery)
            table = node.advertised_ranges()
            before = await ask(client, reader, frame_of(3, 1, body))
            allow = forbid_decoding(dispatcher, frame_of(3, 2, body))
            assert await ask(client, reader, frame_of(3, 2, body)) == before  # from the memo
            assert levels(before)["group.version"] == 1
            allow()
            await change_feature(node.port, "group.version", 0, SAFE_DOWNGRADE)
            assert node.advertised_ranges() is table
            after = await ask(client, reader, frame_of(3, 3, body))
            assert "group.version" not in levels(after)
            assert after.finalized_features_epoch > before.finalized_features_epoch
            nursery.cancel_scope.cancel()


async def test_the_memo_is_bounded(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            dispatcher = Dispatcher(node, node.served_apis)
            conn = Connection(1, "127.0.0.1:1", None)
            for index in range(api_versions.MEMO_MAX_ENTRIES * 2 + 3):
                frame = frame_of(3, index, {"client_software_name": f"client{index}",
                                            "client_software_version": "1.0"})
                dispatcher.dispatch(conn, frame, nursery)
                assert len(memo_of(dispatcher, frame)._entries) <= api_versions.MEMO_MAX_ENTRIES
            long_name = "x" * api_versions.MEMO_MAX_FRAME_BYTES
            frame = frame_of(3, 1, {"client_software_name": long_name, "client_software_version": "1.0"})
            entries = len(memo_of(dispatcher, frame)._entries)
            dispatcher.dispatch(conn, frame, nursery)
            assert len(memo_of(dispatcher, frame)._entries) == entries  # too long to remember
            assert conn.client_software == (long_name, "1.0")


async def test_no_memo_while_requests_are_logged(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0, log_level="debug") as node, trio.open_nursery() as nursery:
            dispatcher = Dispatcher(node, node.served_apis)
            frame = frame_of(3, 1, {"client_software_name": "a", "client_software_version": "1"})
            dispatcher.dispatch(Connection(1, "127.0.0.1:1", None), frame, nursery)
            assert memo_of(dispatcher, frame) is None


async def test_a_request_behind_the_read_barrier_is_not_answered_from_the_memo(tmp_path):
    # A node that is not the leader answers reads once its image has caught up: a memo
    # answer now could list features older than what the client just wrote elsewhere.
    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            dispatcher = Dispatcher(node, node.served_apis)
            body = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
            conn = Connection(1, "127.0.0.1:1", None)
            assert dispatcher.dispatch(conn, frame_of(3, 1, body), nursery).__class__ is bytes
            assert dispatcher.dispatch(conn, frame_of(3, 2, body), nursery).__class__ is bytes
            node.read_barrier_needed = lambda: True
            assert isinstance(dispatcher.dispatch(conn, frame_of(3, 3, body), nursery), PendingResponse)


async def test_no_memo_for_a_handler_put_in_place_of_the_catalogs(tmp_path):
    # The memo repeats what api_versions.handle does; another handler's answers are its own.
    calls = []

    def other_handler(ctx, request):
        calls.append(ctx.correlation_id)
        return ctx.services.api_versions_body(ctx.api_version)

    with trio.fail_after(TIMEOUT_S):
        async with running_node(tmp_path, MV_3_8_IV0) as node, trio.open_nursery() as nursery:
            served = dict(node.served_apis)
            served[API_VERSIONS] = replace(served[API_VERSIONS], handler=other_handler)
            dispatcher = Dispatcher(node, served)
            body = {"client_software_name": "a", "client_software_version": "1"}
            for correlation_id in (1, 2, 3):
                dispatcher.dispatch(Connection(1, "127.0.0.1:1", None), frame_of(3, correlation_id, body), nursery)
            assert memo_of(dispatcher, frame_of(3, 1, body)) is None
            assert calls == [1, 2, 3]
