"""Matrix driver for confluent-kafka's AdminClient (librdkafka; tests/clients/PROTOCOL.md).

One AdminClient for the driver's life. confluent-kafka 2.16 has no feature, quorum or
client-quota calls: those are unsupported.
"""

from __future__ import annotations

import concurrent.futures
import sys

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, AlterConfigOpType, ConfigEntry,
    ConfigResource, NewPartitions, NewTopic, ResourcePatternType, ResourceType, ScramCredentialInfo,
    ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion,
)

from driver_loop import DEFAULT_TIMEOUT_MS, Unsupported, serve, sorted_ints, timeout_ms

CLIENT = "confluent-kafka 2.16 AdminClient"
RESOURCES = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER}


def describe_error(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error = exc.args[0]
        return error.name(), bool(error.retriable())
    if isinstance(exc, concurrent.futures.TimeoutError):
        # No answer within timeout_ms: Kafka counts a timeout as retriable.
        return "TIMED_OUT (no answer within timeout_ms)", True
    return f"{type(exc).__name__}: {exc}", False


def open_client(options) -> AdminClient:
    return AdminClient({"bootstrap.servers": options.bootstrap, "client.id": "kraftwerk-matrix",
                        "socket.timeout.ms": DEFAULT_TIMEOUT_MS})


def calls(client: AdminClient) -> dict:
    def seconds(args) -> float:
        return timeout_ms(args) / 1000

    def one(futures: dict, args):
        (future,) = futures.values()
        return future.result(timeout=seconds(args))

    def describe_cluster(args):
        described = client.describe_cluster(request_timeout=seconds(args)).result(timeout=seconds(args))
        return {"cluster_id": described.cluster_id, "broker_ids": sorted_ints(n.id for n in described.nodes),
                "controller_id": described.controller.id if described.controller is not None else -1}

    def unsupported(what):
        def call(args):
            raise Unsupported(f"{CLIENT} has no {what}")
        return call

    def create_topic(args):
        topic = NewTopic(args["name"], num_partitions=int(args["partitions"]),
                         replication_factor=int(args["replication_factor"]), config=dict(args.get("configs") or {}))
        one(client.create_topics([topic], request_timeout=seconds(args)), args)
        return {}

    def list_topics(args):
        metadata = client.list_topics(timeout=seconds(args))
        return {"topics": sorted(name for name in metadata.topics if not name.startswith("__"))}

    def describe_topic(args):
        described = one(client.describe_topics(TopicCollection([args["name"]]), request_timeout=seconds(args)), args)
        return {"partitions": len(described.partitions)}

    def create_partitions(args):
        one(client.create_partitions([NewPartitions(args["name"], int(args["total"]))],
                                     request_timeout=seconds(args)), args)
        return {}

    def delete_topic(args):
        one(client.delete_topics([args["name"]], request_timeout=seconds(args)), args)
        return {}

    def describe_configs(args):
        resource = ConfigResource(RESOURCES[args["resource"]], args["name"])
        entries = one(client.describe_configs([resource], request_timeout=seconds(args)), args)
        return {"configs": {key: (entries[key].value if key in entries else None) for key in args["keys"]}}

    def alter_configs(args):
        resource = ConfigResource(RESOURCES[args["resource"]], args["name"], set_config=dict(args["configs"]))
        one(client.alter_configs([resource], request_timeout=seconds(args)), args)
        return {}

    def incremental_alter_configs(args):
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in (args.get("set") or {}).items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in args.get("delete") or ()]
        resource = ConfigResource(RESOURCES[args["resource"]], args["name"], incremental_configs=entries)
        one(client.incremental_alter_configs([resource], request_timeout=seconds(args)), args)
        return {}

    def binding(args, cls):
        return cls(ResourceType[args["resource_type"]], args["resource_name"],
                   ResourcePatternType[args["pattern"]], args.get("principal"), args.get("host"),
                   AclOperation[args["operation"]] if "operation" in args else AclOperation.ANY,
                   AclPermissionType[args["permission"]] if "permission" in args else AclPermissionType.ANY)

    def create_acl(args):
        one(client.create_acls([binding(args, AclBinding)], request_timeout=seconds(args)), args)
        return {}

    def describe_acls(args):
        found = client.describe_acls(binding(args, AclBindingFilter),
                                     request_timeout=seconds(args)).result(timeout=seconds(args))
        return {"acls": [{"principal": b.principal, "host": b.host, "operation": b.operation.name,
                          "permission": b.permission_type.name} for b in found]}

    def delete_acls(args):
        deleted = one(client.delete_acls([binding(args, AclBindingFilter)], request_timeout=seconds(args)), args)
        return {"deleted": len(deleted)}

    def mechanism(name: str) -> ScramMechanism:
        return ScramMechanism[name.replace("-", "_")]

    def alter_scram(args):
        if args.get("delete"):
            alteration = UserScramCredentialDeletion(args["user"], mechanism(args["mechanism"]))
        else:
            alteration = UserScramCredentialUpsertion(
                args["user"], ScramCredentialInfo(mechanism(args["mechanism"]), int(args["iterations"])),
                args["password"].encode())
        one(client.alter_user_scram_credentials([alteration], request_timeout=seconds(args)), args)
        return {}

    def describe_scram(args):
        futures = client.describe_user_scram_credentials(list(args["users"]), request_timeout=seconds(args))
        users = {}
        for user, future in futures.items():
            described = future.result(timeout=seconds(args))
            users[user] = [{"mechanism": info.mechanism.name.replace("_", "-"), "iterations": info.iterations}
                           for info in described.scram_credential_infos]
        return {"users": users}

    return {
        "describe_cluster": describe_cluster, "describe_features": unsupported("describe_features"),
        "update_features": unsupported("update_features"), "describe_quorum": unsupported("describe_metadata_quorum"),
        "create_topic": create_topic, "list_topics": list_topics, "describe_topic": describe_topic,
        "create_partitions": create_partitions, "delete_topic": delete_topic, "describe_configs": describe_configs,
        "alter_configs": alter_configs, "incremental_alter_configs": incremental_alter_configs,
        "alter_client_quotas": unsupported("client-quota calls"),
        "describe_client_quotas": unsupported("client-quota calls"), "create_acl": create_acl,
        "describe_acls": describe_acls, "delete_acls": delete_acls, "alter_scram": alter_scram,
        "describe_scram": describe_scram,
    }


if __name__ == "__main__":
    sys.exit(serve("confluent-kafka", f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
                   open_client, calls, describe_error, lambda client: None))
