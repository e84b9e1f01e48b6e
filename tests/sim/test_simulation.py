"""The seeded simulator sweep: thousands of random fault schedules against the real RaftCore.

A quarter of the seeds also run a hostile node (tests/sim/hostile.py) during the fault window.
A failure names its seed and invariant; replay it with
    .venv/bin/pytest tests/sim -k sweep --sim-seed SEED     (or: .venv/bin/python -m tests.sim.run --seed SEED)
SIM_SEEDS=100000 runs a nightly-sized sweep; SIM_FIRST_SEED moves the window.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random

import pytest

from .cluster import (
    HOSTILE_IDENTITIES,
    MAJORITY_REACHED_HIGH_WATERMARK,
    InvariantViolation,
    SimConfig,
    Simulation,
    random_sim_config,
)

CI_SEEDS = 10_000
# Seeds per task handed to a worker: small enough that the workers finish
# together, large enough that the hand-off costs nothing.
CHUNK_SEEDS = 50


def _run_range(bounds: tuple[int, int]) -> list[tuple[int, str]]:
    failures = []
    for seed in range(*bounds):
        try:
            Simulation(seed).run()
        except InvariantViolation as exc:
            failures.append((seed, str(exc)))
        except Exception as exc:  # an exception outside a simulated event is a bug too
            failures.append((seed, f"seed {seed}: {exc!r}\n  replay: .venv/bin/python -m tests.sim.run --seed {seed}"))
    return failures


def test_sweep(request):
    seed = request.config.getoption("--sim-seed")
    if seed is not None:
        Simulation(seed).run()
        return
    count = int(os.environ.get("SIM_SEEDS", CI_SEEDS))
    first = int(os.environ.get("SIM_FIRST_SEED", 0))
    workers = max(1, min(os.cpu_count() or 1, 8))
    chunks = [(start, min(start + CHUNK_SEEDS, first + count)) for start in range(first, first + count, CHUNK_SEEDS)]
    if workers == 1:
        failures = [failure for chunk in chunks for failure in _run_range(chunk)]
    else:
        # Seeds are independent and deterministic, so splitting them across
        # processes changes nothing but the wall time.
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            failures = [failure for part in pool.imap_unordered(_run_range, chunks) for failure in part]
    failures.sort()
    listing = "\n".join(text.splitlines()[0] for _, text in failures[:200])
    assert not failures, f"{len(failures)} of {count} seeds failed:\n{listing}\nfirst in full:\n{failures[0][1]}"


@pytest.mark.parametrize("seed", range(20))
def test_wire_codec_seeds(seed):
    """Every message of these runs goes through protocol/apis encode + decode and records through batch v2."""
    base = Simulation(seed).config
    simulation = Simulation(seed, SimConfig(**{**base.__dict__, "wire_codec": True, "hostile": None}))
    simulation.run()
    assert simulation.committed


@pytest.mark.parametrize("voters", [3, 5])
def test_five_and_three_voters_without_pre_vote(voters):
    for seed in range(40):
        base = Simulation(seed).config
        Simulation(seed, SimConfig(**{**base.__dict__, "voters": voters, "pre_vote": False, "hostile": None})).run()


def test_same_seed_same_run():
    first, second = Simulation(7), Simulation(7)
    first.run()
    second.run()
    assert (first.event_count, first.now, first.committed) == (second.event_count, second.now, second.committed)


def test_same_hostile_seed_same_run():
    seed = next(seed for seed in range(100) if random_sim_config(random.Random(seed ^ 0x5EED)).hostile)
    first, second = Simulation(seed), Simulation(seed)
    assert first.hostile is not None
    for simulation in (first, second):
        try:
            simulation.run()
        except InvariantViolation as exc:
            simulation.failure = str(exc)
    assert first.stats.get("hostile.sent", 0) > 0
    assert (first.event_count, first.now, first.committed, first.stats, getattr(first, "failure", None)) == (
        second.event_count, second.now, second.committed, second.stats, getattr(second, "failure", None))


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
        config = dataclasses.replace(Simulation(seed).config, hostile=None)
        try:
            Simulation(seed, config).run()
        except InvariantViolation as exc:
            assert exc.invariant == MAJORITY_REACHED_HIGH_WATERMARK, str(exc)
            caught += 1
    assert caught >= 10


def test_about_a_quarter_of_the_seeds_run_a_hostile_node():
    identities = [random_sim_config(random.Random(seed ^ 0x5EED)).hostile for seed in range(2000)]
    share = sum(identity is not None for identity in identities) / len(identities)
    assert 0.2 < share < 0.3
    assert {identity for identity in identities if identity} == set(HOSTILE_IDENTITIES)


@pytest.mark.parametrize("identity", HOSTILE_IDENTITIES)
def test_hostile_requests_reach_the_core_and_the_quorum_recovers(identity):
    """Guards the hostile node against becoming vacuous: many of its requests pass
    validation and are answered by the core, some are refused, and afterwards the
    quorum elects and commits (run() checks liveness after the hostile node stops)."""
    answered = refused = 0
    for seed in range(6):
        config = dataclasses.replace(SimConfig(), observers=1, fault_duration_ms=800, hostile=identity)
        simulation = Simulation(seed, config)
        simulation.run()
        stats = simulation.stats
        assert stats.get("hostile.sent", 0) >= 30
        answered += stats.get("hostile.answered", 0)
        refused += stats.get("hostile.refused", 0)
    assert answered >= 50 and refused >= 50, (answered, refused)
