"""DescribeUserScramCredentials (key 50, v0, KIP-554): which SCRAM mechanisms and
iteration counts each user has, from the committed image (never salts or keys).

Served by controllers and by brokers alike, each from its own replayed image (Kafka's
brokers answer it from their metadata cache).
"""

from __future__ import annotations

from server.api.context import MetadataImage
from server.controller import scram_commands


def handle(ctx, request):
    services: MetadataImage = ctx.services
    return scram_commands.describe_user_scram_credentials(services.image, request)
