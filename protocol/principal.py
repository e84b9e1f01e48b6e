"""Kafka's serialized principal: how a forwarding broker names the client it forwards for.

Declared from Kafka's DefaultPrincipalData.json (not among ../shared's specs). An
EnvelopeRequest's RequestPrincipal is this message's version-0 body, preceded by its
version as an int16 (Kafka's DefaultKafkaPrincipalBuilder serialization).
"""

from protocol.schema import Field as F
from protocol.schema import Message

DEFAULT_PRINCIPAL_DATA = Message(
    name='DefaultPrincipalData',
    type='data',
    valid_versions='0',
    flexible_versions='0+',
    fields=(
        F('Type', 'string', '0+'),
        F('Name', 'string', '0+'),
        F('tokenAuthenticated', 'bool', '0+'),
    ),
)
