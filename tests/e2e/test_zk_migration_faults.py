"""KIP-866 under faults, with real processes and a real ZooKeeper.

- kill -9 of the active controller in the middle of the copy: the next leader aborts
  the open transaction and copies again; the log ends up equal to ZooKeeper, once.
- kill -9 of the active controller during dual writes under a steady stream of
  metadata changes: every acknowledged change is in the log and in ZooKeeper, and the
  two agree; the new leader took ZooKeeper over (/migration names it).
- ZooKeeper stopped and restarted during dual writes: operator writes are refused with
  a retriable error while it is away, and everything committed reaches it afterwards.
- Rollback at MigrationActive and at MigrationFinished, then a second migration from the
  rolled-back state (a stale /migration znode left behind).
"""

from __future__ import annotations

import pytest
import trio

from protocol.errors import ErrorCode
from server.client import KafkaClient
from cli.migration_story import MigrationCluster
from server.storage.meta_properties import random_uuid_string
from server.zk.process import zookeeper_missing
from server.zk.seed import SeedSpec

from .migration_helpers import RETENTION, alter, create_topic

pytestmark = pytest.mark.e2e

def make_cluster(tmp_path, topics: int = 4, partitions: int = 3, **controller_extra) -> MigrationCluster:
    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    seed = SeedSpec(cluster_id=random_uuid_string(), broker_ids=(1, 2, 3), topics=topics,
                    partitions_per_topic=partitions, replication_factor=3)
    return MigrationCluster(tmp_path / "migration", seed=seed, controller_extra=controller_extra)


@pytest.fixture
def cluster(tmp_path):
    cluster = make_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def start_migration(cluster: MigrationCluster) -> None:
    cluster.start_zookeeper()
    cluster.start_zk_brokers()
    cluster.wait_until("three ZooKeeper brokers", lambda: len(cluster.zookeeper_image().brokers) == 3)
    cluster.format_controllers()
    cluster.start_controllers()


def kraft_configs(cluster: MigrationCluster, topics: list[str]) -> dict[str, str | None]:
    async def describe(address: str):
        host, _, port = address.rpartition(":")
        async with await KafkaClient.connect(host, int(port)) as client:
            await client.negotiate()
            return await client.call(32, {"resources": [{"resource_type": 2, "resource_name": t,
                                                         "configuration_keys": [RETENTION]} for t in topics]})
    view = cluster.migration()
    response = trio.run(describe, cluster.address(view.controller_id))
    out = {}
    for result in response.results:
        values = [c.value for c in result.configs if c.name == RETENTION]
        out[result.resource_name] = values[0] if values else None
    return out


def zk_configs(cluster: MigrationCluster, topics: list[str]) -> dict[str, str | None]:
    image = cluster.zookeeper_image()
    return {t: image.topic_configs[t].config.get(RETENTION) if t in image.topic_configs else None for t in topics}


def kraft_topic_names(cluster: MigrationCluster) -> set[str]:
    async def metadata(address: str):
        host, _, port = address.rpartition(":")
        async with await KafkaClient.connect(host, int(port)) as client:
            await client.negotiate()
            return await client.call(3, {"topics": None})
    view = cluster.migration()
    return {t.name for t in trio.run(metadata, cluster.address(view.controller_id)).topics}


def test_a_leader_killed_in_the_middle_of_the_copy(tmp_path):
    # A slow copy (a fault drill: 20 records per command, 300 ms apart) so the kill lands inside it.
    cluster = make_cluster(tmp_path, topics=12, partitions=5, **{"kraftwerk.migration.copy.chunk.records": "20",
                                                                "kraftwerk.migration.copy.pause.ms": "300"})
    try:
        start_migration(cluster)
        leader: list[int] = []

        def copying() -> bool:
            for spec in cluster.controllers:
                if any(e.get("chunk", 0) >= 1 for e in cluster.events(spec.node_id, "migration.copy_progress")):
                    leader.append(spec.node_id)
                    return True
            return False
        cluster.wait_until("the copy to be under way", copying)
        assert not cluster.events(leader[0], "migration.copy_finished")
        cluster.stop(leader[0], kill=True)

        view = cluster.wait_state("MigrationActive")
        assert view.controller_id != leader[0]
        # The new leader found the open transaction and aborted it before copying again.
        assert cluster.events(view.controller_id, "migration.transaction_aborted")
        assert cluster.events(view.controller_id, "migration.copy_finished")
        cluster.wait_caught_up()
        assert kraft_topic_names(cluster) == set(cluster.zookeeper_image().topics)
        # The killed controller comes back, replays the aborted copy and the second one,
        # and agrees: the same committed state everywhere.
        cluster.start_controller(leader[0])
        cluster.wait_controllers_in_step()
    finally:
        cluster.stop_all()


