"""Matrix driver for aiokafka's AIOKafkaAdminClient (tests/clients/PROTOCOL.md).

One AIOKafkaAdminClient on one asyncio event loop for the driver's life; each call runs
to completion on that loop. aiokafka 0.14 has no feature, quorum, incremental-config,
client-quota, ACL or SCRAM calls: those are unsupported.
"""

from __future__ import annotations

import asyncio
import sys

import aiokafka
import aiokafka.errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from driver_loop import DEFAULT_TIMEOUT_MS, Unsupported, serve, sorted_ints, timeout_ms

CLIENT = "aiokafka 0.14 AIOKafkaAdminClient"
RESOURCES = {"topic": ConfigResourceType.TOPIC, "broker": ConfigResourceType.BROKER}
LOOP = asyncio.new_event_loop()


class ResultError(Exception):
    def __init__(self, name: str, retriable: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.retriable = retriable


def error_for_code(code: int, message: str | None = None) -> ResultError:
    error = kafka_errors.for_code(code)
    return ResultError(error.message or f"error code {code}", bool(getattr(error, "retriable", False)))


def describe_error(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, ResultError):
        return exc.name, exc.retriable
    if isinstance(exc, kafka_errors.KafkaError):
        name = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        return name, bool(exc.retriable)
    if isinstance(exc, asyncio.TimeoutError):
        return "TIMED_OUT (no answer within timeout_ms)", True
    return f"{type(exc).__name__}: {exc}", False


def run(coroutine, args):
    return LOOP.run_until_complete(asyncio.wait_for(coroutine, timeout_ms(args) / 1000))


def open_client(options) -> AIOKafkaAdminClient:
    async def start():
        client = AIOKafkaAdminClient(bootstrap_servers=options.bootstrap.split(","), client_id="kraftwerk-matrix",
                                     request_timeout_ms=DEFAULT_TIMEOUT_MS)
        await client.start()
        return client
    return run(start(), {})


def check_responses(responses) -> None:
    for response in responses:
        for resource in response.resources:
            if resource[0]:
                raise error_for_code(resource[0], resource[1])


def calls(client: AIOKafkaAdminClient) -> dict:
    def unsupported(what):
        def call(args):
            raise Unsupported(f"{CLIENT} has no {what}")
        return call

    def describe_cluster(args):
        described = run(client.describe_cluster(), args)
        return {"cluster_id": described["cluster_id"],
                "broker_ids": sorted_ints(b["node_id"] for b in described["brokers"]),
                "controller_id": described["controller_id"] if described["controller_id"] is not None else -1}

    def create_topic(args):
        topic = NewTopic(args["name"], int(args["partitions"]), int(args["replication_factor"]),
                         topic_configs=dict(args.get("configs") or {}))
        response = run(client.create_topics([topic], timeout_ms=timeout_ms(args)), args)
        for entry in response.topic_errors:
            if entry[1]:
                raise error_for_code(entry[1])
        return {}

    def list_topics(args):
        return {"topics": sorted(t for t in run(client.list_topics(), args) if not t.startswith("__"))}

    def describe_topic(args):
        (described,) = run(client.describe_topics([args["name"]]), args)
        if described["error_code"]:
            raise error_for_code(described["error_code"])
        return {"partitions": len(described["partitions"])}

    def create_partitions(args):
        response = run(client.create_partitions({args["name"]: NewPartitions(int(args["total"]))},
                                                timeout_ms=timeout_ms(args)), args)
        for entry in response.topic_errors:
            if entry[1]:
                raise error_for_code(entry[1])
        return {}

    def delete_topic(args):
        response = run(client.delete_topics([args["name"]], timeout_ms=timeout_ms(args)), args)
        for entry in response.topic_error_codes:
            if entry[1]:
                raise error_for_code(entry[1])
        return {}

    def describe_configs(args):
        resource = ConfigResource(RESOURCES[args["resource"]], args["name"], None)
        responses = run(client.describe_configs([resource]), args)
        values = {}
        for response in responses:
            for error_code, _message, _type, _name, entries in response.resources:
                if error_code:
                    raise error_for_code(error_code)
                values.update({entry[0]: entry[1] for entry in entries})
        return {"configs": {key: values.get(key) for key in args["keys"]}}

    def alter_configs(args):
        resource = ConfigResource(RESOURCES[args["resource"]], args["name"], dict(args["configs"]))
        check_responses(run(client.alter_configs([resource]), args))
        return {}

    return {
        "describe_cluster": describe_cluster, "describe_features": unsupported("describe_features"),
        "update_features": unsupported("update_features"), "describe_quorum": unsupported("describe_quorum"),
        "create_topic": create_topic, "list_topics": list_topics, "describe_topic": describe_topic,
        "create_partitions": create_partitions, "delete_topic": delete_topic, "describe_configs": describe_configs,
        "alter_configs": alter_configs,
        "incremental_alter_configs": unsupported("incremental_alter_configs (only the legacy alter_configs)"),
        "alter_client_quotas": unsupported("client-quota calls"),
        "describe_client_quotas": unsupported("client-quota calls"),
        "create_acl": unsupported("ACL calls"), "describe_acls": unsupported("ACL calls"),
        "delete_acls": unsupported("ACL calls"), "alter_scram": unsupported("SCRAM calls"),
        "describe_scram": unsupported("SCRAM calls"),
    }


def close(client: AIOKafkaAdminClient) -> None:
    LOOP.run_until_complete(asyncio.wait_for(client.close(), 10))


if __name__ == "__main__":
    sys.exit(serve("aiokafka", aiokafka.__version__, open_client, calls, describe_error, close))
