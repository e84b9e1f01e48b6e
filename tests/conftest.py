"""Fixtures every test directory may use.

`spark`: ONE local Spark session for the whole test run (starting one takes seconds),
created only when a test asks for it; skipped where PySpark is not installed (the
pipeline's optional extra)."""

from __future__ import annotations

import pytest


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
# ZooKeeper (issue 6): a real ZooKeeper 3.8 server per test
# --------------------------------------------------------------------------

@pytest.fixture
def zookeeper(tmp_path):
    """A fresh ZooKeeper server (own data dir, free port) for one test; skipped with
    the reason when java or Debian's zookeeper.jar is absent."""
    from server.zk.process import ZooKeeperProcess, zookeeper_missing

    reason = zookeeper_missing()
    if reason is not None:
        pytest.skip(f"ZooKeeper unavailable: {reason}")
    process = ZooKeeperProcess(tmp_path / "zookeeper")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def zk_hosts(zookeeper) -> str:
    """The connect string of the `zookeeper` fixture's server: "127.0.0.1:PORT"."""
    return zookeeper.hosts
