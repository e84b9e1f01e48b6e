"""DescribeConfigs (API key 32).

Declared by hand: DescribeConfigsRequest/Response.json are not among the reference specs
in ../shared, so the fields, types, defaults and version ranges below are copied as
facts from Apache Kafka's JSON specs (the 3.x range 0-4; Kafka 4.0 dropped v0). v1 adds
synonyms and ConfigSource (v0 has IsDefault instead), v3 the type and documentation,
v4 is the first flexible version. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='DescribeConfigsRequest',
    type='request',
    api_key=32,
    valid_versions='0-4',
    flexible_versions='4+',
    fields=(
        F('Resources', '[]DescribeConfigsResource', '0+', fields=(
            F('ResourceType', 'int8', '0+'),
            F('ResourceName', 'string', '0+'),
            F('ConfigurationKeys', '[]string', '0+', nullable_versions='0+'),
        )),
        F('IncludeSynonyms', 'bool', '1+', default='false'),
        F('IncludeDocumentation', 'bool', '3+', default='false'),
    ),
)

RESPONSE = Message(
    name='DescribeConfigsResponse',
    type='response',
    api_key=32,
    valid_versions='0-4',
    flexible_versions='4+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('Results', '[]DescribeConfigsResult', '0+', fields=(
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
            F('ResourceType', 'int8', '0+'),
            F('ResourceName', 'string', '0+'),
            F('Configs', '[]DescribeConfigsResourceResult', '0+', fields=(
                F('Name', 'string', '0+'),
                F('Value', 'string', '0+', nullable_versions='0+'),
                F('ReadOnly', 'bool', '0+'),
                F('IsDefault', 'bool', '0'),
                F('ConfigSource', 'int8', '1+', default='-1', ignorable=True),
                F('IsSensitive', 'bool', '0+'),
                F('Synonyms', '[]DescribeConfigsSynonym', '1+', ignorable=True, fields=(
                    F('Name', 'string', '1+'),
                    F('Value', 'string', '1+', nullable_versions='0+'),
                    F('Source', 'int8', '1+'),
                )),
                F('ConfigType', 'int8', '3+', default='0', ignorable=True),
                F('Documentation', 'string', '3+', nullable_versions='0+', ignorable=True),
            )),
        )),
    ),
)
