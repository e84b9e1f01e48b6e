"""The API catalog: one `ApiSpec` per API kraftwerk serves, and everything derived from it.

Owns: `ApiSpec` (an API's versions, its handler per node role, the handler's kind, the
metadata.version gate, the ACL rule, whether it may come before SASL authentication,
and how its error response is built), `CATALOG` ({ApiKey: ApiSpec}), `NodeRole`,
`HandlerKind`, `ServedApi` and `served_table(role)` (one node's table, what the
dispatcher reads per request), the derived sets `FORWARDABLE_APIS` and
`PRE_AUTHENTICATION_APIS`, `gate_runs` (a gate as runs of versions) and
`render_api_table()` (README's "Supported APIs" table, checked by tests/test_catalog.py).

Rules kept here:
- Adding an API is one entry here plus one handler module: dispatch, ApiVersions and
  gating (server/gating.py), the authorizer, Envelope and broker forwarding, and the
  README all read this table; nothing else keys a table by API.
- Versions are what kraftwerk implements and tests, checked against the protocol
  declaration when this module is imported (ValueError, not assert: `python -O` must
  not serve versions the codec cannot encode).
- A broker role whose handler is `forwarded.handle` relays the API to the active
  controller; that is what makes an API forwardable (the controller's Envelope handler
  accepts exactly those). Forwarding waits for the controller, so it is always async.
- Handler modules never import this module; it imports them.

ACL facts carried over from Kafka's KafkaApis / ControllerApis: cluster-wide APIs need
one operation on the CLUSTER resource (ALTER for operator writes, DESCRIBE for reads,
CLUSTER_ACTION for the inter-node RPCs; UnregisterBroker ALTER, an operator's action in
Kafka; client quotas DESCRIBE_CONFIGS / ALTER_CONFIGS, as for the cluster's configs); APIs that name topics or config resources are authorized per item in their
handlers; ApiVersions and the SASL exchange need nothing. Kafka's controllers refuse
DescribeCluster without DESCRIBE on CLUSTER, its brokers answer it and report no
authorized operations instead (`on_brokers=False`).

The ZooKeeper-mode broker's table is not gated by metadata.version: Kafka's brokers do
not gate ApiVersions per API by it (FACTS.md §13).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from protocol.api_keys import ApiKey
from protocol.header import request_header_version, response_header_version
from protocol.registry import API_MESSAGES
from protocol.schema import Message, Versions
from server.controller.features import metadata_version_from_level
from server.handlers import (
    add_raft_voter,
    allocate_producer_ids,
    alter_client_quotas,
    alter_configs,
    alter_partition,
    alter_user_scram_credentials,
    api_versions,
    assign_replicas_to_dirs,
    broker_heartbeat,
    broker_registration,
    controller_registration,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_migration,
    describe_quorum,
    describe_user_scram_credentials,
    envelope,
    forwarded,
    incremental_alter_configs,
    metadata,
    migration_check,
    remove_raft_voter,
    sasl_authenticate,
    sasl_handshake,
    unregister_broker,
    update_features,
    update_raft_voter,
    update_metadata,
)
from server.handlers.standby import forwarded_when_standby
from server.raft import rpc
from server.authorization import AclOperation
from server.security.api_rules import ALTER, CLUSTER_ACTION, DESCRIBE, NOTHING, PER_ITEM, ApiRule
from server.zkbroker import metadata as zk_metadata

Handler = Callable[..., Any]
# (request, version, code, message) -> the API's full response body refusing the request.
ErrorBuilder = Callable[[Any, int, int, "str | None"], dict]


class NodeRole(enum.Enum):
    CONTROLLER = "controller"
    BROKER = "broker"
    ZK_BROKER = "zk_broker"


class HandlerKind(enum.Enum):
    # handler(ctx, request) -> body, answered inline.
    SYNC = "sync"
    # async handler(ctx, request) -> body: waits (for the controller loop); gets a task.
    ASYNC = "async"
    # handler(ctx, request, answer) returns at once and calls answer(body) exactly once,
    # now or later, from any task: no task per request (the KRaft RPCs, see dispatch.py).
    ANSWERS_LATER = "answers_later"


FORWARD = forwarded.handle
_NO_GATE: Mapping[int, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: ApiKey
    min_version: int
    max_version: int
    # The handler per node role; None: that role does not serve the API. FORWARD in the
    # broker role: relayed to the active controller.
    controller: Handler | None = None
    broker: Handler | None = None
    zk_broker: Handler | None = None
    # The kind of this API's own handlers (forwarding is always ASYNC).
    kind: HandlerKind = HandlerKind.SYNC
    rule: ApiRule = NOTHING
    # {request version: metadata.version level it needs} (KIP-778, server/gating.py);
    # versions above the highest listed inherit its gate.
    gate: Mapping[int, int] = field(default_factory=lambda: _NO_GATE)
    # Allowed on a SASL listener before the connection has authenticated.
    before_authentication: bool = False
    # For APIs without a top-level error code: the code in every per-item result.
    error_builder: ErrorBuilder | None = None
    # A read answered from the node's image (a sync handler) that clients use to check
    # their own writes: on a node that is not the leader the dispatcher serves it after
    # the node's read barrier (server/nodes/forwarding.py).
    reads_image: bool = False
    # (request declaration, version) -> a hand-written decoder `(frame, body offset) ->
    # body` for the requests every connection starts with; it must decode and fail
    # exactly as the declaration does (None: the declaration decodes).
    request_decoder: Callable[[Message, int], Callable[[bytes, int], Any]] | None = None
    # (response declaration, version) -> a memo of whole answers by request bytes, for a
    # sync handler whose answer the request's bytes and the node's served tables decide
    # (`token(services)`, `token_reader(services)`, `recall(frame, connection, ranges, token)`,
    # `learn(frame, request, answer, ranges, services)`, see api_versions.AnswerMemo); None:
    # every request is handled.
    answer_memo: Callable[[Message, int], Any] | None = None
    # README's notes column.
    notes: str = ""
    name: str = field(init=False)
    request: Message = field(init=False)
    response: Message = field(init=False)

    def __post_init__(self) -> None:
        messages = API_MESSAGES.get(self.key)
        if messages is None:
            raise ValueError(f"API key {self.key} has no protocol declaration")
        request, response = messages
        low, high = request.version_range
        if not low <= self.min_version <= self.max_version <= high:
            raise ValueError(f"{request.name}: cannot serve v{self.min_version}-{self.max_version}, "
                             f"the protocol declares v{low}-{high}")
        for version in self.gate:
            if not low <= version <= high:
                raise ValueError(f"{request.name}: gate names v{version}, not declared (v{low}-{high})")
        object.__setattr__(self, "name", request.name.removesuffix("Request"))
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "response", response)
        if isinstance(self.gate, dict):
            object.__setattr__(self, "gate", MappingProxyType(dict(self.gate)))

    def handler(self, role: NodeRole) -> Handler | None:
        if role is NodeRole.CONTROLLER:
            return self.controller
        if role is NodeRole.BROKER:
            return self.broker
        return self.zk_broker

    @property
    def forwarded_by_brokers(self) -> bool:
        return self.broker is FORWARD

    def has_top_level_error(self, version: int) -> bool:
        """Whether the response has a top-level ErrorCode in `version`."""
        return any(f.name == "ErrorCode" and version in Versions.parse(f.versions) for f in self.response.fields)

    def error_response(self, request: Any, version: int, code: int, message: str | None) -> dict:
        """The whole request refused with `code`, in this API's own shape: the per-item
        builder where there is one, else the response's defaults with the top-level
        error code (and message, where the response has one)."""
        if self.error_builder is not None:
            return self.error_builder(request, version, code, message)
        body = dict(self.response.default(version))
        body.pop("_unknown_tagged_fields", None)
        body["error_code"] = int(code)
        if "error_message" in body:
            body["error_message"] = message
        return body


def _without_version(builder: Callable[[Any, int, str | None], dict]) -> ErrorBuilder:
    """A handler module's `error_response(request, code, message)` as an ErrorBuilder."""
    def build(request: Any, version: int, code: int, message: str | None) -> dict:
        return builder(request, code, message)
    return build


