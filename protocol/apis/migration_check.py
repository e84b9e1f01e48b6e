"""MigrationCheck (API key 10000, kraftwerk's own): KIP-866's readiness probe.

The KRaft controller asks every live ZooKeeper-mode broker, before it starts a
migration, for the broker's cluster id and whether `kafka.metadata.migration.enable`
is set in its static configuration. Apache Kafka dropped this RPC during the KIP's
discussion (FACTS.md §13) and never assigned it a key; kraftwerk implements it as the
KIP declares it, under a key far outside Kafka's range (Kafka's keys are below 100), so
no Kafka release can ever mean something else by it. kraftwerk's private API keys start
at 10000.

The KIP's response declares `clusterId` as a uuid, but ZooKeeper-era cluster ids are
base64 strings in `/cluster/id`; the field holds the 16 bytes those strings encode
(every Kafka cluster id is a base64url-encoded UUID). Declarations only: see
protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

API_KEY = 10000

REQUEST = Message(
    name='MigrationCheckRequest',
    type='request',
    api_key=API_KEY,
    valid_versions='0',
    flexible_versions='0+',
    fields=(),
)

RESPONSE = Message(
    name='MigrationCheckResponse',
    type='response',
    api_key=API_KEY,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        # Not in the KIP's declaration: every Kafka response carries an error code, and a
        # broker that cannot answer (not yet registered in ZooKeeper) needs a way to say so.
        F('ErrorCode', 'int16', '0+'),
        F('ClusterId', 'uuid', '0+'),
        F('ConfigEnabled', 'bool', '0+'),
    ),
)
