"""A secured controller listener refuses the KRaft RPCs to principals without
CLUSTER_ACTION before the Raft driver sees them, and the quorum goes on.

Three in-process controllers on 127.0.0.1 with an authorizer, once with SASL
(SASL_PLAINTEXT, PLAIN users from the listener's JAAS line: credentials that exist
before the first election) and once with SSL and `ssl.client.auth=required`
(principals from certificates). The controllers authenticate to each other as super
users. Then:
- `mallory`, authenticated but without ACLs, sends hand-encoded Vote and
  BeginQuorumEpoch frames with epoch 2**31-1, and EndQuorumEpoch, Fetch, FetchSnapshot
  and DescribeQuorum (DESCRIBE), to every node: each is answered in its API's shape with
  CLUSTER_AUTHORIZATION_FAILED and logged `security.authorization_failed`; no node's Raft
  driver is offered any of them, no epoch or leader moves, and the connection stays open;
- the admin's ACL write commits after the attack; `operator`, granted CLUSTER_ACTION by
  it, is let through: the Raft driver judges the same hostile Vote (its refusal, not the
  authorizer's) and answers a well-formed one (not granted: the epoch has a leader);
- the leader stops: the other two elect a new one and commit.
And, on an SSL listener with `ssl.client.auth=required`, a client without a certificate
never gets a frame in.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from protocol.registry import API_MESSAGES
from server.authorization import AclOperation
from server.client import KafkaClient
from server.config import Listener, config_from_properties
from cli.local_cluster import free_port_run
from server.net.connect import open_client_stream
from server.nodes.controller import ControllerNode
from server.raft import messages as m
from server.security.client_config import ClientSecurity
from server.security.model import AclPermissionType, PatternType, ResourceType
from server.storage.meta_properties import random_uuid_string

from .helpers import FrameReader, Pki, decode_response, format_directory, request_frame, ssl_config, start_node

TIMEOUT_S = 60
HOSTILE_EPOCH = 2**31 - 1
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT, DESCRIBE_QUORUM = 52, 53, 54, 1, 59, 55
CREATE_ACLS = 30
PASSWORDS = {"controller": "controller-pw-1", "admin": "admin-pw-2", "mallory": "mallory-pw-3",
             "operator": "operator-pw-4"}


# -- hand-encoded frames (no kraftwerk encoder: what an attacker would write) ---------

def _int16_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _compact_string(text: str) -> bytes:
    data = text.encode()
    assert len(data) < 127  # a one-byte unsigned varint length
    return bytes([len(data) + 1]) + data


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def vote_v0_frame(correlation_id: int, cluster_id: str, candidate_epoch: int, candidate_id: int,
                  last_offset_epoch: int = 0, last_offset: int = 0) -> bytes:
    """Vote v0 (flexible: request header v2, compact strings and arrays, tagged fields)."""
    header = struct.pack(">hhi", VOTE, 0, correlation_id) + _int16_string("mallory") + b"\x00"
    partition = struct.pack(">iiiiq", 0, candidate_epoch, candidate_id, last_offset_epoch, last_offset) + b"\x00"
    topic = _compact_string("__cluster_metadata") + b"\x02" + partition + b"\x00"
    body = _compact_string(cluster_id) + b"\x02" + topic + b"\x00"
    return _sized(header + body)


def begin_quorum_epoch_v0_frame(correlation_id: int, cluster_id: str, leader_id: int, leader_epoch: int) -> bytes:
    """BeginQuorumEpoch v0 (not flexible: request header v1, int16 strings, int32 array counts)."""
    header = struct.pack(">hhi", BEGIN_QUORUM_EPOCH, 0, correlation_id) + _int16_string("mallory")
    partition = struct.pack(">iii", 0, leader_id, leader_epoch)
    topic = _int16_string("__cluster_metadata") + struct.pack(">i", 1) + partition
    body = _int16_string(cluster_id) + struct.pack(">i", 1) + topic
    return _sized(header + body)


def hostile_frames(cluster_id: str, pretend_id: int) -> list[tuple[int, int, bytes]]:
    """(api key, version, frame): every KRaft RPC and DescribeQuorum, epochs at 2**31-1."""
    return [
        (VOTE, 0, vote_v0_frame(1, cluster_id, HOSTILE_EPOCH, pretend_id, HOSTILE_EPOCH, 2**40)),
        (BEGIN_QUORUM_EPOCH, 0, begin_quorum_epoch_v0_frame(2, cluster_id, pretend_id, HOSTILE_EPOCH)),
        (END_QUORUM_EPOCH, 0, request_frame(END_QUORUM_EPOCH, 0, 3, m.end_quorum_epoch_request(
            cluster_id, pretend_id, HOSTILE_EPOCH, [pretend_id]))),
        (FETCH, 17, request_frame(FETCH, 17, 4, m.fetch_request(
            cluster_id, pretend_id, HOSTILE_EPOCH, 0, HOSTILE_EPOCH, 0, 1 << 20))),
        (FETCH_SNAPSHOT, 0, request_frame(FETCH_SNAPSHOT, 0, 5, m.fetch_snapshot_request(
            cluster_id, pretend_id, HOSTILE_EPOCH, (1, HOSTILE_EPOCH), 0, 1 << 20))),
        (DESCRIBE_QUORUM, 0, request_frame(DESCRIBE_QUORUM, 0, 6, {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})),
    ]


def carries(value, marker: int) -> bool:
    """Whether a decoded body holds `marker` anywhere (construct Containers are dicts)."""
    if isinstance(value, dict):
        return any(carries(item, marker) for key, item in value.items() if not str(key).startswith("_"))
    if isinstance(value, (list, tuple)):
        return any(carries(item, marker) for item in value)
    return isinstance(value, int) and not isinstance(value, bool) and value == marker


# -- the quorum -----------------------------------------------------------------------

@dataclass
class Setup:
    """How the nodes and the test's clients authenticate, for one listener kind."""

    name: str
    properties: dict[str, str]
    keystores: dict[int, str] = field(default_factory=dict)  # SSL: each node's certificate
    clients: dict[str, ClientSecurity] = field(default_factory=dict)

    def principal(self, user: str) -> str:
        return f"User:{certificate_subject(user)}" if self.name == "ssl" else f"User:{user}"


