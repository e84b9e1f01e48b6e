"""kraftwerk's feature catalog against the facts generated from Kafka's own classes.

server/controller/kafka_feature_catalog.py is what Kafka 4.4.0's MetadataVersion and
Feature say (tools/gen_feature_catalog.py); these tests hold kraftwerk's catalog
(server/controller/features.py) and release table to it, and check that the generator
still writes the checked-in module from the saved document, without Java.
"""

import importlib.util
import json
import uuid
from pathlib import Path

from protocol.errors import ErrorCode
from server import releases
from server.controller import features as ft
from server.controller import kafka_feature_catalog as kafka

from .helpers import NODE_ID, Cluster

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "tests" / "data" / "kafka-feature-catalog.json"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_feature_catalog", ROOT / "tools" / "gen_feature_catalog.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_generator_renders_the_checked_in_module_from_the_saved_document():
    document = json.loads(SAVED.read_text())
    assert document["kafka_version"] == kafka.KAFKA_VERSION == "4.4.0"
    assert _generator().render(document) == (ROOT / "server" / "controller" / "kafka_feature_catalog.py").read_text()


def test_every_kafka_metadata_version_is_in_kraftwerks_catalog_with_kafkas_facts():
    for fact in kafka.KAFKA_METADATA_VERSIONS:
        mv = ft.metadata_version_from_level(fact.level)
        assert (mv.name, mv.did_metadata_change, mv.production, mv.release) == (
            fact.name, fact.did_metadata_change, fact.production, fact.release), fact.name
    assert ft.metadata_version_from_name(kafka.MINIMUM_METADATA_VERSION).level == kafka.KAFKA_METADATA_VERSIONS[0].level
    assert ft.LATEST_PRODUCTION.name == kafka.LATEST_PRODUCTION_METADATA_VERSION
    assert ft.LATEST_TESTING.name == kafka.LATEST_TESTING_METADATA_VERSION
    # Nothing above Kafka's newest level, and below Kafka's minimum only the 3.x levels.
    assert ft.METADATA_VERSIONS[-1].level == kafka.KAFKA_METADATA_VERSIONS[-1].level
    older = [mv.name for mv in ft.METADATA_VERSIONS if mv.level < kafka.KAFKA_METADATA_VERSIONS[0].level]
    assert older == ["3.0-IV1", "3.1-IV0", "3.2-IV0", "3.3-IV0", "3.3-IV1", "3.3-IV2"]


def test_every_kafka_feature_is_known_with_its_levels_and_dependencies():
    assert set(ft.FEATURES) == {feature.name for feature in kafka.KAFKA_FEATURES}
    for fact in kafka.KAFKA_FEATURES:
        spec = ft.FEATURES[fact.name]
        assert (spec.latest_production, spec.latest_testing) == (fact.latest_production, fact.latest_testing)
        assert [level.level for level in spec.levels] == [level.level for level in fact.levels if level.level > 0]
        for level in fact.levels[1:]:
            ours = spec.level(level.level)
            assert ft.metadata_version_from_level(ours.bootstrap_mv_level).name == level.bootstrap_metadata_version
            assert dict(ours.dependencies) == dict(level.dependencies), (fact.name, level.level)


def test_default_levels_are_kafkas_at_every_metadata_version():
    for fact in kafka.KAFKA_FEATURES:
        for mv, expected in zip(kafka.KAFKA_METADATA_VERSIONS, fact.default_levels, strict=True):
            assert ft.default_feature_level(fact.name, mv.level) == expected, (fact.name, mv.name)


def test_dependency_messages_are_kafkas():
    assert kafka.KAFKA_DEPENDENCY_ERRORS  # the pinned release has at least one dependency
    for feature, level, dependency, given, message in kafka.KAFKA_DEPENDENCY_ERRORS:
        proposed = dict(ft.FEATURES[feature].level(level).dependencies)
        if given is None:
            del proposed[dependency]
        else:
            proposed[dependency] = given
        ours = ft.dependency_error(feature, level, proposed)
        if dependency == ft.METADATA_VERSION and given is None:
            # Kafka 4 names its own minimum (3.3-IV3); kraftwerk still runs 3.3-IV0..IV2,
            # so it names the first level that can record a feature (3.3-IV0).
            assert ours == message.replace("metadata.version=7 (3.3-IV3)", "metadata.version=4 (3.3-IV0)")
        else:
            assert ours == message
        proposed[dependency] = dict(ft.FEATURES[feature].level(level).dependencies)[dependency]
        assert ft.dependency_error(feature, level, proposed) is None


def test_pinned_release_row_is_what_kafka_advertises():
    # A Kafka 4.4 node advertises metadata.version from its minimum to its latest
    # production level, and every production feature from 0 to its latest production level.
    row = releases.release("4.4").features
    assert ft.metadata_version_from_level(row[ft.METADATA_VERSION].min_level).name == kafka.MINIMUM_METADATA_VERSION
    assert ft.metadata_version_from_level(row[ft.METADATA_VERSION].max_level).name == (
        kafka.LATEST_PRODUCTION_METADATA_VERSION)
    for fact in kafka.KAFKA_FEATURES:
        assert row[fact.name] == ft.SupportedRange(fact.minimum_production, fact.latest_production)


def test_register_broker_record_version_follows_kafka():
    # v4 (cordoned log dirs, KIP-1066) from 4.3-IV0, as Kafka writes it.
    for mv in kafka.KAFKA_METADATA_VERSIONS:
        kafkas = dict(mv.record_versions)["registerBrokerRecordVersion"]
        assert ft.register_broker_record_version(mv.level) == kafkas, mv.name


def test_a_kafka_4_4_broker_registers_with_features_kraftwerk_does_not_know():
    # What a Kafka 4.4 broker sends, plus a feature from a release after it: the
    # registration is accepted, every range is kept in the record and the image, and a
    # later change of the unknown feature is refused by the controller, not a crash.
    cluster = Cluster.bootstrapped(mv_level=ft.LATEST_PRODUCTION.level)
    sent = {name: (r.min_level, r.max_level) for name, r in releases.release("4.4").features.items()}
    sent["future.feature.version"] = (0, 3)
    result = cluster.register(7, uuid.UUID(int=7), features=sent)
    assert result.response["error_code"] == ErrorCode.NONE
    recorded = {f["name"]: (f["min_supported_version"], f["max_supported_version"])
                for f in result.records[0].data["features"]}
    assert recorded == sent
    broker = cluster.state.broker(7)
    assert broker.supported("future.feature.version") == ft.SupportedRange(0, 3)
    assert broker.supported(ft.SHARE_VERSION) == ft.SupportedRange(0, 2)
    refused = cluster.update([("future.feature.version", 1, 1)])
    assert refused.records == []
    assert refused.response["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
    assert refused.response["error_message"].endswith(
        f"Invalid update version 1 for feature future.feature.version. Local controller {NODE_ID} does not "
        "support this feature.")
