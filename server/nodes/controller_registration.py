"""A controller registering itself with the active controller (KIP-919).

Owns: `RegistrationPlanner`, the sans-I/O decision (when to send a
ControllerRegistration, when to wait), `registration_request` (the body: this node's
id, incarnation, controller listeners and supported feature ranges), and
`run_controller_registration`, the trio task of a running controller node.

Rules kept here (Kafka 4.4's ControllerRegistrationManager):
- Every controller registers, voter or not, with a random incarnation id per process.
- Nothing is sent until this node's image has a finalized metadata.version with
  controller registration (3.7-IV0); until then it waits for the image to change.
- A registration is done when the image holds one for this id with this process's
  incarnation id. When it disappears, or carries another incarnation (a controller
  restarted with this id elsewhere, a metadata.version downgrade dropped it), it is
  sent again.
- Failures (no answer, an error code) back off exponentially: 100 ms, doubling up to
  MAX_BACKOFF_MS (Kafka's bound is 120 s; kraftwerk's is shorter so a controller is
  listed again soon after an outage). A success resets the backoff. After a success the
  sender waits (REPLAY_WAIT_MS at most) for its image to show the registration before it
  would send again, so one commit is not asked for twice.
- The request goes where every relayed write goes (server/nodes/forwarding.py's
  Forwarder: the leader the Raft driver names, NOT_CONTROLLER and lost answers retried
  at the next leader); on the leader itself it is the local controller command.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

import trio

from protocol.api_keys import ApiKey
from protocol.apis import controller_registration as api
from protocol.errors import ErrorCode
from server.config import SECURITY_PROTOCOL_IDS
from server.controller.controller_registration import register_controller
from server.controller.features import controller_registration_supported
from server.controller.loop import ControllerStorageError, NotControllerError, WritesBlockedError
from server.controller.state import ControllerState
from server.observability import Event, get_logger

log = get_logger("controller")

INITIAL_BACKOFF_MS = 100
BACKOFF_MULTIPLIER = 2
MAX_BACKOFF_MS = 10_000
REPLAY_WAIT_MS = 5_000
# How long start-up waits for a lone controller's own registration before reporting
# "started" (it is the leader: one local commit), so it is listed from the first request.
LONE_CONTROLLER_REGISTRATION_WAIT_S = 5.0
# A registered controller looks again at least this often: a snapshot this node loads
# replaces its image without a committed batch to announce it.
REGISTERED_RECHECK_S = 1.0

# What the planner says to do now.
WAIT_METADATA_VERSION = "wait_metadata_version"  # until the image changes
REGISTERED = "registered"  # until metadata.version changes or a controller registers
SEND = "send"
BACKOFF = "backoff"  # until `until_ms` (or the image changes)
AWAIT_REPLAY = "await_replay"  # until `until_ms` (or the image changes)


class Action(NamedTuple):
    kind: str
    until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ControllerIdentity:
    """What this controller registers: fixed for the life of the process."""

    controller_id: int
    incarnation_id: uuid.UUID
    # (name, host, port, security protocol id) per controller listener.
    listeners: tuple[tuple[str, str, int, int], ...]
    # (feature, min, max): the node's supported ranges, as ApiVersions gives them.
    features: tuple[tuple[str, int, int], ...]


def new_incarnation_id() -> uuid.UUID:
    """A random incarnation id for this process (never the all-zero id)."""
    while True:
        value = uuid.UUID(bytes=os.urandom(16))
        if value.int != 0:
            return value


def registration_request(identity: ControllerIdentity) -> dict[str, Any]:
    """The ControllerRegistration v0 body for `identity`."""
    return {
        "controller_id": identity.controller_id,
        "incarnation_id": identity.incarnation_id,
        "zk_migration_ready": False,
        "listeners": [{"name": name, "host": host, "port": port, "security_protocol": protocol}
                      for name, host, port, protocol in identity.listeners],
        "features": [{"name": name, "min_supported_version": low, "max_supported_version": high}
                     for name, low, high in identity.features],
    }


class RegistrationPlanner:
    """The decision part: what to do given this node's image and the time."""

    def __init__(self, identity: ControllerIdentity, *, initial_backoff_ms: int = INITIAL_BACKOFF_MS,
                 max_backoff_ms: int = MAX_BACKOFF_MS, replay_wait_ms: int = REPLAY_WAIT_MS) -> None:
        self.identity = identity
        self._initial_backoff_ms = initial_backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._replay_wait_ms = replay_wait_ms
        self.failures = 0
        self._retry_at_ms: int | None = None
        self._acknowledged_at_ms: int | None = None

    def is_registered(self, state: ControllerState) -> bool:
        registration = state.controller_registration(self.identity.controller_id)
        return registration is not None and registration.incarnation_id == self.identity.incarnation_id

    def next_action(self, state: ControllerState, now_ms: int) -> Action:
        level = state.metadata_version
        if level is None or not controller_registration_supported(level):
            return Action(WAIT_METADATA_VERSION)
        if self.is_registered(state):
            self._acknowledged_at_ms = None
            return Action(REGISTERED)
        if self._retry_at_ms is not None and now_ms < self._retry_at_ms:
            return Action(BACKOFF, self._retry_at_ms)
        if self._acknowledged_at_ms is not None and now_ms < self._acknowledged_at_ms + self._replay_wait_ms:
            return Action(AWAIT_REPLAY, self._acknowledged_at_ms + self._replay_wait_ms)
        return Action(SEND)

    def backoff_ms(self) -> int:
        """The wait after the current run of failures (0 before the first)."""
        if self.failures == 0:
            return 0
        return min(self._max_backoff_ms, self._initial_backoff_ms * BACKOFF_MULTIPLIER ** (self.failures - 1))

    def on_success(self, now_ms: int) -> None:
        self.failures = 0
        self._retry_at_ms = None
        self._acknowledged_at_ms = now_ms

    def on_failure(self, now_ms: int) -> int:
        """Notes a failed attempt; returns how long to back off (ms)."""
        # Bounded: past the cap the exponent no longer matters.
        self.failures = min(self.failures + 1, 64)
        delay = self.backoff_ms()
        self._retry_at_ms = now_ms + delay
        self._acknowledged_at_ms = None
        return delay


