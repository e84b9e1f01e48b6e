"""The table of APIs kraftwerk serves: key, versions, handler.

Owns: the tables (`controller_apis`, `broker_apis`), the single place that
says which API versions a node's software serves, and `AdvertisedApis`, those
versions gated by the finalized metadata.version — what ApiVersions lists and
the dispatcher accepts. Advertise only what is implemented and tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from protocol.header import request_header_version, response_header_version
from protocol.registry import API_MESSAGES
from protocol.schema import Message

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class ServedApi:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Callable[..., Any]
    is_async: bool
    request: Message
    response: Message
    # Header versions indexed by API version, resolved once: the per-request
    # path must not re-derive Kafka's flexible-version rule.
    request_header_versions: tuple[int, ...]
    response_header_versions: tuple[int, ...]
    # handler(ctx, request, answer) returns at once and calls answer(body) exactly once,
    # now or later, from any task: no task per request (the KRaft RPCs, see dispatch.py).
    answers_later: bool = False

    def request_header_version(self, version: int) -> int:
        return self.request_header_versions[version]

    def response_header_version(self, version: int) -> int:
        return self.response_header_versions[version]


def served(api_key: int, min_version: int, max_version: int, handler, is_async: bool = False,
           answers_later: bool = False) -> ServedApi:
    request, response = API_MESSAGES[api_key]
    lo, hi = request.version_range
    assert lo <= min_version <= max_version <= hi, "cannot serve versions the protocol does not declare"
    versions = range(max_version + 1)
    return ServedApi(
        api_key, request.name.removesuffix("Request"), min_version, max_version, handler, is_async,
        request, response,
        tuple(request_header_version(request, v) if v >= lo else 2 for v in versions),
        tuple(response_header_version(request, v) if v >= lo else 0 for v in versions),
        answers_later,
    )


class AdvertisedApis:
    """The versions a node advertises in ApiVersions and accepts now: its served table
    gated by the finalized metadata.version (server/gating.py, KIP-778). Recomputed only
    when metadata.version changes (not on every feature change), so the per-request
    check is a dict lookup."""

    _UNSET = object()

    def __init__(self, served: dict[int, ServedApi]) -> None:
        self._ranges = {api.api_key: (api.min_version, api.max_version) for api in served.values()}
        self._metadata_version: object = self._UNSET
        self._current: dict[int, tuple[int, int]] = dict(self._ranges)

    def current(self, metadata_version: int | None) -> dict[int, tuple[int, int]]:
        if metadata_version != self._metadata_version:
            from server.gating import gated_ranges

            self._current = gated_ranges(self._ranges, metadata_version)
            self._metadata_version = metadata_version
        return self._current


def controller_apis() -> dict[int, ServedApi]:
    # Imported here so protocol-only users of this module stay light.
    from server.handlers import (
        alter_user_scram_credentials,
        api_versions,
        broker_heartbeat,
        broker_registration,
        create_acls,
        create_topics,
        delete_acls,
        delete_topics,
        describe_acls,
        describe_cluster,
        describe_configs,
        describe_migration,
        describe_quorum,
        envelope,
        incremental_alter_configs,
        metadata,
        sasl_authenticate,
        sasl_handshake,
        unregister_broker,
        update_features,
    )
    from server.handlers import describe_user_scram_credentials

    from server.raft import rpc

    table = [
        served(18, 0, 4, api_versions.handle),
        served(3, 0, 12, metadata.handle),
        served(55, 0, 2, describe_quorum.handle, is_async=True),
        served(57, 0, 2, update_features.handle, is_async=True),
        served(60, 0, 1, describe_cluster.handle),
        served(62, 0, 4, broker_registration.handle, is_async=True),
        served(63, 0, 1, broker_heartbeat.handle, is_async=True),
        served(64, 0, 0, unregister_broker.handle, is_async=True),
        # Topics and configs (issue 6: real metadata changes for the ZooKeeper migration).
        served(19, 0, 7, create_topics.handle, is_async=True),
        served(20, 0, 6, delete_topics.handle, is_async=True),
        served(32, 0, 4, describe_configs.handle),
        served(44, 0, 1, incremental_alter_configs.handle, is_async=True),
        # kraftwerk's DescribeMigration (KIP-866 status; `kraftwerk migration status`).
        served(10001, 0, 0, describe_migration.handle),
        # ACLs in the metadata log (issue 8).
        served(29, 1, 3, describe_acls.handle),
        served(30, 1, 3, create_acls.handle, is_async=True),
        served(31, 1, 3, delete_acls.handle, is_async=True),
        # A broker forwarding a client's request with the client's principal (issue 8).
        served(58, 0, 0, envelope.handle, is_async=True),
        # SASL (issue 8): v0 handshakes are answered and the connection closed
        # (server/security/sasl.py); SCRAM credentials in the metadata log.
        served(17, 0, 1, sasl_handshake.handle),
        served(36, 0, 2, sasl_authenticate.handle, is_async=True),
        served(50, 0, 0, describe_user_scram_credentials.handle),
        served(51, 0, 0, alter_user_scram_credentials.handle, is_async=True),
        # KRaft RPCs between controllers (and, with issue 4, broker observers).
        served(1, 17, 17, rpc.offer, answers_later=True),
        served(52, 0, 1, rpc.offer, answers_later=True),
        served(53, 0, 1, rpc.offer, answers_later=True),
        served(54, 0, 1, rpc.offer, answers_later=True),
        served(59, 0, 1, rpc.offer, answers_later=True),
    ]
    return {api.api_key: api for api in table}


def broker_apis() -> dict[int, ServedApi]:
    """What the broker agent serves to clients: the read APIs from its own metadata
    image, and the controller APIs it forwards to the active controller."""
    from server.handlers import api_versions, describe_acls, describe_cluster, describe_configs, forwarded, metadata
    from server.handlers import describe_user_scram_credentials, sasl_authenticate, sasl_handshake

    table = [
        served(18, 0, 4, api_versions.handle),
        served(3, 0, 12, metadata.handle),
        served(60, 0, 1, describe_cluster.handle),
        served(32, 0, 4, describe_configs.handle),
        served(57, 0, 2, forwarded.handle, is_async=True),
        served(55, 0, 2, forwarded.handle, is_async=True),
        served(19, 0, 7, forwarded.handle, is_async=True),
        served(20, 0, 6, forwarded.handle, is_async=True),
        served(44, 0, 1, forwarded.handle, is_async=True),
        served(10001, 0, 0, forwarded.handle, is_async=True),
        served(29, 1, 3, describe_acls.handle),
        served(30, 1, 3, forwarded.handle, is_async=True),
        served(31, 1, 3, forwarded.handle, is_async=True),
        # SASL (issue 8); SCRAM credentials: described from the broker's own image,
        # altered through the active controller.
        served(17, 0, 1, sasl_handshake.handle),
        served(36, 0, 2, sasl_authenticate.handle, is_async=True),
        served(50, 0, 0, describe_user_scram_credentials.handle),
        served(51, 0, 0, forwarded.handle, is_async=True),
    ]
    return {api.api_key: api for api in table}
