"""The API rules in the catalog: every served API has one, and every refusal is a
valid response of its API in every version."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from protocol.registry import API_MESSAGES
from server.api.catalog import CATALOG, PRE_AUTHENTICATION_APIS, NodeRole, served_table
from server.authorization import AclOperation as Op
from server.security import api_rules
from server.security.authorizer import AuthorizerConfig, StandardAuthorizer
from server.security.model import ANONYMOUS, KafkaPrincipal


def test_every_served_api_has_a_rule():
    for role in NodeRole:
        for api_key, api in served_table(role).items():
            assert isinstance(api.rule, api_rules.ApiRule), api_key
            assert api.rule is CATALOG[api_key].rule


def test_pre_authentication_apis_need_nothing():
    assert PRE_AUTHENTICATION_APIS == {18, 17, 36}
    for api_key in (18, 17, 36):
        assert CATALOG[api_key].rule.operation is None and not CATALOG[api_key].rule.per_item


def _versions(api_key: int) -> range:
    spec = CATALOG[api_key]
    return range(spec.min_version, spec.max_version + 1)


CASES = [(key, version) for key, spec in sorted(CATALOG.items())
         if spec.rule.operation is not None for version in _versions(key)]


def sample_request(api_key: int, version: int):
    request_message = API_MESSAGES[api_key][0]
    body = {}
    if api_key == 30:
        body = {"creations": [{"resource_type": 2, "resource_name": "t", "principal": "User:a", "host": "*",
                               "operation": 3, "permission_type": 3}] * 2}
    elif api_key == 31:
        body = {"filters": [{"resource_type_filter": 1, "operation": 1, "permission_type": 1}] * 3}
    elif api_key == 51:
        body = {"deletions": [{"name": "a", "mechanism": 1}],
                "upsertions": [{"name": "b", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
                               {"name": "a", "mechanism": 2, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]}
    elif api_key == 49:
        body = {"entries": [{"entity": [{"entity_type": "user", "entity_name": "a"}],
                             "ops": [{"key": "producer_byte_rate", "value": 1.0}]},
                            {"entity": [{"entity_type": "ip", "entity_name": None}], "ops": []}]}
    return request_message.decode(version, request_message.encode(version, body))


@pytest.mark.parametrize("api_key, version", CASES)
def test_refusals_encode_and_carry_cluster_authorization_failed(api_key, version):
    request = sample_request(api_key, version)
    body = api_rules.refusal(CATALOG[api_key], version, request)
    response = API_MESSAGES[api_key][1]
    decoded = response.decode(version, response.encode(version, body))
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if api_key == 30:
        assert [r.error_code for r in decoded.results] == [denied, denied]
    elif api_key == 31:
        assert [r.error_code for r in decoded.filter_results] == [denied] * 3
    elif api_key == 51:
        assert [(r.user, r.error_code) for r in decoded.results] == [("a", denied), ("b", denied)]
    elif api_key == 49:
        assert [(e.entity[0].entity_type, e.entity[0].entity_name, e.error_code) for e in decoded.entries] == [
            ("user", "a", denied), ("ip", None, denied)]
    else:
        assert decoded.error_code == denied


class Ctx:
    def __init__(self, api_version: int, principal: KafkaPrincipal = ANONYMOUS) -> None:
        self.api_version = api_version
        self.principal = principal
        self.client_host = "127.0.0.1"


def test_check_request_lets_through_what_needs_nothing_or_is_checked_per_item():
    authorizer = StandardAuthorizer(AuthorizerConfig(), lambda: None)
    for api_key in (18, 17, 36, 3, 19, 20, 32, 44):
        assert authorizer.check_request(Ctx(0), CATALOG[api_key], {}) is None
    refused = authorizer.check_request(Ctx(2), CATALOG[57], sample_request(57, 2))
    assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    supers = StandardAuthorizer(AuthorizerConfig(frozenset({"User:ANONYMOUS"})), lambda: None)
    assert supers.check_request(Ctx(2), CATALOG[57], sample_request(57, 2)) is None


@pytest.mark.parametrize("api_key, operation", [(57, Op.ALTER), (60, Op.DESCRIBE), (55, Op.DESCRIBE),
                                                (62, Op.CLUSTER_ACTION), (63, Op.CLUSTER_ACTION),
                                                (52, Op.CLUSTER_ACTION), (1, Op.CLUSTER_ACTION),
                                                (58, Op.CLUSTER_ACTION), (30, Op.ALTER), (31, Op.ALTER),
                                                (29, Op.DESCRIBE), (51, Op.ALTER), (50, Op.DESCRIBE),
                                                (10001, Op.DESCRIBE), (10000, Op.CLUSTER_ACTION),
                                                (6, Op.CLUSTER_ACTION), (64, Op.ALTER)])
def test_cluster_operation_of_each_api(api_key, operation):
    assert CATALOG[api_key].rule.operation == operation


class Node:
    def __init__(self, is_broker: bool, authorizer) -> None:
        self.is_broker = is_broker
        self.authorizer = authorizer


def test_describe_cluster_is_refused_by_controllers_only():
    from server.security.item_checks import cluster_operations

    authorizer = StandardAuthorizer(AuthorizerConfig(), lambda: None)
    request = API_MESSAGES[60][0].decode(1, API_MESSAGES[60][0].encode(1, {}))
    for is_broker, refused in ((False, True), (True, False)):
        ctx = Ctx(1)
        ctx.services = Node(is_broker, authorizer)
        answer = authorizer.check_request(ctx, CATALOG[60], request)
        assert (answer is not None) is refused
        if refused:
            assert answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # Without DESCRIBE on the cluster, no operation is reported (Kafka's brokers).
        assert cluster_operations(ctx, True) == 0
