"""Handlers reach the node only through the Protocol they declare (server/api/context.py).

Three checks:
- every handler module, parsed with `ast`, touches the node only as
  `services: SomeProtocol = ctx.services` (or a parameter annotated with a Protocol)
  and uses only that Protocol's members: methods are called, never walked past;
  members declared as values (the config, the image, ...) may be read into;
- every node class lists the Protocols it implements and defines every member
  itself, and implements the Protocols of every handler it serves;
- the module check catches each kind of violation in sample modules.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import typing
from pathlib import Path

import pytest

from server.api import context
from server.config import ServerConfig
from server.nodes.broker import BrokerNode
from server.nodes.controller import ControllerNode
from server.nodes.serving import ServingNode
from server.nodes.zkbroker import ZkBrokerNode

ROOT = Path(__file__).resolve().parents[2]
HANDLER_FILES = sorted(
    p for p in (ROOT / "server" / "handlers").glob("*.py") if p.name != "__init__.py"
) + [ROOT / "server" / "zkbroker" / "metadata.py"]
# Envelope and the brokers' forwarding relay reach `ctx.services` without declaring a
# Protocol yet: they are being moved onto the API catalog (server/api/catalog.py).

PROTOCOLS = {
    name: value for name, value in vars(context).items()
    if isinstance(value, type) and getattr(value, "_is_protocol", False) and value is not typing.Protocol
}


def protocol_members(protocol: type) -> dict[str, str]:
    """Member name -> "value" (declared as an attribute) or "method"."""
    members: dict[str, str] = {}
    for klass in reversed(protocol.__mro__):
        if klass.__name__ not in PROTOCOLS or PROTOCOLS[klass.__name__] is not klass:
            continue
        for name in klass.__dict__.get("__annotations__", {}):
            members[name] = "value"
        for name, value in vars(klass).items():
            if not name.startswith("_") and (callable(value) or isinstance(value, property)):
                members[name] = "method"
    return members


# -- the module check ----------------------------------------------------------------------

def _protocol_names(annotation: ast.expr | None) -> list[str] | None:
    """The Protocols an annotation names (`P`, `"P"`, `P | Q`), None if it names none."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.Name) and annotation.id in PROTOCOLS:
        return [annotation.id]
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, right = _protocol_names(annotation.left), _protocol_names(annotation.right)
        if left and right:
            return left + right
    return None


def _is_ctx_services(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "services" and isinstance(node.value, ast.Name) \
        and node.value.id == "ctx"


def check_source(source: str, filename: str = "<sample>") -> tuple[set[str], list[str]]:
    """(the Protocols the module declares, its violations)."""
    tree = ast.parse(source, filename)
    declared: set[str] = set()
    violations: list[str] = []
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def where(node: ast.AST) -> str:
        return f"{filename}:{getattr(node, 'lineno', '?')}"

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "node" and isinstance(node.value, ast.Name) \
                and node.value.id == "ctx":
            violations.append(f"{where(node)}: ctx.node (use ctx.services through a Protocol)")
        if _is_ctx_services(node):
            parent = parents.get(node)
            if not (isinstance(parent, ast.AnnAssign) and parent.value is node
                    and isinstance(parent.target, ast.Name) and _protocol_names(parent.annotation)):
                violations.append(f"{where(node)}: ctx.services used without declaring its Protocol")

    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in functions:
        # The names bound to the node's services in this function, with their members.
        bound: dict[str, dict[str, str]] = {}
        for node in ast.walk(function):
            names = None
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_ctx_services(node.value):
                names, target = _protocol_names(node.annotation), node.target.id
            elif isinstance(node, ast.arg):
                names, target = _protocol_names(node.annotation), node.arg
            if names:
                declared.update(names)
                members: dict[str, str] = {}
                for name in names:
                    members.update(protocol_members(PROTOCOLS[name]))
                bound[target] = members
        for node in ast.walk(function):
            if not (isinstance(node, ast.Name) and node.id in bound):
                continue
            parent = parents.get(node)
            members = bound[node.id]
            if isinstance(parent, ast.Attribute) and parent.value is node:
                kind = members.get(parent.attr)
                if kind is None:
                    violations.append(f"{where(node)}: {node.id}.{parent.attr} is not a member of its Protocol")
                elif kind == "method":
                    grand = parents.get(parent)
                    if not (isinstance(grand, ast.Call) and grand.func is parent):
                        violations.append(f"{where(node)}: {node.id}.{parent.attr} is a method: call it, "
                                          "do not walk past it")
            elif isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is node:
                violations.append(f"{where(node)}: {node.id} aliased (the alias would escape this check)")
            elif isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) \
                    and parent.func.id in ("getattr", "setattr", "hasattr", "vars", "delattr"):
                violations.append(f"{where(node)}: {parent.func.id}() on {node.id}")
    return declared, violations


@pytest.mark.parametrize("path", HANDLER_FILES, ids=lambda p: p.name)
def test_handler_uses_only_its_declared_protocol(path):
    declared, violations = check_source(path.read_text(), str(path.relative_to(ROOT)))
    assert violations == []
    for name in declared:
        assert name in PROTOCOLS


