"""A real ControllerNode on 127.0.0.1 under hundreds of hostile connections.

One test: a seeded `random.Random` draws hostile connections
(tests/fuzz/hostile.py: random bytes, mutated frames of every API, lying size
prefixes, truncated frames followed by EOF, pipelines ending in garbage),
opened a few at a time; between the groups (or while one is at work, every
other round) ONE well-behaved `KafkaClient` connection, opened at the start
and kept, does ApiVersions + DescribeCluster
+ an UpdateFeatures that really commits (group.version toggled between 1 and
0 through the controller loop and the Raft log). Checked:
- every legitimate call succeeds and answers correctly, on the same
  connection throughout (no hostile connection disturbed it);
- each acknowledged UpdateFeatures is in the committed state at once, and at
  the end the log's group.version FeatureLevelRecords are exactly the
  acknowledged sequence;
- the server never logged `net.handler_failed` (nor anything at error level);
- the node still serves a fresh connection at the end;
- every hostile connection is ended by the server (EOF read back) when it
  half-closes: nothing hangs.

The seed is printed in every failure message; rerun one with
`FUZZ_SEED=N .venv/bin/pytest -q tests/fuzz/test_live_server.py`.
`FUZZ_EXAMPLES=N` multiplies the number of hostile connections (budget.py).
"""

from __future__ import annotations

import os
import random

import trio
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from protocol.records import decode_metadata_record
from server.client import KafkaClient

from node_harness import running_node

from .budget import scaled
from .hostile import HostilePlan, hostile_plan

DEFAULT_SEED = 20261123
HOSTILE_CONNECTIONS = 1200  # CI; times FUZZ_EXAMPLES
GROUP_SIZE = 4  # hostile connections in flight at once, between legitimate rounds
PER_CONNECTION_TIMEOUT_S = 15
TOTAL_TIMEOUT_S = 240
# Small enough that "over the limit" is cheap to claim, large enough for every valid request.
MAX_FRAME_BYTES = 1 << 20

UPGRADE, SAFE_DOWNGRADE = 1, 2
GROUP_VERSION = "group.version"


def seed() -> int:
    return int(os.environ.get("FUZZ_SEED", DEFAULT_SEED))


async def run_hostile(port: int, plan: HostilePlan, failures: list[str]) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        with trio.move_on_after(PER_CONNECTION_TIMEOUT_S) as scope:
            try:
                await stream.send_all(plan.payload)
                if plan.half_close:
                    await stream.send_eof()
                    # Whatever it answers, the server must end the connection.
                    received = 0
                    while data := await stream.receive_some(65536):
                        received += len(data)
                        if received > 16 * MAX_FRAME_BYTES:
                            failures.append(f"server sent {received} bytes to {plan.describe()}")
                            break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the server dropped us first (a reset): allowed
        if scope.cancelled_caught:
            failures.append(f"server did not close within {PER_CONNECTION_TIMEOUT_S}s: {plan.describe()}")
    finally:
        await stream.aclose()


async def legitimate_round(client: KafkaClient, node, level: int, where: str) -> None:
    versions = await client.call(18, {"client_software_name": "fuzz", "client_software_version": "1"})
    assert versions.error_code == ErrorCode.NONE, where
    served = {k.api_key for k in versions.api_keys}
    assert {18, 57, 60} <= served, where

    cluster = await client.call(60, {"endpoint_type": 2})
    assert cluster.error_code == ErrorCode.NONE, (where, cluster.error_message)
    assert cluster.cluster_id == node.cluster_id, where
    assert cluster.controller_id == node.config.node_id, where

    upgrade_type = UPGRADE if level == 1 else SAFE_DOWNGRADE
    epoch_before = node.state.finalized_features_epoch
    update = await client.call(57, {"timeout_ms": 10_000, "validate_only": False, "feature_updates": [
        {"feature": GROUP_VERSION, "max_version_level": level, "upgrade_type": upgrade_type}]})
    assert update.error_code == ErrorCode.NONE, (where, update.error_message)
    assert [(r.feature, r.error_code) for r in update.results] == [(GROUP_VERSION, ErrorCode.NONE)], where
    # Acknowledged means committed and replayed: the committed state has it now.
    assert node.state.finalized_level(GROUP_VERSION) == level, where
    assert node.state.finalized_features_epoch > epoch_before, where


def committed_group_version_levels(node) -> list[int]:
    levels = []
    for batch in node.metadata_log.read(node.metadata_log.start_offset):
        if batch.is_control:
            continue
        for record in batch.records:
            decoded = decode_metadata_record(record.value)
            if decoded.name == "FeatureLevelRecord" and decoded.data.name == GROUP_VERSION:
                levels.append(decoded.data.feature_level)
    return levels


async def test_hostile_connections_do_not_disturb_a_well_behaved_client(tmp_path):
    run_seed = seed()
    rng = random.Random(run_seed)
    total = scaled(HOSTILE_CONNECTIONS)
    plans = [hostile_plan(rng, index, MAX_FRAME_BYTES) for index in range(total)]
    failures: list[str] = []
    acknowledged: list[int] = []
    context = f"seed {run_seed} (rerun: FUZZ_SEED={run_seed} .venv/bin/pytest -q tests/fuzz/test_live_server.py)"
    try:
        with capture_logs() as logs, trio.fail_after(TOTAL_TIMEOUT_S * scaled(1)):
            async with running_node(tmp_path, socket_request_max_bytes=MAX_FRAME_BYTES) as node:
                client = await KafkaClient.connect("127.0.0.1", node.port, client_id="well-behaved")
                async with client:
                    level = 1
                    for start in range(0, total, GROUP_SIZE):
                        group = plans[start:start + GROUP_SIZE]
                        where = f"{context}, during/after hostile connections {start}-{start + len(group) - 1}"
                        async with trio.open_nursery() as nursery:
                            for plan in group:
                                nursery.start_soon(run_hostile, node.port, plan, failures)
                            # Half the rounds run while the group is still at work.
                            if start // GROUP_SIZE % 2:
                                await legitimate_round(client, node, level, where)
                        if not start // GROUP_SIZE % 2:
                            await legitimate_round(client, node, level, where)
                        acknowledged.append(level)
                        level = 1 - level
                # Still serving: a brand-new connection negotiates and reads.
                async with await KafkaClient.connect("127.0.0.1", node.port) as fresh:
                    cluster = await fresh.call(60, {"endpoint_type": 2})
                    assert cluster.error_code == ErrorCode.NONE, context
                assert committed_group_version_levels(node) == acknowledged, context
    except BaseException as exc:
        # ClientError, TooSlowError, a failed assert: whatever it is, say which seed.
        exc.add_note(context)
        raise
    assert not failures, f"{context}: " + "; ".join(failures[:5])
    handler_failures = [e for e in logs if e["event"] == "net.handler_failed"]
    assert not handler_failures, f"{context}: {handler_failures[:3]}"
    errors = [e for e in logs if e.get("log_level") in ("error", "critical")]
    assert not errors, f"{context}: {errors[:3]}"
    # The hostile side really was hostile: the server refused frames and bodies.
    events = {e["event"] for e in logs}
    assert {"net.frame_rejected", "net.request_decode_failed"} <= events, (context, sorted(events))
    assert len(acknowledged) == -(-total // GROUP_SIZE)
