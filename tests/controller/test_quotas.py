"""Client quotas in the controller core: ClientQuotaRecord replay, snapshots, and
AlterClientQuotas / DescribeClientQuotas with Kafka's validation, matching and messages."""

from __future__ import annotations

import math

import pytest

from protocol import metadata_records as mr
from protocol.apis import alter_client_quotas, describe_client_quotas
from protocol.errors import ErrorCode
from protocol.records import decode_metadata_record, encode_metadata_record, record
from server.controller import quotas
from server.controller.snapshot import client_quota_records, encode_snapshot_records, load_snapshot
from server.controller.state import ControllerState

from .helpers import CLUSTER_ID, Cluster, decoded

INVALID = ErrorCode.INVALID_REQUEST


def entity(**names):
    """An entity from keyword names: client_id= stands for "client-id"; None is the default."""
    return [{"entity_type": key.replace("_", "-"), "entity_name": name} for key, name in names.items()]


def op(key, value=0.0, remove=False):
    return {"key": key, "value": value, "remove": remove}


def alter_request(*entries, validate_only=False, version=1):
    return decoded(alter_client_quotas.REQUEST, version,
                   entries=[{"entity": ent, "ops": ops} for ent, ops in entries], validate_only=validate_only)


def describe_request(*components, strict=False, version=1):
    return decoded(describe_client_quotas.REQUEST, version,
                   components=[{"entity_type": t, "match_type": m, "match": s} for t, m, s in components],
                   strict=strict)


def alter(cluster: Cluster, *entries, validate_only=False):
    result = quotas.alter_client_quotas(cluster.state, alter_request(*entries, validate_only=validate_only))
    assert result.atomic
    cluster.run(result)
    return result


def outcomes(result) -> list[tuple[dict, int, str | None]]:
    return [({e["entity_type"]: e["entity_name"] for e in entry["entity"]}, entry["error_code"],
             entry["error_message"]) for entry in result.response["entries"]]


def described(state, *components, strict=False) -> dict:
    response = quotas.describe_client_quotas(state, describe_request(*components, strict=strict))
    assert response["error_code"] == 0, response
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]):
            {v["key"]: v["value"] for v in entry["values"]} for entry in response["entries"]}


# -- replay ---------------------------------------------------------------------------

def quota_record(pairs, key, value=0.0, remove=False):
    return record(mr.CLIENT_QUOTA_RECORD, {
        "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs],
        "key": key, "value": value, "remove": remove}, version=0)


def test_replay_sets_overwrites_and_removes_keys_and_drops_empty_entities():
    state = ControllerState(CLUSTER_ID)
    records = [
        quota_record([("user", "alice"), ("client-id", "app")], "producer_byte_rate", 1024.0),
        # The same entity with its pairs in the other order is the same entity.
        quota_record([("client-id", "app"), ("user", "alice")], "consumer_byte_rate", 2048.0),
        quota_record([("user", None)], "request_percentage", 50.5),
        quota_record([("user", "alice"), ("client-id", "app")], "producer_byte_rate", 4096.0),
        quota_record([("user", None)], "request_percentage", remove=True),
        quota_record([("ip", "10.0.0.1")], "connection_creation_rate", remove=True),  # absent: nothing
    ]
    for offset, item in enumerate(records):
        state.replay(decode_metadata_record(encode_metadata_record(item)), offset)
    assert {k: dict(v) for k, v in state.client_quotas().items()} == {
        (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 4096.0, "consumer_byte_rate": 2048.0}}
    assert state.last_applied_offset == len(records) - 1


def test_a_copy_is_independent_of_later_quota_replays():
    state = ControllerState(CLUSTER_ID)
    state.replay(quota_record([("user", "a")], "producer_byte_rate", 1.0), 0)
    clone = state.copy()
    state.replay(quota_record([("user", "a")], "producer_byte_rate", 2.0), 1)
    assert clone.client_quotas()[(("user", "a"),)]["producer_byte_rate"] == 1.0
    assert clone != state


