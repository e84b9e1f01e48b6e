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


def test_the_copy_replays_as_its_encoding_decodes():
    """The copy's commands say `records_as_decoded`: the active controller replays their
    record objects on commit instead of decoding its own batch. That is only right if
    both replays give the same image, for every kind of record the copy writes."""
    from protocol.records import decode_metadata_record, encode_metadata_record
    from server.zk.seed import SeedSpec as Spec

    spec = Spec(cluster_id=CLUSTER, broker_ids=(1, 2, 3), topics=5, partitions_per_topic=3,
                topic_configs={"retention.ms": "1000", "cleanup.policy": "compact"},
                broker_configs={"1": {"log.retention.ms": "5"}, "<default>": {"num.io.threads": "4"}},
                features={"transaction.version": 1})
    brokers = {b: zp.BrokerRegistrationZnode(
        host="127.0.0.1", port=9000 + b, endpoints=(zp.Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack="r1" if b == 1 else None, jmx_port=-1,
        timestamp_ms=1_700_000_000_000 + b, features={"metadata.version": zp.SupportedFeatureRange(1, MV)})
        for b in (1, 2, 3)}
    scram = zp.ScramCredentialText(b"salt", b"stored", b"server", 4096).encode()
    quotas = {"users/alice": zp.ConfigZnode({"producer_byte_rate": "1024", "SCRAM-SHA-256": scram}),
              "users/<default>": zp.ConfigZnode({"consumer_byte_rate": "4096.0"}),
              "users/bob/clients/c1": zp.ConfigZnode({"request_percentage": "12.5"}),
              "ips/10.0.0.1": zp.ConfigZnode({"connection_creation_rate": "5"})}
    image = replace(spec_image(spec), brokers=brokers, quota_configs=quotas,
                    user_client_parents=frozenset({"bob"}))
    plan = mcopy.plan_copy(image, {"transaction.version"}, MV)
    kinds = {r.name for r in plan.records}
    assert {"TopicRecord", "PartitionRecord", "ConfigRecord", "ClientQuotaRecord",
            "UserScramCredentialRecord", "FeatureLevelRecord"} <= kinds
    built, offset = pre_migration_state()
    decoded, _ = pre_migration_state()
    start = offset
    for command in mcopy.chunk_commands(plan, 7, MV):
        result = command(built, BrokerHeartbeatTracker(18_000), offset, 0)
        assert result.records_as_decoded
        assert result.values == [encode_metadata_record(item) for item in result.records]
        for index, item in enumerate(result.records):
            built.replay(item, offset + index)
            decoded.replay(decode_metadata_record(encode_metadata_record(item)), offset + index)
        offset += len(result.records)
    assert offset - start == plan.total_records and not built.in_transaction
    assert built == decoded
    assert built.topics() == decoded.topics() and dict(built.brokers) == dict(decoded.brokers)
    assert dict(built.client_quotas()) == dict(decoded.client_quotas())
    assert sorted(built.scram_credentials()) == sorted(decoded.scram_credentials()) != []


def test_an_empty_copy_is_one_command_with_its_bytes():
    empty = mcopy.plan_copy(spec_image(SeedSpec(cluster_id=CLUSTER, topics=0)), set(), MV)
    state, offset = pre_migration_state()
    [command] = mcopy.chunk_commands(empty, 5, MV)
    result = command(state, BrokerHeartbeatTracker(18_000), offset, 0)
    from protocol.records import encode_metadata_record
    assert result.values == [encode_metadata_record(item) for item in result.records]
    assert [r.name for r in result.records][0] == "BeginTransactionRecord"
    assert [r.name for r in result.records][-2:] == ["ZkMigrationStateRecord", "EndTransactionRecord"]
