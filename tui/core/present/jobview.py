"""What the viewer draws of a job: the charts across its ranks and the rank table.

- **Charts across ranks**: per column the median over the ranks, with the ranks' min–max
  band under the panel's main series. Each rank's series is decimated to the chart's
  buckets by its own store (block summaries: O(width) per rank, not O(steps)), then
  combined per bucket at draw time: O(ranks x width) per series, only for the panels whose
  series changed (:func:`job_signature`).
- **The rank table**: one row per rank, every field ready to print, and which rank is the
  slowest; ``app/rank_table.py`` lays the rows out.

No Textual here (``tests/project/test_boundaries.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ranks.compare import EXCESS_SHARE, MIN_EXCESS_S
from ..ranks.crossrank import CrossRank
from ..ranks.jobs import RankLog
from ..rules.alerts import SEVERITY_RANK
from ..rules.window import median_of, midpoint
from ..store import smoothing
from ..text.fmt import compact, compact_bytes
from . import panels
from .chartdata import EMA, ChartData, Trace
from .timeaxis import TIME, TimeColumns, has_wall_clock

if TYPE_CHECKING:
    from ..store.run import RunModel
    from ..store.runstore import Store
    from .view_model import ViewState


BAND = "band"  # the chart style of the min–max band across ranks


def job_window(ranks: Sequence[RankLog], state: ViewState) -> tuple[int, int]:
    """The steps the charts span: the chosen window, else every rank's steps."""
    if state.window is not None:
        return state.window
    lo: int | None = None
    hi: int | None = None
    for r in ranks:
        with r.model.lock:
            b = r.model.store.step_range()
        if b is not None:
            lo = b[0] if lo is None else min(lo, b[0])
            hi = b[1] if hi is None else max(hi, b[1])
    return (lo, hi) if lo is not None and hi is not None else (0, 0)


def job_signature(
    ranks: Sequence[RankLog],
    key: str,
    state: ViewState,
    window: tuple[int, int] | None = None,
) -> tuple[Any, ...]:
    """Changes whenever the panel across ranks would draw something different: one version
    number per rank (a rank's new records redraw every panel across ranks, as they would
    anyway while the job runs; a signature per rank and panel cost 64 x 7 lookups a tick)."""
    versions = tuple(int(r.model.version) for r in ranks)
    span = window if window is not None else job_window(ranks, state)
    return (key, versions, span, state.cursor, state.log_loss, state.smoothing, state.x_axis)


def job_x(
    ranks: Sequence[RankLog], state: ViewState, span: tuple[int, int], buckets: int
) -> TimeColumns | None:
    """A wall-time axis across ranks, on the clock of the first rank that has one: the
    ranks of a data-parallel job take each step together (the all-reduce waits for the
    slowest), so a step's moment is the same on every rank to within that step."""
    if state.x_axis != TIME:
        return None
    for r in ranks:
        with r.model.lock:
            store = r.model.store
            if has_wall_clock(store):
                return panels.x_columns(store, state, span[0], span[1], buckets)
    return None


@dataclass
class _Column:
    """One rank's series in the chart's buckets (transformed: scaled or inverted)."""

    lo: list[float | None]
    hi: list[float | None]
    bad: list[bool]
    at: float | None  # the value at the cursor (else the latest)


def column(
    model: RunModel,
    metric: str,
    span: tuple[int, int],
    buckets: int,
    at: int | None,
    invert: bool,
    smooth: float = 0.0,
    x: TimeColumns | None = None,
) -> _Column | None:
    """One rank's (or run's) ``metric`` in the chart's buckets; with ``smooth``, its
    smoothed copy at that weight (``Store.smoothed``)."""
    with model.lock:
        store = model.store
        series = store.smoothed(metric, smooth) if smooth else store.series(metric)
        if series is None or not len(series):
            return None
        d = panels.decimate(series, span[0], span[1], buckets, x)
        point = series.at_step(at) if at is not None else series.last()
        scale = panels.scale_of(store, metric)  # GPU memory in % of the device
    value = point[1] if point is not None else None
    lo, hi = d.lo, d.hi
    if invert:  # steps/s from step time: 1/x swaps min and max
        lo = [1.0 / v if v else None for v in d.hi]
        hi = [1.0 / v if v else None for v in d.lo]
        value = 1.0 / value if value else None
    elif scale is not None:
        lo = [None if v is None else v * scale for v in lo]
        hi = [None if v is None else v * scale for v in hi]
        value = None if value is None else value * scale
    return _Column(lo, hi, d.bad, value)


