"""Kafka Streams rebalance metadata (KIP-268): SubscriptionInfo and
AssignmentInfo in versions 1-3 plus a simulated version 4, with decoding that
reports a newer version as a value so a leader can probe instead of failing.

Pure: construct declarations and value types only; imports nothing from
`server/` and no I/O.
"""

from protocol.streams._common import (
    EARLIEST_PROBEABLE_VERSION,
    UNKNOWN_SUPPORTED_VERSION,
    UnknownVersion,
    read_prefix,
)
from protocol.streams.assignment_info import AssignmentInfo, HostInfo, TopicPartition, probing_assignment
from protocol.streams.subscription_info import SubscriptionInfo, TaskId

__all__ = [
    "EARLIEST_PROBEABLE_VERSION", "UNKNOWN_SUPPORTED_VERSION", "UnknownVersion", "read_prefix",
    "AssignmentInfo", "HostInfo", "TopicPartition", "probing_assignment", "SubscriptionInfo", "TaskId",
]
