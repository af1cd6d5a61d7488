"""Several runs overlaid in one viewer: ``dltop A B [C...]`` (up to 8).

The question an overlay answers is "what did my fix change?": the same panels, one line
per run in its own colour, aligned by step, and each run's alerts as its own badges. It
is the job view's shape (``rankjob``: one :class:`RunModel` per log, each with its own
reader, store and rules; charts composed at draw time from each store's decimation,
never per record), with three differences:

- **charts**: a line per run instead of the median across ranks (ranks of one job are
  meant to agree, runs are meant to differ); the loss panel draws each run's smoothed
  loss (its raw loss with ``s``), eval points in the run's colour;
- **alerts**: never merged across runs. Each run's alerts are copies marked with the
  run's letter (:attr:`Alert.run`), so two runs' NaN at the same step are two badges,
  each opening its own run's checklist;
- **no cross-run rules**: a straggler or a "first failure" between unrelated runs means
  nothing.

Everything here runs at the UI's fixed rate; no Textual (``tests/project/test_boundaries.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..ranks.compare import FAILURES
from ..ranks.jobs import OverlayRun
from ..rules.alerts import Alert
from ..text.fmt import compact
from ..text.safetext import visible
from . import overlay_scale, panels
from .chartdata import LEGEND, ChartData, Trace
from .rankjob import (
    JobView,
    RankLog,
    RankRow,
    column,
    job_signature,
    job_window,
    slowest_rank,
)
from .timeaxis import TIME

if TYPE_CHECKING:
    from ..store.run import RunModel
    from .view_model import ViewState

# one colour per run, told apart on dark and light backgrounds and by most colour-blind
# readers (Tableau 10's first eight); the chart and the badges read them from here
RUN_COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
)
FAINT = "-faint"  # a run's raw loss under its smoothed line: its colour, dimmed
CLOCKS_DIFFER = "x: step (runs' clocks differ)"  # the legend's word in time mode


def _metric(run: OverlayRun, key: str) -> tuple[str, bool] | None:
    """What a panel compares across runs: its first series as this run's panel draws it
    (``panels.panel_spec``: RSS for a run without CUDA memory), and 1/step time for
    throughput without samples/s (inverted)."""
    if key == "loss":
        return ("loss", False) if _has(run.model, "loss") else None
    with run.model.lock:
        first = panels.panel_spec(run.model.store, key).series[0].metric
    if _has(run.model, first):
        return first, False
    if key == "throughput" and _has(run.model, "step_time"):
        return "step_time", True
    return None


def _has(model: RunModel, metric: str) -> bool:
    with model.lock:
        s = model.store.series(metric)
        return s is not None and len(s) > 0


def overlay_chart(
    runs: Sequence[OverlayRun],
    key: str,
    state: ViewState,
    buckets: int,
    window: tuple[int, int] | None = None,
) -> ChartData:
    """One panel with a line per run in the run's colour (eval points too on the loss),
    aligned by step over every run's steps (or the chosen window). The y range is the
    one of the runs that agree; a run far outside it is drawn clipped, with a note
    (``overlay_scale``). The legend's letters are in their runs' colours."""
    spec = panels.spec_for(key)
    start, end = window if window is not None else job_window(runs, state)
    span, width, at = (start, end), max(1, buckets), state.cursor
    traces: list[tuple[OverlayRun, Trace]] = []
    values: list[tuple[OverlayRun, float]] = []
    raw_extent: dict[str, tuple[float | None, float | None]] = {}
    inverted = False
    for run in runs:
        chosen = _metric(run, key)
        if chosen is None:
            continue
        metric, invert = chosen
        inverted = inverted or invert
        smooth = state.smoothing if key == "loss" else 0.0  # the loss smoothed, when on
        c = column(run.model, metric, span, width, at, invert, smooth)
        if c is None:
            continue
        bad = c.bad
        if smooth:  # the smoothed line, the raw loss's NaN marks and value
            raw = column(run.model, "loss", span, width, at, False)
            if raw is not None:
                bad, c.at = raw.bad, raw.at
                raw_extent[run.name] = _extremes(raw.lo, raw.hi)
                # the raw loss under it, dimmed, as TensorBoard draws it
                faint = Trace(f"{run.name} raw", raw.lo, raw.hi, (), run.style + FAINT, True)
                traces.append((run, faint))
        traces.append((run, Trace(run.name, c.lo, c.hi, bad, run.style, True)))
        if key == "loss" and _has(run.model, "eval.loss"):
            e = column(run.model, "eval.loss", span, width, None, False)
            if e is not None:
                traces.append(
                    (
                        run,
                        Trace(f"{run.name} eval", e.lo, e.hi, e.bad, run.style, True, markers=True),
                    )
                )
        if c.at is not None:
            values.append((run, c.at))
    unit = "" if inverted else spec.unit
    log_axis = spec.log or (key == "loss" and state.log_loss is True)
    # judged on each run's own line (its smoothed loss), not its raw noise or evaluations
    lines = [(r.name, t) for r, t in traces if t.name == r.name]
    off = overlay_scale.judge(lines, log_axis)
    for name, o in off.items():  # the note quotes the raw loss, as the legend's value does
        low, high = raw_extent.get(name, (o.low, o.high))
        off[name] = replace(
            o, high=high if o.high is not None else None, low=low if o.low is not None else None
        )
    drawn = [replace(t, in_range=False) if r.name in off else t for r, t in traces]
    # compact() writes NaN/Inf as such: a run that went NaN says so
    said = {run.name: compact(v, unit) for run, v in values}
    lead: list[panels.LegendItem] = []  # an off-scale run first: a narrow panel cuts the end
    legend: list[panels.LegendItem] = []
    for run in runs:
        word, clipped = said.get(run.name), off.get(run.name)
        if clipped is None:
            if word is not None:
                legend.append(((run.name, run.style), (f" {word}", LEGEND)))
            continue
        extremes = {compact(x, unit) for x in (clipped.high, clipped.low) if x is not None}
        note = clipped.note(unit)
        note = note if word is None or word in extremes else f"{word} {note}"
        lead.append(((run.name, run.style), (f" {note}", LEGEND)))
    legend = lead + legend
    # each run's own clock started at its own time, on its own machine: columns of elapsed
    # time would put unrelated moments side by side, so the runs stay aligned by step
    note = CLOCKS_DIFFER if state.x_axis == TIME else ""
    return panels.assemble(spec, state, start, end, drawn, legend, at, unit, note=note)


def _extremes(
    lo: Sequence[float | None], hi: Sequence[float | None]
) -> tuple[float | None, float | None]:
    low = min((v for v in lo if v is not None), default=None)
    return low, max((v for v in hi if v is not None), default=None)


class OverlayView(JobView):
    """The viewer's handle on overlaid runs: the job view's focus cycle and run table,
    with per-run charts and alerts and no cross-run rules."""

    @property
    def overlay(self) -> bool:
        return True

    unit = "run"

    def runs(self) -> tuple[OverlayRun, ...]:
        return tuple(r for r in self.ranks() if isinstance(r, OverlayRun))

    def chart(self, key: str, state: ViewState, buckets: int) -> ChartData:
        return overlay_chart(self.runs(), key, state, buckets, self.window(state))

    def signature(self, key: str, state: ViewState) -> tuple[Any, ...]:
        return job_signature(self.runs(), key, state, self.window(state))

    def update(self, now: float, force: bool = False) -> None:
        """Nothing to judge across runs (a straggler between unrelated runs means nothing)."""

    def start(self) -> None:
        """No judge thread: there is no cross-run rule."""

    def poke(self) -> None:
        """Nothing to judge."""

    def settled(self) -> bool:
        return True

    def version(self) -> tuple[int, ...]:
        return tuple(int(r.model.version) for r in self.runs())

    def who(self, r: RankLog) -> str:
        return f"run {r.name}"

    def rank_alerts(self, r: RankLog) -> list[Alert]:
        """The run's own alerts, as copies marked with its letter."""
        with r.model.lock:
            engine = r.model.engine
            own = list(engine.alerts()) if engine is not None else []
        return [replace(a, run=r.name) for a in own]

    def alerts(self, model: RunModel) -> list[Alert]:
        """Every run's alerts, each its own badge ("B ✖ Loss is NaN"); a focused run's."""
        focused = self.focused()
        if focused is not None:
            return self.rank_alerts(focused)
        out: list[Alert] = []
        for r in self.runs():
            out.extend(replace(a, title=f"{r.name} {a.title}") for a in self.rank_alerts(r))
        return out

    def credit(self, line: str, owner: RankLog | None) -> str:
        """Across runs, the verdict starts with the letter of the run it is about, as its
        badge does (``B Loss is NaN since step 240 ...``)."""
        return f"{owner.name} {line}" if isinstance(owner, OverlayRun) else line

    def run_of(self, alert: Alert | None) -> OverlayRun | None:
        if alert is None or alert.run is None:
            return None
        return next((r for r in self.runs() if r.name == alert.run), None)

    def owner(self, alert: Alert | None, model: RunModel) -> RunModel:
        r = self.run_of(alert)
        return r.model if r is not None else super().owner(alert, model)

    def crash_model(self, model: RunModel) -> RunModel:
        """The focused run's crash; across runs, the first run (by letter) that crashed."""
        focused = self.focused()
        if focused is not None:
            return focused.model
        for r in self.runs():
            with r.model.lock:
                engine = r.model.engine
                crashed = engine is not None and any(a.id in FAILURES for a in engine.alerts())
            if crashed:
                return r.model
        return model

    def slowest(self, ranks: Sequence[RankLog]) -> RankLog | None:
        """The run with the largest median step time, when it stands out: unrelated runs
        wait for nobody, so a data wait or a straggler verdict says nothing about which
        run is slow."""
        return slowest_rank(ranks, by_step=True)

    def rows(self, now: float) -> list[RankRow]:
        """The run table: the job table's columns, each row named ``A run.jsonl``."""
        rows = super().rows(now)
        labels = {r.name: r.label for r in self.runs()}
        return [replace(row, name=labels.get(row.name, row.name)) for row in rows]

    def note(self) -> str:
        runs = self.runs()
        focused = next((r for r in runs if r.path == self.focus), None)
        if focused is None:
            return f"{len(runs)} runs overlaid"
        return f"run {focused.label} of {len(runs)}"

    def panel_title(self, number: int, spec: panels.PanelSpec, rows: list[RankRow]) -> str:
        title = f"{number} {visible(spec.title)}"
        focused = self.focused()
        return f"{title} · {focused.name}" if focused is not None else title