def test_an_aborted_transaction_takes_its_quotas_back():
    state = ControllerState(CLUSTER_ID)
    state.replay(record(mr.BEGIN_TRANSACTION_RECORD, {"name": "t"}, version=0), 0)
    state.replay(quota_record([("user", "a")], "producer_byte_rate", 1.0), 1)
    state.replay(record(mr.ABORT_TRANSACTION_RECORD, {"reason": "r"}, version=0), 2)
    assert dict(state.client_quotas()) == {}


# -- snapshots ------------------------------------------------------------------------

def test_snapshot_round_trip_carries_the_quotas():
    cluster = Cluster.bootstrapped(mv_level=22)
    alter(cluster,
          (entity(user="alice"), [op("producer_byte_rate", 1024), op("request_percentage", 12.5)]),
          (entity(user=None), [op("consumer_byte_rate", 2048)]),
          (entity(user="alice", client_id=None), [op("controller_mutation_rate", 0.5)]),
          (entity(ip=None), [op("connection_creation_rate", 10)]),
          (entity(ip="::1"), [op("connection_creation_rate", 3)]))
    alter(cluster, (entity(user=None), [op("consumer_byte_rate", remove=True)]))
    state = cluster.state
    assert len(client_quota_records(state)) == 5
    loaded = load_snapshot(encode_snapshot_records(state), state.last_applied_offset + 1, CLUSTER_ID)
    assert loaded == state
    assert {k: dict(v) for k, v in loaded.client_quotas().items()} == {
        k: dict(v) for k, v in state.client_quotas().items()}
    assert (("user", None),) not in loaded.client_quotas()
    # Every node answers Describe in the same order, whether it replayed or loaded a snapshot.
    request = describe_request()
    assert quotas.describe_client_quotas(loaded, request) == quotas.describe_client_quotas(state, request)


# -- AlterClientQuotas ----------------------------------------------------------------

def test_alter_sets_changes_and_removes_with_one_record_per_change():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = alter(cluster, (entity(user="alice"), [op("producer_byte_rate", 1024), op("consumer_byte_rate", 2048)]))
    assert outcomes(result) == [({"user": "alice"}, 0, None)]
    assert len(result.records) == 2
    # The same value again writes nothing; a changed one writes one record; removing an
    # absent key writes nothing and succeeds.
    result = alter(cluster, (entity(user="alice"), [op("producer_byte_rate", 1024), op("consumer_byte_rate", 10),
                                                    op("request_percentage", remove=True)]))
    assert outcomes(result) == [({"user": "alice"}, 0, None)] and len(result.records) == 1
    result = alter(cluster, (entity(user="alice"), [op("producer_byte_rate", remove=True),
                                                    op("consumer_byte_rate", remove=True)]))
    assert len(result.records) == 2 and dict(cluster.state.client_quotas()) == {}


def test_validate_only_answers_the_same_and_writes_nothing():
    cluster = Cluster.bootstrapped(mv_level=22)
    entries = ((entity(user="alice"), [op("producer_byte_rate", 1024)]),
               (entity(client_id="app"), [op("nonsense", 1)]))
    checked = alter(cluster, *entries, validate_only=True)
    assert checked.records == [] and dict(cluster.state.client_quotas()) == {}
    applied = quotas.alter_client_quotas(cluster.state, alter_request(*entries))
    assert checked.response == applied.response
    assert [code for _, code, _ in outcomes(checked)] == [0, INVALID]


