"""Axis ticks people read without thinking: round values, as many as the space allows.

Why a module of its own: the braille chart and the report's SVG charts must agree on
where the ticks go and how they read, and none of it needs a UI. The rules, decided once:

- **round values**: a linear axis ticks at multiples of 1, 2 or 5 × 10^k (in the axis'
  unit: 2 GiB, 20 ms), a log axis at powers of ten (every k-th one when there are many
  decades; 1/2/5 × 10^k when the axis spans less than about one decade). A tick is
  drawn on the row where its value is drawn, never at the padded edge of the range;
- **as many as fit**: about one tick per 4 rows (one per ~12 columns on the x axis), at
  least 5 on a plot 20 rows tall, never two on neighbouring rows (labels would touch);
- **one format per axis**: every label of an axis has the same unit suffix and the same
  number of decimals (or all are e-notation on a log axis), chosen from the tick step,
  not value by value. A label never exceeds the gutter: when the format does not fit,
  fewer ticks with a shorter format are taken, never a cut number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

LABEL_WIDTH = 7  # characters of a y label: the chart's 9-column gutter less " ┤"
ROWS_PER_TICK = 4  # about one y tick per 4 plot rows
COLUMNS_PER_TICK = 12  # about one x tick per 12 columns
_EPS = 1e-9


@dataclass(frozen=True)
class Tick:
    """One tick: the value its label says, where it sits in chart space (``log10`` of the
    value on a log axis, elapsed seconds or a step on the x axis) and the label."""

    value: float
    at: float
    label: str


# ------------------------------------------------------------------------ the mapping


def dot_of(at: float, lo: float, hi: float, dots: int) -> int:
    """The dot row (0 at the top, ``dots - 1`` at the bottom) of a chart-space value on
    an axis from ``lo`` to ``hi``: the chart draws its points with this, and its ticks
    on the character row holding that dot (``dot // 4``)."""
    if hi <= lo:
        return 0
    scale = (dots - 1) / (hi - lo)
    f = (hi - at) * scale + 0.5  # a float until it is known to fit (at = 1e308: inf)
    return 0 if not f >= 1.0 else (dots - 1 if f > dots - 1 else int(f))


def row_of(at: float, lo: float, hi: float, rows: int) -> int:
    """The character row (4 braille dots tall) where a chart-space value is drawn."""
    return dot_of(at, lo, hi, rows * 4) >> 2


def tick_counts(rows: int) -> tuple[float, int]:
    """(the count aimed at, the least wanted) for a plot ``rows`` tall."""
    return rows / ROWS_PER_TICK, 5 if rows >= 20 else 2


# ------------------------------------------------------------------------ nice steps


def _steps(span: float, most: int) -> Iterator[tuple[int, int]]:
    """Steps ``m × 10^k`` (m in 1, 2, 5), coarse to fine, from the one that leaves a
    single tick down to the one that would give about ``most`` ticks."""
    finest = span / max(1, most)
    if not (finest > 0) or not math.isfinite(span):
        return
    top = math.floor(math.log10(span)) + 1
    bottom = math.floor(math.log10(finest)) - 1
    for k in range(top, bottom - 1, -1):
        for m in (5, 2, 1):
            yield m, k


def _multiples(lo: float, hi: float, m: int, k: int, limit: int) -> list[float] | None:
    """The multiples of ``m × 10^k`` inside ``[lo, hi]``, as exact decimals (``n * m``
    scaled by a power of ten, so 0.3 is 0.3, not 0.30000000000000004); ``None`` when
    there would be more than ``limit`` (or the step is beyond what a float holds: a
    hostile log's 1e-320 or 1e308)."""
    step = float(f"{m}e{k}")
    if not (0 < step < math.inf):
        return None
    a, b = lo / step - _EPS, hi / step + _EPS
    if not (math.isfinite(a) and math.isfinite(b)) or b - a > limit + 1:
        return None
    first, last = math.ceil(a), math.floor(b)
    if last - first + 1 > limit:
        return None
    if k >= 0:
        return [float(n * m * 10**k) for n in range(first, last + 1)]
    return [n * m / 10 ** (-k) for n in range(first, last + 1)]


def _spaced(rows: list[int], gap: int) -> bool:
    """Every two ticks at least ``gap`` rows (or columns) apart."""
    return all(b - a >= gap for a, b in zip(rows, rows[1:], strict=False))


def _best(
    candidates: Iterator[list[Tick] | None],
    place: Callable[[float], int],
    target: float,
    least: int,
    gap: int,
) -> list[Tick]:
    """The candidate tick set that is spaced, has at least ``least`` ticks if any does,
    and is nearest ``target`` (the coarser on a tie)."""
    best: list[Tick] = []
    best_key: tuple[bool, float] | None = None
    for ticks in candidates:
        if not ticks:
            continue
        spots = sorted(place(t.at) for t in ticks)
        if len(set(spots)) < len(spots) or not _spaced(spots, gap):
            continue
        key = (len(ticks) < least, abs(len(ticks) - target))
        if best_key is None or key < best_key:
            best, best_key = ticks, key
    return best


# ------------------------------------------------------------------------ formats


def _unit_scale(magnitude: float, unit: str) -> tuple[float, str]:
    """The axis' display unit, from its largest value: what one displayed 1 is worth,
    and the suffix (``GiB``, ``ms``, ``%``)."""
    if unit == "B":
        for suffix, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
            if magnitude >= size:
                return float(size), suffix
        return (1024.0, "KiB") if magnitude >= 1024 else (1.0, "B")
    if unit == "s":
        if magnitude >= 1 or magnitude == 0:
            return 1.0, "s"
        return (1e-3, "ms") if magnitude >= 1e-3 else (1e-6, "µs")
    return 1.0, unit


def fixed_labels(
    values: Sequence[float], k: int, suffix: str = "", width: int = LABEL_WIDTH
) -> list[str] | None:
    """Labels of ticks ``m × 10^k`` apart in one format: plain with the decimals the step
    needs, else (too wide) one shared exponent with a mantissa of the decimals the step
    needs (``0.5e6 1.0e6 1.5e6``); ``None`` when neither fits ``width``. Plain numbers
    stop at 1e5, as in ``fmt.compact``: nobody counts the digits of 1400000."""
    decimals = max(0, -k)
    top = max((abs(v) for v in values), default=0.0)
    plain = [f"{0.0 if v == 0 else v:.{decimals}f}{suffix}" for v in values]
    if (top < 1e5 or suffix) and all(len(s) <= width for s in plain):
        return plain
    if top == 0:
        return None
    e = math.floor(math.log10(top))
    md = max(0, e - k)
    exp = [f"{0.0 if v == 0 else v / 10.0**e:.{md}f}e{e}{suffix}" for v in values]
    return exp if all(len(s) <= width for s in exp) else None


def log_label(m: int, k: int, suffix: str = "") -> str:
    """A log axis tick in e-notation: ``1e-4``, ``1e0``, ``5e3``."""
    return f"{m}e{k}{suffix}"


# ------------------------------------------------------------------------ y axes


def linear_ticks(
    lo: float,
    hi: float,
    rows: int,
    unit: str = "",
    width: int = LABEL_WIDTH,
    position: Callable[[float], float | None] | None = None,
) -> list[Tick]:
    """Round ticks for a linear axis from ``lo`` to ``hi`` on a plot ``rows`` tall.

    ``position`` maps a value to chart space (``log10`` when a log axis spans less than
    a decade and falls back to these ticks); ``None`` for a value it cannot place."""
    if not (hi > lo) or rows < 1 or not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    target, least = tick_counts(rows)
    scale, suffix = _unit_scale(max(abs(lo), abs(hi)), unit)
    place = position or (lambda v: v)
    a_lo, a_hi = (place(lo), place(hi)) if position else (lo, hi)
    if a_lo is None or a_hi is None:
        return []

    def spot(at: float) -> int:
        return row_of(at, a_lo, a_hi, rows)

    def candidates() -> Iterator[list[Tick] | None]:
        for m, k in _steps((hi - lo) / scale, rows):
            values = _multiples(lo / scale, hi / scale, m, k, rows)
            if values is None:
                continue
            labels = fixed_labels(values, k, suffix, width)
            if labels is None:
                continue
            ticks = []
            for v, label in zip(values, labels, strict=True):
                at = place(v * scale)
                if at is not None:
                    ticks.append(Tick(v * scale, at, label))
            yield ticks

    return _best(candidates(), spot, target, least, 2)


MAX_DECADES = 700.0  # 5e-324 to 1.8e308 spans 632 decades; padding takes it a little wider


def log_ticks(
    lo: float, hi: float, rows: int, unit: str = "", width: int = LABEL_WIDTH
) -> list[Tick]:
    """Ticks for a log axis from ``10^lo`` to ``10^hi`` (``lo``, ``hi`` in decades): the
    powers of ten inside it (every k-th when many), with 2 and 5 × 10^k between them
    on a tall plot of few decades; 1/2/5 × 10^k in value when no two powers fit."""
    if not (hi > lo) or rows < 1 or not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi - lo > MAX_DECADES:  # more decades than floats have: not a float's log10, and
        return []  # a tick per decade would take as long as the range is wide
    suffix = unit if unit in ("s", "B", "%") else ""
    first, last = math.ceil(lo - _EPS), math.floor(hi + _EPS)
    if last - first < 1:  # less than a decade: round values in it, placed by their log
        return linear_ticks(
            10.0**lo,
            10.0**hi,
            rows,
            unit,
            width,
            position=lambda v: math.log10(v) if v > 0 else None,
        )
    target, least = tick_counts(rows)

    def spot(at: float) -> int:
        return row_of(at, lo, hi, rows)

    def power(m: int, k: int) -> Tick:
        # the value the label says, exactly: 1e-4 is float("1e-4"), not 10.0 ** -4
        return Tick(float(f"{m}e{k}"), k + math.log10(m), log_label(m, k, suffix))

    def candidates() -> Iterator[list[Tick] | None]:
        decades = last - first + 1
        yield [
            power(m, k)
            for k in range(first - 1, last + 1)
            for m in (1, 2, 5)
            if lo - _EPS <= k + math.log10(m) <= hi + _EPS and math.isfinite(float(f"{m}e{k}"))
        ]
        for every in (1, 2, 3, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500):
            if decades // every <= rows:
                yield [power(1, k) for k in range(first, last + 1) if k % every == 0]

    ticks = _best(candidates(), spot, target, least, 2)
    return [t for t in ticks if len(t.label) <= width]


def y_ticks(
    lo: float, hi: float, rows: int, log: bool, unit: str = "", width: int = LABEL_WIDTH
) -> list[Tick]:
    """The ticks of a y axis whose range is ``lo..hi`` in chart space (decades on a log
    axis, as ``chartdata.y_range`` gives it); none where the arithmetic fails on a
    hostile log's values at the edges of what a float holds, rather than a crashed chart."""
    try:
        if log:
            return log_ticks(lo, hi, rows, unit, width)
        return linear_ticks(lo, hi, rows, unit, width)
    except (ArithmeticError, ValueError):
        return []


# ------------------------------------------------------------------------ x axes


def _x_best(
    candidates: Iterator[list[Tick] | None], column: Callable[[float], int], columns: int
) -> list[tuple[int, str]]:
    """(column where the label starts, label) of the candidate whose labels, centred on
    their tick and kept inside the axis, leave two blanks between neighbours: two at
    least where two fit, else the nearest to one per :data:`COLUMNS_PER_TICK` columns."""
    target = columns / COLUMNS_PER_TICK
    best: list[tuple[int, str]] = []
    best_key: tuple[bool, float] | None = None
    for ticks in candidates:
        if not ticks:
            continue
        placed = []
        for t in ticks:
            w = len(t.label)
            placed.append((min(max(0, column(t.at) - (w - 1) // 2), max(0, columns - w)), t.label))
        if any(len(s) > columns for _, s in placed):
            continue
        if any(a + len(s) + 2 > b for (a, s), (b, _) in zip(placed, placed[1:], strict=False)):
            continue
        key = (len(ticks) < 2, abs(len(ticks) - target))  # one label gives no scale
        if best_key is None or key < best_key:
            best, best_key = placed, key
    return best


def step_labels(values: Sequence[float], k: int) -> list[str]:
    """Step numbers in one format: plain up to 99999, else in k or M with the decimals
    the tick step needs (``250k``, ``1.5M``)."""
    top = max((abs(v) for v in values), default=0.0)
    if top < 1e5:
        return [f"{int(v)}" for v in values]
    e, suffix = (6, "M") if top >= 1e6 else (3, "k")
    decimals = max(0, e - k)
    return [f"{v / 10.0**e:.{decimals}f}{suffix}" for v in values]


def step_ticks(start: int, end: int, columns: int) -> list[tuple[int, str]]:
    """Round step numbers under a plot of ``columns`` from ``start`` to ``end`` (both
    inclusive, the chart's window); each label is centred on its step's column."""
    if columns < 1:
        return []
    span = end - start + 1

    def column(at: float) -> int:
        return min(columns - 1, int(at - start) * columns // span)

    def candidates() -> Iterator[list[Tick] | None]:
        for m, k in _steps(max(1, end - start), columns):
            if k < 0 or m * 10**k > max(1, end - start):
                continue
            values = _multiples(start, end, m, k, columns)
            if values is not None:
                labels = step_labels(values, k)
                yield [Tick(v, v, s) for v, s in zip(values, labels, strict=True)]
        yield [Tick(start, start, str(start))]  # one step, or nothing rounder fits

    return _x_best(candidates(), column, columns)


# nice durations: seconds, minutes, hours, days
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 432000, 864000)  # fmt: skip


def time_labels(values: Sequence[float], step: float) -> list[str]:
    """Elapsed times in one format, chosen by the tick step and the largest value:
    ``0.5s``; ``40s``; ``1m30s``; ``5m``; ``1h20m``; ``3h``; ``2d06h``; ``4d``."""
    top = max((abs(v) for v in values), default=0.0)
    if step < 1:
        decimals = max(0, -math.floor(math.log10(step) + _EPS))
        return [f"{v:.{decimals}f}s" for v in values]
    whole = [int(round(v)) for v in values]
    if step < 60:
        if top < 100:
            return [f"{s}s" for s in whole]
        return [f"{s // 60}m{s % 60:02d}s" for s in whole]
    if step < 3600:
        if top < 3600:
            return [f"{s // 60}m" for s in whole]
        return [f"{s // 3600}h{s % 3600 // 60:02d}m" for s in whole]
    if step < 86400:
        if top < 86400:
            return [f"{s // 3600}h" for s in whole]
        return [f"{s // 86400}d{s % 86400 // 3600:02d}h" for s in whole]
    return [f"{s // 86400}d" for s in whole]


def time_ticks(left: float, right: float, columns: int) -> list[tuple[int, str]]:
    """Round elapsed times under a plot of ``columns`` whose columns are uniform in time
    from ``left`` to ``right`` seconds."""
    if columns < 1 or not (right > left) or not math.isfinite(right - left):
        return []
    span = right - left

    def column(at: float) -> int:
        return min(columns - 1, max(0, int((at - left) * columns / span)))

    def candidates() -> Iterator[list[Tick] | None]:
        fine = [(m, k) for m, k in _steps(min(span, 1.0), columns) if k < 0]
        steps = [m * 10.0**k for m, k in fine] + [float(s) for s in _TIME_STEPS]
        for step in sorted(steps, reverse=True):
            if step > span or span / step > columns:  # a day's step under 40 s: "0d"
                continue
            first = math.ceil(left / step - _EPS)
            last = math.floor(right / step + _EPS)
            values = [round(n * step, 6) for n in range(first, last + 1)]
            if values:
                labels = time_labels(values, step)
                yield [Tick(v, v, s) for v, s in zip(values, labels, strict=True)]

    return _x_best(candidates(), column, columns)
