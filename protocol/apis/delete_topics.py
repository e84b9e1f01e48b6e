"""DeleteTopics (API key 20).

Declared by hand: DeleteTopicsRequest/Response.json are not among the reference specs in
../shared, so the fields, types, defaults and version ranges below are copied as facts
from Apache Kafka's JSON specs (the 3.x range 0-6; Kafka 4.0 dropped v0). Version 4 is
the first flexible one, 5 adds ErrorMessage, 6 names topics by name or topic id.
Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='DeleteTopicsRequest',
    type='request',
    api_key=20,
    valid_versions='0-6',
    flexible_versions='4+',
    fields=(
        F('Topics', '[]DeleteTopicState', '6+', fields=(
            F('Name', 'string', '6+', nullable_versions='6+', default='null'),
            F('TopicId', 'uuid', '6+'),
        )),
        F('TopicNames', '[]string', '0-5', ignorable=True),
        F('TimeoutMs', 'int32', '0+'),
    ),
)

RESPONSE = Message(
    name='DeleteTopicsResponse',
    type='response',
    api_key=20,
    valid_versions='0-6',
    flexible_versions='4+',
    fields=(
        F('ThrottleTimeMs', 'int32', '1+', ignorable=True),
        F('Responses', '[]DeletableTopicResult', '0+', fields=(
            F('Name', 'string', '0+', nullable_versions='6+', map_key=True),
            F('TopicId', 'uuid', '6+', ignorable=True),
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '5+', nullable_versions='5+', ignorable=True, default='null'),
        )),
    ),
)
