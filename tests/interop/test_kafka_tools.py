"""Apache Kafka 4.4.0's own command-line tools against a kraftwerk cluster (3 controllers,
2 brokers, the StandardAuthorizer with ANONYMOUS as a super user, metadata.version 3.7-IV4).

Each test runs the tool's main class as an operator runs the shell script, through
`--bootstrap-controller` (the controllers) and `--bootstrap-server` (the brokers) where
the tool offers it, and checks what an operator reads: the exit code and the key lines.
Where Kafka's tool itself refuses a path (an option it does not have, an Admin call the
AdminClient does not send to controllers) the test asserts that exact refusal. The table
of every command and path is docs/kafka-tools.md.

One JVM at a time, each bounded by a timeout. Tests run in file order and share the
cluster: the feature tests return metadata.version to 3.7-IV4 before the next ones."""

from __future__ import annotations

import re

import pytest

from cli.local_cluster import STANDARD_AUTHORIZER
from cli.upgrade_story import LocalCluster
from server.controller.features import LATEST_PRODUCTION

from .kafka_tools import ACLS, CLUSTER, CONFIGS, FEATURES, METADATA_QUORUM, TOPICS, ToolRun, run_tool, tools_missing

pytestmark = pytest.mark.e2e

BROKER_IDS = (101, 102)
CONTROLLER_IDS = (1, 2, 3)
START_MV = "3.7-IV4"
PATHS = ("controller", "broker")

# What Kafka 4.4.0's AdminClient answers itself, without sending anything, for an Admin
# call it does not route to controllers (KIP-919).
UNSUPPORTED_ON_CONTROLLERS = ("UnsupportedEndpointTypeException: This Admin API is not yet supported "
                              "when communicating directly with the controller quorum.")


class Cluster:
    def __init__(self, local: LocalCluster) -> None:
        self.local = local
        self.cluster_id = local.cluster_id

    def bootstrap(self, path: str) -> list[str]:
        if path == "controller":
            return ["--bootstrap-controller", self.local.controller_addresses]
        return ["--bootstrap-server", self.local.broker_addresses]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)
    local = LocalCluster(tmp_path_factory.mktemp("kafka-tools-cluster"), controllers=len(CONTROLLER_IDS),
                         brokers=len(BROKER_IDS), metadata_version=START_MV,
                         extra={"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"})
    try:
        local.bring_up()
        yield Cluster(local)
    finally:
        local.stop_all()


def ok(run: ToolRun) -> ToolRun:
    assert run.returncode == 0, run.describe()
    return run


def tool(main_class: str, cluster: Cluster, path: str, *args: str) -> ToolRun:
    return run_tool(main_class, *cluster.bootstrap(path), *args)


# --------------------------------------------------------------------------
# kafka-features (FeatureCommand)
# --------------------------------------------------------------------------

_FEATURE_LINE = re.compile(r"^Feature: (\S+)\s+SupportedMinVersion: (.+?)\s+SupportedMaxVersion: (.+?)\s+"
                           r"FinalizedVersionLevel: (.+?)\s+Epoch: (\S+)$")


def described_features(run: ToolRun) -> dict[str, dict[str, str]]:
    features = {}
    for line in ok(run).lines:
        match = _FEATURE_LINE.match(line)
        assert match, f"not a feature line: {line!r}\n{run.describe()}"
        name, low, high, finalized, epoch = match.groups()
        features[name] = {"min": low, "max": high, "finalized": finalized, "epoch": epoch}
    return features


@pytest.mark.parametrize("path", PATHS)
def test_features_describe(cluster, path):
    features = described_features(tool(FEATURES, cluster, path, "describe"))
    assert {"metadata.version", "kraft.version", "group.version", "transaction.version"} <= set(features)
    mv = features["metadata.version"]
    assert mv["finalized"] == START_MV
    assert mv["max"] == LATEST_PRODUCTION.name
    assert features["kraft.version"]["finalized"] == "0"
    assert int(mv["epoch"]) > 0


