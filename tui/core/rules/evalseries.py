"""One evaluation set's series, and what a few noisy evaluations allow to be said of it.

Split from ``overfitting.py``: the rule judges (its two stages, its alerts and their
wording); this is what it judges from: each set's history of evaluations (``EvalSet``)
and the statistics of a short, noisy series (the noise from finite differences, how lucky
the best of n is, the t a trend must reach, centred medians). None of it knows an alert
or the engine, so it reads and tests on its own.
"""

from __future__ import annotations

import math

from .window import midpoint

# one evaluation: (step, eval loss, train loss at that step)
Evaluation = tuple[int | None, float, float | None]
RECENT = 64  # evaluations a judgement reads
NOISE_EVALS = 5  # evaluations from which their noise can be measured (3 second differences)


class EvalSet:
    """One evaluation set's history: (step, eval loss, train loss at that step)."""

    __slots__ = ("name", "evals", "best", "trained")

    def __init__(self, name: str) -> None:
        self.name = name
        self.evals: list[Evaluation] = []
        self.best: int | None = None  # index into evals
        self.trained = -1  # the engine's step count at the last evaluation

    @property
    def last(self) -> Evaluation | None:
        return self.evals[-1] if self.evals else None

    def recent(self) -> tuple[list[Evaluation], list[float]]:
        """The last ``RECENT`` evaluations, and their eval losses alone."""
        evs = self.evals[-RECENT:]
        return evs, [x[1] for x in evs]

    def add(self, item: Evaluation, trained: int) -> None:
        """``trained``: steps the engine has seen so far (an evaluation at the same step
        with no training step between is the same checkpoint evaluated again)."""
        last = self.last
        again = trained == self.trained and trained > 0
        self.trained = trained
        if again and last is not None and item[0] is not None and item[0] == last[0]:
            # the same checkpoint evaluated again (a Trainer's final evaluate() after its
            # last in-loop one): one evaluation, the latest value, not a second data point
            # that makes a level look like a trend
            self.evals[-1] = item
            self.best = None  # found again below (the replaced one may have been the best)
        else:
            self.evals.append(item)
        if len(self.evals) > 512:
            keep = self.evals[self.best] if self.best is not None else None
            self.evals = self.evals[-256:]
            if keep is not None and keep not in self.evals:
                self.evals.insert(0, keep)
            self.best = None
        if self.best is None:
            self.best = min(range(len(self.evals)), key=lambda i: self.evals[i][1])
        elif item[1] < self.evals[self.best][1]:
            self.best = len(self.evals) - 1


def centred_medians(raw: list[float]) -> list[float]:
    """Each evaluation's median with its two neighbours (one at either end), written out:
    the same floats as ``median_of`` of each slice, without a sort per evaluation (this
    runs on every evaluation, over the last RECENT of them)."""
    n = len(raw)
    if n < 2:
        return [raw[0] or 0.0] if n else []
    # ``or 0.0``: as the slices' medians were taken (``median_of(...) or 0.0``), a -0.0 is 0.0
    out = [midpoint(raw[0], raw[1]) or 0.0]
    for x, y, z in zip(raw, raw[1:], raw[2:], strict=False):
        # the middle of a stable sort of three (equal values keep their order, as in
        # sorted(): 0.0 and -0.0 are equal and must come out as sorted() leaves them)
        if y < x:
            x, y = y, x
        if z < y:
            y = x if z < x else z
        out.append(y or 0.0)
    out.append(midpoint(raw[-2], raw[-1]) or 0.0)
    return out


def luck_sigmas(n: int) -> float:
    """How many noise sigmas the best of ``n`` noisy values lies below the level they
    were drawn from, about sqrt(2 ln n): the luckiest draw."""
    return math.sqrt(2 * math.log(n)) if n > 1 else 0.0


# Student's t at one-sided 97.5 % (the "t >= 2" of a long series) for 1..30 degrees of
# freedom: a slope through 4 noisy evaluations reaches t = 2 by chance about one time in
# ten (df 2), so "a real upward trend" needs the t a sample that small must clear
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_critical(df: int) -> float:
    """The t a least-squares slope with ``df`` degrees of freedom must reach to be a trend
    (one-sided 97.5 %; 2.0 past 30, where the old fixed bar was right)."""
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 2.0


# finite differences of order 2 (coefficients 1, -2, 1) and 3 (-1, 3, -3, 1): the sigma
# of one of them over independent noise of sigma 1 (the root of the sum of the squared
# coefficients)
_DIFF_SIGMA = {2: 6**0.5, 3: 20**0.5}


def eval_noise(raw: list[float]) -> float:
    """One evaluation's noise for both stages: from second differences, and from 6
    evaluations on the smaller of that and the third-difference estimate."""
    noise = diff_noise(raw)
    return min(noise, diff_noise(raw, order=3)) if len(raw) >= 6 else noise


def diff_noise(raw: list[float], order: int = 2) -> float:
    """One evaluation's noise (sigma), from the median absolute difference of ``order``:
    second differences are not inflated by a steady trend, third differences not by the
    bend of a descent that levels off either (second differences read that bend as noise,
    and the early stage asks exactly where a descent levels off). 0 with fewer than 3
    differences to go by."""
    scale = _DIFF_SIGMA[order]
    # the differences written out, summed left to right (the same floats as a sum over the
    # coefficients), in one pass of zip: this runs on every evaluation
    if order == 2:
        d = sorted([abs(a - 2 * b + c) for a, b, c in zip(raw, raw[1:], raw[2:], strict=False)])
    else:
        d = sorted(
            [
                abs(-a + 3 * b - 3 * c + x)
                for a, b, c, x in zip(raw, raw[1:], raw[2:], raw[3:], strict=False)
            ]
        )
    return 1.4826 * d[len(d) // 2] / scale if len(d) >= 3 else 0.0
