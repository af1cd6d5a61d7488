"""Charts against elapsed wall time (``t``): columns uniform in time, not in steps.

Why: on a step axis a run that stalled for ten minutes between two steps looks like it
never stopped; against time the stall takes its width (a stretch without points, bridged
by a straight line), and a slow stretch looks slow. Every series stays indexed by step:
each column's time range is turned into a range of steps by bisecting the run's ``t``
series (the wall clock of each step record), and the series are decimated between those
step boundaries (``Series.decimate_between``). The cursor, alert windows and go-to stay
steps; only the column a step falls in changes. No Textual here.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.runstore import Store
    from ..store.series import Series

STEP, TIME = "step", "time"  # ViewState.x_axis
CLOCK = "t"  # the series of each step record's wall clock (Unix seconds)


@dataclass(frozen=True)
class TimeColumns:
    """Buckets uniform in wall time over a window: bucket ``c`` holds the steps
    ``edges[c] <= s < edges[c + 1]`` (equal edges: no step in that stretch of time);
    ``left``/``right`` are the elapsed seconds since the run's first step at the window's
    edges (the x labels)."""

    edges: tuple[int, ...]
    left: float
    right: float


def has_wall_clock(store: Store) -> bool:
    """Whether the run has wall-clock times to chart against: some foreign logs (a
    Lightning ``metrics.csv``, a ``trainer_state.json``) have none."""
    t = store.series(CLOCK)
    return t is not None and len(t) >= 2


def time_columns(t: Series | None, start: int, end: int, buckets: int) -> TimeColumns | None:
    """The step boundaries of ``buckets`` columns uniform in time over steps
    ``start..end``; ``None`` when the window holds fewer than two timed steps or no time
    passes in it (then the chart keeps its step axis).

    The clock is assumed non-decreasing; where it jumps back (a clock set back during
    the run) the boundaries are clamped so they never go back either."""
    if t is None or len(t) < 2 or buckets < 1:
        return None
    ys = t.ys
    i0 = t.index_of(start)
    i1 = t.index_of(end, after=True) - 1
    if i1 <= i0:
        return None
    origin, ta, tb = ys[0], ys[i0], ys[i1]
    if not (math.isfinite(origin) and math.isfinite(ta) and math.isfinite(tb)) or tb <= ta:
        return None
    edges = [start]
    for c in range(1, buckets):
        tau = ta + (tb - ta) * c / buckets
        j = bisect_left(ys, tau, i0, i1 + 1)
        step = t.x(j) if j <= i1 else end + 1
        edges.append(min(end + 1, max(edges[-1], step)))
    edges.append(end + 1)
    return TimeColumns(tuple(edges), ta - origin, tb - origin)


def column_of(edges: Sequence[int], step: float, columns: int) -> int | None:
    """The character column (of ``columns``) holding ``step``, ``None`` outside."""
    n = len(edges) - 1
    if n < 1 or columns < 1 or step < edges[0] or step >= edges[-1]:
        return None
    bucket = min(n - 1, bisect_right(edges, step) - 1)
    return min(columns - 1, bucket * columns // n)


def first_step_of(edges: Sequence[int], column: int, columns: int) -> int:
    """The first boundary of a character column: the inverse of :func:`column_of` for
    a column that holds a step (an empty column gives the next step there is)."""
    n = len(edges) - 1
    return edges[min(n, max(0, -(-column * n // max(1, columns))))]


def move_cursor(edges: Sequence[int], cursor: int | None, direction: int, columns: int) -> int:
    """One character column left or right on a time axis: to the first step of the next
    column that holds one, so a stall's empty columns are crossed in one key press."""
    start, end = edges[0], edges[-1] - 1
    if cursor is None:
        return end if direction < 0 else start
    col = column_of(edges, cursor, columns)
    if col is None:
        return min(end, max(start, cursor))
    if direction > 0:
        nxt = first_step_of(edges, col + 1, columns) if col + 1 < columns else end + 1
        return min(end, max(cursor, nxt))
    for c in range(col - 1, -1, -1):
        step = first_step_of(edges, c, columns)
        if step < cursor and column_of(edges, step, columns) == c:
            return step
    return start
