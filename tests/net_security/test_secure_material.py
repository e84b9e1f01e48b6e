"""What `cluster up --secure` generates (cli/local_cluster.py): the openssl-made CA
and node certificate work for TLS on 127.0.0.1 and localhost, the secrets are private
files, --keep reuses them, and the node settings make valid configs whose SASL and
authorizer parts fit together. No process is started here."""

from __future__ import annotations

import ssl
import stat

import pytest
import trio
import trio.testing

from server.config import config_from_properties
from cli.local_cluster import (
    LocalClusterError,
    SecureLocalCluster,
    secure_material,
    write_config,
)
from server.security.authorizer import authorizer_config
from server.security.client_config import ClientSecurity
from server.security.sasl import SaslServerConfig
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    return secure_material(tmp_path_factory.mktemp("cluster") / "secure")


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secrets_are_private_and_only_the_public_files_are_left(material):
    assert mode(material.directory) == 0o700
    for path in (material.keystore_path, material.passwords_path, material.command_config_path,
                 material.librdkafka_config_path):
        assert mode(path) == 0o600, path
    # The CA key, the node key alone, the request and openssl's settings are gone.
    assert sorted(p.name for p in material.directory.iterdir()) == sorted([
        "ca.pem", "node-keystore.pem", "passwords.properties", "admin-client.properties",
        "admin-librdkafka.properties"])
    assert "PRIVATE KEY" not in material.ca_path.read_text()
    assert "password" not in repr(material) and not any(p in repr(material) for p in material.passwords.values())


def test_keep_reuses_the_material(material):
    again = secure_material(material.directory)
    assert again.passwords == material.passwords
    assert again.ca_path.read_bytes() == material.ca_path.read_bytes()


async def tls_handshake(material, server_hostname: str) -> str | None:
    """A TLS handshake between the node keystore (server) and a client trusting the CA,
    over an in-memory stream pair; returns the server certificate's common name, or
    None when the client refused the server (the reason stays in the exception chain)."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(material.keystore_path))
    client_context = material.operator_security().ssl_context()
    client_raw, server_raw = trio.testing.memory_stream_pair()
    client = trio.SSLStream(client_raw, client_context, server_hostname=server_hostname)
    server = trio.SSLStream(server_raw, server_context, server_side=True)
    refused = False

    async def serve() -> None:
        try:
            await server.do_handshake()
        except trio.BrokenResourceError:
            pass  # the client hung up: its side says why

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            try:
                await client.do_handshake()
            except trio.BrokenResourceError as exc:
                assert isinstance(exc.__cause__, ssl.SSLCertVerificationError), exc.__cause__
                refused = True
                await client_raw.aclose()
    if refused:
        return None
    subject = dict(item[0] for item in client.getpeercert()["subject"])
    return subject["commonName"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_the_node_certificate_is_trusted_for_loopback_names(material, host):
    assert await tls_handshake(material, host) == "localhost"


async def test_the_node_certificate_is_not_valid_for_other_names(material):
    assert await tls_handshake(material, "kraftwerk.example.com") is None


def test_node_settings_make_valid_configs_that_fit_together(material, tmp_path):
    cluster = SecureLocalCluster(tmp_path / "cluster", controllers=3, brokers=1, controller_base_port=19093,
                                 broker_base_port=19192)
    controller, broker = cluster.controllers[0], cluster.brokers[0]
    configs = {}
    for spec in (controller, broker):
        write_config(spec, cluster.controllers, cluster.material.node_properties(spec.role),
                     broker_listener="SASL_SSL")
        text = spec.config_path.read_text()
        configs[spec.role] = config_from_properties(dict(line.split("=", 1) for line in text.splitlines()
                                                         if line and not line.startswith("#")))
    passwords = cluster.material.passwords
    assert configs["controller"].listener.security_protocol == "SASL_SSL"
    assert configs["broker"].listener.name == "SASL_SSL" and configs["broker"].listener.security_protocol == "SASL_SSL"
    # Each node logs in to the controllers with PLAIN as its role's user.
    for role in ("controller", "broker"):
        login = ClientSecurity.for_node(configs[role])
        assert (login.security_protocol, login.sasl_mechanism, login.sasl_username) == ("SASL_SSL", "PLAIN", role)
        assert login.sasl_password == passwords[role]
        assert authorizer_config(configs[role].extra).super_users == {"User:controller", "User:broker",
                                                                       "User:admin"}
    # The controller listener knows both node users (before any SCRAM credential exists),
    # and takes the operator's SCRAM.
    listener = SaslServerConfig.from_server_config(configs["controller"], "CONTROLLER")
    assert dict(listener.plain_users) == {"controller": passwords["controller"], "broker": passwords["broker"]}
    assert listener.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert SaslServerConfig.from_server_config(configs["broker"], "SASL_SSL").enabled_mechanisms == ("SCRAM-SHA-512",)
    assert cluster.material.scram_arguments()[0] == "--add-scram"
    assert cluster.material.scram_arguments()[1].startswith("SCRAM-SHA-512=[name=admin,password=")


def test_a_cluster_formatted_without_secure_is_not_taken_over(tmp_path):
    work = tmp_path / "plain-cluster"
    (work / "controller-1").mkdir(parents=True)
    write_meta_properties(work / "controller-1", MetaProperties(cluster_id=random_uuid_string(), node_id=1,
                                                                directory_id=random_uuid_string()))
    with pytest.raises(LocalClusterError, match="without --secure"):
        SecureLocalCluster(work, controllers=1, brokers=0, controller_base_port=19093, broker_base_port=19192)
    assert not (work / "secure").exists()
