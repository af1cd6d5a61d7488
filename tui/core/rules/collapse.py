"""A loss that sits at exactly 0, or at one constant value to the log's precision.

Why a rule of its own: such a run looks calm to every other rule (no spike, no NaN, a
plateau "100 % below the start"), yet it is broken. A classification or language-model
loss is exactly 0 only when every training target is predicted with certainty: labels
leaked into the inputs, a constant label, every label masked (ignore_index) so the loss
is an empty sum. A loss that repeats one value to full precision means nothing moves:
lr 0, frozen parameters, a loss that does not depend on them, a model that outputs a
constant (an MSE of 0.25 for targets 0/1).

When: the run has spent **more steps in that state than it took to get there** (in steps,
not records), with at least ``min_records`` records in it. That one principle spares a
long healthy memorisation that reaches 0 near its end (it got there slowly) and names a
classifier that "learned" in ten steps at once. Exactly zero: at least half the losses
logged since the first exact zero are exactly zero (rounded logs print 0.0 below 5e-5;
values such as 0.0001 in between are rounding, not learning). Constant: consecutive
losses within ``rel_tol`` (1e-4) of each other, where the log's own decimals can tell
that much (a value logged to 4 decimals, 0.0002, cannot); a value below ``floor_ratio``
of the starting loss is left to the zero test, since rounding makes it repeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..text.fmt import number as fmt
from .alerts import WARNING
from .base import Rule, Tracker
from .window import finite_losses, median_of

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

QUANTUM_SAMPLES = 256  # losses read to learn how many decimals the log keeps
MAX_DECIMALS = 12  # beyond this a value counts as full precision


def decimals(x: float) -> int:
    """How many decimals ``x`` was logged with (``MAX_DECIMALS`` for full precision)."""
    for k in range(MAX_DECIMALS):
        if round(x, k) == x:
            return k
    return MAX_DECIMALS


class LossCollapse(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("loss_collapsed")
        self.min_records = max(2, int(c["min_records"]))
        self.rel_tol = float(c["rel_tol"])
        self.floor_ratio = float(c["floor_ratio"])
        self.tr = Tracker(engine, "loss_collapsed")
        self.first_step: int | None = None
        self.start: list[float] = []  # the first losses: the run's starting level
        self.places = 0  # the most decimals seen among the first losses
        self.sampled = 0
        # exactly zero: since the first exact zero, how many losses and how many zeros
        self.zero_from: int | None = None
        self.zeros = 0
        self.since_zero = 0
        # the current stretch of (near) equal losses: its first step, size and range
        self.c_from: int | None = None
        self.c_n = 0
        self.c_lo = self.c_hi = 0.0

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, b: Block) -> None:
        if not self.on:
            return
        steps, losses = finite_losses(b)
        if (
            self.sampled >= QUANTUM_SAMPLES
            and len(self.start) >= 3
            and self.first_step is not None
            and 0.0 not in losses
        ):
            self._stretch(steps, losses)  # the usual block: the same state as _take's
        else:
            for step, x in zip(steps, losses, strict=True):
                self._take(step, x)
        if steps:
            self._judge(e, steps[-1])

    def _stretch(self, steps: list[int], losses: list[float]) -> None:
        """The count since the first zero and the stretch of equal losses (it goes on while
        the range stays within rel_tol); the whole of ``_take`` for a block without a zero
        once the start and the decimals are known. State in locals: this runs for every
        loss of a long run."""
        if self.zero_from is not None:
            self.since_zero += len(losses)
        c_from, c_n, c_lo, c_hi, tol = self.c_from, self.c_n, self.c_lo, self.c_hi, self.rel_tol
        for step, x in zip(steps, losses, strict=True):
            lo = x if x < c_lo else c_lo  # min(c_lo, x): the first of equals
            hi = x if x > c_hi else c_hi  # max(c_hi, x)
            ref = abs(c_lo) if c_n else 0.0
            if c_n and (hi == lo or (ref > 0 and hi - lo <= tol * ref)):
                c_lo, c_hi = lo, hi
                c_n += 1
            else:
                c_from, c_n, c_lo, c_hi = step, 1, x, x
        self.c_from, self.c_n, self.c_lo, self.c_hi = c_from, c_n, c_lo, c_hi

    def _take(self, step: int, x: float) -> None:
        if self.first_step is None:
            self.first_step = step
        if len(self.start) < 3:
            self.start.append(x)
        if self.sampled < QUANTUM_SAMPLES:
            self.sampled += 1
            self.places = max(self.places, decimals(x))
        if x == 0.0:
            if self.zero_from is None:
                self.zero_from = step
            self.zeros += 1
        self._stretch([step], [x])

    def _judge(self, e: EngineState, step: int) -> None:
        first = self.first_step
        if first is None:
            return
        zero = (
            self.zero_from is not None
            and self.zeros >= self.min_records
            and 2 * self.zeros >= self.since_zero
            and step - self.zero_from >= self.zero_from - first
        )
        value = self.c_lo
        # the cheap conditions first: the start level and the decimals are worked out
        # only for a stretch long enough to count (most blocks end before them)
        constant = (
            not zero
            and self.c_from is not None
            and self.c_n >= self.min_records
            and value != 0.0
            and step - self.c_from >= self.c_from - first
            and 10.0**-self.places <= 1e-3 * abs(value)  # precise: the losses' decimals
            and abs(value) >= self.floor_ratio * abs(median_of(self.start) or 0.0)
        )
        if zero or constant:
            self._fire(e, step, "zero" if zero else "constant", median_of(self.start) or 0.0)
        elif self.tr.active:
            self.tr.clear(step)

    def _fire(self, e: EngineState, step: int, what: str, start: float) -> None:
        first = self.first_step or 0
        span = max(1, step - first)
        ev: dict[str, Any]
        if what == "zero":
            since = self.zero_from if self.zero_from is not None else step
            share = (step - since) / span
            ev = {
                "value": 0.0,
                "since_step": since,
                "records": self.since_zero,
                "zero_records": self.zeros,
                "share_of_run": share,
                "loss_first": start,
            }
            msg = (
                f"the loss is exactly 0 at {self.zeros} of the {self.since_zero} losses logged "
                f"since step {since} ({fmt(100 * share)} % of the run), down from "
                f"{fmt(self.start[0] if self.start else start)}: "
                "every training target is predicted with certainty"
            )
            title = "Loss collapsed to exactly 0"
        else:
            since = self.c_from if self.c_from is not None else step
            share = (step - since) / span
            ev = {
                "value": self.c_lo,
                "range": self.c_hi - self.c_lo,
                "since_step": since,
                "records": self.c_n,
                "share_of_run": share,
                "loss_first": start,
            }
            spread = self.c_hi - self.c_lo
            within = f"within {fmt(spread)}" if spread else "exactly"
            msg = (
                f"the loss has stayed at {fmt(self.c_lo)} ({within}) for {self.c_n} losses "
                f"since step {since} ({fmt(100 * share)} % of the run): nothing is moving"
            )
            title = "Loss stuck at one value"
        ev["lr"] = e.lr
        self.tr.fire(since, WARNING, title, msg, ev, t=e.t, refresh=True)
        self.tr.hold(step)
