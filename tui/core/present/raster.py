"""A chart's traces as braille dots: which dot of which cell each bucket lights, and the
marks drawn instead of dots (a NaN's column, a log axis's floor, an evaluation's point).

Why apart from the chart widget (``app/chart.py``): this is the arithmetic of the
picture, with no Textual in it, so it is tested and timed without a UI; the widget
turns its cells into styled strips.
"""

from __future__ import annotations

import math

from .chartdata import ChartData, at_floor

# (dx, dy) -> braille bit, dots numbered as in Unicode's braille block
_BRAILLE_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))

Cells = tuple[
    list[list[int]],  # braille bits per (row, column) of the plot
    list[list[str | None]],  # the trace style that drew each cell last
    set[int],  # columns holding a non-finite bucket
    dict[tuple[int, int], str],  # (row, column) -> style: a trace's points (markers)
    dict[int, str],  # column -> style: zero or below on a log axis (the bottom row)
]


def rasterise(data: ChartData, rng: tuple[float, float] | None, cols: int, plot_h: int) -> Cells:
    """The plot's cells for ``data`` over ``rng`` (``chartdata.y_range``): ``cols`` x
    ``plot_h`` braille cells of 2 x 4 dots."""
    dots_w, dots_h = cols * 2, plot_h * 4
    bits = [[0] * cols for _ in range(plot_h)]
    owner: list[list[str | None]] = [[None] * cols for _ in range(plot_h)]
    bad_cols: set[int] = set()
    marks: dict[tuple[int, int], str] = {}  # (row, column) -> style: a trace's points
    log = data.log
    # zero or below on a log axis: no place on it, so a mark on the floor (bottom row)
    floor: dict[int, str] = {}
    if log:
        for trace in data.traces:
            n = max(1, len(trace.lo))
            for i in at_floor(trace):
                floor[i * cols // n] = trace.style
    if rng is not None:
        lo_v, hi_v = rng
        scale = (dots_h - 1) / (hi_v - lo_v)
        last_dot = dots_h - 1

        def to_dot(v: float) -> int:  # axis.dot_of, inlined: called per bucket
            if log:
                v = math.log10(v)
            f = (hi_v - v) * scale + 0.5
            # compared as a float first: a trace drawn clipped (an overlaid run off the
            # range) may sit at 1e308, where the product is infinite and int() raises
            return 0 if not f >= 1.0 else (last_dot if f > last_dot else int(f))

        for trace in data.traces:
            n = len(trace.hi)
            bad = trace.bad
            nbad = len(bad)
            style = trace.style
            connect = trace.connect
            # a mark per point while the points are sparse (evaluations); a series
            # evaluated at every step is a line, marks would only blot it
            mark_points = trace.markers and sum(v is not None for v in trace.hi) <= cols // 3
            prev: int | None = None
            prev_x = 0
            for i, (a, b) in enumerate(zip(trace.lo, trace.hi, strict=False)):
                x = i * dots_w // n
                if i < nbad and bad[i]:
                    bad_cols.add(x >> 1)
                    prev = None  # a NaN breaks the line; its mark says why
                if a is None or b is None:
                    if not connect:
                        prev = None
                    continue
                if log and a <= 0:  # its floor mark says so; the line goes on above 0
                    if b <= 0:
                        prev = None
                        continue
                    a = b
                top = to_dot(b)
                bottom = top if a == b else to_dot(a)
                mid = (top + bottom) >> 1
                if connect and prev is not None:
                    span = x - prev_x
                    if span > 1:  # empty buckets between (a zoomed-in window, a stall)
                        _bridge(bits, owner, style, prev_x, prev, x, mid)
                        prev += (mid - prev) * (span - 1) // span  # the bridge's last dot
                    if prev < top:
                        top = prev
                    elif prev > bottom:
                        bottom = prev
                # the line goes on from this bucket's own middle: from the joint with
                # the previous one, a jump (3 -> 1) rang on for buckets after it
                prev = mid
                prev_x = x
                cx = x >> 1
                if mark_points:
                    marks[(prev >> 2, cx)] = style
                column_bits = _BRAILLE_BITS[x & 1]
                for dy in range(top, bottom + 1):
                    cy = dy >> 2
                    bits[cy][cx] |= column_bits[dy & 3]
                    owner[cy][cx] = style
    else:
        for trace in data.traces:
            n = len(trace.bad)
            for i, flag in enumerate(trace.bad):
                if flag:
                    bad_cols.add(min(cols - 1, i * cols // max(1, n)))
    return bits, owner, bad_cols, marks, floor


def _bridge(
    bits: list[list[int]],
    owner: list[list[str | None]],
    style: str,
    x0: int,
    y0: int,
    x1: int,
    y1: int,
) -> None:
    """Dots on the straight line between two points across empty dot columns, so a
    window with fewer steps than dot columns still draws a line, not dashes."""
    span = x1 - x0
    for x in range(x0 + 1, x1):
        y = y0 + (y1 - y0) * (x - x0) // span
        cx, cy = x >> 1, y >> 2
        bits[cy][cx] |= _BRAILLE_BITS[x & 1][y & 3]
        owner[cy][cx] = style
