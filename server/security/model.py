"""The values of Kafka's security model that the metadata log stores.

Owns: SCRAM mechanisms (`ScramMechanism`), a stored SCRAM credential
(`ScramCredential`), an ACL entry (`AclEntry`) with Kafka's resource, pattern
and permission codes, and `KafkaPrincipal`. Facts carried over from Kafka:
the numeric codes (ResourceType, PatternType, AclPermissionType, the SCRAM
mechanism ids of UserScramCredentialRecord / AlterUserScramCredentials), and
the principal's "Type:Name" text form.

Rules kept here:
- Values only (frozen dataclasses, IntEnums); no I/O, no state. The image that
  holds them is `server.controller.state.ControllerState`; the authorizer and
  the SASL mechanisms read them from there.
- A `ScramCredential` never holds a password, only what SCRAM stores (salt,
  StoredKey, ServerKey, iterations): nothing here can leak one into a log.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism ids (0 is UNKNOWN)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @staticmethod
    def from_name(name: str) -> "ScramMechanism":
        try:
            return ScramMechanism[name.strip().upper().replace("-", "_")]
        except KeyError:
            return ScramMechanism.UNKNOWN


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the log keeps for one user and mechanism (UserScramCredentialRecord)."""

    user: str
    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys are secrets too: keep them out of logs and test output
        return f"ScramCredential(user={self.user!r}, mechanism={self.mechanism.mechanism_name}, iterations={self.iterations})"


class ResourceType(IntEnum):
    """Kafka's ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's PatternType codes; MATCH and ANY are for filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The name of the one CLUSTER resource, and the wildcard resource/principal/host.
CLUSTER_RESOURCE_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL as AccessControlEntryRecord stores it. `operation` is an
    `server.authorization.AclOperation` code."""

    acl_id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Who a connection is: `User:alice`, `User:ANONYMOUS`, `User:CN=broker-1,O=kraftwerk`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @staticmethod
    def parse(text: str) -> "KafkaPrincipal":
        kind, colon, name = text.partition(":")
        if not colon or not kind:
            raise ValueError(f"principal {text!r} must look like Type:Name (User:alice)")
        return KafkaPrincipal(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
