"""SASL on a running controller (in process, 127.0.0.1): the dispatcher's pre-authentication
gate, SaslHandshake / SaslAuthenticate through the real request path, credentials from the
bootstrap records and from AlterUserScramCredentials, kraftwerk's own SASL client, and
kafka-python (SCRAM-SHA-256/512, PLAIN, the SCRAM admin APIs) on a SASL_PLAINTEXT listener."""

from __future__ import annotations

import hashlib
import os
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from server.client import ClientError, KafkaClient
from server.config import config_from_properties
from server.controller.commands import bootstrap_records
from server.controller.scram_commands import bootstrap_scram_records
from server.dispatch import Dispatcher
from server.net.listener import Connection, serve_connection
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.security.model import ANONYMOUS, KafkaPrincipal
from server.security.sasl import new_sasl_session
from server.net.sasl_client import SaslClientError, authenticate
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

TIMEOUT_S = 30
MV_3_7_IV4 = 19
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
BOOTSTRAP_USERS = ["SCRAM-SHA-256=[name=admin,password=admin-secret]",
                   "SCRAM-SHA-512=[name=admin,password=admin-secret,iterations=8192]"]
DESCRIBE_SCRAM, ALTER_SCRAM, METADATA = 50, 51, 3


def format_directory(directory: Path) -> None:
    directory.mkdir(parents=True)
    write_bootstrap_checkpoint(directory, bootstrap_records(MV_3_7_IV4)
                               + bootstrap_scram_records(BOOTSTRAP_USERS, MV_3_7_IV4))
    write_meta_properties(directory, MetaProperties(cluster_id=random_uuid_string(), node_id=1,
                                                    directory_id=random_uuid_string()))


