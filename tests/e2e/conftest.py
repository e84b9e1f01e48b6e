"""Fixtures for the end-to-end tests: fresh controllers, stopped at teardown.

The process handling itself lives in `helpers.py` (importable by the tests).
"""

from __future__ import annotations

import pytest

from cli.upgrade_story import LocalCluster

from .helpers import ControllerFactory, ControllerProcess

# The brokers of the shared `cluster` fixture.
CLUSTER_BROKERS = [101, 102]


@pytest.fixture
def controllers(tmp_path):
    factory = ControllerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def module_controllers(tmp_path_factory):
    """For tests that share one server (to show it survives all of them)."""
    factory = ControllerFactory(tmp_path_factory.mktemp("controllers"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def controller(controllers) -> ControllerProcess:
    """A fresh controller at metadata.version 3.7-IV4 (level 19)."""
    return controllers.new()




@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    """One module's cluster of real processes: controller 1 and brokers 101 and 102 at
    metadata.version 3.7-IV4, started and unfenced; stopped after the module."""
    directory = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    cluster = LocalCluster(directory, controllers=1, brokers=2, metadata_version="3.7-IV4")
    try:
        cluster.bring_up()
        yield cluster
    finally:
        cluster.stop_all()
