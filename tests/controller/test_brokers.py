"""Broker registration, heartbeats, fencing and unregistration."""

import uuid

import pytest

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from server.controller import commands as cmd

from .helpers import CLUSTER_ID, Cluster

INCARNATION_A = uuid.UUID(int=0xA)
INCARNATION_B = uuid.UUID(int=0xB)


def registered(cluster: Cluster, broker_id: int = 1, incarnation=INCARNATION_A, **kwargs) -> int:
    result = cluster.register(broker_id, incarnation, **kwargs)
    assert result.response["error_code"] == 0, result.error_message
    return result.response["broker_epoch"]


def unfenced(cluster: Cluster, broker_id: int = 1) -> int:
    epoch = registered(cluster, broker_id)
    assert not cluster.heartbeat(broker_id, epoch).response["is_fenced"]
    return epoch


def test_registration_epoch_is_the_record_offset():
    cluster = Cluster.bootstrapped()
    offset = cluster.next_offset
    result = cluster.register(1, INCARNATION_A)
    assert result.response == {"throttle_time_ms": 0, "error_code": 0, "broker_epoch": offset}
    assert result.records[0].message is mr.REGISTER_BROKER_RECORD
    assert result.records[0].version == 3
    broker = cluster.state.broker(1)
    assert (broker.epoch, broker.registration_offset, broker.fenced) == (offset, offset, True)
    assert broker.endpoints[0].port == 9093
    assert broker.supported("group.version").max_level == 1


