"""kafka-python 3.0.12 (KafkaAdminClient and its CLI) against a real controller.

kafka-python raises on a top-level UpdateFeatures error (the exception text
carries the whole response, including Kafka's error message) and returns
{feature: 'OK'} on success, so refusals are asserted through the exception
and successes through a describe_features that follows.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from kafka.admin import KafkaAdminClient, UpdateFeatureType
from kafka.errors import InvalidUpdateVersionError

from .helpers import REPO, cli_env

pytestmark = pytest.mark.e2e

# Offset 0 is the quorum leader's LeaderChange control record; the bootstrap
# FeatureLevelRecord is offset 1, the controller's own registration (KIP-919) offset 2:
# the finalized-features epoch once the controller is up.
BOOTSTRAP_EPOCH = 2

MV = "metadata.version"


@pytest.fixture
def admin(controller):
    client = KafkaAdminClient(bootstrap_servers=controller.address, request_timeout_ms=10_000,
                              client_id="kraftwerk-e2e")
    try:
        yield client
    finally:
        client.close()


def finalized_level(admin, feature=MV) -> tuple[int | None, int | None]:
    described = admin.describe_features()
    entry = described.get(feature, {})
    finalized = entry.get("finalized")
    return (finalized[1] if finalized else None), entry.get("finalized_epoch")


def test_describe_features(admin):
    described = admin.describe_features()
    assert described[MV]["supported"] == (1, 33)
    assert described[MV]["finalized"] == (19, 19)
    assert described[MV]["finalized_epoch"] == BOOTSTRAP_EPOCH
    assert described["transaction.version"]["supported"] == (0, 2)
    assert described["group.version"]["supported"] == (0, 1)
    # Features at level 0 are not finalized (KIP-584).
    assert "finalized" not in described["group.version"]


def test_upgrade_then_describe_shows_the_new_level_and_a_larger_epoch(admin, controller):
    assert admin.update_features({MV: 21}) == {MV: "OK"}
    level, epoch = finalized_level(admin)
    assert level == 21
    assert epoch > 0
    assert admin.update_features({"group.version": (UpdateFeatureType.UPGRADE, 1)}) == {"group.version": "OK"}
    described = admin.describe_features()
    assert described["group.version"]["finalized"] == (1, 1)
    assert described[MV]["finalized_epoch"] > epoch
    controller.wait_for_event("controller.feature_finalized", feature="group.version")


def test_safe_downgrade_that_loses_nothing(admin):
    admin.update_features({MV: 21})  # 3.9-IV0
    _, epoch = finalized_level(admin)
    result = admin.update_features({MV: (UpdateFeatureType.SAFE_DOWNGRADE, 20)})  # 3.8-IV0
    assert result == {MV: "OK"}
    level, new_epoch = finalized_level(admin)
    assert level == 20
    assert new_epoch > epoch


def test_lossy_safe_downgrade_is_refused(admin):
    # 3.7-IV4 (19) -> 3.7-IV1 (16) crosses 3.7-IV2, which changed the metadata format.
    with pytest.raises(InvalidUpdateVersionError) as raised:
        admin.update_features({MV: (UpdateFeatureType.SAFE_DOWNGRADE, 16)})
    assert "Refusing to perform the requested downgrade" in str(raised.value)
    assert finalized_level(admin) == (19, BOOTSTRAP_EPOCH)


def test_unsafe_lossy_downgrade_is_performed(admin):
    # Kafka refuses it; kraftwerk implements KIP-778's lossy downgrade.
    admin.update_features({MV: (UpdateFeatureType.UNSAFE_DOWNGRADE, 16)})
    level, epoch = finalized_level(admin)
    assert level == 16 and epoch > BOOTSTRAP_EPOCH


def test_downgrade_without_a_downgrade_type_is_refused(admin):
    with pytest.raises(InvalidUpdateVersionError) as raised:
        admin.update_features({MV: 18})
    assert "without setting the upgrade type to either safe or unsafe downgrade" in str(raised.value)
    assert finalized_level(admin) == (19, BOOTSTRAP_EPOCH)


def test_validate_only_changes_nothing(admin, controller):
    assert admin.update_features({MV: 22}, validate_only=True) == {MV: "OK"}
    assert finalized_level(admin) == (19, BOOTSTRAP_EPOCH)
    assert not controller.events("controller.feature_finalized", feature=MV, offset=2)  # nothing after the bootstrap record (offset 1)


def test_unknown_feature(admin):
    with pytest.raises(InvalidUpdateVersionError) as raised:
        admin.update_features({"no.such.feature": 1})
    assert "Invalid update version 1 for feature no.such.feature" in str(raised.value)
    assert "does not support this feature" in str(raised.value)


def test_level_above_the_supported_maximum(admin, controller):
    with pytest.raises(InvalidUpdateVersionError) as raised:
        admin.update_features({MV: 34})
    assert "Local controller 1 only supports versions 1-33" in str(raised.value)
    assert finalized_level(admin) == (19, BOOTSTRAP_EPOCH)
    controller.wait_for_event("controller.feature_update_rejected")


def test_describe_cluster_and_quorum(admin, controller):
    cluster = admin.describe_cluster()
    assert cluster["cluster_id"] == controller.cluster_id
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", controller.port)]
    quorum = admin.describe_metadata_quorum()
    partition = quorum["topics"][0]["partitions"][0]
    assert partition["error"] is None
    assert partition["leader_id"] == 1
    assert [v["replica_id"] for v in partition["current_voters"]] == [1]


# ---------------------------------------------------------------------------
# python -m kafka.admin
# ---------------------------------------------------------------------------

def kafka_admin_cli(controller, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafka.admin", "-b", controller.address, *argv],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=cli_env())


def test_kafka_admin_cli_describe_then_update_features(controller):
    described = kafka_admin_cli(controller, "cluster", "describe-features")
    assert described.returncode == 0, described.stdout + described.stderr
    before = ast.literal_eval(described.stdout)
    assert before[MV] == {"finalized": (19, 19), "finalized_epoch": BOOTSTRAP_EPOCH, "supported": (1, 33)}

    updated = kafka_admin_cli(controller, "cluster", "update-features", "-f", f"{MV}=21")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert ast.literal_eval(updated.stdout) == {MV: "OK"}

    after = ast.literal_eval(kafka_admin_cli(controller, "--format", "raw", "cluster", "describe-features").stdout)
    assert after[MV]["finalized"] == (21, 21)
    assert after[MV]["finalized_epoch"] > 0

    refused = kafka_admin_cli(controller, "cluster", "update-features", "--downgrade", "-f", f"{MV}=16")
    assert refused.returncode == 1
    assert "Refusing to perform the requested downgrade" in refused.stdout
