"""The smoothed line under a chart's raw series, with TensorBoard's semantics.

What people compare it with is TensorBoard's smoothing slider: an exponential moving
average with weight ``w`` (0.6 by default; 0 is off), debiased so the first points are not
dragged towards zero. Two things differ, on purpose, and both make the line honest:

- **the weight is per step of the x-axis, not per record.** Between two points ``dx``
  steps apart the old value keeps ``w ** dx`` of its weight. A log written every 10 steps
  (a 38-point Hugging Face log) is therefore smoothed over the same number of *steps* as
  one written every step, instead of ten times longer. The old fixed 0.02 per record drew
  ``ema 365`` beside ``loss 68.4`` on such a log.
- **it breaks at a non-finite value.** A NaN or Inf point has no smoothed value (the raw
  line marks it), and the average starts again, debiased, at the next finite point. The
  old EMA carried its last value through 255 NaN steps as a flat line at ~1e33.

The bound we state and test (:func:`lag_bound`): on a series that moves steadily (a
straight line in steps) the smoothed value lags the raw one by at most ``w / (1 - w)``
steps (1.5 at 0.6, 9 at 0.9, 99 at 0.99), whatever the logging interval, since a gap of
``dx`` steps lags by ``dx * w**dx / (1 - w**dx)``, which only falls as ``dx`` grows; and
debiasing only shortens it at the start. On any series, all but ``w ** k`` of the
smoothed value's weight lies on the last ``k`` steps (``memory_steps`` in its tests).

The smoothed copy is worked out by the store on demand for the weight a chart asks for
(:meth:`Store.smoothed`), extended as the raw series grows, never per redraw from the
start; a new weight costs one pass over the series.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable

from .series import Series

DEFAULT_WEIGHT = 0.6  # TensorBoard's default
# what the ``s`` key steps through (``S`` backwards); 0 switches smoothing off
WEIGHTS = (0.0, 0.6, 0.8, 0.9, 0.95, 0.99)
MAX_WEIGHT = 0.999  # a --smooth above this would remember ~1000+ steps: refused


def lag_bound(weight: float) -> float:
    """The most steps the smoothed line lags a steadily moving raw series by."""
    if weight <= 0.0:
        return 0.0
    return weight / (1.0 - weight)


def step_weight(weight: float, direction: int) -> float:
    """The next weight of :data:`WEIGHTS` up (``direction`` 1) or down (-1), wrapping; a
    weight given with ``--smooth`` that is not in the list goes to its neighbour."""
    if direction >= 0:
        bigger = [w for w in WEIGHTS if w > weight + 1e-9]
        return bigger[0] if bigger else WEIGHTS[0]
    smaller = [w for w in WEIGHTS if w < weight - 1e-9]
    return smaller[-1] if smaller else WEIGHTS[-1]


def parse_weight(text: str) -> float:
    """``--smooth`` as given: 0 (off) up to :data:`MAX_WEIGHT`; ValueError says why."""
    try:
        weight = float(text)
    except ValueError:
        raise ValueError(f"--smooth wants a number from 0 to {MAX_WEIGHT}, not {text!r}") from None
    if not (0.0 <= weight <= MAX_WEIGHT):
        raise ValueError(
            f"--smooth {text}: the weight goes from 0 (off) to {MAX_WEIGHT} "
            "(0.6 is TensorBoard's default; 0.9 remembers ~20 steps)"
        )
    return weight


def label(weight: float) -> str:
    """How the legend names the smoothed line: ``smooth(0.6)``."""
    return f"smooth({weight:g})"


class Smoother:
    """The running state of one smoothed series, carried from one extension to the next."""

    __slots__ = ("weight", "acc", "norm", "last_x")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.acc = 0.0  # the weighted sum of the values seen since the last break
        self.norm = 0.0  # the sum of their weights: acc / norm is the debiased average
        self.last_x: int | None = None

    def extend(self, xs: Iterable[int], ys: Iterable[float]) -> array:
        """The smoothed values of the next points (NaN where the raw one is not finite)."""
        out = array("d")
        append = out.append
        w = self.weight
        acc, norm, last_x = self.acc, self.norm, self.last_x
        nan = math.nan
        for x, y in zip(xs, ys, strict=True):
            if y - y != 0:  # NaN or Inf: no smoothed point, and the average starts again
                acc = norm = 0.0
                last_x = None
                append(nan)
                continue
            dx = 1 if last_x is None else x - last_x
            # a step logged twice (dx 0) weighs like a step; a log that jumps far ahead
            # forgets everything before (w ** dx underflows to 0, as it should)
            keep = w ** (dx if dx > 0 else 1) if w > 0.0 else 0.0
            acc = acc * keep + (1.0 - keep) * y
            norm = norm * keep + (1.0 - keep)
            v = acc / norm if norm > 0.0 else y
            if v - v != 0.0:  # rounding past the largest float (a loss of 1.8e308): the
                acc, norm, v = (1.0 - keep) * y, 1.0 - keep, y  # average starts again here
            append(v)
            last_x = x
        self.acc, self.norm, self.last_x = acc, norm, last_x
        return out


def smooth(xs: Iterable[int], ys: Iterable[float], weight: float) -> list[float]:
    """The smoothed values of a whole series (tests and the report)."""
    return list(Smoother(weight).extend(xs, ys))


class SmoothedCopies:
    """The smoothed copy of each series a chart draws, for the weight it last asked for,
    extended by the points added since; a new weight or a resume (the tail replaced)
    starts it over. Why kept: a 1 M-step series smoothed again at every redraw would cost
    its whole length each time; extended, a redraw costs the new points."""

    def __init__(self) -> None:
        # name -> (weight, the source's cuts, smoothed copy, its running state)
        self._kept: dict[str, tuple[float, int, Series, Smoother]] = {}

    def of(self, name: str, src: Series, weight: float) -> Series:
        kept = self._kept.get(name)
        if kept is None or kept[0] != weight or kept[1] != src.cuts:
            out = Series(f"{name}~{weight:g}", "derived", version=src.version)
            out.follow_x(src)
            kept = (weight, src.cuts, out, Smoother(weight))
            self._kept[name] = kept
        out, smoother = kept[2], kept[3]
        n = len(out)
        if n < len(src):
            out.extend(smoother.extend(src.xs(n), src.ys[n:]), None, src.version)
            out.summarize()
        elif out.version < src.version:
            out.version = src.version  # same points: only the decimation cache is renewed
        return out
