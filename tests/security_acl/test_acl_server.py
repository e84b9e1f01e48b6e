"""A real in-process controller (127.0.0.1, temporary directory) with an authorizer.

An ANONYMOUS client (PLAINTEXT) is refused cluster APIs with CLUSTER_AUTHORIZATION_FAILED
unless `allow.everyone.if.no.acl.found=true` or an ACL for `User:ANONYMOUS` allows them;
per-topic and per-resource APIs answer each item on its own.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import trio
from structlog.testing import capture_logs

from protocol.errors import ErrorCode
from server.authorization import CLUSTER_OPERATIONS, AclOperation as Op, operations_bitfield
from server.client import KafkaClient
from server.config import Listener, ServerConfig
from server.controller import acl_commands
from server.controller import topics as topic_commands
from server.controller.commands import bootstrap_records
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.security.authorizer import TOPIC_OPERATIONS
from server.security.model import AclPermissionType as Perm
from server.security.model import KafkaPrincipal
from server.security.model import PatternType as Pat
from server.security.model import ResourceType as Res
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

TIMEOUT_S = 30
MV_3_7_IV4 = 19
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 3, 19, 20, 32
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
UPDATE_FEATURES, DESCRIBE_CLUSTER, BROKER_REGISTRATION, BROKER_HEARTBEAT = 57, 60, 62, 63


@asynccontextmanager
async def controller(tmp_path: Path, **extra: str):
    directory = tmp_path / "metadata"
    directory.mkdir(parents=True)
    write_bootstrap_checkpoint(directory, bootstrap_records(MV_3_7_IV4))
    write_meta_properties(directory, MetaProperties(cluster_id=random_uuid_string(), node_id=1,
                                                    directory_id=random_uuid_string()))
    config = replace(ServerConfig(listener=Listener("CONTROLLER", "127.0.0.1", 0), metadata_log_dir=directory),
                     extra=dict(extra))
    node = ControllerNode(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        try:
            async with await KafkaClient.connect("127.0.0.1", node.port) as client:
                yield node, client
        finally:
            nursery.cancel_scope.cancel()


def creation(rt, name, op, perm=Perm.ALLOW, pat=Pat.LITERAL, principal="User:ANONYMOUS") -> dict:
    return {"resource_type": int(rt), "resource_name": name, "resource_pattern_type": int(pat),
            "principal": principal, "host": "*", "operation": int(op), "permission_type": int(perm)}


async def grant(node: ControllerNode, *creations: dict) -> None:
    """ACLs written through the controller loop directly (the operator's bootstrap path)."""
    request = {"creations": list(creations)}
    result = await node.submit(lambda state, tracker, next_offset, now_ms: acl_commands.create_acls(
        state, request, next_offset))
    assert all(r["error_code"] == 0 for r in result.response["results"])


FEATURES = {"timeout_ms": 5000, "validate_only": True,
            "feature_updates": [{"feature": "metadata.version", "max_version_level": MV_3_7_IV4, "upgrade_type": 1}]}


async def test_anonymous_is_refused_cluster_apis_by_default(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as (node, client):
            with capture_logs() as logs:
                described = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
                updated = await client.call(UPDATE_FEATURES, FEATURES)
                acls = await client.call(DESCRIBE_ACLS, {"resource_type_filter": 1, "pattern_type_filter": 1,
                                                         "operation": 1, "permission_type": 1})
                created = await client.call(CREATE_ACLS, {"creations": [creation(Res.TOPIC, "t", Op.READ)]})
            assert described.error_code == DENIED
            assert updated.error_code == DENIED
            assert acls.error_code == DENIED
            assert [r.error_code for r in created.results] == [DENIED]
            refusals = [e for e in logs if e["event"] == "security.authorization_failed"]
            assert [(e["api"], e["operation"], e["resource_type"], e["principal"]) for e in refusals] == [
                ("DescribeCluster", "DESCRIBE", "CLUSTER", "User:ANONYMOUS"),
                ("UpdateFeatures", "ALTER", "CLUSTER", "User:ANONYMOUS"),
                ("DescribeAcls", "DESCRIBE", "CLUSTER", "User:ANONYMOUS"),
                ("CreateAcls", "ALTER", "CLUSTER", "User:ANONYMOUS")]
            assert all(e["host"] == "127.0.0.1" for e in refusals)
            assert node.state.acls() == {}  # nothing was written


async def test_allow_everyone_if_no_acl_found(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER,
                                           "allow.everyone.if.no.acl.found": "true"}) as (node, client):
            assert (await client.call(DESCRIBE_CLUSTER, {})).error_code == 0
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == 0
            # Once the cluster has an ACL (DESCRIBE for ANONYMOUS), the default no longer applies.
            created = await client.call(CREATE_ACLS, {"creations": [creation(Res.CLUSTER, "kafka-cluster",
                                                                             Op.DESCRIBE)]})
            assert [r.error_code for r in created.results] == [0]
            assert (await client.call(DESCRIBE_CLUSTER, {})).error_code == 0
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == DENIED


async def test_acls_for_anonymous_allow_what_they_name(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as (node, client):
            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.DESCRIBE))
            described = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
            assert described.error_code == 0
            assert described.cluster_authorized_operations == operations_bitfield([Op.DESCRIBE])
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == DENIED
            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.ALTER))
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == 0
            # A DENY for the same principal wins.
            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.ALTER, perm=Perm.DENY))
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == DENIED


