"""Matrix driver for kafka-python's KafkaAdminClient (tests/clients/PROTOCOL.md).

One KafkaAdminClient for the driver's life. kafka-python 3.0.12 has no client-quota
calls in its admin API (it declares the messages only), so those are unsupported.
"""

from __future__ import annotations

import sys

import kafka
import kafka.errors as kafka_errors
from kafka.admin import (
    ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, AlterConfigOp, ConfigResource,
    ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic, ResourcePattern, ResourcePatternFilter,
    ResourceType, ScramMechanism, UpdateFeatureType, UserScramCredentialDeletion, UserScramCredentialUpsertion,
)

from driver_loop import DEFAULT_TIMEOUT_MS, Unsupported, serve, sorted_ints, timeout_ms

NO_QUOTAS = "kafka-python 3.0.12's KafkaAdminClient has no client-quota calls"
FEATURE_TYPES = {"upgrade": UpdateFeatureType.UPGRADE, "safe_downgrade": UpdateFeatureType.SAFE_DOWNGRADE,
                 "unsafe_downgrade": UpdateFeatureType.UNSAFE_DOWNGRADE}
RESOURCE_TYPES = {"topic": ConfigResourceType.TOPIC, "broker": ConfigResourceType.BROKER}


class ResultError(Exception):
    """An error the client returned in a result instead of raising it."""

    def __init__(self, name: str, retriable: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.retriable = retriable


def describe_error(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, ResultError):
        return exc.name, exc.retriable
    if isinstance(exc, kafka_errors.BrokerResponseError) and exc.message:
        return exc.message, bool(exc.retriable)
    if isinstance(exc, kafka_errors.KafkaError):
        return f"{type(exc).__name__}: {exc}", bool(exc.retriable)
    return f"{type(exc).__name__}: {exc}", False


def check_alter_result(result: dict) -> None:
    for by_name in result.values():
        for outcome in by_name.values():
            if outcome != "OK":
                # kafka-python renders the per-resource error as "[Error N] NameError: message".
                raise ResultError(str(outcome))


def open_client(options) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=options.bootstrap.split(","), client_id="kraftwerk-matrix",
                            request_timeout_ms=DEFAULT_TIMEOUT_MS)


