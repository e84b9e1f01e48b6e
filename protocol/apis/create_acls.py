"""CreateAcls (API key 30).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (CreateAclsRequest.json, CreateAclsResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='CreateAclsRequest',
    type='request',
    api_key=30,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('Creations', '[]AclCreation', '0+', fields=(
            F('ResourceType', 'int8', '0+'),
            F('ResourceName', 'string', '0+'),
            F('ResourcePatternType', 'int8', '1+', default='3'),
            F('Principal', 'string', '0+'),
            F('Host', 'string', '0+'),
            F('Operation', 'int8', '0+'),
            F('PermissionType', 'int8', '0+'),
        )),
    ),
)

RESPONSE = Message(
    name='CreateAclsResponse',
    type='response',
    api_key=30,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('Results', '[]AclCreationResult', '0+', fields=(
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
        )),
    ),
)
