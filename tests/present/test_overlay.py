"""Overlaid runs without a UI (``dltop A B [C...]``): a line per run in its colour aligned by
step, each run's alerts as its own badges and checklist owner, the run table, the focus
cycle, and the source that follows every run.

Real parts: each run is a real ``RunModel`` (store + rules engine) fed real records, and
the overlay source reads real files on its reader threads.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from dltop.tui import view_cmd
from dltop.tui.core.present import axis, overlay, overlay_scale
from dltop.tui.core.present.chartdata import Trace, off_scale_marks, y_range
from dltop.tui.core.present.overlay import FAINT, OverlayView, overlay_chart
from dltop.tui.core.present.view_model import ViewState, alert_key
from dltop.tui.core.ranks.jobs import LETTERS, MAX_RUNS, RUN_STYLES, OverlayRun, overlay_runs
from dltop.tui.core.sources.filesource import SourceError
from dltop.tui.core.sources.overlay_source import OverlaySource
from dltop.tui.core.store.run import RunModel
from test_app_support import NAN_STEP, records, write_log


def _runs(*scenarios: str, steps: int = 300) -> tuple[OverlayRun, ...]:
    models = []
    for s in scenarios:
        m = RunModel(s)
        m.ingest(list(records(s, steps)))
        models.append(m)
    return overlay_runs([f"/runs/{s}-{i}.jsonl" for i, s in enumerate(scenarios)], models)


def _view(runs: tuple[OverlayRun, ...]) -> OverlayView:
    return OverlayView(lambda: runs)


def test_a_line_per_run_in_its_own_colour_aligned_by_step() -> None:
    runs = _runs("healthy", "nan", "healthy")
    data = overlay_chart(runs, "loss", ViewState(), 60)
    lines = [t for t in data.traces if not t.markers and not t.style.endswith(FAINT)]
    assert [t.name for t in lines] == ["A", "B", "C"]
    # each run's raw loss, dimmed in its colour, drawn under its smoothed line
    names = [t.name for t in data.traces]
    for run, style in zip("ABC", RUN_STYLES, strict=False):
        raw = next(t for t in data.traces if t.name == f"{run} raw")
        assert raw.style == style + FAINT and names.index(f"{run} raw") < names.index(run)
    assert "A raw" not in data.legend
    assert [t.style for t in lines] == list(RUN_STYLES[:3])
    evals = [t for t in data.traces if t.markers]  # evals in the run's colour, with marks
    assert [t.style for t in evals] == list(RUN_STYLES[:3])
    assert (data.start, data.end) == (0, 299)
    # the smoothed line, but the raw loss's NaN marks and last value: a run gone NaN says so
    b = lines[1]
    assert not any(b.bad[: 60 * NAN_STEP // 300 - 1]) and all(b.bad[60 * NAN_STEP // 300 + 1 :])
    assert "B NaN" in data.legend and "A 0." in data.legend
    assert not any(lines[0].bad)


def test_the_raw_loss_without_smoothing_and_the_other_panels_compare_the_same_metric() -> None:
    runs = _runs("healthy", "data_bound")
    raw = overlay_chart(runs, "loss", ViewState(smoothing=0.0), 40)
    assert [t.name for t in raw.traces if not t.markers] == ["A", "B"]
    st = overlay_chart(runs, "step_time", ViewState(), 40)
    assert st.unit == "s" and [t.name for t in st.traces] == ["A", "B"]
    mem = overlay_chart(runs, "memory", ViewState(), 40)  # no CUDA memory: the RSS
    assert [t.name for t in mem.traces] == ["A", "B"] and mem.unit == "B"


def _blowing_up(peak: float, steps: int = 300) -> list[dict[str, Any]]:
    """The healthy run's records, its loss growing from step 150 to ``peak`` at the end."""
    out = list(records("healthy", steps))
    rows = [r for r in out if r.get("kind") == "step"]
    start = rows[150]["loss"]
    rate = (peak / start) ** (1 / (len(rows) - 151))
    for i, r in enumerate(rows[151:], start=1):
        r["loss"] = start * rate**i
    rows[-1]["loss"] = peak
    return out


def _with(*extra: list[dict[str, Any]]) -> tuple[OverlayRun, ...]:
    """Two healthy runs (A, B) and the given ones after them."""
    models = []
    for i, recs in enumerate(
        [list(records("healthy", 300)), list(records("healthy", 300)), *extra]
    ):
        m = RunModel(f"run{i}")
        m.ingest(recs)
        models.append(m)
    return overlay_runs([f"/runs/{i}.jsonl" for i in range(len(models))], models)