def calls(client: KafkaAdminClient) -> dict:
    def describe_cluster(args):
        described = client.describe_cluster()
        return {"cluster_id": described["cluster_id"],
                "broker_ids": sorted_ints(b["broker_id"] for b in described["brokers"]),
                "controller_id": described["controller_id"] if described["controller_id"] is not None else -1}

    def describe_features(args):
        described = client.describe_features()
        return {"finalized": {name: f["finalized"][1] for name, f in described.items() if f.get("finalized")},
                "supported": {name: list(f["supported"]) for name, f in described.items() if f.get("supported")}}

    def update_features(args):
        client.update_features({args["feature"]: (FEATURE_TYPES[args["type"]], int(args["level"]))},
                               validate_only=bool(args.get("validate_only")), timeout_ms=timeout_ms(args))
        return {}

    def describe_quorum(args):
        described = client.describe_metadata_quorum()
        (partition,) = described["topics"][0]["partitions"]
        return {"leader_id": partition["leader_id"],
                "voters": sorted_ints(v["replica_id"] for v in partition["current_voters"]),
                "observers": sorted_ints(o["replica_id"] for o in partition["observers"])}

    def create_topic(args):
        client.create_topics([NewTopic(args["name"], int(args["partitions"]), int(args["replication_factor"]),
                                       topic_configs=dict(args.get("configs") or {}))],
                             timeout_ms=timeout_ms(args))
        return {}

    def list_topics(args):
        return {"topics": sorted(client.list_topics())}

    def describe_topic(args):
        (described,) = client.describe_topics([args["name"]])
        if described.get("error_code"):
            raise kafka_errors.for_code(described["error_code"])()
        return {"partitions": len(described["partitions"])}

    def create_partitions(args):
        client.create_partitions({args["name"]: NewPartitions(int(args["total"]))}, timeout_ms=timeout_ms(args))
        return {}

    def delete_topic(args):
        client.delete_topics([args["name"]], timeout_ms=timeout_ms(args))
        return {}

    def describe_configs(args):
        resource_type = RESOURCE_TYPES[args["resource"]]
        described = client.describe_configs([ConfigResource(resource_type, args["name"], list(args["keys"]))],
                                            config_filter="all")
        entries = described[resource_type.name.lower()][args["name"]]
        return {"configs": {key: (entries[key]["value"] if key in entries else None) for key in args["keys"]}}

    def alter_configs(args):
        resource = ConfigResource(RESOURCE_TYPES[args["resource"]], args["name"], dict(args["configs"]))
        check_alter_result(client.alter_configs([resource], raise_on_unknown=False, incremental=False))
        return {}

    def incremental_alter_configs(args):
        operations = {key: (AlterConfigOp.SET, value) for key, value in (args.get("set") or {}).items()}
        operations.update({key: (AlterConfigOp.DELETE, None) for key in args.get("delete") or ()})
        resource = ConfigResource(RESOURCE_TYPES[args["resource"]], args["name"], operations)
        check_alter_result(client.alter_configs([resource], raise_on_unknown=False, incremental=True))
        return {}

    def no_quotas(args):
        raise Unsupported(NO_QUOTAS)

    def acl_pattern(args, cls):
        return cls(ResourceType[args["resource_type"]], args["resource_name"],
                   ACLResourcePatternType[args["pattern"]])

    def create_acl(args):
        acl = ACL(args["principal"], args["host"], ACLOperation[args["operation"]],
                  ACLPermissionType[args["permission"]], acl_pattern(args, ResourcePattern))
        result = client.create_acls([acl])
        if result["failed"]:
            raise ResultError(str(result["failed"][0]))
        return {}

    def describe_acls(args):
        acl_filter = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               acl_pattern(args, ResourcePatternFilter))
        acls, error = client.describe_acls(acl_filter)
        if error is not kafka_errors.NoError and error is not None:
            raise error()
        return {"acls": [{"principal": a.principal, "host": a.host, "operation": a.operation.name,
                          "permission": a.permission_type.name} for a in acls]}

    def delete_acls(args):
        acl_filter = ACLFilter(args["principal"], args["host"], ACLOperation[args["operation"]],
                               ACLPermissionType[args["permission"]], acl_pattern(args, ResourcePatternFilter))
        deleted = 0
        for _filter, matching, error in client.delete_acls([acl_filter]):
            if error is not kafka_errors.NoError and error is not None:
                raise error()
            deleted += len(matching)
        return {"deleted": deleted}

    def alter_scram(args):
        if args.get("delete"):
            alteration = UserScramCredentialDeletion(args["user"], args["mechanism"])
        else:
            alteration = UserScramCredentialUpsertion(args["user"], args["mechanism"], args["password"],
                                                      iterations=int(args["iterations"]))
        for user, error in client.alter_user_scram_credentials([alteration]).items():
            if error:
                raise ResultError(str(error))
        return {}

    def describe_scram(args):
        described = client.describe_user_scram_credentials(list(args["users"]))
        users = {}
        for user, entry in described.items():
            if entry["error"]:
                raise ResultError(f"{user}: {entry['error']}")
            users[user] = [{"mechanism": ScramMechanism(c["mechanism"]).name.replace("_", "-"),
                            "iterations": c["iterations"]} for c in entry["credential_infos"]]
        return {"users": users}

    return {
        "describe_cluster": describe_cluster, "describe_features": describe_features,
        "update_features": update_features, "describe_quorum": describe_quorum, "create_topic": create_topic,
        "list_topics": list_topics, "describe_topic": describe_topic, "create_partitions": create_partitions,
        "delete_topic": delete_topic, "describe_configs": describe_configs, "alter_configs": alter_configs,
        "incremental_alter_configs": incremental_alter_configs, "alter_client_quotas": no_quotas,
        "describe_client_quotas": no_quotas, "create_acl": create_acl, "describe_acls": describe_acls,
        "delete_acls": delete_acls, "alter_scram": alter_scram, "describe_scram": describe_scram,
    }


if __name__ == "__main__":
    sys.exit(serve("kafka-python", kafka.__version__, open_client, calls, describe_error, lambda c: c.close()))
