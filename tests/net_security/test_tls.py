"""TLS listeners on a real in-process controller: server authentication, client
certificates (ssl.client.auth), the principal of a certificate, host-name checks,
the handshake timeout, and a real Kafka client (kafka-python) over SSL."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from server.client import ClientError, KafkaClient
from server.config import Listener, SslConfig
from server.security.client_config import ClientSecurity

from .helpers import TIMEOUT_S, Pki, api_versions_round_trip, ssl_config, start_node


@pytest.fixture
def pki(tmp_path):
    return Pki(tmp_path / "pki")


def tls_changes(pki: Pki, client_auth: str = "none", identity=None) -> dict:
    """A PLAINTEXT CONTROLLER listener and an SSL listener SECURE, both on free ports."""
    return dict(
        listeners=(Listener("CONTROLLER", "127.0.0.1", 0), Listener("SECURE", "127.0.0.1", 0, "SSL")),
        listener_ssl=(("SECURE", ssl_config(identity or pki.server, client_auth)),),
    )


def opened(logs) -> list[dict]:
    return [e for e in logs if e["event"] == "net.connection_opened" and e.get("listener") == "SECURE"]


def handshake_failures(logs) -> list[dict]:
    return [e for e in logs if e["event"] == "security.tls_handshake_failed"]


async def connect(node, security: ClientSecurity) -> KafkaClient:
    return await KafkaClient.connect("127.0.0.1", node.bound_ports["SECURE"], security=security, timeout_s=5)


async def test_a_client_that_trusts_the_ca_gets_api_versions_over_ssl(tmp_path, pki):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **tls_changes(pki))
            assert set(node.bound_ports) == {"CONTROLLER", "SECURE"}
            assert node.port == node.bound_ports["CONTROLLER"]
            with capture_logs() as logs:
                async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile)) as client:
                    assert client.api_versions_response.error_code == 0
                    metadata = await client.call(3, {"topics": [], "allow_auto_topic_creation": False})
                    assert metadata.cluster_id == node.cluster_id
            # No client certificate asked for: the principal is anonymous.
            assert [e["principal"] for e in opened(logs)] == ["User:ANONYMOUS"]
            # The PLAINTEXT listener still speaks plaintext.
            plain = await trio.open_tcp_stream("127.0.0.1", node.bound_ports["CONTROLLER"])
            assert await api_versions_round_trip(plain, 1)
            # ...and plaintext on the SSL port gets no Kafka answer.
            raw = await trio.open_tcp_stream("127.0.0.1", node.bound_ports["SECURE"])
            assert not await api_versions_round_trip(raw, 2)
            nursery.cancel_scope.cancel()


async def test_a_client_that_does_not_trust_the_ca_fails_and_other_connections_go_on(tmp_path, pki):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **tls_changes(pki))
            async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile)) as good:
                with capture_logs() as logs:
                    with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
                        await connect(node, ClientSecurity("SSL", ssl_cafile=pki.other_cafile))
                    await trio.testing.wait_all_tasks_blocked()
                assert len(handshake_failures(logs)) == 1
                # The good connection is not disturbed.
                body = await good.call(18, {"client_software_name": "x", "client_software_version": "1"})
                assert body.error_code == 0
            nursery.cancel_scope.cancel()


async def test_client_auth_required_admits_only_certificates_of_the_trusted_ca(tmp_path, pki):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **tls_changes(pki, client_auth="required"))
            with capture_logs() as logs:
                async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile,
                                                              ssl_certfile=pki.alice.keystore)) as alice:
                    assert alice.api_versions_response.error_code == 0
                    # No certificate at all.
                    with pytest.raises(ClientError):
                        await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile))
                    # A certificate from another CA.
                    with pytest.raises(ClientError):
                        await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile,
                                                           ssl_certfile=pki.mallory.keystore))
                    await trio.testing.wait_all_tasks_blocked()
                    # Alice's connection went on through both failures.
                    body = await alice.call(18, {"client_software_name": "x", "client_software_version": "1"})
                    assert body.error_code == 0
            # Kafka's DEFAULT principal mapping: the subject DN in RFC 2253 order.
            assert [e["principal"] for e in opened(logs)] == ["User:CN=alice,OU=ops,O=kraftwerk"]
            assert len(handshake_failures(logs)) == 2
            nursery.cancel_scope.cancel()


async def test_client_auth_requested_makes_the_certificate_optional(tmp_path, pki):
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **tls_changes(pki, client_auth="requested"))
            with capture_logs() as logs:
                async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile)):
                    pass
                async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile,
                                                              ssl_certfile=pki.alice.keystore)):
                    pass
            assert [e["principal"] for e in opened(logs)] == ["User:ANONYMOUS", "User:CN=alice,OU=ops,O=kraftwerk"]
            nursery.cancel_scope.cancel()


async def test_host_name_is_checked_unless_endpoint_identification_is_off(tmp_path, pki):
    only_localhost = pki.issue("localhost-only", "localhost")
    with trio.fail_after(TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path, **tls_changes(pki, identity=only_localhost))
            with pytest.raises(ClientError, match="match|mismatch"):
                await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile))
            async with await connect(node, ClientSecurity("SSL", ssl_cafile=pki.cafile, ssl_check_hostname=False)):
                pass
            nursery.cancel_scope.cancel()


async def test_a_client_that_never_says_hello_is_closed_after_the_handshake_timeout(tmp_path, pki, mock_clock):
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path, ssl_handshake_timeout_ms=3_000, **tls_changes(pki))
        silent = await trio.open_tcp_stream("127.0.0.1", node.bound_ports["SECURE"])
        with capture_logs() as logs:
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(2.9)
            await trio.testing.wait_all_tasks_blocked()
            assert handshake_failures(logs) == []
            mock_clock.jump(0.2)
            with trio.fail_after(5):
                try:
                    assert await silent.receive_some(1) == b""
                except trio.BrokenResourceError:
                    pass
        assert [e["error"] for e in handshake_failures(logs)] == ["timed out"]
        nursery.cancel_scope.cancel()


async def test_kafka_python_gets_api_versions_and_metadata_over_ssl(tmp_path, pki):
    from kafka import KafkaAdminClient

    def describe(port: int):
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL",
                                 ssl_cafile=pki.cafile, request_timeout_ms=10_000)
        try:
            return admin.describe_cluster()
        finally:
            admin.close()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            # One SSL listener: Metadata advertises the node's first listener, which is
            # where kafka-python goes after bootstrapping.
            node = await start_node(nursery, tmp_path, listener=Listener("CONTROLLER", "127.0.0.1", 0, "SSL"),
                                    listener_ssl=(("CONTROLLER", ssl_config(pki.server)),))
            cluster = await trio.to_thread.run_sync(describe, node.port)
            assert cluster["cluster_id"] == node.cluster_id
            nursery.cancel_scope.cancel()


def test_the_ssl_settings_of_a_listener_come_from_its_override(pki):
    from server.config import config_from_properties

    config = config_from_properties({
        "listeners": "CONTROLLER://127.0.0.1:0,SECURE://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SECURE:SSL",
        "ssl.truststore.location": pki.cafile,
        "ssl.client.auth": "requested",
        "listener.name.secure.ssl.keystore.location": pki.server.keystore,
        "listener.name.secure.ssl.client.auth": "required",
    })
    secure = config.ssl_for("SECURE")
    assert secure == replace(SslConfig(), keystore_location=pki.server.keystore, truststore_location=pki.cafile,
                             client_auth="required")
    assert config.ssl_for("CONTROLLER").client_auth == "requested"
    assert [item.security_protocol for item in config.listeners] == ["PLAINTEXT", "SSL"]
