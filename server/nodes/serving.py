"""What every serving node (controller or broker) answers from its metadata image.

Owns: `ServingNode`, the read-only views the handlers share — supported and
finalized features, the API versions advertised now (gated by the finalized
metadata.version, KIP-778), the cached ApiVersions body, registered brokers.
A subclass provides `state` (a `ControllerState`: the committed image),
`served_apis`, `config`, and the endpoint views that differ by role.

Rules kept here:
- Views read the committed image only, never speculative state.
- The ApiVersions body is cached per (version, finalized features epoch): it
  changes only when features change, and ApiVersions is the hottest request.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from server.apis import AdvertisedApis, ServedApi
from server.controller import commands
from server.controller.features import NodeFeatures, find_metadata_version
from server.controller.snapshot import write_controller_snapshot
from server.handlers import api_versions
from server.observability import Event, get_logger
from server.raft.driver import DriverStopped
from server.raft.log import SnapshotId as RaftSnapshotId

log = get_logger("snapshot")


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class ServingNode:
    served_apis: dict[int, ServedApi]
    is_broker = False

    def _init_serving(self, served_apis: dict[int, ServedApi], supported: NodeFeatures) -> None:
        self.served_apis = served_apis
        self._advertised = AdvertisedApis(served_apis)
        self.supported_node_features = supported
        self._supported = {name: (r.min_level, r.max_level) for name, r in supported.items()}
        self._api_versions_cache: dict[tuple[int, int], bytes] = {}
        # The ACL authorizer (server/security/authorizer.py) when `authorizer.class.name`
        # is set; None authorizes everything, as Kafka does without an authorizer.
        from server.security.authorizer import build_authorizer
        self.authorizer = build_authorizer(self.config, lambda: self.state)
        # SASL settings of every SASL listener, parsed now: a mechanism kraftwerk does not
        # implement is a start-up error, not a surprise at the first client.
        from server.security.sasl import SaslServerContext
        self.sasl_server_context = SaslServerContext(self.config)
        for listener in self.config.listeners:
            if listener.security_protocol.startswith("SASL_"):
                self.sasl_server_context.listener_config(listener.name)

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

    def api_versions_body(self, version: int):
        key = (version, self.state.finalized_features_epoch)
        body = self._api_versions_cache.get(key)
        if body is None:
            api = self.served_apis[18]
            body = api.response.encode(version, api_versions.build_body(self, version))
            if len(self._api_versions_cache) > 64:
                self._api_versions_cache.clear()
            self._api_versions_cache[key] = body
        return body

    # -- snapshots ----------------------------------------------------------------
    async def write_snapshot(self, state, end_offset: int, epoch: int, timestamp_ms: int, reason: str,
                             compact: bool = True) -> None:
        """Writes `state` (committed, covering everything below `end_offset`) as a snapshot;
        with `compact` makes it the quorum's latest, and the driver drops the log before it.
        Called from the replay task, the only writer of the state, so it cannot change
        meanwhile."""
        if state.in_transaction or state.last_applied_offset < 0:
            return  # an open metadata transaction could still be aborted: not a snapshot point
        if not self.raft_driver.storage.metadata_log.is_batch_boundary(end_offset):
            # A replica that loaded it would have to fetch from inside a batch (see
            # MetadataRaftLog.compact): never write one.
            return
        try:
            snapshot_id = await trio.to_thread.run_sync(
                write_controller_snapshot, state, self.log_dir, end_offset, epoch, timestamp_ms)
        except OSError as exc:
            # A snapshot is an optimisation and a rollback point, never what makes data
            # durable (the log is): a full or failing disk skips it (the writer removed its
            # partial file) and the next snapshot point tries again.
            log.error(Event.SNAPSHOT_WRITE_FAILED, node_id=self.config.node_id, end_offset=end_offset,
                      epoch=epoch, reason=reason, error=str(exc))
            return
        mv = state.metadata_version
        log.info(Event.CONTROLLER_SNAPSHOT_TAKEN, node_id=self.config.node_id, end_offset=snapshot_id.end_offset,
                 epoch=snapshot_id.epoch, reason=reason,
                 metadata_version=str(find_metadata_version(mv) or mv) if mv is not None else None)
        if not compact:
            return
        try:
            await self.raft_driver.compact(RaftSnapshotId(snapshot_id.end_offset, snapshot_id.epoch))
        except DriverStopped:
            pass  # shutting down: the snapshot stands; the log prefix goes at the next snapshot

    async def snapshot_at_metadata_version_change(self, state, end_offset: int, epoch: int,
                                                  timestamp_ms: int, compact: bool) -> None:
        await self.write_snapshot(state, end_offset, epoch, timestamp_ms,
                                  "lossy_downgrade" if compact else "before_metadata_version_change", compact)

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
