"""Three in-process controllers whose only listener is SSL with client certificates
required: the quorum works over it, and a controller whose certificate comes from
another CA cannot take part (no vote or fetch gets through), while the other two
keep a leader and commit."""

from __future__ import annotations

import trio
from structlog.testing import capture_logs

from server.client import KafkaClient
from server.config import config_from_properties
from cli.local_cluster import free_port_run
from server.nodes.controller import ControllerNode
from server.security.client_config import ClientSecurity
from server.storage.meta_properties import random_uuid_string

from .helpers import Pki, format_directory

TIMEOUT_S = 60


def controller_properties(node_id: int, base_port: int, keystore: str, cafile: str, log_dir: str) -> dict:
    voters = ",".join(f"{n}@127.0.0.1:{base_port + n - 1}" for n in (1, 2, 3))
    return {
        "node.id": str(node_id),
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{base_port + node_id - 1}",
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": voters,
        "controller.quorum.election.timeout.ms": "300",
        "controller.quorum.fetch.timeout.ms": "600",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": keystore,
        "ssl.truststore.location": cafile,
        "ssl.client.auth": "required",
        "metadata.log.dir": log_dir,
    }


async def test_a_quorum_runs_over_mutual_tls_and_a_controller_of_another_ca_cannot_join(tmp_path):
    pki = Pki(tmp_path / "pki")
    identities = {
        1: pki.issue("controller-1", "127.0.0.1", common_name="controller-1"),
        2: pki.issue("controller-2", "127.0.0.1", common_name="controller-2"),
        # Node 3's certificate and trust come from a CA the others do not trust.
        3: pki.issue("controller-3", "127.0.0.1", common_name="controller-3", ca=pki.other_ca),
    }
    base_port = free_port_run(3)
    cluster_id = random_uuid_string()
    nodes: dict[int, ControllerNode] = {}
    for node_id, identity in identities.items():
        directory = tmp_path / f"controller-{node_id}"
        format_directory(directory, node_id=node_id, cluster_id=cluster_id)
        config = config_from_properties(controller_properties(node_id, base_port, identity.keystore, identity.cafile,
                                                              str(directory)))
        assert ClientSecurity.for_node(config).security_protocol == "SSL"
        nodes[node_id] = ControllerNode(config)

    with trio.fail_after(TIMEOUT_S), capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            for node in nodes.values():
                await nursery.start(node.run)
            active = trio.Event()
            leaders: list[int] = []

            async def wait_active(node_id: int) -> None:
                await nodes[node_id].controller.wait_active()
                leaders.append(node_id)
                active.set()

            for node_id in (1, 2):
                nursery.start_soon(wait_active, node_id)
            await active.wait()
            leader = leaders[0]
            follower = 3 - leader
            # The leader's election and its committed bootstrap records needed the
            # follower (2 of 3): the leader's DescribeQuorum shows the follower holding
            # them and node 3 holding nothing. Read over mutual TLS by a client with a
            # certificate of the trusted CA.
            security = ClientSecurity("SSL", ssl_cafile=pki.cafile, ssl_certfile=identities[1].keystore)
            async with await KafkaClient.connect("127.0.0.1", nodes[leader].port, security=security,
                                                 timeout_s=10) as client:
                finalized = {f.name: f.max_version_level
                             for f in client.api_versions_response.finalized_features}
                assert finalized["metadata.version"] == 19
                quorum = await client.call(55, {"topics": [{"topic_name": "__cluster_metadata",
                                                            "partitions": [{"partition_index": 0}]}]})
                partition = quorum.topics[0].partitions[0]
                assert partition.leader_id == leader
                voters = {v.replica_id: v.log_end_offset for v in partition.current_voters}
                assert voters[follower] >= 2 and voters[3] <= 0
            assert nodes[follower].raft_driver.leader_id == leader
            assert nodes[follower].raft_driver.peer(leader).connects >= 1
            # Node 3 never got a connection through, in either direction.
            assert nodes[3].raft_driver.leader_id is None
            assert not nodes[3].controller.active
            assert nodes[3].state.metadata_version is None
            for node_id in (1, 2):
                assert nodes[node_id].raft_driver.peer(3).connects == 0
                assert nodes[3].raft_driver.peer(node_id).connects == 0
            nursery.cancel_scope.cancel()
    assert len([e for e in logs if e["event"] == "security.tls_handshake_failed"]) >= 2