def _delete_topics_errors(request: Any, version: int, code: int, message: str | None) -> dict:
    return delete_topics.error_response(request, version, code, message)


_SYNC, _ASYNC, _LATER = HandlerKind.SYNC, HandlerKind.ASYNC, HandlerKind.ANSWERS_LATER
_KRAFT_NOTES = "KRaft RPC between controllers (and broker observers); answered by the Raft driver."

_SPECS = (
    ApiSpec(ApiKey.API_VERSIONS, 0, 5, api_versions.handle, api_versions.handle, api_versions.handle,
            before_authentication=True, reads_image=True, request_decoder=api_versions.request_decoder,
            answer_memo=api_versions.answer_memo,
            notes="v3+: SupportedFeatures, FinalizedFeaturesEpoch, FinalizedFeatures, ZkMigrationReady (a "
                  "ZooKeeper-mode broker: its `kafka.metadata.migration.enable`); client software name/version "
                  "validated; unknown versions get a v0 reply with UNSUPPORTED_VERSION."),
    ApiSpec(ApiKey.METADATA, 0, 12, metadata.handle, metadata.handle, zk_metadata.handle, rule=PER_ITEM,
            reads_image=True,
            notes="Kafka's controllers do not serve it; kraftwerk does so clients can bootstrap. Controllers list "
                  "the controllers, brokers themselves and the unfenced brokers, a ZooKeeper-mode broker what "
                  "UpdateMetadata told it."),
    ApiSpec(ApiKey.DESCRIBE_QUORUM, 0, 2, describe_quorum.handle, FORWARD, kind=_ASYNC, rule=ApiRule(DESCRIBE),
            notes="`__cluster_metadata-0` only; answered by the Raft leader (standbys forward it)."),
    ApiSpec(ApiKey.UPDATE_FEATURES, 0, 2, update_features.handle, FORWARD, kind=_ASYNC, rule=ApiRule(ALTER),
            # v1: ValidateOnly/UpgradeType (3.3-IV0); v2: 3.9-IV0.
            gate={1: 4, 2: 21},
            notes="Kafka's controller semantics and messages; validate-only; all-or-nothing; NOT_CONTROLLER on "
                  "standbys."),
    ApiSpec(ApiKey.DESCRIBE_CLUSTER, 0, 1, describe_cluster.handle, describe_cluster.handle,
            describe_cluster.handle, rule=ApiRule(DESCRIBE, on_brokers=False), reads_image=True,
            # v1: EndpointType (KIP-919, controller registration at 3.7-IV0).
            gate={1: 15},
            notes="EndpointType 1 lists the controllers then the unfenced registered brokers (brokers: their own "
                  "view, EndpointType 1 only); 2 lists the registered controllers with an endpoint on the "
                  "request's listener and needs ALTER on CLUSTER too (Kafka's controllers)."),
    ApiSpec(ApiKey.BROKER_REGISTRATION, 0, 4, broker_registration.handle, kind=_ASYNC,
            rule=ApiRule(CLUSTER_ACTION),
            # v1: IsMigratingZkBroker (3.4-IV0); v2: LogDirs (KIP-858, 3.7-IV2);
            # v3: PreviousBrokerEpoch; v4: no new field, same gate.
            gate={1: 8, 2: 17, 3: 17, 4: 17},
            notes="Refused (UNSUPPORTED_VERSION) when the broker cannot run a finalized level."),
    ApiSpec(ApiKey.BROKER_HEARTBEAT, 0, 2, broker_heartbeat.handle, kind=_ASYNC, rule=ApiRule(CLUSTER_ACTION),
            # v1: OfflineLogDirs (KIP-858); v2: CordonedLogDirs (KIP-1066), which Kafka's
            # brokers send from metadata.version 4.3-IV0 on.
            gate={1: 17},
            notes="Unfencing once caught up; fencing after `broker.session.timeout.ms` without heartbeats."),
    ApiSpec(ApiKey.UNREGISTER_BROKER, 0, 0, unregister_broker.handle, FORWARD, kind=_ASYNC, rule=ApiRule(ALTER),
            notes="An operator removing a broker that is gone (`kafka-cluster unregister`); brokers forward it."),
    ApiSpec(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0, allocate_producer_ids.handle, kind=_ASYNC,
            rule=ApiRule(CLUSTER_ACTION),
            notes="Blocks of 1000 producer ids for a registered broker at its current epoch (ProducerIdsRecord)."),
    ApiSpec(ApiKey.ALTER_PARTITION, 2, 3, alter_partition.handle, kind=_ASYNC, rule=ApiRule(CLUSTER_ACTION),
            # v2: topic ids (3.2-IV0, Kafka 4's baseline); v3: NewIsrWithEpochs (KIP-903, 3.5-IV1).
            gate={2: 3, 3: 10},
            notes="A partition leader's new ISR (PartitionChangeRecord) with Kafka's checks: broker and partition "
                  "epochs, leader, eligible (unfenced, not shutting down) ISR members, leader recovery state."),
    ApiSpec(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, 0, assign_replicas_to_dirs.handle, kind=_ASYNC,
            rule=ApiRule(CLUSTER_ACTION),
            notes="KIP-858: a broker with several log directories names each replica's directory "
                  "(PartitionChangeRecord Directories; metadata.version 3.7-IV2+, else UNSUPPORTED_VERSION); "
                  "a replica put in an offline directory leaves the ISR."),
    ApiSpec(ApiKey.CONTROLLER_REGISTRATION, 0, 0, controller_registration.handle, kind=_ASYNC,
            rule=ApiRule(CLUSTER_ACTION),
            notes="KIP-919: every controller registers its listeners and supported features with the active "
                  "controller (RegisterControllerRecord; metadata.version 3.7-IV0+, else UNSUPPORTED_VERSION)."),
    ApiSpec(ApiKey.ADD_RAFT_VOTER, 0, 1, add_raft_voter.handle, kind=_ASYNC, rule=ApiRule(ALTER),
            notes="KIP-853: the Raft leader adds a caught-up observer (asked its ApiVersions: it must support the "
                  "finalized kraft.version) to the voters; one change at a time; answered when the new voter set "
                  "commits (v1 AckWhenCommitted=false: when appended). Kafka's checks, codes and messages."),
    ApiSpec(ApiKey.REMOVE_RAFT_VOTER, 0, 0, remove_raft_voter.handle, kind=_ASYNC, rule=ApiRule(ALTER),
            notes="KIP-853: the Raft leader removes a voter (id and directory id); answered when the smaller set "
                  "commits; a leader that removed itself resigns then. Not the last voter (VOTER_NOT_FOUND)."),
    ApiSpec(ApiKey.UPDATE_RAFT_VOTER, 0, 0, update_raft_voter.handle, kind=_ASYNC, rule=ApiRule(CLUSTER_ACTION),
            notes="KIP-853: a voter's own endpoints and kraft.version range; the Raft leader rewrites the voter "
                  "set at kraft.version 1 (answered at once). kraftwerk's voters send it when their controller "
                  "listener moved."),
    ApiSpec(ApiKey.CREATE_TOPICS, 0, 7, create_topics.handle, FORWARD, kind=_ASYNC, rule=PER_ITEM,
            error_builder=_without_version(create_topics.error_response),
            notes="Topics with partitions and assignments, configs, validate-only; during a migration also "
                  "written to ZooKeeper."),
    ApiSpec(ApiKey.DELETE_TOPICS, 0, 6, delete_topics.handle, FORWARD, kind=_ASYNC, rule=PER_ITEM,
            error_builder=_delete_topics_errors, notes="By name or topic id."),
    ApiSpec(ApiKey.DESCRIBE_CONFIGS, 0, 4, describe_configs.handle, describe_configs.handle, rule=PER_ITEM,
            reads_image=True,
            notes="Topic configs from the image; the answering node's own broker configs with Kafka's sources "
                  "and synonyms, other brokers' dynamic configs; its loggers (BROKER_LOGGER)."),
    ApiSpec(ApiKey.CREATE_PARTITIONS, 0, 3, create_partitions.handle, FORWARD, kind=_ASYNC, rule=PER_ITEM,
            error_builder=_without_version(create_partitions.error_response),
            notes="Increase only; explicit assignments or CreateTopics' placement; validate-only."),
    ApiSpec(ApiKey.ALTER_CONFIGS, 0, 2, alter_configs.handle, FORWARD, kind=_ASYNC, rule=PER_ITEM,
            error_builder=_without_version(alter_configs.error_response),
            notes="Replaces a topic's or broker's whole set of dynamic configs; validate-only."),
    ApiSpec(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, incremental_alter_configs.handle, FORWARD, kind=_ASYNC,
            rule=PER_ITEM, error_builder=_without_version(incremental_alter_configs.error_response),
            notes="Topic and broker configs; validate-only."),
    ApiSpec(ApiKey.UPDATE_METADATA, 8, 8, zk_broker=update_metadata.handle, rule=ApiRule(CLUSTER_ACTION),
            notes="The controller of the moment (a KRaft controller during a migration, `IsKRaftController`) "
                  "tells a ZooKeeper-mode broker who the controller is, the live brokers and the partition "
                  "states; stale controller or broker epochs are refused."),
    ApiSpec(ApiKey.MIGRATION_CHECK, 0, 0, zk_broker=migration_check.handle, rule=ApiRule(CLUSTER_ACTION),
            notes="kraftwerk's own (KIP-866's RPC, which Apache Kafka dropped): cluster id and whether the "
                  "migration is enabled in the ZooKeeper-mode broker's static config."),
    ApiSpec(ApiKey.DESCRIBE_MIGRATION, 0, 0, describe_migration.handle, FORWARD, rule=ApiRule(DESCRIBE),
            notes="kraftwerk's own, behind `kraftwerk migration status`: state, write-behind lag, ZooKeeper and "
                  "KRaft brokers, failed preconditions."),
    ApiSpec(ApiKey.SASL_HANDSHAKE, 0, 1, sasl_handshake.handle, sasl_handshake.handle,
            before_authentication=True,
            notes="v1 flow only (v0 is answered UNSUPPORTED_VERSION and the connection closes); PLAIN, "
                  "SCRAM-SHA-256, SCRAM-SHA-512."),
    ApiSpec(ApiKey.SASL_AUTHENTICATE, 0, 2, sasl_authenticate.handle, sasl_authenticate.handle, kind=_ASYNC,
            before_authentication=True, notes="No re-authentication (session lifetime 0)."),
    ApiSpec(ApiKey.DESCRIBE_ACLS, 1, 3, describe_acls.handle, describe_acls.handle, rule=ApiRule(DESCRIBE),
            reads_image=True,
            notes="ACLs in the metadata log (brokers: from their image); SECURITY_DISABLED without an authorizer."),
    ApiSpec(ApiKey.CREATE_ACLS, 1, 3, create_acls.handle, FORWARD, kind=_ASYNC, rule=ApiRule(ALTER),
            error_builder=_without_version(create_acls.error_response),
            notes="ACLs in the metadata log; SECURITY_DISABLED without an authorizer."),
    ApiSpec(ApiKey.DELETE_ACLS, 1, 3, delete_acls.handle, FORWARD, kind=_ASYNC, rule=ApiRule(ALTER),
            error_builder=_without_version(delete_acls.error_response),
            notes="ACLs in the metadata log; SECURITY_DISABLED without an authorizer."),
    ApiSpec(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, describe_user_scram_credentials.handle,
            describe_user_scram_credentials.handle, rule=ApiRule(DESCRIBE), reads_image=True,
            notes="SCRAM users in the metadata log (brokers: from their image)."),
    ApiSpec(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, describe_client_quotas.handle, describe_client_quotas.handle,
            rule=ApiRule(AclOperation.DESCRIBE_CONFIGS), reads_image=True,
            error_builder=_without_version(describe_client_quotas.error_response),
            notes="Client quotas in the metadata log (brokers: from their image); Kafka's filter matching "
                  "(exact, default, any; strict)."),
    ApiSpec(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, alter_client_quotas.handle, FORWARD, kind=_ASYNC,
            rule=ApiRule(AclOperation.ALTER_CONFIGS),
            error_builder=_without_version(alter_client_quotas.error_response),
            notes="ClientQuotaRecords for user, client-id and ip entities with Kafka's validation; validate-only."),
    ApiSpec(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, alter_user_scram_credentials.handle, FORWARD,
            kind=_ASYNC, rule=ApiRule(ALTER),
            error_builder=_without_version(alter_user_scram_credentials.error_response),
            notes="SCRAM users in the metadata log (metadata.version 3.5-IV2+)."),
    ApiSpec(ApiKey.ENVELOPE, 0, 0, envelope.handle, kind=_ASYNC, rule=ApiRule(CLUSTER_ACTION),
            notes="A broker forwarding a client's request with the client's principal; the request inside is "
                  "authorized as the client."),
    ApiSpec(ApiKey.FETCH, 17, 17, rpc.offer, kind=_LATER, rule=ApiRule(CLUSTER_ACTION), notes=_KRAFT_NOTES),
    ApiSpec(ApiKey.VOTE, 0, 1, rpc.offer, kind=_LATER, rule=ApiRule(CLUSTER_ACTION), notes=_KRAFT_NOTES),
    ApiSpec(ApiKey.BEGIN_QUORUM_EPOCH, 0, 1, rpc.offer, kind=_LATER, rule=ApiRule(CLUSTER_ACTION),
            notes=_KRAFT_NOTES),
    ApiSpec(ApiKey.END_QUORUM_EPOCH, 0, 1, rpc.offer, kind=_LATER, rule=ApiRule(CLUSTER_ACTION),
            notes=_KRAFT_NOTES),
    ApiSpec(ApiKey.FETCH_SNAPSHOT, 0, 1, rpc.offer, kind=_LATER, rule=ApiRule(CLUSTER_ACTION),
            notes=_KRAFT_NOTES),
)


