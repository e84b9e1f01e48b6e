"""The whole KIP-778 upgrade story with real processes (3 controllers, 3 broker agents)
and a real client (kafka-python through a broker), asserting at every step."""

from __future__ import annotations

import time

import pytest
from kafka.admin import KafkaAdminClient

from server.controller.features import metadata_version_from_name
from cli.upgrade_story import StoryError, UpgradeStory, log_events

from .helpers import status_node_ids

pytestmark = pytest.mark.e2e

EXIT_TIMEOUT_S = 60.0
MV = "metadata.version"
DESCRIBE_CLUSTER = 60


def level(name: str) -> int:
    return metadata_version_from_name(name).level


def describe_through(address: str) -> tuple[int, int, tuple[int, int]]:
    """(finalized metadata.version, finalized epoch, supported range) as kafka-python sees them."""
    admin = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=10_000, client_id="story-e2e")
    try:
        described = admin.describe_features()[MV]
        return described["finalized"][1], described["finalized_epoch"], described["supported"]
    finally:
        admin.close()


def topic_names(address: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=10_000, client_id="story-e2e")
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def story_written(story: UpgradeStory) -> list[str]:
    return story.probe_written


def wait_exit(cluster, node_id: int) -> int:
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while cluster.exit_code(node_id) is None:
        if time.monotonic() > deadline:
            raise StoryError(f"node {node_id} did not exit")
        time.sleep(0.05)  # another process: nothing to wait on but its exit status
    return cluster.exit_code(node_id)


def test_the_upgrade_story(tmp_path):
    lines: list[str] = []
    story = UpgradeStory(tmp_path / "story", say=lines.append)
    cluster = story.cluster
    broker_ids = [b.node_id for b in cluster.brokers]
    seen_epochs: list[int] = []

    def after_upgrade(target: str, record) -> None:
        # Every broker is unfenced, and kafka-python, bootstrapped from a broker, sees
        # the new level with a larger epoch.
        assert record.facts["unfenced"] == broker_ids
        finalized, epoch, supported = describe_through(cluster.brokers[0].address)
        assert finalized == level(target) and supported == (1, level("3.7-IV4"))
        assert not seen_epochs or epoch > seen_epochs[-1]
        seen_epochs.append(epoch)
        before, after = record.facts["before"], record.facts["after"]
        for broker_id in broker_ids:
            # Every broker renegotiated with the controller at this level, without a restart...
            events = [e for e in cluster.renegotiations(broker_id) if e["metadata_version"] == target]
            assert events, f"broker {broker_id} did not renegotiate at {target}"
            negotiated = events[-1]["versions"]
            assert negotiated["BrokerRegistration"] == (4 if level(target) >= level("3.7-IV2") else 1)
            assert negotiated["BrokerHeartbeat"] == (2 if level(target) >= level("3.7-IV2") else 0)
            # ... kept its client connections (an upgrade only adds versions: what a client
            # was told is still served, and closing would race with its next request) ...
            closed = [e for e in log_events(cluster.spec(broker_id).log_path, "broker.client_connections_closed")
                      if e["metadata_version"] == target]
            assert closed and all(e["connections"] == 0 for e in closed), closed
            # ... and advertises the versions this level allows (DescribeCluster v1 from 3.7-IV0).
            expected = 1 if level(target) >= level("3.7-IV0") else 0
            assert after[broker_id][DESCRIBE_CLUSTER] == (0, expected)
            if target == "3.7-IV0":
                assert before[broker_id][DESCRIBE_CLUSTER] == (0, 0)
        if target == "3.7-IV0":
            # A 3.5 broker joining now is refused and stays fenced; it says why and retries.
            newcomer = cluster.add_broker(release="3.5")
            cluster.start(newcomer)
            cluster.wait_until("the 3.5 broker to be refused twice", lambda: len(
                log_events(cluster.spec(newcomer).log_path, "broker.registration_refused")) >= 2)
            refusal = log_events(cluster.spec(newcomer).log_path, "broker.registration_refused")[-1]
            assert refusal["reasons"] == ["metadata.version is finalized at 15 (3.7-IV0), but this node "
                                          "supports 1-11"]
            assert cluster.alive(newcomer) and newcomer not in cluster.unfenced()
            cluster.stop(newcomer)
            cluster.brokers.remove(cluster.spec(newcomer))
            # A member restarted on software that cannot run the finalized level stops non-zero.
            victim = broker_ids[-1]
            cluster.stop(victim)
            cluster.releases[victim] = "3.6"
            cluster.start(victim)
            assert wait_exit(cluster, victim) != 0
            assert log_events(cluster.spec(victim).log_path, "broker.unsupported_finalized_level")
            assert victim not in cluster.unfenced()
            cluster.processes.pop(victim)
            cluster.releases[victim] = "3.7"
            cluster.start(victim)
            cluster.wait_unfenced([victim])

    try:
        records = story.run(after_upgrade=after_upgrade)
        by_title = {r.title: r for r in records}
        # Start: release 3.5 everywhere, every broker unfenced.
        assert by_title["started"].facts["unfenced"] == broker_ids
        # The roll: every node on 3.7; brokers unfenced again; the cluster kept answering.
        rolled = by_title["rolled"].facts
        assert rolled["supported"] == (1, level("3.7-IV4")) and rolled["unfenced"] == broker_ids
        probe = by_title["client probe"].facts
        assert probe["answers"] > 100 and probe["reconnects"] >= 1
        # Connections were closed and re-established, but the client never went long
        # without an answer (well inside a broker session timeout).
        assert probe["longest_gap_s"] < 9.0
        # Lossless downgrade: nothing dropped, every broker still carries its log dir.
        assert by_title["lossless downgrade"].facts["view"].finalized[MV] == level("3.7-IV2")
        lossy = by_title["lossy downgrade"].facts
        assert "Refusing to perform the requested downgrade" in lossy["refused"]
        for text in (lossy["dry_run"], lossy["done"]):
            dropped = [part for part in text.split("drops: ")[1].split(". No longer")[0].split("; ")]
            assert [d.split(":")[0] for d in dropped] == [f"broker {b}" for b in broker_ids]
            assert all("RegisterBrokerRecord.LogDirs (since 3.7-IV2)" in d for d in dropped)
        assert lossy["view"].finalized[MV] == level("3.6-IV2")
        assert lossy["unfenced"] == broker_ids
        # KIP-853 on the same cluster: kraft.version 1, controller 1 replaced by controller 4
        # online, while the client's topic creations went on through the brokers.
        replaced = by_title["controller replaced"].facts
        assert (replaced["added"], replaced["removed"]) == (4, 1)
        assert status_node_ids(replaced["status"], "CurrentVoters") == [2, 3, 4]
        assert '"directoryId": ' in replaced["status"]
        assert replaced["written"] > 0
        assert "kraft.version was upgraded to 1." in "\n".join(lines)
        written = set(story_written(story))
        assert written <= topic_names(cluster.brokers[0].address)
        # Both survive restarts of every node.
        for spec in cluster.specs:
            cluster.stop(spec.node_id)
            cluster.start(spec.node_id)
        cluster.wait_unfenced(broker_ids)
        finalized, epoch, _ = describe_through(cluster.brokers[1].address)
        # The quorum step ended at 3.9-IV0 (on release 3.9, for kraft.version 1).
        assert finalized == level("3.9-IV0") and epoch > seen_epochs[-1]
    finally:
        cluster.stop_all()
