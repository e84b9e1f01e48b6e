"""Kafka error codes and the exceptions the codec raises.

Owns: `ErrorCode` (Kafka's numeric error codes, `Errors.java` names) and the
two codec exceptions. `DecodeError` means the *peer* sent bad bytes (answer
with an error code or close the connection); `EncodeError` means *we* tried to
write something the schema cannot hold (a bug on our side).
"""

from __future__ import annotations

from enum import IntEnum


class DecodeError(Exception):
    """The remote side sent bytes that do not decode under the schema."""


class EncodeError(Exception):
    """A local value does not fit the schema it is being written with."""


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    NETWORK_EXCEPTION = 13
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    INVALID_PRINCIPAL_TYPE = 67
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    INVALID_RECORD = 87
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    THROTTLING_QUOTA_EXCEEDED = 89
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    UNKNOWN_CONTROLLER_ID = 116
    INVALID_REGISTRATION = 119
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    REBOOTSTRAP_REQUIRED = 129


# Kafka's Errors.message() for the codes kraftwerk answers or prints without a text of its
# own (what Kafka's clients show when a response carries no message).
KAFKA_ERROR_MESSAGES: dict[int, str] = {
    -1: "The server experienced an unexpected error when processing the request.",
    3: "This server does not host this topic-partition.",
    6: "For requests intended only for the leader, this error indicates that "
        "the broker is not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition.",
    7: "The request timed out.",
    8: "The broker is not available.",
    29: "Topic authorization failed.",
    31: "Cluster authorization failed.",
    35: "The version of API is not supported.",
    41: "This is not the correct controller for this cluster.",
    42: "This most likely occurs because of a request being malformed by the "
        "client library or the message was sent to an incompatible broker. See the broker logs for more "
        "details.",
    74: "The leader epoch in the request is older than the epoch on the broker.",
    75: "The leader epoch in the request is newer than the epoch on the broker.",
    104: "The clusterId in the request does not match that found on the "
        "server.",
    126: "The voter is already part of the set of voters.",
    127: "The voter is not part of the set of voters.",
}


def error_name(code: int) -> str:
    """The name of a Kafka error code, for logs and messages; a code this table lacks (a
    peer may send any int16) is named by its number instead of raising."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"