def _index(specs: tuple[ApiSpec, ...]) -> Mapping[ApiKey, ApiSpec]:
    table: dict[ApiKey, ApiSpec] = {}
    for spec in specs:
        if spec.key in table:
            raise ValueError(f"{spec.name} is listed twice in the API catalog")
        table[spec.key] = spec
    return MappingProxyType(table)


CATALOG: Mapping[ApiKey, ApiSpec] = _index(_SPECS)

# What a broker relays to the active controller, and so what an Envelope may carry.
FORWARDABLE_APIS: frozenset[ApiKey] = frozenset(spec.key for spec in _SPECS if spec.forwarded_by_brokers)
# What an unauthenticated connection on a SASL listener may send.
PRE_AUTHENTICATION_APIS: frozenset[ApiKey] = frozenset(spec.key for spec in _SPECS if spec.before_authentication)


@dataclass(frozen=True, slots=True)
class ServedApi:
    """One ApiSpec as one node role serves it: the fields the dispatcher reads per
    request, resolved once."""

    api_key: ApiKey
    name: str
    min_version: int
    max_version: int
    handler: Handler
    is_async: bool
    answers_later: bool
    request: Message
    response: Message
    # Header versions indexed by API version, resolved once: the per-request
    # path must not re-derive Kafka's flexible-version rule.
    request_header_versions: tuple[int, ...]
    response_header_versions: tuple[int, ...]
    rule: ApiRule
    before_authentication: bool
    # Brokers forward it to the active controller, so an Envelope may carry it.
    forwardable: bool
    # (request, version, code, message) -> body: the spec's error_response.
    error_response: ErrorBuilder
    spec: ApiSpec
    # Served after the node's read barrier where the node needs one (see ApiSpec).
    reads_image: bool = False

    def request_header_version(self, version: int) -> int:
        return self.request_header_versions[version]

    def response_header_version(self, version: int) -> int:
        return self.response_header_versions[version]


