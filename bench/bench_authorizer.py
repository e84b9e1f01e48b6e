"""The ACL authorizer's cost per request with 0, 100 and 10,000 ACLs.

In-process, no sockets: the costs measured are the authorizer's alone.
- check_request for UpdateFeatures (ALTER on CLUSTER) as the dispatcher calls it, for a
  principal allowed by an ACL (refusals also log, which is not the authorizer's cost);
- authorize() of READ on a topic (the per-item path of the topic APIs);
- the Metadata handler listing every topic (1,000) for an allowed principal, against the
  same handler without an authorizer (the per-topic DESCRIBE filter);
- rebuilding the index, and the change check when the log moved but the ACLs did not.

The ACL mix (per N): literal topic ACLs for many principals (a few on the measured topic),
prefixed patterns of lengths 1..20, wildcard-resource and wildcard-principal ACLs, group
ACLs, DENY ACLs for other principals, and the allowing CLUSTER/TOPIC ACLs for the measured
principal. Timing targets live here, never in tests.

Run: .venv/bin/python bench/bench_authorizer.py [--acls 0,100,10000] [--repeat 20000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol import metadata_records as mr  # noqa: E402
from protocol.apis import metadata as metadata_api  # noqa: E402
from protocol.apis import update_features  # noqa: E402
from protocol.records import record  # noqa: E402
from server.api.catalog import NodeRole, served_table  # noqa: E402
from server.authorization import AclOperation as Op  # noqa: E402
from server.controller.state import ControllerState  # noqa: E402
from server.handlers import metadata  # noqa: E402
from server.security.acls import AclBinding  # noqa: E402
from server.security.authorizer import AuthorizerConfig, StandardAuthorizer  # noqa: E402
from server.security.model import AclPermissionType as Perm  # noqa: E402
from server.security.model import KafkaPrincipal  # noqa: E402
from server.security.model import PatternType as Pat  # noqa: E402
from server.security.model import ResourceType as Res  # noqa: E402

PRINCIPAL = KafkaPrincipal("User", "client-7")
HOST = "10.1.2.3"
TOPIC = "orders-eu-00017"
TOPICS = 1000


def acl_mix(count: int, rng: random.Random) -> list[AclBinding]:
    """`count` ACLs; the measured principal's allowing ACLs are always among them (when count > 0)."""
    if count == 0:
        return []
    allowing = [
        AclBinding(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, str(PRINCIPAL), "*", Op.ALTER, Perm.ALLOW),
        AclBinding(Res.TOPIC, "orders-", Pat.PREFIXED, str(PRINCIPAL), "*", Op.READ, Perm.ALLOW),
    ]
    out = dict.fromkeys(allowing)
    kinds = ["literal", "literal", "literal", "prefixed", "wildcard", "group", "deny-other", "cluster-other"]
    index = 0
    while len(out) < count:  # bounded: the name spaces are far larger than any count asked for
        kind = kinds[index % len(kinds)]
        index += 1
        who = f"User:user-{rng.randrange(2000)}"
        if kind == "literal":
            name = TOPIC if rng.random() < 0.002 else f"topic-{rng.randrange(50_000):05d}"
            out.setdefault(AclBinding(Res.TOPIC, name, Pat.LITERAL, who, "*", rng.choice([Op.READ, Op.WRITE]), Perm.ALLOW))
        elif kind == "prefixed":
            length = rng.randint(1, 20)
            name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz-0123456789") for _ in range(length))
            if rng.random() < 0.01:
                name = TOPIC[: rng.randint(1, len(TOPIC))]
            out.setdefault(AclBinding(Res.TOPIC, name, Pat.PREFIXED, who, "*", Op.READ, Perm.ALLOW))
        elif kind == "wildcard":
            out.setdefault(AclBinding(Res.TOPIC, "*", Pat.LITERAL, who, rng.choice(["*", "10.9.9.9"]), Op.DESCRIBE,
                                  Perm.ALLOW))
        elif kind == "group":
            out.setdefault(AclBinding(Res.GROUP, f"group-{rng.randrange(10_000)}", Pat.LITERAL, "User:*", "*", Op.READ,
                                  Perm.ALLOW))
        elif kind == "deny-other":
            out.setdefault(AclBinding(Res.TOPIC, f"topic-{rng.randrange(50_000):05d}", Pat.LITERAL, who, "*", Op.ALL,
                                  Perm.DENY))
        else:
            out.setdefault(AclBinding(Res.CLUSTER, "kafka-cluster", Pat.LITERAL, who, "*",
                                  rng.choice([Op.DESCRIBE, Op.CLUSTER_ACTION, Op.ALTER_CONFIGS]), Perm.ALLOW))
    return list(out)[:count]


def image_with(bindings: list[AclBinding]) -> ControllerState:
    state = ControllerState("bench")
    offset = 0
    for name_index in range(TOPICS):
        name = TOPIC if name_index == 17 else f"orders-eu-{name_index:05d}" if name_index % 2 else f"t-{name_index:05d}"
        state.replay(record(mr.TOPIC_RECORD, {"name": name, "topic_id": uuid.UUID(int=name_index + 1)}, version=0),
                     offset)
        offset += 1
    for binding in bindings:
        state.replay(record(mr.ACCESS_CONTROL_ENTRY_RECORD, binding.record_data(uuid.UUID(int=10**6 + offset)),
                            version=0), offset)
        offset += 1
    return state