def test_a_leader_killed_during_dual_writes_under_a_stream_of_changes(cluster):
    start_migration(cluster)
    first = cluster.wait_state("MigrationActive")
    cluster.wait_caught_up()
    topics = sorted(cluster.zookeeper_image().topics)
    acked: dict[str, str] = {}
    created: set[str] = set()

    def until_acked(what: str, write, done=(ErrorCode.NONE,)) -> None:
        # A steady stream: each write is retried until acknowledged, through the failover.
        cluster.wait_until(what, lambda: write() in done, timeout_s=60)

    for i in range(60):
        topic, value = topics[i % len(topics)], str(1_000_000 + i)
        until_acked(f"{topic}={value}", lambda: alter(cluster, topic, value))
        acked[topic] = value
        if i % 10 == 5:
            # A creation whose answer was lost in the failover may have committed: retrying
            # it then gets TOPIC_ALREADY_EXISTS (36), which is the acknowledgement.
            until_acked(f"stream-{i}", lambda: create_topic(cluster, f"stream-{i}"), (ErrorCode.NONE, 36))
            created.add(f"stream-{i}")
        if i == 30:
            cluster.stop(first.controller_id, kill=True)
    assert len(created) == 6
    second = cluster.wait_state("MigrationActive")
    assert second.controller_id != first.controller_id
    cluster.wait_caught_up()
    # Every acknowledged change is in the log; ZooKeeper holds exactly the log's values.
    in_log = kraft_configs(cluster, topics)
    assert all(in_log[t] is not None for t in topics)
    assert in_log == acked  # each topic's last acknowledged value, none lost
    assert zk_configs(cluster, topics) == in_log
    # Topics: every acknowledged creation in both stores, and the two agree on the set.
    log_topics = kraft_topic_names(cluster)
    zk_image = cluster.zookeeper_image()
    assert created <= log_topics and set(zk_image.topics) == log_topics
    assert all(len(zk_image.topics[name].assignment.partitions) == 2 for name in created)
    migration = zk_image.migration
    assert migration.kraft_controller_id == second.controller_id
    assert migration.last_offset >= first.zk_last_offset


def test_zookeeper_away_and_back_during_dual_writes(cluster):
    start_migration(cluster)
    cluster.wait_state("MigrationActive")
    cluster.wait_caught_up()
    topics = sorted(cluster.zookeeper_image().topics)
    assert alter(cluster, topics[0], "111") == ErrorCode.NONE
    cluster.zookeeper.stop()
    # ZooKeeper is unreachable: operator writes wait (bounded) and are refused, retriably.
    codes = {alter(cluster, topics[1], "222") for _ in range(2)}
    assert codes == {ErrorCode.REQUEST_TIMED_OUT}
    cluster.zookeeper.restart()
    cluster.wait_until("writes to be accepted again", lambda: alter(cluster, topics[2], "333") == ErrorCode.NONE)
    cluster.wait_caught_up()
    assert zk_configs(cluster, topics) == kraft_configs(cluster, topics)
    assert zk_configs(cluster, topics)[topics[0]] == "111"
    assert zk_configs(cluster, topics)[topics[2]] == "333"
    assert zk_configs(cluster, topics)[topics[1]] != "222"  # refused, so never written


