"""What a client may do, as Kafka reports it in "authorized operations" fields.

Owns: Kafka's AclOperation codes, the set of operations that apply to the
CLUSTER resource, and the "authorized operations" bitfield. Without an
authorizer configured every client is authorized for every cluster operation,
which is what Kafka reports then; with one, server/security/item_checks.py asks
it per operation.
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


CLUSTER_OPERATIONS = (
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
)

# Kafka's "authorized operations were not requested" sentinel.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def operations_bitfield(operations) -> int:
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits


def cluster_authorized_operations(requested: bool) -> int:
    return operations_bitfield(CLUSTER_OPERATIONS) if requested else AUTHORIZED_OPERATIONS_OMITTED
