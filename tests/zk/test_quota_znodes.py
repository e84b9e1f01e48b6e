"""Client quota and SCRAM znodes (server/zk/paths.py): entity paths with Kafka's
sanitized names and `<default>`, quota values, the SCRAM credential text; and the
reader (server/zk/seed.py) walking /config/users, /config/clients and /config/ips of a
real ZooKeeper."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from server.zk import paths as zp
from server.zk.seed import read_cluster_image, read_zookeeper, write_cluster_image

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


# -- names and paths ------------------------------------------------------------------

def test_names_are_sanitized_as_kafka_does():
    # URLEncoder keeps letters, digits and . - _ ; a space is %20 and '*' is %2A, not '+'/'*'.
    assert zp.sanitize_entity_name("alice") == "alice"
    assert zp.sanitize_entity_name("a.b-c_d") == "a.b-c_d"
    assert zp.sanitize_entity_name("CN=alice, O=x") == "CN%3Dalice%2C%20O%3Dx"
    assert zp.sanitize_entity_name("svc*") == "svc%2A"
    assert zp.sanitize_entity_name("é/~") == "%C3%A9%2F%7E"
    # URLDecoder reads '+' as a space.
    assert zp.desanitize_entity_name("a+b%20c") == "a b c"


@given(st.text(max_size=20))
def test_sanitizing_round_trips(name):
    assert zp.desanitize_entity_name(zp.sanitize_entity_name(name)) == name


@pytest.mark.parametrize("text", ["%", "%4", "%zz", "%C3"])
def test_a_malformed_name_is_a_decode_error(text):
    with pytest.raises(zp.ZnodeDecodeError):
        zp.desanitize_entity_name(text)


@pytest.mark.parametrize("entity, path", [
    ((("user", "alice"),), "users/alice"),
    ((("user", None),), "users/<default>"),
    ((("client-id", "c 1"),), "clients/c%201"),
    ((("client-id", None),), "clients/<default>"),
    ((("client-id", "c1"), ("user", "alice")), "users/alice/clients/c1"),
    ((("client-id", None), ("user", None)), "users/<default>/clients/<default>"),
    ((("client-id", "c1"), ("user", None)), "users/<default>/clients/c1"),
    ((("ip", "1.2.3.4"),), "ips/1.2.3.4"),
    ((("ip", "::1"),), "ips/::1"),  # ip addresses are not sanitized
    ((("ip", None),), "ips/<default>"),
    # A user literally named "<default>" is not the default user.
    ((("user", "<default>"),), "users/%3Cdefault%3E"),
])
def test_entity_paths_both_ways(entity, path):
    assert zp.quota_entity_path(entity) == path
    assert zp.parse_quota_entity_path(path) == entity


@pytest.mark.parametrize("path", ["users", "users/", "topics/t", "users/a/clients", "users/a/ips/b",
                                  "clients/a/users/b", "users//clients/c"])
def test_a_path_that_is_no_quota_entity_is_refused(path):
    with pytest.raises(zp.ZnodeDecodeError):
        zp.parse_quota_entity_path(path)


def test_an_entity_without_a_znode_is_refused():
    with pytest.raises(ValueError):
        zp.quota_entity_path((("ip", "1.2.3.4"), ("user", "alice")))


# -- values -------------------------------------------------------------------------

def test_quota_values_leave_scram_out_and_read_numbers():
    config = zp.ConfigZnode({"producer_byte_rate": "1024", "request_percentage": "25.5",
                             "consumer_byte_rate": "2048.0", "SCRAM-SHA-256": "salt=AA==,..."})
    assert zp.quota_values(config) == {"producer_byte_rate": 1024.0, "request_percentage": 25.5,
                                       "consumer_byte_rate": 2048.0}
    assert zp.scram_entries(config) == {"SCRAM-SHA-256": "salt=AA==,..."}


@pytest.mark.parametrize("value", ["fast", "", "NaN", "Infinity"])
def test_a_quota_that_is_not_a_number_is_a_decode_error(value):
    with pytest.raises(zp.ZnodeDecodeError, match="producer_byte_rate"):
        zp.quota_values(zp.ConfigZnode({"producer_byte_rate": value}), "/config/users/alice")


@pytest.mark.parametrize("value, text", [
    (1024.0, "1024"), (25.0, "25"), (0.5, "0.5"), (1e-5, "1.0E-5"), (12345678.5, "1.23456785E7"),
    (2.0**63, "9.223372036854776E18"),
])
def test_quota_value_text(value, text):
    assert zp.quota_value_text(value) == text
    assert float(text) == value


# -- SCRAM ----------------------------------------------------------------------------

def test_scram_credential_text_round_trips_and_hides_its_keys():
    credential = zp.ScramCredentialText(b"salt-bytes", b"\x00stored", b"server\xff", 4096)
    text = credential.encode()
    assert text == ("salt=" + base64.b64encode(b"salt-bytes").decode() + ",stored_key="
                    + base64.b64encode(b"\x00stored").decode() + ",server_key="
                    + base64.b64encode(b"server\xff").decode() + ",iterations=4096")
    assert zp.ScramCredentialText.parse(text) == credential
    assert "stored" not in repr(credential) and "4096" in repr(credential)


@pytest.mark.parametrize("text", ["", "salt=AA==", "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x",
                                  "salt=!!,stored_key=AA==,server_key=AA==,iterations=1", "salt"])
def test_a_bad_scram_credential_is_a_decode_error_without_the_secret(text):
    with pytest.raises(zp.ZnodeDecodeError) as raised:
        zp.ScramCredentialText.parse(text)
    assert "AA==" not in str(raised.value)


def _scram(iterations: int) -> str:
    return zp.ScramCredentialText(b"s", b"k", b"v", iterations).encode()


def quota_image(quota_configs, parents=frozenset()) -> zp.ZkClusterImage:
    return zp.ZkClusterImage(
        cluster_id=CLUSTER_ID, brokers={}, topics={}, topic_configs={}, broker_configs={}, features=None,
        controller=None, controller_epoch=None, migration=None, migration_version=None,
        quota_configs=quota_configs, user_client_parents=frozenset(parents))


QUOTA_CONFIGS = {
    "users/alice": zp.ConfigZnode({"producer_byte_rate": "1024", "SCRAM-SHA-256": _scram(4096)}),
    "users/%3Cbob%3E": zp.ConfigZnode({"SCRAM-SHA-512": _scram(8192)}),  # SCRAM only: no quota entity
    "users/<default>": zp.ConfigZnode({"consumer_byte_rate": "4096"}),
    "users/carol": zp.ConfigZnode({}),  # only the parent of carol's per-client quotas
    "users/carol/clients/c%201": zp.ConfigZnode({"request_percentage": "12.5"}),
    "users/<default>/clients/<default>": zp.ConfigZnode({"producer_byte_rate": "10"}),
    "clients/c1": zp.ConfigZnode({"controller_mutation_rate": "2"}),
    "clients/<default>": zp.ConfigZnode({"producer_byte_rate": "100"}),
    "ips/10.0.0.1": zp.ConfigZnode({"connection_creation_rate": "5"}),
    "ips/<default>": zp.ConfigZnode({"connection_creation_rate": "50"}),
}


def test_the_image_lists_quota_entities_and_scram_credentials():
    image = quota_image(QUOTA_CONFIGS, {"carol", "<default>"})
    assert image.client_quotas() == {
        (("client-id", None),): {"producer_byte_rate": 100.0},
        (("client-id", "c1"),): {"controller_mutation_rate": 2.0},
        (("client-id", None), ("user", None)): {"producer_byte_rate": 10.0},
        (("client-id", "c 1"), ("user", "carol")): {"request_percentage": 12.5},
        (("ip", None),): {"connection_creation_rate": 50.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("user", None),): {"consumer_byte_rate": 4096.0},
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
    }
    credentials = image.scram_credentials()
    assert sorted(credentials) == [("<bob>", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256")]
    assert credentials[("alice", "SCRAM-SHA-256")].iterations == 4096


def test_a_bad_quota_znode_is_named():
    image = quota_image({"users/alice": zp.ConfigZnode({"producer_byte_rate": "lots"})})
    with pytest.raises(zp.ZnodeDecodeError, match="/config/users/alice"):
        image.client_quotas()


# -- a real ZooKeeper ---------------------------------------------------------------

def test_the_readers_walk_the_quota_znodes(zk_hosts):
    image = quota_image(QUOTA_CONFIGS, {"carol", "<default>"})
    client = KazooClient(hosts=zk_hosts, timeout=10.0)
    client.start(timeout=30)
    try:
        write_cluster_image(client, image)
        # A user znode Kafka created only as a parent has no data at all, and a
        # `clients` znode may stay behind with no children.
        client.create("/config/users/dave/clients", b"", makepath=True)
        client.create("/config/users/dave/clients/d1", zp.ConfigZnode({"producer_byte_rate": "7"}).encode())
        client.create("/config/users/erin/clients", b"", makepath=True)
        by_kazoo = read_cluster_image(client)
    finally:
        client.stop()
        client.close()
    by_wire = read_zookeeper(zk_hosts)
    assert by_wire.quota_configs == by_kazoo.quota_configs
    assert by_wire.user_client_parents == by_kazoo.user_client_parents == {"carol", "<default>", "dave", "erin"}
    expected = dict(QUOTA_CONFIGS)
    expected["users/dave"] = zp.ConfigZnode({})
    expected["users/dave/clients/d1"] = zp.ConfigZnode({"producer_byte_rate": "7"})
    expected["users/erin"] = zp.ConfigZnode({})
    assert dict(by_wire.quota_configs) == expected
    assert by_wire.client_quotas()[(("client-id", "d1"), ("user", "dave"))] == {"producer_byte_rate": 7.0}
