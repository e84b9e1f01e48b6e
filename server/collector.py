"""Pausing CPython's cyclic garbage collector around work that builds a large image.

Owns: `CollectorHold` (off from `take()` to `release()`, across awaits and
batches) and `collector_paused` (off for a `with` block), the one way kraftwerk
turns the collector off for a while. Rules kept here: a hold only takes a
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


@contextmanager
def collector_paused(*, freeze_after: bool = False) -> Iterator[None]:
    """The collector off for the block (see `CollectorHold.release` for `freeze_after`)."""
    hold = CollectorHold()
    hold.take()
    try:
        yield
    finally:
        hold.release(freeze=freeze_after)
