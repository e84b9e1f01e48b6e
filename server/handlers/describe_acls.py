"""DescribeAcls (key 29, v1-3): the ACLs a filter matches, from the committed image.

A read handler on controllers and brokers alike (both replay the same ACL records).
Without an authorizer: SECURITY_DISABLED, as Kafka. DESCRIBE on CLUSTER is checked
before (server/security/api_rules.py).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.controller import acl_commands
from server.handlers.create_acls import SECURITY_DISABLED_MESSAGE


def handle(ctx, request):
    node = ctx.node
    if node.authorizer is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": SECURITY_DISABLED_MESSAGE, "resources": []}
    return acl_commands.describe_acls(node.state, request)
