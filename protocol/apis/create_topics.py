"""CreateTopics (API key 19).

Declared by hand: CreateTopicsRequest/Response.json are not among the reference specs in
../shared, so the fields, types, tags, defaults and version ranges below are copied as
facts from Apache Kafka's JSON specs (the 3.x range 0-7; Kafka 4.0 dropped v0-1 but
kraftwerk keeps them for older clients). Version 5 is the first flexible one, 7 adds
the topic id to each result. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='CreateTopicsRequest',
    type='request',
    api_key=19,
    valid_versions='0-7',
    flexible_versions='5+',
    fields=(
        F('Topics', '[]CreatableTopic', '0+', fields=(
            F('Name', 'string', '0+', map_key=True),
            F('NumPartitions', 'int32', '0+'),
            F('ReplicationFactor', 'int16', '0+'),
            F('Assignments', '[]CreatableReplicaAssignment', '0+', fields=(
                F('PartitionIndex', 'int32', '0+', map_key=True),
                F('BrokerIds', '[]int32', '0+'),
            )),
            F('Configs', '[]CreatableTopicConfig', '0+', fields=(
                F('Name', 'string', '0+', map_key=True),
                F('Value', 'string', '0+', nullable_versions='0+'),
            )),
        )),
        F('timeoutMs', 'int32', '0+', default='60000'),
        F('validateOnly', 'bool', '1+', default='false'),
    ),
)

RESPONSE = Message(
    name='CreateTopicsResponse',
    type='response',
    api_key=19,
    valid_versions='0-7',
    flexible_versions='5+',
    fields=(
        F('ThrottleTimeMs', 'int32', '2+', ignorable=True),
        F('Topics', '[]CreatableTopicResult', '0+', fields=(
            F('Name', 'string', '0+', map_key=True),
            F('TopicId', 'uuid', '7+', ignorable=True),
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '1+', nullable_versions='0+', ignorable=True),
            F('TopicConfigErrorCode', 'int16', '5+', tag=0, tagged_versions='5+', ignorable=True),
            F('NumPartitions', 'int32', '5+', default='-1', ignorable=True),
            F('ReplicationFactor', 'int16', '5+', default='-1', ignorable=True),
            F('Configs', '[]CreatableTopicConfigs', '5+', nullable_versions='5+', ignorable=True, fields=(
                F('Name', 'string', '5+'),
                F('Value', 'string', '5+', nullable_versions='5+'),
                F('ReadOnly', 'bool', '5+'),
                F('ConfigSource', 'int8', '5+', default='-1', ignorable=True),
                F('IsSensitive', 'bool', '5+'),
            )),
        )),
    ),
)
