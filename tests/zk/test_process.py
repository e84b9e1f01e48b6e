"""A real ZooKeeper server process: start, stop, kill, restart (server/zk/process.py)."""

from __future__ import annotations

import socket

import pytest
from kazoo.client import KazooClient

from cli.local_cluster import free_port_run
from server.zk.process import ZooKeeperProcess, ZooKeeperSettings, ZooKeeperStartError, four_letter_word


def _write_and_read(hosts: str, path: str, data: bytes | None) -> bytes | None:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    try:
        if data is not None:
            client.create(path, data, makepath=True)
        value, _ = client.get(path)
        return value
    finally:
        client.stop()
        client.close()


def _port_refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_start_serves_and_writes_config(zookeeper: ZooKeeperProcess) -> None:
    assert zookeeper.is_running()
    assert zookeeper.hosts == f"127.0.0.1:{zookeeper.port}"
    answer = four_letter_word(zookeeper.port, "srvr")
    assert "Zookeeper version: 3.8" in answer
    assert "Mode: standalone" in answer
    config = zookeeper.config_path.read_text()
    assert "admin.enableServer=false" in config
    assert "4lw.commands.whitelist=srvr,ruok" in config
    assert "clientPortAddress=127.0.0.1" in config
    assert four_letter_word(zookeeper.port, "ruok") == "imok"


def test_stop_closes_the_port(zookeeper: ZooKeeperProcess) -> None:
    zookeeper.stop()
    assert not zookeeper.is_running()
    assert _port_refuses(zookeeper.port)
    zookeeper.stop()  # idempotent


def test_kill_then_restart_keeps_data_and_port(zookeeper: ZooKeeperProcess) -> None:
    port = zookeeper.port
    assert _write_and_read(zookeeper.hosts, "/kraftwerk/kept", b"v1") == b"v1"
    zookeeper.kill()
    assert not zookeeper.is_running()
    assert _port_refuses(port)
    zookeeper.start()
    assert zookeeper.port == port
    assert _write_and_read(zookeeper.hosts, "/kraftwerk/kept", None) == b"v1"


def test_restart_keeps_data(zookeeper: ZooKeeperProcess) -> None:
    _write_and_read(zookeeper.hosts, "/r", b"x")
    old_pid = zookeeper.pid
    zookeeper.restart()
    assert zookeeper.pid != old_pid
    assert _write_and_read(zookeeper.hosts, "/r", None) == b"x"


def test_context_manager(tmp_path, zookeeper: ZooKeeperProcess) -> None:
    # `zookeeper` only provides the skip-when-missing check here.
    with ZooKeeperProcess(tmp_path / "second", port=free_port_run(1)) as second:
        assert second.port != zookeeper.port
        assert "Mode: standalone" in second.srvr()
    assert not second.is_running()
    assert _port_refuses(second.port)


def test_start_refuses_a_port_in_use(tmp_path, zookeeper: ZooKeeperProcess) -> None:
    # Another server on the port would answer `srvr` and pass for this one.
    clash = ZooKeeperProcess(tmp_path / "clash", port=zookeeper.port)
    with pytest.raises(ZooKeeperStartError, match="already in use"):
        clash.start(timeout_s=30)
    assert not clash.is_running()


def test_start_failure_reports_the_log_tail(tmp_path, zookeeper: ZooKeeperProcess) -> None:
    # A JVM that cannot start (a 1 MB heap is below its minimum) exits at once.
    broken = ZooKeeperProcess(tmp_path / "broken", port=free_port_run(1), settings=ZooKeeperSettings(max_heap_mb=1))
    with pytest.raises(ZooKeeperStartError) as excinfo:
        broken.start(timeout_s=30)
    assert not broken.is_running()
    message = str(excinfo.value)
    assert "ZooKeeper exited" in message
    assert "--- starting: java" in message  # the tail of its log is in the error
