"""In-process controllers and broker agents on 127.0.0.1, for the broker tests.

Owns: formatting directories the way `kraftwerk storage format` does (a
controller gets the bootstrap checkpoint, a broker only meta.properties),
running one `ControllerNode` on a fixed free port (the brokers need its
address up front) and `BrokerNode`s in the same trio run, and small client
helpers. Everything talks through real sockets.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import trio

from server.nodes.broker import BrokerNode
from server.client import KafkaClient
from server.config import Listener, ServerConfig, VoterAddress
from server.controller.commands import bootstrap_records
from cli.local_cluster import free_port_run
from server.nodes.controller import ControllerNode
from server.storage.bootstrap import write_bootstrap_checkpoint
from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

UPDATE_FEATURES = 57


def format_node(directory: Path, cluster_id: str, node_id: int, metadata_version_level: int | None) -> None:
    directory.mkdir(parents=True)
    if metadata_version_level is not None:
        write_bootstrap_checkpoint(directory, bootstrap_records(metadata_version_level))
    write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                                    directory_id=random_uuid_string()))


class Cluster:
    def __init__(self, tmp_path: Path, metadata_version_level: int, **controller_changes) -> None:
        self.tmp_path = tmp_path
        self.cluster_id = random_uuid_string()
        self.controller_port = free_port_run(1)
        self.voters = (VoterAddress(1, "127.0.0.1", self.controller_port),)
        format_node(tmp_path / "controller-1", self.cluster_id, 1, metadata_version_level)
        self.controller = ControllerNode(replace(ServerConfig(
            node_id=1, listener=Listener("CONTROLLER", "127.0.0.1", self.controller_port),
            metadata_log_dir=tmp_path / "controller-1", quorum_voters=self.voters,
            broker_session_timeout_ms=3_000), **controller_changes))
        self.nursery: trio.Nursery | None = None

    def broker_config(self, node_id: int, release: str | None, **changes) -> ServerConfig:
        directory = self.tmp_path / f"broker-{node_id}"
        if not directory.exists():
            format_node(directory, self.cluster_id, node_id, None)
        base = ServerConfig(node_id=node_id, listener=Listener("PLAINTEXT", "127.0.0.1", 0),
                            metadata_log_dir=directory, quorum_voters=self.voters, process_roles=("broker",),
                            release=release, broker_heartbeat_interval_ms=100)
        return replace(base, **changes)

    async def start_broker(self, node_id: int, release: str | None, **changes) -> BrokerNode:
        broker = BrokerNode(self.broker_config(node_id, release, **changes))
        await self.nursery.start(broker.run)
        return broker

    async def start_broker_in(self, nursery: trio.Nursery, node_id: int, release: str | None) -> BrokerNode:
        broker = BrokerNode(self.broker_config(node_id, release))
        await nursery.start(broker.run)
        return broker

    async def update_metadata_version(self, level: int, upgrade_type: int = 1, port: int | None = None):
        async with await KafkaClient.connect("127.0.0.1", port or self.controller_port) as client:
            return await client.call(UPDATE_FEATURES, {
                "timeout_ms": 5000, "validate_only": False,
                "feature_updates": [{"feature": "metadata.version", "max_version_level": level,
                                     "upgrade_type": upgrade_type}]})


@asynccontextmanager
async def running_cluster(tmp_path: Path, metadata_version_level: int, **controller_changes):
    cluster = Cluster(tmp_path, metadata_version_level, **controller_changes)
    async with trio.open_nursery() as nursery:
        cluster.nursery = nursery
        await nursery.start(cluster.controller.run)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()


async def advertised(port: int) -> dict[int, tuple[int, int]]:
    async with await KafkaClient.connect("127.0.0.1", port) as client:
        return {key: (r.min_version, r.max_version) for key, r in client.api_versions.items()}
