"""`kraftwerk demo` and `kraftwerk cluster up` (the README's main command; its story,
`kraftwerk cluster demo-upgrade`, is tested in test_upgrade_story.py), as a newcomer runs them."""

from __future__ import annotations

import pytest

from cli.local_cluster import free_port_run, run_cli

from .helpers import status_node_ids

pytestmark = pytest.mark.e2e


def test_demo_tells_the_upgrade_story_with_a_failover_and_stops_cleanly(tmp_path):
    result = run_cli("demo", "--exit", "--port", str(free_port_run(3)), "--dir", str(tmp_path), timeout_s=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "FinalizedVersionLevel: 3.7-IV4" in out
    assert "metadata.version can be upgraded to 3.9-IV0." in out
    assert "metadata.version was upgraded to 3.9-IV0." in out
    assert "FinalizedVersionLevel: 3.9-IV0" in out
    assert "Could not downgrade metadata.version to 3.6-IV2." in out
    assert "metadata.version was downgraded to 3.8-IV0." in out
    assert status_node_ids(out, "CurrentVoters") == [1, 2, 3]
    # The failover: the leader is killed, the survivors accept the next upgrade under a new
    # leader, and the restarted node reports the level it missed.
    assert "kill -9 the active controller" in out
    assert "metadata.version was upgraded to 4.0-IV0." in out
    epochs = [int(line.split(":")[1]) for line in out.splitlines() if line.startswith("LeaderEpoch")]
    assert len(epochs) == 2 and epochs[1] > epochs[0]
    restarted = out.split("has the upgrade it missed", 1)[1]
    assert "FinalizedVersionLevel: 4.0-IV0" in restarted
    for node_id in (1, 2, 3):
        assert '"event": "server.started"' in (tmp_path / f"controller-{node_id}.log").read_text()


def test_cluster_up_formats_and_starts_a_controller_and_reports_its_address(tmp_path):
    port = free_port_run(1)
    result = run_cli("cluster", "up", "--controllers", "1", "--brokers", "0", "--exit", "--base-port", str(port),
                     "--dir", str(tmp_path), timeout_s=120)
    assert result.returncode == 0, result.stderr
    assert f"controller 1 listening on 127.0.0.1:{port}" in result.stdout


def free_ports(count: int) -> int:
    return free_port_run(count)


def test_cluster_up_starts_a_three_controller_quorum(tmp_path):
    base = free_ports(3)
    result = run_cli("cluster", "up", "--controllers", "3", "--brokers", "0", "--exit", "--base-port", str(base),
                     "--dir", str(tmp_path), timeout_s=120)
    assert result.returncode == 0, result.stderr
    for node_id in (1, 2, 3):
        assert f"controller {node_id} listening on 127.0.0.1:{base + node_id - 1}" in result.stdout
        config = (tmp_path / f"controller-{node_id}.properties").read_text()
        assert f"controller.quorum.voters=1@127.0.0.1:{base},2@127.0.0.1:{base + 1},3@127.0.0.1:{base + 2}" in config
    # All three were formatted with one cluster id.
    ids = {(tmp_path / f"controller-{n}" / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
           for n in (1, 2, 3)}
    assert len(ids) == 1


def test_cluster_up_by_default_starts_three_controllers_and_three_unfenced_brokers(tmp_path):
    controllers, brokers = free_ports(3), free_ports(3)
    result = run_cli("cluster", "up", "--exit", "--base-port", str(controllers), "--broker-base-port", str(brokers),
                     "--dir", str(tmp_path), timeout_s=180)
    assert result.returncode == 0, result.stdout + result.stderr
    for node_id in (1, 2, 3):
        assert f"controller {node_id} listening on 127.0.0.1:{controllers + node_id - 1}" in result.stdout
    for index, broker_id in enumerate((101, 102, 103)):
        assert f"broker {broker_id} listening on 127.0.0.1:{brokers + index}" in result.stdout
        config = (tmp_path / f"broker-{broker_id}.properties").read_text()
        assert "process.roles=broker" in config
    assert "brokers 101, 102, 103 registered and unfenced" in result.stdout
    assert f"kraftwerk features describe --bootstrap-server 127.0.0.1:{brokers}" in result.stdout