def _combine(
    columns: list[_Column], width: int
) -> tuple[list[float | None], list[float | None], list[float | None], list[bool]]:
    """Per bucket: the median across ranks (of each rank's bucket mid-point), the lowest
    minimum and highest maximum of any rank, and whether any rank had a NaN/Inf there."""
    med: list[float | None] = []
    lows: list[float | None] = []
    highs: list[float | None] = []
    bad: list[bool] = []
    for i in range(width):
        mids: list[float] = []
        lo: float | None = None
        hi: float | None = None
        flag = False
        for c in columns:
            if i < len(c.bad) and c.bad[i]:
                flag = True
            a, b = c.lo[i], c.hi[i]
            if a is None or b is None:
                continue
            mids.append(midpoint(a, b))  # not inf for two values of 1e308
            lo = a if lo is None or a < lo else lo
            hi = b if hi is None or b > hi else hi
        med.append(median_of(mids))
        lows.append(lo)
        highs.append(hi)
        bad.append(flag)
    return med, lows, highs, bad


def _has(model: RunModel, metric: str) -> bool:
    with model.lock:
        return model.store.series(metric) is not None


def _band_series(spec: panels.PanelSpec) -> panels.Series:
    """The series whose spread across ranks the band shows: the one named first."""
    return next((s for s in spec.series if s.lead), spec.series[0])


def _spec(ranks: Sequence[RankLog], key: str) -> panels.PanelSpec:
    for r in ranks:
        with r.model.lock:
            spec = panels.panel_spec(r.model.store, key)
            if any(r.model.store.series(s.metric) is not None for s in spec.series):
                return spec
    with ranks[0].model.lock:
        return panels.panel_spec(ranks[0].model.store, key)


def job_chart(
    ranks: Sequence[RankLog],
    key: str,
    state: ViewState,
    buckets: int,
    window: tuple[int, int] | None = None,
) -> ChartData:
    """One panel across ranks: per series the median line over the ranks, the main
    series' min–max band under it, and in the legend the rank with the highest value."""
    spec = _spec(ranks, key)
    start, end = window if window is not None else job_window(ranks, state)
    span = (start, end)
    width = max(1, buckets)
    at = state.cursor
    x = job_x(ranks, state, span, width)
    band_of = _band_series(spec)
    traces: list[Trace] = []
    bands: list[Trace] = []
    legend: list[str] = []
    weight = state.smoothing
    wanted = [
        (s.metric, smoothing.label(weight) if s.style == EMA else s.label, s.style, s.connect,
         s is band_of, False, weight if s.style == EMA else 0.0, s.markers)
        for s in spec.series
        if s.style != EMA or weight
    ]  # fmt: skip
    if key == "throughput" and not any(_has(r.model, "samples_per_s") for r in ranks):
        wanted = [("step_time", "steps/s", "raw", True, True, True, 0.0, False)]
    unit = "" if wanted and wanted[0][5] else spec.unit
    for metric, label, style, connect, banded, invert, smooth, markers in wanted:
        named = [
            (r, c)
            for r in ranks
            if (c := column(r.model, metric, span, width, at, invert, smooth, x))
        ]
        if not named:
            continue
        med, lows, highs, bad = _combine([c for _, c in named], width)
        if banded and len(named) > 1:
            bands.append(Trace(f"{label} min–max", lows, highs, (), BAND, connect))
        traces.append(Trace(label, med, med, bad, style, connect, markers))
        values = [(r, c.at) for r, c in named if c.at is not None and math.isfinite(c.at)]
        if values:
            mid = compact(median_of(v for _, v in values), unit)
            text = f"{label} {mid}"
            top, v = max(values, key=lambda rv: rv[1])
            if banded and compact(v, unit) != mid:  # ranks that agree name no one
                text += f" max {top.name} {compact(v, unit)}"
            if banded:
                legend.insert(0, text)
            else:
                legend.append(text)
    # the band first: the median lines are drawn over it
    return panels.assemble(spec, state, start, end, bands + traces, legend, at, unit, x=x)


RECENT = 50  # points of a rank's series its table row summarises (as the header's steps/s)
SLOW_STEP = 1.1  # without a verdict, a rank this much slower than the median is "slowest"


@dataclass(frozen=True)
class RankRow:
    """One rank's line in the rank table, every field ready to print."""

    name: str
    host: str
    step: str
    step_time: str
    data_wait: str
    memory: str
    status: str
    alerts: str
    worst: str  # the severity of its worst active alert ("" when none): the row's colour
    slowest: bool
    focused: bool
    first_failure: bool
    # its reader hit a problem: the table marks the row "read error", the header
    # (``JobView.error_note``) says what it is
    read_error: bool = False