def test_nothing_in_server_reaches_ctx_node():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "server").rglob("*.py") if "ctx.node" in p.read_text()]
    assert offenders == []


# -- the node classes -----------------------------------------------------------------------

NODE_PROTOCOLS = {
    ControllerNode: (context.ControllerServices, context.RaftEndpoint),
    BrokerNode: (context.BrokerServices,),
    ZkBrokerNode: (context.ZkBrokerServices,),
}


def _assigned_on_self(cls: type, name: str) -> bool:
    """Whether a (non-Protocol) class of `cls`'s MRO assigns `self.<name>` somewhere."""
    for klass in cls.__mro__:
        if klass is object or getattr(klass, "_is_protocol", False) or klass in (typing.Generic,):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == name and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    return True
    return False


def missing_members(cls: type, protocol: type) -> list[str]:
    missing = []
    for name, kind in protocol_members(protocol).items():
        provider = next((k for k in cls.__mro__ if name in vars(k)), None)
        if provider is not None and not getattr(provider, "_is_protocol", False):
            continue
        if provider is None and kind == "value" and _assigned_on_self(cls, name):
            continue
        missing.append(name)
    return missing


@pytest.mark.parametrize("cls", list(NODE_PROTOCOLS), ids=lambda c: c.__name__)
def test_node_lists_and_defines_its_protocols(cls):
    for protocol in NODE_PROTOCOLS[cls]:
        assert protocol in cls.__bases__
        assert missing_members(cls, protocol) == []


def test_node_check_catches_a_member_left_to_the_protocol_stub():
    class Bare(context.ControllerServices):
        """Lists the Protocol and defines nothing: every method is its bare stub."""

    class ServingOnly(ServingNode, context.ControllerServices):
        """Has the shared views, not the controller's members."""

    bare = set(missing_members(Bare, context.ControllerServices))
    assert {"submit", "quorum_nodes", "config", "advertised_ranges"} <= bare
    missing = set(missing_members(ServingOnly, context.ControllerServices))
    assert {"submit", "quorum_nodes", "is_active_controller", "controller_config"} <= missing
    assert not missing & {"advertised_ranges", "image", "node_id", "authorizer", "served_apis"}


def _node(cls):
    config = ServerConfig()
    return ZkBrokerNode(config, "127.0.0.1:1") if cls is ZkBrokerNode else cls(config)


@pytest.mark.parametrize("cls", list(NODE_PROTOCOLS), ids=lambda c: c.__name__)
def test_node_implements_the_protocol_of_every_handler_it_serves(cls):
    """A node serving a handler must implement the Protocols that handler declares (so
    a broker and a controller look alike where they must, by declaration)."""
    node = _node(cls)
    for api in node.served_apis.values():
        module = importlib.import_module(api.handler.__module__)
        declared, _ = check_source(inspect.getsource(module))
        for name in declared:
            assert PROTOCOLS[name] in cls.__mro__, (
                f"{cls.__name__} serves {api.name} ({module.__name__}), which needs {name}")


# -- the check catches violations -------------------------------------------------------------

CLEAN = '''
from server.api.context import ControllerServices, FeatureViews

async def handle(ctx, request):
    services: ControllerServices = ctx.services
    leader = services.active_controller_id()
    result = await services.submit(lambda *a: None, gated=True)
    return {"id": services.config.node_id, "topics": services.image.topics(), "leader": leader}

def build(views: FeatureViews, version):
    return views.advertised_ranges()
'''

VIOLATIONS = {
    "ctx.node": '''
def handle(ctx, request):
    return ctx.node.state
''',
    "undeclared ctx.services": '''
def handle(ctx, request):
    services = ctx.services
    return services.image
''',
    "a member its Protocol lacks": '''
from server.api.context import ServingServices

def handle(ctx, request):
    services: ServingServices = ctx.services
    return services.raft_driver.is_leader
''',
    "a controller member on the image Protocol": '''
from server.api.context import MetadataImage

async def handle(ctx, request):
    services: MetadataImage = ctx.services
    return await services.submit(None)
''',
    "walking past a method": '''
from server.api.context import ControllerServices

def handle(ctx, request):
    services: ControllerServices = ctx.services
    return services.submit.__self__.controller
''',
    "an alias": '''
from server.api.context import NodeServices

def handle(ctx, request):
    services: NodeServices = ctx.services
    node = services
    return node.raft_driver
''',
    "getattr": '''
from server.api.context import NodeServices

def handle(ctx, request):
    services: NodeServices = ctx.services
    return getattr(services, "controller")
''',
    "a parameter's Protocol": '''
from server.api.context import FeatureViews

def build(views: FeatureViews):
    return views.quorum_nodes()
''',
}


def test_check_passes_a_clean_module():
    declared, violations = check_source(CLEAN)
    assert violations == []
    assert declared == {"ControllerServices", "FeatureViews"}


@pytest.mark.parametrize("kind", list(VIOLATIONS))
def test_check_catches_a_violation(kind):
    _, violations = check_source(VIOLATIONS[kind])
    assert violations, kind
