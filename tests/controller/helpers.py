"""Shared test scaffolding for the controller core: a log that replays itself.

`Cluster` plays the single-writer loop without I/O: it runs a command, appends
the records (after an encode/decode round trip, so every record we write must be
encodable and must replay from its decoded form), replays them and applies the
heartbeat update, exactly in the order the real loop does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from protocol.apis import broker_heartbeat, broker_registration, unregister_broker, update_features
from protocol.records import MetadataRecord, decode_metadata_record, encode_metadata_record
from server.controller import commands as cmd
from server.controller.features import local_supported_features
from server.controller.state import BrokerHeartbeatTracker, ControllerState

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NODE_ID = 3000
# What a current Kafka broker advertises (production levels only).
FULL_BROKER_FEATURES = {
    "metadata.version": (1, 22),
    "kraft.version": (0, 1),
    "group.version": (0, 1),
    "transaction.version": (0, 2),
}


def decoded(message, version: int, **fields: Any):
    """A request as the handler would see it: encoded, then decoded."""
    return message.decode(version, message.encode(version, fields))


def features_request(updates: list[tuple[str, int, int]], version: int = 2, validate_only: bool = False):
    """updates: (feature, level, upgrade type). v0 encodes AllowDowngrade instead."""
    entries = []
    for feature, level, upgrade_type in updates:
        entry: dict[str, Any] = {"feature": feature, "max_version_level": level}
        if version == 0:
            entry["allow_downgrade"] = upgrade_type != cmd.UPGRADE
        else:
            entry["upgrade_type"] = upgrade_type
        entries.append(entry)
    fields: dict[str, Any] = {"feature_updates": entries}
    if version >= 1:
        fields["validate_only"] = validate_only
    return decoded(update_features.REQUEST, version, **fields)


def registration_request(
    broker_id: int,
    incarnation_id: uuid.UUID,
    features: dict[str, tuple[int, int]] | None = None,
    version: int = 4,
    cluster_id: str = CLUSTER_ID,
    log_dirs: list[uuid.UUID] | None = None,
    **extra: Any,
):
    if features is None:
        features = dict(FULL_BROKER_FEATURES)
    fields: dict[str, Any] = {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": incarnation_id,
        "listeners": [{"name": "PLAINTEXT", "host": "localhost", "port": 9092 + broker_id, "security_protocol": 0}],
        "features": [
            {"name": name, "min_supported_version": lo, "max_supported_version": hi} for name, (lo, hi) in features.items()
        ],
        "rack": None,
    }
    if version >= 2:
        fields["log_dirs"] = log_dirs if log_dirs is not None else [uuid.UUID(int=(broker_id + 1) << 64 | 7)]
    fields.update(extra)
    return decoded(broker_registration.REQUEST, version, **fields)


def heartbeat_request(broker_id: int, broker_epoch: int, offset: int, want_fence: bool = False, want_shut_down: bool = False, version: int = 1):
    return decoded(
        broker_heartbeat.REQUEST,
        version,
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        current_metadata_offset=offset,
        want_fence=want_fence,
        want_shut_down=want_shut_down,
    )


def unregister_request(broker_id: int):
    return decoded(unregister_broker.REQUEST, 0, broker_id=broker_id)


@dataclass
class Cluster:
    config: cmd.ControllerConfig = field(
        default_factory=lambda: cmd.ControllerConfig(node_id=NODE_ID, cluster_id=CLUSTER_ID)
    )
    state: ControllerState = field(init=False)
    tracker: BrokerHeartbeatTracker = field(init=False)
    log: list[tuple[bytes, int]] = field(default_factory=list)
    next_offset: int = 0
    now_ms: int = 1_000_000

    def __post_init__(self) -> None:
        self.state = ControllerState(self.config.cluster_id)
        self.tracker = BrokerHeartbeatTracker(self.config.session_timeout_ms)

    @classmethod
    def bootstrapped(cls, mv_level: int = 22, unstable: bool = False, **levels: int) -> "Cluster":
        config = cmd.ControllerConfig(
            node_id=NODE_ID, cluster_id=CLUSTER_ID, supported_features=local_supported_features(unstable)
        )
        cluster = cls(config=config)
        cluster.append(cmd.bootstrap_records(mv_level, {k.replace("_", "."): v for k, v in levels.items()}))
        return cluster

    def append(self, records: list[MetadataRecord]) -> None:
        for item in records:
            raw = encode_metadata_record(item)
            offset = self.next_offset
            self.log.append((raw, offset))
            self.state.replay(decode_metadata_record(raw), offset)
            self.next_offset += 1

    def run(self, result: cmd.ControllerResult) -> cmd.ControllerResult:
        self.append(result.records)
        if result.heartbeat is not None:
            result.heartbeat.apply(self.tracker)
        return result

    # command shortcuts
    def update(self, updates, version: int = 2, validate_only: bool = False,
               kraft_version: int | None = None) -> cmd.ControllerResult:
        request = features_request(updates, version=version, validate_only=validate_only)
        return self.run(cmd.update_features(self.state, request, version, self.config, kraft_version=kraft_version))

    def register(self, broker_id: int, incarnation_id: uuid.UUID, version: int = 4, **kwargs: Any) -> cmd.ControllerResult:
        request = registration_request(broker_id, incarnation_id, version=version, **kwargs)
        return self.run(
            cmd.register_broker(self.state, self.tracker, request, version, self.now_ms, self.next_offset, self.config)
        )

    def heartbeat(self, broker_id: int, broker_epoch: int, offset: int | None = None, **kwargs: Any) -> cmd.ControllerResult:
        if offset is None:
            offset = self.next_offset - 1
        request = heartbeat_request(broker_id, broker_epoch, offset, **kwargs)
        return self.run(cmd.broker_heartbeat(self.state, self.tracker, request, 1, self.now_ms, self.config,
                                             next_offset=self.next_offset))

    def unregister(self, broker_id: int) -> cmd.ControllerResult:
        return self.run(cmd.unregister_broker(self.state, unregister_request(broker_id), 0, self.config))

    def apply(self, command: tuple) -> None:
        """One step of a generated command sequence (the Hypothesis tests' vocabulary):
        ("register", id, incarnation), ("heartbeat", id, current epoch?, fence?, shut down?),
        ("unregister", id), ("tick", ms), ("expire",), ("features", name, level, type[, validate only])."""
        kind = command[0]
        if kind == "register":
            _, broker_id, incarnation = command
            self.register(broker_id, uuid.UUID(int=broker_id * 10 + incarnation))
        elif kind == "heartbeat":
            _, broker_id, current_epoch, want_fence, want_shut_down = command
            broker = self.state.broker(broker_id)
            epoch = broker.epoch if (broker is not None and current_epoch) else 12345
            self.heartbeat(broker_id, epoch, want_fence=want_fence, want_shut_down=want_shut_down)
        elif kind == "unregister":
            self.unregister(command[1])
        elif kind == "tick":
            self.now_ms += command[1]
        elif kind == "expire":
            self.expire()
        else:
            _, feature, level, upgrade_type, *validate_only = command
            self.update([(feature, level, upgrade_type)], validate_only=bool(validate_only and validate_only[0]))

    def expire(self) -> cmd.ControllerResult:
        return self.run(cmd.fence_expired_brokers(self.state, self.tracker, self.now_ms, self.config))

    def replayed_from_scratch(self) -> ControllerState:
        fresh = ControllerState(self.config.cluster_id)
        for raw, offset in self.log:
            fresh.replay(decode_metadata_record(raw), offset)
        return fresh
