"""Controller registration (KIP-919, ControllerRegistration key 70) in the controller
core and the sender's decisions: Kafka 4.4's metadata.version gate and text, the
RegisterControllerRecord v0 it writes, replay (a new incarnation replaces the old
one), snapshots, a downgrade below 3.7-IV0, and when a controller sends (again)."""

from __future__ import annotations

import uuid

import pytest

from cli import metadata_tools as mt
from protocol import metadata_records as mr
from protocol.apis import controller_registration as api
from protocol.errors import ErrorCode
from protocol.records import record
from server.controller import commands as cmd
from server.controller.controller_registration import TOO_OLD_MESSAGE, register_controller
from server.controller.features import IBP_3_7_IV0, SupportedRange
from server.controller.snapshot import encode_snapshot_records, load_snapshot, snapshot_records
from server.controller.state import BrokerEndpoint
from server.nodes.controller_registration import (
    AWAIT_REPLAY,
    BACKOFF,
    REGISTERED,
    SEND,
    WAIT_METADATA_VERSION,
    ControllerIdentity,
    RegistrationPlanner,
    new_incarnation_id,
    registration_request,
)

from .helpers import CLUSTER_ID, Cluster, decoded

FIRST, SECOND = uuid.UUID(int=11), uuid.UUID(int=12)


def identity(controller_id: int = 2, incarnation: uuid.UUID = FIRST) -> ControllerIdentity:
    return ControllerIdentity(
        controller_id, incarnation,
        (("CONTROLLER", "127.0.0.1", 19092 + controller_id, 0), ("SECURE", "127.0.0.1", 19192 + controller_id, 3)),
        (("kraft.version", 0, 1), ("metadata.version", 7, 33)))


def request_for(who: ControllerIdentity):
    return decoded(api.REQUEST, 0, **registration_request(who))


def register(cluster: Cluster, who: ControllerIdentity) -> cmd.ControllerResult:
    return cluster.run(register_controller(cluster.state, request_for(who)))


def test_a_registration_writes_register_controller_record_v0_and_answers_after_it():
    cluster = Cluster.bootstrapped(mv_level=IBP_3_7_IV0)
    result = register(cluster, identity())
    assert result.response == {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": ""}
    assert result.atomic
    (written,) = result.records
    assert (written.message, written.version) == (mr.REGISTER_CONTROLLER_RECORD, 0)
    assert written.data == {
        "controller_id": 2, "incarnation_id": FIRST, "zk_migration_ready": False,
        "end_points": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 19094, "security_protocol": 0},
                       {"name": "SECURE", "host": "127.0.0.1", "port": 19194, "security_protocol": 3}],
        "features": [{"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1},
                     {"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 33}]}
    registration = cluster.state.controller_registration(2)
    assert registration.incarnation_id == FIRST and not registration.zk_migration_ready
    assert registration.endpoint("SECURE") == BrokerEndpoint("SECURE", "127.0.0.1", 19194, 3)
    assert registration.endpoint("OTHER") is None
    assert dict(registration.supported_features) == {"kraft.version": SupportedRange(0, 1),
                                                     "metadata.version": SupportedRange(7, 33)}
    assert cluster.replayed_from_scratch() == cluster.state


def test_zk_migration_ready_is_never_recorded():
    # Kafka 4.4 writes ZkMigrationReady=false whatever the request says.
    cluster = Cluster.bootstrapped(mv_level=IBP_3_7_IV0)
    body = registration_request(identity())
    body["zk_migration_ready"] = True
    result = cluster.run(register_controller(cluster.state, decoded(api.REQUEST, 0, **body)))
    assert result.records[0].data["zk_migration_ready"] is False


@pytest.mark.parametrize("level", [IBP_3_7_IV0 - 1, 7, 4])
def test_below_3_7_iv0_it_is_refused_with_kafkas_text(level):
    cluster = Cluster.bootstrapped(mv_level=level)
    before = cluster.next_offset
    result = register(cluster, identity())
    assert result.records == []
    assert result.response == {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION,
                               "error_message": "The current MetadataVersion is too old to support controller "
                                                "registrations."}
    assert result.error_message == TOO_OLD_MESSAGE
    assert cluster.next_offset == before and dict(cluster.state.controllers) == {}


def test_any_id_may_register_and_the_latest_registration_wins():
    # No voter-set or incarnation check (Kafka's ClusterControlManager.registerController).
    cluster = Cluster.bootstrapped(mv_level=33)
    register(cluster, identity(2, FIRST))
    register(cluster, identity(999, FIRST))
    register(cluster, identity(2, SECOND))
    assert sorted(cluster.state.controllers) == [2, 999]
    assert cluster.state.controller_registration(2).incarnation_id == SECOND
    assert cluster.replayed_from_scratch() == cluster.state


def test_a_snapshot_keeps_every_registration():
    cluster = Cluster.bootstrapped(mv_level=33)
    cluster.register(7, uuid.UUID(int=70))  # a broker beside them, pinned at its offset
    register(cluster, identity(3, SECOND))
    register(cluster, identity(1, FIRST))
    state = cluster.state
    loaded = load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == state
    assert sorted(loaded.controllers) == [1, 3]
    assert loaded.controller_registration(3) == state.controller_registration(3)
    written = [item for item in snapshot_records(state) if item.message is mr.REGISTER_CONTROLLER_RECORD]
    assert [(item.version, item.data["controller_id"]) for item in written] == [(0, 1), (0, 3)]


def test_a_snapshot_of_an_image_without_registrations_has_none():
    cluster = Cluster.bootstrapped(mv_level=33)
    assert not [item for item in snapshot_records(cluster.state) if item.message is mr.REGISTER_CONTROLLER_RECORD]


def test_a_downgrade_below_3_7_iv0_drops_the_registrations():
    # KIP-778: below 3.7-IV0 the log cannot hold RegisterControllerRecord; every copy
    # drops them at the same offset.
    cluster = Cluster.bootstrapped(mv_level=IBP_3_7_IV0)
    register(cluster, identity())
    cluster.append([record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version",
                                                     "feature_level": IBP_3_7_IV0 - 1}, version=0)])
    assert dict(cluster.state.controllers) == {}
    assert cluster.replayed_from_scratch() == cluster.state
    # And a controller registers again once the level has it (the sender sees it gone).
    cluster.append([record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": IBP_3_7_IV0},
                           version=0)])
    assert register(cluster, identity()).response["error_code"] == ErrorCode.NONE


