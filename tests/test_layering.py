"""The layering rules of docs/architecture.md, checked on the import graph of the source.

Every `import` statement in protocol/, server/, pipeline/, cli/ and streams/ is an
edge, wherever it sits: at module level, inside a function (it runs on the first
call, so it is as real a dependency as a module-level one), or under
`if TYPE_CHECKING:`. The last kind never runs: it only names a type for the
checker. It is therefore left out of the cycle check (a type-only cycle cannot
break an import) but still counts for the forbidden-import rules, because a pure
core whose signatures name trio or the network layer is no longer pure.

Rules checked:
- No cycles between packages (`UNITS` below). A cycle is reported with the
  import statements that form it.
- `protocol/` imports nothing of the server, the pipeline or the CLI; `protocol/`,
  the Raft core and the controller's pure modules reach neither trio nor sockets
  nor `server.net`, not even through what they import.
- Nothing under `server/` imports `cli/`, `streams/` or `pipeline/` (they are
  clients of the server, never the other way round).
- `pipeline/` reaches none of the server's network parts and no trio, through
  any chain of imports: it reads and replays logs with the pure modules only.
- A function-level import is a deliberate exception: it carries a
  `# deferred import: <reason>` comment on its own line or the line(s) just above
  (a group of consecutive imports may share one comment), and there are fewer
  than `MAX_DEFERRED_IMPORTS` of them in protocol/, server/ and pipeline/.

Each rule has a guard test that builds a small tree in tmp_path with one
violation and checks the rule reports it. `python tests/test_layering.py` prints
the whole report (cycles, deferred and type-only imports).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FIRST_PARTY = ("protocol", "server", "pipeline", "cli", "streams")

# Module scopes of an import statement.
MODULE = "module"
FUNCTION = "function"
TYPE_CHECKING = "type_checking"

DEFERRED_MARKER = re.compile(r"#\s*deferred import:\s*(?P<reason>\S.*)$")

# The target: function-level imports stay rare enough that each one is a
# visible, explained exception.
MAX_DEFERRED_IMPORTS = 10
DEFERRED_COUNT_PACKAGES = ("protocol", "server", "pipeline")

IO_MODULES = ("trio", "socket", "ssl", "asyncio", "selectors")

# The sans-I/O cores: plain functions and step machines a simulator drives.
PURE_CORES = (
    "protocol",
    "server.net.framing",
    "server.raft.core",
    "server.raft.log",
    "server.raft.messages",
    "server.raft.validate",
    "server.raft.quorum_state",
    "server.voters",
    "server.controller.commands",
    "server.controller.state",
    "server.controller.features",
    "server.controller.topics",
    "server.controller.downgrade",
    "server.controller.acl_commands",
    "server.controller.scram_commands",
    "server.controller.snapshot",
)
PURE_CORE_FORBIDDEN = IO_MODULES + ("server.net",)
# Kafka's framing is itself a sans-I/O core that happens to live with the listener.
PURE_CORE_ALLOWED = ("server.net.framing",)
PROTOCOL_FORBIDDEN = ("server", "pipeline", "cli", "streams")
SERVER_FORBIDDEN = ("cli", "streams", "pipeline")
PIPELINE_FORBIDDEN = ("trio", "server.net", "server.nodes", "server.api", "server.handlers",
                      "server.dispatch", "server.apis", "server.broker", "server.zkbroker")


@dataclass(frozen=True)
class Edge:
    """One imported module of one import statement."""

    source: str  # the importing module, dotted
    path: str  # the importing file, relative to the root
    line: int
    target: str  # the imported module, dotted (a first-party submodule when it names one)
    scope: str  # MODULE, FUNCTION or TYPE_CHECKING
    statement: str  # the statement's text, for messages
    reason: str | None  # the deferred-import marker's reason, if any

    def __str__(self) -> str:
        where = "" if self.scope == MODULE else f" [{self.scope}]"
        return f"{self.path}:{self.line}: {self.source} -> {self.target}{where}"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _is_type_checking_test(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_statements(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its scope; a class body runs at import time, so it is module scope."""

    def walk(node: ast.AST, scope: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, scope
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, FUNCTION if scope == MODULE else scope)
            elif isinstance(child, ast.If) and _is_type_checking_test(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), TYPE_CHECKING)
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), scope)
            else:
                yield from walk(child, scope)

    yield from walk(tree, MODULE)


