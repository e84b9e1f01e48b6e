"""UpdateMetadata (API key 6): the controller tells a ZooKeeper-mode broker who the
controller is and which brokers and partitions are live.

Declared by hand (Kafka's UpdateMetadataRequest/Response specs are not among the
reference specs in ../shared): field names, types and version ranges are Kafka's, with
version 8 (KIP-866: `IsKRaftController` and the tagged `Type`). kraftwerk only speaks
version 8, between its KRaft controller and its ZooKeeper-mode broker agent during a
migration. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

_PARTITION_STATE = (
    F('TopicName', 'string', '0-4', ignorable=True),
    F('PartitionIndex', 'int32', '0+'),
    F('ControllerEpoch', 'int32', '0+'),
    F('Leader', 'int32', '0+'),
    F('LeaderEpoch', 'int32', '0+'),
    F('Isr', '[]int32', '0+'),
    F('ZkVersion', 'int32', '0+'),
    F('Replicas', '[]int32', '0+'),
    F('OfflineReplicas', '[]int32', '4+', ignorable=True),
)

REQUEST = Message(
    name='UpdateMetadataRequest',
    type='request',
    api_key=6,
    valid_versions='0-8',
    flexible_versions='7+',
    fields=(
        F('ControllerId', 'int32', '0+'),
        F('IsKRaftController', 'bool', '8+', default='false'),
        # 0 unknown, 1 incremental, 2 full (a KRaft controller's complete view).
        F('Type', 'int8', '8+', tag=0, tagged_versions='8+', default='0', ignorable=True),
        F('ControllerEpoch', 'int32', '0+'),
        F('BrokerEpoch', 'int64', '5+', default='-1', ignorable=True),
        F('UngroupedPartitionStates', '[]UpdateMetadataPartitionState', '0-4', fields=_PARTITION_STATE),
        F('TopicStates', '[]UpdateMetadataTopicState', '5+', fields=(
            F('TopicName', 'string', '5+'),
            F('TopicId', 'uuid', '7+', ignorable=True),
            F('PartitionStates', '[]UpdateMetadataPartitionState', '5+', fields=_PARTITION_STATE),
        )),
        F('LiveBrokers', '[]UpdateMetadataBroker', '0+', fields=(
            F('Id', 'int32', '0+'),
            F('V0Host', 'string', '0', ignorable=True),
            F('V0Port', 'int32', '0', ignorable=True),
            F('Endpoints', '[]UpdateMetadataEndpoint', '1+', ignorable=True, fields=(
                F('Port', 'int32', '1+'),
                F('Host', 'string', '1+'),
                F('Listener', 'string', '3+', ignorable=True),
                F('SecurityProtocol', 'int16', '1+'),
            )),
            F('Rack', 'string', '2+', nullable_versions='0+', ignorable=True),
        )),
    ),
)

RESPONSE = Message(
    name='UpdateMetadataResponse',
    type='response',
    api_key=6,
    valid_versions='0-8',
    flexible_versions='7+',
    fields=(
        F('ErrorCode', 'int16', '0+'),
    ),
)