def test_a_run_that_blows_up_is_drawn_off_scale_and_the_healthy_ones_keep_the_axis() -> None:
    runs = _with(_blowing_up(1e30))
    data = overlay_chart(runs, "loss", ViewState(smoothing=False), 60)
    # the axis is the healthy runs': linear, about their 0.3-2.8, not 30 decades of log
    assert not data.log and not data.legend.startswith("[auto log]")
    rng = y_range(data)
    assert rng is not None and 2.5 < rng[1] < 4.0
    lines = {t.name: t for t in data.traces if t.connect}
    assert lines["A"].in_range and lines["B"].in_range and not lines["C"].in_range
    # C is drawn clipped at the top edge, arrows in its colour where it leaves the plot
    up, down = off_scale_marks(data, rng, 60)
    assert up and set(up.values()) == {RUN_STYLES[2]} and not down
    assert min(up) >= 30  # from its blow-up on, not before
    assert "C off-scale (max 1.0e30)" in data.legend
    # the legend's letters in their runs' colours, the numbers in the legend's
    spans = data.legend_spans
    assert ("A", RUN_STYLES[0]) in spans and ("C", RUN_STYLES[2]) in spans
    assert "".join(text for text, _ in spans) == data.legend


def test_off_scale_is_judged_against_the_median_run_not_the_largest() -> None:
    lo = Trace("A", [0.3], [2.5])
    mid = Trace("B", [0.5], [3.0])
    far = Trace("C", [1.0], [50.0])  # more than 10 scales over B's top: off-scale
    near = Trace("D", [0.1], [20.0])  # within them: in range
    assert set(overlay_scale.judge([("A", lo), ("B", mid), ("C", far)], False)) == {"C"}
    assert overlay_scale.judge([("A", lo), ("D", near)], False) == {}
    assert overlay_scale.judge([("A", lo)], False) == {}  # nothing to compare with
    # on a log axis, decades: 1e30 is off-scale, one decade more is not
    assert set(
        overlay_scale.judge([("A", lo), ("B", mid), ("C", Trace("C", [1.0], [1e30]))], True)
    ) == {"C"}
    assert overlay_scale.judge([("A", lo), ("B", Trace("B", [1.0], [25.0]))], True) == {}


def test_log_scale_by_choice_still_keeps_the_healthy_runs_readable() -> None:
    data = overlay_chart(_with(_blowing_up(1e30)), "loss", ViewState(log_loss=True), 60)
    assert data.log and "C off-scale" in data.legend
    assert not overlay_chart(_runs("healthy", "healthy"), "loss", ViewState(), 40).log


def test_each_runs_alerts_are_its_own_badges_and_checklists() -> None:
    runs = _runs("nan", "nan", "healthy")  # the same NaN at the same step in A and B
    view = _view(runs)
    alerts = view.alerts(runs[0].model)
    nan = [a for a in alerts if a.id == "nan_loss"]
    assert sorted(a.run for a in nan) == ["A", "B"]
    assert {alert_key(a) for a in nan} == {f"A:nan_loss@{NAN_STEP}", f"B:nan_loss@{NAN_STEP}"}
    b = next(a for a in nan if a.run == "B")
    assert b.title.startswith("B ") and view.owner(b, runs[0].model) is runs[1].model
    assert not any(a.run == "C" for a in alerts)
    # the engines' own alerts are untouched (copies are marked, never the originals)
    engine = runs[1].model.engine
    assert engine is not None and all(a.run is None for a in engine.alerts())


def test_the_run_table_names_each_run_and_the_focus_cycles_through_them() -> None:
    runs = _runs("healthy", "nan")
    view = _view(runs)
    rows = view.rows(now=0.0)
    assert [r.name for r in rows] == ["A healthy-0.jsonl", "B nan-1.jsonl"]
    assert view.note() == "2 runs overlaid" and view.across
    assert view.cycle() is runs[0] and not view.across and view.note().startswith("run A ")
    assert view.alerts(runs[0].model) == []  # A alone: healthy
    assert view.cycle() is runs[1] and {a.run for a in view.alerts(runs[0].model)} == {"B"}
    assert view.cycle() is None and view.across
    assert view.settled()  # nothing is judged across runs


def test_the_slowest_run_is_the_one_with_the_largest_median_step_time() -> None:
    def run(step: float, data: float) -> RunModel:
        m = RunModel("r")
        m.ingest([
            {"kind": "step", "step": i, "t": 1e9 + i * step, "loss": 1.0, "step_time": step,
             "data_time": data, "compute_time": step - data}
            for i in range(60)
        ])  # fmt: skip
        return m

    # A spends 40 of its 54 ms waiting for data; B takes 78 ms a step
    runs = overlay_runs(["/a.jsonl", "/b.jsonl"], [run(0.054, 0.040), run(0.078, 0.005)])
    rows = _view(runs).rows(1e9 + 10)
    assert [r.step_time for r in rows] == ["54.0ms", "78.0ms"]
    assert [r.slowest for r in rows] == [False, True]