class _Connection:
    listener_name = "PLAINTEXT"


class Ctx:
    def __init__(self, node) -> None:
        self.services = node
        self.principal = PRINCIPAL
        self.client_host = HOST
        self.api_version = 12
        self.connection = _Connection()


class Node:
    cluster_id = "bench"
    is_broker = False

    def __init__(self, state, authorizer) -> None:
        self.image = state
        self.authorizer = authorizer

    def client_endpoints(self, listener_name=None):
        return []

    def active_controller_id(self) -> int:
        return 1


def per_call_us(function, repeat: int) -> float:
    """The best of 7 rounds of the mean time per call, in microseconds (the machine is shared:
    the minimum is the least disturbed round)."""
    rounds = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(repeat):
            function()
        rounds.append((time.perf_counter() - started) / repeat * 1e6)
    return min(rounds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acls", default="0,100,10000")
    parser.add_argument("--repeat", type=int, default=20000)
    args = parser.parse_args(argv)
    rng = random.Random(8)
    features_request = update_features.REQUEST.decode(2, update_features.REQUEST.encode(2, {
        "timeout_ms": 1000, "feature_updates": [{"feature": "metadata.version", "max_version_level": 19,
                                                  "upgrade_type": 1}], "validate_only": True}))
    all_topics = metadata_api.REQUEST.decode(12, metadata_api.REQUEST.encode(12, {"topics": None}))

    print(f"command: .venv/bin/python bench/bench_authorizer.py --acls {args.acls} --repeat {args.repeat}")
    # Baseline: the Metadata handler without an authorizer.
    base_state = image_with([])
    base_ctx = Ctx(Node(base_state, None))
    metadata_base_us = per_call_us(lambda: metadata.handle(base_ctx, all_topics), max(args.repeat // 1000, 5))
    none_check_us = per_call_us(lambda: base_ctx.services.authorizer is None, args.repeat)

    rows = []
    baseline = None
    for count in [int(part) for part in args.acls.split(",")]:
        bindings = acl_mix(count, rng)
        state = image_with(bindings)
        authorizer = StandardAuthorizer(AuthorizerConfig(frozenset(), allow_everyone_if_no_acl_found=(count == 0)),
                                        lambda: state)
        ctx = Ctx(Node(state, authorizer))
        started = time.perf_counter()
        authorizer.index()
        build_ms = (time.perf_counter() - started) * 1e3
        # The controller's served entry, as the dispatcher passes it.
        update_features_api = served_table(NodeRole.CONTROLLER)[57]
        assert authorizer.check_request(ctx, update_features_api, features_request) is None, \
            "the principal must be allowed"
        assert authorizer.allowed(PRINCIPAL, HOST, Op.READ, Res.TOPIC, TOPIC)
        check_us = per_call_us(lambda: authorizer.check_request(ctx, update_features_api, features_request),
                               args.repeat)
        topic_us = per_call_us(lambda: authorizer.allowed(PRINCIPAL, HOST, Op.READ, Res.TOPIC, TOPIC), args.repeat)
        listed = metadata.handle(ctx, all_topics)["topics"]
        metadata_us = per_call_us(lambda: metadata.handle(ctx, all_topics), max(args.repeat // 1000, 5))
        # The change check when the log moved (a non-ACL record) but the ACL set did not.
        offsets = iter(range(state.last_applied_offset + 1, state.last_applied_offset + 1 + 10**7))

        no_op = record(mr.NO_OP_RECORD, {}, version=0)

        def replay_only():
            state.replay(no_op, next(offsets))

        def moved():
            state.replay(no_op, next(offsets))
            authorizer.index()
        rebuilds = authorizer.rebuilds
        rounds = max(args.repeat // 100, 20)
        moved_us = per_call_us(moved, rounds) - per_call_us(replay_only, rounds)
        assert authorizer.rebuilds == rebuilds, "an unchanged ACL set must not rebuild the index"
        if baseline is None:
            baseline = (check_us, topic_us)
        rows.append((count, len(state.acls()), check_us, check_us / baseline[0], topic_us, topic_us / baseline[1],
                     len(listed), metadata_us, metadata_us / metadata_base_us, build_ms, moved_us))

    print()
    print(f"no authorizer: the dispatcher's `authorizer is None` check {none_check_us:.3f} µs; "
          f"Metadata (all {TOPICS} topics, handler only) {metadata_base_us:.0f} µs")
    print()
    print("| ACLs | check_request UpdateFeatures µs | × 0 ACLs | allowed() topic READ µs | × 0 ACLs "
          "| Metadata all topics: listed | µs | × no authorizer | index build ms | change check µs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for count, real, check_us, check_ratio, topic_us, topic_ratio, listed, md_us, md_ratio, build_ms, moved_us in rows:
        print(f"| {real:,} | {check_us:.2f} | {check_ratio:.2f} | {topic_us:.2f} | {topic_ratio:.2f} | {listed} "
              f"| {md_us:.0f} | {md_ratio:.2f} | {build_ms:.1f} | {moved_us:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
