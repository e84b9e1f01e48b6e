"""Matrix driver for kafka-python's own command line, `python -m kafka.admin`
(tests/clients/PROTOCOL.md).

Each call is one run of the command line an operator would type (`--format json`),
bounded by the call's timeout_ms; its output is parsed here. So the "one client object"
of the matrix is, for this client, one command per call: what is checked is that an
operator's fresh command sees the cluster right after every change.

The command line reports a failure in three ways, all turned into Kafka's error name
where the text carries it: exit status 1 with `[Error N] Name: ...` on stdout (a
response error it raised), a per-item outcome inside a successful answer (`"OK"` or
`[Error N] ...` for configs and features, an error class for ACLs, a message for
SCRAM), or exit status 1 with a traceback on stderr (anything else). Calls it has no
command for answer `unsupported`: no quota commands in 3.0.12 (they are on its TODO
list) and `topics create` takes no topic configs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import kafka
import kafka.errors as kafka_errors
from kafka.admin import ScramMechanism

from driver_loop import Unsupported, serve, sorted_ints, timeout_ms

NO_QUOTAS = "python -m kafka.admin 3.0.12 has no quota commands"
NO_TOPIC_CONFIGS = "python -m kafka.admin 3.0.12 `topics create` has no option for topic configs"
ERROR_LINE = re.compile(r"\[Error (-?\d+)\]")
ERROR_CLASS = re.compile(r"<class 'kafka\.errors\.(\w+)'>")
TRACEBACK_LAST = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Timeout\w*))(?::\s*(.*))?$")
# kafka-python's repr of an ACL, the only form `acls describe` prints.
ACL_REPR = re.compile(r"<ACL principal=(?P<principal>.*?), resource=<ResourcePattern type=\w+, name=.*?, "
                      r"pattern=\w+>, operation=(?P<operation>\w+), type=(?P<permission>\w+), host=(?P<host>.*)>$")


class CliError(Exception):
    def __init__(self, name: str, retriable: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.retriable = retriable


def describe_error(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, CliError):
        return exc.name, exc.retriable
    if isinstance(exc, subprocess.TimeoutExpired):
        return "TIMED_OUT (python -m kafka.admin did not finish within timeout_ms)", True
    return f"{type(exc).__name__}: {exc}", False


def error_from_text(text: str) -> CliError:
    """Kafka's error name for `[Error N] ...` or `<class 'kafka.errors.X'>`, else the text."""
    if (match := ERROR_LINE.search(text)) is not None:
        error = kafka_errors.for_code(int(match.group(1)))
        return CliError(error.message, bool(error.retriable))
    if (match := ERROR_CLASS.search(text)) is not None:
        error = getattr(kafka_errors, match.group(1), None)
        if error is not None and getattr(error, "message", None):
            return CliError(error.message, bool(error.retriable))
        return CliError(match.group(1), bool(getattr(error, "retriable", False)))
    return CliError(" ".join(text.split())[:300] or "python -m kafka.admin failed")


def error_from_failure(stdout: str, stderr: str) -> CliError:
    """A run that exited non-zero: a response error on stdout, or a traceback on stderr."""
    if stdout.strip():
        return error_from_text(stdout)
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        match = TRACEBACK_LAST.match(line)
        if match is not None:
            error = getattr(kafka_errors, match.group(1), None)
            retriable = bool(getattr(error, "retriable", False))
            return CliError(f"{match.group(1)}: {match.group(2) or ''}".strip().rstrip(":"), retriable)
    return CliError(lines[-1][:300] if lines else "python -m kafka.admin failed")


def check_outcomes(outcomes: dict) -> None:
    """`{item: "OK" | error text}` (configs alter, update-features)."""
    for outcome in outcomes.values():
        if isinstance(outcome, dict):
            check_outcomes(outcome)
        elif outcome not in ("OK", None):
            raise error_from_text(str(outcome))


