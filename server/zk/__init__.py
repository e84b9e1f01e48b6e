"""ZooKeeper foundation for the KIP-866 migration.

`paths` (pure znode layouts), `process` (a real ZooKeeper 3.8 server process),
`client` (a trio bridge over kazoo) and `seed` (test/bench data in Kafka's ZK layout).
"""