def serve(spec: ApiSpec, role: NodeRole) -> ServedApi | None:
    """`spec` as `role` serves it, or None if that role does not."""
    handler = spec.handler(role)
    if handler is None:
        return None
    kind = HandlerKind.ASYNC if handler is FORWARD else spec.kind
    # A ZooKeeper-mode broker answers from what UpdateMetadata told it: no quorum to wait for.
    reads_image = spec.reads_image and role is not NodeRole.ZK_BROKER
    if reads_image and kind is not HandlerKind.SYNC:
        raise ValueError(f"{spec.name}: reads_image needs a sync handler")
    if role is NodeRole.CONTROLLER and spec.forwarded_by_brokers and kind is HandlerKind.ASYNC \
            and spec.key != ApiKey.DESCRIBE_QUORUM:
        # A standby relays the writes clients send it (DescribeQuorum relays itself).
        handler = forwarded_when_standby(handler)
    request = spec.request
    low = request.version_range[0]
    # Every version the protocol declares: an unserved one is still answered
    # (UNSUPPORTED_VERSION in its own shape), so its headers must be known too.
    versions = range(max(spec.max_version, request.version_range[1]) + 1)
    return ServedApi(
        spec.key, spec.name, spec.min_version, spec.max_version, handler,
        kind is HandlerKind.ASYNC, kind is HandlerKind.ANSWERS_LATER, request, spec.response,
        tuple(request_header_version(request, v) if v >= low else 2 for v in versions),
        tuple(response_header_version(request, v) if v >= low else 0 for v in versions),
        spec.rule, spec.before_authentication, spec.forwarded_by_brokers, spec.error_response, spec,
        reads_image,
    )


