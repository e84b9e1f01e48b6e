"""Fixtures for the end-to-end tests: fresh controllers, stopped at teardown.

The process handling itself lives in `helpers.py` (importable by the tests).
"""

from __future__ import annotations

import pytest

from .helpers import ControllerFactory, ControllerProcess


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


