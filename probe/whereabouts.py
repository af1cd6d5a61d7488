"""Where the training thread is right now, for the ``heartbeat`` record's ``where``.

Why: a hung multi-rank job shows only heartbeats and no steps on every rank; the rank
the others wait for is the one that is somewhere else. Ranks blocked in the gradient
all-reduce say ``backward``, the one stuck in its data loader says ``data_wait``. The
writer thread writes heartbeats while the training thread is blocked, so the training
thread has to leave its place behind before it blocks: this module is that note.

Who moves it: ``probe.loader()`` (``data_wait`` around ``next()``, then ``forward``, or
``compute`` when the probe has no model), a forward pre-hook on the model (``forward``),
the gradient hooks of ``gradnorm.py`` (``backward`` from the first gradient of a pass to
its end-of-backward callback, which under DDP runs after the all-reduce is waited for),
the optimizer's step pre/post hooks (``optimizer``) and ``Probe.step()`` (``after_step``).
``Probe.start()`` and ``close()`` say ``outside_loop``.

Cost: a move is two attribute stores on the training thread, a place (an interned
``str``) and a ``perf_counter()`` float; no lock, nothing else allocated. The writer
thread reads both and turns the stamp into Unix time (:meth:`Whereabouts.read`). A
heartbeat made between the two stores of one move pairs the new stamp with the old
place (a few bytecodes' window, the next heartbeat is right); a thread that is blocked
is never between them, and a blocked thread is what the field is for.
"""

from __future__ import annotations

import time
from time import perf_counter

from .schema import WHERE_AFTER_STEP as AFTER_STEP
from .schema import WHERE_BACKWARD as BACKWARD
from .schema import WHERE_COMPUTE as COMPUTE
from .schema import WHERE_DATA_WAIT as DATA_WAIT
from .schema import WHERE_FORWARD as FORWARD
from .schema import WHERE_OPTIMIZER as OPTIMIZER
from .schema import WHERE_OUTSIDE_LOOP as OUTSIDE_LOOP

__all__ = [
    "AFTER_STEP",
    "BACKWARD",
    "COMPUTE",
    "DATA_WAIT",
    "FORWARD",
    "OPTIMIZER",
    "OUTSIDE_LOOP",
    "Whereabouts",
]


class Whereabouts:
    """The training thread's current place and when it got there (``perf_counter``).

    ``in_step`` is true between the optimizer's step pre- and post-hooks: a closure
    (Lightning's, LBFGS) runs forward and backward inside ``optimizer.step()``, and the
    end of that backward is back in the optimizer step, not after it.
    """

    __slots__ = ("place", "since", "in_step", "_read_since", "_read_unix")

    def __init__(self) -> None:
        self.place = OUTSIDE_LOOP
        self.since = perf_counter()
        self.in_step = False
        # the writer thread's last conversion: one stay gives one `where_since`
        self._read_since = 0.0
        self._read_unix = 0.0

    def move(self, place: str, now: float | None = None) -> None:
        """Enter ``place`` (at ``now``, a ``perf_counter`` stamp the caller already took)."""
        self.since = perf_counter() if now is None else now
        self.place = place

    def forward(self) -> None:
        """A forward began: ``forward`` unless already there (keep its start) or in a
        backward (an activation-checkpointing recompute runs forwards inside it)."""
        place = self.place
        if place is not FORWARD and place is not BACKWARD:
            self.since = perf_counter()
            self.place = FORWARD

    def backward_ended(self, now: float) -> None:
        """The end-of-backward callback: back in the optimizer step when a closure ran it."""
        self.since = now
        self.place = OPTIMIZER if self.in_step else AFTER_STEP

    def step_begins(self, closure: bool) -> None:
        """The optimizer's step pre-hook; with a closure the forward/backward come first,
        each marking itself, so the place is left as it is until the backward ends."""
        self.in_step = True
        if not closure:
            self.since = perf_counter()
            self.place = OPTIMIZER

    def step_ended(self) -> None:
        """The optimizer's step post-hook."""
        self.in_step = False
        self.since = perf_counter()
        self.place = AFTER_STEP

    def read(self) -> tuple[str, float]:
        """``(place, Unix time it was entered)``, on the writer thread. The stamp is
        converted once per stay, so the heartbeats of one stay carry the same time."""
        place = self.place  # place first: a move in between pairs it with the new stamp
        since = self.since
        if since != self._read_since:
            self._read_since = since
            self._read_unix = time.time() - (perf_counter() - since)
        return place, self._read_unix
