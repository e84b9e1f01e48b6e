"""Round trips and strictness of the znode layouts (server/zk/paths.py)."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.zk import paths
from server.zk.paths import (
    BrokerRegistrationZnode,
    ClusterIdZnode,
    ConfigZnode,
    ControllerEpochZnode,
    ControllerZnode,
    Endpoint,
    FeaturesZnode,
    FeatureZnodeStatus,
    FinalizedFeature,
    MigrationZnode,
    PartitionStateZnode,
    SupportedFeatureRange,
    TopicZnode,
    ZnodeDecodeError,
)

ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
non_negative = st.integers(min_value=0, max_value=2**31 - 1)
names = st.text(min_size=1, max_size=20)
replica_lists = st.lists(non_negative, max_size=5).map(tuple)
replica_maps = st.dictionaries(st.integers(min_value=0, max_value=10_000), replica_lists, max_size=8)
hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
    st.just("::1"),
    st.just("127.0.0.1"),
)
endpoints = st.builds(
    Endpoint,
    listener=st.from_regex(r"[A-Z][A-Z_]{0,10}", fullmatch=True),
    host=hosts,
    port=st.integers(min_value=0, max_value=65535),
)
kafka_uuids = st.uuids().map(paths.kafka_uuid_string)
# 0001-01-01 .. 9999-12-31 is datetime's range; stay within it.
timestamps_ms = st.integers(min_value=0, max_value=253_402_300_799_999)


@given(kafka_uuids)
def test_cluster_id_round_trip(cluster_id: str) -> None:
    znode = ClusterIdZnode(cluster_id)
    data = znode.encode()
    assert json.loads(data) == {"version": "1", "id": cluster_id}
    assert ClusterIdZnode.decode(data) == znode
    assert paths.kafka_uuid_string(ClusterIdZnode.decode(data).cluster_uuid()) == cluster_id


@given(
    host=st.one_of(st.none(), hosts),
    port=ints,
    endpoint_list=st.lists(endpoints, max_size=3).map(tuple),
    protocol_map=st.dictionaries(names, names, max_size=3),
    rack=st.one_of(st.none(), names),
    jmx_port=ints,
    timestamp_ms=st.integers(min_value=0, max_value=2**62),
    features=st.dictionaries(
        names, st.builds(SupportedFeatureRange, min_version=ints, max_version=ints), max_size=4
    ),
)
def test_broker_registration_round_trip(host, port, endpoint_list, protocol_map, rack, jmx_port,
                                        timestamp_ms, features) -> None:
    znode = BrokerRegistrationZnode(
        host=host, port=port, endpoints=endpoint_list, listener_security_protocol_map=protocol_map,
        rack=rack, jmx_port=jmx_port, timestamp_ms=timestamp_ms, features=features,
    )
    assert BrokerRegistrationZnode.decode(znode.encode()) == znode


def test_broker_registration_layout_is_kafkas_v5() -> None:
    znode = BrokerRegistrationZnode(
        host="h1", port=9092, endpoints=(Endpoint("PLAINTEXT", "h1", 9092),),
        listener_security_protocol_map={"PLAINTEXT": "PLAINTEXT"}, rack=None, jmx_port=-1,
        timestamp_ms=1700000000000,
        features={"metadata.version": SupportedFeatureRange(1, 7)},
    )
    assert json.loads(znode.encode()) == {
        "version": 5, "host": "h1", "port": 9092, "endpoints": ["PLAINTEXT://h1:9092"],
        "jmx_port": -1, "timestamp": "1700000000000",
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "features": {"metadata.version": {"min_version": 1, "max_version": 7}},
    }


@given(
    topic_id=st.one_of(st.none(), kafka_uuids),
    partitions=replica_maps,
    adding=replica_maps,
    removing=replica_maps,
)
def test_topic_round_trip(topic_id, partitions, adding, removing) -> None:
    znode = TopicZnode(topic_id, partitions, adding, removing)
    data = znode.encode()
    assert json.loads(data)["version"] == 3
    assert TopicZnode.decode(data) == znode


def test_topic_layout() -> None:
    data = TopicZnode("AAAAAAAAAAAAAAAAAAAAAQ", {1: (2, 3), 0: (1, 2)}).encode()
    assert json.loads(data) == {
        "version": 3, "partitions": {"0": [1, 2], "1": [2, 3]}, "adding_replicas": {},
        "removing_replicas": {}, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
    }


@given(leader=ints, leader_epoch=ints, isr=replica_lists, controller_epoch=ints)
def test_partition_state_round_trip(leader, leader_epoch, isr, controller_epoch) -> None:
    znode = PartitionStateZnode(leader, leader_epoch, isr, controller_epoch)
    assert json.loads(znode.encode()) == {
        "controller_epoch": controller_epoch, "leader": leader, "version": 1,
        "leader_epoch": leader_epoch, "isr": list(isr),
    }
    assert PartitionStateZnode.decode(znode.encode()) == znode


@given(st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=10))
def test_config_round_trip(config) -> None:
    znode = ConfigZnode(config)
    assert json.loads(znode.encode()) == {"version": 1, "config": config}
    assert ConfigZnode.decode(znode.encode()) == znode


@given(
    status=st.sampled_from(FeatureZnodeStatus),
    features=st.dictionaries(
        names,
        st.builds(FinalizedFeature, max_version_level=ints, min_version_level=st.one_of(st.none(), ints)),
        max_size=4,
    ),
)
def test_features_round_trip(status, features) -> None:
    znode = FeaturesZnode(status, features)
    assert FeaturesZnode.decode(znode.encode()) == znode


def test_features_layout_and_levels() -> None:
    znode = FeaturesZnode(FeatureZnodeStatus.ENABLED, {"metadata.version": FinalizedFeature(7)})
    assert json.loads(znode.encode()) == {
        "version": 2, "status": 1, "features": {"metadata.version": {"max_version_level": 7}},
    }
    assert znode.finalized_levels() == {"metadata.version": 7}
    assert FeaturesZnode(FeatureZnodeStatus.DISABLED, znode.features).finalized_levels() == {}
    assert paths.FEATURES_PATH == "/features"


@given(broker_id=ints, timestamp_ms=st.integers(min_value=0, max_value=2**62),
       epoch=st.one_of(st.none(), ints))
def test_controller_round_trip(broker_id, timestamp_ms, epoch) -> None:
    znode = ControllerZnode(broker_id, timestamp_ms, epoch)
    assert ControllerZnode.decode(znode.encode()) == znode
    assert znode.is_kraft == (epoch is not None)


def test_controller_layout() -> None:
    assert json.loads(ControllerZnode(3000, 5, 7).encode()) == {
        "version": 2, "brokerid": 3000, "timestamp": "5", "kraftControllerEpoch": 7,
    }
    # A ZK-mode controller's version-1 znode decodes too.
    old = ControllerZnode.decode(b'{"version":1,"brokerid":2,"timestamp":"123"}')
    assert old == ControllerZnode(2, 123, None, version=1)
    assert not old.is_kraft


@given(ints)
def test_controller_epoch_round_trip(epoch: int) -> None:
    znode = ControllerEpochZnode(epoch)
    assert znode.encode() == str(epoch).encode()
    assert ControllerEpochZnode.decode(znode.encode()) == znode


@given(last_offset=st.integers(min_value=-1, max_value=2**62), timestamp_ms=timestamps_ms,
       controller_id=ints, epoch=ints)
def test_migration_round_trip(last_offset, timestamp_ms, controller_id, epoch) -> None:
    znode = MigrationZnode(last_offset, timestamp_ms, controller_id, epoch)
    assert MigrationZnode.decode(znode.encode()) == znode


def test_migration_layout_uses_kip_names() -> None:
    data = MigrationZnode(100, 1_640_995_200_000, 3000, 1).encode()
    assert json.loads(data) == {
        "version": 0, "lastOffset": 100, "lastTimestamp": "2022-01-01T00:00:00.000Z",
        "kraftControllerId": 3000, "kraftControllerEpoch": 1,
    }


def test_paths() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topic_path("t") == "/brokers/topics/t"
    assert paths.partition_state_path("t", 4) == "/brokers/topics/t/partitions/4/state"
    assert paths.config_path(paths.CONFIG_TOPICS, "t") == "/config/topics/t"
    assert paths.config_path(paths.CONFIG_BROKERS, "1") == "/config/brokers/1"


DECODERS = (
    ClusterIdZnode.decode, BrokerRegistrationZnode.decode, TopicZnode.decode,
    PartitionStateZnode.decode, ConfigZnode.decode, FeaturesZnode.decode,
    ControllerZnode.decode, ControllerEpochZnode.decode, MigrationZnode.decode,
)


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"\xff\xfe", b'"x"', b"null", b'{"version":true}'])
def test_bad_bytes_raise_decode_error_only(decode, data: bytes) -> None:
    with pytest.raises(ZnodeDecodeError):
        decode(data)


@pytest.mark.parametrize("decode", DECODERS)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_raise_nothing_but_decode_error(decode, data: bytes) -> None:
    try:
        decode(data)
    except ZnodeDecodeError:
        pass


@given(st.recursive(
    st.one_of(st.none(), st.booleans(), ints, st.text(max_size=5)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=12,
))
def test_arbitrary_json_raises_nothing_but_decode_error(value) -> None:
    data = json.dumps(value).encode()
    for decode in DECODERS:
        try:
            decode(data)
        except ZnodeDecodeError:
            pass


def test_wrong_types_are_refused() -> None:
    with pytest.raises(ZnodeDecodeError):
        PartitionStateZnode.decode(b'{"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":1}')
    with pytest.raises(ZnodeDecodeError):
        TopicZnode.decode(b'{"version":3,"partitions":{"x":[1]}}')
    with pytest.raises(ZnodeDecodeError):
        FeaturesZnode.decode(b'{"version":2,"status":7,"features":{}}')
    with pytest.raises(ZnodeDecodeError):
        MigrationZnode.decode(b'{"lastOffset":1,"lastTimestamp":"yesterday","kraftControllerId":1,'
                              b'"kraftControllerEpoch":1}')
    with pytest.raises(ZnodeDecodeError):
        ClusterIdZnode(paths.kafka_uuid_string(uuid.uuid4())[:-1] + "!").cluster_uuid()


def test_oversized_integers_are_decode_errors() -> None:
    digits = "9" * 5000
    with pytest.raises(ZnodeDecodeError):
        ControllerEpochZnode.decode(digits.encode())
    with pytest.raises(ZnodeDecodeError):
        PartitionStateZnode.decode(f'{{"leader":{digits}}}'.encode())
    with pytest.raises(ZnodeDecodeError):
        TopicZnode.decode(f'{{"partitions":{{"{digits}":[1]}}}}'.encode())
