"""Fixtures every test directory may use.

`spark`: ONE local Spark session for the whole test run (starting one takes seconds),
created only when a test asks for it; skipped where PySpark is not installed (the
pipeline's optional extra). `controller_and_broker`: an in-process controller and broker
agent on 127.0.0.1. `zookeeper` / `zk_hosts`: a real ZooKeeper per test.

With CI=true every skip fails the run with its reason (what is missing)."""

from __future__ import annotations

import functools
import os
from contextlib import asynccontextmanager

import pytest

# With CI=true a skip is a failure: a missing client library, Java, ZooKeeper, kcat,
# Docker, ... must fail the run, naming what is missing (the skip's reason), instead of
# hiding a test.


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _fail_skip_in_ci(report) -> None:
    if not (_in_ci() and report.skipped) or getattr(report, "wasxfail", None) is not None:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    report.outcome = "failed"
    report.longrepr = f"CI=true and this would be skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result())


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pipeline.jobs import spark_session

    session = spark_session("local[2]", "kraftwerk-tests", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()


# --------------------------------------------------------------------------
# ZooKeeper: a real ZooKeeper 3.8 server per test
# --------------------------------------------------------------------------

@pytest.fixture
def zookeeper(tmp_path):
    """A fresh ZooKeeper server (own data dir, free port) for one test; skipped with
    the reason when java or Debian's zookeeper.jar is absent."""
    from cli.local_cluster import free_port_run
    from server.zk.process import ZooKeeperProcess, zookeeper_missing

    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    process = ZooKeeperProcess(tmp_path / "zookeeper", port=free_port_run(1))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def zk_hosts(zookeeper) -> str:
    """The connect string of the `zookeeper` fixture's server: "127.0.0.1:PORT"."""
    return zookeeper.hosts


# --------------------------------------------------------------------------
# An in-process controller and broker agent
# --------------------------------------------------------------------------

@pytest.fixture
def controller_and_broker(tmp_path):
    """A factory: `async with controller_and_broker(extra_bootstrap=(), **extra) as
    (controller, broker)` runs a single-voter controller (formatted at 3.7-IV4, plus
    `extra_bootstrap` records) and a broker agent on 127.0.0.1 in the test's own trio
    run, both with `extra` config properties; the broker is RUNNING when the body starts."""
    return functools.partial(_controller_and_broker, tmp_path)


@asynccontextmanager
async def _controller_and_broker(tmp_path, extra_bootstrap=(), **extra: str):
    import trio

    from server.broker.lifecycle import BrokerState
    from server.nodes.broker import BrokerNode
    from server.config import Listener, ServerConfig, VoterAddress
    from server.controller.commands import bootstrap_records
    from cli.local_cluster import free_port_run
    from server.nodes.controller import ControllerNode
    from server.storage.bootstrap import write_bootstrap_checkpoint
    from server.storage.meta_properties import MetaProperties, random_uuid_string, write_meta_properties

    mv_3_7_iv4 = 19
    cluster_id = random_uuid_string()
    port = free_port_run(1)
    voters = (VoterAddress(1, "127.0.0.1", port),)
    for name, node_id in (("controller", 1), ("broker", 100)):
        directory = tmp_path / name
        directory.mkdir(parents=True)
        if name == "controller":
            write_bootstrap_checkpoint(directory, bootstrap_records(mv_3_7_iv4) + list(extra_bootstrap))
        write_meta_properties(directory, MetaProperties(cluster_id=cluster_id, node_id=node_id,
                                                        directory_id=random_uuid_string()))
    controller = ControllerNode(ServerConfig(
        node_id=1, listener=Listener("CONTROLLER", "127.0.0.1", port), metadata_log_dir=tmp_path / "controller",
        quorum_voters=voters, extra=dict(extra)))
    broker = BrokerNode(ServerConfig(
        node_id=100, listener=Listener("PLAINTEXT", "127.0.0.1", 0), metadata_log_dir=tmp_path / "broker",
        quorum_voters=voters, process_roles=("broker",), broker_heartbeat_interval_ms=100, extra=dict(extra)))
    async with trio.open_nursery() as nursery:
        await nursery.start(controller.run)
        await nursery.start(broker.run)
        await broker.lifecycle.wait_state(BrokerState.RUNNING)
        try:
            yield controller, broker
        finally:
            nursery.cancel_scope.cancel()
