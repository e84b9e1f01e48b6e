"""CreateAcls / DeleteAcls / DescribeAcls as pure commands over a replayed image,
their validation (Kafka's rules), and ACLs through replay and snapshots."""

from __future__ import annotations

import pytest

from protocol.apis import create_acls as create_api
from protocol.apis import delete_acls as delete_api
from protocol.apis import describe_acls as describe_api
from protocol.errors import ErrorCode
from protocol.records import decode_metadata_record, encode_metadata_record
from server.authorization import AclOperation as Op
from server.controller import acl_commands
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import ControllerState
from server.security.acls import AclFilter, acl_id_for, filter_matches
from server.security.model import AclPermissionType as Perm
from server.security.model import PatternType as Pat
from server.security.model import ResourceType as Res

from controller.helpers import Cluster

VERSION = 3


def creation(rt=Res.TOPIC, name="orders", pat=Pat.LITERAL, principal="User:alice", host="*", op=Op.READ,
             perm=Perm.ALLOW) -> dict:
    return {"resource_type": int(rt), "resource_name": name, "resource_pattern_type": int(pat),
            "principal": principal, "host": host, "operation": int(op), "permission_type": int(perm)}


def decoded(message, body):
    """Through the wire format, as handlers see requests."""
    return message.decode(VERSION, message.encode(VERSION, body))


def create(cluster: Cluster, *creations):
    request = decoded(create_api.REQUEST, {"creations": list(creations)})
    return cluster.run(acl_commands.create_acls(cluster.state, request, cluster.next_offset))


def acl_filter(rt=Res.ANY, name=None, pat=Pat.ANY, principal=None, host=None, op=Op.ANY, perm=Perm.ANY) -> dict:
    return {"resource_type_filter": int(rt), "resource_name_filter": name, "pattern_type_filter": int(pat),
            "principal_filter": principal, "host_filter": host, "operation": int(op), "permission_type": int(perm)}


def delete(cluster: Cluster, *filters):
    request = decoded(delete_api.REQUEST, {"filters": list(filters)})
    return cluster.run(acl_commands.delete_acls(cluster.state, request, cluster.next_offset))


def describe(cluster: Cluster, **fields):
    response = acl_commands.describe_acls(cluster.state, decoded(describe_api.REQUEST, acl_filter(**fields)))
    describe_api.RESPONSE.encode(VERSION, response)  # encodable as it stands
    return response


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.bootstrapped(19)


def test_create_writes_one_record_per_new_binding_with_offset_derived_ids(cluster):
    first_offset = cluster.next_offset
    result = create(cluster, creation(), creation(name="pay-", pat=Pat.PREFIXED, op=Op.WRITE))
    assert [r["error_code"] for r in result.response["results"]] == [0, 0]
    assert len(result.records) == 2 and result.atomic
    assert set(cluster.state.acls()) == {acl_id_for(cluster.state.cluster_id, first_offset),
                                         acl_id_for(cluster.state.cluster_id, first_offset + 1)}
    create_api.RESPONSE.encode(VERSION, result.response)


def test_create_is_deterministic_given_its_inputs(cluster):
    request = decoded(create_api.REQUEST, {"creations": [creation(), creation(op=Op.WRITE)]})
    one = acl_commands.create_acls(cluster.state, request, 40)
    two = acl_commands.create_acls(cluster.state, request, 40)
    assert [r.data for r in one.records] == [r.data for r in two.records]


def test_an_identical_binding_is_not_duplicated(cluster):
    create(cluster, creation())
    again = create(cluster, creation(), creation())
    assert [r["error_code"] for r in again.response["results"]] == [0, 0]
    assert again.records == []
    assert len(cluster.state.acls()) == 1
    # Same request twice in one go: one record.
    both = create(cluster, creation(op=Op.WRITE), creation(op=Op.WRITE))
    assert len(both.records) == 1
    # Different only in permission: a new ACL.
    assert len(create(cluster, creation(perm=Perm.DENY)).records) == 1