def test_the_source_reads_every_run_into_its_own_model(tmp_path: Path) -> None:
    paths = [str(write_log(tmp_path / f"{s}.jsonl", s, 300)) for s in ("healthy", "nan", "gpu")]
    model = RunModel("a")
    src = OverlaySource(paths, model, follow=False, poll_interval=0.05)
    src.run()
    assert src.wait_caught_up(5) and src.error is None
    assert [r.name for r in src.ranks] == ["A", "B", "C"] and src.ranks[0].model is model
    assert [r.model.store.last_step for r in src.ranks] == [299, 299, 299]
    b = src.ranks[1].model.engine
    assert b is not None and any(a.id == "nan_loss" for a in b.alerts())


def test_a_run_that_cannot_be_opened_is_one_error_naming_it(tmp_path: Path) -> None:
    ok = str(write_log(tmp_path / "ok.jsonl", "healthy", 10))
    with pytest.raises(SourceError, match="missing.jsonl"):
        OverlaySource([ok, str(tmp_path / "missing.jsonl")], RunModel("a"))
    with pytest.raises(SourceError, match="2 to 8"):
        OverlaySource([ok] * 9, RunModel("a"))


def test_the_command_line_overlays_at_most_the_runs_the_viewer_colours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert view_cmd.MAX_OVERLAY == MAX_RUNS == len(overlay.RUN_COLOURS) == len(LETTERS)
    log = str(write_log(tmp_path / "x.jsonl", "healthy", 10))
    parser: Any = __import__("argparse").ArgumentParser()
    view_cmd.configure(parser)
    args = parser.parse_args([log] * 9)
    assert view_cmd.run(args) == view_cmd.EXIT_NO_SOURCE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 8 runs" in err[0]


def test_one_scale_decision_for_a_run_a_job_and_an_overlay() -> None:
    """A blown-up loss is on a log axis by itself however it is shown, and ``l``'s
    choice wins everywhere (panels.log_scale). Overlaid, the runs that agree decide:
    two blown-up runs are on a log axis, one beside a healthy run is off-scale instead
    (test_a_run_that_blows_up_is_drawn_off_scale...)."""
    from dltop.tui.core.present.jobview import job_chart
    from dltop.tui.core.present.panels import panel_chart

    runs = _runs("healthy", "blowup")
    both = _runs("blowup", "blowup")
    for state, log, mark in (
        (ViewState(), True, "[auto log]"),
        (ViewState(log_loss=False), False, ""),
        (ViewState(log_loss=True), True, "[log]"),
    ):
        for data in (
            panel_chart(runs[1].model, "loss", state, 40),
            job_chart(runs, "loss", state, 40),
            overlay_chart(both, "loss", state, 40),
        ):
            assert data.log is log and data.legend.startswith(mark), (state, data.legend)
    assert panel_chart(runs[1].model, "grad_norm", ViewState(log_loss=False), 40).log  # fixed


@pytest.mark.parametrize("peak", [1e308, -1e308, 1.7e308])
def test_a_run_off_scale_at_the_float_limit_is_drawn_at_the_edge(peak: float) -> None:
    """An overlaid run left out of the range is still drawn, clipped: at 1e308 (a broken
    or hostile log) its distance to the axis times the drawing scale is infinite, and the
    viewer crashed with OverflowError in ``int()`` (found by fuzzing the app: 13 of 30
    seeds of two or three overlaid hostile runs)."""
    from dltop.tui.core.present.raster import rasterise

    recs = _blowing_up(10.0)
    for r in recs[-40:]:
        if r.get("kind") == "step":
            r["loss"] = peak
    data = overlay_chart(_with(recs), "loss", ViewState(smoothing=False), 60)
    rng = y_range(data)
    assert rng is not None and all(map(math.isfinite, rng))
    bits, _, _, _, _ = rasterise(data, rng, 60, 10)
    assert any(any(row) for row in bits)  # the runs in range are drawn
    # the clipped run lit the edge it left by: the top row for a peak, the bottom for a pit
    edge = bits[0] if peak > 0 else bits[-1]
    assert any(edge)
    for at in (peak, -peak, 0.5):  # the axis's own mapping clamps the same way
        assert 0 <= axis.dot_of(at, rng[0], rng[1], 40) <= 39
