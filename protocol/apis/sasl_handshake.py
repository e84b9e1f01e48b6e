"""SaslHandshake (API key 17).

Declared with tools/gen_protocol.py's message_source from Kafka's specs (SaslHandshakeRequest.json, SaslHandshakeResponse.json, as
bundled with kafka-python 3.0.12; not among ../shared's specs). Regenerate, do not edit. Declarations only: see protocol/schema.py.
"""

from protocol.schema import Field as F
from protocol.schema import Message

REQUEST = Message(
    name='SaslHandshakeRequest',
    type='request',
    api_key=17,
    valid_versions='0-1',
    flexible_versions='none',
    fields=(
        F('Mechanism', 'string', '0+'),
    ),
)

RESPONSE = Message(
    name='SaslHandshakeResponse',
    type='response',
    api_key=17,
    valid_versions='0-1',
    flexible_versions='none',
    fields=(
        F('ErrorCode', 'int16', '0+'),
        F('Mechanisms', '[]string', '0+'),
    ),
)
