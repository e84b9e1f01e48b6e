"""Envelope (API key 58).

Declared with tools/gen_protocol.py's message_source from Kafka's EnvelopeRequest.json and EnvelopeResponse.json (not among ../shared's specs);
edit the generator, not this file. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='EnvelopeRequest',
    type='request',
    api_key=58,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('RequestData', 'bytes', '0+'),
        F('RequestPrincipal', 'bytes', '0+', nullable_versions='0+'),
        F('ClientHostAddress', 'bytes', '0+'),
    ),
)

RESPONSE = Message(
    name='EnvelopeResponse',
    type='response',
    api_key=58,
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('ThrottleTimeMs', 'int32', '0+'),
        F('ResponseData', 'bytes', '0+', nullable_versions='0+', default='null'),
        F('ErrorCode', 'int16', '0+'),
    ),
)
