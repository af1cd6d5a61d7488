"""Does the loss oscillate? Slow waves of the smoothed loss, or a step-to-step two-cycle.

Judged on block medians, never single steps: per-step losses of small batches are too
noisy to say anything. (Plateau: rules/plateau.py; overfitting: rules/overfitting.py.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from operator import mul, sub
from typing import TYPE_CHECKING

from ..text.fmt import number as fmt
from .alerts import WARNING
from .base import Rule, Tracker
from .window import finite_losses

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


class Oscillation(Rule):
    """The smoothed loss swings up and down by a large factor, repeatedly.

    Two signatures: slow waves (the median of ``block``-step blocks reverses direction
    ``min_swings`` times, each swing at least ``amplitude`` of the lower level and
    ``noise_factor`` times the block-median noise), and a step-to-step two-cycle (strongly
    negative lag-1 autocorrelation around the block means). A monotone descent, however
    noisy, has no reversals that clear both bars.
    """

    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        c = self.settings("oscillation")
        self.block = max(3, int(c["block"]))
        self.nblocks = max(6, int(c["blocks"]))
        self.min_blocks = max(4, int(c["min_blocks"]))
        self.amp = float(c["amplitude"])
        self.noise_k = float(c["noise_factor"])
        self.min_swings = int(c["min_swings"])
        self.autocorr = float(c["autocorr"])
        self.checks = max(1, int(c["checks"]))
        self.tr = Tracker(engine, "oscillation")
        self.cur: list[float] = []
        n = self.nblocks
        self.meds: deque[float] = deque(maxlen=n)
        self.noise: deque[float] = deque(maxlen=n)  # per-block noise of a single step
        self.ac: deque[tuple[float, float]] = deque(
            maxlen=n
        )  # per block: lag-1 sum, sum of squares
        self.ac_num = 0.0  # their running totals over the window
        self.ac_den = 0.0
        self.start: deque[int] = deque(maxlen=n)
        self.hits = 0
        self.hit_start = 0  # step of the first judgement in the current run of hits
        self.closed = 0

    def alert_trackers(self) -> list[Tracker]:
        return [self.tr]

    def on_block(self, e: EngineState, blk: Block) -> None:
        if not self.on:
            return
        steps, losses = finite_losses(blk)
        pos, n = 0, len(losses)
        while pos < n:
            if not self.cur:
                self.start.append(steps[pos])
            chunk = losses[pos : pos + self.block - len(self.cur)]
            self.cur.extend(chunk)
            pos += len(chunk)
            if len(self.cur) >= self.block:
                self._close(e, steps[pos - 1])

    def _close(self, e: EngineState, step: int) -> None:
        # map() over operator functions instead of comprehensions over zip(): this runs
        # for every `block` losses (twice per engine block by default); the same
        # operations on the same operands in the same order, so the same floats
        c = self.cur
        self.cur = []
        s = sorted(c)
        self.meds.append(s[len(s) // 2])
        diffs = sorted(map(abs, map(sub, c[1:], c)))  # |c[i+1] - c[i]|
        self.noise.append(1.4826 * diffs[len(diffs) // 2] / 1.4142)
        m = sum(c) / len(c)
        d = [x - m for x in c]
        lag = sum(map(mul, d, d[1:]))  # d[i] * d[i+1], summed left to right
        sq = sum(map(mul, d, d))
        if len(self.ac) == self.ac.maxlen:
            old_lag, old_sq = self.ac[0]
            self.ac_num -= old_lag
            self.ac_den -= old_sq
        self.ac.append((lag, sq))
        self.ac_num += lag
        self.ac_den += sq
        self.closed += 1
        if len(self.meds) >= self.min_blocks and self.closed % 4 == 0:
            self._judge(e, step)

    def _judge(self, e: EngineState, step: int) -> None:
        num, den = self.ac_num, self.ac_den
        ac = num / den if den > 0 else None
        # neither signature can hold without a two-cycle and with no two block medians far
        # enough apart for one swing: the usual healthy window, judged without the zigzag
        # walk (and, when the range alone tells, without the sorts); nothing they give is
        # read below then
        quiet = not (ac is not None and ac <= self.autocorr) and self.min_swings > 0
        slow = fast = False
        if not quiet or not no_swing(self.meds, self.amp, 0.0):
            noise = sorted(self.noise)[len(self.noise) // 2] * 1.2533 / self.block**0.5
            floor = self.noise_k * noise
            if not quiet or not no_swing(self.meds, self.amp, floor):
                meds = list(self.meds)
                swings = _swings(meds, self.amp, floor)
                level = sorted(meds)[len(meds) // 2]
                rms = (den / (len(self.ac) * self.block)) ** 0.5
                slow = swings >= self.min_swings
                fast = (
                    ac is not None
                    and ac <= self.autocorr
                    and level > 0
                    and rms >= self.amp / 3 * level
                )
        if (slow or fast) and not e.in_grace:
            if self.hits == 0:
                self.hit_start = step
            self.hits += 1
        else:
            self.hits = 0
            if self.tr.active:
                self.tr.clear(step)
            return
        if self.hits >= self.checks:
            span = len(meds) * self.block
            ev = {
                "swings": swings,
                "amplitude": self.amp,
                "block_noise": noise,
                "level": level,
                "lag1_autocorr": ac,
                "window": span,
                "lr": e.lr,
            }
            if slow:
                lo, hi = min(meds), max(meds)
                msg = (
                    f"{swings} swings of the smoothed loss in {span} steps, each >= {fmt(100 * self.amp)} % "
                    f"(range {fmt(lo)} .. {fmt(hi)})"
                )
            else:
                msg = f"the loss alternates up/down step to step (lag-1 autocorrelation {fmt(ac)}) over {span} steps"
            ev["window_start"] = self.start[0]
            self.tr.fire(self.hit_start, WARNING, "Loss oscillates", msg, ev, t=e.t, refresh=True)
            self.tr.hold(step)


def no_swing(xs: Iterable[float], rel: float, floor: float) -> bool:
    """Whether :func:`_swings` (``xs``, ``rel``, ``floor``) must count 0, from the values'
    range alone: every move it counts is more than 0, at least ``floor``, at most the
    range (float subtraction is monotonic) and at least ``rel`` times the magnitude of one
    of the values, so at least ``rel`` times the smallest. C-level passes, not the walk."""
    lo, hi = min(xs), max(xs)
    reach = hi - lo
    if not reach > 0 or reach < floor:
        return True
    return reach < rel * (lo if lo >= 0 else min(map(abs, xs)))


def _swings(xs: list[float], rel: float, floor: float) -> int:
    """Reversals of direction (a zigzag with hysteresis); a move counts when it is at least
    ``rel`` of the lower of its two ends and at least ``floor``."""
    if len(xs) < 3:
        return 0
    count, direction = 0, 0
    hi = lo = extreme = xs[0]
    # a move clears both bars and is a move at all (m > 0): a loss that is exactly
    # constant (0, or any value, noise 0) makes both bars 0 and must not count every
    # step as a swing. Inlined: this runs every few steps over the whole window.
    for x in xs[1:]:
        if direction == 0:
            if x > hi:
                hi = x
            elif x < lo:
                lo = x
            m = hi - lo
            if m > 0 and m >= floor and m >= rel * abs(lo):
                direction, extreme = (1, x) if x == hi else (-1, x)
        elif direction == 1:
            if x > extreme:
                extreme = x
            else:
                m = extreme - x
                if m > 0 and m >= floor and m >= rel * abs(x):
                    count, direction, extreme = count + 1, -1, x
        elif x < extreme:
            extreme = x
        else:
            m = x - extreme
            if m > 0 and m >= floor and m >= rel * abs(extreme):
                count, direction, extreme = count + 1, 1, x
    return count
