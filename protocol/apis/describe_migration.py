"""DescribeMigration (API key 10001, kraftwerk's own): where a ZooKeeper -> KRaft
migration is, for `kraftwerk migration status`.

KIP-866 reports the migration through metrics (MigrationState,
ZooKeeperWriteBehindLag); an operator tool wants the same facts over the protocol every
other `kraftwerk` command speaks, plus the reasons a migration has not started (which
broker fails which precondition). Served by the active controller; brokers forward it.
kraftwerk's private API keys start at 10000 (see migration_check.py). Declarations
only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

API_KEY = 10001

REQUEST = Message(
    name='DescribeMigrationRequest',
    type='request',
    api_key=API_KEY,
    valid_versions='0',
    flexible_versions='0+',
    fields=(),
)

RESPONSE = Message(
    name='DescribeMigrationResponse',
    type='response',
    api_key=API_KEY,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('ErrorCode', 'int16', '0+'),
        F('ErrorMessage', 'string', '0+', nullable_versions='0+', default='null'),
        F('ControllerId', 'int32', '0+', default='-1'),
        # KIP-866's table: ZooKeeper 1 ... KRaft 6.
        F('MigrationState', 'int8', '0+'),
        # What ZkMigrationStateRecord holds (Kafka's values: NONE 0, MIGRATION 1, ...).
        F('ZkMigrationState', 'int8', '0+'),
        F('MigrationEnabled', 'bool', '0+'),
        # Committed records not yet written back to ZooKeeper (-1: not dual-writing).
        F('ZkWriteBehindLag', 'int64', '0+', default='-1'),
        F('ZkLastOffset', 'int64', '0+', default='-1'),
        F('ZkControllerEpoch', 'int32', '0+', default='-1'),
        F('WritesBlocked', 'bool', '0+'),
        F('ZkBrokers', '[]int32', '0+'),
        F('KRaftBrokers', '[]int32', '0+'),
        F('PreconditionFailures', '[]PreconditionFailure', '0+', fields=(
            F('BrokerId', 'int32', '0+'),
            F('Reason', 'string', '0+'),
        )),
    ),
)
