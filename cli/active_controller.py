"""A request to the active controller, found and followed as Kafka's Admin client does.

Owns: the bootstrap list (`parse_bootstrap`, `connect_any`), finding the active
controller from a bootstrap node (DescribeCluster for the controllers, KIP-919;
Metadata's controller from a broker, which forwards, KIP-590) and
`call_active_controller`, which every kraftwerk command that writes through the
controllers uses (`features upgrade`, `migration status`, `metadata-quorum ...`).

Rules kept here:
- A bootstrap list is tried node by node, in order, as Kafka's clients do: one dead
  node (a killed leader) does not make a command fail while another answers.
- Asked again, after RETRY_BACKOFF_S, only while asking again can help: NOT_CONTROLLER
  (a failover), no active controller known yet, or a node that does not answer; all
  bounded by the caller's `timeout_s`.
- What asking again cannot change ends the call at once: the bootstrap node refusing
  DescribeCluster (an authorization error, say) is `Refused`; an active controller that
  does not serve the API (a ZooKeeper-mode broker names itself) is `NotServed`.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from server.client import ClientError, KafkaClient
from server.security.client_config import ClientSecurity

RETRY_BACKOFF_S = 0.2
CONTROLLER_ENDPOINT_TYPE = 2  # DescribeCluster v1: describe the controllers

Address = tuple[str, int]


def parse_bootstrap(text: str) -> list[Address]:
    """`host:port[,host:port...]` (an IPv6 host in brackets); ValueError names a bad entry."""
    addresses = []
    for item in text.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not item or not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap address {item!r} must look like host:port")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def describe(bootstrap: Sequence[Address]) -> str:
    return ",".join(f"{host}:{port}" for host, port in bootstrap)


async def connect_any(bootstrap: Sequence[Address], security: ClientSecurity | None,
                      timeout_s: float) -> KafkaClient:
    """A connection to the first node of `bootstrap` that answers, tried in order."""
    problems = []
    for host, port in bootstrap:
        try:
            return await KafkaClient.connect(host, port, security=security, timeout_s=timeout_s)
        except ClientError as exc:
            problems.append(str(exc))
    raise ClientError("; ".join(problems) or "no bootstrap address")


class Unreachable(Exception):
    """No active controller answered within the time bound; the text says so, with the
    last problem seen, in the words every command prints."""

    def __init__(self, timeout_s: float, last_problem: str) -> None:
        super().__init__(f"could not reach the active controller within {timeout_s:g} s ({last_problem}); "
                         "is a majority of the controllers running?")


class NotServed(Exception):
    """The active controller does not serve the API (it names itself: a ZooKeeper-mode broker)."""

    def __init__(self, api_key: int, address: tuple[str, int]) -> None:
        super().__init__(api_key, address)
        self.api_key = api_key
        self.address = address


class Refused(Exception):
    """The bootstrap node refused to name the active controller (its error code and message)."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


async def active_controller(bootstrap: KafkaClient, controllers: bool) -> tuple[int, dict[int, tuple[str, int]]]:
    """The active controller's id and every node's address as `bootstrap` knows them:
    from the controllers through DescribeCluster for the controllers (which Kafka's
    controllers serve; they have no Metadata), from a broker through Metadata, which
    names the broker itself."""
    described = bootstrap.api_versions.get(ApiKey.DESCRIBE_CLUSTER)
    if controllers and described is not None and described.max_version >= 1:
        reply = await bootstrap.call(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                               "endpoint_type": CONTROLLER_ENDPOINT_TYPE},
                                     min_version=1)
        if reply.error_code != ErrorCode.NONE:
            raise Refused(reply.error_code, reply.error_message)
        return reply.controller_id, {b.broker_id: (b.host, b.port) for b in reply.brokers}
    metadata = await bootstrap.call(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False})
    return metadata.controller_id, {b.node_id: (b.host, b.port) for b in metadata.brokers}


async def call_active_controller(bootstrap: Sequence[Address], *, controllers: bool,
                                 security: ClientSecurity | None, timeout_s: float, api_key: int, body: dict,
                                 min_version: int = 0):
    """The active controller's answer to one request, asked again on NOT_CONTROLLER or
    while no active controller is known or reachable, until `timeout_s`."""
    last_problem = "no answer"
    with trio.move_on_after(timeout_s):
        while True:
            try:
                async with await connect_any(bootstrap, security, timeout_s) as first:
                    controller_id, nodes = await active_controller(first, controllers)
                address = nodes.get(controller_id)
                if address is None:
                    last_problem = "no active controller yet (an election may be in progress)"
                else:
                    async with await KafkaClient.connect(*address, security=security,
                                                         timeout_s=timeout_s) as controller:
                        if api_key not in controller.api_versions:
                            raise NotServed(api_key, address)
                        response = await controller.call(api_key, body, min_version=min_version)
                    if response.error_code != ErrorCode.NOT_CONTROLLER:
                        return response
                    last_problem = response.error_message or "NOT_CONTROLLER"
            except ClientError as exc:
                last_problem = str(exc)
            await trio.sleep(RETRY_BACKOFF_S)
    raise Unreachable(timeout_s, last_problem)