@pytest.mark.parametrize("path", PATHS)
def test_features_describe_shows_kraftwerks_own_supported_minimum(cluster, path):
    """kraftwerk's own software runs every metadata.version from 3.0-IV1 (clusters it
    upgrades start on 3.x); Kafka 4.4.0's tool names no level below 3.3-IV3 and prints the
    number (docs/kip-differences.md)."""
    features = described_features(tool(FEATURES, cluster, path, "describe"))
    assert features["metadata.version"]["min"] == "UNKNOWN 1"


def test_a_quorum_running_as_kafka_4_4_shows_its_supported_minimum(tmp_path):
    """Run as a Kafka 4.4 release (`release=4.4`, what `cluster up --release 4.4` does),
    the controllers advertise Kafka 4.4's range, and the tool names its minimum."""
    missing = tools_missing()
    if missing is not None:
        pytest.skip(missing)
    local = LocalCluster(tmp_path / "as-kafka-4.4", controllers=1, brokers=0, release="4.4",
                         metadata_version=START_MV)
    try:
        local.bring_up()
        features = described_features(ok(tool(FEATURES, Cluster(local), "controller", "describe")))
    finally:
        local.stop_all()
    assert (features["metadata.version"]["min"], features["metadata.version"]["max"]) == ("3.3-IV3", "4.4-IV2")


def finalized_mv(cluster: Cluster) -> str:
    return described_features(tool(FEATURES, cluster, "controller", "describe"))["metadata.version"]["finalized"]


def test_features_upgrade_and_downgrade(cluster):
    # --metadata is deprecated in 4.4 (the tool says so on stdout) but still works.
    run = ok(tool(FEATURES, cluster, "controller", "upgrade", "--metadata", "3.8-IV0"))
    assert "metadata.version was upgraded to 20." in run.lines
    assert finalized_mv(cluster) == "3.8-IV0"

    run = ok(tool(FEATURES, cluster, "broker", "upgrade", "--feature", "metadata.version=21"))
    assert run.lines == ["metadata.version was upgraded to 21."]
    assert finalized_mv(cluster) == "3.9-IV0"

    run = ok(tool(FEATURES, cluster, "controller", "downgrade", "--metadata", "3.8-IV0"))
    assert "metadata.version was downgraded to 20." in run.lines
    assert finalized_mv(cluster) == "3.8-IV0"

    run = ok(tool(FEATURES, cluster, "broker", "downgrade", "--feature", "metadata.version=19"))
    assert run.lines == ["metadata.version was downgraded to 19."]
    assert finalized_mv(cluster) == START_MV


@pytest.mark.parametrize("path", PATHS)
def test_features_disable_metadata_version_is_refused(cluster, path):
    run = tool(FEATURES, cluster, path, "disable", "--feature", "metadata.version")
    assert run.returncode == 1, run.describe()
    # Kafka's refusal text (FeatureControlManager: "Invalid update version 0 for feature ...
    # Local controller N only supports versions a-b"); the range is the leader's own.
    assert len(run.lines) == 1, run.describe()
    assert re.fullmatch(r"Could not disable metadata\.version\. The update failed for all features since the "
                        r"following feature had an error: Invalid update version 0 for feature metadata\.version\. "
                        r"Local controller [123] only supports versions \d+-\d+", run.lines[0]), run.describe()
    assert "1 out of 1 operation(s) failed." in run.stderr
    assert finalized_mv(cluster) == START_MV


def test_features_version_mapping(cluster):
    # A local computation of Kafka's tool (its own MetadataVersion catalog): no request.
    run = ok(tool(FEATURES, cluster, "controller", "version-mapping"))
    assert run.lines[0] == "metadata.version=33 (4.4-IV2)"
    assert "kraft.version=1" in run.lines and "transaction.version=2" in run.lines
    run = ok(tool(FEATURES, cluster, "controller", "version-mapping", "--release-version", START_MV))
    assert run.lines == ["metadata.version=19 (3.7-IV4)", "kraft.version=0", "transaction.version=0",
                         "group.version=0", "eligible.leader.replicas.version=0", "share.version=0",
                         "streams.version=0"]


def test_features_feature_dependencies(cluster):
    # Also local to Kafka's tool.
    run = ok(tool(FEATURES, cluster, "broker", "feature-dependencies", "--feature", "metadata.version=20"))
    assert run.lines == ["metadata.version=20 (3.8-IV0) has no dependencies."]
    run = ok(tool(FEATURES, cluster, "broker", "feature-dependencies", "--feature", "transaction.version=2"))
    assert run.lines == ["transaction.version=2 has no dependencies."]


