"""The collector pause: taken only when on, given back only by who took it."""

from __future__ import annotations

import gc

import pytest

from server.collector import CollectorHold, collector_paused


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
