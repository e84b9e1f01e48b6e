"""Client quotas on a real in-process controller with an authorizer: DescribeClientQuotas
needs DESCRIBE_CONFIGS on CLUSTER and AlterClientQuotas ALTER_CONFIGS (which implies
DESCRIBE_CONFIGS), as in Kafka; a refused alteration writes nothing."""

from __future__ import annotations

import trio

from server.authorization import AclOperation as Op
from server.security.model import ResourceType as Res

from .test_acl_server import AUTHORIZER, DENIED, TIMEOUT_S, controller, creation, grant

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49

ALTER = {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                      "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
         "validate_only": False}
DESCRIBE = {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": False}


async def test_quota_apis_need_the_cluster_config_operations(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as (node, client):
            described = await client.call(DESCRIBE_CLIENT_QUOTAS, DESCRIBE)
            altered = await client.call(ALTER_CLIENT_QUOTAS, ALTER)
            assert (described.error_code, described.entries) == (DENIED, None)
            assert [(e.entity[0].entity_name, e.error_code) for e in altered.entries] == [("alice", DENIED)]
            assert dict(node.state.client_quotas()) == {}

            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.DESCRIBE_CONFIGS))
            described = await client.call(DESCRIBE_CLIENT_QUOTAS, DESCRIBE)
            assert (described.error_code, list(described.entries)) == (0, [])
            assert [e.error_code for e in (await client.call(ALTER_CLIENT_QUOTAS, ALTER)).entries] == [DENIED]

            await grant(node, creation(Res.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS))
            assert [e.error_code for e in (await client.call(ALTER_CLIENT_QUOTAS, ALTER)).entries] == [0]
            described = await client.call(DESCRIBE_CLIENT_QUOTAS, DESCRIBE)
            assert [[(v.key, v.value) for v in e["values"]] for e in described.entries] == [
                [("producer_byte_rate", 1024.0)]]
