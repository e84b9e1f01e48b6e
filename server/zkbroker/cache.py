"""A ZooKeeper-mode broker's metadata cache: what UpdateMetadata tells it (sans-I/O).

Owns: `ZkMetadataCache` (controller id and epoch, whether the controller is a KRaft
controller, the live brokers, the partition states) and `apply_update_metadata`, the
only way it changes.

Rules kept here (Kafka's ZooKeeper-mode broker, KIP-380, KIP-866):
- A request from an older controller epoch than the highest seen is refused with
  STALE_CONTROLLER_EPOCH (11) and changes nothing; equal or newer is accepted.
- A request naming a broker epoch older than this broker's (its registration's
  czxid) is refused with STALE_BROKER_EPOCH: it was meant for an earlier
  incarnation of this broker. -1 skips the check, as in Kafka.
- Live brokers are replaced by every request; partition states are upserted, or
  replaced wholesale when the request's Type is FULL (2, a KRaft controller's
  complete view); a partition whose leader is -2 (LeaderDuringDelete) is removed.
- No I/O, no clock; the handler logs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode

# Kafka's error codes that protocol/errors.py does not list.
STALE_CONTROLLER_EPOCH = int(ErrorCode.STALE_CONTROLLER_EPOCH)
UNKNOWN_TOPIC_ID = 100

LEADER_DURING_DELETE = -2
UPDATE_TYPE_FULL = 2


@dataclass(frozen=True, slots=True)
class LiveEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class LiveBroker:
    broker_id: int
    endpoints: tuple[LiveEndpoint, ...]
    rack: str | None

    def endpoint_for(self, listener: str) -> LiveEndpoint | None:
        """The endpoint on `listener` (Kafka answers a client with the listener it
        came in on), else the first one."""
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return self.endpoints[0] if self.endpoints else None


@dataclass(frozen=True, slots=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


@dataclass(slots=True)
class CachedTopic:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, CachedPartition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UpdateOutcome:
    error_code: int
    reason: str | None = None


@dataclass(slots=True)
class ZkMetadataCache:
    """Mutable on purpose, like Kafka's MetadataCache; one owner (the broker's trio
    thread) changes it, only through `apply_update_metadata`."""

    controller_id: int = -1
    controller_epoch: int = -1
    is_kraft_controller: bool = False
    live_brokers: dict[int, LiveBroker] = field(default_factory=dict)
    topics: dict[str, CachedTopic] = field(default_factory=dict)
    updates_applied: int = 0

    @property
    def knows_controller(self) -> bool:
        return self.controller_id >= 0

    def topic_by_id(self, topic_id: uuid.UUID) -> CachedTopic | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def partition_count(self) -> int:
        return sum(len(topic.partitions) for topic in self.topics.values())


def apply_update_metadata(cache: ZkMetadataCache, request: Any, broker_epoch: int) -> UpdateOutcome:
    """Applies a decoded UpdateMetadata v8 request (a construct Container) to `cache`
    if it is from the current controller; returns the response's error code."""
    if request.controller_epoch < cache.controller_epoch:
        return UpdateOutcome(
            STALE_CONTROLLER_EPOCH,
            f"controller epoch {request.controller_epoch} is older than {cache.controller_epoch}",
        )
    if request.broker_epoch != -1 and request.broker_epoch < broker_epoch:
        return UpdateOutcome(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker epoch {request.broker_epoch} is older than this broker's {broker_epoch}",
        )
    cache.controller_id = request.controller_id
    cache.controller_epoch = request.controller_epoch
    cache.is_kraft_controller = bool(request.is_kraft_controller)
    cache.live_brokers = {
        broker.id: LiveBroker(
            broker.id,
            tuple(
                LiveEndpoint(endpoint.listener, endpoint.host, endpoint.port, endpoint.security_protocol)
                for endpoint in broker.endpoints or ()
            ),
            broker.rack,
        )
        for broker in request.live_brokers or ()
    }
    if request.type == UPDATE_TYPE_FULL:
        cache.topics = {}
    for topic_state in request.topic_states or ():
        topic = cache.topics.get(topic_state.topic_name)
        if topic is None or topic.topic_id != topic_state.topic_id:
            # A new topic, or a topic re-created under the same name with a new id.
            topic = CachedTopic(topic_state.topic_name, topic_state.topic_id)
            cache.topics[topic.name] = topic
        for state in topic_state.partition_states or ():
            if state.leader == LEADER_DURING_DELETE:
                topic.partitions.pop(state.partition_index, None)
                continue
            topic.partitions[state.partition_index] = CachedPartition(
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=tuple(state.isr),
                replicas=tuple(state.replicas),
                offline_replicas=tuple(state.offline_replicas or ()),
                zk_version=state.zk_version,
                controller_epoch=state.controller_epoch,
            )
        if not topic.partitions:
            del cache.topics[topic.name]
    cache.updates_applied += 1
    return UpdateOutcome(ErrorCode.NONE)
