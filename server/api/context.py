"""What a handler receives with each request.

Owns: `RequestContext` (the request's identity: API, version, correlation id,
client, connection, principal, and `services`) and the Protocols naming what a
handler may use of the node that serves it.

The Protocols are grouped by what varies between node kinds, so a handler's
declared Protocol says which nodes can serve it:
- `NodeServices`: what every node kind provides (a controller, a KRaft broker, a
  ZooKeeper-mode broker): identity and config, the feature and API-version views
  (ApiVersions), endpoints, the authorizer. Built from four small parts
  (`NodeIdentity`, `FeatureViews`, `EndpointViews`, `AuthorizerView`) so helper
  functions can ask for just the part they read.
- `ServingServices`: adds the committed metadata image (`MetadataImage`); what the
  read handlers shared by controllers and KRaft brokers use.
- `ControllerServices`: adds what only a controller has: its command queue
  (`ControllerWrites`), the quorum view (`QuorumView`), the migration status
  (`MigrationView`).
- `BrokerServices`: adds forwarding to the active controller (`ControllerForwarding`).
- `ZkBrokerServices`: adds the ZooKeeper-mode broker's UpdateMetadata cache.
- `RaftEndpoint`: the node's Raft driver, to which the inbound KRaft RPCs go.

Rules kept here:
- A handler reaches the node only through `ctx.services`, typed by one of these
  Protocols in a small accessor; tests/server/test_handler_context.py checks every
  handler module against the Protocol it declares.
- Members declared as attributes are values a handler may read into (the config, a
  frozen dataclass; the committed image, read-only; the authorizer); members
  declared as methods are called, never walked past.
- Node classes list the Protocols they implement and define every member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from server.security.model import KafkaPrincipal

if TYPE_CHECKING:
    from server.api.catalog import ServedApi
    from server.config import ServerConfig, VoterAddress
    from server.controller.commands import ControllerConfig, ControllerResult
    from server.controller.state import ControllerState
    from server.migration.driver import MigrationStatus
    from server.net.listener import Connection
    from server.nodes.serving import Endpoint
    from server.raft.driver import RaftDriver
    from server.security.authorizer import StandardAuthorizer
    from server.zkbroker.cache import UpdateOutcome, ZkMetadataCache

# A controller command: (state, heartbeat tracker, next offset, now_ms) -> ControllerResult.
Command = Callable[..., "ControllerResult"]


class NodeIdentity(Protocol):
    """Who the node is and how it was configured."""

    config: "ServerConfig"  # frozen: read its fields
    node_id: int
    cluster_id: str
    is_broker: bool


class FeatureViews(Protocol):
    """Supported and finalized features and the API versions served now."""

    served_apis: "dict[int, ServedApi]"  # what the software serves, ungated

    def supported_features(self) -> dict[str, tuple[int, int]]: ...

    def finalized_levels(self) -> dict[str, int]: ...

    def finalized_features_epoch(self) -> int: ...

    def advertised_ranges(self) -> dict[int, tuple[int, int]]: ...

    def api_versions_body(self, version: int) -> bytes: ...


class EndpointViews(Protocol):
    """Where clients are sent: the nodes they are told about and the controller."""

    def client_endpoints(self, listener_name: str | None = None) -> "list[Endpoint]": ...

    def registered_broker_endpoints(self, include_fenced: bool,
                                    listener_name: str | None = None) -> "list[Endpoint]": ...

    def registered_controller_endpoints(self, listener_name: str | None) -> "list[Endpoint]": ...

    def active_controller_id(self) -> int: ...


class AuthorizerView(Protocol):
    """The ACL authorizer; None authorizes everything (Kafka without an authorizer)."""

    authorizer: "StandardAuthorizer | None"


class NodeServices(NodeIdentity, FeatureViews, EndpointViews, AuthorizerView, Protocol):
    """What every node kind provides."""


class MetadataImage(Protocol):
    """The committed metadata image (None before the node opened its log). Read-only:
    only the replay task changes it."""

    image: "ControllerState | None"


class ServingServices(NodeServices, MetadataImage, Protocol):
    """A node that replays the metadata log: a controller or a KRaft broker."""


class ControllerWrites(Protocol):
    """The controller's command queue and what commands need to know."""

    controller_config: "ControllerConfig"

    async def submit(self, command: Command, *, gated: bool = False) -> "ControllerResult": ...

    async def learn_quorum_features(self, timeout_s: float) -> None: ...

    def quorum_supported_features(self) -> dict: ...

    async def upgrade_kraft_version(self, level: int, validate_only: bool) -> "tuple[int, str | None]": ...

    def kraft_version(self) -> int | None: ...


class QuorumView(Protocol):
    """DescribeQuorum's data and where the Raft leader is."""

    voters: "tuple[VoterAddress, ...]"

    def is_quorum_leader(self) -> bool: ...

    def quorum_partition_state(self) -> dict: ...

    def quorum_nodes(self) -> list[dict]: ...


class MigrationView(Protocol):
    """Where a ZooKeeper -> KRaft migration is (KIP-866)."""

    def is_active_controller(self) -> bool: ...

    def migration_kip_state(self) -> int: ...

    def migration_status(self) -> "MigrationStatus | None": ...

    def migration_write_lag(self) -> int: ...


class ControllerForwarding(Protocol):
    """A broker relays controller APIs to the active controller; so does a standby
    controller with the writes clients send it."""

    async def forward_to_controller(self, api_key: int, version: int, request: Any,
                                    ctx: "RequestContext | None" = None) -> dict | None: ...


class ControllerServices(ServingServices, ControllerWrites, QuorumView, MigrationView, ControllerForwarding,
                         Protocol):
    """A controller node."""


class BrokerServices(ServingServices, ControllerForwarding, Protocol):
    """A KRaft broker agent."""


class ZkBrokerServices(NodeServices, Protocol):
    """A ZooKeeper-mode broker: its metadata is what UpdateMetadata told it."""

    metadata_cache: "ZkMetadataCache"  # read-only for handlers
    migration_enabled: bool

    def apply_update_metadata(self, request: Any) -> "UpdateOutcome": ...


class RaftEndpoint(Protocol):
    """The node's Raft driver (None on nodes without one), which answers the KRaft RPCs."""

    raft_driver: "RaftDriver | None"


class RequestContext:
    """What a handler may know about the request it is answering."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "connection", "services", "principal",
                 "client_host", "forwarded_by", "advertised")

    def __init__(self, api_key, api_version, correlation_id, client_id, connection, services) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.connection: Connection = connection
        # The serving node, seen by each handler through the Protocol it declares.
        self.services: Any = services
        # Whom the request is authorized as: the connection's principal, or, for a
        # request a broker forwarded in an Envelope, the client's.
        self.principal: KafkaPrincipal = connection.principal
        self.client_host: str = connection.host
        # The forwarding broker's principal when the request came in an Envelope.
        self.forwarded_by: KafkaPrincipal | None = None
        # The node's advertised API versions (`advertised_ranges()`) as the dispatcher
        # read them to judge this request, when the handler runs in that same
        # synchronous step (None otherwise: ask the node).
        self.advertised: dict[int, tuple[int, int]] | None = None
