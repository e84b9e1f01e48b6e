"""Differential tests: Apache Kafka 4.4.0's KRaft controllers beside kraftwerk's.

Three `kafka.Kafka` processes with process.roles=controller (formatted by Kafka's own
StorageTool, `--release-version 4.4-IV2`) and three kraftwerk controllers (formatted at
metadata.version 4.4-IV2) receive the same requests from the same client code
(tests/kafka_peer/diff_driver.py): valid ones, edge cases and malformed raw frames. Each
answer is decoded with our codec (or recorded as a closed connection, or silence),
normalised (cluster ids, ports, topic ids, epochs and offsets that count history,
timestamps, throttle, which node was elected) and compared field by field.

Every difference must be explained by an entry of KNOWN_DIFFERENCES (the one list: case,
path, the values on each side, the reason; each has a row in docs/kip-differences.md), and
every entry must still explain a difference: a fix on either side shows as a stale entry.

Requests go to the active controller of each quorum (found as bench/bench_kafka_peer.py
does: a BrokerHeartbeat for a broker nobody registered is answered STALE_BROKER_EPOCH by
the active controller and NOT_CONTROLLER by a standby, on both), or to a standby where the
case says so. Writes are undone by the sequence that made them (the quorums stay at their
formatted levels between tests).

The whole module is `e2e` and `slow` (three JVMs and three kraftwerk processes; under
CI=true a missing Java or Kafka classpath fails, naming the component).
"""

from __future__ import annotations

import re
import struct
import time
from dataclasses import dataclass

import pytest

from cli import local_cluster as lc
from cli.upgrade_story import LocalCluster
from protocol.errors import ErrorCode
from protocol.frames import encode_request
from server.storage.meta_properties import random_uuid_string