def test_wrong_cluster_id():
    cluster = Cluster.bootstrapped()
    result = cluster.register(1, INCARNATION_A, cluster_id="other")
    assert result.response["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert result.response["broker_epoch"] == -1
    assert result.records == []
    assert result.error_message == f"Expected cluster ID {CLUSTER_ID}, but got cluster ID other"


def test_another_incarnation_with_a_live_session_is_refused():
    cluster = Cluster.bootstrapped()
    unfenced(cluster)
    result = cluster.register(1, INCARNATION_B)
    assert result.response["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert result.error_message == "Another broker is registered with that broker id."


def test_another_incarnation_after_the_session_expired_is_accepted():
    cluster = Cluster.bootstrapped()
    old_epoch = unfenced(cluster)
    cluster.now_ms += cluster.config.session_timeout_ms + 1
    new_epoch = registered(cluster, 1, INCARNATION_B)
    assert new_epoch > old_epoch
    assert cluster.state.broker(1).fenced
    assert cluster.state.broker(1).incarnation_id == INCARNATION_B


def test_same_incarnation_keeps_its_epoch_and_state():
    cluster = Cluster.bootstrapped()
    epoch = unfenced(cluster)
    again = registered(cluster, 1, INCARNATION_A)
    assert again == epoch
    broker = cluster.state.broker(1)
    assert not broker.fenced
    assert broker.registration_offset == cluster.next_offset - 1


def test_zk_broker_is_refused():
    cluster = Cluster.bootstrapped()
    result = cluster.register(1, INCARNATION_A, is_migrating_zk_broker=True)
    assert result.response["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_unsupported_finalized_metadata_version():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.register(1, INCARNATION_A, features={"metadata.version": (1, 21), "group.version": (0, 1)})
    assert result.response["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert result.error_message == (
        "Unable to register because the broker does not support finalized version 22 of metadata.version. "
        "The broker wants a version between 1 and 21, inclusive."
    )


def test_missing_finalized_feature_is_zero_zero():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = cluster.register(1, INCARNATION_A, features={"metadata.version": (1, 22)})
    assert result.response["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert result.error_message == (
        "Unable to register because the broker does not support finalized version 1 of group.version. "
        "The broker wants a version between 0 and 0, inclusive."
    )


def test_no_metadata_version_range_means_one_one():
    cluster = Cluster.bootstrapped(mv_level=4)
    result = cluster.register(1, INCARNATION_A, version=0, features={})
    assert result.error_message == (
        "Unable to register because the broker does not support finalized version 4 of metadata.version. "
        "The broker wants a version between 1 and 1, inclusive."
    )


def test_log_dirs_required_from_3_7_iv2():
    cluster = Cluster.bootstrapped(mv_level=17)
    result = cluster.register(1, INCARNATION_A, log_dirs=[])
    assert result.response["error_code"] == ErrorCode.INVALID_REGISTRATION
    assert result.error_message == "No directories specified in request"
    result = cluster.register(1, INCARNATION_A, log_dirs=[uuid.UUID(int=5)])
    assert result.error_message == "Reserved directory ID in request"
    shared = uuid.UUID(int=(9 << 64) | 1)
    result = cluster.register(1, INCARNATION_A, log_dirs=[shared, shared])
    assert result.error_message == "Duplicate directory ID in request"
    registered(cluster, 1, log_dirs=[shared])
    result = cluster.register(2, INCARNATION_B, log_dirs=[shared])
    assert result.error_message == f"Broker 1 is already registered with directory {shared}"


def test_old_metadata_version_writes_old_record_versions():
    cluster = Cluster.bootstrapped(mv_level=4)
    result = cluster.register(1, INCARNATION_A, features={"metadata.version": (1, 22)})
    assert result.records[0].version == 0
    epoch = result.response["broker_epoch"]
    beat = cluster.heartbeat(1, epoch)
    assert beat.records[0].message is mr.UNFENCE_BROKER_RECORD
    cluster.now_ms += cluster.config.session_timeout_ms + 1
    expired = cluster.expire()
    assert expired.records[0].message is mr.FENCE_BROKER_RECORD
    assert cluster.state.broker(1).fenced


def test_heartbeat_unknown_broker_and_wrong_epoch():
    cluster = Cluster.bootstrapped()
    result = cluster.heartbeat(1, 5)
    assert result.response["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert result.heartbeat is None
    epoch = registered(cluster)
    result = cluster.heartbeat(1, epoch + 1)
    assert result.response["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert result.error_message == f"Expected broker epoch {epoch}, but got broker epoch {epoch + 1}"


def test_heartbeat_unfences_only_once_caught_up():
    cluster = Cluster.bootstrapped()
    epoch = registered(cluster)
    behind = cluster.heartbeat(1, epoch, offset=epoch - 1)
    assert behind.records == []
    assert behind.response["is_caught_up"] is False
    assert behind.response["is_fenced"] is True
    assert behind.heartbeat == cmd.HeartbeatUpdate(1, epoch, cluster.now_ms, metadata_offset=epoch - 1)
    caught_up = cluster.heartbeat(1, epoch, offset=epoch)
    assert caught_up.records[0].message is mr.BROKER_REGISTRATION_CHANGE_RECORD
    assert caught_up.response == {
        "throttle_time_ms": 0, "error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False
    }
    assert not cluster.state.broker(1).fenced


def test_want_fence_fences_an_unfenced_broker():
    cluster = Cluster.bootstrapped()
    epoch = unfenced(cluster)
    result = cluster.heartbeat(1, epoch, want_fence=True)
    assert result.response["is_fenced"] is True
    assert cluster.state.broker(1).fenced


def test_want_shut_down_from_unfenced_shuts_down_now():
    cluster = Cluster.bootstrapped()
    epoch = unfenced(cluster)
    result = cluster.heartbeat(1, epoch, want_shut_down=True)
    assert result.response["should_shut_down"] is True
    assert result.response["is_fenced"] is True
    assert cluster.state.broker(1).fenced


def test_want_shut_down_from_fenced_shuts_down_now():
    cluster = Cluster.bootstrapped()
    epoch = registered(cluster)
    result = cluster.heartbeat(1, epoch, want_shut_down=True)
    assert result.response["should_shut_down"] is True
    # Kafka writes the fence again on the FENCED -> SHUTDOWN_NOW transition.
    assert len(result.records) == 1


def test_steady_heartbeat_writes_nothing():
    cluster = Cluster.bootstrapped()
    epoch = unfenced(cluster)
    result = cluster.heartbeat(1, epoch)
    assert result.records == []
    assert result.response["is_fenced"] is False


def test_fence_expired_brokers():
    cluster = Cluster.bootstrapped()
    epoch_1 = unfenced(cluster, 1)
    cluster.now_ms += 5000
    epoch_2 = unfenced(cluster, 2)
    cluster.now_ms += 4001  # broker 1 is 9001 ms old, broker 2 4001 ms
    result = cluster.expire()
    assert result.response == {"fenced_broker_ids": [1]}
    assert cluster.state.broker(1).fenced and not cluster.state.broker(2).fenced
    assert cluster.expire().records == []  # already fenced: nothing more
    cluster.now_ms += 5000
    assert cluster.expire().response == {"fenced_broker_ids": [2]}
    assert epoch_1 != epoch_2


def test_session_exactly_at_the_timeout_is_still_valid():
    cluster = Cluster.bootstrapped()
    unfenced(cluster)
    cluster.now_ms += cluster.config.session_timeout_ms
    assert cluster.expire().records == []


def test_tracker_activation_gives_unfenced_brokers_a_fresh_session():
    cluster = Cluster.bootstrapped()
    unfenced(cluster, 1)
    registered(cluster, 2)
    cluster.now_ms += 60_000
    cluster.tracker.activate(cluster.state, cluster.now_ms)  # a new leader takes over
    assert cluster.expire().records == []
    cluster.now_ms += cluster.config.session_timeout_ms + 1
    assert cluster.expire().response == {"fenced_broker_ids": [1]}


def test_unregister():
    cluster = Cluster.bootstrapped()
    missing = cluster.unregister(4)
    assert missing.response == {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.BROKER_ID_NOT_REGISTERED,
        "error_message": "Broker ID 4 is not currently registered",
    }
    registered(cluster, 4)
    result = cluster.unregister(4)
    assert result.response["error_code"] == 0 and result.response["error_message"] is None
    assert cluster.state.broker(4) is None


def test_views_for_handlers():
    cluster = Cluster.bootstrapped(mv_level=22)
    unfenced(cluster, 1)
    registered(cluster, 2)
    assert [b.broker_id for b in cmd.registered_brokers(cluster.state)] == [1]
    assert [b.broker_id for b in cmd.registered_brokers(cluster.state, include_fenced=True)] == [1, 2]
    assert cmd.finalized_features_for_api_versions(cluster.state) == [
        {"name": "group.version", "min_version_level": 1, "max_version_level": 1},
        {"name": "metadata.version", "min_version_level": 22, "max_version_level": 22},
    ]
    cluster.update([("group.version", 0, cmd.SAFE_DOWNGRADE)])
    assert [e["name"] for e in cmd.finalized_features_for_api_versions(cluster.state)] == ["metadata.version"]
    assert cluster.state.finalized_features_epoch == cluster.next_offset - 1


@pytest.mark.parametrize("mv_level", [4, 20, 21, 22, 24])
def test_bootstrap_records(mv_level):
    records = cmd.bootstrap_records(mv_level)
    assert records[0].data == {"name": "metadata.version", "feature_level": mv_level}
    names = [r.data["name"] for r in records]
    assert "kraft.version" not in names
    assert ("group.version" in names) == (mv_level >= 22)
    assert ("transaction.version" in names) == (mv_level >= 24)


def test_bootstrap_refuses_bad_levels():
    with pytest.raises(ValueError):
        cmd.bootstrap_records(3)
    with pytest.raises(ValueError):
        cmd.bootstrap_records(35)
    with pytest.raises(ValueError):
        # eligible.leader.replicas.version 1 depends on 4.0-IV1 (23).
        cmd.bootstrap_records(22, {"eligible.leader.replicas.version": 1})
    with pytest.raises(ValueError):
        cmd.bootstrap_records(22, {"nope": 1})


def test_a_log_directory_is_free_again_after_its_broker_unregisters_or_moves_on():
    cluster = Cluster.bootstrapped(mv_level=22)
    shared = uuid.UUID(int=(5 << 64) | 1)
    other = uuid.UUID(int=(6 << 64) | 1)
    assert cluster.register(1, uuid.uuid4(), log_dirs=[shared]).response["error_code"] == ErrorCode.NONE
    taken = cluster.register(2, uuid.uuid4(), log_dirs=[shared])
    assert taken.response["error_code"] == ErrorCode.INVALID_REGISTRATION
    assert "Broker 1 is already registered with directory" in taken.error_message
    assert cluster.unregister(1).response["error_code"] == ErrorCode.NONE
    assert cluster.register(2, uuid.uuid4(), log_dirs=[shared]).response["error_code"] == ErrorCode.NONE
    # Broker 2 registers again (new incarnation) with another directory: the old one is released.
    cluster.now_ms += 10 * cluster.config.session_timeout_ms  # its old session has expired
    cluster.expire()
    assert cluster.register(2, uuid.uuid4(), log_dirs=[other]).response["error_code"] == ErrorCode.NONE
    assert cluster.register(3, uuid.uuid4(), log_dirs=[shared]).response["error_code"] == ErrorCode.NONE
    assert cluster.state.directory_owner(shared) == 3 and cluster.state.directory_owner(other) == 2


def migrating_cluster() -> Cluster:
    """A controller running a ZooKeeper migration, with broker 1 registered from ZooKeeper."""
    from dataclasses import replace

    from server.migration.copy import zk_broker_record
    from server.zk import paths as zp

    cluster = Cluster.bootstrapped(mv_level=19)
    cluster.config = replace(cluster.config, migration_enabled=True)
    znode = zp.BrokerRegistrationZnode(
        host="127.0.0.1", port=9092, endpoints=(zp.Endpoint("PLAINTEXT", "127.0.0.1", 9092),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack=None, jmx_port=-1, timestamp_ms=1,
        features={"metadata.version": zp.SupportedFeatureRange(1, 19)})
    cluster.append([zk_broker_record(1, znode, cluster.next_offset, 19)])
    return cluster


def test_a_zk_brokers_own_registration_is_a_handshake_during_a_migration():
    cluster = migrating_cluster()
    epoch = cluster.state.broker(1).epoch
    before = cluster.next_offset
    result = cluster.register(1, INCARNATION_B, is_migrating_zk_broker=True)
    assert result.response["error_code"] == ErrorCode.NONE and result.response["broker_epoch"] == epoch
    assert result.records == [] and cluster.next_offset == before
    # A ZooKeeper broker the controller has not registered from ZooKeeper yet: retry later.
    unknown = cluster.register(2, INCARNATION_B, is_migrating_zk_broker=True)
    assert unknown.response["error_code"] == ErrorCode.REQUEST_TIMED_OUT


def test_a_kraft_broker_waits_until_the_zk_broker_with_its_id_is_gone():
    cluster = migrating_cluster()
    refused = cluster.register(1, INCARNATION_B)
    assert refused.response["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert "ZooKeeper mode" in refused.error_message
    # The ZooKeeper session ended: the migration fences the registration; now it registers.
    cluster.append([cmd.fence_record(cluster.state, cluster.state.broker(1))])
    accepted = cluster.register(1, INCARNATION_B)
    assert accepted.response["error_code"] == ErrorCode.NONE
    assert not cluster.state.broker(1).is_migrating_zk_broker


def test_zk_brokers_are_never_fenced_for_missing_heartbeats():
    cluster = migrating_cluster()
    cluster.now_ms += 10 * cluster.config.session_timeout_ms
    result = cmd.fence_expired_brokers(cluster.state, cluster.tracker, cluster.now_ms, cluster.config)
    assert result.records == [] and not cluster.state.broker(1).fenced