def served_table(role: NodeRole) -> dict[ApiKey, ServedApi]:
    """What a node of `role` serves: {api key: ServedApi}."""
    table = {}
    for spec in _SPECS:
        api = serve(spec, role)
        if api is not None:
            table[spec.key] = api
    return table


def gate_runs(gate: Mapping[int, int]) -> list[tuple[str, int]]:
    """A gate as (versions, level) runs of consecutive versions with the same level,
    e.g. [("v1", 8), ("v2+", 17)]: the last run also holds for versions not yet listed."""
    runs: list[tuple[int, int, int]] = []  # (first version, last version, level)
    for version in sorted(gate):
        level = gate[version]
        if runs and runs[-1][2] == level and runs[-1][1] == version - 1:
            runs[-1] = (runs[-1][0], version, level)
        else:
            runs.append((version, version, level))
    shown = []
    for index, (first, last, level) in enumerate(runs):
        if index == len(runs) - 1:
            text = f"v{first}+"
        elif first == last:
            text = f"v{first}"
        else:
            text = f"v{first}-v{last}"
        shown.append((text, level))
    return shown


# -- README ---------------------------------------------------------------------------

def _versions_text(spec: ApiSpec) -> str:
    if spec.min_version == spec.max_version:
        return str(spec.min_version)
    return f"{spec.min_version}–{spec.max_version}"


