"""What an API needs from the authorizer before its handler runs, and refusal bodies.

Owns: `ApiRule` (the shape of one API's rule; each API's rule is its entry in the API
catalog, server/api/catalog.py, with the facts from Kafka that decide it), the rules
every catalog entry picks from (`NOTHING`, `PER_ITEM`, operations on CLUSTER), and
`refusal` (the full response body refusing a request with CLUSTER_AUTHORIZATION_FAILED
in that API's own error shape).

Rules kept here:
- A rule with no operation lets the request through; `per_item` APIs check each topic
  or resource in their handlers (server/security/item_checks.py).
- The refusal's shape is the API's, not the authorizer's: the catalog entry's
  `error_response` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode
from server.authorization import AclOperation


@dataclass(frozen=True, slots=True)
class ApiRule:
    # The operation on CLUSTER the whole request needs; None: nothing up front.
    operation: AclOperation | None
    # The handler checks each topic / resource itself.
    per_item: bool = False
    # False: checked on controllers only (a broker answers it, as Kafka's brokers do).
    on_brokers: bool = True


NOTHING = ApiRule(None)
PER_ITEM = ApiRule(None, per_item=True)
ALTER, DESCRIBE, CLUSTER_ACTION = AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION

CLUSTER_REFUSED_MESSAGE = "Cluster authorization failed."


def refusal(api: Any, version: int, request: Any) -> dict:
    """The whole request refused with CLUSTER_AUTHORIZATION_FAILED, in the shape of
    `api` (a catalog ApiSpec or a node's ServedApi): a top-level error code where the
    response has one, otherwise the code in every per-item result."""
    return api.error_response(request, version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_REFUSED_MESSAGE)
