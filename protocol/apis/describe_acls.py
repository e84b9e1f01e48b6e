"""DescribeAcls (API key 29).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (DescribeAclsRequest.json, DescribeAclsResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='DescribeAclsRequest',
    type='request',
    api_key=29,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('ResourceTypeFilter', 'int8', '0+'),
        F('ResourceNameFilter', 'string', '0+', nullable_versions='0+'),
        F('PatternTypeFilter', 'int8', '1+', default='3'),
        F('PrincipalFilter', 'string', '0+', nullable_versions='0+'),
        F('HostFilter', 'string', '0+', nullable_versions='0+'),
        F('Operation', 'int8', '0+'),
        F('PermissionType', 'int8', '0+'),
    ),
)

RESPONSE = Message(
    name='DescribeAclsResponse',
    type='response',
    api_key=29,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('ErrorCode', 'int16', '0+'),
        F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
        F('Resources', '[]DescribeAclsResource', '0+', fields=(
            F('ResourceType', 'int8', '0+'),
            F('ResourceName', 'string', '0+'),
            F('PatternType', 'int8', '1+', default='3'),
            F('Acls', '[]AclDescription', '0+', fields=(
                F('Principal', 'string', '0+'),
                F('Host', 'string', '0+'),
                F('Operation', 'int8', '0+'),
                F('PermissionType', 'int8', '0+'),
            )),
        )),
    ),
)