from . import diff_driver as dd
from .diff_driver import MISSING, Known
from .kafka_nodes import (
    BENIGN,
    Benign,
    KafkaNode,
    KafkaNodeConfig,
    problems,
    quorum_voters,
    server_missing,
    stop_all,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

METADATA_VERSION = "4.4-IV2"
MV_LEVEL = 33  # 4.4-IV2
NODE_IDS = (1, 2, 3)
WAIT_S = 120.0  # start-up of three JVMs beside three Python controllers on a loaded 2-core machine
POLL_S = 0.2  # other processes' state has no event to wait on
SILENCE_S = 3.0  # how long a node may say nothing to a frame it is still waiting to complete

API_VERSIONS, CREATE_TOPICS, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 18, 19, 29, 30, 31
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLIENT_QUOTAS = 32, 44, 48
DESCRIBE_QUORUM, UPDATE_FEATURES, DESCRIBE_CLUSTER, BROKER_HEARTBEAT = 55, 57, 60, 63
UPGRADE, SAFE, UNSAFE = 1, 2, 3
BROKER_RESOURCE, CLUSTER_DEFAULT = 4, ""
UNKNOWN_BROKER_ID = 999_999


# --------------------------------------------------------------------------
# KNOWN_DIFFERENCES: case -> the differences kept, each with its reason
# (docs/kip-differences.md, "Kafka 4.4.0's controllers, request by request")
# --------------------------------------------------------------------------

R_NOT_SERVED = ("kraftwerk's controllers do not serve this API (delegation tokens, partition reassignment, "
                "leader election, KIP-919 controller unregistration)")
R_KIP896 = ("Kafka 4.0 removed these old versions (KIP-896); kraftwerk still serves them: it runs and "
            "impersonates 3.x releases")
R_FETCH = "a kraftwerk controller serves Fetch only as the KRaft RPC, at the version its Raft peers speak (v17)"
R_DECLARED = ("kraftwerk's protocol declaration ends one version earlier (Vote v2: KIP-996 pre-vote, for which "
              "kraftwerk uses a tagged field; DescribeCluster v2: KIP-1073 IncludeFencedBrokers)")
R_SERVED_EXTRA = ("served by kraftwerk's controllers so clients can bootstrap from them and read back their "
                  "writes (Metadata, DescribeClientQuotas) and for the ZooKeeper migration (DescribeMigration)")
R_MV_CATALOG = "kraftwerk still knows the 3.x metadata.versions Kafka 4 dropped (from 3.0-IV1, level 1)"
R_ENDPOINT_TYPE = "kraftwerk's controllers answer DescribeCluster for brokers too (the controllers, then the brokers)"
R_STANDBY = "kraftwerk's standbys relay DescribeQuorum to the active controller; Kafka's answer NOT_LEADER_OR_FOLLOWER"
R_UNSAFE = "KIP-778's lossy downgrade, which Kafka refuses, is performed by kraftwerk (validate-only here)"
R_DUPLICATE = "the same feature twice in one UpdateFeatures is INVALID_REQUEST; Kafka's controller keeps the last"
R_READ_ONLY = ("kraftwerk's controllers apply the read-only check Kafka's brokers apply before forwarding "
               "(a client reaches kraftwerk's controllers directly); Kafka's controller stores any broker key")
R_CLUSTER_MIN_ISR = ("Kafka 4.4 with eligible.leader.replicas.version 1 writes a cluster-level "
                     "min.insync.replicas; kraftwerk models no ELR")
R_QUOTAS = "kraftwerk's controllers answer DescribeClientQuotas; Kafka's close the connection (brokers only)"

MISSING_APIS = (38, 39, 40, 41, 43, 45, 46, 94)
EXTRA_APIS = (3, 48, 10001)


def _api_versions_known(version: int) -> tuple[Known, ...]:
    keys = "response.api_keys.api_key="
    known = [Known(f"{keys}{key}", R_NOT_SERVED, kraftwerk=MISSING) for key in MISSING_APIS]
    known += [Known(f"{keys}{key}", R_SERVED_EXTRA, kafka=MISSING) for key in EXTRA_APIS]
    known += [Known(f"{keys}1.min_version", R_FETCH, 4, 17), Known(f"{keys}1.max_version", R_FETCH, 18, 17),
              Known(f"{keys}52.max_version", R_DECLARED, 2, 1),
              Known(f"{keys}60.max_version", R_DECLARED, 2, 1),
              Known(f"{keys}19.min_version", R_KIP896, 2, 0), Known(f"{keys}20.min_version", R_KIP896, 1, 0),
              Known(f"{keys}32.min_version", R_KIP896, 1, 0)]
    if version >= 3:
        known.append(Known("response.supported_features.name=metadata.version.min_version", R_MV_CATALOG, 7, 1))
    return tuple(known)


def _endpoint_type_known(version: int) -> tuple[Known, ...]:
    return (Known("response.error_code", R_ENDPOINT_TYPE, 42 if version == 0 else 114, 0),
            Known("response.error_message", R_ENDPOINT_TYPE,
                  "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type "
                  "BROKER", None),
            Known("response.controller_id", R_ENDPOINT_TYPE, -1, "<elected>"),
            Known("response.brokers", R_ENDPOINT_TYPE, [], ANY_VALUE))


ANY_VALUE = dd.ANY
QUORUM_PARTITION = "response.topics.topic_name=__cluster_metadata.partitions.partition_index=0"


def _standby_quorum_known(version: int) -> tuple[Known, ...]:
    known = [Known(f"{QUORUM_PARTITION}.error_code", R_STANDBY, 6, 0),
             Known(f"{QUORUM_PARTITION}.leader_id", R_STANDBY, 0, "<elected>"),
             Known(f"{QUORUM_PARTITION}.leader_epoch", R_STANDBY, 0, "<history>"),
             Known(f"{QUORUM_PARTITION}.high_watermark", R_STANDBY, 0, "<history>"),
             Known(f"{QUORUM_PARTITION}.current_voters", R_STANDBY, [], ANY_VALUE)]
    if version >= 2:
        known += [Known(f"{QUORUM_PARTITION}.error_message", R_STANDBY,
                        "For requests intended only for the leader, this error indicates that the broker is not "
                        "the current leader. For requests intended for any replica, this error indicates that "
                        "the broker is not a replica of the topic partition.", ""),
                  Known("response.nodes", R_STANDBY, [], ANY_VALUE)]
    return tuple(known)


def _mv_range_refusal(level: int, supported: str) -> str:
    return ("The update failed for all features since the following feature had an error: Invalid update version "
            f"{level} for feature metadata.version. Local controller <elected> only supports versions {supported}")


def _closed_by_kafka(reason: str) -> tuple[Known, ...]:
    return (Known("outcome", reason, dd.CLOSED, dd.ANSWERED), Known("response", reason, None, ANY_VALUE))


KNOWN_DIFFERENCES: dict[str, tuple[Known, ...]] = {
    **{f"api_versions/v{v}": _api_versions_known(v) for v in range(6)},
    "describe_cluster/v0/active/brokers": _endpoint_type_known(0),
    "describe_cluster/v0/standby/brokers": _endpoint_type_known(0),
    "describe_cluster/v1/active/brokers": _endpoint_type_known(1),
    "describe_cluster/v1/standby/brokers": _endpoint_type_known(1),
    **{f"describe_quorum/v{v}/standby": _standby_quorum_known(v) for v in range(3)},
    "update_features/metadata.version unsafe downgrade (validate only)": (
        Known("response.error_code", R_UNSAFE, ErrorCode.INVALID_UPDATE_VERSION, 0),
        Known("response.error_message", R_UNSAFE,
              "The update failed for all features since the following feature had an error: Unsupported "
              "metadata.version downgrade from 33 to 32. Unsafe metadata downgrade is not supported in this "
              "version.", ANY_VALUE),
        Known("response.results", R_UNSAFE, [], ANY_VALUE)),
    **{f"update_features/metadata.version {what}": (
        Known("response.error_message", R_MV_CATALOG, _mv_range_refusal(level, "7-33"), _mv_range_refusal(level, "1-33")),)
       for what, level in (("beyond supported", MV_LEVEL + 1), ("unknown level", 2000))},
    "update_features/duplicate feature": (
        Known("response.error_code", R_DUPLICATE, 0, ErrorCode.INVALID_REQUEST),
        Known("response.error_message", R_DUPLICATE, None, "Duplicate feature update for group.version."),
        Known("response.results", R_DUPLICATE, ANY_VALUE, [])),
    **{f"configs/incremental v{v} read-only key": (
        Known("response.responses.resource_name=.error_code", R_READ_ONLY, 0, ErrorCode.INVALID_REQUEST),
        Known("response.responses.resource_name=.error_message", R_READ_ONLY, None,
              "Invalid config value for resource ConfigResource(type=BROKER, name=''): Cannot update these "
              "configs dynamically: Set(broker.id)")) for v in (0, 1)},
    "configs/describe v0": _closed_by_kafka(R_KIP896),
    "configs/describe all": (
        Known("response.results.resource_name=.configs", R_CLUSTER_MIN_ISR, ANY_VALUE, []),),
    "create_topics/v0": _closed_by_kafka(R_KIP896),
    "create_topics/v1": _closed_by_kafka(R_KIP896),
    "describe_client_quotas/v0": _closed_by_kafka(R_QUOTAS),
    "describe_client_quotas/v1": _closed_by_kafka(R_QUOTAS),
}


# What a Kafka controller quorum prints here without pointing at a problem, besides
# kafka_nodes.BENIGN. Anything else at WARN/ERROR fails the module at its end.
CONTROLLER_BENIGN: tuple[Benign, ...] = BENIGN + (
    Benign("ERROR", "ControllerApis", re.compile(r"Unexpected error handling request RequestHeader\(apiKey="
                                                 r"BROKER_HEARTBEAT.*brokerId=%d," % UNKNOWN_BROKER_ID),
           "finding the active controller: a standby answers our heartbeat for an unknown broker "
           "NOT_CONTROLLER and logs it at ERROR", detail=re.compile(r"NotControllerException")),
    Benign("ERROR", "ControllerApis", re.compile(r"Unexpected error handling request RequestHeader\(apiKey="
                                                 r"CONTROLLER_REGISTRATION,"),
           "a Kafka controller registers with the leader it last knew; when leadership moves during start-up "
           "(a second election on a busy machine), the former leader answers NOT_CONTROLLER and logs it at "
           "ERROR, and the registration manager asks the new leader", detail=re.compile(r"NotControllerException")),
    Benign("ERROR", "ControllerApis", re.compile(r"Unexpected error handling request RequestHeader\(apiKey="
                                                 r"API_VERSIONS,"),
           "Kafka's own start-up race: a controller's listener answers another controller's Raft client before "
           "its raft manager is set (NullPointerException in ControllerServer.startup); the peer asks again",
           detail=re.compile(r"NullPointerException: .*ControllerServer\.raftManager\(\)\" is null")),
    Benign("WARN", "QuorumController", re.compile(r"^\[QuorumController id=\d\] Performing controller activation\."),
           "every controller that becomes active logs this at WARN (a leadership move during the module makes "
           "a second one); the first leader of a freshly formatted quorum adds that it writes the bootstrap records"),
    Benign("WARN", "FeatureControlManager", re.compile(r"Upgrading metadata\.version from 4\.4-IV2 to 4\.4-IV2\."),
           "Kafka logs a validate-only metadata.version update to the current level at WARN"),
    Benign("WARN", "QuorumController", re.compile(r"Renouncing the leadership due to a metadata log event\. .*"
                                                  r"the leader is \(none\)"),
           "the module's end stops all three controllers at once: the leader loses its quorum"),
    Benign("WARN", "KafkaRaftClient", re.compile(r"Graceful shutdown timed out after \d+ms"),
           "the module's end stops all three controllers at once: nobody is left to hand leadership to"),
    Benign("ERROR", "KafkaRaftClientDriver", re.compile(r"Graceful shutdown of RaftClient failed"),
           "the same graceful-shutdown timeout, reported by the Raft driver",
           detail=re.compile(r"TimeoutException")),
    Benign("WARN", "NetworkClient", re.compile(r"Attempting to close NetworkClient that has already been closed\."),
           "Kafka's shutdown closes the registration channel twice"),
    Benign("WARN", "FeatureControlManager", re.compile(r"^\[QuorumController id=\d\] (Invalid update version -?\d+ "
                                                       r"for feature \S+\.|Unsupported metadata\.version downgrade )"),
           "Kafka logs every refused feature update at WARN; the UpdateFeatures sequence sends them on purpose"),
    Benign("ERROR", "Processor", re.compile(r"^(Closing socket for|Exception while processing request from) "
                                            r"127\.0\.0\.1:"),
           "the raw frames, removed versions and unserved APIs this module sends on purpose",
           detail=re.compile(r"^org\.apache\.kafka\.common\.errors\.(UnsupportedVersion|InvalidRequest)Exception")),
    Benign("WARN", "Selector", re.compile(r"Unexpected error from /127\.0\.0\.1 .*; closing connection"),
           "the size prefixes (negative, beyond socket.request.max.bytes) this module sends on purpose",
           detail=re.compile(r"^org\.apache\.kafka\.common\.network\.InvalidReceiveException")),
)


# --------------------------------------------------------------------------
# The two quorums
# --------------------------------------------------------------------------

@dataclass
class Quorums:
    kafka: dict[int, str]  # node id -> address
    kraftwerk: dict[int, str]

    def system(self, name: str) -> dict[int, str]:
        return self.kafka if name == "kafka" else self.kraftwerk

    def active(self, name: str) -> str:
        return self._find(name, want_active=True)

    def standby(self, name: str) -> str:
        return self._find(name, want_active=False)

    def _find(self, name: str, want_active: bool) -> str:
        """A BrokerHeartbeat for a broker nobody registered: STALE_BROKER_EPOCH from the
        active controller, NOT_CONTROLLER from a standby (both systems)."""
        wanted = ErrorCode.STALE_BROKER_EPOCH if want_active else ErrorCode.NOT_CONTROLLER
        deadline = time.monotonic() + WAIT_S
        last = "no answer"
        while time.monotonic() < deadline:
            for address in self.system(name).values():
                try:
                    outcome = dd.request_once(address, BROKER_HEARTBEAT, 1, {
                        "broker_id": UNKNOWN_BROKER_ID, "broker_epoch": -1, "current_metadata_offset": 0,
                        "want_fence": True, "want_shut_down": False})
                except OSError as exc:
                    last = f"{address}: {exc}"
                    continue
                if outcome.kind == dd.ANSWERED and outcome.body["error_code"] == wanted:
                    return address
                last = f"{address}: {outcome}"
            time.sleep(POLL_S)
        pytest.fail(f"{name}: no {'active' if want_active else 'standby'} controller within {WAIT_S:.0f} s ({last})")

    def both(self, api_key: int, version: int, body: dict, standby: bool = False) -> tuple[dd.Outcome, dd.Outcome]:
        """The same request to each quorum's active controller (or a standby)."""
        pick = self.standby if standby else self.active
        return tuple(dd.request_once(pick(name), api_key, version, body) for name in ("kafka", "kraftwerk"))

    def raw(self, frame: bytes, api_key: int, version: int, timeout_s: float) -> tuple[dd.Outcome, dd.Outcome]:
        """The same bytes to each active controller; what each did with them."""
        outcomes = []
        for name in ("kafka", "kraftwerk"):
            with dd.Conn(self.active(name), timeout_s=timeout_s) as conn:
                conn.send_raw(frame)
                outcomes.append(conn.read_answer(api_key, version))
        return tuple(outcomes)


def _accepts_feature_updates(address: str) -> bool:
    """Kafka's active controller refuses feature changes until every controller has
    registered (KIP-919); a validate-only no-op update says when that is done."""
    try:
        outcome = dd.request_once(address, UPDATE_FEATURES, 1, _features_body([("metadata.version", MV_LEVEL,
                                                                                UPGRADE)], validate_only=True))
    except OSError:
        return False
    return outcome.kind == dd.ANSWERED and outcome.body["error_code"] == ErrorCode.NONE


@pytest.fixture(scope="module")
def quorums(tmp_path_factory):
    missing = server_missing()
    if missing is not None:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("differential")
    base = lc.free_port_run(len(NODE_IDS))
    voters = quorum_voters((node_id, f"127.0.0.1:{base + i}") for i, node_id in enumerate(NODE_IDS))
    kafka = [KafkaNode(KafkaNodeConfig(node_id, base + i, work / f"kafka-{node_id}", voters, roles=("controller",)))
             for i, node_id in enumerate(NODE_IDS)]
    kraftwerk = LocalCluster(work / "kraftwerk", controllers=len(NODE_IDS), brokers=0,
                             metadata_version=METADATA_VERSION)
    try:
        cluster_id = random_uuid_string()
        for node in kafka:
            node.format(cluster_id, "--release-version", METADATA_VERSION)
        # The JVMs start first and warm up while kraftwerk formats and starts.
        for node in kafka:
            node.start()
        kraftwerk.bring_up()
        for node in kafka:
            node.wait_ready()
        found = Quorums({n.node_id: n.address for n in kafka},
                        {s.node_id: s.address for s in kraftwerk.controllers})
        for name in ("kafka", "kraftwerk"):
            deadline = time.monotonic() + WAIT_S
            while not _accepts_feature_updates(found.active(name)):
                if time.monotonic() > deadline:
                    pytest.fail(f"{name}: UpdateFeatures still refused {WAIT_S:.0f} s after start-up")
                time.sleep(POLL_S)
        yield found
    finally:
        killed = stop_all(kafka)
        kraftwerk.stop_all()
    logged = [e.describe() for node in kafka for e in problems(node.new_entries(), CONTROLLER_BENIGN)]
    assert not killed, f"Kafka controllers {killed} needed SIGKILL to stop"
    assert not logged, "Kafka controllers logged problems:\n" + "\n".join(logged)


# --------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------

def differences(case: str, kafka: dd.Outcome, kraftwerk: dd.Outcome) -> list[str]:
    """What `case` shows that KNOWN_DIFFERENCES does not explain (and its stale entries)."""
    found = dd.diff(dd.normalise(kafka.plain()), dd.normalise(kraftwerk.plain()))
    left, unused = dd.unexplained(found, KNOWN_DIFFERENCES.get(case, ()))
    report = [f"{case}: {d}" for d in left]
    report += [f"{case}: KNOWN_DIFFERENCES entry explains nothing (fixed? remove it): {k.path}" for k in unused]
    return report


def assert_same(case: str, kafka: dd.Outcome, kraftwerk: dd.Outcome) -> None:
    report = differences(case, kafka, kraftwerk)
    assert not report, "\n".join(report)


def compare_all(quorums: Quorums, cases: list[tuple[str, int, int, dict, bool]]) -> None:
    """Each (case, api key, version, body, standby) in order; every difference is reported
    together at the end."""
    report: list[str] = []
    for case, api_key, version, body, standby in cases:
        kafka, kraftwerk = quorums.both(api_key, version, body, standby=standby)
        report += differences(case, kafka, kraftwerk)
    assert not report, "\n".join(report)


def test_known_differences_name_real_cases():
    """An entry for a case nobody runs would hide nothing and rot: every key is a case."""
    cases = set(KNOWN_DIFFERENCES)
    ran = ({f"api_versions/v{v}" for v in range(6)}
           | {f"describe_cluster/v{v}/{role}/brokers" for v in (0, 1) for role in ("active", "standby")}
           | {f"describe_quorum/v{v}/standby" for v in range(3)}
           | {f"update_features/{name}" for name, *_ in FEATURE_STEPS}
           | {f"configs/incremental v{v} read-only key" for v in (0, 1)}
           | {"configs/describe v0", "configs/describe all", "create_topics/v0", "create_topics/v1",
              "describe_client_quotas/v0", "describe_client_quotas/v1"})
    assert cases <= ran, sorted(cases - ran)


# --------------------------------------------------------------------------
# ApiVersions, DescribeCluster, DescribeQuorum
# --------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(6))
def test_api_versions(quorums, version):
    kafka, kraftwerk = quorums.both(API_VERSIONS, version, {"client_software_name": "kraftwerk-differential",
                                                            "client_software_version": "1.0"})
    assert kafka.kind == kraftwerk.kind == dd.ANSWERED
    assert_same(f"api_versions/v{version}", kafka, kraftwerk)
    # The finalized levels are the formatted ones on both: compared above, named here.
    finalized = {f["name"]: f["max_version_level"] for f in kraftwerk.body.get("finalized_features", [])}
    if version >= 3:
        assert finalized["metadata.version"] == MV_LEVEL


@pytest.mark.parametrize("asked, code", [
    # Kafka's controllers leave KIP-1242's check to brokers: answered as any other.
    ({"cluster_id": "another-cluster-AAAAAAAAA", "node_id": 1}, ErrorCode.NONE),
    ({"cluster_id": "another-cluster-AAAAAAAAA", "node_id": -1}, ErrorCode.INVALID_REQUEST),
    ({"cluster_id": None, "node_id": 1}, ErrorCode.INVALID_REQUEST),
    ({"cluster_id": None, "node_id": -1, "client_software_name": "bad name!"}, ErrorCode.INVALID_REQUEST),
], ids=["another cluster", "cluster without node", "node without cluster", "bad software name"])
def test_api_versions_refusals(quorums, asked, code):
    """KIP-1242 (v5) on controllers: ClusterId and NodeId come both or neither, and a
    client naming another cluster is answered (only brokers tell it to rebootstrap);
    KIP-511's software name pattern. Refusals carry no API list, on both."""
    kafka, kraftwerk = quorums.both(API_VERSIONS, 5, {"client_software_name": "kraftwerk-differential",
                                                      "client_software_version": "1.0", **asked})
    assert kafka.kind == kraftwerk.kind == dd.ANSWERED
    assert kafka.body["error_code"] == code
    if code == ErrorCode.NONE:
        # A full answer: its contents are test_api_versions's.
        assert kraftwerk.body["error_code"] == code and kafka.body["api_keys"] and kraftwerk.body["api_keys"]
    else:
        assert_same(f"api_versions/v5 refused: {asked}", kafka, kraftwerk)


@pytest.mark.parametrize("version,endpoint_type", [(0, 1), (1, 1), (1, 2)])
@pytest.mark.parametrize("standby", [False, True], ids=["active", "standby"])
def test_describe_cluster(quorums, version, endpoint_type, standby):
    kafka, kraftwerk = quorums.both(DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": False, "endpoint_type": endpoint_type}, standby=standby)
    role = "standby" if standby else "active"
    kind = "brokers" if endpoint_type == 1 else "controllers"
    assert_same(f"describe_cluster/v{version}/{role}/{kind}", kafka, kraftwerk)


QUORUM_TOPIC = {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}


@pytest.mark.parametrize("version", range(3))
@pytest.mark.parametrize("standby", [False, True], ids=["active", "standby"])
def test_describe_quorum(quorums, version, standby):
    kafka, kraftwerk = quorums.both(DESCRIBE_QUORUM, version, {"topics": [QUORUM_TOPIC]}, standby=standby)
    assert_same(f"describe_quorum/v{version}/{'standby' if standby else 'active'}", kafka, kraftwerk)
    if not standby:
        partition = kraftwerk.body["topics"][0]["partitions"][0]
        assert sorted(v["replica_id"] for v in partition["current_voters"]) == list(NODE_IDS)


def test_describe_quorum_unknown_partitions(quorums):
    compare_all(quorums, [
        (f"describe_quorum/v{v}/{name}", DESCRIBE_QUORUM, v, {"topics": topics}, False)
        for v in range(3)
        for name, topics in (
            ("other topic", [{"topic_name": "other", "partitions": [{"partition_index": 0}]}]),
            ("partition 1", [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}]),
            ("beside a valid one", [{"topic_name": "other", "partitions": [{"partition_index": 0}]}, QUORUM_TOPIC]),
            ("no topics", []))])


# --------------------------------------------------------------------------
# UpdateFeatures
# --------------------------------------------------------------------------

def _features_body(updates, validate_only: bool = False) -> dict:
    return {"timeout_ms": 30_000, "validate_only": validate_only, "feature_updates": [
        {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type,
         "allow_downgrade": upgrade_type != UPGRADE} for feature, level, upgrade_type in updates]}


# (case, version, updates, validate_only), run in this order: every write is undone by a
# later step, so the quorums end where they started (group.version 1, transaction.version 2).
FEATURE_STEPS = (
    ("group.version downgrade v0 (validate only)", 0, [("group.version", 0, SAFE)], True),
    ("group.version downgrade v1 (validate only)", 1, [("group.version", 0, SAFE)], True),
    ("group.version downgrade v2 (validate only)", 2, [("group.version", 0, SAFE)], True),
    ("group.version downgrade", 1, [("group.version", 0, SAFE)], False),
    ("group.version upgrade", 1, [("group.version", 1, UPGRADE)], False),
    ("transaction.version downgrade", 2, [("transaction.version", 1, SAFE)], False),
    ("transaction.version upgrade", 2, [("transaction.version", 2, UPGRADE)], False),
    ("transaction.version upgrade again (no-op)", 1, [("transaction.version", 2, UPGRADE)], False),
    ("unknown feature", 1, [("no.such.feature", 1, UPGRADE)], False),
    ("unknown feature disabled", 1, [("no.such.feature", 0, SAFE)], True),
    ("level beyond supported", 1, [("group.version", 5, UPGRADE)], False),
    ("downgrade without the downgrade type", 1, [("group.version", 0, UPGRADE)], False),
    ("downgrade to a newer level", 1, [("group.version", 1, SAFE)], False),
    ("negative level", 1, [("group.version", -1, SAFE)], True),
    ("unknown upgrade type", 1, [("group.version", 1, 7)], True),
    ("metadata.version safe downgrade", 1, [("metadata.version", MV_LEVEL - 1, SAFE)], True),
    ("metadata.version unsafe downgrade (validate only)", 1, [("metadata.version", MV_LEVEL - 1, UNSAFE)], True),
    ("metadata.version beyond supported", 1, [("metadata.version", MV_LEVEL + 1, UPGRADE)], True),
    ("metadata.version unknown level", 1, [("metadata.version", 2000, UPGRADE)], True),
    ("metadata.version same level", 1, [("metadata.version", MV_LEVEL, UPGRADE)], True),
    ("empty updates", 1, [], False),
    ("empty updates v2", 2, [], False),
    ("duplicate feature", 1, [("group.version", 1, UPGRADE), ("group.version", 0, SAFE)], True),
    ("kraft.version upgrade (validate only)", 1, [("kraft.version", 1, UPGRADE)], True),
    ("dependency refused", 1, [("transaction.version", 0, SAFE), ("share.version", 2, UPGRADE)], True),
)


def test_update_features_sequence(quorums):
    compare_all(quorums, [(f"update_features/{name}", UPDATE_FEATURES, version, _features_body(updates, validate),
                           False) for name, version, updates, validate in FEATURE_STEPS])
    # Where both started: the sequence undid its writes.
    kafka, kraftwerk = quorums.both(API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"})
    for outcome in (kafka, kraftwerk):
        levels = {f["name"]: f["max_version_level"] for f in outcome.body["finalized_features"]}
        assert (levels["group.version"], levels["transaction.version"], levels["metadata.version"]) == (1, 2, MV_LEVEL)


# --------------------------------------------------------------------------
# Configs, topics, ACLs, quotas
# --------------------------------------------------------------------------

def _alter(name: str, value: str | None, operation: int = 0, validate_only: bool = True) -> dict:
    return {"resources": [{"resource_type": BROKER_RESOURCE, "resource_name": CLUSTER_DEFAULT, "configs": [
        {"name": name, "config_operation": operation, "value": value}]}], "validate_only": validate_only}


def _describe(keys, synonyms: bool = True) -> dict:
    return {"resources": [{"resource_type": BROKER_RESOURCE, "resource_name": CLUSTER_DEFAULT,
                           "configuration_keys": keys}], "include_synonyms": synonyms,
            "include_documentation": False}


def test_cluster_default_broker_configs(quorums):
    keys = ["log.retention.ms", "no.such.config", "broker.id"]
    cases = []
    for v in (0, 1):
        cases += [(f"configs/incremental v{v} valid", INCREMENTAL_ALTER_CONFIGS, v, _alter("log.retention.ms", "3600000"),
                   False),
                  (f"configs/incremental v{v} unknown name", INCREMENTAL_ALTER_CONFIGS, v,
                   _alter("no.such.config", "1"), False),
                  (f"configs/incremental v{v} read-only key", INCREMENTAL_ALTER_CONFIGS, v, _alter("broker.id", "7"),
                   False),
                  (f"configs/incremental v{v} bad value", INCREMENTAL_ALTER_CONFIGS, v,
                   _alter("log.retention.ms", "abc"), False)]
    cases += [(f"configs/describe v{v}", DESCRIBE_CONFIGS, v, _describe(keys), False) for v in range(5)]
    cases += [("configs/set", INCREMENTAL_ALTER_CONFIGS, 1, _alter("log.retention.ms", "3600000",
                                                                     validate_only=False), False),
              ("configs/describe after set", DESCRIBE_CONFIGS, 4, _describe(keys), False),
              ("configs/describe after set (standby)", DESCRIBE_CONFIGS, 4, _describe(keys), True),
              ("configs/delete", INCREMENTAL_ALTER_CONFIGS, 1, _alter("log.retention.ms", None, operation=1,
                                                                      validate_only=False), False),
              ("configs/describe all", DESCRIBE_CONFIGS, 4, _describe(None, synonyms=False), False)]
    compare_all(quorums, cases)


def _topic(name: str, partitions: int, replication: int) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": replication, "assignments": [],
            "configs": []}


def test_create_topics_without_brokers(quorums):
    body = {"topics": [_topic("differential", 1, 1)], "timeout_ms": 10_000, "validate_only": False}
    compare_all(quorums, [(f"create_topics/v{v}", CREATE_TOPICS, v, body, False) for v in range(8)] + [
        ("create_topics/defaults (validate only)", CREATE_TOPICS, 7,
         {"topics": [_topic("differential", -1, -1)], "timeout_ms": 10_000, "validate_only": True}, False),
        ("create_topics/replication 3", CREATE_TOPICS, 7,
         {"topics": [_topic("differential", 3, 3)], "timeout_ms": 10_000, "validate_only": False}, False)])


ACL_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
ACL_CREATION = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:a",
                "host": "*", "operation": 3, "permission_type": 3}


