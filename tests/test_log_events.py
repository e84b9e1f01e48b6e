"""Every structured log event name is a named constant, never a literal at the call site.

Operators and tests match on event names, so each one is declared once
(`server.observability.Event`, or a module's own `StrEnum` where the module
must not import server/, like streams/) and a call site only refers to it.
The check reads the source with `ast`: a call to a logger method
(`log.info(...)`, `_log.warning(...)`, `get_logger("x").error(...)`) whose
event, the first positional argument or `event=`, is a string literal or an
f-string fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "protocol", "cli", "streams", "pipeline", "bench", "tools", "tests")
LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg", "log"})
# The receiver of a structlog call in this tree: `log`, `_log`, `logger`, `self._log`, or
# `get_logger(...)` called in place. `parser.error(...)` (argparse) and `warnings.warn` are not loggers.
LOGGER_RECEIVER = re.compile(r"(^|\.)_?(log|logger)$|get_logger\(")


def _is_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def literal_events(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, call) for every logger call whose event name is a literal."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in LOG_METHODS or not LOGGER_RECEIVER.search(ast.unparse(node.func.value)):
            continue
        # `logging.Logger.log(level, msg)` puts the event second; structlog's methods put it first.
        position = 1 if node.func.attr == "log" else 0
        event = node.args[position] if len(node.args) > position else None
        keyword = next((k.value for k in node.keywords if k.arg == "event"), None)
        if any(candidate is not None and _is_literal(candidate) for candidate in (event, keyword)):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def source_files() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_log_events_are_constants(path):
    found = literal_events(path.read_text(), str(path))
    assert not found, f"{path.relative_to(ROOT)}: log event names must be constants: {found}"


def test_the_checker_catches_literal_events():
    # Guards the check itself: each of these must be reported, and the constant forms must not.
    sample = (
        "log.info('controller.topics_created', count=1)\n"
        "_log.warning(f'raft.{name}')\n"
        "self._log.error(event='storage.write_failed')\n"
        "get_logger('storage').info('storage.formatted')\n"
        "log.info(Event.TOPICS_CREATED, count=1)\n"
        "_log.warning(refusal.event)\n"
        "parser.error('--rounds must be positive')\n"
        "warnings.warn('no tmpfs')\n"
    )
    assert [line for line, _ in literal_events(sample)] == [1, 2, 3, 4]
