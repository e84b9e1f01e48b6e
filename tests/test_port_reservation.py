"""Fixed ports for local clusters (cli/local_cluster.py `free_port_run`): below the
kernel's ephemeral range, never handed out twice while their holder lives, never
one something listens on. Two tests (or two test runs) sharing a port made a
controller fail with `Address already in use` on a busy host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from cli import local_cluster as lc


def test_runs_lie_below_the_ephemeral_range_and_never_overlap(tmp_path):
    runs = [lc.free_port_run(3, directory=tmp_path) for _ in range(20)]
    ports = [base + offset for base in runs for offset in range(3)]
    assert len(set(ports)) == len(ports)
    assert all(lc.RESERVED_PORTS_LOW <= port < lc.ephemeral_ports_low() for port in ports)
    assert all((tmp_path / str(port)).read_text() == str(os.getpid()) for port in ports)


def test_a_live_process_keeps_its_ports_and_a_dead_one_gives_them_back(tmp_path, monkeypatch):
    # A range of 8 ports: bases 32760..32764 for runs of 4.
    monkeypatch.setattr(lc, "RESERVED_PORTS_LOW", lc.EPHEMERAL_PORTS_LOW_DEFAULT - 8)
    monkeypatch.setattr(lc, "ephemeral_ports_low", lambda: lc.EPHEMERAL_PORTS_LOW_DEFAULT)
    low = lc.RESERVED_PORTS_LOW
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                            text=True, check=True)
    dead_pid = int(exited.stdout)
    for port in range(low, low + 4):  # held by a live process (our parent)
        (tmp_path / str(port)).write_text(str(os.getppid()))
    for port in range(low + 4, low + 8):  # left behind by a process that exited
        (tmp_path / str(port)).write_text(str(dead_pid))
    assert lc.free_port_run(4, directory=tmp_path) == low + 4
    # Now all eight are held by live processes (this one included): none is left.
    try:
        lc.free_port_run(1, directory=tmp_path)
    except lc.LocalClusterError as exc:
        assert "no run of 1 free ports" in str(exc)
    else:
        raise AssertionError("a port held by a live process was handed out again")


def test_a_port_something_listens_on_is_skipped(tmp_path, monkeypatch):
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for port in range(lc.RESERVED_PORTS_LOW, lc.EPHEMERAL_PORTS_LOW_DEFAULT):
            try:
                listener.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
        listener.listen()
        taken = listener.getsockname()[1]
        # The range is the listener's port and the next one: only the next one is free.
        monkeypatch.setattr(lc, "RESERVED_PORTS_LOW", taken)
        monkeypatch.setattr(lc, "ephemeral_ports_low", lambda: taken + 2)
        monkeypatch.setattr(lc, "EPHEMERAL_PORTS_LOW_DEFAULT", taken + 2)
        assert lc.free_port_run(1, directory=tmp_path) == taken + 1
