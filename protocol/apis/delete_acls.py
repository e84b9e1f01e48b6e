"""DeleteAcls (API key 31).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (DeleteAclsRequest.json, DeleteAclsResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='DeleteAclsRequest',
    type='request',
    api_key=31,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('Filters', '[]DeleteAclsFilter', '0+', fields=(
            F('ResourceTypeFilter', 'int8', '0+'),
            F('ResourceNameFilter', 'string', '0+', nullable_versions='0+'),
            F('PatternTypeFilter', 'int8', '1+', default='3'),
            F('PrincipalFilter', 'string', '0+', nullable_versions='0+'),
            F('HostFilter', 'string', '0+', nullable_versions='0+'),
            F('Operation', 'int8', '0+'),
            F('PermissionType', 'int8', '0+'),
        )),
    ),
)

RESPONSE = Message(
    name='DeleteAclsResponse',
    type='response',
    api_key=31,
    valid_versions='1-3',
    flexible_versions='2+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('FilterResults', '[]DeleteAclsFilterResult', '0+', fields=(
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
            F('MatchingAcls', '[]DeleteAclsMatchingAcl', '0+', fields=(
                F('ErrorCode', 'int16', '0+'),
                F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
                F('ResourceType', 'int8', '0+'),
                F('ResourceName', 'string', '0+'),
                F('PatternType', 'int8', '1+', default='3'),
                F('Principal', 'string', '0+'),
                F('Host', 'string', '0+'),
                F('Operation', 'int8', '0+'),
                F('PermissionType', 'int8', '0+'),
            )),
        )),
    ),
)
