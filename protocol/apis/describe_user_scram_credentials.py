"""DescribeUserScramCredentials (API key 50).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (DescribeUserScramCredentialsRequest.json, DescribeUserScramCredentialsResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='DescribeUserScramCredentialsRequest',
    type='request',
    api_key=50,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('Users', '[]UserName', '0+', nullable_versions='0+', fields=(
            F('Name', 'string', '0+'),
        )),
    ),
)

RESPONSE = Message(
    name='DescribeUserScramCredentialsResponse',
    type='response',
    api_key=50,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('ErrorCode', 'int16', '0+'),
        F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
        F('Results', '[]DescribeUserScramCredentialsResult', '0+', fields=(
            F('User', 'string', '0+'),
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
            F('CredentialInfos', '[]CredentialInfo', '0+', fields=(
                F('Mechanism', 'int8', '0+'),
                F('Iterations', 'int32', '0+'),
            )),
        )),
    ),
)
