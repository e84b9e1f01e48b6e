"""In-process ZooKeeper-mode broker agents for the zkbroker tests (real ZooKeeper, real sockets)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import replace

import trio

from server.client import KafkaClient
from server.config import Listener, ServerConfig
from server.zk.seed import SeedSpec, seed_zookeeper
from server.nodes.zkbroker import ZkBrokerNode

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
WAIT_S = 20


def seed(hosts: str, **changes) -> None:
    values = dict(cluster_id=CLUSTER_ID, broker_ids=(1, 2, 3), topics=2, partitions_per_topic=2,
                  replication_factor=2, features={})
    values.update(changes)
    seed_zookeeper(hosts, SeedSpec(**values))


def broker_config(hosts: str, broker_id: int = 1, **changes) -> ServerConfig:
    base = ServerConfig(node_id=broker_id, listener=Listener("PLAINTEXT", "127.0.0.1", 0),
                        process_roles=("broker",), zookeeper_connect=hosts, migration_enabled=True)
    return replace(base, **changes)


@asynccontextmanager
async def running_broker(hosts: str, broker_id: int = 1, **changes):
    """A started (registered) ZkBrokerNode; stopped on exit."""
    node = ZkBrokerNode(broker_config(hosts, broker_id, **changes))
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            await nursery.start(node.run)
        try:
            yield node
        finally:
            node.request_stop()


@asynccontextmanager
async def client_for(node: ZkBrokerNode):
    with trio.fail_after(WAIT_S):
        client = await KafkaClient.connect("127.0.0.1", node.port)
    try:
        yield client
    finally:
        await client.aclose()
