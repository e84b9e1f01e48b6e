"""AlterUserScramCredentials (API key 51).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (AlterUserScramCredentialsRequest.json, AlterUserScramCredentialsResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='AlterUserScramCredentialsRequest',
    type='request',
    api_key=51,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('Deletions', '[]ScramCredentialDeletion', '0+', fields=(
            F('Name', 'string', '0+'),
            F('Mechanism', 'int8', '0+'),
        )),
        F('Upsertions', '[]ScramCredentialUpsertion', '0+', fields=(
            F('Name', 'string', '0+'),
            F('Mechanism', 'int8', '0+'),
            F('Iterations', 'int32', '0+'),
            F('Salt', 'bytes', '0+'),
            F('SaltedPassword', 'bytes', '0+'),
        )),
    ),
)

RESPONSE = Message(
    name='AlterUserScramCredentialsResponse',
    type='response',
    api_key=51,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('Results', '[]AlterUserScramCredentialsResult', '0+', fields=(
            F('User', 'string', '0+'),
            F('ErrorCode', 'int16', '0+'),
            F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
        )),
    ),
)
