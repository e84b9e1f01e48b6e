"""The broker's life with the active controller: register, heartbeat, shut down.

Owns: `BrokerLifecycle`, the task that registers the broker with the active
controller (BrokerRegistration with its supported features, listeners,
incarnation id and log directory), heartbeats at
`broker.heartbeat.interval.ms`, follows fencing and unfencing as the
controller decides, re-registers after a stale epoch, and performs the
controlled shutdown (heartbeats with WantShutDown until the controller says
ShouldShutDown). It also carries out the KIP-778 stop: a broker that has been
a member of the cluster and meets a finalized level its release cannot run
unregisters and stops with `BrokerFatalError`.

Rules kept here:
- Requests go to the Raft leader (the active controller) over the observer's
  own connection to it; NOT_CONTROLLER or a lost connection waits for the
  next leader change (bounded) and tries again.
- Versions are negotiated per request: the highest version both this broker
  (its software, gated by the finalized metadata.version) and the controller
  (its last ApiVersions answer) allow — so after a renegotiation the new
  versions are used at once, without a restart.
- A refused registration is retried with jittered exponential backoff, and the
  broker says why in its log: the finalized levels outside its release's
  ranges, computed from its own copy of the metadata log.
- Every wait is bounded; every retry loop backs off.
"""

from __future__ import annotations

import random
import uuid
from enum import StrEnum
from typing import Protocol

import trio

from protocol.errors import ErrorCode
from server.config import SECURITY_PROTOCOL_IDS, ServerConfig
from server.controller.features import NodeFeatures
from server.controller.state import ControllerState
from server.gating import max_allowed_version, negotiate
from server.net.peer import BackoffPolicy, PeerConnection, PeerUnavailable
from server.observability import Event, get_logger
from server.raft.driver import RaftDriver

log = get_logger("broker")

BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER = 62, 63, 64
REQUEST_TIMEOUT_S = 5.0
LEADER_WAIT_S = 1.0
CONTROLLED_SHUTDOWN_TIMEOUT_S = 10.0
UNREGISTER_TIMEOUT_S = 3.0
# While fenced, ask again soon rather than a whole interval later.
FENCED_RETRY_MS = 100
REGISTRATION_BACKOFF = BackoffPolicy(initial_ms=100, max_ms=5_000, multiplier=2.0, jitter=0.2)


class BrokerState(StrEnum):
    """Kafka's BrokerState names, for logs and tests."""

    STARTING = "STARTING"
    RECOVERY = "RECOVERY"  # registered, fenced, catching up
    RUNNING = "RUNNING"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class BrokerFatalError(Exception):
    """KIP-778: the broker cannot run the cluster's finalized levels and stopped."""


class LifecycleHost(Protocol):
    """What the lifecycle uses of its broker node (server/nodes/broker.py), and nothing
    more: the node composes a lifecycle, the lifecycle never imports the node."""

    config: ServerConfig
    cluster_id: str
    directory_id: uuid.UUID | None
    port: int
    bound_ports: dict[str, int]
    raft_driver: RaftDriver | None
    was_member: bool
    supported_node_features: NodeFeatures

    @property
    def state(self) -> ControllerState | None: ...

    def controller_peer(self, node_id: int | None) -> PeerConnection | None: ...

    def software_range(self, api_key: int) -> tuple[int, int]: ...

    def unsupported_reasons(self) -> list[str]: ...

    def last_applied_offset(self) -> int: ...

    async def wait_metadata_known(self) -> None: ...


