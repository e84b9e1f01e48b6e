"""DescribeConfigs (key 32, v0-4): topic and broker configs from the committed image.

A read handler on controllers and broker agents alike: both hold the same replayed
image, so no forwarding is needed (a broker may lag the controller by what it has not
fetched yet, as in Kafka).
"""

from __future__ import annotations

from server.api.context import MetadataImage
from server.controller import topics
from server.security import item_checks


def handle(ctx, request):
    services: MetadataImage = ctx.services
    # resources the principal may not describe are answered with an error.
    authorized, refused = item_checks.config_resources(ctx, request, alter=False)
    response = topics.describe_configs(services.image, authorized, ctx.api_version)
    if refused:
        response["results"] = refused + response["results"]
    return response
