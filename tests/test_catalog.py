"""The API catalog is the one place per API: the generated ApiKey enum and README table
match it, its versions match the protocol and Kafka's specs, every entry is complete,
and the dispatcher answers a handler's ApiError in the API's own error shape."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.frames import decode_response, encode_request
from protocol.registry import API_MESSAGES
from protocol.schema import Versions
from server import gating
from server.api.catalog import (
    CATALOG,
    FORWARD,
    FORWARDABLE_APIS,
    PRE_AUTHENTICATION_APIS,
    ApiSpec,
    HandlerKind,
    NodeRole,
    render_api_table,
    served_table,
)
from server.api.errors import ApiError
from server.config import ServerConfig
from server.dispatch import Dispatcher
from server.handlers import forwarded
from server.net.listener import Connection, PendingResponse
from server.observability import Metrics
from server.raft import rpc
from server.security.api_rules import ApiRule

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "tests" / "data" / "kafka-messages"
REGENERATE = ".venv/bin/python tools/gen_protocol.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_protocol", ROOT / "tools" / "gen_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- generated files -------------------------------------------------------------------

def test_api_keys_module_is_what_the_generator_writes():
    expected = _generator().render_api_keys()
    actual = (ROOT / "protocol" / "api_keys.py").read_text()
    assert actual == expected, f"protocol/api_keys.py is stale: run `{REGENERATE} --api-keys`"


def test_every_declared_api_has_its_kafka_name_in_the_enum():
    member = _generator().api_key_member
    assert member("DescribeUserScramCredentialsRequest") == "DESCRIBE_USER_SCRAM_CREDENTIALS"
    for request, _ in API_MESSAGES.values():
        assert ApiKey[member(request.name)] == request.api_key, request.name
    assert ApiKey.API_VERSIONS == 18 and ApiKey.UPDATE_FEATURES == 57
    assert ApiKey.MIGRATION_CHECK == 10000 and ApiKey.DESCRIBE_MIGRATION == 10001
    assert set(API_MESSAGES) == set(ApiKey)


def test_readme_api_table_is_the_catalog():
    generator = _generator()
    section = generator.readme_api_table_section((ROOT / "README.md").read_text())
    assert section == render_api_table(), (
        f"README.md's Supported APIs table differs from server/api/catalog.py: run `{REGENERATE} --readme`")


def test_readme_markers_replace_only_the_table():
    generator = _generator()
    readme = f"intro\n{generator.README_TABLE_BEGIN}\nold\n{generator.README_TABLE_END}\noutro\n"
    updated = generator.readme_with_api_table(readme, "| new |\n")
    assert updated == f"intro\n{generator.README_TABLE_BEGIN}\n| new |\n{generator.README_TABLE_END}\noutro\n"
    assert generator.readme_api_table_section(updated) == "| new |\n"
    with pytest.raises(ValueError):
        generator.readme_with_api_table("no markers", "| new |\n")


# -- versions ----------------------------------------------------------------------------

def test_versions_lie_within_the_protocol_declarations():
    for key, spec in CATALOG.items():
        low, high = API_MESSAGES[key][0].version_range
        assert low <= spec.min_version <= spec.max_version <= high, spec.name


def _load_spec(path: Path) -> dict:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
    return json.loads(text)


def test_versions_lie_within_the_kafka_specs():
    checked = 0
    for key, spec in CATALOG.items():
        for kind in ("Request", "Response"):
            path = SPEC_DIR / f"{spec.name}{kind}.json"
            if not path.exists():
                continue  # kraftwerk's own APIs, and specs not vendored (tests/data/kafka-messages/SOURCE.md)
            valid = Versions.parse(_load_spec(path)["validVersions"])
            for version in range(spec.min_version, spec.max_version + 1):
                assert version in valid, f"{spec.name} v{version} is not in {path.name}'s validVersions"
            checked += 1
    assert checked >= 2 * 10  # the KRaft and controller APIs whose specs are present


def test_versions_outside_the_declaration_are_refused_at_import_time():
    with pytest.raises(ValueError, match="cannot serve"):
        ApiSpec(ApiKey.UPDATE_FEATURES, 0, 99, lambda ctx, request: {})
    with pytest.raises(ValueError, match="cannot serve"):
        ApiSpec(ApiKey.DESCRIBE_ACLS, 0, 3, lambda ctx, request: {})  # DescribeAcls is declared from v1
    with pytest.raises(ValueError, match="gate"):
        ApiSpec(ApiKey.UPDATE_FEATURES, 0, 2, lambda ctx, request: {}, gate={9: 21})


# -- one entry per API -------------------------------------------------------------------

def test_every_entry_is_served_and_has_a_rule():
    for key, spec in CATALOG.items():
        assert spec.key == key
        assert isinstance(spec.rule, ApiRule), spec.name
        roles = [role for role in NodeRole if spec.handler(role) is not None]
        assert roles, f"{spec.name} is served by no node role"
        assert spec.controller is not FORWARD and spec.zk_broker is not FORWARD, spec.name
        if spec.before_authentication:
            assert spec.rule.operation is None and not spec.rule.per_item, spec.name
        if spec.kind is HandlerKind.ANSWERS_LATER:
            assert spec.controller is rpc.offer, spec.name


def test_refusable_apis_can_build_their_error_response():
    """Every API a request can be refused for as a whole (a cluster ACL, forwarding)
    has an error builder or a top-level error code in every version it serves."""
    for spec in CATALOG.values():
        if spec.rule.operation is None and not spec.forwarded_by_brokers:
            continue
        if spec.error_builder is not None:
            continue
        for version in range(spec.min_version, spec.max_version + 1):
            assert spec.has_top_level_error(version), f"{spec.name} v{version} has no way to carry an error"


def test_derived_sets_come_from_the_entries():
    assert FORWARDABLE_APIS == {55, 57, 64, 19, 20, 33, 37, 44, 30, 31, 51, 49, 10001}
    assert PRE_AUTHENTICATION_APIS == {18, 17, 36}
    broker = served_table(NodeRole.BROKER)
    controller = served_table(NodeRole.CONTROLLER)
    for key in FORWARDABLE_APIS:
        assert broker[key].handler is forwarded.handle and broker[key].is_async
        assert controller[key].forwardable and controller[key].handler is not forwarded.handle
    assert {key for key, api in controller.items() if api.forwardable} == FORWARDABLE_APIS
    assert dict(gating.GATES[62].needs) == {1: 8, 2: 17, 3: 17, 4: 17}
    assert set(gating.GATES) == {key for key, spec in CATALOG.items() if spec.gate}


def test_served_tables_per_role():
    assert set(served_table(NodeRole.ZK_BROKER)) == {18, 3, 60, 6, 10000}
    assert set(served_table(NodeRole.BROKER)) == {18, 3, 60, 32, 33, 37, 57, 55, 19, 20, 44, 10001, 29, 30, 31, 17, 36,
                                                  50, 51, 48, 49, 64}
    controller = served_table(NodeRole.CONTROLLER)
    assert set(controller) == {18, 3, 55, 57, 60, 62, 63, 64, 19, 20, 32, 33, 37, 44, 10001, 29, 30, 31, 58, 17, 36, 50, 51,
                               48, 49, 1, 52, 53, 54, 59, 67, 56, 73, 70, 80, 81, 82}
    assert controller[1].answers_later and (controller[1].min_version, controller[1].max_version) == (17, 17)
    assert controller[10001].is_async is False and served_table(NodeRole.BROKER)[10001].is_async
    assert served_table(NodeRole.ZK_BROKER)[3].handler.__module__ == "server.zkbroker.metadata"
    for api in controller.values():
        for version in range(api.min_version, api.max_version + 1):
            flexible = api.request.is_flexible(version)
            assert api.request_header_version(version) == (2 if flexible else 1)
            expected = 0 if api.api_key == ApiKey.API_VERSIONS or not flexible else 1
            assert api.response_header_version(version) == expected


def test_default_error_response_carries_the_code_and_message():
    body = CATALOG[ApiKey.UPDATE_FEATURES].error_response(None, 1, ErrorCode.REQUEST_TIMED_OUT, "late")
    assert body["error_code"] == ErrorCode.REQUEST_TIMED_OUT and body["error_message"] == "late"
    response = API_MESSAGES[ApiKey.UPDATE_FEATURES][1]
    decoded = response.decode(1, response.encode(1, body))
    assert decoded.error_code == ErrorCode.REQUEST_TIMED_OUT and decoded.error_message == "late"


# -- the dispatcher answers ApiError with the API's error response -------------------------

def _node(ranges: dict) -> SimpleNamespace:
    return SimpleNamespace(config=ServerConfig(), metrics=Metrics(), authorizer=None,
                           advertised_ranges=lambda: ranges)


def _dispatcher(table: dict) -> Dispatcher:
    ranges = {key: (api.min_version, api.max_version) for key, api in table.items()}
    return Dispatcher(_node(ranges), table)


def _frame(api_key: int, version: int, body: dict) -> bytes:
    return encode_request(api_key, version, 7, "test", body)[4:]


async def _payload(answer) -> bytes:
    if isinstance(answer, PendingResponse):
        with trio.fail_after(5):
            await answer.event.wait()
        answer = answer.payload
    assert answer is not None, "the connection would be closed"
    return answer[4:]


def _refusing(kind: HandlerKind):
    if kind is HandlerKind.SYNC:
        def handler(ctx, request):
            raise ApiError(ErrorCode.NOT_CONTROLLER, "not here")
    elif kind is HandlerKind.ASYNC:
        async def handler(ctx, request):
            await trio.lowlevel.checkpoint()
            raise ApiError(ErrorCode.NOT_CONTROLLER, "not here")
    else:
        def handler(ctx, request, answer):
            raise ApiError(ErrorCode.NOT_CONTROLLER, "not here")
    return handler


@pytest.mark.parametrize("kind", list(HandlerKind), ids=lambda kind: kind.value)
async def test_api_error_becomes_the_top_level_error_response(kind):
    api = served_table(NodeRole.CONTROLLER)[ApiKey.UPDATE_FEATURES]
    api = replace(api, handler=_refusing(kind), is_async=kind is HandlerKind.ASYNC,
                  answers_later=kind is HandlerKind.ANSWERS_LATER)
    dispatcher = _dispatcher({ApiKey.UPDATE_FEATURES: api})
    conn = Connection(1, "127.0.0.1:1", None)
    async with trio.open_nursery() as nursery:
        answer = dispatcher.dispatch(conn, _frame(57, 1, {"feature_updates": []}), nursery)
        correlation_id, body = decode_response(57, 1, await _payload(answer))
    assert correlation_id == 7
    assert body.error_code == ErrorCode.NOT_CONTROLLER and body.error_message == "not here"


async def test_api_error_becomes_per_item_errors_where_the_response_has_no_top_level_code():
    api = served_table(NodeRole.CONTROLLER)[ApiKey.CREATE_ACLS]
    api = replace(api, handler=_refusing(HandlerKind.ASYNC))
    dispatcher = _dispatcher({ApiKey.CREATE_ACLS: api})
    creation = {"resource_type": 2, "resource_name": "t", "principal": "User:a", "host": "*", "operation": 3,
                "permission_type": 3}
    async with trio.open_nursery() as nursery:
        answer = dispatcher.dispatch(Connection(1, "127.0.0.1:1", None),
                                     _frame(30, 3, {"creations": [creation, creation]}), nursery)
        _, body = decode_response(30, 3, await _payload(answer))
    assert [(r.error_code, r.error_message) for r in body.results] == [(ErrorCode.NOT_CONTROLLER, "not here")] * 2


async def test_forwarding_timeout_is_answered_in_the_forwarded_apis_shape():
    """A broker that finds no controller answers REQUEST_TIMED_OUT in every topic of a
    CreateTopics (no top-level error code), through the catalog's builder."""
    async def no_controller(api_key, version, request, ctx=None):
        return None

    api = served_table(NodeRole.BROKER)[ApiKey.CREATE_TOPICS]
    ranges = {ApiKey.CREATE_TOPICS: (api.min_version, api.max_version)}
    node = _node(ranges)
    node.forward_to_controller = no_controller
    dispatcher = Dispatcher(node, {ApiKey.CREATE_TOPICS: api})
    topics = [{"name": name, "num_partitions": 1, "replication_factor": 1} for name in ("a", "b")]
    async with trio.open_nursery() as nursery:
        answer = dispatcher.dispatch(Connection(1, "127.0.0.1:1", None),
                                     _frame(19, 7, {"topics": topics, "timeout_ms": 1000}), nursery)
        _, body = decode_response(19, 7, await _payload(answer))
    assert [(t.name, t.error_code) for t in body.topics] == [("a", ErrorCode.REQUEST_TIMED_OUT),
                                                             ("b", ErrorCode.REQUEST_TIMED_OUT)]
    assert body.topics[0].error_message == forwarded.TIMED_OUT_MESSAGE