# --------------------------------------------------------------------------
# kafka-metadata-quorum (MetadataQuorumCommand)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_metadata_quorum_status(cluster, path):
    run = ok(tool(METADATA_QUORUM, cluster, path, "describe", "--status"))
    fields = dict(re.match(r"^(\w+):\s+(.*)$", line).groups() for line in run.lines)
    assert fields["ClusterId"] == cluster.cluster_id
    assert int(fields["LeaderId"]) in CONTROLLER_IDS
    assert int(fields["LeaderEpoch"]) >= 1
    assert int(fields["HighWatermark"]) > 0
    voters = re.findall(r'\{"id": (\d+), "endpoints": \["CONTROLLER://127\.0\.0\.1:\d+"\]\}', fields["CurrentVoters"])
    assert sorted(map(int, voters)) == list(CONTROLLER_IDS), run.describe()
    assert sorted(map(int, re.findall(r'"id": (\d+)', fields["CurrentObservers"]))) == list(BROKER_IDS)


@pytest.mark.parametrize("path", PATHS)
def test_metadata_quorum_replication(cluster, path):
    run = ok(tool(METADATA_QUORUM, cluster, path, "describe", "--replication"))
    header, *rows = [line.split("\t") for line in run.lines]
    assert [cell.strip() for cell in header if cell.strip()] == [
        "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    status = {int(row[0]): row[6].strip() for row in rows}
    leaders = [node for node, role in status.items() if role == "Leader"]
    assert len(leaders) == 1 and leaders[0] in CONTROLLER_IDS, run.describe()
    assert {node for node, role in status.items() if role == "Follower"} == set(CONTROLLER_IDS) - set(leaders)
    assert {node for node, role in status.items() if role == "Observer"} == set(BROKER_IDS)


# --------------------------------------------------------------------------
# kafka-topics (TopicCommand): brokers only
# --------------------------------------------------------------------------

def describe_topic(cluster: Cluster, name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    run = ok(tool(TOPICS, cluster, "broker", "--describe", "--topic", name))
    summary, *partitions = run.lines

    def fields(line: str) -> dict[str, str]:
        return dict(part.split(": ", 1) if ": " in part else (part.rstrip(":"), "")
                    for part in line.strip().split("\t"))
    return fields(summary), [fields(line) for line in partitions]


def test_topics_create_list_describe_alter_delete(cluster):
    run = ok(tool(TOPICS, cluster, "broker", "--create", "--topic", "tools-a", "--partitions", "3",
                  "--replication-factor", "2"))
    assert run.lines == ["Created topic tools-a."]
    run = ok(tool(TOPICS, cluster, "broker", "--create", "--topic", "tools-b", "--partitions", "1",
                  "--replication-factor", "1", "--config", "retention.ms=60000"))
    assert run.lines == ["Created topic tools-b."]

    run = ok(tool(TOPICS, cluster, "broker", "--list"))
    assert {"tools-a", "tools-b"} <= set(run.lines)

    summary, partitions = describe_topic(cluster, "tools-a")
    assert (summary["Topic"], summary["PartitionCount"], summary["ReplicationFactor"]) == ("tools-a", "3", "2")
    assert [p["Partition"] for p in partitions] == ["0", "1", "2"]
    for p in partitions:
        replicas = p["Replicas"].split(",")
        assert sorted(map(int, replicas)) == list(BROKER_IDS)
        assert p["Leader"] == replicas[0] and sorted(p["Isr"].split(",")) == sorted(replicas)
    summary, _ = describe_topic(cluster, "tools-b")
    assert summary["Configs"] == "retention.ms=60000"

    run = ok(tool(TOPICS, cluster, "broker", "--alter", "--topic", "tools-a", "--partitions", "5"))
    summary, partitions = describe_topic(cluster, "tools-a")
    assert summary["PartitionCount"] == "5" and len(partitions) == 5

    run = ok(tool(TOPICS, cluster, "broker", "--delete", "--topic", "tools-b"))
    assert "tools-b" not in ok(tool(TOPICS, cluster, "broker", "--list")).lines


def test_topics_have_no_controller_path(cluster):
    run = tool(TOPICS, cluster, "controller", "--list")
    assert run.returncode == 1
    assert "bootstrap-controller is not a recognized option" in run.stderr, run.describe()


# --------------------------------------------------------------------------
# kafka-configs (ConfigCommand)
# --------------------------------------------------------------------------

_CONFIG_LINE = re.compile(r"^  (\S+?)=(.*?) sensitive=(true|false) synonyms=\{(.*)\}$")


def described_configs(run: ToolRun) -> dict[str, tuple[str, str]]:
    """key -> (value, synonyms) from `kafka-configs --describe`'s entries."""
    configs = {}
    for line in ok(run).stdout.splitlines()[1:]:
        match = _CONFIG_LINE.match(line)
        assert match, f"not a config line: {line!r}\n{run.describe()}"
        key, value, _, synonyms = match.groups()
        configs[key] = (value, synonyms)
    return configs


def test_configs_topic(cluster):
    ok(tool(TOPICS, cluster, "broker", "--create", "--topic", "tools-configs", "--partitions", "1",
            "--replication-factor", "2"))
    entity = ("--entity-type", "topics", "--entity-name", "tools-configs")
    run = ok(tool(CONFIGS, cluster, "broker", *entity, "--alter",
                  "--add-config", "retention.ms=120000,cleanup.policy=compact"))
    assert run.lines == ["Completed updating config for topic tools-configs."]
    run = tool(CONFIGS, cluster, "broker", *entity, "--describe")
    assert ok(run).lines[0] == "Dynamic configs for topic tools-configs are:"
    configs = described_configs(run)
    assert {key: value for key, (value, _) in configs.items()} == {"retention.ms": "120000",
                                                                   "cleanup.policy": "compact"}
    assert configs["cleanup.policy"][1].startswith("DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact")

    ok(tool(CONFIGS, cluster, "broker", *entity, "--alter", "--delete-config", "cleanup.policy"))
    configs = described_configs(tool(CONFIGS, cluster, "broker", *entity, "--describe"))
    assert {key: value for key, (value, _) in configs.items()} == {"retention.ms": "120000"}


def test_configs_topic_has_no_controller_path(cluster):
    # Kafka's AdminClient refuses topic configs through controllers itself (KIP-919).
    run = tool(CONFIGS, cluster, "controller", "--entity-type", "topics", "--entity-name", "tools-configs",
               "--describe")
    assert run.returncode == 1
    assert UNSUPPORTED_ON_CONTROLLERS in run.stderr, run.describe()


def test_configs_broker(cluster):
    entity = ("--entity-type", "brokers", "--entity-name", "101")
    run = ok(tool(CONFIGS, cluster, "broker", *entity, "--alter", "--add-config", "log.cleaner.threads=2"))
    assert run.lines == ["Completed updating config for broker 101."]
    run = tool(CONFIGS, cluster, "broker", *entity, "--describe")
    assert ok(run).lines[0] == "Dynamic configs for broker 101 are:"
    assert described_configs(run) == {"log.cleaner.threads": (
        "2", "DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1")}

    # Through the controllers, DescribeCluster lists the controllers (KIP-919), so Kafka's
    # tool does not find broker 101 there: its own message, exit code 0, as with Kafka.
    run = ok(tool(CONFIGS, cluster, "controller", *entity, "--describe"))
    assert run.lines == ["The broker '101' doesn't exist and doesn't have dynamic config."]

    ok(tool(CONFIGS, cluster, "broker", *entity, "--alter", "--delete-config", "log.cleaner.threads"))
    run = tool(CONFIGS, cluster, "broker", *entity, "--describe")
    assert ok(run).lines == ["Dynamic configs for broker 101 are:"]


@pytest.mark.parametrize("path", PATHS)
def test_configs_broker_default(cluster, path):
    entity = ("--entity-type", "brokers", "--entity-default")
    run = ok(tool(CONFIGS, cluster, path, *entity, "--alter", "--add-config", "log.retention.ms=3600000"))
    assert run.lines == ["Completed updating default config for brokers in the cluster."]
    for reader in PATHS:
        run = tool(CONFIGS, cluster, reader, *entity, "--describe")
        assert ok(run).lines[0] == "Default configs for brokers in the cluster are:"
        assert described_configs(run) == {"log.retention.ms": (
            "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000")}
    ok(tool(CONFIGS, cluster, path, *entity, "--alter", "--delete-config", "log.retention.ms"))
    assert ok(tool(CONFIGS, cluster, path, *entity, "--describe")).lines == [
        "Default configs for brokers in the cluster are:"]


# --------------------------------------------------------------------------
# kafka-acls (AclCommand)
# --------------------------------------------------------------------------

def listed_acls(run: ToolRun) -> dict[str, set[str]]:
    """resource pattern -> its ACL lines, from `kafka-acls --list`."""
    acls: dict[str, set[str]] = {}
    resource = None
    for line in ok(run).lines:
        if match := re.match(r"^Current ACLs for resource `(.*)`:$", line):
            resource = match.group(1)
            acls[resource] = set()
        else:
            assert resource is not None, run.describe()
            acls[resource].add(line.strip())
    return acls


TOPIC_PATTERN = "ResourcePattern(resourceType=TOPIC, name=tools-acl, patternType=LITERAL)"
GROUP_PATTERN = "ResourcePattern(resourceType=GROUP, name=tools-g, patternType=PREFIXED)"
ALICE_READ = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
ALICE_WRITE = "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"
BOB_DESCRIBE = "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)"


def test_acls_add_list_remove(cluster):
    run = ok(tool(ACLS, cluster, "broker", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--operation", "Write", "--topic", "tools-acl"))
    assert run.lines[0] == f"Adding ACLs for resource `{TOPIC_PATTERN}`:"
    run = ok(tool(ACLS, cluster, "controller", "--add", "--allow-principal", "User:bob", "--operation",
                  "Describe", "--group", "tools-g", "--resource-pattern-type", "prefixed"))
    assert run.lines[0] == f"Adding ACLs for resource `{GROUP_PATTERN}`:"

    expected = {TOPIC_PATTERN: {ALICE_READ, ALICE_WRITE}, GROUP_PATTERN: {BOB_DESCRIBE}}
    for path in PATHS:
        assert listed_acls(tool(ACLS, cluster, path, "--list")) == expected
    assert listed_acls(tool(ACLS, cluster, "broker", "--list", "--topic", "tools-acl")) == {
        TOPIC_PATTERN: {ALICE_READ, ALICE_WRITE}}

    ok(tool(ACLS, cluster, "broker", "--remove", "--force", "--allow-principal", "User:alice", "--operation",
            "Read", "--topic", "tools-acl"))
    ok(tool(ACLS, cluster, "controller", "--remove", "--force", "--group", "tools-g",
            "--resource-pattern-type", "prefixed"))
    for path in PATHS:
        assert listed_acls(tool(ACLS, cluster, path, "--list")) == {TOPIC_PATTERN: {ALICE_WRITE}}
    ok(tool(ACLS, cluster, "controller", "--remove", "--force", "--topic", "tools-acl"))
    assert listed_acls(tool(ACLS, cluster, "broker", "--list")) == {}


# --------------------------------------------------------------------------
# kafka-cluster (ClusterTool)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_cluster_id(cluster, path):
    # kafka-cluster takes its bootstrap option after the subcommand.
    run = ok(run_tool(CLUSTER, "cluster-id", *cluster.bootstrap(path)))
    assert run.lines == [f"Cluster ID: {cluster.cluster_id}"]


@pytest.mark.parametrize("path", PATHS)
def test_cluster_list_endpoints(cluster, path):
    run = ok(run_tool(CLUSTER, "list-endpoints", *cluster.bootstrap(path)))
    header, *rows = [line.split() for line in run.lines]
    assert header[0] == "ID" and header[-1] == "ENDPOINT_TYPE"
    ids = sorted(int(row[0]) for row in rows)
    if path == "broker":
        assert ids == list(BROKER_IDS) and {(row[4], row[5]) for row in rows} == {("unfenced", "broker")}
    else:
        assert ids == list(CONTROLLER_IDS) and {row[-1] for row in rows} == {"controller"}
