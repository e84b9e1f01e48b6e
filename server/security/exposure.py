"""Which listeners of a controller let anyone who reaches them drive the quorum.

Owns: `exposed_listeners(config)` (pure: the listeners of a controller node that are
bound beyond loopback and admit unauthenticated clients whom nothing refuses the KRaft
RPCs), `is_loopback_host` and `warn_exposed_listeners`, which logs one warning per such
listener at start-up with a stable event name:

- `security.plaintext_controller_listener`: a PLAINTEXT listener;
- `security.unauthenticated_controller_listener`: an SSL listener without
  `ssl.client.auth=required` (a client without a certificate is User:ANONYMOUS).

Why: a controller serves Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch and
FetchSnapshot on every listener. A client nobody authenticated is User:ANONYMOUS; when
ANONYMOUS passes the CLUSTER_ACTION check (no authorizer, ANONYMOUS in `super.users`,
or `allow.everyone.if.no.acl.found=true`), anyone who can open a TCP connection can
start elections (a Vote with a higher epoch makes every voter step down) or
impersonate a leader. On the listener the controllers use for each other, PLAINTEXT
peers are themselves ANONYMOUS, so a working quorum there must let ANONYMOUS act
whatever the authorizer says: that case warns even with an authorizer.

Rules kept here:
- Pure decision, no I/O: no name is resolved. A host name other than `localhost` is
  taken as reachable from elsewhere (where it resolves is not known here).
- Brokers serve no KRaft RPC and are never reported.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from server.config import Listener, ServerConfig
from server.observability import Event, get_logger
from server.security.authorizer import authorizer_config

PLAINTEXT_CONTROLLER_LISTENER = Event.SECURITY_PLAINTEXT_CONTROLLER_LISTENER
UNAUTHENTICATED_CONTROLLER_LISTENER = Event.SECURITY_UNAUTHENTICATED_CONTROLLER_LISTENER
ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
SECURE_SETUP_HINT = ("use SASL_SSL (or SSL with ssl.client.auth=required) with an authorizer and the nodes as "
                     "super.users: docs/security.md, 'A secured controller listener', or try "
                     "`kraftwerk cluster up --secure`")

log = get_logger("security")


@dataclass(frozen=True, slots=True)
class Exposure:
    """One listener that lets an unauthenticated client send KRaft RPCs."""

    listener: Listener
    event: str
    reason: str


def is_loopback_host(host: str) -> bool:
    """True for a loopback address or `localhost`; False for the wildcard addresses
    (0.0.0.0, ::) and for any other name or address."""
    text = host.strip().strip("[]")
    if text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _peer_listener_name(config: ServerConfig) -> str:
    """The listener other controllers connect to (server/security/client_config.py's rule)."""
    if config.controller_listener_names:
        return config.controller_listener_names[0]
    return config.listener.name


def exposed_listeners(config: ServerConfig) -> list[Exposure]:
    if config.is_broker:
        return []
    authorizer = authorizer_config(config.extra)
    anonymous_may_act = (authorizer is None or ANONYMOUS_PRINCIPAL in authorizer.super_users
                         or authorizer.allow_everyone_if_no_acl_found)
    peers_use = _peer_listener_name(config).upper()
    found = []
    for listener in config.listeners:
        if is_loopback_host(listener.host):
            continue
        protocol = listener.security_protocol
        if protocol == "PLAINTEXT":
            event = PLAINTEXT_CONTROLLER_LISTENER
        elif protocol == "SSL" and config.ssl_for(listener.name).client_auth != "required":
            event = UNAUTHENTICATED_CONTROLLER_LISTENER
        else:
            continue  # SASL_*, or SSL with client certificates required: peers are authenticated
        if anonymous_may_act:
            why = ("no authorizer is configured" if authorizer is None
                   else f"{ANONYMOUS_PRINCIPAL} is a super user" if ANONYMOUS_PRINCIPAL in authorizer.super_users
                   else "allow.everyone.if.no.acl.found=true")
        elif protocol == "PLAINTEXT" and listener.name == peers_use:
            why = ("the other controllers connect here as User:ANONYMOUS too, so the quorum only works if "
                   "ANONYMOUS is granted CLUSTER_ACTION")
        else:
            continue  # the authorizer refuses ANONYMOUS the KRaft RPCs
        found.append(Exposure(listener, event,
                              f"listener {listener.name} ({protocol}) on {listener.host}:{listener.port} does not "
                              f"authenticate its clients and {why}: anyone who can reach it can send Vote and "
                              "BeginQuorumEpoch requests and force elections"))
    return found


def warn_exposed_listeners(config: ServerConfig) -> list[Exposure]:
    """Logs each exposed listener (a warning; the node still starts) and returns them."""
    exposures = exposed_listeners(config)
    for exposure in exposures:
        log.warning(exposure.event, node_id=config.node_id, listener=exposure.listener.name,
                    host=exposure.listener.host, port=exposure.listener.port,
                    security_protocol=exposure.listener.security_protocol, reason=exposure.reason,
                    fix=SECURE_SETUP_HINT)
    return exposures
