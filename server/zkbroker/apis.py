"""The APIs the ZooKeeper-mode broker agent serves (its own table; server/apis.py
is the KRaft nodes').

ApiVersions v0-4 (with ZkMigrationReady = kafka.metadata.migration.enable),
Metadata v0-12 and DescribeCluster v0-1 from its cache, UpdateMetadata v8 (the only
version kraftwerk's controller speaks) and kraftwerk's MigrationCheck v0. Not gated
by metadata.version: Kafka's brokers do not gate ApiVersions per API by it
(FACTS.md §13).
"""

from __future__ import annotations

from protocol.apis.migration_check import API_KEY as MIGRATION_CHECK_KEY
from server.apis import ServedApi, served

UPDATE_METADATA_KEY = 6


def zk_broker_apis() -> dict[int, ServedApi]:
    from server.handlers import api_versions, describe_cluster, migration_check, update_metadata
    from server.zkbroker import metadata

    table = [
        served(18, 0, 4, api_versions.handle),
        served(3, 0, 12, metadata.handle),
        served(60, 0, 1, describe_cluster.handle),
        served(UPDATE_METADATA_KEY, 8, 8, update_metadata.handle),
        served(MIGRATION_CHECK_KEY, 0, 0, migration_check.handle),
    ]
    return {api.api_key: api for api in table}