# -- the trio shell -------------------------------------------------------------------

def controller_identity(node, incarnation_id: uuid.UUID) -> ControllerIdentity:
    """This controller node's identity: its controller listeners (`controller.listener.names`,
    else every listener, as each of a kraftwerk controller's listeners serves the quorum),
    advertised addresses first, and its supported feature ranges."""
    config = node.config
    names = config.controller_listener_names or tuple(item.name for item in config.listeners)
    bound = getattr(node, "bound_ports", {}) or {}
    advertised = {item.name: item for item in config.advertised_listeners}
    listeners = []
    for item in config.listeners:
        if item.name not in names:
            continue
        shown = advertised.get(item.name, item)
        listeners.append((item.name, shown.host, shown.port or bound.get(item.name) or item.port,
                          SECURITY_PROTOCOL_IDS.get(item.security_protocol, 0)))
    features = tuple((name, low, high) for name, (low, high) in sorted(node.supported_features().items()))
    return ControllerIdentity(config.node_id, incarnation_id, tuple(listeners), features)


async def _send(node, body: dict[str, Any]) -> tuple[bool, str]:
    """One attempt: (committed, what happened)."""
    driver = node.raft_driver
    if driver.leader_id != node.config.node_id:
        response = await node.forwarder.forward(ApiKey.CONTROLLER_REGISTRATION, 0, body)
        if response is not None:
            code = response.get("error_code")
            if code == ErrorCode.NONE:
                return True, f"registered with controller {driver.leader_id}"
            return False, f"error {code}: {response.get('error_message')}"
        if driver.leader_id != node.config.node_id:
            return False, "no active controller answered"
    # This node leads: the command runs here.
    request = api.REQUEST.decode(0, api.REQUEST.encode(0, body))
    try:
        result = await node.submit(lambda state, tracker, next_offset, now_ms: register_controller(state, request))
    except (NotControllerError, WritesBlockedError, ControllerStorageError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    code = result.response.get("error_code")
    if code != ErrorCode.NONE:
        return False, f"error {code}: {result.response.get('error_message')}"
    return True, "registered with itself (the active controller)"


def _now_ms() -> int:
    # trio's clock: monotonic, and a test's MockClock drives it.
    return int(trio.current_time() * 1000)


async def _image_changed_or(node, until_ms: int | None) -> None:
    """Until the node's image moves on, at most until `until_ms` (trio's clock) or an
    hour (the loop looks again then whatever happened)."""
    replayer = node.replayer
    timeout_s = 3600.0 if until_ms is None else max(0.0, (until_ms - _now_ms()) / 1000)
    with trio.move_on_after(timeout_s):
        await replayer.wait_replayed(replayer.replayed_end_offset + 1)


async def run_controller_registration(node, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Keeps `node` (a running ControllerNode, listeners bound) registered for as long as
    it runs. Reports started at once, or — on a lone voter at a metadata.version with
    registration — once its first registration is in its image (bounded)."""
    planner = RegistrationPlanner(controller_identity(node, new_incarnation_id()))
    body = registration_request(planner.identity)
    registered = trio.Event()
    lone = len(getattr(node, "voters", ())) == 1

    async def loop() -> None:
        waiting_logged = False
        while True:
            action = planner.next_action(node.state, _now_ms())
            if action.kind == SEND:
                ok, outcome = await _send(node, body)
                if ok:
                    planner.on_success(_now_ms())
                    log.info(Event.CONTROLLER_SELF_REGISTERED, controller_id=planner.identity.controller_id,
                             incarnation_id=str(planner.identity.incarnation_id), outcome=outcome)
                else:
                    delay = planner.on_failure(_now_ms())
                    log.info(Event.CONTROLLER_SELF_REGISTRATION_FAILED, controller_id=planner.identity.controller_id,
                             error=outcome, failures=planner.failures, backoff_ms=delay)
                continue
            if action.kind == REGISTERED:
                registered.set()
                # Only a metadata.version change or a controller registration can change
                # that: waking at every commit cost a task switch per commit on every controller.
                with trio.move_on_after(REGISTERED_RECHECK_S):
                    await node.wait_registration_news()
                continue
            elif action.kind == WAIT_METADATA_VERSION and not waiting_logged:
                waiting_logged = True
                log.info(Event.CONTROLLER_SELF_REGISTRATION_WAITING, controller_id=planner.identity.controller_id,
                         reason="cannot register yet because the metadata.version is not known yet or does not "
                                "support controller registration (3.7-IV0)")
            await _image_changed_or(node, action.until_ms)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop)
        state = node.state
        if lone and state is not None and state.metadata_version is not None \
                and controller_registration_supported(state.metadata_version):
            with trio.move_on_after(LONE_CONTROLLER_REGISTRATION_WAIT_S):
                await registered.wait()
        task_status.started()