@asynccontextmanager
async def running_controller(tmp_path: Path, **props: str):
    directory = tmp_path / "metadata"
    format_directory(directory)
    config = config_from_properties({
        "node.id": "1", "process.roles": "controller", "metadata.log.dir": str(directory),
        # One SASL_PLAINTEXT listener: Metadata and DescribeCluster advertise the first
        # listener, so real clients must find SASL there too.
        "listeners": "SASL://127.0.0.1:0",
        "listener.security.protocol.map": "SASL:SASL_PLAINTEXT",
        "controller.listener.names": "SASL",
        "sasl.jaas.config": JAAS, **props})
    node = ControllerNode(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        try:
            yield node
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def sasl_connection(node):
    """One connection through the real dispatcher over an in-memory stream, with the
    session the listener would create; yields (client stream, Connection)."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    conn = Connection(1, "127.0.0.1:50000", server_stream, listener_name="SASL", security_protocol="SASL_PLAINTEXT")
    conn.sasl = new_sasl_session(node, "SASL")
    dispatcher = Dispatcher(node, node.served_apis)
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def serve() -> None:
            try:
                await serve_connection(conn, dispatcher)
            finally:
                await server_stream.aclose()
                done.set()

        nursery.start_soon(serve)
        yield client_stream, conn, done
        nursery.cancel_scope.cancel()


async def closed_by_server(stream) -> bool:
    with trio.fail_after(TIMEOUT_S):
        try:
            while True:
                if not await stream.receive_some(65536):
                    return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return True


def salted(password: str, salt: bytes, iterations: int = 4096, hash_name: str = "sha256") -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_bootstrap_user_authenticates_and_then_is_served(tmp_path, mechanism):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node, sasl_connection(node) as (stream, conn, _):
            await authenticate(stream, mechanism, "admin", "admin-secret")
            assert conn.authenticated and conn.principal == KafkaPrincipal("User", "admin")
            client = KafkaClient(stream)
            await client.negotiate()
            described = await client.call(DESCRIBE_SCRAM, {"users": [{"name": "admin"}]})
            assert [(c.mechanism, c.iterations) for c in described.results[0].credential_infos] == [
                (1, 4096), (2, 8192)]


async def test_wrong_password_is_refused_with_kafkas_message_and_closed(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node, sasl_connection(node) as (stream, conn, done):
            with pytest.raises(SaslClientError) as caught:
                await authenticate(stream, "SCRAM-SHA-256", "admin", "not-the-password")
            assert "SASL_AUTHENTICATION_FAILED" in str(caught.value)
            assert ("Authentication failed during authentication due to invalid credentials with SASL "
                    "mechanism SCRAM-SHA-256") in str(caught.value)
            assert "not-the-password" not in str(caught.value)
            assert await closed_by_server(stream)
            await done.wait()
            assert not conn.authenticated and conn.principal == ANONYMOUS


async def test_requests_before_authentication_close_the_connection(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node, sasl_connection(node) as (stream, conn, _):
            client = KafkaClient(stream)
            await client.negotiate()  # ApiVersions is allowed before authentication
            assert {17, 36, 50, 51} <= set(client.api_versions)
            with pytest.raises(ClientError):
                await client.call(METADATA, {"topics": None, "allow_auto_topic_creation": False})
            assert not conn.authenticated


async def test_unsupported_mechanism_is_refused_and_closed(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as node, \
                sasl_connection(node) as (stream, _, _):
            with pytest.raises(SaslClientError, match="UNSUPPORTED_SASL_MECHANISM.*enabled: SCRAM-SHA-512"):
                await authenticate(stream, "SCRAM-SHA-256", "admin", "admin-secret")
            assert await closed_by_server(stream)


async def test_altered_credentials_take_effect_for_the_next_exchange(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node:
            async with sasl_connection(node) as (stream, _, _):
                await authenticate(stream, "SCRAM-SHA-512", "admin", "admin-secret")
                admin = KafkaClient(stream)
                await admin.negotiate()
                salt = os.urandom(16)
                reply = await admin.call(ALTER_SCRAM, {"deletions": [], "upsertions": [
                    {"name": "alice", "mechanism": 2, "iterations": 4096, "salt": salt,
                     "salted_password": salted("alice-pw", salt, hash_name="sha512")}]})
                assert [(r.user, r.error_code) for r in reply.results] == [("alice", 0)]
            for mechanism in ("SCRAM-SHA-512", "PLAIN"):  # PLAIN checks SCRAM credentials too
                async with sasl_connection(node) as (stream, conn, _):
                    await authenticate(stream, mechanism, "alice", "alice-pw")
                    assert conn.principal == KafkaPrincipal("User", "alice")
            async with sasl_connection(node) as (stream, _, _):
                with pytest.raises(SaslClientError):  # no SHA-256 credential for alice
                    await authenticate(stream, "SCRAM-SHA-256", "alice", "alice-pw")


# -- real client: kafka-python on the node's SASL_PLAINTEXT listener ---------------------

def kafka_python_admin(port: int, mechanism: str, username: str, password: str, **config):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=mechanism, sasl_plain_username=username,
                            sasl_plain_password=password, request_timeout_ms=10_000, client_id="sasl-test",
                            **config)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_kafka_python_authenticates_on_the_sasl_listener(tmp_path, mechanism):
    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node:
            port = node.bound_ports["SASL"]

            def run() -> list:
                admin = kafka_python_admin(port, mechanism, "admin", "admin-secret")
                try:
                    return admin.describe_cluster()["brokers"]
                finally:
                    admin.close()

            brokers = await trio.to_thread.run_sync(run)
            assert brokers


async def test_kafka_python_with_a_wrong_password_fails(tmp_path):
    from kafka.errors import KafkaError

    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node:
            port = node.bound_ports["SASL"]

            def run() -> None:
                # kafka-python retries the bootstrap until this bound. (It may report the
                # close instead of the SASL_AUTHENTICATION_FAILED answer: its transport drops
                # data that arrives in the same read as the server's FIN.)
                kafka_python_admin(port, "SCRAM-SHA-256", "admin", "wr0ng-pw-7x", bootstrap_timeout_ms=3_000).close()

            with capture_logs() as logs:
                with pytest.raises(KafkaError):
                    await trio.to_thread.run_sync(run)
            failures = [e for e in logs if e["event"] == "security.sasl_authentication_failed"]
            assert failures and all(e["mechanism"] == "SCRAM-SHA-256" and e["user"] == "admin" for e in failures)
            assert "wr0ng-pw-7x" not in repr(logs)


async def test_kafka_python_manages_scram_users_and_the_new_user_logs_in(tmp_path):
    from kafka.admin import ScramMechanism as KpMechanism
    from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node:
            port = node.bound_ports["SASL"]

            def manage() -> tuple:
                admin = kafka_python_admin(port, "SCRAM-SHA-512", "admin", "admin-secret")
                try:
                    altered = admin.alter_user_scram_credentials([
                        UserScramCredentialUpsertion("bob", "SCRAM-SHA-256", "bob-pw", iterations=8192),
                        UserScramCredentialDeletion("nobody", "SCRAM-SHA-256")])
                    described = admin.describe_user_scram_credentials(["bob", "nobody"])
                    return altered, described
                finally:
                    admin.close()

            altered, described = await trio.to_thread.run_sync(manage)
            assert altered["bob"] is None
            assert altered["nobody"] == "Attempt to delete a user credential that does not exist"
            assert described["bob"] == {"error": None, "credential_infos": [
                {"mechanism": KpMechanism.SCRAM_SHA_256, "iterations": 8192}]}
            assert described["nobody"]["error"] == "attemptToDescribeUserThatDoesNotExist: nobody"

            def login_as_bob() -> None:
                kafka_python_admin(port, "SCRAM-SHA-256", "bob", "bob-pw").close()

            await trio.to_thread.run_sync(login_as_bob)


# -- through a broker agent ----------------------------------------------------------------

async def test_broker_forwards_alterations_and_authenticates_from_its_own_image(controller_and_broker):
    with trio.fail_after(TIMEOUT_S):
        async with controller_and_broker(bootstrap_scram_records(BOOTSTRAP_USERS, MV_3_7_IV4)) as (
                controller, broker):
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                assert {17, 36, 50, 51} <= set(client.api_versions)
                salt = os.urandom(16)
                reply = await client.call(ALTER_SCRAM, {"deletions": [{"name": "admin", "mechanism": 2}],
                                                        "upsertions": [
                    {"name": "dora", "mechanism": 1, "iterations": 4096, "salt": salt,
                     "salted_password": salted("dora-pw", salt)}]})
                assert sorted((r.user, r.error_code) for r in reply.results) == [("admin", 0), ("dora", 0)]
                assert controller.state.scram_credential("dora", 1) is not None
                await broker.replayer.wait_replayed(controller.state.last_applied_offset + 1)
                described = await client.call(DESCRIBE_SCRAM, {"users": None})
                assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos])
                        for r in described.results] == [("admin", [(1, 4096)]), ("dora", [(1, 4096)])]
            async with sasl_connection(broker) as (stream, conn, _):
                await authenticate(stream, "SCRAM-SHA-256", "dora", "dora-pw")
                assert conn.principal == KafkaPrincipal("User", "dora")
            async with sasl_connection(broker) as (stream, _, _):
                with pytest.raises(SaslClientError):  # deleted through the broker
                    await authenticate(stream, "SCRAM-SHA-512", "admin", "admin-secret")


# -- real client: librdkafka (confluent-kafka) -------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_librdkafka_authenticates_and_a_wrong_password_does_not(tmp_path, mechanism):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with trio.fail_after(TIMEOUT_S):
        async with running_controller(tmp_path) as node:
            port = node.bound_ports["SASL"]

            def list_brokers(password: str, timeout_s: float = 5):
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                                     "sasl.mechanism": mechanism, "sasl.username": "admin",
                                     "sasl.password": password, "log_level": 0})
                return sorted(admin.list_topics(timeout=timeout_s).brokers)

            assert await trio.to_thread.run_sync(list_brokers, "admin-secret") == [1]
            with capture_logs() as logs:
                with pytest.raises(KafkaException):
                    await trio.to_thread.run_sync(list_brokers, "n0t-the-pw", 1.5)
            assert any(e["event"] == "security.sasl_authentication_failed" for e in logs)
            assert "n0t-the-pw" not in repr(logs)
