"""IncrementalAlterConfigs (API key 44, KIP-339).

Declared by hand: IncrementalAlterConfigsRequest/Response.json are not among the
reference specs in ../shared, so the fields, types and version ranges below are copied
as facts from Apache Kafka's JSON specs (0-1; version 1 is the first flexible one).
ConfigOperation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT. Declarations only: see
protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='IncrementalAlterConfigsRequest',
    type='request',
    api_key=44,
    valid_versions='0-1',
    flexible_versions='1+',
    fields=(
        F('Resources', '[]AlterConfigsResource', '0+', fields=(
            F('ResourceType', 'int8', '0+', map_key=True),
            F('ResourceName', 'string', '0+', map_key=True),
            F('Configs', '[]AlterableConfig', '0+', fields=(
                F('Name', 'string', '0+', map_key=True),
                F('ConfigOperation', 'int8', '0+', map_key=True),
                F('Value', 'string', '0+', nullable_versions='0+'),
            )),
        )),
        F('ValidateOnly', 'bool', '0+'),
    ),
)

RESPONSE = Message(
    name='IncrementalAlterConfigsResponse',
    type='response',
    api_key=44,
    valid_versions='0-1',
    flexible_versions='1+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('Responses', '[]AlterConfigsResourceResponse', '0+', fields=(
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
            F('ResourceType', 'int8', '0+'),
            F('ResourceName', 'string', '0+'),
        )),
    ),
)
