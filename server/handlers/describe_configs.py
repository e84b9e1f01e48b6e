"""DescribeConfigs (key 32, v0-4): topic and broker configs from the committed image.

A read handler on controllers and broker agents alike: both hold the same replayed
image, so no forwarding is needed (a broker may lag the controller by what it has not
fetched yet, as in Kafka).
"""

from __future__ import annotations

from server.controller import topics


def handle(ctx, request):
    return topics.describe_configs(ctx.node.state, request, ctx.api_version)