async def test_super_user_may_do_everything(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER,
                                           "super.users": "User:admin;User:ANONYMOUS"}) as (node, client):
            described = await client.call(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
            assert described.error_code == 0
            assert described.cluster_authorized_operations == operations_bitfield(CLUSTER_OPERATIONS)
            assert (await client.call(UPDATE_FEATURES, FEATURES)).error_code == 0


async def test_without_an_authorizer_acl_apis_answer_security_disabled(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path) as (node, client):
            assert node.authorizer is None
            created = await client.call(CREATE_ACLS, {"creations": [creation(Res.TOPIC, "t", Op.READ)]})
            assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED]
            described = await client.call(DESCRIBE_ACLS, {"resource_type_filter": 1, "pattern_type_filter": 1,
                                                          "operation": 1, "permission_type": 1})
            assert described.error_code == ErrorCode.SECURITY_DISABLED
            assert (await client.call(DESCRIBE_CLUSTER, {})).error_code == 0


async def register_unfenced(client: KafkaClient, cluster_id: str) -> None:
    reply = await client.call(BROKER_REGISTRATION, {
        "broker_id": 1, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 29093, "security_protocol": 0}],
        "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 22}],
        "rack": None, "log_dirs": [uuid.uuid4()]})
    assert reply.error_code == 0
    beat = await client.call(BROKER_HEARTBEAT, {
        "broker_id": 1, "broker_epoch": reply.broker_epoch, "current_metadata_offset": 2**40,
        "want_fence": False, "want_shut_down": False})
    assert beat.error_code == 0 and not beat.is_fenced


