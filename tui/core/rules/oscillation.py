"""Does the loss oscillate? Slow waves of the smoothed loss, or a step-to-step two-cycle.

Judged on block medians, never single steps: per-step losses of small batches are too
noisy to say anything. (Plateau: rules/plateau.py; overfitting: rules/overfitting.py.)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain
from typing import TYPE_CHECKING, NamedTuple

from ..text.fmt import number as fmt
from .alerts import WARNING
from .base import Rule, Tracker
from .oscillation_batch import group_stats, group_stats_many, slide
from .window import finite_losses

if TYPE_CHECKING:
    from .deferred import Closed
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
        c = self.cur
        self.cur = []
        self._push(*group_stats(c))
        if len(self.meds) >= self.min_blocks and self.closed % 4 == 0:
            self._judge(e, step)

    def _push(self, med: float, noise: float, lag: float, sq: float) -> None:
        self.meds.append(med)
        self.noise.append(noise)
        if len(self.ac) == self.ac.maxlen:
            old_lag, old_sq = self.ac[0]
            self.ac_num -= old_lag
            self.ac_den -= old_sq
        self.ac.append((lag, sq))
        self.ac_num += lag
        self.ac_den += sq
        self.closed += 1

    def on_blocks(self, e: EngineState, blocks: Sequence[Closed]) -> int:
        """``on_block`` over many blocks: the groups' statistics in one numpy pass, then the
        windows slid and judged close by close as ``_push`` and ``_judge`` do, on copies,
        up to the first block where a judgement would raise the alert (or the end); what
        came before it is kept. Nothing is taken while an alert is up (judging clears it)."""
        if not self.on:
            return len(blocks)
        if self.tr.active:
            return 0
        steps = list(chain.from_iterable(c.blk.steps for c in blocks))
        losses = list(chain.from_iterable(c.blk.loss for c in blocks))
        if None in losses:  # non-finite losses (kept as None) are not in the groups
            kept = [(s, x) for s, x in zip(steps, losses, strict=True) if x is not None]
            steps, losses = [p[0] for p in kept], [p[1] for p in kept]
            ends = list(accumulate(len(c.blk.loss) - c.blk.loss.count(None) for c in blocks))
        else:
            ends = list(accumulate(len(c.blk.loss) for c in blocks))  # finite losses so far
        b, n = self.block, self.nblocks
        cur0 = len(self.cur)
        values = self.cur + losses
        groups = len(values) // b
        meds, noise, lags, sqs = group_stats_many(values[: groups * b], b)
        old_meds, old_noise = list(self.meds), list(self.noise)
        filled = len(old_meds)
        # the closes judged: every 4th, once the window holds min_blocks
        first = max(0, self.min_blocks - filled - 1)
        first += (-(self.closed + first + 1)) % 4
        at_judge = list(range(first, groups, 4)) if self.min_blocks <= n else []
        # ... and for those with a full window, whether the window's range alone says
        # "nothing" (most of a healthy run), in one pass
        nums, dens, quiet = slide(self, old_meds + meds, old_noise + noise, lags, sqs, at_judge)
        hits, hit_start = self.hits, self.hit_start
        judged: list[tuple[int, int, int]] = []  # (close, hits, hit_start) after the others
        stop = groups  # the close whose judgement raises the alert
        prev = -1
        for i in [i for i, q in enumerate(quiet) if not q]:
            if i > prev + 1:
                hits = 0  # a judgement in between found nothing
            prev = i
            j = at_judge[i]
            size = min(n, filled + j + 1)
            lo = filled + j + 1 - size  # the window: values lo.. of old + new
            found = self._assess(
                old_meds[lo:] + meds[max(0, lo - filled) : j + 1],
                old_noise[lo:] + noise[max(0, lo - filled) : j + 1],
                nums[j],
                dens[j],
                size,
            )
            at = (j + 1) * b - 1 - cur0  # the close's last loss, among `losses`
            if found is not None and not blocks[bisect_right(ends, at)].in_grace:
                if hits == 0:
                    hit_start = steps[at]
                hits += 1
                if hits >= self.checks:
                    stop = j
                    break
            else:
                hits = 0
            judged.append((j, hits, hit_start))
        # the blocks before the one where that close falls are taken
        taken = len(blocks)
        if stop < groups:
            taken = bisect_right(ends, (stop + 1) * b - 1 - cur0)
        total = cur0 + (ends[taken - 1] if taken else 0)  # values taken
        closes = total // b
        if closes:
            self.meds.extend(meds[:closes])
            self.noise.extend(noise[:closes])
            self.ac.extend(zip(lags[:closes], sqs[:closes], strict=True))
            self.ac_num, self.ac_den = nums[closes - 1], dens[closes - 1]
            self.closed += closes
            last = bisect_left(at_judge, closes) - 1  # the last judgement taken
            if last >= 0:
                j_last = at_judge[last]
                self.hits = 0
                for j, h, hs in reversed(judged):
                    if j <= j_last:
                        self.hit_start = hs
                        if j == j_last:
                            self.hits = h
                        break
        # the step each group begins at (one begun before these blocks has its start)
        skip = 0 if cur0 == 0 else b - cur0
        self.start.extend(steps[skip : total - cur0 : b])
        self.cur = values[closes * b : total]
        return taken

    def _assess(
        self, meds: Sequence[float], noise: Iterable[float], num: float, den: float, size: int
    ) -> _Found | None:
        """What the windows show (``size`` blocks, their lag-1 and squares sums): None when
        neither signature holds. Neither can without a two-cycle and with no two block
        medians far enough apart for one swing: the usual healthy window, judged without
        the zigzag walk (and, when the range alone tells, without the sorts)."""
        ac = num / den if den > 0 else None
        quiet = not (ac is not None and ac <= self.autocorr) and self.min_swings > 0
        if quiet and no_swing(meds, self.amp, 0.0):
            return None
        ns = sorted(noise)
        level_noise = ns[len(ns) // 2] * 1.2533 / self.block**0.5
        floor = self.noise_k * level_noise
        if quiet and no_swing(meds, self.amp, floor):
            return None
        window = list(meds)
        swings = _swings(window, self.amp, floor)
        level = sorted(window)[len(window) // 2]
        rms = (den / (size * self.block)) ** 0.5
        slow = swings >= self.min_swings
        fast = ac is not None and ac <= self.autocorr and level > 0 and rms >= self.amp / 3 * level
        if not (slow or fast):
            return None
        return _Found(slow, swings, level_noise, level, ac, window)

    def _judge(self, e: EngineState, step: int) -> None:
        found = self._assess(self.meds, self.noise, self.ac_num, self.ac_den, len(self.ac))
        if found is not None and not e.in_grace:
            if self.hits == 0:
                self.hit_start = step
            self.hits += 1
        else:
            self.hits = 0
            if self.tr.active:
                self.tr.clear(step)
            return
        if self.hits >= self.checks:
            meds, swings, ac = found.meds, found.swings, found.ac
            span = len(meds) * self.block
            ev = {
                "swings": swings,
                "amplitude": self.amp,
                "block_noise": found.noise,
                "level": found.level,
                "lag1_autocorr": ac,
                "window": span,
                "lr": e.lr,
            }
            if found.slow:
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


class _Found(NamedTuple):
    """A judgement's finding: which signature, and the numbers the alert shows."""

    slow: bool
    swings: int
    noise: float
    level: float
    ac: float | None
    meds: list[float]


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
