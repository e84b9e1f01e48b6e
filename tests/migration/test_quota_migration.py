"""Client quotas and SCRAM credentials in the migration: the copy turns ZooKeeper's
users/clients/ips config znodes into ClientQuotaRecords (and UserScramCredentialRecords),
and the write-back turns quota changes committed in KRaft into exactly the znode writes
and change notifications that make ZooKeeper equal the image again, once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import metadata_records as mr
from protocol.records import record
from server.controller import commands as cmd
from server.controller import quotas
from server.controller.state import ControllerState
from server.migration import copy as mcopy
from server.migration.driver import ZkMirror
from server.migration.state import ZkMigrationState
from server.migration.zk_sync import Scope, desired_client_quotas, image_holds_scram, plan_writes, touched_scope
from server.security.model import ScramMechanism
from server.zk import paths as zp

CLUSTER = "q1Sh-9_ISia_zwGINzRvyQ"
MV = 19
MV_WITHOUT_SCRAM = 10
NOTIFY = ("create", "/config/changes/config_change_")


def scram_text(iterations: int) -> str:
    return zp.ScramCredentialText(b"salt", b"stored", b"server", iterations).encode()


def image_with(quota_configs, parents=frozenset()) -> zp.ZkClusterImage:
    return zp.ZkClusterImage(
        cluster_id=CLUSTER, brokers={}, topics={}, topic_configs={}, broker_configs={}, features=None,
        controller=None, controller_epoch=None, migration=None, migration_version=None,
        quota_configs=quota_configs, user_client_parents=frozenset(parents))


ZK_QUOTAS = {
    "users/alice": zp.ConfigZnode({"producer_byte_rate": "1024", "SCRAM-SHA-256": scram_text(4096)}),
    "users/bob": zp.ConfigZnode({"SCRAM-SHA-512": scram_text(8192)}),
    "users/<default>": zp.ConfigZnode({"consumer_byte_rate": "4096.0"}),
    "users/CN%3Dcarol": zp.ConfigZnode({}),
    "users/CN%3Dcarol/clients/c1": zp.ConfigZnode({"request_percentage": "12.5"}),
    "clients/<default>": zp.ConfigZnode({"producer_byte_rate": "100"}),
    "ips/10.0.0.1": zp.ConfigZnode({"connection_creation_rate": "5"}),
}


def migrated_state(image: zp.ZkClusterImage, mv: int = MV) -> ControllerState:
    state = ControllerState(CLUSTER)
    offset = 0
    records = list(cmd.bootstrap_records(mv)) + [mcopy.migration_state_record(ZkMigrationState.PRE_MIGRATION),
                                                 mcopy.begin_record()]
    plan = mcopy.plan_copy(image, known_features=set(), metadata_version=mv)
    for chunk in mcopy.copy_chunks(plan, chunk_records=3):
        records += chunk
    records += [mcopy.migration_state_record(ZkMigrationState.MIGRATION), mcopy.end_record()]
    for item in records:
        state.replay(item, offset)
        offset += 1
    return state


def write_back(state: ControllerState, mirror: ZkMirror, scope: Scope):
    """The writes for `scope` against `mirror`, as the driver's round plans them, then
    the mirror as it is after they succeeded."""
    desired = desired_client_quotas(state, None if scope.everything else scope.quota_entities)
    keep = not image_holds_scram(state)
    writes = plan_writes(scope, desired_topics={}, desired_broker_configs={}, desired_features=None,
                         actual_topics={}, actual_topic_configs={}, actual_broker_configs={}, actual_features=None,
                         desired_quotas=desired, actual_quotas=mirror.quota_configs,
                         actual_user_client_parents=frozenset(mirror.user_client_parents), keep_zk_scram=keep)
    mirror.apply_quotas(scope, desired, keep)
    return writes


def alter(state: ControllerState, *entries):
    """AlterClientQuotas through the controller's command; replays its records and
    returns them."""
    request = {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                            "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()]}
                           for entity, ops in entries], "validate_only": False}
    result = quotas.alter_client_quotas(state, request)
    assert all(e["error_code"] == 0 for e in result.response["entries"]), result.response
    for item in result.records:
        state.replay(item, state.last_applied_offset + 1)
    return result.records


# -- the copy -------------------------------------------------------------------------

def test_the_copy_holds_every_quota_entity_and_credential():
    state = migrated_state(image_with(ZK_QUOTAS, {"CN%3Dcarol"}))
    assert dict(state.client_quotas()) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", None),): {"consumer_byte_rate": 4096.0},
        (("client-id", "c1"), ("user", "CN=carol")): {"request_percentage": 12.5},
        (("client-id", None),): {"producer_byte_rate": 100.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }
    assert sorted(state.scram_credentials()) == [("alice", ScramMechanism.SCRAM_SHA_256),
                                                 ("bob", ScramMechanism.SCRAM_SHA_512)]
    alice = state.scram_credential("alice", ScramMechanism.SCRAM_SHA_256)
    assert (alice.salt, alice.stored_key, alice.server_key, alice.iterations) == (b"salt", b"stored", b"server", 4096)
    # DescribeClientQuotas on the KRaft side sees the default user (a null name).
    described = quotas.describe_client_quotas(state, {"components": [
        {"entity_type": "user", "match_type": quotas.MATCH_TYPE_DEFAULT, "match": None}], "strict": True})
    assert described["entries"] == [{"entity": [{"entity_type": "user", "entity_name": None}],
                                     "values": [{"key": "consumer_byte_rate", "value": 4096.0}]}]


def test_the_copy_records_use_kafkas_entity_types_and_null_defaults():
    defaults = {"users/<default>/clients/<default>": zp.ConfigZnode({"producer_byte_rate": "9"})}
    plan = mcopy.plan_copy(image_with(defaults, {"<default>"}), set(), MV)
    [quota] = [r for r in plan.records if r.name == "ClientQuotaRecord"]
    assert quota.data["entity"] == [{"entity_type": "client-id", "entity_name": None},
                                    {"entity_type": "user", "entity_name": None}]
    assert (quota.data["key"], quota.data["value"], quota.data["remove"]) == ("producer_byte_rate", 9.0, False)


def test_below_3_5_the_credentials_stay_in_zookeeper_only():
    image = image_with(ZK_QUOTAS, {"CN%3Dcarol"})
    state = migrated_state(image, MV_WITHOUT_SCRAM)
    assert not state.scram_credentials() and len(state.client_quotas()) == 5
    # The write-back keeps them: a full reconciliation writes nothing.
    assert write_back(state, ZkMirror.of(image), Scope.all()) == []
    # And a quota change for alice keeps her credential in her znode.
    alter(state, ((("user", "alice"),), {"producer_byte_rate": 2048.0}))
    mirror = ZkMirror.of(image)
    [write, notify] = write_back(state, mirror, Scope(quota_entities=frozenset({"users/alice"})))
    assert zp.ConfigZnode.decode(write.data).config == {"producer_byte_rate": "2048",
                                                        "SCRAM-SHA-256": scram_text(4096)}
    assert (notify.kind, notify.path) == NOTIFY


# -- the write-back -------------------------------------------------------------------

def test_a_copied_cluster_needs_no_quota_write_back():
    image = image_with(ZK_QUOTAS, {"CN%3Dcarol"})
    state = migrated_state(image)
    assert write_back(state, ZkMirror.of(image), Scope.all()) == []


def test_quota_changes_write_their_znodes_and_notifications_once():
    image = image_with(ZK_QUOTAS, {"CN%3Dcarol"})
    state = migrated_state(image)
    mirror = ZkMirror.of(image)
    records = alter(
        state,
        ((("user", "alice"),), {"producer_byte_rate": 2048.0}),  # changed
        ((("client-id", "c1"), ("user", "dave")), {"consumer_byte_rate": 10.0}),  # new, under a new user
        ((("ip", "10.0.0.1"),), {"connection_creation_rate": None}),  # its last quota removed
        ((("client-id", None),), {"producer_byte_rate": 100.0}),  # unchanged: no record at all
    )
    scope = touched_scope([record(mr.CLIENT_QUOTA_RECORD, r.data, 0) for r in records], {})
    assert scope.quota_entities == {"users/alice", "users/dave/clients/c1", "ips/10.0.0.1"}
    writes = write_back(state, mirror, scope)
    assert [(w.kind, w.path) for w in writes] == [
        ("set", "/config/ips/10.0.0.1"), NOTIFY,
        ("set", "/config/users/alice"), NOTIFY,
        ("create", "/config/users/dave"), ("create", "/config/users/dave/clients"),
        ("create", "/config/users/dave/clients/c1"), NOTIFY,
    ]
    data = {w.path: zp.ConfigZnode.decode(w.data).config for w in writes if w.data and "changes" not in w.path}
    assert data["/config/ips/10.0.0.1"] == {}
    assert data["/config/users/alice"] == {"producer_byte_rate": "2048", "SCRAM-SHA-256": scram_text(4096)}
    assert data["/config/users/dave/clients/c1"] == {"consumer_byte_rate": "10"}
    assert data["/config/users/dave"] == {}
    notifications = [w.data for w in writes if w.path == NOTIFY[1]]
    assert notifications == [b'{"version":2,"entity_path":"ips/10.0.0.1"}',
                             b'{"version":2,"entity_path":"users/alice"}',
                             b'{"version":2,"entity_path":"users/dave/clients/c1"}']
    # The same batch again (a retried round, a new leader's redo) writes nothing, and
    # neither does a full reconciliation against what ZooKeeper now holds.
    assert write_back(state, mirror, scope) == []
    assert write_back(state, mirror, Scope.all()) == []
    # A second client of the same new user needs no parents.
    alter(state, ((("client-id", "c2"), ("user", "dave")), {"producer_byte_rate": 5.0}))
    writes = write_back(state, mirror, Scope(quota_entities=frozenset({"users/dave/clients/c2"})))
    assert [(w.kind, w.path) for w in writes] == [("create", "/config/users/dave/clients/c2"), NOTIFY]


def test_a_scram_change_rewrites_the_users_znode_and_keeps_its_quotas():
    image = image_with(ZK_QUOTAS, {"CN%3Dcarol"})
    state = migrated_state(image)
    mirror = ZkMirror.of(image)
    changes = [
        record(mr.USER_SCRAM_CREDENTIAL_RECORD, {"name": "alice", "mechanism": 2, "salt": b"s2", "stored_key": b"k2",
                                                 "server_key": b"v2", "iterations": 10000}, 0),
        record(mr.REMOVE_USER_SCRAM_CREDENTIAL_RECORD, {"name": "bob", "mechanism": 2}, 0),
    ]
    for item in changes:
        state.replay(item, state.last_applied_offset + 1)
    scope = touched_scope(changes, {})
    assert scope.quota_entities == {"users/alice", "users/bob"}
    writes = write_back(state, mirror, scope)
    assert [(w.kind, w.path) for w in writes] == [("set", "/config/users/alice"), NOTIFY,
                                                  ("set", "/config/users/bob"), NOTIFY]
    alice = zp.ConfigZnode.decode(writes[0].data).config
    assert alice["producer_byte_rate"] == "1024" and alice["SCRAM-SHA-256"] == scram_text(4096)
    assert zp.ScramCredentialText.parse(alice["SCRAM-SHA-512"]).iterations == 10000
    assert zp.ConfigZnode.decode(writes[2].data).config == {}


def test_a_znode_with_the_same_values_spelled_otherwise_is_left_alone():
    image = image_with({"users/alice": zp.ConfigZnode({"producer_byte_rate": "1024.0",
                                                       "request_percentage": "25"})})
    state = migrated_state(image)
    assert write_back(state, ZkMirror.of(image), Scope.all()) == []


# -- any quota image survives the round trip ----------------------------------------

entity_names = st.one_of(st.none(), st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                                            min_size=1, max_size=6))
quota_maps = st.dictionaries(st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"]),
                             st.one_of(st.integers(1, 10**12).map(float),
                                       st.floats(0.001, 1e9, allow_nan=False, allow_infinity=False)),
                             min_size=1, max_size=3)


@st.composite
def quota_images(draw):
    configs: dict[str, zp.ConfigZnode] = {}
    parents: set[str] = set()
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "client-id", "both", "ip"]))
        if kind == "both":
            entity = (("client-id", draw(entity_names)), ("user", draw(entity_names)))
        elif kind == "ip":
            entity = (("ip", draw(st.one_of(st.none(), st.ip_addresses().map(str)))),)
        else:
            entity = ((kind, draw(entity_names)),)
        values = draw(quota_maps) if kind != "ip" else {"connection_creation_rate": float(draw(st.integers(1, 99)))}
        path = zp.quota_entity_path(entity)
        configs[path] = zp.ConfigZnode({key: zp.quota_value_text(value) for key, value in values.items()})
        if kind == "both":
            parts = path.split("/")
            configs.setdefault(f"users/{parts[1]}", zp.ConfigZnode({}))
            parents.add(parts[1])
    return image_with(configs, parents)


@settings(max_examples=100, deadline=None)
@given(quota_images())
def test_any_quota_image_is_copied_whole_and_needs_no_write_back(image):
    state = migrated_state(image)
    assert dict(state.client_quotas()) == image.client_quotas()
    assert write_back(state, ZkMirror.of(image), Scope.all()) == []