def topics_body(*names: str) -> dict:
    return {"timeout_ms": 5000, "validate_only": False, "topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for name in names]}


async def test_topic_apis_are_authorized_per_topic(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as (node, client):
            # Brokers register with CLUSTER_ACTION; this client may only touch "ok-" topics.
            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION),
                        creation(Res.TOPIC, "ok-", Op.ALL, pat=Pat.PREFIXED))
            await register_unfenced(client, node.cluster_id)
            with capture_logs() as logs:
                created = await client.call(CREATE_TOPICS, topics_body("ok-1", "no-1", "ok-2"))
            assert [(e["api"], e["operation"], e["resource_type"], e["resource_name"]) for e in logs
                    if e["event"] == "security.authorization_failed"] == [("CreateTopics", "CREATE", "TOPIC", "no-1")]
            codes = {t.name: t.error_code for t in created.topics}
            assert codes == {"ok-1": 0, "ok-2": 0, "no-1": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            assert set(node.state.topics()) == {"ok-1", "ok-2"}
            # An operator creates "no-2" (CREATE on CLUSTER for everything would also do).
            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.CREATE, principal="User:ops"))
            result = await node.submit(lambda state, tracker, next_offset, now_ms: topic_commands.create_topics(
                state, topics_body("no-2"), 7))
            assert result.response["topics"][0]["error_code"] == 0
            # Metadata: all topics shows only the describable ones; named ones are refused.
            everything = await client.call(METADATA, {"topics": None})
            assert sorted(t.name for t in everything.topics) == ["ok-1", "ok-2"]
            named = await client.call(METADATA, {"topics": [{"name": "no-2"}, {"name": "ok-1"}, {"name": "absent"}]})
            assert [(t.name, t.error_code) for t in named.topics] == [
                ("no-2", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("ok-1", 0),
                ("absent", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
            with_ops = await client.call(METADATA, {"topics": [{"name": "ok-1"}],
                                                    "include_topic_authorized_operations": True})
            assert with_ops.topics[0].topic_authorized_operations == operations_bitfield(TOPIC_OPERATIONS)
            configs = await client.call(DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": "no-2", "configuration_keys": None},
                {"resource_type": 2, "resource_name": "ok-1", "configuration_keys": ["cleanup.policy"]},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None}]})
            assert {r.resource_name: r.error_code for r in configs.results} == {
                "no-2": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "ok-1": 0, "1": DENIED}
            deleted = await client.call(DELETE_TOPICS, {"topic_names": ["no-2", "ok-1"],
                                                        "topics": [{"name": "no-2"}, {"name": "ok-1"}],
                                                        "timeout_ms": 5000})
            assert {r.name: r.error_code for r in deleted.responses} == {
                "no-2": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "ok-1": 0}
            assert set(node.state.topics()) == {"ok-2", "no-2"}
            # By id (v6): a topic the principal may not describe is refused without its name.
            ids = {name: topic.topic_id for name, topic in node.state.topics().items()}
            by_id = await client.request(DELETE_TOPICS, 6, {"timeout_ms": 5000, "topics": [
                {"name": None, "topic_id": ids["no-2"]}, {"name": None, "topic_id": ids["ok-2"]}]})
            assert [(r.name, r.topic_id, r.error_code) for r in by_id.responses] == [
                (None, ids["no-2"], ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("ok-2", ids["ok-2"], 0)]
            assert set(node.state.topics()) == {"no-2"}


async def test_acl_lifecycle_over_the_wire(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER,
                                           "super.users": "User:ANONYMOUS"}) as (node, client):
            with capture_logs() as logs:
                created = await client.call(CREATE_ACLS, {"creations": [
                    creation(Res.TOPIC, "orders", Op.READ, principal="User:alice"),
                    creation(Res.TOPIC, "pay-", Op.WRITE, pat=Pat.PREFIXED, principal="User:bob"),
                    creation(Res.TOPIC, "", Op.READ)]})
            assert [r.error_code for r in created.results] == [0, 0, ErrorCode.INVALID_REQUEST]
            assert [e["created"] for e in logs if e["event"] == "security.acls_created"] == [2]
            described = await client.call(DESCRIBE_ACLS, {
                "resource_type_filter": 2, "resource_name_filter": "pay-now", "pattern_type_filter": int(Pat.MATCH),
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
            assert [(r.resource_name, r.pattern_type, [a.principal for a in r.acls]) for r in described.resources] == [
                ("pay-", int(Pat.PREFIXED), ["User:bob"])]
            deleted = await client.call(DELETE_ACLS, {"filters": [{
                "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": "User:alice", "host_filter": None, "operation": 1, "permission_type": 1}]})
            assert [[m.resource_name for m in f.matching_acls] for f in deleted.filter_results] == [["orders"]]
            assert sorted(a.resource_name for a in node.state.acls().values()) == ["pay-"]


# -- through a broker agent ------------------------------------------------------------------


async def test_broker_forwards_acl_writes_and_describes_from_its_image(controller_and_broker):
    with trio.fail_after(TIMEOUT_S):
        async with controller_and_broker(**{"authorizer.class.name": AUTHORIZER,
                                                      "super.users": "User:ANONYMOUS"}) as (controller_node, broker):
            assert broker.authorizer is not None
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert {DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS} <= set(client.api_versions)
                created = await client.call(CREATE_ACLS, {"creations": [
                    creation(Res.TOPIC, "orders", Op.READ, principal="User:alice")]})
                assert [r.error_code for r in created.results] == [0]
                assert len(controller_node.state.acls()) == 1
                await broker.replayer.wait_replayed(controller_node.state.last_applied_offset + 1)
                described = await client.call(DESCRIBE_ACLS, {
                    "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
                assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
                    ("orders", ["User:alice"])]
                # The broker's own authorizer reads the same ACLs from its image.
                alice = KafkaPrincipal("User", "alice")
                assert broker.authorizer.allowed(alice, "10.0.0.1", Op.READ, Res.TOPIC, "orders")
                assert not broker.authorizer.allowed(alice, "10.0.0.1", Op.WRITE, Res.TOPIC, "orders")
                deleted = await client.call(DELETE_ACLS, {"filters": [{
                    "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
                assert [len(f.matching_acls) for f in deleted.filter_results] == [1]
                assert controller_node.state.acls() == {}