def calls(bootstrap: str) -> dict:
    def run(args: dict, *command: str):
        limit_ms = timeout_ms(args)
        argv = [sys.executable, "-m", "kafka.admin", "-b", bootstrap, "--format", "json",
                "-C", f"request_timeout_ms={limit_ms}", *command]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=limit_ms / 1000)
        sys.stderr.write(f"$ {' '.join(argv[1:])}\n{result.stderr}")
        if result.returncode != 0:
            raise error_from_failure(result.stdout, result.stderr)
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise CliError(f"not JSON: {result.stdout.strip()[:300]}") from None

    def describe_cluster(args):
        described = run(args, "cluster", "describe")
        controller_id = described.get("controller_id")
        return {"cluster_id": described.get("cluster_id"),
                "broker_ids": sorted_ints(b["broker_id"] for b in described.get("brokers", ())),
                "controller_id": -1 if controller_id is None else controller_id}

    def describe_features(args):
        described = run(args, "cluster", "describe-features")
        return {"finalized": {name: f["finalized"][1] for name, f in described.items() if f.get("finalized")},
                "supported": {name: list(f["supported"]) for name, f in described.items() if f.get("supported")}}

    def update_features(args):
        command = ["cluster", "update-features", "-f", f"{args['feature']}={int(args['level'])}",
                   "--timeout", str(max(1, timeout_ms(args) // 1000))]
        if args["type"] != "upgrade":
            command.append("--downgrade")
        if args["type"] == "unsafe_downgrade":
            command.append("--unsafe")
        if args.get("validate_only"):
            command.append("--validate-only")
        check_outcomes(run(args, *command))
        return {}

    def describe_quorum(args):
        described = run(args, "cluster", "describe-quorum")
        (partition,) = described["topics"][0]["partitions"]
        if partition.get("error"):
            raise error_from_text(str(partition["error"]))
        return {"leader_id": partition["leader_id"],
                "voters": sorted_ints(v["replica_id"] for v in partition["current_voters"]),
                "observers": sorted_ints(o["replica_id"] for o in partition["observers"])}

    def create_topic(args):
        if args.get("configs"):
            raise Unsupported(NO_TOPIC_CONFIGS)
        for topic in run(args, "topics", "create", "-t", args["name"], "--num-partitions", str(args["partitions"]),
                         "--replication-factor", str(args["replication_factor"]))["topics"]:
            if topic.get("error_code"):
                raise error_from_text(f"[Error {topic['error_code']}]")
        return {}

    def list_topics(args):
        return {"topics": sorted(t for t in run(args, "topics", "list") if not t.startswith("__"))}

    def describe_topic(args):
        (described,) = run(args, "topics", "describe", "-t", args["name"])
        if described.get("error_code"):
            raise error_from_text(f"[Error {described['error_code']}]")
        return {"partitions": len(described["partitions"])}

    def create_partitions(args):
        answer = run(args, "partitions", "create", "-p", f"{args['name']}:{int(args['total'])}",
                     "--timeout-ms", str(timeout_ms(args)))
        for result in answer.get("results", ()):
            if result.get("error_code"):
                raise error_from_text(f"[Error {result['error_code']}]")
        return {}

    def delete_topic(args):
        run(args, "topics", "delete", "-t", args["name"])
        return {}

    def resource(args) -> list[str]:
        return ["-r", args["resource"], "-n", args["name"]]

    def describe_configs(args):
        keys = list(args["keys"])
        command = ["configs", "describe", *resource(args)]
        for key in keys:
            command += ["-c", key]
        entries = run(args, *command).get(args["resource"], {}).get(args["name"], {})
        return {"configs": {key: (entries[key]["value"] if key in entries else None) for key in keys}}

    def alter(args, pairs: list[str], mode: str):
        # --allow-unknown: the server, not the command line's own check, judges the keys.
        command = ["configs", "alter", *resource(args), mode, "--allow-unknown"]
        for pair in pairs:
            command += ["-c", pair]
        check_outcomes(run(args, *command))
        return {}

    def alter_configs(args):
        return alter(args, [f"{k}={v}" for k, v in args["configs"].items()], "--force-alter")

    def incremental_alter_configs(args):
        pairs = [f"{k}=set({v})" for k, v in (args.get("set") or {}).items()]
        pairs += [f"{k}=del()" for k in args.get("delete") or ()]
        return alter(args, pairs, "--force-incremental")

    def no_quotas(args):
        raise Unsupported(NO_QUOTAS)

    def acl_pattern(args) -> list[str]:
        return ["--resource-type", args["resource_type"].lower(), "--resource-name", args["resource_name"],
                "--pattern-type", args["pattern"].lower()]

    def acl_entry(args) -> list[str]:
        return ["--principal", args["principal"], "--host", args["host"], "--operation", args["operation"].lower(),
                "--permission-type", args["permission"].lower(), *acl_pattern(args)]

    def create_acl(args):
        answer = run(args, "acls", "create", *acl_entry(args))
        if answer.get("failed"):
            raise error_from_text(str(answer["failed"][0]))
        return {}

    def describe_acls(args):
        acls = []
        for text in run(args, "acls", "describe", *acl_pattern(args)):
            match = ACL_REPR.match(text)
            if match is None:
                raise CliError(f"cannot read the ACL {text!r}")
            acls.append(match.groupdict())
        return {"acls": acls}

    def delete_acls(args):
        deleted = 0
        for result in run(args, "acls", "delete", *acl_entry(args)):
            if "NoError" not in str(result.get("error")):
                raise error_from_text(str(result.get("error")))
            deleted += len(result.get("deleted", ()))
        return {"deleted": deleted}

    def alter_scram(args):
        if args.get("delete"):
            command = ["--delete", f"{args['user']}:{args['mechanism']}"]
        else:
            command = ["--upsert", f"{args['user']}:{args['mechanism']}:{args['password']}",
                       "--iterations", str(int(args["iterations"]))]
        for user, error in run(args, "users", "alter-scram-credentials", *command).items():
            if error:
                raise error_from_text(f"{user}: {error}")
        return {}

    def describe_scram(args):
        command = ["users", "describe-scram-credentials"]
        for user in args["users"]:
            command += ["--user", user]
        users = {}
        for user, entry in run(args, *command).items():
            if entry.get("error"):
                raise error_from_text(f"{user}: {entry['error']}")
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
    # No client object outlives a call: the "client" is the bootstrap list each command gets.
    sys.exit(serve("python -m kafka.admin", kafka.__version__, lambda options: options.bootstrap, calls,
                   describe_error, lambda bootstrap: None))
