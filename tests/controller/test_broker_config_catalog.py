"""Kafka's broker config catalogue (generated from Kafka's own classes) and how the
answering node's BROKER resource uses it: every key of Kafka's definition, Kafka's
types, defaults, update modes, sensitivity, synonyms and the precedence of sources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from server.config import ServerConfig
from server.controller import topics as tp
from server.controller.commands import bootstrap_records
from server.controller.broker_config_catalog import BROKER_CONFIG_CATALOG, KAFKA_VERSION
from server.controller.state import RESOURCE_BROKER, ControllerState

from .test_partitions_and_configs import describe, replace
from .test_topics import cluster_with_brokers

ROOT = Path(__file__).resolve().parents[2]
NODE = tp.NodeConfigView(node_id=1, static={"node.id": "1", "process.roles": "broker",
                                            "log.retention.hours": "24", "ssl.keystore.password": "secret",
                                            "listener.name.sasl_ssl.ssl.key.password": "secret",
                                            "my.custom": "x"},
                         loggers={})


def own_configs(cluster, include_synonyms=True, node=NODE):
    (own,) = describe(cluster, (RESOURCE_BROKER, str(node.node_id), None), include_synonyms=include_synonyms,
                      node=node)
    assert own.error_code == 0
    return {c.name: c for c in own.configs}


@pytest.mark.parametrize(("key", "config_type", "default", "dynamic"), [
    ("num.io.threads", "INT", "8", "cluster-wide"),
    ("num.network.threads", "INT", "3", "cluster-wide"),
    ("log.retention.hours", "INT", "168", "read-only"),
    ("log.retention.ms", "LONG", None, "cluster-wide"),
    ("message.max.bytes", "INT", "1048588", "cluster-wide"),
    ("broker.id", "INT", "-1", "read-only"),
    ("log.dirs", "LIST", None, "read-only"),
    ("log.dir", "LIST", "/tmp/kafka-logs", "read-only"),
    ("listeners", "LIST", "PLAINTEXT://:9092", "per-broker"),
    ("max.connections", "INT", "2147483647", "cluster-wide"),
    ("auto.create.topics.enable", "BOOLEAN", "true", "read-only"),
])
def test_catalog_has_kafkas_well_known_keys(key, config_type, default, dynamic):
    fact = BROKER_CONFIG_CATALOG[key]
    assert (fact.type, fact.default, fact.dynamic, fact.listed) == (config_type, default, dynamic, True)


def test_catalog_facts_hold_together():
    assert KAFKA_VERSION == "4.4.0"
    assert len(BROKER_CONFIG_CATALOG) > 350
    assert list(BROKER_CONFIG_CATALOG) == sorted(BROKER_CONFIG_CATALOG)
    for name, fact in BROKER_CONFIG_CATALOG.items():
        assert name in fact.synonyms
        assert fact.sensitive == (fact.type == "PASSWORD")
        assert not (fact.sensitive and fact.default is not None), name
        assert fact.dynamic in ("read-only", "per-broker", "cluster-wide")
    # Keys a node must be given have no default.
    assert not BROKER_CONFIG_CATALOG["node.id"].has_default
    assert not BROKER_CONFIG_CATALOG["process.roles"].has_default
    assert BROKER_CONFIG_CATALOG["log.retention.hours"].synonyms == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours")


def test_generator_renders_the_checked_in_module_from_its_own_facts():
    # Without Java: rebuild the document from the module and render it again; the module
    # must be exactly what tools/gen_broker_configs.py writes (sorted, deterministic).
    spec = importlib.util.spec_from_file_location("gen_broker_configs", ROOT / "tools" / "gen_broker_configs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    document = {"kafka_version": KAFKA_VERSION, "jar": f"kafka_2.13-{KAFKA_VERSION}.jar",
                "definition": "kafka.server.KafkaConfig.configDef()",
                "keys": {name: {"type": f.type, "default": f.default, "has_default": f.has_default,
                                "dynamic": f.dynamic, "sensitive": f.sensitive, "listed": f.listed,
                                "synonyms": list(f.synonyms)} for name, f in BROKER_CONFIG_CATALOG.items()}}
    assert gen.render(document) == (ROOT / "server" / "controller" / "broker_config_catalog.py").read_text()


def test_own_broker_lists_every_kafka_key_with_its_default():
    configs = own_configs(cluster_with_brokers(1), node=tp.NodeConfigView(node_id=1, static={"node.id": "1"},
                                                                        loggers={}))
    listed = {name for name, fact in BROKER_CONFIG_CATALOG.items() if fact.listed}
    assert listed <= set(configs)
    for key, value in [("num.io.threads", "8"), ("num.network.threads", "3"), ("message.max.bytes", "1048588"),
                       ("log.retention.hours", "168"), ("log.dirs", None)]:
        entry = configs[key]
        assert (entry.value, entry.config_source, entry.is_sensitive) == (value, tp.SOURCE_DEFAULT_CONFIG, False)
        assert entry.config_type == tp.ConfigType[BROKER_CONFIG_CATALOG[key].type]
    # broker.id is the node's id (Kafka fills it from node.id), not its -1 default.
    assert (configs["broker.id"].value, configs["broker.id"].config_source) == ("1", tp.SOURCE_STATIC_BROKER_CONFIG)
    # Internal keys and the dynamic-only quotas appear only when set, as on Kafka's broker.
    assert "leader.replication.throttled.rate" not in configs
    assert configs["num.io.threads"].read_only is False and configs["broker.id"].read_only is True
    assert configs["listeners"].read_only is False and configs["log.retention.hours"].read_only is True


def test_precedence_and_synonyms_follow_kafka():
    cluster = cluster_with_brokers(2)
    replace(cluster, (RESOURCE_BROKER, "", [("num.io.threads", "16"), ("log.retention.ms", "1000")]))
    replace(cluster, (RESOURCE_BROKER, "1", [("num.io.threads", "32")]))
    configs = own_configs(cluster)
    io = configs["num.io.threads"]
    assert (io.value, io.config_source) == ("32", tp.SOURCE_DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in io.synonyms] == [
        ("num.io.threads", "32", tp.SOURCE_DYNAMIC_BROKER_CONFIG),
        ("num.io.threads", "16", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("num.io.threads", "8", tp.SOURCE_DEFAULT_CONFIG)]
    # log.retention.ms (dynamic default) answers for itself, with hours (static) behind it.
    ms = configs["log.retention.ms"]
    assert (ms.value, ms.config_source) == ("1000", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.source) for s in ms.synonyms] == [
        ("log.retention.ms", tp.SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", tp.SOURCE_STATIC_BROKER_CONFIG),
        ("log.retention.ms", tp.SOURCE_DEFAULT_CONFIG), ("log.retention.minutes", tp.SOURCE_DEFAULT_CONFIG),
        ("log.retention.hours", tp.SOURCE_DEFAULT_CONFIG)]
    # log.retention.hours starts at its own entry: the more specific ms is dropped before it.
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("24", tp.SOURCE_STATIC_BROKER_CONFIG)
    assert [(s.name, s.value) for s in hours.synonyms][0] == ("log.retention.hours", "24")
    # Without synonyms the values and sources are the same.
    plain = own_configs(cluster, include_synonyms=False)
    assert (plain["num.io.threads"].value, list(plain["num.io.threads"].synonyms)) == ("32", [])


def test_sensitive_and_untyped_keys_have_null_values():
    cluster = cluster_with_brokers(1)
    replace(cluster, (RESOURCE_BROKER, "1", [("sasl.jaas.config", "secret")]))
    configs = own_configs(cluster)
    for key in ("ssl.keystore.password", "sasl.jaas.config", "listener.name.sasl_ssl.ssl.key.password",
                "my.custom"):
        entry = configs[key]
        assert entry.is_sensitive and entry.value is None, key
        assert all(s.value is None for s in entry.synonyms), key
    assert configs["ssl.keystore.password"].config_type == tp.ConfigType.PASSWORD
    assert configs["listener.name.sasl_ssl.ssl.key.password"].config_type == tp.ConfigType.PASSWORD
    assert configs["my.custom"].config_type == tp.ConfigType.UNKNOWN and configs["my.custom"].read_only
    # A key never set and sensitive still answers null, from its default.
    assert configs["ssl.truststore.password"].config_source == tp.SOURCE_DEFAULT_CONFIG


def test_kraftwerk_defaults_replace_kafkas_where_the_node_differs():
    configs = own_configs(cluster_with_brokers(1))
    entry = configs["sasl.mechanism.controller.protocol"]
    assert BROKER_CONFIG_CATALOG["sasl.mechanism.controller.protocol"].default == "GSSAPI"
    assert (entry.value, entry.config_source) == (ServerConfig().sasl_mechanism_controller_protocol,
                                                  tp.SOURCE_DEFAULT_CONFIG)


def test_other_broker_ids_are_typed_from_the_catalog():
    cluster = cluster_with_brokers(2)
    replace(cluster, (RESOURCE_BROKER, "2", [("num.io.threads", "4"), ("ssl.key.password", "p"), ("x", "y")]))
    (other,) = describe(cluster, (RESOURCE_BROKER, "2", None))
    configs = {c.name: c for c in other.configs}
    assert (configs["num.io.threads"].value, configs["num.io.threads"].config_type,
            configs["num.io.threads"].read_only) == ("4", tp.ConfigType.INT, False)
    assert configs["ssl.key.password"].is_sensitive and configs["ssl.key.password"].value is None
    assert (configs["x"].value, configs["x"].config_type) == ("y", tp.ConfigType.UNKNOWN)


def test_altering_a_broker_key_kafka_reads_only_at_start_up_is_refused():
    state = ControllerState("cluster")
    for offset, item in enumerate(bootstrap_records(19)):
        state.replay(item, offset)

    def incremental(name: str, key: str, value: str):
        request = {"resources": [{"resource_type": 4, "resource_name": name,
                                  "configs": [{"name": key, "config_operation": 0, "value": value}]}],
                   "validate_only": False}
        return tp.incremental_alter_configs(state, request, 1)

    result = incremental("101", "num.io.threads", "16")  # cluster-wide: fine per broker too
    assert result.response["responses"][0]["error_code"] == 0 and len(result.records) == 1
    result = incremental("101", "broker.id", "7")
    assert result.records == []
    refusal = result.response["responses"][0]
    assert refusal["error_code"] == ErrorCode.INVALID_REQUEST
    assert refusal["error_message"] == ("Invalid config value for resource ConfigResource(type=BROKER, name='101'): "
                                        "Cannot update these configs dynamically: Set(broker.id)")
    per_broker = next(key for key, fact in BROKER_CONFIG_CATALOG.items() if fact.dynamic == "per-broker"
                      and not fact.sensitive)
    assert incremental("101", per_broker, "x").response["responses"][0]["error_code"] == 0
    refusal = incremental("", per_broker, "x").response["responses"][0]
    assert refusal["error_code"] == ErrorCode.INVALID_REQUEST
    assert "broker id must be specified" in refusal["error_message"]
    # The legacy whole-set replacement checks the same keys.
    legacy = tp.alter_configs(state, {"resources": [{"resource_type": 4, "resource_name": "101", "configs": [
        {"name": "log.dirs", "value": "/x"}]}], "validate_only": False}, 2)
    assert legacy.records == [] and legacy.response["responses"][0]["error_code"] == ErrorCode.INVALID_REQUEST
