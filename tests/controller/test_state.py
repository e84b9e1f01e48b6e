"""Replay: the only mutation path, its guards, transactions and determinism."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.records import record
from server.controller import commands as cmd
from server.controller.state import ControllerState, ReplayError

from .helpers import CLUSTER_ID, Cluster


def fresh() -> ControllerState:
    state = ControllerState(CLUSTER_ID)
    for offset, item in enumerate(cmd.bootstrap_records(22)):
        state.replay(item, offset)
    return state


def test_bootstrap_replay_sets_features_and_epoch():
    state = fresh()
    assert state.metadata_version == 22
    assert dict(state.finalized_levels) == {"metadata.version": 22, "group.version": 1}
    assert state.finalized_features_epoch == 1


def test_offsets_must_increase():
    state = fresh()
    with pytest.raises(ReplayError):
        state.replay(record(mr.NO_OP_RECORD, {}), 1)


def test_no_op_advances_the_epoch_only():
    state = fresh()
    before = state.snapshot()
    state.replay(record(mr.NO_OP_RECORD, {}), 10)
    assert state.finalized_features_epoch == 10
    after = state.snapshot()
    after["last_applied_offset"] = before["last_applied_offset"]
    assert after == before


def test_fence_for_unknown_broker_or_epoch_is_refused_without_change():
    state = fresh()
    with pytest.raises(ReplayError):
        state.replay(record(mr.FENCE_BROKER_RECORD, {"id": 1, "epoch": 0}), 5)
    assert state.last_applied_offset == 1
    register = cmd.register_broker(
        state,
        cmd.BrokerHeartbeatTracker(9000),
        {"broker_id": 1, "cluster_id": CLUSTER_ID, "incarnation_id": uuid.UUID(int=1),
         "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22},
                      {"name": "group.version", "min_supported_version": 0, "max_supported_version": 1}],
         "log_dirs": [uuid.UUID(int=(1 << 64) | 1)]},
        4, 0, 2, cmd.ControllerConfig(node_id=1, cluster_id=CLUSTER_ID),
    )
    state.replay(register.records[0], 2)
    with pytest.raises(ReplayError):
        state.replay(record(mr.UNREGISTER_BROKER_RECORD, {"broker_id": 1, "broker_epoch": 99}), 3)
    assert state.broker(1) is not None


def test_metadata_version_cannot_be_removed_and_kraft_version_records_are_skipped():
    state = fresh()
    with pytest.raises(ReplayError):
        state.replay(cmd.feature_level_record("metadata.version", 0), 2)
    state.replay(cmd.feature_level_record("kraft.version", 1), 3)
    assert state.kraft_version == 0
    state.replay_kraft_version(1, 4)
    assert state.all_finalized_levels()["kraft.version"] == 1


def test_transaction_commit_and_abort():
    state = fresh()
    state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}), 2)
    assert state.in_transaction and state.transaction_start_offset == 2
    state.replay(cmd.feature_level_record("transaction.version", 2), 3)
    assert state.finalized_level("transaction.version") == 2  # applied as it comes
    state.replay(record(mr.ABORT_TRANSACTION_RECORD, {"reason": "test"}), 4)
    assert state.finalized_level("transaction.version") == 0
    assert not state.in_transaction
    state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {}), 5)
    with pytest.raises(ReplayError):
        state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {}), 6)
    state.replay(cmd.feature_level_record("transaction.version", 1), 7)
    state.replay(record(mr.END_TRANSACTION_RECORD, {}), 8)
    assert state.finalized_level("transaction.version") == 1
    with pytest.raises(ReplayError):
        state.replay(record(mr.END_TRANSACTION_RECORD, {}), 9)


def test_commands_do_not_mutate_state():
    cluster = Cluster.bootstrapped(mv_level=20)
    before = cluster.state.snapshot()
    cmd.update_features(
        cluster.state,
        {"feature_updates": [{"feature": "metadata.version", "max_version_level": 22, "upgrade_type": 1}]},
        2,
        cluster.config,
    )
    assert cluster.state.snapshot() == before


def test_replaying_a_command_sequence_from_scratch_gives_an_equal_state():
    cluster = Cluster.bootstrapped(mv_level=20)
    cluster.update([("metadata.version", 22, cmd.UPGRADE)])
    epoch = cluster.register(1, uuid.UUID(int=1)).response["broker_epoch"]
    cluster.heartbeat(1, epoch)
    cluster.register(2, uuid.UUID(int=2))
    cluster.update([("group.version", 0, cmd.SAFE_DOWNGRADE)])
    cluster.heartbeat(1, epoch, want_shut_down=True)
    cluster.unregister(2)
    assert cluster.replayed_from_scratch() == cluster.state


BROKER_IDS = st.integers(min_value=1, max_value=3)
COMMANDS = st.one_of(
    st.tuples(st.just("register"), BROKER_IDS, st.integers(min_value=0, max_value=2)),
    st.tuples(st.just("heartbeat"), BROKER_IDS, st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("unregister"), BROKER_IDS),
    st.tuples(st.just("tick"), st.integers(min_value=0, max_value=12_000)),
    st.tuples(st.just("expire")),
    st.tuples(
        st.just("features"),
        st.sampled_from(["metadata.version", "group.version", "transaction.version", "kraft.version"]),
        st.integers(min_value=-1, max_value=26),
        st.integers(min_value=0, max_value=4),
        st.booleans(),
    ),
)


@settings(max_examples=150, deadline=None)
@given(mv_level=st.sampled_from([4, 7, 17, 21, 22]), commands=st.lists(COMMANDS, max_size=30))
def test_random_command_sequences_replay_to_the_same_state(mv_level, commands):
    cluster = Cluster.bootstrapped(mv_level=mv_level)
    for command in commands:
        cluster.apply(command)
        # Invariants after every command.
        assert cluster.state.metadata_version is not None
        assert cluster.state.metadata_version >= 4
        for broker in cluster.state.brokers.values():
            assert broker.epoch <= broker.registration_offset
        # The directory index always matches the registrations it is derived from.
        for broker in cluster.state.brokers.values():
            for directory in broker.log_dirs:
                assert cluster.state.directory_owner(directory) == broker.broker_id
    assert cluster.replayed_from_scratch() == cluster.state
