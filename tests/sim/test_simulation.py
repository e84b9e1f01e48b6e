"""The seeded simulator sweep: thousands of random fault schedules against the real RaftCore.

A failure names its seed; replay it with
    .venv/bin/pytest tests/sim -k sweep --sim-seed SEED     (or: .venv/bin/python -m tests.sim.run --seed SEED)
SIM_SEEDS=100000 runs a nightly-sized sweep; SIM_FIRST_SEED moves the window.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from .cluster import InvariantViolation, SimConfig, Simulation

CI_SEEDS = 2000


def _run_range(bounds: tuple[int, int]) -> list[str]:
    failures = []
    for seed in range(*bounds):
        try:
            Simulation(seed).run()
        except InvariantViolation as exc:
            failures.append(str(exc))
        except Exception as exc:  # an assertion inside the core is a bug too
            failures.append(f"seed {seed}: {exc!r}\n  replay: .venv/bin/python -m tests.sim.run --seed {seed}")
    return failures


def test_sweep(request):
    seed = request.config.getoption("--sim-seed")
    if seed is not None:
        Simulation(seed).run()
        return
    count = int(os.environ.get("SIM_SEEDS", CI_SEEDS))
    first = int(os.environ.get("SIM_FIRST_SEED", 0))
    workers = max(1, min(os.cpu_count() or 1, 8))
    step = -(-count // workers)
    ranges = [(first + i * step, min(first + (i + 1) * step, first + count)) for i in range(workers)]
    if workers == 1:
        failures = _run_range(ranges[0])
    else:
        # Seeds are independent and deterministic, so splitting them across
        # processes changes nothing but the wall time.
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            failures = [failure for part in pool.map(_run_range, ranges) for failure in part]
    assert not failures, f"{len(failures)} of {count} seeds failed; first:\n{failures[0]}"


@pytest.mark.parametrize("seed", range(20))
def test_wire_codec_seeds(seed):
    """Every message of these runs goes through protocol/apis encode + decode and records through batch v2."""
    base = Simulation(seed).config
    simulation = Simulation(seed, SimConfig(**{**base.__dict__, "wire_codec": True}))
    simulation.run()
    assert simulation.committed


@pytest.mark.parametrize("voters", [3, 5])
def test_five_and_three_voters_without_pre_vote(voters):
    for seed in range(40):
        base = Simulation(seed).config
        Simulation(seed, SimConfig(**{**base.__dict__, "voters": voters, "pre_vote": False})).run()


def test_same_seed_same_run():
    first, second = Simulation(7), Simulation(7)
    first.run()
    second.run()
    assert (first.event_count, first.now, first.committed) == (second.event_count, second.now, second.committed)


def test_checker_catches_a_broken_core(monkeypatch):
    """Guards the checker: a core that lets the high watermark skip the majority must be caught."""
    from server.raft import core as core_module

    def reckless(self):
        if self.role is core_module.Role.LEADER and self.end_offset > self._epoch_start_offset + 1:
            candidate = self.end_offset
            if self._leader_high_watermark is None or candidate > self._leader_high_watermark:
                self._leader_high_watermark = candidate
                self._set_high_watermark(candidate)

    monkeypatch.setattr(core_module.RaftCore, "_update_leader_high_watermark", reckless)
    caught = 0
    for seed in range(30):
        try:
            Simulation(seed).run()
        except (InvariantViolation, AssertionError):
            caught += 1
    assert caught >= 10