def test_an_aborted_transaction_takes_a_registration_back():
    cluster = Cluster.bootstrapped(mv_level=33)
    cluster.append([record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}, version=0)])
    register(cluster, identity())
    assert 2 in cluster.state.controllers
    cluster.append([record(mr.ABORT_TRANSACTION_RECORD, {"reason": "test"}, version=0)])
    assert dict(cluster.state.controllers) == {}


# -- the sender's decisions -----------------------------------------------------------

def test_nothing_is_sent_before_the_metadata_version_has_registration():
    planner = RegistrationPlanner(identity())
    assert planner.next_action(Cluster().state, 0).kind == WAIT_METADATA_VERSION
    assert planner.next_action(Cluster.bootstrapped(mv_level=IBP_3_7_IV0 - 1).state, 0).kind == WAIT_METADATA_VERSION
    assert planner.next_action(Cluster.bootstrapped(mv_level=IBP_3_7_IV0).state, 0).kind == SEND


def test_sent_once_then_registered_until_the_registration_is_gone_or_replaced():
    who = identity()
    planner = RegistrationPlanner(who, replay_wait_ms=5_000)
    cluster = Cluster.bootstrapped(mv_level=33)
    assert planner.next_action(cluster.state, 0).kind == SEND
    planner.on_success(10)
    # Acknowledged but not yet in this node's image: no second send for a while.
    assert planner.next_action(cluster.state, 20) == (AWAIT_REPLAY, 5_010)
    assert planner.next_action(cluster.state, 5_010).kind == SEND
    register(cluster, who)
    assert planner.next_action(cluster.state, 5_020).kind == REGISTERED
    # Another process registered under this id: ours is gone, send again.
    register(cluster, identity(who.controller_id, SECOND))
    assert planner.next_action(cluster.state, 5_030).kind == SEND


def test_failures_back_off_exponentially_up_to_the_bound_and_success_resets():
    planner = RegistrationPlanner(identity(), initial_backoff_ms=100, max_backoff_ms=1_000)
    state = Cluster.bootstrapped(mv_level=33).state
    delays = []
    now = 0
    for _ in range(7):
        assert planner.next_action(state, now).kind == SEND
        delay = planner.on_failure(now)
        delays.append(delay)
        assert planner.next_action(state, now + delay - 1) == (BACKOFF, now + delay)
        now += delay
    assert delays == [100, 200, 400, 800, 1_000, 1_000, 1_000]
    planner.on_success(now)
    assert planner.failures == 0 and planner.backoff_ms() == 0
    assert planner.on_failure(now) == 100


def test_the_request_body_encodes_and_each_process_has_its_own_incarnation():
    body = registration_request(identity())
    decoded_body = api.REQUEST.decode(0, api.REQUEST.encode(0, body))
    assert [(item.name, item.port, item.security_protocol) for item in decoded_body.listeners] == [
        ("CONTROLLER", 19094, 0), ("SECURE", 19194, 3)]
    assert new_incarnation_id() != new_incarnation_id()


# -- the metadata shell ---------------------------------------------------------------

def test_the_metadata_shell_shows_registered_controllers_as_kafka_does():
    cluster = Cluster.bootstrapped(mv_level=33)
    register(cluster, identity(2, FIRST))
    image = mt.LoadedImage(cluster.state, mt.Provenance(cluster.next_offset - 1, 1, 0))
    controllers = mt.image_tree(image)["image"]["cluster"]["controllers"]
    assert controllers == {"2": (
        f"ControllerRegistration(id=2, incarnationId={mt.uuid_to_string(FIRST)}, zkMigrationReady=false, "
        "listeners=[Endpoint(listenerName='CONTROLLER', securityProtocol=PLAINTEXT, host='127.0.0.1', port=19094), "
        "Endpoint(listenerName='SECURE', securityProtocol=SASL_SSL, host='127.0.0.1', port=19194)], "
        "supportedFeatures={kraft.version: 0-1, metadata.version: 7-33})")}