def recent(store: Store, name: str) -> float | None:
    """Median of the last ``RECENT`` finite, non-negative points: one slow step does not
    make a rank look slow."""
    s = store.series(name)
    if s is None or not len(s):
        return None
    vals = [v for v in s.ys[-RECENT:] if v == v and 0 <= v < math.inf]
    return median_of(vals)


@dataclass
class _Timing:
    step: float | None
    data: float | None
    forward: float | None


def _timings(r: RankLog) -> _Timing:
    with r.model.lock:
        store = r.model.store
        return _Timing(
            recent(store, "step_time"), recent(store, "data_time"), recent(store, "forward_time")
        )


def slowest_rank(
    ranks: Sequence[RankLog], cross: CrossRank | None = None, *, by_step: bool = False
) -> RankLog | None:
    """The rank holding the job back: the straggler verdict when there is one; else the
    rank whose own share of the step (data wait + forward) stands out against the others'
    median by the straggler's bar; else one whose step time is 10 % over the median. In
    data-parallel training every rank's step takes as long (they wait for each other), so
    a rank is only named when something stands out; ``None`` otherwise.

    Whichever rule names it, the rank named is never one another rank takes 10 % longer
    per step than: the table shows both step times, and "slowest" on a 54 ms row beside a
    78 ms one was a lie. ``by_step``: only the step time counts (overlaid runs are
    unrelated runs: none waits for another, the slowest is the one whose steps are)."""
    if len(ranks) < 2:
        return None
    times = [(r, _timings(r)) for r in ranks]
    own = [(r, (t.data or 0.0) + (t.forward or 0.0), t.step) for r, t in times if t.step]
    if len(own) < 2:
        return None
    top = max(s or 0.0 for _, _, s in own)
    contenders = [x for x in own if (x[2] or 0.0) * SLOW_STEP >= top]
    if not by_step:
        if cross is not None and cross.straggler is not None:
            for r, _, _ in contenders:
                if r.path == cross.straggler:
                    return r
        slow, busy, step_t = max(contenders, key=lambda x: x[1])
        others = median_of(b for r, b, _ in own if r is not slow) or 0.0
        if busy - others >= max(MIN_EXCESS_S, EXCESS_SHARE * (step_t or 0.0)):
            return slow
    slow, _, step_t = max(own, key=lambda x: x[2] or 0.0)
    if step_t and step_t >= SLOW_STEP * (median_of(s or 0.0 for _, _, s in own) or 0.0):
        return slow
    return None


def memory_text(store: Store) -> str:
    for name in ("mem_allocated", "sys.rss"):
        v = store.latest(name)
        if v is not None:
            return compact_bytes(v)
    return "—"


def seconds_text(v: float | None) -> str:
    return compact(v, "s") if v is not None else "—"


TABLE_ROWS = 8  # rows the rank table shows (its height above the charts is 9 lines)


def pick_rows(rows: list[RankRow], limit: int = TABLE_ROWS) -> tuple[list[RankRow], str]:
    """The rows worth a line when a job has more ranks than the table has lines, in rank
    order, and a note on the rest ("+56 ranks: 56 running").

    Which first: the focused rank, the rank that failed first, those whose log can no
    longer be read, the slowest, then the ranks with the worst alerts, then crashed or
    stalled ones, then the lowest ranks. A 64-row
    table scrolled in 8 lines showed ranks 0-7, where nothing was happening, and laying
    out 64 rows on every tick cost more than reading the 64 files.
    """
    if len(rows) <= limit:
        return rows, ""

    def rank(i_row: tuple[int, RankRow]) -> tuple[int, ...]:
        i, r = i_row
        return (
            not r.focused,
            not r.first_failure,
            not r.read_error,
            not r.slowest,
            -SEVERITY_RANK.get(r.worst, 0),
            r.status not in ("crashed", "stalled"),
            i,
        )

    chosen = sorted(i for i, _ in sorted(enumerate(rows), key=rank)[:limit])
    shown = [rows[i] for i in chosen]
    taken = set(chosen)
    rest = [r for i, r in enumerate(rows) if i not in taken]
    counts: dict[str, int] = {}
    for r in rest:
        counts[r.status] = counts.get(r.status, 0) + 1
    what = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda sn: -sn[1]))
    return shown, f"+{len(rest)} more: {what}"