def _plain_jaas(user: str, static_users: dict[str, str]) -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in static_users.items())
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" '
            f'password="{static_users[user]}" {users};')


def sasl_setup() -> Setup:
    properties = {
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _plain_jaas("controller", PASSWORDS),
        "super.users": "User:controller;User:admin",
    }
    clients = {user: ClientSecurity("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username=user,
                                    sasl_password=PASSWORDS[user]) for user in ("admin", "mallory", "operator")}
    return Setup("sasl", properties, clients=clients)


def certificate_subject(common_name: str) -> str:
    """The principal name of a certificate `issue` made (Kafka's DEFAULT rule: RFC 2253 order)."""
    return f"CN={common_name},OU=quorum,O=kraftwerk"


def issue(pki: Pki, common_name: str) -> str:
    return pki.issue(common_name, "127.0.0.1", common_name=common_name, organization_unit_name="quorum",
                     organization_name="kraftwerk").keystore


def ssl_setup(pki: Pki) -> Setup:
    keystores = {node_id: issue(pki, f"controller-{node_id}") for node_id in (1, 2, 3)}
    properties = {
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.truststore.location": pki.cafile,
        "ssl.client.auth": "required",
        "super.users": ";".join(f"User:{certificate_subject(name)}"
                                for name in ("controller-1", "controller-2", "controller-3", "admin")),
    }
    clients = {user: ClientSecurity("SSL", ssl_cafile=pki.cafile, ssl_certfile=issue(pki, user))
               for user in ("admin", "mallory", "operator")}
    return Setup("ssl", properties, keystores, clients)


