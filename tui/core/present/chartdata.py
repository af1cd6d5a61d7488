"""What a chart draws, computed without a UI: traces of per-column min/max, ranges, labels.

A chart is as wide as the terminal allows, so it never needs more than about two points
per character column: the store decimates each metric into buckets that keep the minimum,
the maximum and whether any non-finite value fell inside. This module turns those buckets
into ``ChartData`` (the one thing the chart widget reads) and holds the arithmetic that
would otherwise hide in a widget: log transforms, the y range and the mapping between
steps and columns. It imports no Textual, so it is testable alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .timeaxis import STEP, TIME, column_of

# Style keys a trace may ask for; the chart widget maps each to a component class.
RAW, EMA, EVAL, ALT, ALT2 = "raw", "ema", "eval", "alt", "alt2"
LEGEND = "legend"  # the legend's own style key (a span may ask for a run's instead)
OFF_UP, OFF_DOWN = "▲", "▼"  # a trace clipped at the top / bottom edge of the plot


@dataclass(frozen=True)
class Trace:
    """One line on a chart: per bucket, the finite min/max (``None`` when empty) and a flag
    saying the bucket held a NaN/Inf, so the chart can mark it instead of leaving a gap."""

    name: str
    lo: Sequence[float | None]
    hi: Sequence[float | None]
    bad: Sequence[bool] = ()
    style: str = RAW
    connect: bool = True  # draw a line through buckets; False draws points only
    markers: bool = False  # mark each bucket that holds a point (evals: where they were taken)
    # False: left out of the y range and drawn clipped at its edge with an arrow (an
    # overlaid run far outside the others' range, ``overlay_scale``)
    in_range: bool = True


@dataclass(frozen=True)
class ChartData:
    """Everything a chart draws: the step window, its traces and a legend line."""

    start: int  # first step of the window (left edge)
    end: int  # last step of the window (right edge), >= start
    traces: tuple[Trace, ...] = ()
    log: bool = False
    cursor: int | None = None  # a step, drawn as a vertical line when inside the window
    legend: str = ""  # values to print on the chart's first row
    # the same legend as (text, style key) spans, so an overlaid run's letter is drawn in
    # its line's colour; ``legend`` stays the plain text (tests, the report's SVG)
    legend_spans: tuple[tuple[str, str], ...] = ()
    unit: str = ""  # "s", "B", "%": how the y labels are written
    empty_text: str = "waiting for data"
    y_floor: float | None = None  # force the range to include this value (0 for memory)
    extra: dict[str, str] = field(default_factory=dict)
    # a wall-time x axis (``timeaxis.py``): the step boundaries of the buckets and the
    # elapsed seconds at the left and right edges; () and None: columns uniform in steps
    edges: tuple[int, ...] = ()
    x_time: tuple[float, float] | None = None

    @property
    def has_points(self) -> bool:
        return any(v is not None for t in self.traces for v in t.hi) or any(
            b for t in self.traces for b in t.bad
        )

    @property
    def x_name(self) -> str:
        """What the x axis counts, as its gutter says."""
        return TIME if self.x_time is not None else STEP

    def column_of(self, step: float, columns: int) -> int | None:
        """The column (of ``columns``) a step is drawn in, on either x axis."""
        if self.edges:
            return column_of(self.edges, step, columns)
        return step_to_column(step, self.start, self.end, columns)


FLOOR_MARK = "▁"  # a value of zero or below on a log axis, drawn on the bottom row


def at_floor(trace: Trace) -> list[int]:
    """The buckets holding a value a log axis cannot place (zero or below): drawn at
    the floor with :data:`FLOOR_MARK` instead of vanishing."""
    return [i for i, a in enumerate(trace.lo) if a is not None and a <= 0]


def floor_note(traces: Sequence[Trace]) -> str:
    """The legend's word for those marks: ``▁ 0 at floor``, or ``▁ ≤0 at floor`` when
    some are negative; "" when there are none."""
    lows = [a for t in traces for a in t.lo if a is not None and a <= 0]
    if not lows:
        return ""
    return f"{FLOOR_MARK} {'0' if min(lows) == 0 else '≤0'} at floor"


def transform(value: float, log: bool) -> float | None:
    """A finite value in chart space (log10 under a log scale); ``None`` when it cannot be
    placed (non-positive under log: drawn at the floor, see :func:`at_floor`)."""
    if not log:
        return value
    return math.log10(value) if value > 0 else None


_EDGE = 1e300


def y_range(data: ChartData) -> tuple[float, float] | None:
    """The padded (low, high) of every drawable value, in chart space."""
    lo = math.inf
    hi = -math.inf
    for t in data.traces:
        if not t.in_range:
            continue
        for a, b in zip(t.lo, t.hi, strict=False):
            if a is None or b is None:
                continue
            for v in (transform(a, data.log), transform(b, data.log)):
                if v is not None and v - v == 0.0:  # an overflowed inf has no place either
                    lo = min(lo, v)
                    hi = max(hi, v)
    floor = transform(data.y_floor, data.log) if data.y_floor is not None else None
    if floor is not None:
        lo = min(lo, floor)
        hi = max(hi, floor)
    if lo == math.inf:
        return None
    # values near the float limit (1e308 from a hostile or broken log) would make the
    # span, the padding and the drawing scale overflow: they are drawn at the edge instead
    # (both ends into [-_EDGE, _EDGE]: a run whose every value is past it, an lr of 1e308
    # throughout, must not get a low end above its high end and a range of no height)
    lo, hi = min(max(lo, -_EDGE), _EDGE), max(min(hi, _EDGE), -_EDGE)
    pad = (abs(hi) * 0.1 if hi else 1.0) if hi - lo < 1e-12 else (hi - lo) * 0.05
    # a floor (0 B, 0 s) is a real bound: never pad below it into impossible values; nor
    # below zero for a series that never goes there (a loss axis at -1e34 reads as a
    # negative loss)
    if floor is None and not data.log and lo >= 0:
        floor = 0.0
    bottom = max(lo - pad, floor) if floor is not None and lo >= floor else lo - pad
    # subnormal values (1e-310 from a broken log) leave a span whose drawing scale is
    # infinite: the chart crashed on them; they are drawn flat instead
    return bottom, max(hi + pad, bottom + _MIN_SPAN)


_MIN_SPAN = 1e-300


DECADES_FOR_LOG = 3.0  # a visible range wider than this many decades is drawn on a log axis


def wants_log(traces: Sequence[Trace]) -> bool:
    """A series spanning more than :data:`DECADES_FOR_LOG` decades (a loss that blew up to
    1e35 from 1.5) is one flat line on a linear axis with the interesting part crushed at
    the bottom: a log axis shows both. Only when every drawable value is positive, since a
    log axis cannot show zero or below."""
    lo = math.inf
    hi = 0.0
    for t in traces:
        if not t.in_range:  # drawn clipped: it does not decide the axis either
            continue
        for a, b in zip(t.lo, t.hi, strict=False):
            if a is None or b is None:
                continue
            if a <= 0 or b <= 0:
                return False
            lo = min(lo, a)
            hi = max(hi, b)
    return lo != math.inf and hi > lo * 10.0**DECADES_FOR_LOG


def off_scale_marks(
    data: ChartData, rng: tuple[float, float] | None, columns: int
) -> tuple[dict[int, str], dict[int, str]]:
    """Where a trace left out of the range (``Trace.in_range``) goes past its top and its
    bottom: column -> the trace's style, for an arrow on the plot's edge row."""
    up: dict[int, str] = {}
    down: dict[int, str] = {}
    if rng is None or columns <= 0:
        return up, down
    lo_v, hi_v = rng
    for t in data.traces:
        if t.in_range:
            continue
        n = max(1, len(t.hi))
        for i, (a, b) in enumerate(zip(t.lo, t.hi, strict=False)):
            if a is None or b is None:
                continue
            col = min(columns - 1, i * columns // n)
            tb = transform(b, data.log)
            if tb is not None and tb > hi_v:
                up.setdefault(col, t.style)
            ta = transform(a, data.log)
            if (ta is not None and ta < lo_v) or (ta is None and data.log):
                down.setdefault(col, t.style)
    return up, down


def step_to_column(step: float, start: int, end: int, columns: int) -> int | None:
    """The column (0..columns-1) that a step falls in, ``None`` outside the window."""
    if columns <= 0 or step < start or step > end:
        return None
    span = end - start + 1
    return min(columns - 1, int(step - start) * columns // span)