class BrokerLifecycle:
    def __init__(self, node: LifecycleHost, rng: random.Random) -> None:
        self.node = node
        self._rng = rng
        self.incarnation_id = uuid.uuid4()
        self.state = BrokerState.STARTING
        self.broker_epoch = -1
        self.registrations = 0
        self.refusals = 0
        self.last_refusal: list[str] = []
        self._changed = trio.Event()
        self._wake = trio.Event()
        self._shutdown_requested = False
        self._fatal: str | None = None
        self._reregister = False

    # -- for the node and tests ---------------------------------------------------
    async def wait_state(self, *states: BrokerState) -> None:
        while self.state not in states:
            await self._changed.wait()

    async def wait_registrations(self, count: int) -> None:
        """Until `count` registrations succeeded (re-registrations included)."""
        while self.registrations < count:
            await self._changed.wait()

    async def wait_refusals(self, count: int) -> None:
        """Until `count` registration attempts in a row were refused."""
        while self.refusals < count:
            await self._changed.wait()

    def _progress(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def request_reregistration(self) -> None:
        """Register again with the same incarnation (it keeps its epoch and state): after a
        metadata.version change lets the registration carry more (log directories from
        3.7-IV2), as Kafka's BrokerRegistrationTracker does."""
        if self.broker_epoch >= 0:
            self._reregister = True
            self._poke()

    def request_shutdown(self) -> None:
        self._shutdown_requested = True
        self._poke()

    def heartbeat_soon(self) -> None:
        """The next heartbeat goes out now instead of at the end of the interval."""
        self._poke()

    def fail(self, reason: str) -> None:
        """The broker met a finalized level it cannot run (KIP-778): unregister and stop."""
        if self._fatal is None:
            self._fatal = reason
            self._poke()

    def _poke(self) -> None:
        self._wake.set()

    def _set_state(self, state: BrokerState) -> None:
        if state is not self.state:
            log.info(Event.BROKER_STATE_CHANGED, broker_id=self.node.config.node_id, old=self.state.value,
                     new=state.value, broker_epoch=self.broker_epoch)
            self.state = state
            self._progress()

    async def _sleep_ms(self, delay_ms: float) -> None:
        """Sleeps, or returns early when poked (shutdown, fatal)."""
        with trio.move_on_after(delay_ms / 1000):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = trio.Event()

    # -- the task -------------------------------------------------------------------
    async def run(self) -> None:
        """Registers, heartbeats and shuts down; returns after a controlled shutdown.
        Raises BrokerFatalError after the KIP-778 stop."""
        node = self.node
        await node.wait_metadata_known()
        if node.was_member:
            reasons = node.unsupported_reasons()
            if reasons:
                self.fail("; ".join(reasons))
        while True:
            if self._fatal is not None:
                await self._stop_fatal()
            if self._shutdown_requested and self.broker_epoch < 0:
                return  # never registered: nothing to tell the controller
            if self.broker_epoch < 0 or self._reregister:
                self._reregister = False
                await self._register()
                continue
            done = await self._heartbeat()
            if done:
                return

    async def _controller(self):
        """The connection to the active controller, or None after a bounded wait."""
        driver = self.node.raft_driver
        with trio.move_on_after(LEADER_WAIT_S):
            while True:
                leader = driver.leader_id
                peer = self.node.controller_peer(leader)
                if peer is not None and peer.connected and peer.api_versions:
                    return peer
                if peer is not None:
                    with trio.move_on_after(0.1):
                        await peer.wait_connected()
                    continue
                await driver.wait_changed()
        return None

    def negotiated_version(self, peer, api_key: int) -> int | None:
        """The version of a broker-to-controller API to use with `peer` now: the highest
        both this software (gated by the finalized metadata.version) and the controller
        (its last ApiVersions answer) allow; None if there is none."""
        served = self.node.software_range(api_key)
        ours = max_allowed_version(api_key, served[0], served[1], self.node.state.metadata_version)
        theirs = peer.api_versions.get(api_key)
        if ours is None or theirs is None:
            return None
        return negotiate((served[0], ours), theirs)

    async def _call(self, api_key: int, body: dict):
        """(response, None) or (None, reason)."""
        peer = await self._controller()
        if peer is None:
            return None, "no active controller known"
        version = self.negotiated_version(peer, api_key)
        if version is None:
            return None, f"no common version of API {api_key} with controller {peer.address.node_id}"
        try:
            return await peer.request(api_key, body, REQUEST_TIMEOUT_S, version=version), None
        except (PeerUnavailable, trio.TooSlowError) as exc:
            return None, str(exc) or type(exc).__name__

    # -- registration ---------------------------------------------------------------
    def _registration_body(self) -> dict:
        node = self.node
        config = node.config
        # Every client listener, advertised addresses first (Kafka's BrokerRegistration
        # lists them all; Metadata answers each client on the listener it came in on).
        bound = node.bound_ports
        advertised = {item.name: item for item in config.advertised_listeners}
        listeners = []
        for item in config.listeners:
            shown = advertised.get(item.name, item)
            listeners.append({"name": item.name, "host": shown.host,
                              "port": shown.port or bound.get(item.name) or node.port,
                              "security_protocol": SECURITY_PROTOCOL_IDS.get(item.security_protocol, 0)})

        return {
            "broker_id": config.node_id,
            "cluster_id": node.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": listeners,
            "features": [{"name": name, "min_supported_version": r.min_level, "max_supported_version": r.max_level}
                         for name, r in sorted(node.supported_node_features.items())],
            "rack": config.broker_rack,
            "is_migrating_zk_broker": False,
            "log_dirs": [node.directory_id],
            "previous_broker_epoch": -1,
        }

    async def _register(self) -> None:
        node = self.node
        log.info(Event.BROKER_REGISTERING, broker_id=node.config.node_id, incarnation_id=str(self.incarnation_id),
                 attempt=self.refusals + 1)
        response, problem = await self._call(BROKER_REGISTRATION, self._registration_body())
        code = response.error_code if response is not None else None
        if code == ErrorCode.NONE:
            self.broker_epoch = response.broker_epoch
            self.registrations += 1
            self.refusals = 0
            self.last_refusal = []
            log.info(Event.BROKER_REGISTERED_WITH_CONTROLLER, broker_id=node.config.node_id,
                     broker_epoch=self.broker_epoch, controller_id=node.raft_driver.leader_id,
                     registrations=self.registrations)
            if self.state is BrokerState.STARTING:
                self._set_state(BrokerState.RECOVERY)
            self._progress()
            return
        if code == ErrorCode.NOT_CONTROLLER or response is None:
            # The leader moved or is unknown: the next leader change (or a short pause) tells.
            with trio.move_on_after(LEADER_WAIT_S):
                await node.raft_driver.wait_changed()
            if response is None:
                log.info(Event.BROKER_HEARTBEAT_FAILED, broker_id=node.config.node_id, request="registration",
                         error=problem)
            return
        self.refusals += 1
        delay_ms = REGISTRATION_BACKOFF.delay_ms(self.refusals - 1, self._rng)
        reasons = []
        if code == ErrorCode.UNSUPPORTED_VERSION:
            reasons = node.unsupported_reasons() or ["the controller refused the supported feature ranges"]
        self.last_refusal = reasons or [ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)]
        log.warning(Event.BROKER_REGISTRATION_REFUSED, broker_id=node.config.node_id,
                    error_code=code, error=ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
                    reasons=self.last_refusal, release=node.config.release or "kraftwerk",
                    retry_in_ms=round(delay_ms))
        self._progress()
        await self._sleep_ms(delay_ms)

    # -- heartbeats -------------------------------------------------------------------
    async def _heartbeat(self) -> bool:
        """One heartbeat and the wait after it; True once a controlled shutdown completed."""
        node = self.node
        shutting_down = self._shutdown_requested
        if shutting_down and self.state is not BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            log.info(Event.BROKER_SHUTDOWN, broker_id=node.config.node_id, broker_epoch=self.broker_epoch)
            self._set_state(BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        body = {
            "broker_id": node.config.node_id,
            "broker_epoch": self.broker_epoch,
            "current_metadata_offset": node.last_applied_offset(),
            "want_fence": False,
            "want_shut_down": shutting_down,
            "offline_log_dirs": [],
        }
        response, problem = await self._call(BROKER_HEARTBEAT, body)
        interval_ms = node.config.broker_heartbeat_interval_ms
        if response is None:
            log.info(Event.BROKER_HEARTBEAT_FAILED, broker_id=node.config.node_id, error=problem)
            await self._sleep_ms(min(interval_ms, 200))
            return False
        code = response.error_code
        if code == ErrorCode.STALE_BROKER_EPOCH:
            # The controller no longer knows this incarnation's registration: register again.
            self.broker_epoch = -1
            self._set_state(BrokerState.STARTING)
            return False
        if code == ErrorCode.NOT_CONTROLLER:
            with trio.move_on_after(LEADER_WAIT_S):
                await node.raft_driver.wait_changed()
            return False
        if code != ErrorCode.NONE:
            log.info(Event.BROKER_HEARTBEAT_FAILED, broker_id=node.config.node_id, error_code=code)
            await self._sleep_ms(min(interval_ms, 200))
            return False
        if shutting_down:
            if response.should_shut_down:
                self._set_state(BrokerState.SHUTTING_DOWN)
                return True
            await self._sleep_ms(min(interval_ms, 100))
            return False
        if response.is_fenced:
            self._set_state(BrokerState.RECOVERY)
            # The heartbeat that reports us caught up is what unfences us: send it soon.
            await self._sleep_ms(min(interval_ms, FENCED_RETRY_MS))
            return False
        self._set_state(BrokerState.RUNNING)
        await self._sleep_ms(interval_ms)
        return False

    # -- KIP-778 stop -----------------------------------------------------------------
    async def _stop_fatal(self) -> None:
        node = self.node
        reason = self._fatal or "unsupported finalized level"
        log.critical(Event.BROKER_UNSUPPORTED_FINALIZED_LEVEL, broker_id=node.config.node_id, reasons=reason,
                     release=node.config.release or "kraftwerk")
        with trio.move_on_after(UNREGISTER_TIMEOUT_S):
            response, problem = await self._call(UNREGISTER_BROKER, {"broker_id": node.config.node_id})
            if response is not None:
                log.info(Event.BROKER_SELF_UNREGISTERED, broker_id=node.config.node_id,
                         error_code=response.error_code)
        self._set_state(BrokerState.SHUTTING_DOWN)
        raise BrokerFatalError(
            f"broker {node.config.node_id} (release {node.config.release or 'kraftwerk'}) cannot run this "
            f"cluster's finalized features: {reason}. It unregistered and stops (KIP-778); run a release that "
            "supports them.")
