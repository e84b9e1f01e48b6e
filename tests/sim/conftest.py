"""Options for the simulator: `--sim-seed N` replays one seed; SIM_SEEDS=N sets the sweep size."""

from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--sim-seed", type=int, default=None, help="run only this simulator seed (replay a failure)")
