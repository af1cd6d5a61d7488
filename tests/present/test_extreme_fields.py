"""Every panel drawn over a field held at the edges of what a float (or an int) holds: one
run alone, overlaid beside a healthy run, and as a two-rank job, in every view (log loss,
no smoothing, the time axis, a cursor, a window).

Why: a chart's arithmetic (range, padding, the dot of each value, the ticks) met values
the rules had long been tested on only when a fuzzer drove the app: an overlaid run off
the scale at 1e308 (``int(inf)``), two ranks' median at 1e308 (``0.5 * (a + b)`` is inf;
the log axis then spanned 1e300 decades and its ticks grew until out of memory), an lr
of 1e308 throughout (a range of no height). On the old code 73 of the 273 cases here
fail; each case is the same field through every panel, so one bug fails many.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from dltop.tui.core.present import svgchart
from dltop.tui.core.present import view_model as vm
from dltop.tui.core.present.axis import MAX_DECADES, step_ticks, time_ticks, y_ticks
from dltop.tui.core.present.chartdata import ChartData, off_scale_marks, y_range
from dltop.tui.core.present.jobview import job_chart
from dltop.tui.core.present.overlay import overlay_chart
from dltop.tui.core.present.panels import PANELS, panel_chart
from dltop.tui.core.present.raster import rasterise
from dltop.tui.core.present.viewstate import ViewState
from dltop.tui.core.ranks.jobs import RankLog, overlay_runs
from dltop.tui.core.store.run import RunModel

T0 = 1_700_000_000.0
FIELDS = ("loss", "grad_norm", "lr", "step_time", "data_time", "compute_time", "mem_allocated",
          "mem_reserved", "mem_limit", "samples_per_s", "batch_size", "t", "acc")  # fmt: skip
VALUES = (1e308, -1e308, 1.7976931348623157e308, 5e-324, -1.0, 0.0, 2**63)
MODES = ("const", "alt", "tail")  # every step, every other step, the last third
STATES = (
    ViewState(),
    ViewState(log_loss=True),
    ViewState(smoothing=0.0),
    ViewState(x_axis="time"),
    ViewState(cursor=150),
    ViewState(window=(100, 250)),
)


def _run(field: str, value: Any, mode: str, rank: int | None = None) -> list[dict[str, Any]]:
    meta: dict[str, Any] = {"kind": "meta", "v": 1, "run_id": "x", "t": T0, "host": "h", "pid": 1}
    if rank is not None:
        meta.update(rank=rank, world_size=2)
    recs = [meta]
    for i in range(300):
        rec = {"kind": "step", "step": i, "t": T0 + i, "loss": 2.0 / (i + 1) ** 0.3,
               "grad_norm": 1.0, "lr": 1e-3, "step_time": 0.1, "data_time": 0.01,
               "compute_time": 0.09, "mem_allocated": 1 << 20, "samples_per_s": 320.0,
               "batch_size": 32}  # fmt: skip
        if mode == "const" or (mode == "alt" and i % 2) or (mode == "tail" and i > 200):
            rec[field] = value
        recs.append(rec)
        if i % 20 == 19:
            loss = value if field == "loss" else 1.0
            recs.append({"kind": "eval", "step": i, "t": T0 + i, "loss": loss})
    return recs


def _model(records: list[dict[str, Any]], name: str) -> RunModel:
    m = RunModel(name)
    m.ingest(records)
    return m


def _draw(data: ChartData, where: str, svg: bool) -> None:
    """What the chart widget does with a panel's data, without the widget; ``svg``: and
    the report's chart of it (``svgchart.render``)."""
    rng = y_range(data)
    if rng is not None:
        assert all(map(math.isfinite, rng)) and rng[1] > rng[0], (where, rng)
        # a log axis is in decades: more than floats span is a range the tick search
        # would walk one decade at a time (1e300 of them: out of memory)
        assert not data.log or rng[1] - rng[0] <= MAX_DECADES, (where, rng)
        rasterise(data, rng, 60, 10)
        off_scale_marks(data, rng, 60)
        y_ticks(rng[0], rng[1], 10, data.log, data.unit, 7)
    if svg:
        assert svgchart.render(data, where).startswith("<svg"), where
    step_ticks(data.start, data.end, 60)
    if data.x_time is not None:
        time_ticks(data.x_time[0], data.x_time[1], 60)


@pytest.mark.slow
def test_every_panel_draws_fields_at_the_float_limits() -> None:
    healthy = _model(_run("loss", 1.0, "none"), "healthy")
    failures = []
    for field, value, mode in itertools.product(FIELDS, VALUES, MODES):
        where = f"{field}={value!r} ({mode})"
        try:
            single = _model(_run(field, value, mode), "run")
            ranks = [
                RankLog(r, f"/job/rank{r}.jsonl", _model(_run(field, value, mode, r), f"r{r}"))
                for r in range(2)
            ]
            overlay = overlay_runs(["/a.jsonl", "/b.jsonl"], [healthy, single])
            for spec in PANELS:
                for state in STATES:
                    svg = state == STATES[0]  # the report draws the default view
                    at = f"{where} {spec.key}"
                    with vm.locked(single):
                        _draw(panel_chart(single, spec.key, state, 60), at, svg)
                    _draw(overlay_chart(overlay, spec.key, state, 60), f"{at} A B", svg)
                    _draw(job_chart(ranks, spec.key, state, 60), f"{at} job", svg)
        except Exception as exc:  # every case is reported, not only the first
            failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:160]}")
    assert not failures, f"{len(failures)} cases failed:\n" + "\n".join(failures[:20])
