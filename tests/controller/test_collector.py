"""The collector pause: taken only when on, given back only by who took it; a
serving process's young-generation threshold."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest

import cli.main
from server.collector import SERVING_YOUNG_GENERATION_OBJECTS, CollectorHold, collector_paused, use_serving_thresholds


@pytest.fixture
def thresholds_kept():
    was = gc.get_threshold()
    yield was
    gc.set_threshold(*was)


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_block_turns_the_collector_off_and_back_on_even_when_it_fails(collector_on):
    with pytest.raises(RuntimeError):
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("the work failed")
    assert gc.isenabled()


def test_a_nested_pause_leaves_the_outer_one_in_charge(collector_on):
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_hold_gives_back_only_what_it_took(collector_on):
    outer, inner = CollectorHold(), CollectorHold()
    outer.take()
    inner.take()  # the collector was already off: nothing taken
    inner.release()
    assert not gc.isenabled()
    outer.take()  # taking twice is one hold
    outer.release()
    assert gc.isenabled()
    outer.release()
    assert gc.isenabled()


def test_freezing_after_moves_what_is_alive_out_of_the_collectors_walk(collector_on):
    gc.unfreeze()
    try:
        kept = [{"partition": index} for index in range(1000)]
        with collector_paused(freeze_after=True):
            kept.append({"late": True})
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_serving_thresholds_raise_the_young_generations_and_keep_the_older_ones(thresholds_kept):
    gc.set_threshold(700, 11, 12)
    replaced = use_serving_thresholds()
    assert replaced == (700, 11, 12)
    assert gc.get_threshold() == (SERVING_YOUNG_GENERATION_OBJECTS, 11, 12)
    assert SERVING_YOUNG_GENERATION_OBJECTS > 700


def test_a_node_the_command_line_serves_runs_with_the_serving_thresholds(thresholds_kept, monkeypatch):
    gc.set_threshold(700, 10, 10)
    seen = []
    # trio.run stands in for the node's lifetime: what the collector is set to while it runs.
    monkeypatch.setattr(cli.main.trio, "run", lambda *args: seen.append(gc.get_threshold()))
    node = SimpleNamespace(run=None, config=SimpleNamespace(node_id=1))
    assert cli.main._serve_node(node, None, None, RuntimeError, None) == cli.main.EXIT_OK
    assert seen == [(SERVING_YOUNG_GENERATION_OBJECTS, 10, 10)]
