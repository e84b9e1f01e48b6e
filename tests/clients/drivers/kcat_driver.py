"""Matrix driver for kcat (tests/clients/PROTOCOL.md).

kcat is a producer/consumer tool whose only admin-like call is `-L` (a Metadata request,
printed as JSON with -J): describe_cluster, list_topics and describe_topic come from it;
every other call is unsupported. kcat has no long-lived client object: each call is one
`kcat -L` run, bounded by the call's timeout_ms.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from driver_loop import Unsupported, serve, sorted_ints, timeout_ms

ONLY_METADATA = "kcat 1.7 has no admin calls; its only admin-like call is -L (Metadata)"


class KcatError(Exception):
    def __init__(self, name: str, retriable: bool) -> None:
        super().__init__(name)
        self.name = name
        self.retriable = retriable


def describe_error(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, KcatError):
        return exc.name, exc.retriable
    if isinstance(exc, subprocess.TimeoutExpired):
        return "TIMED_OUT (kcat did not finish within timeout_ms)", True
    return f"{type(exc).__name__}: {exc}", False


def kcat_version() -> str:
    result = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10)
    match = re.search(r"Version (\S+)", result.stdout + result.stderr)
    return match.group(1) if match else "?"


def calls(bootstrap: str) -> dict:
    def metadata(args, topic: str | None = None) -> dict:
        limit_ms = timeout_ms(args)
        argv = ["kcat", "-b", bootstrap, "-L", "-J", "-m", str(max(1, limit_ms // 1000 - 1))]
        if topic is not None:
            argv += ["-t", topic]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=limit_ms / 1000)
        sys.stderr.write(result.stderr)
        if result.returncode != 0:
            # librdkafka's failure text, e.g. "Local: Broker transport failure": a transport problem.
            raise KcatError(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "kcat failed",
                            retriable="transport" in result.stderr.lower() or "timed out" in result.stderr.lower())
        return json.loads(result.stdout)

    def describe_cluster(args):
        described = metadata(args)
        cluster_id = described.get("cluster_id")
        if cluster_id is None:
            raise Unsupported("kcat -L does not show the cluster id")
        return {"cluster_id": cluster_id, "broker_ids": sorted_ints(b["id"] for b in described["brokers"]),
                "controller_id": described.get("controllerid", -1)}

    def list_topics(args):
        return {"topics": sorted(t["topic"] for t in metadata(args)["topics"] if not t["topic"].startswith("__"))}

    def describe_topic(args):
        (topic,) = metadata(args, args["name"])["topics"]
        if topic.get("error"):
            raise KcatError(str(topic["error"]), False)
        return {"partitions": len(topic["partitions"])}

    def unsupported(args):
        raise Unsupported(ONLY_METADATA)

    table = {name: unsupported for name in (
        "describe_features", "update_features", "describe_quorum", "create_topic", "create_partitions",
        "delete_topic", "describe_configs", "alter_configs", "incremental_alter_configs", "alter_client_quotas",
        "describe_client_quotas", "create_acl", "describe_acls", "delete_acls", "alter_scram", "describe_scram")}
    table.update(describe_cluster=describe_cluster, list_topics=list_topics, describe_topic=describe_topic)
    return table


if __name__ == "__main__":
    sys.exit(serve("kcat", kcat_version(), lambda options: options.bootstrap, calls, describe_error,
                   lambda bootstrap: None))
