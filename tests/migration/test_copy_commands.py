"""The copy's controller commands (copy.chunk_commands) may sit in the controller loop
several at once. Run in order they write exactly the copy as one transaction; a chunk
that did not run makes every later one refuse, so the transaction can never end
without it; and the first refuses outside PRE_MIGRATION or inside a transaction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from server.controller import commands as cmd
from server.controller.state import BrokerHeartbeatTracker, ControllerState
from server.migration import copy as mcopy
from server.migration.state import ZkMigrationState
from server.zk import paths as zp
from server.zk.seed import SeedSpec, spec_image

MV = 19
CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"


def pre_migration_state() -> tuple[ControllerState, int]:
    state = ControllerState(CLUSTER)
    offset = 0
    for item in cmd.bootstrap_records(MV) + [mcopy.migration_state_record(ZkMigrationState.PRE_MIGRATION)]:
        state.replay(item, offset)
        offset += 1
    return state, offset


def run(command, state: ControllerState, offset: int) -> int:
    """Runs one command as the controller loop does: records replayed at the next offsets."""
    result = command(state, BrokerHeartbeatTracker(18_000), offset, 0)
    for index, item in enumerate(result.records):
        state.replay(item, offset + index)
    return offset + len(result.records)


@pytest.fixture
def plan():
    spec = SeedSpec(cluster_id=CLUSTER, broker_ids=(1, 2, 3), topics=6, partitions_per_topic=4,
                    topic_configs={"retention.ms": "1000"})
    brokers = {b: zp.BrokerRegistrationZnode(
        host="127.0.0.1", port=9000 + b, endpoints=(zp.Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack=None, jmx_port=-1,
        timestamp_ms=1_700_000_000_000 + b, features={"metadata.version": zp.SupportedFeatureRange(1, MV)})
        for b in (1, 2, 3)}
    return mcopy.plan_copy(replace(spec_image(spec), brokers=brokers), set(), MV)


def test_the_commands_in_order_write_the_whole_copy_as_one_transaction(plan):
    state, offset = pre_migration_state()
    commands = mcopy.chunk_commands(plan, 7, MV)
    assert len(commands) == -(-len(plan.records) // 7)
    start = offset
    for command in commands[:-1]:
        offset = run(command, state, offset)
        assert state.in_transaction and state.transaction_start_offset == start
    offset = run(commands[-1], state, offset)
    assert not state.in_transaction
    assert offset - start == plan.total_records
    assert ZkMigrationState(state.zk_migration_state) == ZkMigrationState.MIGRATION
    assert len(state.topics()) == 6 and sum(len(t.partitions) for t in state.topics().values()) == 24
    assert {b.broker_id for b in state.brokers.values() if b.is_migrating_zk_broker} == {1, 2, 3}


def test_a_missing_chunk_makes_every_later_one_refuse(plan):
    state, offset = pre_migration_state()
    commands = mcopy.chunk_commands(plan, 5, MV)
    offset = run(commands[0], state, offset)
    for later in commands[2:]:  # chunk 1 never ran (its command failed, say)
        with pytest.raises(RuntimeError, match="missing"):
            later(state, BrokerHeartbeatTracker(18_000), offset, 0)
    assert state.in_transaction  # still open: the next leader aborts it


def test_the_first_command_refuses_outside_pre_migration_or_inside_a_transaction(plan):
    state, offset = pre_migration_state()
    commands = mcopy.chunk_commands(plan, 5, MV)
    offset = run(commands[0], state, offset)
    with pytest.raises(RuntimeError, match="PRE_MIGRATION"):
        commands[0](state, BrokerHeartbeatTracker(18_000), offset, 0)
    fresh = ControllerState(CLUSTER)
    for index, item in enumerate(cmd.bootstrap_records(MV)):
        fresh.replay(item, index)
    with pytest.raises(RuntimeError, match="PRE_MIGRATION"):
        commands[0](fresh, BrokerHeartbeatTracker(18_000), len(cmd.bootstrap_records(MV)), 0)


def test_a_later_command_refuses_once_the_transaction_is_gone(plan):
    state, offset = pre_migration_state()
    commands = mcopy.chunk_commands(plan, 5, MV)
    offset = run(commands[0], state, offset)
    state.replay(mcopy.abort_record("deposed"), offset)
    with pytest.raises(RuntimeError, match="no longer open"):
        commands[1](state, BrokerHeartbeatTracker(18_000), offset + 1, 0)
