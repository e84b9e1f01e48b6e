"""`kraftwerk cluster up --controllers 1 --standalone`, then `kraftwerk cluster add-controller`
twice, as an operator runs them: a dynamic quorum (KIP-853) of real processes grows from one
voter to three while a broker keeps serving, and Ctrl-C stops every process, the added
controllers too."""

from __future__ import annotations

import os
import re
import signal

import pytest

from cli.local_cluster import free_port_run, process_alive, run_cli

from .helpers import status_node_ids
from .test_cluster_up_secure import Up

pytestmark = pytest.mark.e2e


def test_a_standalone_controller_grows_to_three_voters_and_ctrl_c_stops_them_all(tmp_path):
    work = tmp_path / "cluster"
    controller_port, broker_port = free_port_run(1), free_port_run(1)
    up = Up(["cluster", "up", "--controllers", "1", "--brokers", "1", "--standalone", "--dir", str(work),
             "--base-port", str(controller_port), "--broker-base-port", str(broker_port)], tmp_path / "up.out")
    added_pids = []
    try:
        output = up.wait_ready()
        assert "brokers 101 registered and unfenced" in output
        assert "The quorum is dynamic (KIP-853): controller 1 is its only voter." in output
        assert f"kraftwerk cluster add-controller --dir {work}" in output
        for node_id in (2, 3):
            grown = run_cli("cluster", "add-controller", "--dir", str(work), timeout_s=120)
            assert grown.returncode == 0, grown.stdout + grown.stderr
            assert re.search(rf"^Added controller {node_id} with directory id \S+ and endpoints: "
                             rf"CONTROLLER://127\.0\.0\.1:\d+$", grown.stdout, re.MULTILINE), grown.stdout
            added_pids.append(int((work / f"controller-{node_id}.pid").read_text()))
        status = run_cli("metadata-quorum", "describe", "--status", "--bootstrap-server", f"127.0.0.1:{broker_port}")
        assert status.returncode == 0, status.stderr
        assert status_node_ids(status.stdout, "CurrentVoters") == [1, 2, 3]
        assert status_node_ids(status.stdout, "CurrentObservers") == [101]
        # The broker still serves clients with the grown quorum behind it.
        described = run_cli("features", "describe", "--bootstrap-server", f"127.0.0.1:{broker_port}")
        assert described.returncode == 0 and "Feature: kraft.version" in described.stdout, described.stderr
        assert "FinalizedVersionLevel: 1" in next(line for line in described.stdout.splitlines()
                                                  if line.startswith("Feature: kraft.version"))
        assert up.interrupt() == 0
        for pid in [*up.node_pids(), *added_pids]:
            assert not process_alive(pid), f"process {pid} outlived `cluster up`"
    finally:
        up.kill()
        for pid in added_pids:
            kill_quietly(pid)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
