"""The incrementally sorted windows give exactly what sorting the window again gives.

The rules engine keeps some windows' values sorted block by block instead of sorting
them at every block end (rules/window.py ``slide_sorted``). Its answers may not change
by a bit: the list must hold the very objects ``sorted(window)`` would, in the same
order, equal values (ties, ``0.0`` and ``-0.0``) included.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import TypeVar

import pytest
from dltop.tui.core.rules.evalseries import centred_medians
from dltop.tui.core.rules.window import Rolling, median_of, midpoint, slide_sorted, take_every

T = TypeVar("T")


@pytest.mark.parametrize("maxlen", [2, 5, 10, 100])
@pytest.mark.parametrize("seed", range(4))
def test_slide_sorted_is_sorted_window_object_for_object(maxlen: int, seed: int) -> None:
    r = random.Random(seed)
    win: deque[float] = deque(maxlen=maxlen)
    s: list[float] = []
    pool = [0.0, -0.0, 1.0, 2.5, -3.0, 1e300, -1e-300]
    for _ in range(300):
        n = r.choice((0, 1, 3, 10, maxlen, maxlen + 7))
        # fresh float objects: ties by value, never by identity
        new = [float(r.choice(pool)) * 1.0 if r.random() < 0.5 else r.random() for _ in range(n)]
        new = [x + 0.0 if x != 0.0 else x for x in new]
        slide_sorted(win, s, new)
        want = sorted(win)
        assert len(s) == len(want)
        assert all(a is b for a, b in zip(s, want, strict=True))


def test_slide_sorted_recovers_from_a_window_changed_elsewhere() -> None:
    win: deque[float] = deque([3.0, 1.0], maxlen=4)
    s: list[float] = []
    slide_sorted(win, s, [2.0])
    assert s == sorted(win) == [1.0, 2.0, 3.0]


def _one_at_a_time(
    sample: list[T], values: list[T], taken: int, stride: int, cap: int
) -> tuple[int, int]:
    """The loop ``take_every`` replaced, as the rules had it."""
    for x in values:
        taken += 1
        if taken % stride == 0:
            sample.append(x)
            if len(sample) >= cap:
                del sample[1::2]
                stride *= 2
    return taken, stride


@pytest.mark.parametrize("cap", [2, 3, 8, 64])
@pytest.mark.parametrize("seed", range(4))
def test_take_every_keeps_the_sample_value_for_value(cap: int, seed: int) -> None:
    r = random.Random(seed)
    fast: list[int] = []
    slow: list[int] = []
    fast_state = slow_state = (0, 1)
    value = 0
    for _ in range(400):
        n = r.choice((0, 1, 2, 7, 10, 33, 500))
        values = list(range(value, value + n))
        value += n
        fast_state = take_every(fast, n, values.__getitem__, *fast_state, cap)
        slow_state = _one_at_a_time(slow, values, *slow_state, cap)
        assert fast == slow
        assert fast_state == slow_state
    assert fast_state[1] > 1  # the stride doubled along the way: the halving was exercised


def test_a_median_of_values_at_the_float_limit_is_that_value() -> None:
    """1e308 and 1e308 have a median of 1e308 (``0.5 * (a + b)`` overflowed to inf); every
    other pair the same median as ``0.5 * (a + b)``, bit for bit: subnormals too, where
    halving before adding loses the last bit (5e-324 and 5e-324 had a median of 0.0)."""
    top = 1.7976931348623157e308
    assert median_of([top, top]) == top and median_of([-top, -top]) == -top
    assert midpoint(top, top / 2) == 0.5 * top + 0.25 * top
    assert median_of([math.inf, 1.0]) == math.inf and math.isnan(midpoint(math.inf, -math.inf))
    rolling = Rolling(4)
    rolling.extend([top] * 4)
    assert rolling.median == top
    assert centred_medians([top, top, top]) == [top] * 3  # its ends are medians of two
    tiny = 5e-324
    assert median_of([tiny, tiny]) == tiny and median_of([-tiny, -tiny]) == -tiny
    assert (
        centred_medians([tiny, tiny, tiny])
        == [tiny] * 3
        == [median_of([tiny] * k) for k in (2, 3, 2)]
    )
    rng = random.Random(3)
    for _ in range(20000):
        a, b = sorted(
            rng.choice((1, -1)) * rng.random() * 2.0 ** rng.randint(-1074, 1023) for _ in range(2)
        )
        want = 0.5 * (a + b)
        got = median_of([a, b])
        if math.isinf(want):
            assert got is not None and a <= got <= b and not math.isinf(got)
        else:
            assert repr(got) == repr(want), (a, b)
