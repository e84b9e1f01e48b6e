"""Pausing CPython's cyclic garbage collector around work that builds a large image.

Owns: `CollectorHold` (off from `take()` to `release()`, across awaits and
batches) and `collector_paused` (off for a `with` block), the one way kraftwerk
turns the collector off for a while; and `use_serving_thresholds`, how often a
serving process collects its youngest generation. Rules kept here: a hold only takes a
collector that is on, and gives back only what it took (a caller nested in
another pause, or a process that runs without the collector, keeps it off); a
`with` block gives it back even when the work fails.

Why pausing is safe where it is used: the work (replaying records, copying a
ZooKeeper image) makes no reference cycles, so reference counting frees what
it drops and one collection after it finds the same garbage; what the pause
saves is the young generations running over and over and the old ones walking
the whole image while it grows.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

# Net new container objects between two collections of the youngest generation in a
# serving process (CPython's default is 700). Whatever is alive when the middle
# generation is collected (every ten young collections) moves to the old one and is
# walked again by the next full collection. A serving node's young objects that live
# at all live for a round trip or a long poll: requests in flight, the trio machinery
# of tasks parked on sockets and events. With 700, a middle collection comes every few
# milliseconds of work and promotes nearly all of them, only for them to die soon
# after as old garbage. Ten times fewer young collections mean ten times fewer middle
# ones, each promoting about what one does now, and the full collections those
# promotions trigger come that much less often (bench_brokers.py fanout, 300 brokers
# in one process: ~0.5 s of collector per step becomes ~0.1 s, with no full
# collection). What this costs: cyclic garbage waits up to this many allocations to be
# found, and each young collection, ten times rarer, does ten times the work at once
# (in that bench ~15-25 ms a pause instead of ~0.5 ms; larger thresholds gained
# nothing more there and paused for ~70 ms).
SERVING_YOUNG_GENERATION_OBJECTS = 7_000


class CollectorHold:
    """The collector off from `take()` until `release()`."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = False

    def take(self) -> None:
        if not self.held and gc.isenabled():
            gc.disable()
            self.held = True

    def release(self, *, freeze: bool = False) -> None:
        """Gives the collector back if this hold took it. `freeze`: what is alive now
        moves to the permanent generation first (`gc.freeze`), for an image that lives
        as long as the process, as cli/main.py does with the start-up heap; only cyclic
        garbage made while held then outlives its use, once."""
        if not self.held:
            return
        self.held = False
        if freeze:
            gc.freeze()
        gc.enable()


def use_serving_thresholds() -> tuple[int, int, int]:
    """Sets the youngest generation's threshold of a serving process
    (`SERVING_YOUNG_GENERATION_OBJECTS`), keeping the older generations' own; returns
    the thresholds it replaced, for a caller that gives them back."""
    before = gc.get_threshold()
    gc.set_threshold(SERVING_YOUNG_GENERATION_OBJECTS, before[1], before[2])
    return before


@contextmanager
def collector_paused(*, freeze_after: bool = False) -> Iterator[None]:
    """The collector off for the block (see `CollectorHold.release` for `freeze_after`)."""
    hold = CollectorHold()
    hold.take()
    try:
        yield
    finally:
        hold.release(freeze=freeze_after)
