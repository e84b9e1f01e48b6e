"""What every serving node (controller or broker) answers from its metadata image.

Owns: `ServingNode`, the read-only views the handlers share — supported and
finalized features, the API versions advertised now (gated by the finalized
metadata.version, KIP-778), the cached ApiVersions body, registered brokers.
A subclass provides `state` (a `ControllerState`: the committed image),
`served_apis`, `config`, `metrics`, `raft_driver`, and the endpoint views
that differ by role. Also the gauges every KRaft node refreshes alike.

Rules kept here:
- Views read the committed image only, never speculative state.
- The ApiVersions body is cached per (version, finalized features epoch)
  (`ApiVersionsCache`, also used by the ZooKeeper-mode broker): it changes
  only when features change, and ApiVersions is the hottest request.
- After a metadata.version change a node closes, once idle, only the client
  connections whose ApiVersions answer the change made stale
  (`close_stale_connections`; `kraftwerk.metadata.version.change.close.connections`
  turns it off). Requests on them are answered until then (server/dispatch.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from server.api.catalog import ServedApi
from server.controller import commands
from server.controller.features import NodeFeatures
from server.gating import AdvertisedApis
from server.handlers import api_versions
from server.net.listener import ConnectionRegistry
from server.security.authorizer import build_authorizer
from server.security.sasl import SaslServerContext

# Bodies kept per node: one per (version, features epoch) seen lately.
API_VERSIONS_CACHE_MAX_ENTRIES = 64


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class ApiVersionsCache:
    """Encoded ApiVersions bodies by (version, finalized features epoch): a body changes
    only when the features do, and ApiVersions is the hottest request."""

    def __init__(self, served_apis: dict[int, ServedApi],
                 extra_fields: Callable[[int], dict] | None = None) -> None:
        self._response = served_apis[18].response
        self._extra_fields = extra_fields  # fields a node kind adds to build_body's
        self._bodies: dict[tuple[int, int], bytes] = {}

    def clear(self) -> None:
        self._bodies.clear()

    def body(self, version: int, features_epoch: int, node) -> bytes:
        key = (version, features_epoch)
        body = self._bodies.get(key)
        if body is None:
            fields = api_versions.build_body(node, version)
            if self._extra_fields is not None:
                fields.update(self._extra_fields(version))
            body = self._response.encode(version, fields)
            if len(self._bodies) > API_VERSIONS_CACHE_MAX_ENTRIES:
                self._bodies.clear()
            self._bodies[key] = body
        return body


class ServingNode:
    served_apis: dict[int, ServedApi]
    is_broker = False

    def _init_serving(self, served_apis: dict[int, ServedApi], supported: NodeFeatures) -> None:
        self.served_apis = served_apis
        self._advertised = AdvertisedApis(served_apis)
        self.supported_node_features = supported
        self._supported = {name: (r.min_level, r.max_level) for name, r in supported.items()}
        self._api_versions_cache = ApiVersionsCache(served_apis)
        # The client connections of every listener (server/net/listener.py).
        self.connections = ConnectionRegistry()
        # The advertised table the last metadata.version change was judged against.
        self._ranges_seen: dict[int, tuple[int, int]] | None = None
        # The ACL authorizer (server/security/authorizer.py) when `authorizer.class.name`
        # is set; None authorizes everything, as Kafka does without an authorizer.
        self.authorizer = build_authorizer(self.config, lambda: self.state)
        # SASL settings of every SASL listener, parsed now: a mechanism kraftwerk does not
        # implement is a start-up error, not a surprise at the first client.
        self.sasl_server_context = SaslServerContext(self.config)
        for listener in self.config.listeners:
            if listener.security_protocol.startswith("SASL_"):
                self.sasl_server_context.listener_config(listener.name)

    # -- identity and the image (handlers' Protocols, server/api/context.py) --------
    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def image(self):
        """The committed metadata image (a ControllerState), None before open()."""
        return self.state

    # -- features -------------------------------------------------------------
    def supported_features(self) -> dict[str, tuple[int, int]]:
        return self._supported

    def finalized_levels(self) -> dict[str, int]:
        return self.state.all_finalized_levels()

    def finalized_features_epoch(self) -> int:
        return self.state.finalized_features_epoch

    # -- API versions -----------------------------------------------------------
    def advertised_ranges(self) -> dict[int, tuple[int, int]]:
        """The API versions served now: gated by the finalized metadata.version."""
        state = self.state
        return self._advertised.current(state.metadata_version)

    def api_versions_body(self, version: int) -> bytes:
        return self._api_versions_cache.body(version, self.state.finalized_features_epoch, self)

    def close_stale_connections(self) -> int | None:
        """Call after replaying committed records. When the advertised versions moved
        since the last call (a metadata.version change, KIP-778), closes — gracefully,
        once idle — each client connection whose ApiVersions answer differs from them
        now, so its client reconnects and asks again; returns how many (None: nothing
        moved, or turned off)."""
        ranges = self.advertised_ranges()
        previous, self._ranges_seen = self._ranges_seen, ranges
        if ranges is previous:  # the same table object until metadata.version moves
            return None
        if not self.config.close_connections_on_metadata_version_change:
            return None
        return self.connections.close_stale(ranges)

    # -- metrics --------------------------------------------------------------------
    def _refresh_raft_gauges(self) -> None:
        """The Raft driver's view (epoch, leader, high watermark, log end), at each scrape."""
        driver = self.raft_driver
        if driver is None:
            return
        metrics = self.metrics
        metrics.raft_epoch.set(driver.epoch)
        metrics.raft_leader.set(driver.leader_id if driver.leader_id is not None else -1)
        metrics.raft_high_watermark.set(driver.high_watermark)
        metrics.raft_log_end_offset.set(driver.storage.end_offset)

    def _refresh_image_gauges(self, state) -> None:
        """The finalized features and the registered brokers of the image, at each scrape."""
        metrics = self.metrics
        metrics.features.clear()
        for feature, level in sorted(state.all_finalized_levels().items()):
            metrics.features.labels(feature=feature, level=str(level)).set(1)
        fenced = sum(1 for b in state.brokers.values() if b.fenced)
        metrics.registered_brokers.labels(fenced="true").set(fenced)
        metrics.registered_brokers.labels(fenced="false").set(len(state.brokers) - fenced)

    # -- brokers ------------------------------------------------------------------
    def registered_broker_endpoints(self, include_fenced: bool, listener_name: str | None = None) -> list[Endpoint]:
        """Each registered broker's endpoint on `listener_name` (Kafka answers with the
        listener the request came in on, so a SASL_SSL client is sent to SASL_SSL ports);
        a broker without that listener is given by its first one."""
        endpoints = []
        for registration in commands.registered_brokers(self.state, include_fenced=include_fenced):
            if registration.endpoints:
                chosen = next((e for e in registration.endpoints if e.name == listener_name),
                              registration.endpoints[0])
                endpoints.append(Endpoint(registration.broker_id, chosen.host, chosen.port, registration.rack))
        return endpoints

    def registered_controller_endpoints(self, listener_name: str | None) -> list[Endpoint]:
        """Each registered controller (KIP-919) with an endpoint named `listener_name`, by id."""
        controllers = self.state.controllers if self.state is not None else {}
        endpoints = []
        for controller_id in sorted(controllers):
            endpoint = controllers[controller_id].endpoint(listener_name) if listener_name is not None else None
            if endpoint is not None:
                endpoints.append(Endpoint(controller_id, endpoint.host, endpoint.port))
        return endpoints

    def own_listener_endpoint(self, listener_name: str | None) -> tuple[str, int] | None:
        """(host, port) this node tells clients for its listener `listener_name`: the
        advertised listener of that name, else the bound one; None if it has none."""
        config = self.config
        if listener_name is None:
            return None
        bound = getattr(self, "bound_ports", {}) or {}
        for advertised in config.advertised_listeners:
            if advertised.name == listener_name:
                return advertised.host, advertised.port or bound.get(listener_name, 0)
        for listener in config.listeners:
            if listener.name == listener_name and listener_name in bound:
                return listener.host, bound[listener_name]
        return None
