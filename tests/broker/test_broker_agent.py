"""The broker agent against a real controller (in-process, real sockets): registration,
unfencing, refusal of an old release, renegotiation after a metadata.version change,
forwarding, controlled shutdown and the KIP-778 stop."""

from __future__ import annotations

import pytest
import trio

from protocol.errors import ErrorCode
from server.broker.lifecycle import BrokerFatalError, BrokerState
from server.client import KafkaClient

from .harness import advertised, running_cluster

TIMEOUT_S = 30
MV_3_5_IV2, MV_3_6_IV2, MV_3_7_IV0, MV_3_7_IV2, MV_3_7_IV4 = 11, 14, 15, 17, 19
DESCRIBE_CLUSTER, BROKER_REGISTRATION, BROKER_HEARTBEAT = 60, 62, 63
SAFE_DOWNGRADE = 2


async def test_broker_registers_is_unfenced_and_serves_the_image(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(100, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            registration = cluster.controller.state.broker(100)
            assert registration is not None and not registration.fenced
            assert registration.supported_features["metadata.version"].max_level == MV_3_7_IV4
            assert registration.incarnation_id == broker.lifecycle.incarnation_id
            assert registration.log_dirs == (broker.directory_id,)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                reply = client.api_versions_response
                finalized = {f.name: f.max_version_level for f in reply.finalized_features}
                supported = {f.name: (f.min_version, f.max_version) for f in reply.supported_features}
                assert finalized["metadata.version"] == MV_3_7_IV4
                assert supported["metadata.version"] == (1, MV_3_7_IV4)
                # The epoch is the image's last applied offset: the broker's copy may trail by a record.
                assert 1 <= reply.finalized_features_epoch <= cluster.controller.state.finalized_features_epoch
                metadata = await client.call(3, {"topics": []})
                assert [b.node_id for b in metadata.brokers] == [100]
                assert metadata.controller_id == 100  # KIP-590: the broker forwards controller APIs
                assert metadata.cluster_id == cluster.cluster_id


async def test_release_that_cannot_run_the_finalized_level_is_refused_and_stays_fenced(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(101, "3.5")
            await broker.lifecycle.wait_refusals(2)  # refused, backed off, refused again
            assert broker.lifecycle.state is BrokerState.STARTING
            assert broker.lifecycle.broker_epoch == -1
            assert cluster.controller.state.broker(101) is None
            assert broker.lifecycle.last_refusal == [
                "metadata.version is finalized at 19 (3.7-IV4), but this node supports 1-11"]


async def test_metadata_version_upgrade_renegotiates_and_keeps_client_connections(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(102, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            epoch = broker.lifecycle.broker_epoch
            # BrokerRegistration v1 at 3.5-IV2: no log directories.
            assert cluster.controller.state.broker(102).log_dirs == ()
            before = await advertised(broker.port)
            assert before[DESCRIBE_CLUSTER] == (0, 0)
            leader = broker.controller_peer(1)
            assert broker.lifecycle.negotiated_version(leader, BROKER_HEARTBEAT) == 0
            assert broker.lifecycle.negotiated_version(leader, BROKER_REGISTRATION) == 1
            negotiations = leader.negotiations
            connects = leader.connects
            client = await KafkaClient.connect("127.0.0.1", broker.port)
            reply = await cluster.update_metadata_version(MV_3_7_IV2)
            assert reply.error_code == ErrorCode.NONE
            await broker.wait_renegotiated(MV_3_7_IV2)
            # Renegotiated on the live connection: no reconnect.
            assert leader.negotiations > negotiations and leader.connects == connects
            assert broker.lifecycle.negotiated_version(leader, BROKER_HEARTBEAT) == 2
            assert broker.lifecycle.negotiated_version(leader, BROKER_REGISTRATION) == 4
            # An upgrade only adds versions: the client's connection stays open and is
            # served (closing it would only race with its next request); a new
            # connection sees the new versions.
            reply = await client.call(3, {"topics": []})
            assert [b.node_id for b in reply.brokers] == [102]
            await client.aclose()
            after = await advertised(broker.port)
            assert after[DESCRIBE_CLUSTER] == (0, 1)
            assert broker.connections.closed_by_request == 0
            # With BrokerRegistration v2+ the broker registers again, same incarnation and
            # epoch, so that its registration carries its log directory (3.7-IV2).
            await broker.lifecycle.wait_registrations(2)
            registration = cluster.controller.state.broker(102)
            assert registration.log_dirs == (broker.directory_id,)
            assert registration.epoch == epoch == broker.lifecycle.broker_epoch
            assert not registration.fenced
            assert broker.lifecycle.state is BrokerState.RUNNING


async def test_controller_apis_sent_to_a_broker_are_forwarded(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV2) as cluster:
            broker = await cluster.start_broker(103, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            # The broker closes client connections when it replays the change, but only
            # once their answers are written: the forwarded reply still arrives.
            reply = await cluster.update_metadata_version(MV_3_7_IV4, port=broker.port)
            assert reply.error_code == ErrorCode.NONE
            assert cluster.controller.state.metadata_version == MV_3_7_IV4
            await broker.wait_renegotiated(MV_3_7_IV4)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                quorum = await client.call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                            "partitions": [{"partition_index": 0}]}]})
                partition = quorum.topics[0].partitions[0]
                assert partition.leader_id == 1
                assert 103 in [o.replica_id for o in partition.observers]
            # Both went to the controller inside Envelopes (the client's principal travels
            # with them, so the controller authorizes the client, not the broker).
            envelopes = cluster.controller.metrics.requests.labels("Envelope", "0")._value.get()
            assert envelopes == 2


async def test_controlled_shutdown_fences_the_broker(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            async with trio.open_nursery() as nursery:
                broker = await cluster.start_broker_in(nursery, 104, None)
                await broker.lifecycle.wait_state(BrokerState.RUNNING)
                await broker.shutdown(10)
                assert broker.lifecycle.state is BrokerState.SHUTTING_DOWN
            registration = cluster.controller.state.broker(104)
            assert registration.in_controlled_shutdown or registration.fenced


async def test_a_broker_in_controlled_shutdown_is_let_go_once_the_other_broker_replayed_its_moves(tmp_path):
    """The controller lets a broker go only once every active broker reported (in a
    heartbeat) an offset past the records that moved its leaderships. The other broker
    here heartbeats once a minute, so the shutdown ends within the test's bound only
    because a broker that replays another's entry into controlled shutdown reports at once."""
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4, broker_session_timeout_ms=120_000) as cluster:
            async with trio.open_nursery() as nursery:
                leaving = await cluster.start_broker_in(nursery, 110, None)
                staying = await cluster.start_broker(111, None, broker_heartbeat_interval_ms=60_000)
                await leaving.lifecycle.wait_state(BrokerState.RUNNING)
                await staying.lifecycle.wait_state(BrokerState.RUNNING)
                async with await KafkaClient.connect("127.0.0.1", cluster.controller_port) as client:
                    reply = await client.call(19, {"topics": [{
                        "name": "moves", "num_partitions": 2, "replication_factor": 2, "assignments": [],
                        "configs": []}], "timeout_ms": 5000, "validate_only": False})
                    assert reply.topics[0].error_code == ErrorCode.NONE
                state = cluster.controller.state
                assert any(p.leader == 110 for p in state.topic("moves").partitions.values())
                await leaving.shutdown(TIMEOUT_S)
                assert leaving.lifecycle.state is BrokerState.SHUTTING_DOWN
                registration = state.broker(110)
                assert registration.in_controlled_shutdown and registration.fenced
                assert all(p.leader == 111 for p in state.topic("moves").partitions.values())
                moved_by = cluster.controller.controller.tracker.controlled_shutdown_offset(110, registration.epoch)
                assert moved_by is not None
                assert cluster.controller.controller.tracker.metadata_offset(111, state.broker(111).epoch) >= moved_by
                nursery.cancel_scope.cancel()


async def test_member_restarted_on_a_release_below_the_finalized_level_unregisters_and_stops(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_6_IV2) as cluster:
            async with trio.open_nursery() as nursery:
                broker = await cluster.start_broker_in(nursery, 105, "3.7")
                await broker.lifecycle.wait_state(BrokerState.RUNNING)
                assert (await cluster.update_metadata_version(MV_3_7_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_7_IV0)
                nursery.cancel_scope.cancel()
            assert cluster.controller.state.broker(105) is not None
            # The same broker comes back on 3.6 software, which cannot run 3.7-IV0.
            with pytest.raises(BaseExceptionGroup) as raised:
                async with trio.open_nursery() as nursery:
                    await cluster.start_broker_in(nursery, 105, "3.6")
            fatal = raised.value.subgroup(BrokerFatalError)
            assert fatal is not None, raised.value
            assert "metadata.version is finalized at 15 (3.7-IV0), but this node supports 1-14" in str(
                fatal.exceptions[0] if not isinstance(fatal.exceptions[0], BaseExceptionGroup)
                else fatal.exceptions[0].exceptions[0])
            assert cluster.controller.state.broker(105) is None


async def test_closing_client_connections_on_a_metadata_version_change_can_be_turned_off(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(108, "3.7", close_connections_on_metadata_version_change=False)
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert (await cluster.update_metadata_version(MV_3_7_IV0)).error_code == ErrorCode.NONE
                await broker.wait_renegotiated(MV_3_7_IV0)
                # Still connected: the client keeps the versions it negotiated.
                reply = await client.call(3, {"topics": []})
                assert reply.cluster_id == cluster.cluster_id
            assert broker.connections.closed_by_request == 0
            assert (await advertised(broker.port))[DESCRIBE_CLUSTER] == (0, 1)


async def test_api_versions_v5_tells_a_client_meaning_another_broker_to_rebootstrap(tmp_path):
    """KIP-1242, as Kafka's brokers answer it: a client that names the cluster and the
    broker it means to reach, and finds another cluster or broker at the address, gets
    REBOOTSTRAP_REQUIRED with no API list."""
    software = {"client_software_name": "kraftwerk-test", "client_software_version": "1"}
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(101, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                for asked, code in (({"cluster_id": cluster.cluster_id, "node_id": 101}, ErrorCode.NONE),
                                    ({"cluster_id": cluster.cluster_id, "node_id": 102},
                                     ErrorCode.REBOOTSTRAP_REQUIRED),
                                    ({"cluster_id": "another-cluster-AAAAAAAA", "node_id": 101},
                                     ErrorCode.REBOOTSTRAP_REQUIRED)):
                    reply = await client.request(18, 5, {**software, **asked})
                    assert reply.error_code == code, asked
                    assert bool(reply.api_keys) == (code == ErrorCode.NONE), asked



async def test_renegotiation_asks_each_controller_once_and_the_forwarding_connection_takes_the_answer(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_5_IV2) as cluster:
            broker = await cluster.start_broker(102, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            leader = broker.controller_peer(1)
            forward = broker._forward_peers.existing(1)
            await forward.wait_connected()
            asked = (leader.negotiations, forward.negotiations)
            reply = await cluster.update_metadata_version(MV_3_7_IV2)
            assert reply.error_code == ErrorCode.NONE
            await broker.wait_renegotiated(MV_3_7_IV2)
            # One ApiVersions exchange with the controller (on the controller connection);
            # the forwarding connection holds the same, current answer without asking.
            assert leader.negotiations > asked[0]
            assert forward.negotiations == asked[1]
            assert forward.api_versions == leader.api_versions
            assert forward.finalized_features["metadata.version"] == MV_3_7_IV2
            assert forward.finalized_features_epoch == leader.finalized_features_epoch