class Quorum:
    def __init__(self, setup: Setup, tmp_path) -> None:
        self.setup = setup
        self.base_port = free_port_run(3)
        self.cluster_id = random_uuid_string()
        self.nodes: dict[int, ControllerNode] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        # Every request any node's Raft driver is offered that carries the hostile epoch.
        self.offered_hostile: list[tuple[int, int]] = []
        voters = ",".join(f"{n}@127.0.0.1:{self.base_port + n - 1}" for n in (1, 2, 3))
        for node_id in (1, 2, 3):
            directory = tmp_path / f"controller-{node_id}"
            format_directory(directory, node_id=node_id, cluster_id=self.cluster_id)
            properties = {
                "node.id": str(node_id), "process.roles": "controller",
                "listeners": f"CONTROLLER://127.0.0.1:{self.base_port + node_id - 1}",
                "controller.listener.names": "CONTROLLER", "controller.quorum.voters": voters,
                "controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": "2000",
                "metadata.log.dir": str(directory), "authorizer.class.name": AUTHORIZER,
                **setup.properties,
            }
            if node_id in setup.keystores:
                properties["ssl.keystore.location"] = setup.keystores[node_id]
            self.nodes[node_id] = ControllerNode(config_from_properties(properties))

    def address(self, node_id: int) -> tuple[str, int]:
        return "127.0.0.1", self.nodes[node_id].port

    async def start(self, nursery: trio.Nursery) -> None:
        for node_id, node in self.nodes.items():
            await nursery.start(self._run, node_id)
            self._record_offers(node)

    async def _run(self, node_id: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self.scopes[node_id] = scope
            await self.nodes[node_id].run(task_status=task_status)

    def _record_offers(self, node: ControllerNode) -> None:
        """Wraps the driver's entry point (what server/raft/rpc.py calls) to see what reaches it."""
        driver = node.raft_driver
        offer = driver.offer_request

        def recording_offer(sender_id, api_key, body, answer):
            if carries(body, HOSTILE_EPOCH):
                self.offered_hostile.append((node.config.node_id, int(api_key)))
            offer(sender_id, api_key, body, answer)

        driver.offer_request = recording_offer

    def stop(self, node_id: int) -> None:
        self.scopes[node_id].cancel()
        del self.nodes[node_id]

    async def wait_leader(self) -> int:
        """Until the running nodes agree on one leader in one epoch; returns the leader."""
        leaders: list[int] = []
        async with trio.open_nursery() as nursery:
            async def wait_active(node_id: int) -> None:
                await self.nodes[node_id].controller.wait_active()
                leaders.append(node_id)
                nursery.cancel_scope.cancel()

            for node_id in self.nodes:
                nursery.start_soon(wait_active, node_id)
        leader = leaders[0]
        epoch = self.nodes[leader].raft_driver.epoch
        for node in self.nodes.values():
            while (node.raft_driver.leader_id, node.raft_driver.epoch) != (leader, epoch):
                await node.raft_driver.wait_changed()
        return leader

    def epochs(self) -> dict[int, tuple[int, int | None]]:
        return {node_id: (node.raft_driver.epoch, node.raft_driver.leader_id) for node_id, node in self.nodes.items()}

    async def client(self, user: str, node_id: int) -> KafkaClient:
        return await KafkaClient.connect(*self.address(node_id), security=self.setup.clients[user], timeout_s=10)

    async def raw(self, user: str, node_id: int) -> trio.abc.Stream:
        """An authenticated stream the test writes frames on itself."""
        return await open_client_stream(*self.address(node_id), self.setup.clients[user], timeout_s=10,
                                        client_id=user)

    async def grant_cluster_action(self, leader: int, principal: str) -> None:
        creation = {"resource_type": int(ResourceType.CLUSTER), "resource_name": "kafka-cluster",
                    "resource_pattern_type": int(PatternType.LITERAL), "principal": principal, "host": "*",
                    "operation": int(AclOperation.CLUSTER_ACTION), "permission_type": int(AclPermissionType.ALLOW)}
        async with await self.client("admin", leader) as admin:
            created = await admin.call(CREATE_ACLS, {"creations": [creation]})
        assert [r.error_code for r in created.results] == [0]


async def exchange(stream: trio.abc.Stream, reader: FrameReader, api_key: int, version: int, frame: bytes):
    await stream.send_all(frame)
    payload = await reader.next_payload()
    assert payload is not None, f"the connection was closed after api {api_key}"
    return decode_response(api_key, version, payload)[1]


@pytest.fixture(params=["sasl", "ssl"])
def setup(request, tmp_path):
    return sasl_setup() if request.param == "sasl" else ssl_setup(Pki(tmp_path / "pki"))


async def test_kraft_rpcs_need_cluster_action_on_a_secured_controller_listener(setup, tmp_path):
    quorum = Quorum(setup, tmp_path)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            await quorum.start(nursery)
            leader = await quorum.wait_leader()
            before = quorum.epochs()
            follower = min(node_id for node_id in quorum.nodes if node_id != leader)

            # Mallory (authenticated, no ACL) at every node, pretending to be a voter.
            with capture_logs() as logs:
                for node_id in sorted(quorum.nodes):
                    stream = await quorum.raw("mallory", node_id)
                    reader = FrameReader(stream)
                    for api_key, version, frame in hostile_frames(quorum.cluster_id, pretend_id=follower):
                        body = await exchange(stream, reader, api_key, version, frame)
                        assert body.error_code == DENIED, (node_id, api_key)
                    # Still open and answering: a refusal is an answer, not a close.
                    body = await exchange(stream, reader, 18, 3, request_frame(18, 3, 7, {
                        "client_software_name": "mallory", "client_software_version": "1"}))
                    assert body.error_code == 0
                    await stream.aclose()
            refusals = [e for e in logs if e["event"] == "security.authorization_failed"]
            assert sorted((e["api"], e["operation"]) for e in refusals) == sorted(
                [("Vote", "CLUSTER_ACTION"), ("BeginQuorumEpoch", "CLUSTER_ACTION"),
                 ("EndQuorumEpoch", "CLUSTER_ACTION"), ("Fetch", "CLUSTER_ACTION"),
                 ("FetchSnapshot", "CLUSTER_ACTION"), ("DescribeQuorum", "DESCRIBE")] * 3)
            assert {e["principal"] for e in refusals} == {setup.principal("mallory")}
            assert {e["resource_type"] for e in refusals} == {"CLUSTER"}
            # Refused before the Raft driver: it was offered none of them, and nothing moved.
            assert quorum.offered_hostile == []
            assert not [e for e in logs if e["event"] == "raft.request_refused"]
            assert quorum.epochs() == before

            # The quorum commits after the attack: the admin grants the operator CLUSTER_ACTION.
            await quorum.grant_cluster_action(leader, setup.principal("operator"))
            assert quorum.epochs() == before

            # The operator is let through: the Raft side judges the frames.
            stream = await quorum.raw("operator", leader)
            reader = FrameReader(stream)
            epoch = before[leader][0]
            with capture_logs() as logs:
                hostile = await exchange(stream, reader, VOTE, 0,
                                         vote_v0_frame(11, quorum.cluster_id, HOSTILE_EPOCH, follower))
                well_formed = await exchange(stream, reader, VOTE, 0,
                                             vote_v0_frame(12, quorum.cluster_id, epoch, follower))
            await stream.aclose()
            assert quorum.offered_hostile == [(leader, VOTE)]
            assert hostile.error_code not in (0, DENIED)  # the Raft boundary's refusal
            assert not [e for e in logs if e["event"] == "security.authorization_failed"]
            assert well_formed.error_code == 0
            [partition] = well_formed.topics[0].partitions
            assert (partition.error_code, partition.vote_granted, partition.leader_id,
                    partition.leader_epoch) == (0, False, leader, epoch)
            assert quorum.epochs() == before

            # The leader goes away: the other two elect a new one and commit.
            quorum.stop(leader)
            new_leader = await quorum.wait_leader()
            assert new_leader != leader
            assert epoch < quorum.nodes[new_leader].raft_driver.epoch < epoch + 10
            await quorum.grant_cluster_action(new_leader, setup.principal("mallory"))
            granted = quorum.nodes[new_leader].state.acls()
            assert {entry.principal for entry in granted.values()} == {
                setup.principal("operator"), setup.principal("mallory")}
            nursery.cancel_scope.cancel()


async def test_without_a_client_certificate_no_frame_gets_in(tmp_path):
    """ssl.client.auth=required: the handshake fails before the listener reads any frame,
    even one a TLS 1.3 client sends right after its own Finished."""
    pki = Pki(tmp_path / "pki")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, listener=Listener("CONTROLLER", "127.0.0.1", 0, "SSL"),
                                    listener_ssl=(("CONTROLLER", ssl_config(pki.server, client_auth="required")),))
            offered: list[int] = []
            offer = node.raft_driver.offer_request
            node.raft_driver.offer_request = lambda sender, key, body, answer: (offered.append(key),
                                                                                 offer(sender, key, body, answer))
            epoch = node.raft_driver.epoch
            with capture_logs() as logs:
                tcp = await trio.open_tcp_stream("127.0.0.1", node.port)
                context = ClientSecurity("SSL", ssl_cafile=pki.cafile).ssl_context()
                tls = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
                answered = None
                try:
                    await tls.do_handshake()  # TLS 1.3: the client is done before the server judges it
                    await tls.send_all(vote_v0_frame(1, node.cluster_id, HOSTILE_EPOCH, 1))
                    answered = await FrameReader(tls).next_payload()
                except trio.BrokenResourceError:
                    pass
                await trio.testing.wait_all_tasks_blocked()
                await tcp.aclose()
            assert answered is None
            assert offered == []
            assert node.raft_driver.epoch == epoch
            assert [e["listener"] for e in logs if e["event"] == "security.tls_handshake_failed"] == ["CONTROLLER"]
            assert not [e for e in logs if e["event"] in ("net.connection_opened", "security.authorization_failed")]
            nursery.cancel_scope.cancel()

