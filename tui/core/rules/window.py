"""Rolling statistics over bounded windows, cheap enough to run on every step.

A median over the last 100 values costs a sort; doing it per step would cap the engine
near 100 k steps/s. The windows here recompute their order statistics eagerly every
``refresh`` pushes instead, so a rule compares each new value against a median at most
``refresh`` steps old. Recomputing at fixed push counts (never lazily on a query) keeps
the engine deterministic: a viewer asking for facts at random moments cannot change
what the rules decide.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar, cast

from ....probe.schema import Records

T = TypeVar("T")


_INF = math.inf


def midpoint(a: float, b: float) -> float:
    """Half-way between two values (a median of an even count): ``0.5 * (a + b)``, to the
    bit, except where the sum overflows and both are finite (two values near 1e308, from a
    hostile or broken log): then they are halved before they are added, a finite number
    instead of an inf. Not halved first always: halving a subnormal loses its last bit
    (the two middle values 5e-324 and 5e-324 would have a median of 0.0)."""
    m = 0.5 * (a + b)
    if m == _INF or m == -_INF:  # overflowed, or one of them is infinite (then the same inf)
        return 0.5 * a + 0.5 * b
    return m


def median_of_sorted(s: Sequence[float]) -> float:
    """The median of values already sorted (at least one): the middle one, or the
    :func:`midpoint` of the two middle ones. Every median of the rules is this one."""
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else midpoint(s[mid - 1], s[mid])


def median_of(values: Iterable[float]) -> float | None:
    """Median of a finite collection, ``None`` when empty."""
    s = sorted(values)
    return median_of_sorted(s) if s else None


def quantile_of(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank quantile (q in [0, 1]); ``None`` when empty."""
    s = sorted(values)
    if not s:
        return None
    i = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[i]


def present(values: list[float | None]) -> list[float]:
    """The values that are not None: the list itself when none is (no copy at each block
    end; the engine's Block starts new lists when it is cleared, never reuses them)."""
    if None not in values:
        return cast(list[float], values)
    return [x for x in values if x is not None]


def slide_sorted(win: deque[float], s: list[float], new: list[float]) -> None:
    """Append ``new`` to the bounded window ``win`` and keep ``s`` equal to ``sorted(win)``.

    Why: sorting a 100-value window of scattered float objects at every block end is most
    of what the figures cost; the window changes by one block's values, so dropping the
    values that leave and merging the new ones in (timsort finds the sorted run) is
    cheaper. The list is the one ``sorted(win)`` gives, equal values included in the same
    order (both keep the older first, the sort is stable). So the value leaving, the
    oldest in the window, is the first of its equals in ``s`` (``0.0`` and ``-0.0`` are
    equals too): ``bisect_left`` finds it by position. Not by identity: compiled code
    (``DLTOP_COMPILE``, docs/viewer.md) does not keep a float's identity. The values must
    not be NaN (bisect needs an order); the callers push finite values only.
    """
    maxlen = win.maxlen
    leaving = len(win) + len(new) - maxlen if maxlen is not None else 0
    if len(s) != len(win) or (maxlen is not None and len(new) >= maxlen):
        win.extend(new)  # a window changed behind our back, or replaced whole: sort it
        s[:] = sorted(win)
        return
    for j in range(leaving):
        del s[bisect_left(s, win[j])]
    win.extend(new)
    s += new
    s.sort()