def test_acls_without_an_authorizer(quorums):
    cases = []
    for v in (1, 2, 3):
        cases += [(f"acls/describe v{v}", DESCRIBE_ACLS, v, ACL_FILTER, False),
                  (f"acls/create v{v}", CREATE_ACLS, v, {"creations": [ACL_CREATION]}, False),
                  (f"acls/delete v{v}", DELETE_ACLS, v, {"filters": [ACL_FILTER]}, False)]
    compare_all(quorums, cases)


def test_describe_client_quotas(quorums):
    compare_all(quorums, [(f"describe_client_quotas/v{v}", DESCRIBE_CLIENT_QUOTAS, v,
                           {"components": [], "strict": False}, False) for v in (0, 1)])


# --------------------------------------------------------------------------
# Raw frames
# --------------------------------------------------------------------------

_SIZE = struct.Struct(">i")


def _api_versions_frame(version: int = 3) -> bytes:
    return encode_request(API_VERSIONS, version, 7, "kraftwerk-differential",
                          {"client_software_name": "kraftwerk-differential", "client_software_version": "1.0"})


def _with_key_version(frame: bytes, api_key: int, version: int) -> bytes:
    return frame[:4] + struct.pack(">hh", api_key, version) + frame[8:]


def _huge_client_id(api_key: int, version: int) -> bytes:
    """A header whose client id says 32,000 bytes follow, and nothing follows."""
    header = struct.pack(">hhih", api_key, version, 7, 32_000)
    return _SIZE.pack(len(header)) + header