INVALID = [
    ("resource type ANY", creation(rt=Res.ANY), "Invalid resourceType"),
    ("resource type UNKNOWN", creation(rt=Res.UNKNOWN), "Invalid resourceType"),
    ("resource type out of range", creation(rt=99), "Invalid resourceType"),
    ("pattern MATCH", creation(pat=Pat.MATCH), "Invalid patternType"),
    ("pattern ANY", creation(pat=Pat.ANY), "Invalid patternType"),
    ("operation ANY", creation(op=Op.ANY), "Invalid operation"),
    ("operation UNKNOWN", creation(op=Op.UNKNOWN), "Invalid operation"),
    ("permission ANY", creation(perm=Perm.ANY), "Invalid permissionType"),
    ("empty host", creation(host=""), "Missing host"),
    ("empty name", creation(name=""), "Resource name should not be empty"),
    ("cluster name", creation(rt=Res.CLUSTER, name="other"), "The only valid name for the CLUSTER resource"),
    ("principal without type", creation(principal="alice"), "Invalid principal"),
]


@pytest.mark.parametrize("body, message", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_bindings_are_refused_alone(cluster, body, message):
    result = create(cluster, body, creation(name="fine"))
    (bad, good) = result.response["results"]
    assert bad["error_code"] == ErrorCode.INVALID_REQUEST and message in bad["error_message"]
    assert good["error_code"] == 0
    assert len(result.records) == 1  # the valid one is still created
    assert [a.resource_name for a in cluster.state.acls().values()] == ["fine"]


def test_cluster_binding_named_kafka_cluster_is_valid(cluster):
    result = create(cluster, creation(rt=Res.CLUSTER, name="kafka-cluster", op=Op.ALTER))
    assert result.response["results"][0]["error_code"] == 0


def populate(cluster):
    create(cluster,
           creation(name="orders"),
           creation(name="orders", principal="User:bob", op=Op.WRITE),
           creation(name="*", op=Op.DESCRIBE),
           creation(name="ord", pat=Pat.PREFIXED, perm=Perm.DENY, host="10.0.0.9"),
           creation(name="other"),
           creation(rt=Res.GROUP, name="orders"),
           creation(rt=Res.CLUSTER, name="kafka-cluster", op=Op.ALTER))


def names(response):
    return sorted((r["resource_type"], r["resource_name"], r["pattern_type"], len(r["acls"]))
                  for r in response["resources"])


def test_describe_filters(cluster):
    populate(cluster)
    assert len(names(describe(cluster))) == 6
    assert names(describe(cluster, rt=Res.TOPIC, name="orders", pat=Pat.LITERAL)) == [(2, "orders", 3, 2)]
    # MATCH: the literal name, the literal wildcard and the prefixes of the name.
    assert names(describe(cluster, rt=Res.TOPIC, name="orders", pat=Pat.MATCH)) == [
        (2, "*", 3, 1), (2, "ord", 4, 1), (2, "orders", 3, 2)]
    assert names(describe(cluster, name="orders", pat=Pat.ANY)) == [(2, "orders", 3, 2), (3, "orders", 3, 1)]
    assert names(describe(cluster, principal="User:bob")) == [(2, "orders", 3, 1)]
    assert names(describe(cluster, host="10.0.0.9")) == [(2, "ord", 4, 1)]
    assert names(describe(cluster, op=Op.ALTER)) == [(4, "kafka-cluster", 3, 1)]
    assert names(describe(cluster, perm=Perm.DENY)) == [(2, "ord", 4, 1)]
    assert names(describe(cluster, pat=Pat.PREFIXED)) == [(2, "ord", 4, 1)]


def test_describe_refuses_unknown_filters(cluster):
    response = describe(cluster, pat=Pat.UNKNOWN)
    assert response["error_code"] == ErrorCode.INVALID_REQUEST and response["resources"] == []


def test_delete_by_filters(cluster):
    populate(cluster)
    before = len(cluster.state.acls())
    result = delete(cluster,
                    acl_filter(rt=Res.TOPIC, name="orders", pat=Pat.MATCH, principal="User:alice"),
                    acl_filter(rt=Res.TOPIC, name="orders", pat=Pat.LITERAL),  # alice's already gone
                    acl_filter(op=Op.UNKNOWN),
                    acl_filter(rt=Res.USER))
    delete_api.RESPONSE.encode(VERSION, result.response)
    by_alice, literal, unknown, none = result.response["filter_results"]
    assert sorted((m["resource_name"], m["pattern_type"]) for m in by_alice["matching_acls"]) == [
        ("*", 3), ("ord", 4), ("orders", 3)]
    assert [(m["principal"], m["operation"]) for m in literal["matching_acls"]] == [("User:bob", Op.WRITE)]
    assert unknown["error_code"] == ErrorCode.INVALID_REQUEST and unknown["matching_acls"] == []
    assert none["error_code"] == 0 and none["matching_acls"] == []
    assert len(result.records) == 4 and result.atomic
    assert len(cluster.state.acls()) == before - 4
    assert sorted(a.resource_name for a in cluster.state.acls().values()) == ["kafka-cluster", "orders", "other"]


def test_delete_everything_then_nothing(cluster):
    populate(cluster)
    assert len(delete(cluster, acl_filter()).records) == 7
    assert cluster.state.acls() == {}
    assert delete(cluster, acl_filter()).records == []


def test_filter_matching_null_fields_match_anything():
    entry_filter = AclFilter(Res.ANY, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    from server.security.acls import AclBinding
    binding = AclBinding(Res.TOPIC, "x", Pat.PREFIXED, "User:a", "h", Op.READ, Perm.DENY)
    assert filter_matches(entry_filter, binding)
    assert not filter_matches(AclFilter(Res.TOPIC, "x", Pat.LITERAL, None, None, Op.ANY, Perm.ANY), binding)
    assert filter_matches(AclFilter(Res.TOPIC, "xyz", Pat.MATCH, None, None, Op.ANY, Perm.ANY), binding)
    assert not filter_matches(AclFilter(Res.TOPIC, "y", Pat.MATCH, None, None, Op.ANY, Perm.ANY), binding)


def test_replay_from_scratch_and_snapshot_round_trip(cluster):
    populate(cluster)
    delete(cluster, acl_filter(principal="User:bob"))
    create(cluster, creation(name="late", op=Op.ALL))
    replayed = cluster.replayed_from_scratch()
    assert replayed == cluster.state
    assert dict(replayed.acls()) == dict(cluster.state.acls())
    entries = encode_snapshot_records(cluster.state)
    loaded = load_snapshot(entries, cluster.next_offset, cluster.state.cluster_id)
    assert loaded == cluster.state
    assert len(loaded.acls()) == 7
    # Records survive their wire encoding unchanged.
    for item in create(cluster, creation(name="wire")).records:
        assert decode_metadata_record(encode_metadata_record(item)).data["resource_name"] == "wire"


def test_aborted_transaction_drops_acls_created_inside_it():
    from protocol import metadata_records as mr
    from protocol.records import record
    state = ControllerState("c")
    state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}, version=0), 0)
    request = decoded(create_api.REQUEST, {"creations": [creation()]})
    for index, item in enumerate(acl_commands.create_acls(state, request, 1).records):
        state.replay(item, 1 + index)
    assert len(state.acls()) == 1
    state.replay(record(mr.ABORT_TRANSACTION_RECORD, {"reason": "x"}, version=0), 2)
    assert len(state.acls()) == 0


def test_a_new_id_never_clashes_with_an_existing_one(cluster):
    create(cluster, creation())
    (taken,) = cluster.state.acls()
    # A command told an offset whose id is taken (not possible with a correct loop) still
    # writes a fresh, deterministic id rather than one replay would refuse.
    offset = next(o for o in range(cluster.next_offset) if acl_id_for(cluster.state.cluster_id, o) == taken)
    request = decoded(create_api.REQUEST, {"creations": [creation(op=Op.WRITE)]})
    result = acl_commands.create_acls(cluster.state, request, offset)
    (new_id,) = [r.data["id"] for r in result.records]
    assert new_id != taken
    assert new_id == acl_commands.create_acls(cluster.state, request, offset).records[0].data["id"]
    cluster.append(result.records)
    assert len(cluster.state.acls()) == 2
