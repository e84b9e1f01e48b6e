"""Every driver of the client matrix: how to start it, what it needs, which calls its
client cannot make, and which paths it can take.

A driver is a program speaking tests/clients/PROTOCOL.md (cwd = the repository root).
`missing()` names an absent component (a binary, a toolchain, a build output or a
library) with the fix; the test then skips with that reason, which CI=true turns into a
failure. `unsupported` lists the calls the client has no way to make, with the reason:
a driver answering `unsupported` for any other call fails its test, and so does one
answering a call declared here. A declaration names a call (`update_features`) or one
row of the table, a variant of a call (`update_features (validate_only)`).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP = "run scripts/setup --test"
PY_DRIVERS = "tests/clients/drivers"
NODE_DIR = REPO_ROOT / "tests" / "clients" / "node"
GO_BINARY = "tests/clients/go/bin/matrix-driver"
JAVA_CLASSES = REPO_ROOT / "interop" / "target" / "classes"
JAVA_CLASSPATH_FILE = REPO_ROOT / "interop" / "target" / "classpath.txt"


@dataclass(frozen=True)
class Driver:
    name: str
    command: Callable[[str, str], list[str]]  # (bootstrap, path) -> argv
    missing: Callable[[], str | None]
    unsupported: dict[str, str] = field(default_factory=dict)
    # Paths the client cannot take, with the reason (the table shows "—").
    no_path: dict[str, str] = field(default_factory=dict)
    # Calls the client cannot make on one path only (path -> {call: reason}).
    path_unsupported: dict[str, dict[str, str]] = field(default_factory=dict)
    # Result fields the client's API does not expose ({call: {field: reason}}): the
    # harness accepts null for them (the table notes why) and checks everything else.
    absent_fields: dict[str, dict[str, str]] = field(default_factory=dict)
    # Paths on which the client cannot survive a kill -9 of the controller leader, with
    # the reason (path -> reason): the failover phase is not run there (the table shows
    # "—"); the other paths still run it.
    no_failover: dict[str, str] = field(default_factory=dict)

    def unsupported_on(self, path: str) -> dict[str, str]:
        return {**self.unsupported, **self.path_unsupported.get(path, {})}


def _python_script(script: str) -> Callable[[], str | None]:
    return _path(f"{PY_DRIVERS}/{script}", "the Python driver script")


def _python_driver(script: str) -> Callable[[str, str], list[str]]:
    return lambda bootstrap, path: [sys.executable, f"{PY_DRIVERS}/{script}", "--bootstrap", bootstrap,
                                    "--path", path]


def _python_module(module: str, package: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed in .venv: {SETUP}"
        return None
    return missing


def _all_of(*checks: Callable[[], str | None]) -> Callable[[], str | None]:
    def missing() -> str | None:
        return next((reason for check in checks if (reason := check()) is not None), None)
    return missing


def _binary(name: str, what: str) -> Callable[[], str | None]:
    return lambda: None if shutil.which(name) else f"{what} ({name}) is not installed: {SETUP}"


def _path(relative: str, what: str) -> Callable[[], str | None]:
    return lambda: None if (REPO_ROOT / relative).exists() else f"{what} is missing ({relative}): {SETUP}"


def _node(client: str, package: str) -> Driver:
    return Driver(
        name=client,
        command=lambda bootstrap, path: ["node", "tests/clients/node/driver.mjs", client, "--bootstrap", bootstrap,
                                         "--path", path],
        missing=_all_of(_binary("node", "Node.js"), _path("tests/clients/node/driver.mjs", "the node driver"),
                        _path(f"tests/clients/node/node_modules/{package}", f"the npm package {package}")),
        unsupported=NODE_UNSUPPORTED[client],
        no_failover=_keeps_dead_controller("@platformatic/kafka") if client == "platformatic" else {},
    )


def _go(client: str) -> Driver:
    return Driver(
        name=client,
        command=lambda bootstrap, path: [GO_BINARY, client, "--bootstrap", bootstrap, "--path", path],
        missing=_path(GO_BINARY, f"the Go matrix driver ({client}; built by scripts/setup.d with the go toolchain)"),
        unsupported=GO_UNSUPPORTED[client],
        absent_fields=GO_ABSENT_FIELDS.get(client, {}),
        no_failover=_keeps_dead_controller("sarama") if client == "sarama" else {},
    )


def _java_command(bootstrap: str, path: str) -> list[str]:
    classpath = JAVA_CLASSPATH_FILE.read_text().strip()
    return ["java", "-Xmx256m", "-cp", f"interop/target/classes:{classpath}", "kraftwerk.interop.AdminDriver",
            "--bootstrap", bootstrap, "--path", path]


def _java_missing() -> str | None:
    if not shutil.which("java"):
        return f"Java (java) is not installed: {SETUP}"
    if not (JAVA_CLASSES / "kraftwerk" / "interop" / "AdminDriver.class").exists() or not JAVA_CLASSPATH_FILE.exists():
        return f"the Java AdminClient driver is not built (interop/target/classes, classpath.txt): {SETUP}"
    return None


NO_QUOTAS_KP = "kafka-python 3.0.12's KafkaAdminClient has no client-quota calls"
KAFKA_PYTHON_UNSUPPORTED = {"alter_client_quotas": NO_QUOTAS_KP, "describe_client_quotas": NO_QUOTAS_KP}

# `python -m kafka.admin` 3.0.12 (the command line of kafka-python, one run per call) has
# no quota commands (they are on its TODO list), and its `topics create` takes a name,
# a partition count and a replication factor only: the matrix's topic has configs, so
# our own client creates it and the command line reads, alters and deletes it.
KAFKA_ADMIN_CLI_UNSUPPORTED = {
    "create_topic": "python -m kafka.admin 3.0.12 `topics create` has no option for topic configs",
    "alter_client_quotas": "python -m kafka.admin 3.0.12 has no quota commands",
    "describe_client_quotas": "python -m kafka.admin 3.0.12 has no quota commands",
}

CONFLUENT_UNSUPPORTED = {
    "describe_features": "confluent-kafka 2.16 AdminClient has no describe_features",
    "update_features": "confluent-kafka 2.16 AdminClient has no update_features",
    "describe_quorum": "confluent-kafka 2.16 AdminClient has no describe_metadata_quorum",
    "alter_client_quotas": "confluent-kafka 2.16 AdminClient has no client-quota calls",
    "describe_client_quotas": "confluent-kafka 2.16 AdminClient has no client-quota calls",
}

AIOKAFKA_UNSUPPORTED = {
    "describe_features": "aiokafka 0.14 AIOKafkaAdminClient has no describe_features",
    "update_features": "aiokafka 0.14 AIOKafkaAdminClient has no update_features",
    "describe_quorum": "aiokafka 0.14 AIOKafkaAdminClient has no describe_quorum",
    "incremental_alter_configs": "aiokafka 0.14 AIOKafkaAdminClient has only the legacy alter_configs",
    "alter_client_quotas": "aiokafka 0.14 AIOKafkaAdminClient has no client-quota calls",
    "describe_client_quotas": "aiokafka 0.14 AIOKafkaAdminClient has no client-quota calls",
    "create_acl": "aiokafka 0.14 AIOKafkaAdminClient has no ACL calls",
    "describe_acls": "aiokafka 0.14 AIOKafkaAdminClient has no ACL calls",
    "delete_acls": "aiokafka 0.14 AIOKafkaAdminClient has no ACL calls",
    "alter_scram": "aiokafka 0.14 AIOKafkaAdminClient has no SCRAM calls",
    "describe_scram": "aiokafka 0.14 AIOKafkaAdminClient has no SCRAM calls",
}

KCAT_ONLY = "kcat 1.7 is a producer/consumer/metadata tool: its only admin-like call is -L (Metadata)"
KCAT_UNSUPPORTED = {"describe_cluster": "kcat -L shows the brokers but not the cluster id"}
KCAT_UNSUPPORTED.update({call: KCAT_ONLY for call in (
    "describe_features", "update_features", "describe_quorum", "create_topic", "create_partitions", "delete_topic",
    "describe_configs", "alter_configs", "incremental_alter_configs", "alter_client_quotas",
    "describe_client_quotas", "create_acl", "describe_acls", "delete_acls", "alter_scram", "describe_scram")})

# Declared by the node drivers' authors (tests/clients/node/*.mjs, UNSUPPORTED).
NODE_UNSUPPORTED = {
    "kafkajs": {
        "describe_features": "kafkajs 2.2.4 admin has no describeFeatures",
        "update_features": "kafkajs 2.2.4 admin has no updateFeatures",
        "describe_quorum": "kafkajs 2.2.4 admin has no describeQuorum",
        "incremental_alter_configs": "kafkajs 2.2.4 admin has only the legacy alterConfigs",
        "alter_client_quotas": "kafkajs 2.2.4 admin has no client-quota calls",
        "describe_client_quotas": "kafkajs 2.2.4 admin has no client-quota calls",
        "alter_scram": "kafkajs 2.2.4 admin has no SCRAM calls",
        "describe_scram": "kafkajs 2.2.4 admin has no SCRAM calls",
    },
    "platformatic": {
        "describe_features": "@platformatic/kafka Admin has no describeFeatures",
        "update_features": "@platformatic/kafka Admin has no updateFeatures",
        "describe_quorum": "@platformatic/kafka Admin has no describeQuorum",
        "alter_scram": "@platformatic/kafka Admin has no SCRAM calls",
        "describe_scram": "@platformatic/kafka Admin has no SCRAM calls",
    },
}

# What franz-go's kadm and sarama's ClusterAdmin offer (their drivers: tests/clients/go).
# kadm wraps no DescribeQuorum: its driver sends kmsg's DescribeQuorumRequest through the
# admin client's own kgo.Client, franz-go's way to make a call kadm lacks.
GO_UNSUPPORTED = {
    "kadm": {},
    "sarama": {
        "describe_features": "sarama's ClusterAdmin has no DescribeFeatures call",
        "describe_quorum": "sarama's ClusterAdmin has no DescribeQuorum call",
        # sarama's UpdateFeatures speaks v0 only: no validate-only, no upgrade type, and a
        # KRaft controller ignores v0's AllowDowngrade (as Kafka's does: FACTS §8).
        "update_features (validate_only)": "sarama's UpdateFeatures (v0 only) has no validate-only flag",
        "update_features (unsafe_downgrade)": "sarama's UpdateFeatures (v0 only) cannot ask for a downgrade",
        "update_features (safe_downgrade)": "sarama's UpdateFeatures (v0 only) cannot ask for a downgrade",
    },
}
GO_ABSENT_FIELDS = {
    "sarama": {"describe_cluster": {"cluster_id": "sarama's ClusterAdmin.DescribeCluster returns the brokers and "
                                                  "the controller id only; sarama does not expose the cluster id"}},
}

JAVA_UNSUPPORTED = {"alter_configs": "kafka-clients 4.x has no Admin#alterConfigs (legacy AlterConfigs was removed in 4.0)"}
# With bootstrap.controllers the Java Admin refuses these calls itself ("not yet supported
# when communicating directly with the controller quorum").
JAVA_CONTROLLER_ONLY = "kafka-clients' Admin does not make this call with bootstrap.controllers"
JAVA_CONTROLLER_UNSUPPORTED = {call: JAVA_CONTROLLER_ONLY for call in (
    "create_topic", "list_topics", "describe_topic", "create_partitions", "delete_topic", "alter_client_quotas",
    "describe_client_quotas", "alter_scram", "describe_scram")}

# Clients other than Kafka's Java Admin have no controller bootstrap (KIP-919); they reach
# kraftwerk's controllers only because those answer Metadata, which names the active
# controller. They send the controller APIs to the controller they learned and, when it
# is killed, keep trying it (a connection error does not make them ask for another):
# kafka-python NodeNotReadyError, librdkafka _TRANSPORT/_TIMED_OUT, @platformatic/kafka
# and sarama ECONNREFUSED. Which node they learned depends on timing for some, so the
# outcome is not even repeatable. Through the brokers all of them survive the same kill.
KEEPS_DEAD_CONTROLLER = ("{client} keeps sending controller requests to the controller it learned from Metadata "
                         "(the killed leader) and never asks for another; it has no controller bootstrap (only "
                         "Kafka's Java Admin has, KIP-919), and through the brokers it survives the same kill")


def _keeps_dead_controller(client: str) -> dict[str, str]:
    return {"controller": KEEPS_DEAD_CONTROLLER.format(client=client)}


DRIVERS: list[Driver] = [
    Driver("kafka-python", _python_driver("kafka_python_driver.py"), _python_module("kafka", "kafka-python"),
           KAFKA_PYTHON_UNSUPPORTED, no_failover=_keeps_dead_controller("kafka-python")),
    Driver("kafka-python-cli", _python_driver("kafka_admin_cli_driver.py"),
           _all_of(_python_module("kafka", "kafka-python"), _python_script("kafka_admin_cli_driver.py")),
           KAFKA_ADMIN_CLI_UNSUPPORTED),
    Driver("confluent-kafka", _python_driver("confluent_kafka_driver.py"),
           _python_module("confluent_kafka", "confluent-kafka"), CONFLUENT_UNSUPPORTED,
           no_failover=_keeps_dead_controller("confluent-kafka (librdkafka)")),
    Driver("aiokafka", _python_driver("aiokafka_driver.py"), _python_module("aiokafka", "aiokafka"),
           AIOKAFKA_UNSUPPORTED),
    Driver("kcat", _python_driver("kcat_driver.py"), _binary("kcat", "kcat"), KCAT_UNSUPPORTED),
    _node("kafkajs", "kafkajs"),
    _node("platformatic", "@platformatic/kafka"),
    _go("kadm"),
    _go("sarama"),
    Driver("java-admin", _java_command, _java_missing, JAVA_UNSUPPORTED,
           path_unsupported={"controller": JAVA_CONTROLLER_UNSUPPORTED}),
]


def by_name(name: str) -> Driver:
    return next(d for d in DRIVERS if d.name == name)
