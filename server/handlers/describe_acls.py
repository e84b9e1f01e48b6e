"""DescribeAcls (key 29, v1-3): the ACLs a filter matches, from the committed image.

A read handler on controllers and brokers alike (both replay the same ACL records).
Without an authorizer: SECURITY_DISABLED, as Kafka. DESCRIBE on CLUSTER is checked
before (server/security/api_rules.py).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import ServingServices
from server.api.errors import ApiError
from server.controller import acl_commands

# Kafka words DescribeAcls' refusal differently from CreateAcls' and DeleteAcls'
# ("No Authorizer is configured."); clients may show it, so it is Kafka's.
SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"


def handle(ctx, request):
    services: ServingServices = ctx.services
    if services.authorizer is None:
        raise ApiError(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    return acl_commands.describe_acls(services.image, request)