@pytest.mark.parametrize("moved_brokers", [(1,), (1, 2, 3)], ids=["at-MigrationActive", "at-MigrationFinished"])
def test_rollback_then_a_second_migration(cluster, moved_brokers):
    start_migration(cluster)
    cluster.wait_state("MigrationActive")
    topics = sorted(cluster.zookeeper_image().topics)
    for broker_id in moved_brokers:
        cluster.migrate_broker(broker_id)
    expected = "MigrationFinished" if len(moved_brokers) == 3 else "MigrationActive"
    cluster.wait_until("the brokers to move", lambda: set(moved_brokers) <= set(cluster.unfenced_brokers()))
    cluster.wait_state(expected)
    assert alter(cluster, topics[0], "4242") == ErrorCode.NONE  # a change made during dual writes
    cluster.wait_caught_up()

    # Rollback (KIP-866): brokers back to ZooKeeper mode, a clean shutdown of the quorum
    # (it drains the write-behind first), then hand /controller back.
    for broker_id in moved_brokers:
        cluster.stop(broker_id)
        cluster.start_zk_broker(broker_id)
    for spec in cluster.controllers:
        cluster.stop(spec.node_id)
    from cli.main import rollback_zookeeper

    epoch_before = cluster.zookeeper_image().controller_epoch
    lines = rollback_zookeeper(cluster.zk_hosts)
    assert any("deleted /controller" in line for line in lines)
    image = cluster.zookeeper_image()
    assert image.controller is None
    # Controller epochs only grow: brokers that saw the KRaft controller's epoch refuse an
    # older one, so the rollback keeps /controller_epoch for whoever controls next.
    assert image.controller_epoch == epoch_before is not None
    assert image.topic_configs[topics[0]].config[RETENTION] == "4242"  # nothing committed was lost
    # Kafka's rollback deletes /migration: a fresh quorum starts at epoch 1, and a /migration
    # naming the old quorum's later leader (a higher epoch) would fence it for good.
    assert image.migration is None

    # A second migration from the rolled-back state, with a fresh quorum.
    cluster.reset_quorum()
    cluster.start_controllers()
    view = cluster.wait_state("MigrationActive")
    assert view.zk_brokers == (1, 2, 3)
    assert cluster.zookeeper_image().controller_epoch > epoch_before
    caught_up = cluster.wait_caught_up()
    cluster.wait_controllers_in_step()
    assert kraft_configs(cluster, topics)[topics[0]] == "4242"
    assert kraft_topic_names(cluster) == set(topics)
    # /migration belongs to the new quorum now: its leader, and an offset of the new log
    # (the stale znode's offset was reset when the second copy began).
    migration = cluster.zookeeper_image().migration
    assert migration.kraft_controller_id in {spec.node_id for spec in cluster.controllers}
    assert 0 <= caught_up.zk_last_offset <= migration.last_offset


def test_a_deposed_leader_cannot_write_to_zookeeper(cluster):
    """The active controller is frozen (SIGSTOP) mid-stream, the quorum elects another
    leader which claims ZooKeeper, then the old one wakes up (SIGCONT) with dual writes it
    believes it still owes: the /migration fence refuses them, and ZooKeeper ends equal to
    the log as the new leader wrote it."""
    import os
    import signal

    start_migration(cluster)
    first = cluster.wait_state("MigrationActive")
    cluster.wait_caught_up()
    topics = sorted(cluster.zookeeper_image().topics)
    frozen = cluster.processes[first.controller_id].process
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        second = cluster.wait_state("MigrationActive")
        cluster.wait_until("another controller to lead", lambda: cluster.migration().controller_id != first.controller_id)
        for i, topic in enumerate(topics):
            assert alter(cluster, topic, str(7_000 + i)) == ErrorCode.NONE
        cluster.wait_caught_up()
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    # The old leader steps down on waking (a higher epoch); whatever it tries first fails
    # on /migration's version, so ZooKeeper keeps the new leader's writes.
    cluster.wait_until("the old leader to step down",
                       lambda: cluster.events(first.controller_id, "controller.deactivated"))
    cluster.wait_caught_up()
    cluster.wait_controllers_in_step()
    assert zk_configs(cluster, topics) == kraft_configs(cluster, topics)
    assert zk_configs(cluster, topics)[topics[-1]] == str(7_000 + len(topics) - 1)
    migration = cluster.zookeeper_image().migration
    assert migration.kraft_controller_id != first.controller_id or second.controller_id == first.controller_id
