"""Reads answered from a node's image, after the node has caught up with the leader.

The API catalog wraps the handlers of reads that clients use to check their own writes
(Metadata, DescribeCluster, DescribeConfigs, DescribeAcls, DescribeClientQuotas,
DescribeUserScramCredentials): on a node that is not the active controller the read
first waits, bounded, until the node's image holds every write the active controller
had acknowledged (server/nodes/forwarding.py). A client that wrote through one node
and reads through another sees its write, as it would on a single server; Kafka's
brokers answer from whatever their metadata cache holds.
"""

from __future__ import annotations

from typing import Any, Callable

from server.api.context import ServingServices


def after_read_barrier(handler: Callable[..., Any]) -> Callable[..., Any]:
    """`handler` (a sync one) run once the node's read barrier has passed."""

    async def handle(ctx, request):
        services: ServingServices = ctx.services
        await services.read_barrier()
        return handler(ctx, request)

    handle.__wrapped__ = handler
    return handle
