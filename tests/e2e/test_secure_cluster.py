"""A secured cluster of real processes, driven by real clients.

One controller and one broker, every listener SASL_SSL (TLS from a test CA made with
trustme, SCRAM users created at format time with `storage format --add-scram`), the
StandardAuthorizer on, `User:admin` and `User:broker` super users. Then:
- kafka-python (to the controller) and confluent-kafka (to the broker, which forwards
  in an Envelope) as `alice`, who has no ACL: `update_features` gets
  CLUSTER_AUTHORIZATION_FAILED; after the admin's `create_acls` grants alice ALTER on
  the CLUSTER the same call succeeds; after `delete_acls` it is refused again;
- the admin creates a user with kafka-python's `alter_user_scram_credentials`, and the
  new user can log in;
- a broker with a wrong password cannot register (the controller refuses its SASL
  exchange; the broker never appears registered);
- no password appears in any log.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

trustme = pytest.importorskip("trustme")

from kafka.admin import KafkaAdminClient  # noqa: E402
from kafka.errors import ClusterAuthorizationFailedError  # noqa: E402
from kafka.admin import (  # noqa: E402
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from cli.local_cluster import (  # noqa: E402
    CLI,
    ControllerSpec,
    broker_spec,
    free_port_run,
    run_cli,
    start_controller,
    stop_controller,
)

pytestmark = pytest.mark.e2e

MV = "metadata.version"
MV_3_7_IV4, MV_3_8_IV0 = 19, 20
TIMEOUT_S = 20.0
POLL_S = 0.05  # polling another process's state: nothing to wait on but its answers
PASSWORDS = {"admin": "admin-secret-1", "broker": "broker-secret-2", "alice": "alice-secret-3"}
NEW_USER, NEW_PASSWORD = "carol", "carol-secret-4"
WRONG_PASSWORD = "not-the-broker-password-5"


def _jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


class SecureCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_path = base / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_path))
        self.server_pem = base / "server.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(self.server_pem))
        port = free_port_run(4)
        self.broker_internal_port = port + 3
        self.controller = ControllerSpec(1, port, base)
        self.broker = broker_spec(101, port + 1, base)
        self.bad_broker = broker_spec(102, port + 2, base)
        self.processes = {}
        self.cluster_id = run_cli("storage", "random-uuid").stdout.strip()

    def common(self) -> list[str]:
        return [
            "ssl.keystore.type=PEM", f"ssl.keystore.location={self.server_pem}",
            "ssl.truststore.type=PEM", f"ssl.truststore.location={self.ca_path}",
            "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:SASL_SSL,CLIENTS:SASL_SSL,INTERNAL:PLAINTEXT",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin;User:broker",
            "broker.heartbeat.interval.ms=200",
        ]

    def write(self, spec: ControllerSpec, lines: list[str]) -> None:
        spec.directory.mkdir(parents=True, exist_ok=True)
        spec.config_path.write_text("\n".join(lines + self.common()) + "\n")

    def format_and_start(self) -> None:
        voters = f"1@127.0.0.1:{self.controller.port}"
        self.write(self.controller, [
            "node.id=1", "process.roles=controller", f"listeners=CONTROLLER://127.0.0.1:{self.controller.port}",
            f"metadata.log.dir={self.controller.metadata_dir}", f"controller.quorum.voters={voters}",
            f"listener.name.controller.scram-sha-256.sasl.jaas.config={_jaas('admin', PASSWORDS['admin'])}",
        ])
        for spec, password in ((self.broker, PASSWORDS["broker"]), (self.bad_broker, WRONG_PASSWORD)):
            # Broker 101 also has a plaintext listener (for the endpoint test).
            internal = f",INTERNAL://127.0.0.1:{self.broker_internal_port}" if spec is self.broker else ""
            self.write(spec, [
                f"node.id={spec.node_id}", "process.roles=broker",
                f"listeners=CLIENTS://127.0.0.1:{spec.port}{internal}", f"metadata.log.dir={spec.metadata_dir}",
                f"controller.quorum.voters={voters}",
                f"listener.name.controller.scram-sha-256.sasl.jaas.config={_jaas('broker', password)}",
            ])
        scram = []
        for user, password in PASSWORDS.items():
            scram += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={password}]"]
        result = run_cli("storage", "format", "--config", str(self.controller.config_path), "--cluster-id",
                         self.cluster_id, "--metadata-version", "3.7-IV4", *scram)
        assert result.returncode == 0, result.stderr
        for spec in (self.broker, self.bad_broker):
            result = run_cli("storage", "format", "--config", str(spec.config_path), "--cluster-id", self.cluster_id)
            assert result.returncode == 0, result.stderr
        self.processes[1] = start_controller(self.controller)
        self.processes[101] = start_controller(self.broker)

    def stop_all(self) -> None:
        # Brokers first: a broker's controlled shutdown needs its controller.
        for process in reversed(list(self.processes.values())):
            stop_controller(process)

    def kafka_python(self, user: str, password: str, address: str) -> KafkaAdminClient:
        return KafkaAdminClient(
            bootstrap_servers=address, client_id=f"e2e-{user}", request_timeout_ms=int(TIMEOUT_S * 1000),
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=user, sasl_plain_password=password, ssl_cafile=str(self.ca_path))

    def confluent(self, user: str, password: str, address: str):
        from confluent_kafka.admin import AdminClient

        return AdminClient({
            "bootstrap.servers": address, "client.id": f"e2e-{user}",
            "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(self.ca_path),
            "socket.timeout.ms": int(TIMEOUT_S * 1000)})

    def logs(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.base.glob("*.log"))


def _until(what: str, probe, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(POLL_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = SecureCluster(tmp_path_factory.mktemp("secure"))
    try:
        cluster.format_and_start()
        yield cluster
    finally:
        cluster.stop_all()


def _alice_may_alter_cluster() -> ACL:
    return ACL(principal="User:alice", host="*", operation=ACLOperation.ALTER,
               permission_type=ACLPermissionType.ALLOW,
               resource_pattern=ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL))


def _alices_acls() -> ACLFilter:
    return ACLFilter(principal="User:alice", host=None, operation=ACLOperation.ANY,
                     permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))


def _registered_brokers(cluster: SecureCluster) -> set[int]:
    """Brokers the controller has registered, from its log (controller.broker_registered)."""
    found = set()
    for line in cluster.controller.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"controller.broker_registered"' in line:
            try:
                found.add(json.loads(line)["broker_id"])
            except (ValueError, KeyError):
                continue  # a line still being written
    return found


def test_kafka_python_alice_needs_alter_on_the_cluster(cluster):
    controller = cluster.processes[1].address
    admin = cluster.kafka_python("admin", PASSWORDS["admin"], controller)
    alice = cluster.kafka_python("alice", PASSWORDS["alice"], controller)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.update_features({MV: MV_3_8_IV0})
        created = admin.create_acls([_alice_may_alter_cluster()])
        assert len(created["succeeded"]) == 1 and not created["failed"]
        assert alice.update_features({MV: MV_3_8_IV0}) == {MV: "OK"}
        acls, _ = admin.describe_acls(_alices_acls())
        assert [(a.operation, a.resource_pattern.resource_type) for a in acls] == [
            (ACLOperation.ALTER, ResourceType.CLUSTER)]
        deleted = admin.delete_acls([_alices_acls()])
        assert len(deleted[0][1]) == 1  # one filter, one ACL deleted
        from kafka.admin import UpdateFeatureType

        with pytest.raises(ClusterAuthorizationFailedError):
            alice.update_features({MV: (UpdateFeatureType.SAFE_DOWNGRADE, MV_3_7_IV4)})
        assert admin.update_features({MV: (UpdateFeatureType.SAFE_DOWNGRADE, MV_3_7_IV4)}) == {MV: "OK"}
    finally:
        admin.close()
        alice.close()


def test_confluent_kafka_through_the_broker_is_authorized_as_the_client(cluster):
    """confluent-kafka has no UpdateFeatures; its cluster-ALTER call is CreateAcls. alice
    goes through the broker (a super user), which forwards in an Envelope naming her."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as CResourceType

    broker = cluster.processes[101].address
    _until("the broker to register", lambda: 101 in _registered_brokers(cluster))
    admin = cluster.confluent("admin", PASSWORDS["admin"], broker)
    alice = cluster.confluent("alice", PASSWORDS["alice"], broker)
    bob_reads = AclBinding(CResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
    alice_alters = AclBinding(CResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                              AclOperation.ALTER, AclPermissionType.ALLOW)

    def alice_creates() -> bool:
        try:
            alice.create_acls([bob_reads], request_timeout=TIMEOUT_S)[bob_reads].result(timeout=TIMEOUT_S)
            return True
        except KafkaException as exc:
            assert "AUTHORIZATION" in str(exc).upper(), exc
            return False

    assert not alice_creates()
    admin.create_acls([alice_alters], request_timeout=TIMEOUT_S)[alice_alters].result(timeout=TIMEOUT_S)
    # The broker checks too, from its own image: the grant counts once it has replayed it.
    _until("alice's CreateAcls to be allowed", alice_creates)
    bob = AclBindingFilter(CResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    # DescribeAcls is answered from the broker's own image, once it has replayed the ACL.
    _until("the broker to list bob's ACL", lambda: [
        b.principal for b in admin.describe_acls(bob, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)]
        == ["User:bob"])
    alices = AclBindingFilter(CResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                              AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([alices], request_timeout=TIMEOUT_S)[alices].result(timeout=TIMEOUT_S)
    assert [(b.operation, b.restype) for b in deleted] == [(AclOperation.ALTER, CResourceType.BROKER)]
    # Taken back: refused again (the controller decides at once; the broker once replayed).
    _until("alice's CreateAcls to be refused again", lambda: not alice_creates())
    admin.delete_acls([bob], request_timeout=TIMEOUT_S)[bob].result(timeout=TIMEOUT_S)


def test_admin_creates_a_scram_user_who_can_then_log_in(cluster):
    from kafka.admin import ScramMechanism, UserScramCredentialUpsertion

    controller = cluster.processes[1].address
    admin = cluster.kafka_python("admin", PASSWORDS["admin"], controller)
    try:
        result = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(NEW_USER, ScramMechanism.SCRAM_SHA_256, NEW_PASSWORD, iterations=8192)])
        assert result == {NEW_USER: None}  # None: no error
        described = admin.describe_user_scram_credentials([NEW_USER])
        assert described[NEW_USER]["error"] is None
        assert described[NEW_USER]["credential_infos"] == [
            {"mechanism": ScramMechanism.SCRAM_SHA_256, "iterations": 8192}]
    finally:
        admin.close()
    carol = cluster.kafka_python(NEW_USER, NEW_PASSWORD, controller)
    try:
        # She is in (SCRAM with the new credential worked), and without ACLs she may not
        # even describe the cluster: the answer is the authorizer's, not the authenticator's.
        with pytest.raises(ClusterAuthorizationFailedError):
            carol.describe_cluster()
    finally:
        carol.close()


def test_a_broker_with_a_wrong_password_cannot_register(cluster):
    # Started without waiting for its port file: a broker that cannot reach the metadata
    # starts serving clients only after its metadata wait gives up.
    bad = cluster.bad_broker
    handle = open(bad.log_path, "ab")
    process = subprocess.Popen(CLI + ["broker", "--config", str(bad.config_path)], stdout=handle, stderr=handle,
                               start_new_session=True)
    try:
        controller_log = cluster.controller.log_path
        _until("the controller to refuse the bad broker's SASL exchange",
               lambda: "security.sasl_authentication_failed" in controller_log.read_text(errors="replace"))
        # Several refusals later, still not registered (and never was).
        _until("a second refusal", lambda: controller_log.read_text(errors="replace")
               .count("security.sasl_authentication_failed") >= 2)
        assert 102 not in _registered_brokers(cluster)
        assert 101 in _registered_brokers(cluster)
        # The broker says why, once, as an operator needs it.
        _until("the broker to log the refusal", lambda: "security.peer_authentication_failed"
               in bad.log_path.read_text(errors="replace"))
        assert process.poll() is None  # it keeps retrying (the password may be fixed in the log)
    finally:
        process.kill()
        process.wait(10)
        handle.close()


def test_metadata_names_brokers_on_the_listener_the_client_came_in_on(cluster):
    import trio

    from server.client import KafkaClient

    _until("the broker to register", lambda: 101 in _registered_brokers(cluster))
    admin = cluster.confluent("admin", PASSWORDS["admin"], cluster.processes[101].address)
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert (metadata.brokers[101].host, metadata.brokers[101].port) == ("127.0.0.1", cluster.broker.port)

    async def plaintext_metadata():
        async with await KafkaClient.connect("127.0.0.1", cluster.broker_internal_port) as client:
            return await client.call(3, {"topics": [], "allow_auto_topic_creation": False})

    answer = trio.run(plaintext_metadata)
    assert [(b.node_id, b.port) for b in answer.brokers] == [(101, cluster.broker_internal_port)]


def test_no_password_in_any_log(cluster):
    logs = cluster.logs()
    assert logs, "no logs were written"
    for secret in (*PASSWORDS.values(), NEW_PASSWORD, WRONG_PASSWORD):
        assert secret not in logs