RAW_FRAMES = {
    # name: (frame, api key and version to decode an answer as, how long silence may last)
    "truncated": (_api_versions_frame()[:-3], (API_VERSIONS, 3), SILENCE_S),
    "shorter than a header": (_SIZE.pack(4) + _api_versions_frame()[4:8], (API_VERSIONS, 3), dd.IO_TIMEOUT_S),
    "oversized size prefix": (_SIZE.pack(0x7FFF_FFFF) + _api_versions_frame()[4:], (API_VERSIONS, 3),
                              dd.IO_TIMEOUT_S),
    "negative size prefix": (_SIZE.pack(-5) + _api_versions_frame()[4:], (API_VERSIONS, 3), dd.IO_TIMEOUT_S),
    "unknown api key": (_with_key_version(_api_versions_frame(), 999, 0), (API_VERSIONS, 3), dd.IO_TIMEOUT_S),
    "api_versions_unknown_version": (_with_key_version(_api_versions_frame(), API_VERSIONS, 99), (API_VERSIONS, 0),
                                     dd.IO_TIMEOUT_S),
    "describe_quorum beyond its versions": (_with_key_version(_api_versions_frame(), DESCRIBE_QUORUM, 99),
                                            (DESCRIBE_QUORUM, 2), dd.IO_TIMEOUT_S),
    "huge client id (ApiVersions)": (_huge_client_id(API_VERSIONS, 3), (API_VERSIONS, 3), dd.IO_TIMEOUT_S),
    "huge client id (DescribeCluster)": (_huge_client_id(DESCRIBE_CLUSTER, 1), (DESCRIBE_CLUSTER, 1),
                                         dd.IO_TIMEOUT_S),
    "undecodable body": (_SIZE.pack(14) + struct.pack(">hhih", UPDATE_FEATURES, 1, 7, -1) + b"\xff" * 4,
                         (UPDATE_FEATURES, 1), dd.IO_TIMEOUT_S),
}


@pytest.mark.parametrize("name", list(RAW_FRAMES))
def test_raw_frame(quorums, name):
    frame, (api_key, version), timeout_s = RAW_FRAMES[name]
    kafka, kraftwerk = quorums.raw(frame, api_key, version, timeout_s)
    assert_same(f"raw/{name}", kafka, kraftwerk)
    if name == "api_versions_unknown_version":
        # KIP-511: a v0 answer with UNSUPPORTED_VERSION and the ApiVersions range.
        assert kraftwerk.body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    # After any of these the node still serves new connections.
    for side in ("kafka", "kraftwerk"):
        assert dd.request_once(quorums.active(side), API_VERSIONS, 3, {
            "client_software_name": "x", "client_software_version": "1"}).kind == dd.ANSWERED
