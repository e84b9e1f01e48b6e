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