def _marker_reasons(lines: list[str], statements: list[ast.Import | ast.ImportFrom]) -> dict[int, str]:
    """The deferral reason of each statement (by line): on its own line, in the comment
    block just above, or shared with the marked import statement just above."""
    reasons: dict[int, str] = {}
    by_end_line = {statement.end_lineno: statement for statement in statements}
    for statement in sorted(statements, key=lambda s: s.lineno):
        own = DEFERRED_MARKER.search(lines[statement.lineno - 1])
        if own:
            reasons[statement.lineno] = own.group("reason")
            continue
        above = statement.lineno - 1
        while above >= 1 and lines[above - 1].strip().startswith("#"):
            found = DEFERRED_MARKER.search(lines[above - 1])
            if found:
                reasons[statement.lineno] = found.group("reason")
                break
            above -= 1
        else:
            previous = by_end_line.get(statement.lineno - 1)
            if previous is not None and previous.lineno in reasons:
                reasons[statement.lineno] = reasons[previous.lineno]
    return reasons


class ImportGraph:
    """The import edges of the first-party packages under `root`."""

    def __init__(self, root: Path, packages: Iterable[str] = FIRST_PARTY) -> None:
        self.root = root
        self.files: dict[str, Path] = {}
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                self.files[module_name(root, path)] = path
        self.edges: list[Edge] = []
        for module, path in self.files.items():
            self.edges.extend(self._edges_of(module, path))

    def _resolve(self, module: str, level: int, source: str, is_package: bool) -> str:
        if level == 0:
            return module
        base = source.split(".") if is_package else source.split(".")[:-1]
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def _edges_of(self, source: str, path: Path) -> Iterator[Edge]:
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        statements = list(_import_statements(tree))
        function_level = [statement for statement, scope in statements if scope == FUNCTION]
        reasons = _marker_reasons(text.splitlines(), function_level)
        relative = str(path.relative_to(self.root))
        is_package = path.name == "__init__.py"
        for statement, scope in statements:
            if isinstance(statement, ast.Import):
                targets = [alias.name for alias in statement.names]
            else:
                base = self._resolve(statement.module or "", statement.level, source, is_package)
                # `from package import module` depends on that submodule, not just the package.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.files else base
                           for alias in statement.names]
            text_of = ast.unparse(statement)
            for target in dict.fromkeys(targets):
                yield Edge(source, relative, statement.lineno, target, scope, text_of,
                           reasons.get(statement.lineno) if scope == FUNCTION else None)

    def runtime_edges(self) -> list[Edge]:
        return [edge for edge in self.edges if edge.scope != TYPE_CHECKING]

    def deferred(self) -> list[Edge]:
        """Function-level import statements (one edge per statement)."""
        seen: dict[tuple[str, int], Edge] = {}
        for edge in self.edges:
            if edge.scope == FUNCTION:
                seen.setdefault((edge.path, edge.line), edge)
        return list(seen.values())

    def reachable(self, start: str) -> dict[str, Edge | None]:
        """Every module `start` imports at run time, directly or not, with the edge that reached it.

        Importing `a.b.c` runs `a/__init__` and `a/b/__init__` first, so those count too."""
        by_source: dict[str, list[Edge]] = {}
        for edge in self.runtime_edges():
            by_source.setdefault(edge.source, []).append(edge)
        seen: dict[str, Edge | None] = {start: None}
        queue = [start]
        while queue:
            module = queue.pop()
            for edge in by_source.get(module, []):
                parts = edge.target.split(".")
                for depth in range(1, len(parts) + 1):
                    target = ".".join(parts[:depth])
                    if target not in seen and (target in self.files or depth == len(parts)):
                        seen[target] = edge
                        if target in self.files:
                            queue.append(target)
        return seen

    def chain(self, reached: dict[str, Edge | None], target: str) -> list[Edge]:
        edges: list[Edge] = []
        edge = reached[target]
        while edge is not None:
            edges.append(edge)
            edge = reached[edge.source]
        return list(reversed(edges))


# Modules that sit in a package but on another layer than the rest of it. The API catalog
# names every handler, while the handlers use the rest of server/api (the request context and
# ApiError): the catalog is wiring above the handlers, the rest a contract below them.
SEPARATE_UNITS = ("server.api.catalog",)


