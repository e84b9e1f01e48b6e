"""The layering rules of docs/architecture.md, checked on the source.

`protocol/` is pure: it never imports `server/`, trio or sockets. The sans-I/O
cores of `server/` (framing, controller commands/state/features) import neither
trio nor sockets, so they stay plain functions a simulator can drive.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PURE_CORES = [
    "server/net/framing.py",
    "server/controller/commands.py",
    "server/controller/state.py",
    "server/controller/features.py",
]
IO_MODULES = {"trio", "socket", "asyncio", "selectors"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def top_level(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("path", sorted((ROOT / "protocol").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_protocol_imports_neither_server_nor_io(path):
    bad = top_level(imported_modules(path)) & ({"server", "pipeline"} | IO_MODULES)
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("relative", PURE_CORES)
def test_sans_io_cores_import_no_io(relative):
    bad = top_level(imported_modules(ROOT / relative)) & IO_MODULES
    assert not bad, f"{relative} imports {sorted(bad)}"


def test_the_checker_sees_imports(tmp_path):
    # Guards the test itself: a module that imports trio must be caught.
    sample = tmp_path / "sample.py"
    sample.write_text("import trio\nfrom server.nodes.controller import ControllerNode\n")
    assert top_level(imported_modules(sample)) == {"trio", "server"}
