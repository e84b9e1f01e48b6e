"""The ZooKeeper-mode broker agent (`kraftwerk broker --zookeeper HOST:PORT`).

A broker as Apache Kafka ran before KRaft, enough for the KIP-866 migration: it
registers in ZooKeeper, protects itself against finalized features it cannot run
(KIP-584), answers MigrationCheck, and learns the controller and the live brokers
from UpdateMetadata. `cache.py` is the sans-I/O metadata cache, `node.py` the trio
shell, `apis.py` its served table, `cli.py` the command line.
"""
