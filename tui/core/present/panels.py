"""The dashboard's panels as data: which store series each one draws, and how.

``panel_chart`` turns a panel, the run's store and the person's ``ViewState`` into the
``ChartData`` the chart widget draws: decimated to the requested number of buckets (about
two per character column) through the store's min/max decimation, so no spike and no NaN
is lost and the cost does not grow with the run. ``panel_signature`` says when a panel
must be redrawn at all: its series' versions plus the view, so idle panels cost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..sources.foreign.common import TOOL_NAME
from ..store import smoothing
from ..text.fmt import compact as format_value
from ..text.safetext import visible
from .chartdata import (
    ALT,
    ALT2,
    EMA,
    EVAL,
    LEGEND,
    RAW,
    ChartData,
    Trace,
    floor_note,
    wants_log,
)
from .extra_panels import extra_spec, is_extra
from .panelspec import PanelSpec, Series  # noqa: F401 - re-exported
from .timeaxis import CLOCK, TIME, TimeColumns, time_columns

# a legend item: plain text, or (text, style key) spans (an overlaid run's letter in its
# colour); either is escaped here, in ``assemble``
LegendItem = str | tuple[tuple[str, str], ...]

if TYPE_CHECKING:
    from ..store.decimate import Decimated
    from ..store.run import RunModel
    from ..store.runstore import Store
    from ..store.series import Series as StoreSeries
    from .viewstate import ViewState


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "loss",
        "loss",
        (
            Series("loss", "loss"),
            Series("loss", "smooth", EMA),  # the smoothed copy, drawn over the raw line
            Series("eval.loss", "eval", EVAL, markers=True),
        ),
        smooth=True,
        auto_log=True,
        empty="no loss yet",
        missing="loss",
    ),
    PanelSpec(
        "grad_norm",
        "grad norm (log)",
        (Series("grad_norm", "norm"),),
        log=True,
        empty="no grad norm (pass model= or grad_norm=)",
        missing="grad norm",
    ),
    PanelSpec(
        "lr",
        "learning rate",
        (Series("lr", "lr"),),
        empty="no lr (pass optimizer= or lr=)",
        missing="learning rate",
    ),
    PanelSpec(
        "step_time",
        "step time",  # the legend leads with the data wait: the title fits a narrow panel
        (
            Series("step_time", "step", ALT),
            Series("compute_time", "compute", ALT2),
            # drawn last (on top), named first: the data-loader share is the point of the panel
            Series("data_time", "data wait", RAW, lead=True),
        ),
        unit="s",
        y_floor=0.0,
        empty="no step timings",
        missing="step timings",
    ),
    PanelSpec(
        "memory",
        "memory",
        (
            Series("mem_allocated", "alloc"),
            Series("mem_reserved", "reserved", ALT),
            Series("mem_limit", "limit", ALT2),
        ),
        unit="B",
        y_floor=0.0,
        empty="no memory readings",
        missing="memory readings",
    ),
    PanelSpec(
        "gpu",
        "GPU (NVML)",
        (Series("sys.gpus.0.util", "util", RAW), Series("sys.gpus.0.mem_used", "mem", ALT)),
        unit="%",
        y_floor=0.0,
    ),
    PanelSpec(
        "throughput",
        "throughput",
        (Series("samples_per_s", "samples/s"),),
        y_floor=0.0,
        empty="no throughput (pass batch_size or samples)",
        missing="throughput",
    ),
)
PANEL_BY_KEY = {p.key: p for p in PANELS}
CPU_MEMORY = PanelSpec(
    "memory",
    "memory (process RSS)",
    (Series("sys.rss", "rss"),),
    unit="B",
    y_floor=0.0,
    empty="no memory readings",
    missing="memory readings",
)


def spec_for(key: str) -> PanelSpec:
    """A built-in panel by key, or the panel of a picked series (``+acc``)."""
    if is_extra(key):
        return extra_spec(key)
    return PANEL_BY_KEY[key]


def panel_spec(store: Store, key: str) -> PanelSpec:
    """The spec to draw now: the memory panel shows RSS when the log has no CUDA memory;
    another tool's log says what it lacks instead of the probe's hints."""
    if is_extra(key):
        return extra_spec(key, store)
    if (
        key == "memory"
        and store.series("mem_allocated") is None
        and store.series("mem_reserved") is None
    ):
        spec = CPU_MEMORY
    else:
        spec = PANEL_BY_KEY[key]
    tool = TOOL_NAME.get(str((store.meta or {}).get("format")))
    if tool is not None and spec.missing:
        return replace(spec, empty=f"no {spec.missing} in this {tool} log")
    return spec


def _store(model: RunModel) -> Store:
    return model.store


def window(store: Store, state: ViewState) -> tuple[int, int]:
    """The steps the charts span: the chosen window, else the whole run."""
    if state.window is not None:
        return state.window
    b = store.step_range()
    if b is None:
        return 0, 0
    return b


def panel_signature(model: RunModel, key: str, state: ViewState) -> tuple[Any, ...]:
    """Changes whenever the panel would draw something different."""
    store = _store(model)
    spec = panel_spec(store, key)
    versions = tuple(getattr(store.series(s.metric), "version", -1) for s in spec.series)
    if key == "throughput":  # without samples/s the panel draws 1 / step_time
        versions += (getattr(store.series("step_time"), "version", -1),)
    log = (spec.log, state.log_loss if key == "loss" else None)
    smooth = state.smoothing if spec.smooth else None
    x: tuple[str, int] = (state.x_axis, -1)
    if state.x_axis == TIME:  # the columns follow the clock too
        x = (state.x_axis, getattr(store.series(CLOCK), "version", -1))
    return (spec.title, versions, window(store, state), state.cursor, log, smooth, x)


def x_columns(
    store: Store, state: ViewState, start: int, end: int, buckets: int
) -> TimeColumns | None:
    """The buckets of a wall-time x axis (``x`` or ``ViewState.x_axis == "time"``), or
    ``None`` for columns uniform in steps (the step axis; a run without times)."""
    if state.x_axis != TIME:
        return None
    return time_columns(store.series(CLOCK), start, end, max(1, buckets))


def decimate(
    series: StoreSeries, start: int, end: int, buckets: int, x: TimeColumns | None
) -> Decimated:
    """A series (a stored one, or its smoothed copy) in the chart's buckets: uniform in
    steps, or between the step boundaries of a wall-time axis."""
    if x is None:
        return series.decimate(start, end, max(1, buckets))
    return series.decimate_between(x.edges)


def panel_chart(model: RunModel, key: str, state: ViewState, buckets: int) -> ChartData:
    """Decimated traces and the legend for one panel."""
    return store_chart(_store(model), key, state, buckets)


def store_chart(store: Store, key: str, state: ViewState, buckets: int) -> ChartData:
    """:func:`panel_chart` of a bare store: ``dltop report`` draws the viewer's charts
    from the records it read, without a live model."""
    spec = panel_spec(store, key)
    start, end = window(store, state)
    x = x_columns(store, state, start, end, buckets)
    traces: list[Trace] = []
    legend: list[str] = []
    lead: list[str] = []
    at = state.cursor
    for s in spec.series:
        if s.style == EMA:
            series = store.smoothed(s.metric, state.smoothing)
            label = smoothing.label(state.smoothing)
        else:
            series = store.series(s.metric)
            label = s.label
        if series is None or not len(series):
            continue
        d = decimate(series, start, end, buckets, x)
        lo, hi = d.lo, d.hi
        scale = scale_of(store, s.metric)
        if scale is not None:
            lo = [None if v is None else v * scale for v in lo]
            hi = [None if v is None else v * scale for v in hi]
        traces.append(Trace(label, lo, hi, d.bad, s.style, s.connect, s.markers))
        point = series.at_step(at) if at is not None else series.last()
        if point is not None:
            value = point[1] * scale if scale is not None else point[1]
            (lead if s.lead else legend).append(f"{label} {format_value(value, spec.unit)}")
    legend = lead + legend
    if key == "throughput" and not traces:
        traces, legend = _steps_per_second(store, start, end, buckets, at, x)
    return assemble(spec, state, start, end, traces, legend, at, spec.unit, x=x)


def assemble(
    spec: PanelSpec,
    state: ViewState,
    start: int,
    end: int,
    traces: Sequence[Trace],
    legend: Sequence[LegendItem],
    at: int | None,
    unit: str,
    x: TimeColumns | None = None,
    note: str = "",
) -> ChartData:
    """A panel's chart from its traces and legend items: the log-axis decision and its
    mark, the mark of values at the floor of a log axis, the cursor's ``@step`` prefix,
    the legend made safe to print (metric and run names are the user's); ``x``: the
    buckets of a wall-time axis, ``note`` a word on the x axis. One assembly for a
    single run, a job and an overlay."""
    log, mark = log_scale(spec, state, traces)
    floor = floor_note(traces) if log else ""
    items: list[LegendItem] = [i for i in (mark, floor) if i]
    items += legend
    if note:
        items.append(note)
    spans: list[tuple[str, str]] = [(f"@{at} ", LEGEND)] if at is not None else []
    for i, item in enumerate(items):
        if i:
            spans.append(("  ", LEGEND))
        if isinstance(item, str):
            spans.append((visible(item), LEGEND))
        else:
            spans.extend((visible(text), style) for text, style in item)
    return ChartData(
        start=start,
        end=max(end, start),
        traces=tuple(traces),
        log=log,
        cursor=at,
        legend="".join(text for text, _ in spans),
        legend_spans=tuple(spans),
        unit=unit,
        empty_text=spec.empty,
        y_floor=None if log else spec.y_floor,
        edges=x.edges if x is not None else (),
        x_time=(x.left, x.right) if x is not None else None,
    )


def log_scale(spec: PanelSpec, state: ViewState, traces: Sequence[Trace]) -> tuple[bool, str]:
    """Whether a panel draws a log axis, and the mark its legend leads with (first, so a
    narrow panel never cuts it): fixed (the grad norm, its title says so), the person's
    choice on the loss (``l``: ``[log]``), or by itself where the values span more than
    3 decades (``[auto log]``). One decision for a single run, a job and an overlay."""
    if spec.log:
        return True, ""
    choice = state.log_loss if spec.key == "loss" else None
    if choice is not None:
        return choice, "[log]" if choice else ""
    if spec.auto_log and wants_log(traces):
        return True, "[auto log]"
    return False, ""


def scale_of(store: Store, metric: str) -> float | None:
    """GPU memory is drawn in % of the device, next to utilisation in %."""
    if metric.startswith("sys.gpus.") and metric.endswith(".mem_used"):
        total = store.latest(metric[: -len("mem_used")] + "mem_total")
        if total:
            return 100.0 / total
    return None


def _steps_per_second(
    store: Store, start: int, end: int, buckets: int, at: int | None, x: TimeColumns | None
) -> tuple[list[Trace], list[str]]:
    """Without ``samples_per_s``, throughput is 1 / step_time (min and max swap)."""
    series = store.series("step_time")
    if series is None or not len(series):
        return [], []
    d = decimate(series, start, end, buckets, x)
    lo = [1.0 / v if v else None for v in d.hi]
    hi = [1.0 / v if v else None for v in d.lo]
    point = series.at_step(at) if at is not None else series.last()
    legend = [f"steps/s {format_value(1.0 / point[1])}"] if point and point[1] else []
    return [Trace("steps/s", lo, hi, d.bad, RAW, True)], legend


__all__ = ["ALT", "ALT2", "EMA", "EVAL", "RAW", "Series", "PanelSpec", "PANELS"]