@pytest.mark.parametrize("ent, ops, message", [
    ([], [op("producer_byte_rate", 1)], "Invalid empty client quota entity"),
    (entity(group="g"), [op("producer_byte_rate", 1)], "Unhandled client quota entity type: group"),
    (entity(user=""), [op("producer_byte_rate", 1)], "Empty user not supported"),
    (entity(client_id=""), [op("producer_byte_rate", 1)], "Empty client-id not supported"),
    (entity(user="u", ip="1.2.3.4"), [op("connection_creation_rate", 1)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    (entity(client_id="c", ip=None), [op("connection_creation_rate", 1)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    (entity(ip="not-an-address"), [op("connection_creation_rate", 1)],
     "not-an-address is not a valid IP or resolvable host."),
    (entity(user="u"), [op("connection_creation_rate", 1)], "Invalid configuration key connection_creation_rate"),
    (entity(ip="10.0.0.1"), [op("producer_byte_rate", 1)], "Invalid configuration key producer_byte_rate"),
    (entity(user="u"), [op("producer_byte_rate", 0)], "Quota producer_byte_rate must be greater than 0"),
    (entity(user="u"), [op("request_percentage", -1.5)], "Quota request_percentage must be greater than 0"),
    (entity(user="u"), [op("producer_byte_rate", 10.5)], "producer_byte_rate cannot be a fractional value."),
    (entity(ip=None), [op("connection_creation_rate", 2.25)],
     "connection_creation_rate cannot be a fractional value."),
    (entity(ip=None), [op("connection_creation_rate", 2.0**31)],
     "Proposed value for connection_creation_rate is too large for an INT."),
    (entity(client_id="c"), [op("consumer_byte_rate", 2.0**64)],
     "Proposed value for consumer_byte_rate is too large for a LONG."),
    (entity(user="u"), [op("producer_byte_rate", 1), op("producer_byte_rate", 2)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})"),
])
def test_alter_refuses_with_kafkas_messages(ent, ops, message):
    cluster = Cluster.bootstrapped(mv_level=22)
    result = alter(cluster, (ent, ops), (entity(user="ok"), [op("producer_byte_rate", 5)]))
    (_, code, text), good = outcomes(result)
    assert (code, text) == (INVALID, message)
    # Per-entry errors: the valid entry still applies, nothing of the refused one does.
    assert good == ({"user": "ok"}, 0, None)
    assert {k: dict(v) for k, v in cluster.state.client_quotas().items()} == {
        (("user", "ok"),): {"producer_byte_rate": 5.0}}


def test_values_kafka_accepts():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = alter(cluster,
                   # Within Kafka's 1e-6 tolerance an integer key takes a double as given.
                   (entity(user="u"), [op("producer_byte_rate", 100.0000001), op("request_percentage", 0.001),
                                       op("controller_mutation_rate", math.inf)]),
                   (entity(ip="2001:db8::1"), [op("connection_creation_rate", 2.0**31 - 1)]),
                   (entity(user="u", client_id="c"), [op("consumer_byte_rate", 7)]),
                   (entity(client_id=None), [op("request_percentage", 1)]))
    assert [code for _, code, _ in outcomes(result)] == [0, 0, 0, 0]
    assert cluster.state.client_quotas()[(("user", "u"),)]["producer_byte_rate"] == 100.0000001


def test_a_removal_is_not_validated():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = alter(cluster, (entity(user="u"), [op("not_a_quota", remove=True)]))
    assert outcomes(result) == [({"user": "u"}, 0, None)] and result.records == []


def test_a_repeated_entity_is_ignored_and_answered_once():
    cluster = Cluster.bootstrapped(mv_level=22)
    result = alter(cluster,
                   (entity(user="u", client_id="c"), [op("producer_byte_rate", 1)]),
                   (entity(client_id="c", user="u"), [op("producer_byte_rate", 2)]))
    assert outcomes(result) == [({"client-id": "c", "user": "u"}, INVALID,
                                 "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=u})")]
    # As in Kafka, the first entry's records were already produced.
    assert cluster.state.client_quotas()[(("client-id", "c"), ("user", "u"))]["producer_byte_rate"] == 1.0


def test_a_type_named_twice_keeps_its_last_name():
    cluster = Cluster.bootstrapped(mv_level=22)
    ent = [{"entity_type": "user", "entity_name": "first"}, {"entity_type": "user", "entity_name": "second"}]
    result = alter(cluster, (ent, [op("producer_byte_rate", 1)]))
    assert outcomes(result) == [({"user": "second"}, 0, None)]


def test_alter_error_response_names_every_entry():
    request = alter_request((entity(user="a"), [op("producer_byte_rate", 1)]), (entity(ip=None), []))
    body = quotas.alter_error_response(request, ErrorCode.NOT_CONTROLLER, "not me")
    assert [(e["error_code"], e["error_message"], e["entity"][0]["entity_type"]) for e in body["entries"]] == [
        (ErrorCode.NOT_CONTROLLER, "not me", "user"), (ErrorCode.NOT_CONTROLLER, "not me", "ip")]
    alter_client_quotas.RESPONSE.encode(1, body)


# -- DescribeClientQuotas -------------------------------------------------------------

EXACT, DEFAULT, ANY = quotas.MATCH_TYPE_EXACT, quotas.MATCH_TYPE_DEFAULT, quotas.MATCH_TYPE_ANY


@pytest.fixture
def populated() -> ControllerState:
    cluster = Cluster.bootstrapped(mv_level=22)
    alter(cluster,
          (entity(user="alice"), [op("producer_byte_rate", 1)]),
          (entity(user=None), [op("producer_byte_rate", 2)]),
          (entity(user="alice", client_id="app"), [op("producer_byte_rate", 3)]),
          (entity(user="alice", client_id=None), [op("producer_byte_rate", 4)]),
          (entity(client_id="app"), [op("consumer_byte_rate", 5)]),
          (entity(ip="10.0.0.1"), [op("connection_creation_rate", 6)]),
          (entity(ip=None), [op("connection_creation_rate", 7)]))
    return cluster.state


def keys(found: dict) -> set:
    return set(found)


ALICE = (("user", "alice"),)
USER_DEFAULT = (("user", None),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))
ALICE_DEFAULT_CLIENT = (("client-id", None), ("user", "alice"))
APP = (("client-id", "app"),)
IP_ONE = (("ip", "10.0.0.1"),)
IP_DEFAULT = (("ip", None),)


def test_describe_exact_default_and_any(populated):
    assert keys(described(populated, ("user", EXACT, "alice"))) == {ALICE, ALICE_APP, ALICE_DEFAULT_CLIENT}
    assert keys(described(populated, ("user", EXACT, "alice"), strict=True)) == {ALICE}
    assert keys(described(populated, ("user", DEFAULT, None))) == {USER_DEFAULT}
    # ANY matches every entity with that type, the default included.
    assert keys(described(populated, ("user", ANY, None))) == {ALICE, USER_DEFAULT, ALICE_APP, ALICE_DEFAULT_CLIENT}
    assert keys(described(populated, ("user", ANY, None), strict=True)) == {ALICE, USER_DEFAULT}
    assert keys(described(populated, ("client-id", DEFAULT, None))) == {ALICE_DEFAULT_CLIENT}
    assert keys(described(populated, ("user", EXACT, "alice"), ("client-id", ANY, None))) == {
        ALICE_APP, ALICE_DEFAULT_CLIENT}
    assert keys(described(populated, ("ip", ANY, None))) == {IP_ONE, IP_DEFAULT}
    assert keys(described(populated, ("ip", EXACT, "10.0.0.1"))) == {IP_ONE}
    assert keys(described(populated, ("user", EXACT, "nobody"))) == set()
    # No components: everything; strict with none: nothing has zero types.
    assert len(described(populated)) == 7
    assert described(populated, strict=True) == {}
    assert described(populated, ("client-id", EXACT, "app"), strict=True) == {APP: {"consumer_byte_rate": 5.0}}


@pytest.mark.parametrize("components, code, message", [
    ([("", EXACT, "x")], INVALID, "Invalid empty entity type."),
    ([("user", ANY, None), ("user", EXACT, "a")], INVALID, "Entity type user cannot appear more than once in the filter."),
    ([("group", EXACT, "g")], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", EXACT, None)], INVALID, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "a")], INVALID, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", ANY, "a")], INVALID, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], INVALID, "Unknown match type 7"),
    ([("ip", ANY, None), ("client-id", DEFAULT, None)], INVALID,
     "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
     "filter component."),
])
def test_describe_refuses_bad_filters_with_kafkas_messages(populated, components, code, message):
    for version in (0, 1):
        response = quotas.describe_client_quotas(populated, describe_request(*components, version=version))
        assert (response["error_code"], response["error_message"], response["entries"]) == (code, message, None)
        # The refusal encodes (null entries) at both versions.
        describe_client_quotas.RESPONSE.encode(version, response)