def unit_of(module: str) -> str | None:
    """The package a module belongs to for the cycle check.

    server/ is split into its subpackages; each top-level module of server/ (dispatch,
    config, observability, ...) is a unit of its own, because they are unrelated to each
    other (observability is a leaf everyone uses, dispatch is wiring above the handlers)."""
    parts = module.split(".")
    if parts[0] not in FIRST_PARTY:
        return None
    for unit in SEPARATE_UNITS:
        if is_within(module, [unit]):
            return unit
    if parts[0] == "server" and len(parts) > 1:
        return f"server.{parts[1]}"
    return parts[0]


def package_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """Strongly connected sets of units (more than one), each as the edges between its units."""
    between: dict[tuple[str, str], list[Edge]] = {}
    for edge in edges:
        source, target = unit_of(edge.source), unit_of(edge.target)
        if source and target and source != target:
            between.setdefault((source, target), []).append(edge)
    successors: dict[str, set[str]] = {}
    for source, target in between:
        successors.setdefault(source, set()).add(target)
        successors.setdefault(target, set())

    # Tarjan's algorithm, iterative so a deep graph cannot hit the recursion limit.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for root in sorted(successors):
        if root in index:
            continue
        work = [(root, iter(sorted(successors[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(successors[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    cycles = []
    for component in components:
        if len(component) > 1:
            cycles.append([edge for (source, target), group in sorted(between.items())
                           if source in component and target in component for edge in group])
    return cycles


def describe_cycles(cycles: list[list[Edge]]) -> str:
    blocks = []
    for cycle in cycles:
        units = sorted({unit_of(edge.source) for edge in cycle})
        blocks.append(" <-> ".join(units) + "\n" + "\n".join(f"    {edge}" for edge in cycle))
    return "\n".join(blocks)


def forbidden_imports(graph: ImportGraph, sources: Iterable[str], forbidden: Iterable[str], *,
                      transitive: bool, allowed: Iterable[str] = ()) -> list[str]:
    """Violations: a module under `sources` importing a module under `forbidden` (and not
    under `allowed`).

    Direct imports of any scope count (a type-only import of trio still ties a core to
    it); with `transitive`, so do the run-time chains, shown edge by edge."""
    sources, forbidden, allowed = tuple(sources), tuple(forbidden), tuple(allowed)

    def banned(module: str) -> bool:
        return is_within(module, forbidden) and not is_within(module, allowed)

    violations: list[str] = []
    for module in graph.files:
        if not is_within(module, sources):
            continue
        for edge in graph.edges:
            if edge.source == module and banned(edge.target):
                violations.append(str(edge))
        if transitive:
            reached = graph.reachable(module)
            for target in sorted(reached):
                edge = reached[target]
                # A package's __init__ run on the way to a submodule is not itself reported.
                if edge is None or edge.source == module or edge.target != target or not banned(target):
                    continue
                # Report only the first forbidden module along a chain.
                chain = graph.chain(reached, target)
                if any(banned(step.target) for step in chain[:-1]):
                    continue
                violations.append(f"{module} reaches {target}: " + " ; ".join(str(step) for step in chain))
    return sorted(set(violations))


def unexplained_deferred_imports(graph: ImportGraph) -> list[Edge]:
    return [edge for edge in graph.deferred() if edge.reason is None]


def counted_deferred_imports(graph: ImportGraph) -> list[Edge]:
    return [edge for edge in graph.deferred() if is_within(edge.source, DEFERRED_COUNT_PACKAGES)]


# ---------------------------------------------------------------------------------------------
# The rules, on the real tree.


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(ROOT)


def test_no_cycles_between_packages(graph):
    cycles = package_cycles(graph.runtime_edges())
    assert not cycles, "import cycles between packages:\n" + describe_cycles(cycles)


def test_protocol_imports_nothing_of_the_server(graph):
    violations = forbidden_imports(graph, ["protocol"], PROTOCOL_FORBIDDEN, transitive=False)
    assert not violations, "\n".join(violations)


def test_pure_cores_reach_neither_io_nor_the_network_layer(graph):
    for core in PURE_CORES:
        assert core in graph.files, f"{core} is listed as a pure core but does not exist"
    violations = forbidden_imports(graph, PURE_CORES, PURE_CORE_FORBIDDEN, transitive=True,
                                   allowed=PURE_CORE_ALLOWED)
    assert not violations, "\n".join(violations)


def test_server_never_imports_its_clients(graph):
    violations = forbidden_imports(graph, ["server"], SERVER_FORBIDDEN, transitive=False)
    assert not violations, "\n".join(violations)


def test_pipeline_reaches_no_network_part_of_the_server(graph):
    violations = forbidden_imports(graph, ["pipeline"], PIPELINE_FORBIDDEN, transitive=True)
    assert not violations, "\n".join(violations)


def test_every_function_level_import_says_why(graph):
    unexplained = unexplained_deferred_imports(graph)
    assert not unexplained, (
        f"{len(unexplained)} function-level imports without a '# deferred import: <reason>' comment "
        "(move them to module level; a cycle is a design problem to fix, not to dodge):\n"
        + "\n".join(f"{edge.path}:{edge.line}: {edge.statement}" for edge in unexplained))


def test_function_level_imports_are_rare(graph):
    counted = counted_deferred_imports(graph)
    assert len(counted) < MAX_DEFERRED_IMPORTS, (
        f"{len(counted)} function-level imports in {', '.join(DEFERRED_COUNT_PACKAGES)} "
        f"(target: fewer than {MAX_DEFERRED_IMPORTS}):\n"
        + "\n".join(f"{edge.path}:{edge.line}: {edge.statement}" for edge in counted))


# ---------------------------------------------------------------------------------------------
# Guards: each rule catches a violation planted in a sample tree.


def plant(root: Path, files: dict[str, str]) -> ImportGraph:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in FIRST_PARTY:
        (root / package).mkdir(exist_ok=True)
    return ImportGraph(root)


def test_guard_sees_every_kind_of_import(tmp_path):
    graph = plant(tmp_path, {
        "server/__init__.py": "",
        "server/net/__init__.py": "",
        "server/net/peer.py": "",
        "server/a.py": (
            "from typing import TYPE_CHECKING\n"
            "import trio\n"
            "from server.net import peer\n"
            "if TYPE_CHECKING:\n"
            "    from server.b import B\n"
            "class C:\n"
            "    import socket\n"
            "def f():\n"
            "    from server.c import g\n"
            "    return g\n"),
    })
    found = {(edge.target, edge.scope) for edge in graph.edges if edge.source == "server.a"}
    assert found == {("typing", MODULE), ("trio", MODULE), ("server.net.peer", MODULE),
                     ("server.b", TYPE_CHECKING), ("socket", MODULE), ("server.c", FUNCTION)}


def test_guard_cycle_is_reported_with_its_edges(tmp_path):
    graph = plant(tmp_path, {
        "server/net/listener.py": "import server.dispatch\n",
        "server/dispatch.py": "def handle():\n    from server.handlers import envelope\n",
        "server/handlers/envelope.py": "from server.net.listener import Connection\n",
        "server/handlers/other.py": "from server.handlers import envelope\n",
        "server/config.py": "",
    })
    cycles = package_cycles(graph.runtime_edges())
    assert len(cycles) == 1
    assert {(edge.source, edge.target) for edge in cycles[0]} == {
        ("server.net.listener", "server.dispatch"),
        ("server.dispatch", "server.handlers.envelope"),
        ("server.handlers.envelope", "server.net.listener"),
    }
    assert "server.dispatch <-> server.handlers <-> server.net" in describe_cycles(cycles)


def test_guard_type_checking_edges_make_no_cycle(tmp_path):
    graph = plant(tmp_path, {
        "server/api/context.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from server.nodes.controller import ControllerNode\n",
        "server/nodes/controller.py": "from server.api.context import RequestContext\n",
    })
    assert package_cycles(graph.runtime_edges()) == []
    assert len(package_cycles(graph.edges)) == 1


def test_guard_protocol_importing_the_server_is_caught(tmp_path):
    graph = plant(tmp_path, {"protocol/schema.py": "from server.config import ServerConfig\n",
                             "server/config.py": ""})
    assert forbidden_imports(graph, ["protocol"], PROTOCOL_FORBIDDEN, transitive=False) == [
        "protocol/schema.py:1: protocol.schema -> server.config"]


def test_guard_pure_core_reaching_trio_through_a_helper_is_caught(tmp_path):
    graph = plant(tmp_path, {
        "server/raft/core.py": "from server.raft import helper\n",
        "server/raft/helper.py": "def later():\n    # deferred import: test\n    import trio\n",
        "server/controller/state.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from server.net.listener import Connection\n",
        "server/net/listener.py": "",
    })
    violations = forbidden_imports(graph, ["server.raft.core", "server.controller.state"],
                                   PURE_CORE_FORBIDDEN, transitive=True, allowed=PURE_CORE_ALLOWED)
    assert violations == [
        "server.raft.core reaches trio: server/raft/core.py:1: server.raft.core -> server.raft.helper ; "
        "server/raft/helper.py:3: server.raft.helper -> trio [function]",
        "server/controller/state.py:3: server.controller.state -> server.net.listener [type_checking]",
    ]


def test_guard_server_importing_the_cli_is_caught(tmp_path):
    graph = plant(tmp_path, {"server/zkbroker/run.py": "import cli.main\n", "cli/main.py": "",
                             "server/x.py": "from streams import runner\n", "streams/runner.py": ""})
    assert forbidden_imports(graph, ["server"], SERVER_FORBIDDEN, transitive=False) == [
        "server/x.py:1: server.x -> streams.runner",
        "server/zkbroker/run.py:1: server.zkbroker.run -> cli.main",
    ]


def test_guard_pipeline_reaching_a_node_is_caught(tmp_path):
    graph = plant(tmp_path, {
        "pipeline/fake_fleet.py": "from server.storage.log import MetadataLog\n"
                                  "from server.controller.boot import write\n",
        "server/storage/log.py": "",
        "server/controller/boot.py": "from server.nodes.controller import NAME\n",
        "server/nodes/controller.py": "import trio\n",
    })
    violations = forbidden_imports(graph, ["pipeline"], PIPELINE_FORBIDDEN, transitive=True)
    assert violations == [
        "pipeline.fake_fleet reaches server.nodes.controller: "
        "pipeline/fake_fleet.py:2: pipeline.fake_fleet -> server.controller.boot ; "
        "server/controller/boot.py:1: server.controller.boot -> server.nodes.controller"]


def test_guard_unexplained_function_level_imports_are_caught_and_counted(tmp_path):
    graph = plant(tmp_path, {
        "server/a.py": (
            "def explained():\n"
            "    # deferred import: pyspark is an optional extra\n"
            "    import pyspark\n"
            "    import pyarrow\n"
            "    return pyspark, pyarrow\n"
            "def inline():\n"
            "    import kazoo  # deferred import: only the migration needs it\n"
            "def unexplained():\n"
            "    # a comment that gives no marker\n"
            "    from server.b import c\n"
            "    x = 1\n"
            "    import json\n"),
        "cli/main.py": "def run():\n    import server.a\n",
    })
    assert [(edge.path, edge.line) for edge in unexplained_deferred_imports(graph)] == [
        ("server/a.py", 10), ("server/a.py", 12), ("cli/main.py", 2)]
    assert len(counted_deferred_imports(graph)) == 5


def _report() -> str:
    graph = ImportGraph(ROOT)
    lines = ["cycles between packages (run-time edges):"]
    lines.append(describe_cycles(package_cycles(graph.runtime_edges())) or "    none")
    type_only = [cycle for cycle in package_cycles(graph.edges)
                 if any(edge.scope == TYPE_CHECKING for edge in cycle)]
    lines.append("cycles that exist only with TYPE_CHECKING edges added (not failures):")
    lines.append(describe_cycles(type_only) or "    none")
    deferred = graph.deferred()
    counted = counted_deferred_imports(graph)
    lines.append(f"function-level imports: {len(deferred)} in all, {len(counted)} in "
                 f"{', '.join(DEFERRED_COUNT_PACKAGES)} (target < {MAX_DEFERRED_IMPORTS}):")
    lines.extend(f"    {edge.path}:{edge.line}: {edge.statement}"
                 + (f"   # {edge.reason}" if edge.reason else "   # NO REASON") for edge in deferred)
    lines.append("TYPE_CHECKING imports:")
    lines.extend(f"    {edge}" for edge in graph.edges if edge.scope == TYPE_CHECKING)
    return "\n".join(lines)


if __name__ == "__main__":
    print(_report())
