"""Broker session expiry on a running node, with trio's MockClock.

The node runs in process with real sockets on 127.0.0.1 and pytest-trio's
`mock_clock` (virtual time that moves only when the test jumps it). Autojump
is not used on purpose: it advances time whenever every task is blocked,
which includes waiting for the kernel to deliver bytes on a real socket, so
the session could expire in the middle of the test's own round trips.

After a jump, `wait_all_tasks_blocked` lets the fence timer wake and hand its
command to the controller loop; a validate-only UpdateFeatures then goes
through the same FIFO queue, so its reply proves the fence command was
committed before the test looks.
"""

from __future__ import annotations

import uuid

import trio.testing

from protocol.errors import ErrorCode
from server.client import KafkaClient

from node_harness import running_node, validate_only_update

SESSION_TIMEOUT_MS = 9_000
FENCE_CHECK_INTERVAL_MS = 1_000


def registration(broker_id: int, cluster_id: str) -> dict:
    return {
        "broker_id": broker_id, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 29092, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
        "rack": None, "log_dirs": [uuid.uuid4()],
    }


def heartbeat(broker_id: int, epoch: int) -> dict:
    return {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 2**40,
            "want_fence": False, "want_shut_down": False}


async def barrier(client: KafkaClient) -> None:
    """Returns once every command queued before it on the controller loop is committed."""
    response = await client.call(57, validate_only_update(19), min_version=1)
    assert response.error_code == ErrorCode.NONE


async def listed_brokers(client: KafkaClient) -> list[int]:
    response = await client.call(60, {"endpoint_type": 1})
    return sorted(b.broker_id for b in response.brokers)


async def observers(client: KafkaClient) -> list[int]:
    response = await client.call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                  "partitions": [{"partition_index": 0}]}]})
    return sorted(r.replica_id for r in response.topics[0].partitions[0].observers)


async def test_a_broker_that_stops_heartbeating_is_fenced_after_the_session_timeout(tmp_path, mock_clock):
    async with running_node(tmp_path, broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                            fence_check_interval_ms=FENCE_CHECK_INTERVAL_MS) as node:
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            registered = await client.call(62, registration(2, node.cluster_id))
            assert registered.error_code == ErrorCode.NONE
            epoch = registered.broker_epoch
            beat = await client.call(63, heartbeat(2, epoch))
            assert (beat.error_code, beat.is_fenced) == (ErrorCode.NONE, False)
            assert await listed_brokers(client) == [1, 2]

            # Exactly the session timeout since the last heartbeat: still alive
            # (Kafka fences only once the session is *older* than the timeout).
            mock_clock.jump(SESSION_TIMEOUT_MS / 1000)
            await trio.testing.wait_all_tasks_blocked()
            await barrier(client)
            assert await listed_brokers(client) == [1, 2]
            assert not node.state.broker(2).fenced

            # A heartbeat renews the session; the timer must measure from it.
            beat = await client.call(63, heartbeat(2, epoch))
            assert (beat.error_code, beat.is_fenced) == (ErrorCode.NONE, False)
            mock_clock.jump((SESSION_TIMEOUT_MS - FENCE_CHECK_INTERVAL_MS) / 1000)
            await trio.testing.wait_all_tasks_blocked()
            await barrier(client)
            assert not node.state.broker(2).fenced

            # Silence past the timeout: the next fence check fences it.
            mock_clock.jump(2 * FENCE_CHECK_INTERVAL_MS / 1000 + 0.001)
            await trio.testing.wait_all_tasks_blocked()
            await barrier(client)
            assert node.state.broker(2).fenced
            assert await listed_brokers(client) == [1]  # DescribeCluster lists unfenced brokers only
            assert await observers(client) == [2]  # still registered

            # A heartbeat from the same incarnation brings it back (caught up).
            beat = await client.call(63, heartbeat(2, epoch))
            assert (beat.error_code, beat.is_fenced) == (ErrorCode.NONE, False)
            assert await listed_brokers(client) == [1, 2]


async def test_a_registered_but_never_unfenced_broker_is_not_fenced_again(tmp_path, mock_clock):
    async with running_node(tmp_path, broker_session_timeout_ms=SESSION_TIMEOUT_MS,
                            fence_check_interval_ms=FENCE_CHECK_INTERVAL_MS) as node:
        async with await KafkaClient.connect("127.0.0.1", node.port) as client:
            registered = await client.call(62, registration(3, node.cluster_id))
            assert registered.error_code == ErrorCode.NONE
            end_offset = node.metadata_log.end_offset
            mock_clock.jump(10 * SESSION_TIMEOUT_MS / 1000)
            await trio.testing.wait_all_tasks_blocked()
            await barrier(client)
            assert node.state.broker(3).fenced
            # No FenceBroker record for a broker that was fenced all along.
            assert node.metadata_log.end_offset == end_offset
