"""SaslAuthenticate (API key 36).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (SaslAuthenticateRequest.json, SaslAuthenticateResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='SaslAuthenticateRequest',
    type='request',
    api_key=36,
    valid_versions='0-2',
    flexible_versions='2+',
    fields=(
        F('AuthBytes', 'bytes', '0+'),
    ),
)

RESPONSE = Message(
    name='SaslAuthenticateResponse',
    type='response',
    api_key=36,
    valid_versions='0-2',
    flexible_versions='2+',
    fields=(
        F('ErrorCode', 'int16', '0+'),
        F('ErrorMessage', 'string', '0+', nullable_versions='0+'),
        F('AuthBytes', 'bytes', '0+'),
        F('SessionLifetimeMs', 'int64', '1+', default='0', ignorable=True),
    ),
)
