"""Log event names, logging setup and metrics.

Owns: `Event` (every structured log event name kraftwerk emits: operators and
tests rely on them, so they are stable), `configure_logging` (structlog,
JSON lines to stderr), and `Metrics` (prometheus-client collectors on a
registry owned by one server instance, never the process-global one).
"""

from __future__ import annotations

import logging
import sys
import time
from enum import StrEnum

import structlog
from prometheus_client import CollectorRegistry, Counter, GCCollector, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily


class Event(StrEnum):
    SERVER_STARTED = "server.started"
    SERVER_STOPPING = "server.stopping"
    SERVER_STOPPED = "server.stopped"
    CONNECTION_OPENED = "net.connection_opened"
    CONNECTION_CLOSED = "net.connection_closed"
    CONNECTION_IDLE_TIMEOUT = "net.connection_idle_timeout"
    FRAME_REJECTED = "net.frame_rejected"
    DISCONNECTED_MID_REQUEST = "net.disconnected_mid_request"
    REQUEST = "net.request"
    REQUEST_DECODE_FAILED = "net.request_decode_failed"
    UNKNOWN_API = "net.unknown_api"
    UNSUPPORTED_VERSION = "net.unsupported_version"
    HANDLER_FAILED = "net.handler_failed"
    # A controller's outbound connection to a peer (server/net/peer.py).
    PEER_CONNECT_FAILED = "net.peer_connect_failed"
    PEER_CONNECTED = "net.peer_connected"
    PEER_DISCONNECTED = "net.peer_disconnected"
    PEER_BAD_RESPONSE = "net.peer_bad_response"
    # Security and limits. Never log a password, a salted password or a key.
    TLS_HANDSHAKE_FAILED = "security.tls_handshake_failed"
    SASL_HANDSHAKE = "security.sasl_handshake"
    SASL_AUTHENTICATED = "security.sasl_authenticated"
    SASL_AUTHENTICATION_FAILED = "security.sasl_authentication_failed"
    SASL_REQUEST_BEFORE_AUTHENTICATION = "security.request_before_authentication"
    AUTHORIZATION_FAILED = "security.authorization_failed"
    ACLS_CREATED = "security.acls_created"
    ACLS_DELETED = "security.acls_deleted"
    SCRAM_CREDENTIALS_ALTERED = "security.scram_credentials_altered"
    CONNECTION_REFUSED = "net.connection_refused"
    LISTENER_STARTED = "net.listener_started"
    LISTENER_BIND_FAILED = "net.listener_bind_failed"
    PEER_AUTHENTICATION_FAILED = "security.peer_authentication_failed"
    REQUEST_RECEIVE_TIMEOUT = "net.request_receive_timeout"
    REQUEST_MEMORY_EXHAUSTED = "net.request_memory_exhausted"
    REQUEST_TIMED_OUT = "net.request_timed_out"
    CONTROLLER_STARTED = "controller.started"
    CONTROLLER_RECOVERED = "controller.recovered"
    BOOTSTRAPPED = "controller.bootstrapped"
    RECORDS_COMMITTED = "controller.records_committed"
    FEATURE_FINALIZED = "controller.feature_finalized"
    FEATURE_UPDATE_REJECTED = "controller.feature_update_rejected"
    CLIENT_QUOTAS_ALTERED = "controller.client_quotas_altered"
    BROKER_REGISTERED = "controller.broker_registered"
    BROKER_REGISTRATION_REJECTED = "controller.broker_registration_rejected"
    BROKER_FENCED = "controller.broker_fenced"
    BROKER_UNFENCED = "controller.broker_unfenced"
    BROKER_UNREGISTERED = "controller.broker_unregistered"
    # A PartitionChangeRecord committed (ISR, leader or replicas of one partition moved).
    PARTITION_CHANGED = "controller.partition_changed"
    ALTER_PARTITION_REFUSED = "controller.alter_partition_refused"
    # AssignReplicasToDirs refused whole, or for some partitions (unknown, not a replica).
    ASSIGN_REPLICAS_TO_DIRS_REFUSED = "controller.assign_replicas_to_dirs_refused"
    # KIP-919: the active controller committed a controller's registration, or refused one.
    CONTROLLER_REGISTERED = "controller.controller_registered"
    CONTROLLER_REGISTRATION_REFUSED = "controller.controller_registration_refused"
    # This controller registering itself with the active one: sent and committed, or
    # failed (retried after a backoff), or waiting for metadata.version 3.7-IV0.
    CONTROLLER_SELF_REGISTERED = "controller.self_registered"
    CONTROLLER_SELF_REGISTRATION_FAILED = "controller.self_registration_failed"
    CONTROLLER_SELF_REGISTRATION_WAITING = "controller.self_registration_waiting"
    TOPICS_CREATED = "controller.topics_created"
    TOPICS_DELETED = "controller.topics_deleted"
    CONFIGS_ALTERED = "controller.configs_altered"
    STORAGE_FORMATTED = "storage.formatted"
    STORAGE_LOG_OPENED = "storage.log_opened"
    STORAGE_TORN_TAIL_TRUNCATED = "storage.torn_tail_truncated"
    STORAGE_SEGMENT_ROLLED = "storage.segment_rolled"
    STORAGE_TRUNCATED = "storage.truncated"
    STORAGE_WRITE_FAILED = "storage.write_failed"
    STORAGE_TRUNCATE_FAILED = "storage.truncate_failed"
    # The metadata log does not verify below its recovery point (or elsewhere a
    # torn write cannot explain): the node refuses to start.
    STORAGE_CORRUPTION_DETECTED = "storage.corruption_detected"
    STORAGE_RECOVERY_POINT_UNREADABLE = "storage.recovery_point_unreadable"
    # `kraftwerk storage recover` truncated the log to its last good batch.
    STORAGE_RECOVERED = "storage.recovered"
    # The quorum-state file cannot be valid: the node refuses to start.
    QUORUM_STATE_INVALID = "raft.quorum_state_invalid"
    # The Raft driver's view of a failed metadata log dir (ENOSPC, EIO): offline, retrying, back.
    STORAGE_DISK_FAILED = "storage.disk_failed"
    STORAGE_RECOVERY_FAILED = "storage.disk_recovery_failed"
    STORAGE_DISK_RECOVERED = "storage.disk_recovered"
    CONTROLLER_COMMAND_FAILED = "controller.command_failed"
    SNAPSHOT_WRITTEN = "storage.snapshot_written"
    SNAPSHOT_RECEIVED = "storage.snapshot_received"
    SNAPSHOT_DELETED = "storage.snapshot_deleted"
    SNAPSHOT_PARTIAL_REMOVED = "storage.snapshot_partial_removed"
    SNAPSHOT_CORRUPT = "storage.snapshot_corrupt"
    # A snapshot could not be written (ENOSPC, EIO): the node goes on with its log.
    SNAPSHOT_WRITE_FAILED = "storage.snapshot_write_failed"
    RECOVERED_FROM_SNAPSHOT = "controller.recovered_from_snapshot"
    CONTROLLER_SNAPSHOT_TAKEN = "controller.snapshot_taken"
    RAFT_DRIVER_STARTED = "raft.driver_started"
    RAFT_DRIVER_STOPPED = "raft.driver_stopped"
    RAFT_BECAME_LEADER = "raft.became_leader"
    RAFT_BECAME_FOLLOWER = "raft.became_follower"
    RAFT_ELECTION_STARTED = "raft.election_started"
    RAFT_PRE_VOTE_STARTED = "raft.pre_vote_started"
    RAFT_BECAME_UNATTACHED = "raft.became_unattached"
    RAFT_RESIGNED = "raft.resigned"
    RAFT_HIGH_WATERMARK_ADVANCED = "raft.high_watermark_advanced"
    RAFT_LOG_TRUNCATED = "raft.log_truncated"
    RAFT_SNAPSHOT_INSTALLED = "raft.snapshot_installed"
    RAFT_LOG_COMPACTED = "raft.log_compacted"
    # KIP-853: the voter set in effect changed (appended, fetched, truncated, or from a snapshot),
    # and a connection opened to a controller it names.
    RAFT_VOTERS_CHANGED = "raft.voters_changed"
    RAFT_PEER_ADDED = "raft.peer_added"
    RAFT_PEER_MOVED = "raft.peer_moved"
    # AddRaftVoter / RemoveRaftVoter on the leader: refused, or the change committed.
    RAFT_VOTER_CHANGE_REFUSED = "raft.voter_change_refused"
    RAFT_VOTER_CHANGE_COMMITTED = "raft.voter_change_committed"
    # A voter asked the leader to update its own entry (UpdateRaftVoter: its listener moved).
    RAFT_VOTER_UPDATE_SENT = "raft.voter_update_sent"
    # A KRaft request or response refused at the boundary (server/raft/validate.py) or by the core.
    RAFT_REQUEST_REFUSED = "raft.request_refused"
    RAFT_RESPONSE_REFUSED = "raft.response_refused"
    RAFT_CONFLICTING_LEADER = "raft.conflicting_leader"
    RAFT_EPOCH_EXHAUSTED = "raft.epoch_exhausted"
    # A peer refuses this node's KRaft requests (authorization, cluster id, voter set).
    RAFT_REFUSED_BY_PEER = "raft.refused_by_peer"
    # A controller listener beyond loopback that lets unauthenticated peers send KRaft RPCs.
    SECURITY_PLAINTEXT_CONTROLLER_LISTENER = "security.plaintext_controller_listener"
    SECURITY_UNAUTHENTICATED_CONTROLLER_LISTENER = "security.unauthenticated_controller_listener"
    CONTROLLER_ACTIVATED = "controller.activated"
    CONTROLLER_DEACTIVATED = "controller.deactivated"
    CONTROLLER_UNSUPPORTED_FINALIZED_LEVEL = "controller.unsupported_finalized_level"
    GATED_VERSION = "net.gated_version"
    # A metadata.version change left connections with a stale ApiVersions answer (KIP-778).
    STALE_CONNECTIONS_CLOSING = "net.stale_connections_closing"
    # The broker agent (server/broker/).
    BROKER_STARTED = "broker.started"
    BROKER_REGISTERING = "broker.registering"
    BROKER_REGISTERED_WITH_CONTROLLER = "broker.registered"
    BROKER_REGISTRATION_REFUSED = "broker.registration_refused"
    BROKER_STATE_CHANGED = "broker.state_changed"
    BROKER_HEARTBEAT_FAILED = "broker.heartbeat_failed"
    BROKER_METADATA_VERSION_CHANGED = "broker.metadata_version_changed"
    BROKER_RENEGOTIATED = "broker.api_versions_renegotiated"
    BROKER_CLIENT_CONNECTIONS_CLOSED = "broker.client_connections_closed"
    BROKER_UNSUPPORTED_FINALIZED_LEVEL = "broker.unsupported_finalized_level"
    BROKER_SHUTDOWN = "broker.controlled_shutdown"
    BROKER_SELF_UNREGISTERED = "broker.unregistered"
    BROKER_FORWARD_FAILED = "broker.forward_failed"
    METRICS_SERVING = "metrics.serving"
    METRICS_SCRAPE_FAILED = "metrics.scrape_failed"
    ZK_CONNECTION_STATE = "zk.connection_state"
    MIGRATION_STATE = "migration.state"
    MIGRATION_PRECONDITIONS_FAILED = "migration.preconditions_failed"
    MIGRATION_ZK_LEADERSHIP_CLAIMED = "migration.zk_leadership_claimed"
    MIGRATION_TRANSACTION_ABORTED = "migration.transaction_aborted"
    MIGRATION_COPY_STARTED = "migration.copy_started"
    MIGRATION_COPY_PROGRESS = "migration.copy_progress"
    MIGRATION_COPY_FINISHED = "migration.copy_finished"
    MIGRATION_DUAL_WRITE = "migration.dual_write"
    MIGRATION_FENCED = "migration.fenced"
    MIGRATION_FAILED = "migration.failed"
    MIGRATION_ZK_UNAVAILABLE = "migration.zookeeper_unavailable"
    MIGRATION_RECONCILED = "migration.reconciled"
    MIGRATION_WRITES_BLOCKED = "migration.writes_blocked"
    MIGRATION_WRITES_UNBLOCKED = "migration.writes_unblocked"
    MIGRATION_UPDATE_METADATA_SENT = "migration.update_metadata_sent"


