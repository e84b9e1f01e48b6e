"""Listener and client security configuration (Kafka's property names), and the
client side end to end: KafkaClient and the CLI's --command-config over SASL_SSL."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from server.client import ClientError, KafkaClient
from server.config import Listener, ServerConfig, config_from_properties
from server.security.client_config import ClientSecurity, ClientSecurityError

from .helpers import TIMEOUT_S, Pki, ssl_config, start_node

REPO = Path(__file__).resolve().parents[2]
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_listeners_protocol_map_and_advertised_listeners():
    config = config_from_properties({
        "listeners": "CONTROLLER://127.0.0.1:9093,SECURE://0.0.0.0:9094,SASL_SSL://127.0.0.1:9095",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SECURE:SASL_SSL,SASL_SSL:SASL_SSL",
        "advertised.listeners": "SECURE://broker.example:19094,CONTROLLER://c.example:9093",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SECURE",
        "ssl.keystore.location": "/certs/server.pem",
    })
    assert config.listener == Listener("CONTROLLER", "127.0.0.1", 9093, "PLAINTEXT")
    assert [(l.name, l.security_protocol) for l in config.listeners] == [
        ("CONTROLLER", "PLAINTEXT"), ("SECURE", "SASL_SSL"), ("SASL_SSL", "SASL_SSL")]
    assert config.advertised_listener == Listener("SECURE", "broker.example", 19094, "SASL_SSL")
    assert [l.name for l in config.advertised_listeners] == ["SECURE", "CONTROLLER"]
    assert config.controller_listener_names == ("CONTROLLER",)
    assert config.inter_broker_listener_name == "SECURE"
    assert config.extra == {}


def test_kafka_default_protocol_map_and_missing_entries():
    config = config_from_properties({"listeners": "SSL://127.0.0.1:1,PLAINTEXT://127.0.0.1:2",
                                     "ssl.keystore.location": "/k.pem"})
    assert [l.security_protocol for l in config.listeners] == ["SSL", "PLAINTEXT"]
    with pytest.raises(ValueError, match="no entry in listener.security.protocol.map"):
        config_from_properties({"listeners": "A://h:1,B://h:2", "listener.security.protocol.map": "A:PLAINTEXT"})
    with pytest.raises(ValueError, match="ssl.keystore.location"):
        config_from_properties({"listeners": "SSL://127.0.0.1:1"})
    with pytest.raises(ValueError):
        config_from_properties({"listener.security.protocol.map": "A:TLS"})


def test_limits_and_their_kafka_defaults():
    default = ServerConfig()
    assert default.max_connections == default.max_connections_per_ip == 2**31 - 1
    assert default.sasl_server_max_receive_size == 524288
    assert default.queued_max_request_bytes == -1
    assert (default.request_receive_timeout_ms, default.request_timeout_ms) == (30_000, 30_000)
    config = config_from_properties({
        "max.connections": "100", "max.connections.per.ip": "10",
        "max.connections.per.ip.overrides": "127.0.0.1:50, 10.0.0.1:0",
        "sasl.server.max.receive.size": "4096", "queued.max.request.bytes": "1048576",
        "kraftwerk.request.receive.timeout.ms": "5000", "kraftwerk.request.timeout.ms": "7000",
        "kraftwerk.ssl.handshake.timeout.ms": "2000",
    })
    assert (config.max_connections, config.max_connections_per_ip) == (100, 10)
    assert config.max_connections_per_ip_overrides == (("127.0.0.1", 50), ("10.0.0.1", 0))
    assert (config.sasl_server_max_receive_size, config.queued_max_request_bytes) == (4096, 1048576)
    assert (config.request_receive_timeout_ms, config.request_timeout_ms, config.ssl_handshake_timeout_ms) == (
        5000, 7000, 2000)
    with pytest.raises(ValueError):
        config_from_properties({"max.connections.per.ip.overrides": "127.0.0.1"})


def test_replacing_the_first_listener_keeps_the_others():
    config = config_from_properties({"listeners": "CONTROLLER://127.0.0.1:9093,OTHER://127.0.0.1:9094"})
    moved = replace(config, listener=Listener("CONTROLLER", "127.0.0.1", 0))
    assert [(l.name, l.port) for l in moved.listeners] == [("CONTROLLER", 0), ("OTHER", 9094)]


def test_secrets_stay_out_of_reprs():
    config = config_from_properties({
        "ssl.key.password": "key-secret-1", "ssl.keystore.location": "/k.pem",
        "listener.name.secure.ssl.key.password": "key-secret-2", "listener.name.secure.ssl.keystore.location": "/s",
        "sasl.jaas.config": f'{PLAIN_MODULE} required user_alice="jaas-secret-3";',
        "listener.name.secure.plain.sasl.jaas.config": f'{PLAIN_MODULE} required user_bob="jaas-secret-4";',
    })
    text = repr(config) + str(config)
    for secret in ("key-secret-1", "key-secret-2", "jaas-secret-3", "jaas-secret-4"):
        assert secret not in text
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "ssl.key.password": "key-secret-5",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="alice" password="sasl-secret-6";',
    })
    assert (security.sasl_username, security.sasl_password) == ("alice", "sasl-secret-6")
    assert "sasl-secret-6" not in repr(security) and "key-secret-5" not in repr(security)


def test_client_properties_into_client_security():
    security = ClientSecurity.from_properties({
        "security.protocol": "ssl", "ssl.truststore.location": "/ca.pem", "ssl.keystore.location": "/me.pem",
        "ssl.endpoint.identification.algorithm": "",
    })
    assert security == ClientSecurity("SSL", ssl_cafile="/ca.pem", ssl_certfile="/me.pem", ssl_check_hostname=False)
    assert ClientSecurity.from_properties({}) == ClientSecurity()
    with pytest.raises(ClientSecurityError, match="security.protocol"):
        ClientSecurity.from_properties({"security.protocol": "TLS"})
    with pytest.raises(ClientSecurityError, match="sasl"):
        ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})


def test_a_node_talks_to_the_controllers_with_the_controller_listener_protocol():
    base = {
        "listeners": "BROKER://127.0.0.1:9092", "process.roles": "broker",
        "listener.security.protocol.map": "BROKER:PLAINTEXT,CONTROLLER:SASL_SSL",
        "controller.listener.names": "CONTROLLER",
        "ssl.truststore.location": "/ca.pem", "ssl.keystore.location": "/broker.pem",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config":
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="pw";',
    }
    security = ClientSecurity.for_node(config_from_properties(base))
    assert security == ClientSecurity("SASL_SSL", ssl_cafile="/ca.pem", ssl_certfile="/broker.pem",
                                      sasl_mechanism="SCRAM-SHA-512", sasl_username="broker", sasl_password="pw")
    # Without controller.listener.names: the node's own first listener's protocol.
    assert ClientSecurity.for_node(ServerConfig()).security_protocol == "PLAINTEXT"
    missing = dict(base)
    del missing["listener.name.controller.scram-sha-512.sasl.jaas.config"]
    with pytest.raises(ClientSecurityError, match="sasl.jaas.config"):
        ClientSecurity.for_node(config_from_properties(missing))


# -- end to end: SASL_SSL ----------------------------------------------------------------

def sasl_ssl_changes(pki: Pki) -> dict:
    return dict(
        listeners=(Listener("CONTROLLER", "127.0.0.1", 0), Listener("SECURE", "127.0.0.1", 0, "SASL_SSL")),
        listener_ssl=(("SECURE", ssl_config(pki.server)),),
        extra={"listener.name.secure.sasl.enabled.mechanisms": "PLAIN",
               "listener.name.secure.plain.sasl.jaas.config":
                   f'{PLAIN_MODULE} required user_alice="alice-secret";'},
    )


async def test_kafka_client_authenticates_over_sasl_ssl_and_a_wrong_password_fails(tmp_path):
    pytest.importorskip("server.net.sasl_client")
    pki = Pki(tmp_path / "pki")
    good = ClientSecurity("SASL_SSL", ssl_cafile=pki.cafile, sasl_mechanism="PLAIN", sasl_username="alice",
                          sasl_password="alice-secret")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **sasl_ssl_changes(pki))
            port = node.bound_ports["SECURE"]
            async with await KafkaClient.connect("127.0.0.1", port, security=good, timeout_s=5) as client:
                metadata = await client.call(3, {"topics": [], "allow_auto_topic_creation": False})
                assert metadata.cluster_id == node.cluster_id
            with pytest.raises(ClientError) as refused:
                await KafkaClient.connect("127.0.0.1", port, security=replace(good, sasl_password="wrong-secret"),
                                          timeout_s=5)
            assert "wrong-secret" not in str(refused.value)
            nursery.cancel_scope.cancel()


async def test_the_cli_reads_command_config_for_tls_and_sasl(tmp_path):
    pytest.importorskip("server.net.sasl_client")
    pki = Pki(tmp_path / "pki")
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.location={pki.cafile}\n"
        "sasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN_MODULE} required username="alice" password="alice-secret";\n')
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **sasl_ssl_changes(pki))
            address = f"127.0.0.1:{node.bound_ports['SECURE']}"
            result = await trio.run_process(
                [sys.executable, "-m", "cli.main", "features", "describe", "--bootstrap-controller", address,
                 "--command-config", str(properties), "--timeout-s", "20"],
                cwd=REPO, capture_stdout=True, capture_stderr=True, check=False)
            assert result.returncode == 0, result.stderr.decode()
            assert "metadata.version" in result.stdout.decode()
            # Without the properties the SASL_SSL listener gives plaintext nothing.
            result = await trio.run_process(
                [sys.executable, "-m", "cli.main", "features", "describe", "--bootstrap-controller", address,
                 "--timeout-s", "3"], cwd=REPO, capture_stdout=True, capture_stderr=True, check=False)
            assert result.returncode != 0
            nursery.cancel_scope.cancel()


async def test_a_lone_controller_on_a_sasl_listener_needs_no_client_credentials(tmp_path):
    from server.net.sasl_client import authenticate  # noqa: F401  (the server side must be present)

    from .helpers import format_directory

    directory = tmp_path / "lone"
    format_directory(directory)
    config = config_from_properties({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "metadata.log.dir": str(directory),
                                     "sasl.enabled.mechanisms": "PLAIN",
                                     "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                         'required user_admin="admin-pw";'})
    from server.nodes.controller import ControllerNode

    node = ControllerNode(config)
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run)
            security = ClientSecurity(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                      sasl_username="admin", sasl_password="admin-pw")
            async with await KafkaClient.connect("127.0.0.1", node.port, security=security) as client:
                assert client.api_versions
            nursery.cancel_scope.cancel()


def test_a_quorum_member_without_credentials_for_its_sasl_controller_listener_fails_to_start(tmp_path):
    from server.nodes.controller import ControllerNode
    from server.nodes.startup import StartupError

    from .helpers import format_directory

    directory = tmp_path / "member"
    format_directory(directory)
    config = config_from_properties({
        "node.id": "1", "listeners": "CONTROLLER://127.0.0.1:0", "metadata.log.dir": str(directory),
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"})
    node = ControllerNode(config)
    with pytest.raises(StartupError, match="cannot reach the other controllers"):
        node.open()
