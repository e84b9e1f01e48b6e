"""DescribeClientQuotas (key 48, v0-1): the client quotas a filter matches, from the image.

A read handler on controllers and brokers alike (both replay the same ClientQuotaRecords),
so a broker answers from its own image as Kafka's brokers do. Filter checks and matching
live in server/controller/quotas.py. DESCRIBE_CONFIGS on CLUSTER is checked before
(the catalog entry's rule).
"""

from __future__ import annotations

from server.api.context import ServingServices
from server.controller import quotas


def error_response(request, code: int, message: str | None) -> dict:
    return quotas.describe_error_response(request, code, message)


def handle(ctx, request):
    services: ServingServices = ctx.services
    return quotas.describe_client_quotas(services.image, request)