def _served_by_text(spec: ApiSpec) -> str:
    roles = []
    if spec.controller is not None:
        roles.append("controller")
    if spec.broker is not None:
        roles.append("broker (forwards)" if spec.forwarded_by_brokers else "broker")
    if spec.zk_broker is not None:
        roles.append("ZooKeeper-mode broker")
    return ", ".join(roles)


def _gate_text(spec: ApiSpec) -> str:
    return "; ".join(f"{versions}: {metadata_version_from_level(level).name}"
                     for versions, level in gate_runs(spec.gate)) or "—"


def _acl_text(spec: ApiSpec) -> str:
    rule = spec.rule
    if rule.per_item:
        return "per topic / resource"
    if rule.operation is None:
        return "before SASL authentication" if spec.before_authentication else ""
    text = f"{rule.operation.name} on CLUSTER"
    return text if rule.on_brokers else f"{text} (controllers)"


def render_api_table() -> str:
    """README's "Supported APIs" table (Markdown), one row per API in key order."""
    lines = ["| API | key | versions | served by | metadata.version gate | ACL | notes |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for spec in sorted(_SPECS, key=lambda s: s.key):
        cells = (spec.name, str(int(spec.key)), _versions_text(spec), _served_by_text(spec), _gate_text(spec),
                 _acl_text(spec), spec.notes)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
