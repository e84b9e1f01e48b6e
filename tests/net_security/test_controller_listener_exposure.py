"""The start-up warning for a controller listener anyone can reach: which listeners it
names (a pure check over the config) and that a controller's start-up logs it. No
test binds a non-loopback address: the node is opened (log, state) but never served."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from server.config import config_from_properties
from server.nodes.controller import ControllerNode
from server.security.exposure import (
    PLAINTEXT_CONTROLLER_LISTENER,
    UNAUTHENTICATED_CONTROLLER_LISTENER,
    exposed_listeners,
    is_loopback_host,
)

from .helpers import format_directory

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def controller(listeners: str, **extra: str):
    props = {"node.id": "1", "process.roles": "controller", "listeners": listeners,
             "ssl.keystore.location": "/nonexistent/keystore.pem", **extra}
    return config_from_properties(props)


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("192.168.0.7", False),
    ("kraftwerk-1.example.com", False),
])
def test_loopback_hosts(host, loopback):
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "kraftwerk-1.example.com"])
def test_a_plaintext_controller_listener_beyond_loopback_is_reported(host):
    [exposure] = exposed_listeners(controller(f"CONTROLLER://{host}:9093"))
    assert exposure.event == PLAINTEXT_CONTROLLER_LISTENER
    assert exposure.listener.name == "CONTROLLER" and exposure.listener.host == host
    assert "force elections" in exposure.reason and "no authorizer" in exposure.reason


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_a_plaintext_controller_listener_on_loopback_is_not(host):
    assert exposed_listeners(controller(f"CONTROLLER://{host}:9093")) == []


def test_authenticating_listeners_are_not_reported():
    secured = {"listener.security.protocol.map": "CONTROLLER:SASL_SSL,MTLS:SSL,SASLPLAIN:SASL_PLAINTEXT",
               "controller.listener.names": "CONTROLLER", "listener.name.mtls.ssl.client.auth": "required",
               "listener.name.mtls.ssl.keystore.location": "/nonexistent/keystore.pem"}
    config = controller("CONTROLLER://0.0.0.0:9093,MTLS://0.0.0.0:9094,SASLPLAIN://0.0.0.0:9095", **secured)
    assert exposed_listeners(config) == []


@pytest.mark.parametrize("client_auth", ["none", "requested"])
def test_ssl_without_required_client_certificates_is_reported(client_auth):
    config = controller("CONTROLLER://0.0.0.0:9093", **{"listener.security.protocol.map": "CONTROLLER:SSL",
                                                       "ssl.client.auth": client_auth,
                                                       "ssl.truststore.location": "/nonexistent/ca.pem"})
    [exposure] = exposed_listeners(config)
    assert exposure.event == UNAUTHENTICATED_CONTROLLER_LISTENER


def test_with_an_authorizer_only_listeners_anonymous_can_act_through_are_reported():
    two = "CONTROLLER://0.0.0.0:9093,OTHER://0.0.0.0:9094"
    protocols = {"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,OTHER:PLAINTEXT",
                 "controller.listener.names": "CONTROLLER"}
    # The authorizer refuses ANONYMOUS on OTHER; on CONTROLLER the peers themselves
    # arrive as ANONYMOUS, so a working quorum must let ANONYMOUS act there.
    guarded = controller(two, **protocols, **{"authorizer.class.name": AUTHORIZER, "super.users": "User:admin"})
    assert [(e.listener.name, e.event) for e in exposed_listeners(guarded)] == [
        ("CONTROLLER", PLAINTEXT_CONTROLLER_LISTENER)]
    for opened in ({"super.users": "User:admin;User:ANONYMOUS"}, {"allow.everyone.if.no.acl.found": "true"}):
        config = controller(two, **protocols, **{"authorizer.class.name": AUTHORIZER, **opened})
        assert [e.listener.name for e in exposed_listeners(config)] == ["CONTROLLER", "OTHER"]


def test_brokers_serve_no_kraft_rpc_and_are_not_reported():
    config = config_from_properties({"node.id": "101", "process.roles": "broker",
                                     "listeners": "PLAINTEXT://0.0.0.0:9092",
                                     "controller.quorum.voters": "1@127.0.0.1:9093"})
    assert exposed_listeners(config) == []


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("127.0.0.1", False)])
def test_a_controller_logs_the_warning_at_start_up(tmp_path, host, warned):
    directory = tmp_path / "controller-1"
    format_directory(directory)
    config = config_from_properties({"node.id": "1", "process.roles": "controller",
                                     "listeners": f"CONTROLLER://{host}:0", "metadata.log.dir": str(directory)})
    node = ControllerNode(config)
    with capture_logs() as logs:
        node.open()  # start-up up to serving; nothing is bound
    node.metadata_log.close()
    warnings = [e for e in logs if e["event"] == PLAINTEXT_CONTROLLER_LISTENER]
    if not warned:
        assert warnings == []
        return
    [warning] = warnings
    assert warning["log_level"] == "warning"
    assert (warning["listener"], warning["host"], warning["security_protocol"]) == ("CONTROLLER", host, "PLAINTEXT")
    assert "force elections" in warning["reason"]
    assert "cluster up --secure" in warning["fix"] and "docs/security.md" in warning["fix"]