def configure_logging(level: str = "info", stream=None, *, cache_loggers: bool = False) -> None:
    """JSON lines, one per event, with ISO timestamps; safe to call twice.

    `cache_loggers`: each module's logger is built once, at its first use after this
    call, instead of on every call (structlog's lazy proxy rebuilds it each time, ~5 µs,
    even for a debug line the level filters out). For a process that configures logging
    once and for good (a node); not where a later `configure` must take effect (tests
    capture logs by reconfiguring).
    """
    numeric = getattr(logging, level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=cache_loggers,
    )


def get_logger(component: str):
    return structlog.get_logger(component=component)


class RequestCount:
    """One (api, version) child of `RequestCounts`: a plain int the dispatcher adds to
    (`value += 1`) on the request path. Only the trio thread adds; a scrape reads it."""

    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0
        self.created = time.time()

    def inc(self, amount: int = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.value += amount

    def get(self) -> int:
        return self.value

    @property
    def _value(self) -> "RequestCount":
        # The read prometheus_client's children offer (`child._value.get()`).
        return self


class RequestCounts:
    """`kraftwerk_requests_total{api, version}`, exported like a prometheus Counter
    (`_total` and `_created` samples) but counted in plain ints: a Counter's `inc`
    takes a lock and checks its arguments, a measurable share of the cheapest
    requests' cost. `labels(api, version)` hands out the child to add to."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._children: dict[tuple[str, str], RequestCount] = {}
        registry.register(self)

    def labels(self, api: str, version: str) -> RequestCount:
        key = (str(api), str(version))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = RequestCount()
        return child

    def describe(self):
        return [CounterMetricFamily(self._name, self._documentation, labels=("api", "version"))]

    def collect(self):
        family = CounterMetricFamily(self._name, self._documentation, labels=("api", "version"))
        for (api, version), child in list(self._children.items()):
            family.add_metric((api, version), float(child.value), created=child.created)
        yield family


class Metrics:
    """Prometheus collectors for one server (own registry: tests can run many servers)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # The process's own, as prometheus_client reports them for any Python process:
        # CPU seconds, memory and open files (process_*), and the cyclic collector's
        # collections and objects collected by generation (python_gc_*), which show
        # whether full collections run (server/collector.py sets how often young ones do).
        ProcessCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = RequestCounts("kraftwerk_requests", "Requests handled", self.registry)
        self.request_errors = Counter(
            "kraftwerk_request_errors", "Requests refused or failed", ["reason"], registry=self.registry
        )
        self.request_latency_seconds = Histogram(
            "kraftwerk_request_latency_seconds", "Request latency", ["api"], registry=self.registry,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0),
        )
        self.connections = Gauge("kraftwerk_connections", "Open connections", registry=self.registry)
        self.metadata_offset = Gauge(
            "kraftwerk_metadata_last_applied_offset", "Last applied metadata offset", registry=self.registry
        )
        self.finalized_metadata_version = Gauge(
            "kraftwerk_finalized_metadata_version", "Finalized metadata.version level", registry=self.registry
        )
        # KIP-866's metrics, named after their MBeans (kafka.controller:type=KafkaController,...).
        self.features = Gauge(
            "kafka_controller_features", "Finalized features: 1 for each (feature, level) in force",
            ["feature", "level"], registry=self.registry,
        )
        self.migration_state = Gauge(
            "kafka_controller_migration_state",
            "ZooKeeper migration state (KIP-866: 1 ZooKeeper, 2 MigrationEligible, 3 MigrationReady, "
            "4 MigrationActive, 5 MigrationFinished, 6 KRaft); active controller only, 0 elsewhere", registry=self.registry,
        )
        self.zookeeper_write_behind_lag = Gauge(
            "kafka_controller_zookeeper_write_behind_lag",
            "Committed metadata records not yet written to ZooKeeper; active controller only, 0 elsewhere",
            registry=self.registry,
        )
        self.metadata_type = Gauge(
            "kafka_server_metadata_type", "Where this node's metadata comes from (1 ZooKeeper, 2 Dual, 3 KRaft)",
            registry=self.registry,
        )
        self.active_controller = Gauge(
            "kafka_controller_active_controller_count", "1 on the active controller", registry=self.registry,
        )
        self.raft_refused_messages = Counter(
            "kraftwerk_raft_refused_messages", "KRaft requests and responses refused as invalid or hostile",
            ["event", "error"], registry=self.registry,
        )
        self.raft_epoch = Gauge("kraftwerk_raft_epoch", "Current Raft epoch", registry=self.registry)
        self.raft_leader = Gauge("kraftwerk_raft_leader_id", "Current Raft leader (-1: unknown)",
                                 registry=self.registry)
        self.raft_high_watermark = Gauge("kraftwerk_raft_high_watermark", "Raft high watermark",
                                         registry=self.registry)
        self.raft_log_end_offset = Gauge("kraftwerk_raft_log_end_offset", "Raft log end offset",
                                         registry=self.registry)
        # A failed metadata log dir (ENOSPC, EIO on append or fsync): the node stays up,
        # serves reads and retries the disk (see server/raft/driver.py).
        self.storage_failures = Counter(
            "kraftwerk_storage_failures", "Metadata log write or fsync failures that took the log offline",
            registry=self.registry)
        self.storage_offline = Gauge(
            "kraftwerk_storage_offline", "1 while the metadata log is offline after a disk failure",
            registry=self.registry)
        self.registered_brokers = Gauge("kraftwerk_registered_brokers", "Registered brokers",
                                        ["fenced"], registry=self.registry)

    def note_storage_offline(self, offline: bool) -> None:
        """The Raft driver's `on_storage_change`: the log went offline (True) or is back."""
        if offline:
            self.storage_failures.inc()
        self.storage_offline.set(1 if offline else 0)
