"""A bootstrap list is tried node by node, as Kafka's clients do: the CLI's commands
answer while any listed node does (the first one may be the leader just killed), and
fail naming every address only when none does."""

from __future__ import annotations

import socket

import pytest

from e2e.helpers import run_cli

pytestmark = pytest.mark.e2e


def dead_address() -> str:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        return f"127.0.0.1:{holder.getsockname()[1]}"


def test_a_dead_first_address_does_not_fail_the_command(controller):
    bootstrap = f"{dead_address()},{controller.address}"
    described = run_cli("features", "describe", "--bootstrap-controller", bootstrap, "--timeout-s", "10")
    assert described.returncode == 0, described.stderr
    assert "metadata.version" in described.stdout
    status = run_cli("metadata-quorum", "--bootstrap-controller", bootstrap, "describe", "--status")
    assert status.returncode == 0, status.stderr
    assert "LeaderId:" in status.stdout
    upgraded = run_cli("features", "upgrade", "--feature", "group.version=1", "--bootstrap-controller", bootstrap,
                       "--timeout-s", "10")
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr


def test_when_no_address_answers_every_one_is_named():
    first, second = dead_address(), dead_address()
    described = run_cli("features", "describe", "--bootstrap-controller", f"{first},{second}", "--timeout-s", "5")
    assert described.returncode != 0
    assert first in described.stderr and second in described.stderr, described.stderr
    assert "Traceback" not in described.stderr
