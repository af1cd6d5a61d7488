"""The oscillation rule's numbers: one group's statistics, and many groups' and windows'
at once (numpy), for its batch path.

Why apart: ``oscillation.py`` says what the rule decides; this says how its floats are
made, one group at a time and for a run of blocks without a Python loop per group
(``deferred.py`` hands the rule its blocks in runs). Every float of the numpy path is made
by the same IEEE operations, on the same operands, in the same order as the one-group code
(sums left to right, a stable sort), so it is the same float;
``tests/rules/test_rules_batched.py`` holds the paths to the same state on hostile values.
numpy is imported here only, on the first batch of ``NUMPY_MIN`` values.
"""

from __future__ import annotations

from functools import reduce
from operator import add, mul, sub
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .oscillation import Oscillation

# fewer values than this in a batch are done in Python (the same floats): importing numpy
# (~0.1 s) would cost a small log's check more than it saves
NUMPY_MIN = 4096


def group_stats(c: list[float]) -> tuple[float, float, float, float]:
    """One group of losses: its median, the noise of one step (from the median absolute
    difference of neighbours), the lag-1 sum and the sum of squares around its mean.
    Sums left to right from 0.0 (``reduce``, not ``sum``: Python 3.12's ``sum`` of floats
    compensates, and :func:`group_stats_many` must give the same floats on any Python)."""
    s = sorted(c)
    diffs = sorted(map(abs, map(sub, c[1:], c)))  # |c[i+1] - c[i]|
    noise = 1.4826 * diffs[len(diffs) // 2] / 1.4142
    m = reduce(add, c, 0.0) / len(c)
    d = [x - m for x in c]
    lag = reduce(add, map(mul, d, d[1:]), 0.0)  # d[i] * d[i+1], left to right
    sq = reduce(add, map(mul, d, d), 0.0)
    return s[len(s) // 2], noise, lag, sq


def group_stats_many(
    values: list[float], size: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """:func:`group_stats` of each ``size`` values in a row: medians, noises, lag-1 sums,
    sums of squares (numpy for a big batch)."""
    if len(values) < NUMPY_MIN:
        rows = [group_stats(values[i : i + size]) for i in range(0, len(values), size)]
        return (
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            [r[3] for r in rows],
        )
    import numpy as np  # noqa: PLC0415 - big batches only: a live tick never loads it

    with np.errstate(all="ignore"):  # overflow to inf, as Python's floats do, silently
        a = np.array(values, dtype=np.float64).reshape(-1, size)
        med = np.sort(a, axis=1, kind="stable")[:, size // 2]
        diffs = np.sort(np.abs(a[:, 1:] - a[:, :-1]), axis=1)
        noise = 1.4826 * diffs[:, (size - 1) // 2] / 1.4142
        acc = 0.0 + a[:, 0]
        for j in range(1, size):
            acc = acc + a[:, j]
        d = a - (acc / size)[:, None]
        prod = d[:, :-1] * d[:, 1:]
        lag = 0.0 + prod[:, 0]
        for j in range(1, size - 1):
            lag = lag + prod[:, j]
        sqs = d * d
        sq = 0.0 + sqs[:, 0]
        for j in range(1, size):
            sq = sq + sqs[:, j]
    return med.tolist(), noise.tolist(), lag.tolist(), sq.tolist()


def slide(
    rule: Oscillation,
    meds: list[float],
    noise: list[float],
    lags: list[float],
    sqs: list[float],
    judged: list[int],
) -> tuple[list[float], list[float], list[bool]]:
    """The rule's windows slid over new closes: ``meds`` and ``noise`` are the rule's
    windows followed by the new closes' values, ``lags`` and ``sqs`` the new closes'.
    Returns the running lag-1 and squares sums after each new close (``_push``'s floats),
    and for each close in ``judged`` whether its judgement finds nothing from the window's
    range alone (``_assess``'s first two returns; False also when the window is not full
    yet: the rule judges those itself)."""
    n, filled, groups = rule.nblocks, len(rule.ac), len(lags)
    if groups * rule.block < NUMPY_MIN:
        return (*_sums(rule, lags, sqs), [False] * len(judged))
    import numpy as np  # noqa: PLC0415 - big batches only
    from numpy.lib.stride_tricks import sliding_window_view  # noqa: PLC0415

    with np.errstate(all="ignore"):
        # the running sums: ``num -= leaving; num += new`` per close, left to right (an
        # accumulate is sequential; ``x - y`` is ``x + -y`` to the bit; ``x + -0.0`` is x)
        old = list(rule.ac)
        lag_all = np.array([p[0] for p in old] + lags, dtype=np.float64)
        sq_all = np.array([p[1] for p in old] + sqs, dtype=np.float64)
        leaving = filled + np.arange(groups) - n
        full = leaving >= 0
        at = np.where(full, leaving, 0)
        sums = []
        for start, vals in ((rule.ac_num, lag_all), (rule.ac_den, sq_all)):
            ops = np.empty(2 * groups + 1, dtype=np.float64)
            ops[0] = start
            ops[1::2] = np.where(full, -vals[at], -0.0)
            ops[2::2] = vals[filled:]
            sums.append(np.add.accumulate(ops)[2::2])
        nums, dens = sums
        quiet = [False] * len(judged)
        rows = [j for j in judged if filled + j + 1 >= n]
        if rows:
            ends = np.array(rows) + filled + 1 - n  # each window's first value
            win = sliding_window_view(np.array(meds, dtype=np.float64), n)[ends]
            lo, hi = win.min(axis=1), win.max(axis=1)
            reach = hi - lo
            mid = np.sort(sliding_window_view(np.array(noise, dtype=np.float64), n)[ends], axis=1)
            floor = rule.noise_k * (mid[:, n // 2] * 1.2533 / rule.block**0.5)
            low = np.where(lo >= 0, lo, np.abs(win).min(axis=1))
            no_swing = ~(reach > 0) | (reach < floor) | (reach < rule.amp * low)
            num, den = nums[rows], dens[rows]
            two_cycle = (den > 0) & (num / den <= rule.autocorr)
            nothing = (~two_cycle & no_swing).tolist() if rule.min_swings > 0 else []
            first = len(judged) - len(rows)  # the judgements before these have short windows
            quiet[first:] = nothing or [False] * len(rows)
    return nums.tolist(), dens.tolist(), quiet


def _sums(
    rule: Oscillation, lags: list[float], sqs: list[float]
) -> tuple[list[float], list[float]]:
    """The running sums of :func:`slide` in Python, as ``_push`` makes them (a small batch:
    numpy's import would cost more than it saves)."""
    n, old = rule.nblocks, list(rule.ac)
    filled, num, den = len(old), rule.ac_num, rule.ac_den
    nums: list[float] = []
    dens: list[float] = []
    for j, (lag, sq) in enumerate(zip(lags, sqs, strict=True)):
        if filled + j >= n:  # the window was full: its oldest pair leaves
            k = filled + j - n
            lag_out, sq_out = old[k] if k < filled else (lags[k - filled], sqs[k - filled])
            num -= lag_out
            den -= sq_out
        num += lag
        den += sq
        nums.append(num)
        dens.append(den)
    return nums, dens
