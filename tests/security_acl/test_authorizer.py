"""StandardAuthorizer semantics (Kafka's), table-driven, plus an indexed-vs-naive property.

The reference `naive_allowed` scans every ACL; the indexed authorizer must agree with it
on random ACL sets and random requests.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.records import record
from server.authorization import AclOperation as Op
from server.controller.state import ControllerState
from server.security.acls import AclBinding
from server.security.authorizer import AuthorizerConfig, StandardAuthorizer, authorizer_config
from server.security.model import AclPermissionType as Perm
from server.security.model import KafkaPrincipal
from server.security.model import PatternType as Pat
from server.security.model import ResourceType as Res

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"


class Image:
    """A ControllerState fed through replay, as nodes do."""

    def __init__(self) -> None:
        self.state = ControllerState("cluster")
        self.offset = 0
        self.ids: list[uuid.UUID] = []

    def add(self, binding: AclBinding) -> uuid.UUID:
        acl_id = uuid.UUID(int=self.offset + 1)
        self.state.replay(record(mr.ACCESS_CONTROL_ENTRY_RECORD, binding.record_data(acl_id), version=0), self.offset)
        self.offset += 1
        self.ids.append(acl_id)
        return acl_id

    def remove(self, acl_id: uuid.UUID) -> None:
        self.state.replay(record(mr.REMOVE_ACCESS_CONTROL_ENTRY_RECORD, {"id": acl_id}, version=0), self.offset)
        self.offset += 1


def acl(rt, name, principal="User:alice", op=Op.READ, perm=Perm.ALLOW, pat=Pat.LITERAL, host="*") -> AclBinding:
    return AclBinding(int(rt), name, int(pat), principal, host, int(op), int(perm))


def authorizer_for(*bindings, supers=(), allow_if_none=False) -> StandardAuthorizer:
    image = Image()
    for binding in bindings:
        image.add(binding)
    return StandardAuthorizer(AuthorizerConfig(frozenset(supers), allow_if_none), lambda: image.state)


CASES = [
    # (description, ACLs, principal, host, op, resource type, name, super users, allow-if-none, expected)
    ("no ACL, default deny", [], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, False),
    ("no ACL, allow.everyone.if.no.acl.found", [], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), True, True),
    ("ACLs on the resource for someone else: denied even with allow-if-none",
     [acl(Res.TOPIC, "t", "User:bob")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), True, False),
    ("ACLs on another resource only: allow-if-none applies",
     [acl(Res.TOPIC, "other")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), True, True),
    ("super user beats DENY", [acl(Res.TOPIC, "t", op=Op.ALL, perm=Perm.DENY)], ALICE, HOST, Op.READ,
     Res.TOPIC, "t", ("User:alice",), False, True),
    ("literal allow", [acl(Res.TOPIC, "t")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, True),
    ("literal allow is per name", [acl(Res.TOPIC, "t")], ALICE, HOST, Op.READ, Res.TOPIC, "t2", (), False, False),
    ("literal allow is per type", [acl(Res.GROUP, "t")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, False),
    ("deny wins over allow", [acl(Res.TOPIC, "t"), acl(Res.TOPIC, "t", perm=Perm.DENY)], ALICE, HOST, Op.READ,
     Res.TOPIC, "t", (), False, False),
    ("deny on a wildcard resource wins over a literal allow",
     [acl(Res.TOPIC, "t"), acl(Res.TOPIC, "*", perm=Perm.DENY)], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, False),
    ("deny for another principal does not apply", [acl(Res.TOPIC, "t"), acl(Res.TOPIC, "t", "User:bob", perm=Perm.DENY)],
     ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, True),
    ("wildcard principal", [acl(Res.TOPIC, "t", "User:*")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, True),
    ("wildcard principal deny", [acl(Res.TOPIC, "t"), acl(Res.TOPIC, "t", "User:*", perm=Perm.DENY)], ALICE, HOST,
     Op.READ, Res.TOPIC, "t", (), False, False),
    ("host must match", [acl(Res.TOPIC, "t", host="10.0.0.2")], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, False),
    ("exact host", [acl(Res.TOPIC, "t", host=HOST)], ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, True),
    ("deny from another host does not apply", [acl(Res.TOPIC, "t"), acl(Res.TOPIC, "t", perm=Perm.DENY, host="10.9.9.9")],
     ALICE, HOST, Op.READ, Res.TOPIC, "t", (), False, True),
    ("wildcard resource", [acl(Res.TOPIC, "*")], ALICE, HOST, Op.READ, Res.TOPIC, "anything", (), False, True),
    ("prefixed", [acl(Res.TOPIC, "orders-", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.TOPIC, "orders-eu", (),
     False, True),
    ("prefixed equal to the name", [acl(Res.TOPIC, "orders", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.TOPIC,
     "orders", (), False, True),
    ("prefixed does not match a shorter name", [acl(Res.TOPIC, "orders-", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ,
     Res.TOPIC, "orders", (), False, False),
    ("prefixed '*' is not a wildcard", [acl(Res.TOPIC, "*", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.TOPIC,
     "orders", (), False, False),
    ("literal name 'orders-' is not a prefix", [acl(Res.TOPIC, "orders-")], ALICE, HOST, Op.READ, Res.TOPIC,
     "orders-eu", (), False, False),
    ("prefixed deny beats literal allow", [acl(Res.TOPIC, "orders-eu"), acl(Res.TOPIC, "ord", pat=Pat.PREFIXED,
                                                                            perm=Perm.DENY)],
     ALICE, HOST, Op.READ, Res.TOPIC, "orders-eu", (), False, False),
    ("ALL allows every operation", [acl(Res.TOPIC, "t", op=Op.ALL)], ALICE, HOST, Op.ALTER_CONFIGS, Res.TOPIC, "t",
     (), False, True),
    ("READ implies DESCRIBE", [acl(Res.TOPIC, "t", op=Op.READ)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t", (), False,
     True),
    ("WRITE implies DESCRIBE", [acl(Res.TOPIC, "t", op=Op.WRITE)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t", (),
     False, True),
    ("DELETE implies DESCRIBE", [acl(Res.TOPIC, "t", op=Op.DELETE)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t", (),
     False, True),
    ("ALTER implies DESCRIBE", [acl(Res.CLUSTER, "kafka-cluster", op=Op.ALTER)], ALICE, HOST, Op.DESCRIBE,
     Res.CLUSTER, "kafka-cluster", (), False, True),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", [acl(Res.TOPIC, "t", op=Op.ALTER_CONFIGS)], ALICE, HOST,
     Op.DESCRIBE_CONFIGS, Res.TOPIC, "t", (), False, True),
    ("DESCRIBE does not imply READ", [acl(Res.TOPIC, "t", op=Op.DESCRIBE)], ALICE, HOST, Op.READ, Res.TOPIC, "t", (),
     False, False),
    ("READ does not imply WRITE", [acl(Res.TOPIC, "t", op=Op.READ)], ALICE, HOST, Op.WRITE, Res.TOPIC, "t", (),
     False, False),
    ("DENY READ does not deny DESCRIBE", [acl(Res.TOPIC, "t", op=Op.DESCRIBE),
                                         acl(Res.TOPIC, "t", op=Op.READ, perm=Perm.DENY)],
     ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t", (), False, True),
    ("DENY ALL denies everything", [acl(Res.TOPIC, "t", op=Op.ALL), acl(Res.TOPIC, "t", op=Op.ALL, perm=Perm.DENY)],
     ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t", (), False, False),
    ("other principal type does not match User:*", [acl(Res.TOPIC, "t", "User:*")], KafkaPrincipal("Group", "ops"),
     HOST, Op.READ, Res.TOPIC, "t", (), False, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_decision_table(case):
    _, bindings, principal, host, op, rt, name, supers, allow_if_none, expected = case
    authorizer = authorizer_for(*bindings, supers=supers, allow_if_none=allow_if_none)
    assert authorizer.allowed(principal, host, op, rt, name) is expected
    assert authorizer.authorize(principal, host, op, rt, name, "Test") is expected


def test_config_parsing():
    assert authorizer_config({}) is None
    assert authorizer_config({"authorizer.class.name": " "}) is None
    config = authorizer_config({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                "super.users": "User:admin; User:broker;;",
                                "allow.everyone.if.no.acl.found": "TRUE"})
    assert config == AuthorizerConfig(frozenset({"User:admin", "User:broker"}), True)
    assert authorizer_config({"authorizer.class.name": "x"}).allow_everyone_if_no_acl_found is False


def test_index_follows_replay_including_same_size_changes():
    image = Image()
    first = image.add(acl(Res.TOPIC, "t"))
    authorizer = StandardAuthorizer(AuthorizerConfig(), lambda: image.state)
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    rebuilds = authorizer.rebuilds
    # Nothing changed: no rebuild.
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert authorizer.rebuilds == rebuilds
    # A non-ACL record moves the offset; the ACL set is the same: no rebuild.
    image.state.replay(record(mr.NO_OP_RECORD, {}, version=0), image.offset)
    image.offset += 1
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert authorizer.rebuilds == rebuilds
    # Remove one and add another: same count, different set.
    image.remove(first)
    image.add(acl(Res.TOPIC, "u"))
    assert not authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "u")
    assert authorizer.rebuilds == rebuilds + 1


def test_index_follows_a_replaced_state():
    old, new = Image(), Image()
    old.add(acl(Res.TOPIC, "t"))
    new.add(acl(Res.TOPIC, "u"))  # same offsets, a different state object (a loaded snapshot)
    current = {"state": old.state}
    authorizer = StandardAuthorizer(AuthorizerConfig(), lambda: current["state"])
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    current["state"] = new.state
    assert not authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    assert authorizer.allowed(ALICE, HOST, Op.READ, Res.TOPIC, "u")


def test_no_state_yet_authorizes_only_super_users():
    authorizer = StandardAuthorizer(AuthorizerConfig(frozenset({"User:admin"})), lambda: None)
    assert authorizer.allowed(KafkaPrincipal("User", "admin"), HOST, Op.ALTER, Res.CLUSTER, "kafka-cluster")
    assert not authorizer.allowed(ALICE, HOST, Op.ALTER, Res.CLUSTER, "kafka-cluster")


# ---- the indexed authorizer agrees with a naive scan --------------------------------------

_IMPLIED = {Op.READ: {Op.DESCRIBE}, Op.WRITE: {Op.DESCRIBE}, Op.DELETE: {Op.DESCRIBE}, Op.ALTER: {Op.DESCRIBE},
            Op.ALTER_CONFIGS: {Op.DESCRIBE_CONFIGS}}


def naive_allowed(acls, principal, host, op, rt, name, supers, allow_if_none) -> bool:
    if str(principal) in supers:
        return True

    def on_resource(a):
        if a.resource_type != rt:
            return False
        if a.pattern_type == Pat.LITERAL:
            return a.resource_name == name or a.resource_name == "*"
        return name.startswith(a.resource_name)

    relevant = [a for a in acls if on_resource(a)]
    if not relevant:
        return allow_if_none
    who = (str(principal), "User:*") if principal.principal_type == "User" else (str(principal),)
    applies = [a for a in relevant if a.principal in who and a.host in (host, "*")]
    if any(a.permission_type == Perm.DENY and a.operation in (Op.ALL, op) for a in applies):
        return False
    return any(a.permission_type == Perm.ALLOW and (a.operation in (Op.ALL, op) or op in _IMPLIED.get(a.operation, ()))
               for a in applies)


NAMES = st.sampled_from(["", "o", "or", "orders", "orders-eu", "orders-us", "pay", "*", "kafka-cluster"])
OPS = st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY)])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:ops"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
RTYPES = st.sampled_from([Res.TOPIC, Res.GROUP, Res.CLUSTER])
BINDINGS = st.builds(
    lambda rt, name, pat, principal, host, op, perm: AclBinding(int(rt), name or "x", int(pat), principal, host,
                                                                int(op), int(perm)),
    RTYPES, NAMES, st.sampled_from([Pat.LITERAL, Pat.PREFIXED]), PRINCIPALS, HOSTS, OPS,
    st.sampled_from([Perm.ALLOW, Perm.DENY]))
QUERIES = st.tuples(st.sampled_from([ALICE, BOB, KafkaPrincipal("Group", "ops")]),
                    st.sampled_from(["10.0.0.1", "10.0.0.2"]), OPS, RTYPES, NAMES.filter(bool))


@settings(max_examples=300, deadline=None)
@given(st.lists(BINDINGS, max_size=25), st.lists(QUERIES, min_size=1, max_size=20), st.booleans(),
       st.sampled_from([(), ("User:bob",)]))
def test_indexed_authorizer_agrees_with_a_naive_scan(bindings, queries, allow_if_none, supers):
    image = Image()
    for binding in bindings:
        image.add(binding)
    authorizer = StandardAuthorizer(AuthorizerConfig(frozenset(supers), allow_if_none), lambda: image.state)
    for principal, host, op, rt, name in queries:
        expected = naive_allowed(bindings, principal, host, op, rt, name, supers, allow_if_none)
        assert authorizer.allowed(principal, host, op, rt, name) is expected, (principal, host, op, rt, name)
    # The batch form (Metadata's topic listing) decides the same way.
    principal, host, op, rt, _ = queries[0]
    names = ["o", "or", "orders", "orders-eu", "pay", "*", "zzz"]
    assert authorizer.allowed_names(principal, host, op, rt, names) == [
        name for name in names if naive_allowed(bindings, principal, host, op, rt, name, supers, allow_if_none)]