def take_every(
    sample: list[T], n: int, pick: Callable[[int], T], taken: int, stride: int, cap: int
) -> tuple[int, int]:
    """A run's even sample, ``n`` new values at a time; returns the new ``(taken, stride)``.

    The sample holds every ``stride``-th value of the run (by its count since the start);
    at ``cap`` values it keeps every other one and the stride doubles. Why not one value
    at a time: once a run is long, a block of ten values holds no pick at all, so this
    steps from one pick to the next (``pick(j)`` makes the j-th new value) instead of
    counting each value in Python; the sample is the same value for value
    (``tests/rules/test_rules_sorted_windows.py`` holds it to the one-at-a-time loop)."""
    i = 0
    while True:
        j = ((taken + i) // stride + 1) * stride - taken - 1  # the next count divisible
        if j >= n:
            return taken + n, stride
        sample.append(pick(j))
        if len(sample) >= cap:
            del sample[1::2]
            stride *= 2
        i = j + 1


def finite_losses(blk: Block) -> tuple[list[int], list[float]]:
    """The block's steps and losses without the non-finite ones (kept as None)."""
    if None not in blk.loss:
        return blk.steps, blk.loss  # type: ignore[return-value]
    pairs = [(s, x) for s, x in zip(blk.steps, blk.loss, strict=True) if x is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


class Rolling:
    """The last ``size`` values with a median (and optional quantile) refreshed every ``refresh`` pushes."""

    __slots__ = ("values", "refresh", "q", "median", "quantile", "_count")

    def __init__(self, size: int, refresh: int = 10, q: float | None = None) -> None:
        self.values: deque[float] = deque(maxlen=max(1, size))
        self.refresh = max(1, refresh)
        self.q = q
        self.median: float | None = None
        self.quantile: float | None = None
        self._count = 0

    def push(self, x: float) -> None:
        self.values.append(x)
        self._count += 1
        if self._count % self.refresh == 0 or self._count <= self.refresh:
            self._recompute()

    def extend(self, xs: list[float]) -> None:
        """Push several values; recomputes once if a refresh boundary was crossed."""
        before = self._count
        self.values.extend(xs)
        self._count += len(xs)
        if self._count // self.refresh != before // self.refresh or before < self.refresh:
            self._recompute()

    def _recompute(self) -> None:
        s = sorted(self.values)
        self.median = median_of_sorted(s)
        if self.q is not None:
            n = len(s)
            self.quantile = s[min(n - 1, int(round(self.q * (n - 1))))]

    def clear(self) -> None:
        self.values.clear()
        self.median = None
        self.quantile = None
        self._count = 0

    def __len__(self) -> int:
        return len(self.values)


def exp_or_inf(x: float) -> float:
    """``math.exp``, but ``inf`` where the result is past the largest float. The rules take
    exponents of log-loss differences and noise spreads; a hostile or broken log's losses
    can span 5e-324 to 1e308, a log ratio of 1 453, and ``math.exp`` raises past 709.78
    (a traceback in ``dltop check``). A threshold that is infinite catches nothing: the
    right answer for a loss whose own noise spans 600 orders of magnitude."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and R² of ys against xs (slope 0, R² 0 when undefined)."""
    n = len(xs)
    if n < 3:
        return 0.0, 0.0
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sxy = syy = 0.0
    for x, y in zip(xs, ys, strict=True):
        dx = x - mx
        dy = y - my
        sxx += dx * dx
        sxy += dx * dy
        syy += dy * dy
    if sxx <= 0 or syy <= 0:
        return 0.0, 0.0
    slope = sxy / sxx
    return slope, (sxy * sxy) / (sxx * syy)


def _below(a: list[float], b: list[float]) -> float:
    """Pairs (x of a, y of b) with y < x, ties counted half; both sorted: one merge."""
    u = 0.0
    lo = hi = 0  # b[:lo] < x, b[:hi] <= x, for the current x of a (both only grow)
    for x in a:
        while lo < len(b) and b[lo] < x:
            lo += 1
        hi = max(hi, lo)
        while hi < len(b) and b[hi] <= x:
            hi += 1
        u += lo + 0.5 * (hi - lo)
    return u


def falling_z(groups: list[list[float]]) -> float:
    """How surely a series falls across consecutive stretches (each sorted, in time order):
    the Jonckheere-Terpstra statistic, pairs of values where the later one is lower, in
    standard deviations from what noise alone gives. Scale-free and robust: one wild loss
    moves it by one rank, a trend inside a stretch only widens it, and every stretch's
    values count (5 stretches of 5 losses can show a fall that no two of them can)."""
    sizes = [len(g) for g in groups if g]
    groups = [g for g in groups if g]
    n = sum(sizes)
    sq = sum(m * m for m in sizes)
    var = (n * n * (2 * n + 3) - sum(m * m * (2 * m + 3) for m in sizes)) / 72
    if len(groups) < 2 or var <= 0:
        return 0.0
    j = sum(
        _below(groups[i], groups[k]) for i in range(len(groups)) for k in range(i + 1, len(groups))
    )
    return (j - (n * n - sq) / 4) / var**0.5


def log_spread(s: list[float]) -> float:
    """Robust sigma of log(x) from the 16th/84th percentiles of a sorted window (0 if not positive)."""
    n = len(s)
    lo, hi = s[int(0.16 * (n - 1))], s[int(0.84 * (n - 1))]
    if n < 5 or lo <= 0:
        return 0.0
    return 0.5 * math.log(hi / lo)


class Block:
    """Steps buffered since the last block end, as aligned lists (non-finite values as None)."""

    __slots__ = ("steps", "t", "loss", "gn", "recs", "timing", "t0")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.t: list[float | None] = []
        self.loss: list[float | None] = []
        self.gn: list[float | None] = []
        self.recs: Records = []
        self.timing: list[bool] = []  # False inside a phase or right after one
        self.t0: float | None = None

    def clear(self) -> None:
        self.steps, self.t, self.loss, self.gn = [], [], [], []
        self.recs, self.timing, self.t0 = [], [], None
