"""The braille chart widget: what it draws from decimated buckets, and when it redraws."""

from __future__ import annotations

import asyncio
import math

from dltop.tui.app.chart import BAD_MARK, GUTTER, Chart
from dltop.tui.core.present.chartdata import (
    ChartData,
    Trace,
    step_to_column,
    wants_log,
    y_range,
)
from dltop.tui.core.text.fmt import compact as format_value
from textual.app import App, ComposeResult


class ChartApp(App[None]):
    def __init__(self, data: ChartData) -> None:
        super().__init__()
        self._data = data

    def compose(self) -> ComposeResult:
        chart = Chart(id="c")
        chart.data = self._data
        yield chart


def _text(chart: Chart) -> list[str]:
    return [chart.render_line(y).text for y in range(chart.size.height)]


def _trace(values: list[float]) -> Trace:
    lo: list[float | None] = []
    hi: list[float | None] = []
    bad: list[bool] = []
    for v in values:
        finite = math.isfinite(v)
        lo.append(v if finite else None)
        hi.append(v if finite else None)
        bad.append(not finite)
    return Trace("loss", lo, hi, bad)


async def _test_chart_draws_braille_and_marks_nan_instead_of_a_gap() -> None:
    values = [1.0 / (i + 1) for i in range(60)]
    values[40] = math.nan
    data = ChartData(start=0, end=59, traces=(_trace(values),), legend="loss 0.02")
    app = ChartApp(data)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        lines = _text(app.query_one(Chart))
    assert lines[0].startswith("loss 0.02")
    plot = lines[1:-1]
    assert any(any("\u2800" < ch <= "\u28ff" for ch in row) for row in plot)
    assert BAD_MARK in plot[0], "a NaN bucket must be marked on the top row"
    assert lines[-1].split() == ["step", "0", "20", "40"]  # round steps, not 0 / 29 / 59
    # the NaN mark sits at the bucket's column: 40 of 60 buckets across 32 columns
    col = plot[0].index(BAD_MARK) - GUTTER
    assert abs(col - 40 * 32 // 60) <= 1


async def _test_chart_only_rasterises_when_data_or_size_changes() -> None:
    data = ChartData(start=0, end=9, traces=(_trace([float(i) for i in range(10)]),))
    app = ChartApp(data)
    async with app.run_test(size=(40, 12)) as pilot:
        chart = app.query_one(Chart)
        await pilot.pause()
        first = chart.draws
        assert first >= 1
        chart.refresh()  # a repaint without new data reuses the strips
        await pilot.pause()
        assert chart.draws == first
        chart.set_data(ChartData(start=0, end=9, traces=(_trace([1.0] * 10),)))
        await pilot.pause()
        assert chart.draws == first + 1


async def _test_chart_few_points_draw_a_line_not_dashes() -> None:
    # 60 buckets (a 30-column plot) but only every 6th holds a point: a zoomed-in window
    lo: list[float | None] = [float(i) if i % 6 == 0 else None for i in range(60)]
    data = ChartData(start=0, end=59, traces=(Trace("loss", lo, lo, [False] * 60),))
    app = ChartApp(data)
    async with app.run_test(size=(30 + GUTTER, 10)) as pilot:
        await pilot.pause()
        lines = _text(app.query_one(Chart))
    plot = [row[GUTTER:] for row in lines[1:-1]]
    filled = [c for c in range(30) if any(row[c] != " " for row in plot)]
    assert filled == list(range(filled[0], 28)), "every column from the first to the last point"


async def _test_chart_all_nan_still_shows_marks_and_empty_text() -> None:
    app = ChartApp(ChartData(start=0, end=3, traces=(_trace([math.nan] * 4),)))
    async with app.run_test(size=(30, 8)) as pilot:
        await pilot.pause()
        lines = _text(app.query_one(Chart))
    assert BAD_MARK in lines[1]
    app2 = ChartApp(ChartData(start=0, end=0, traces=(), empty_text="no grad norm"))
    async with app2.run_test(size=(30, 8)) as pilot:
        await pilot.pause()
        assert any("no grad norm" in row for row in _text(app2.query_one(Chart)))


async def _test_chart_cursor_and_log_scale() -> None:
    values = [10.0**i for i in range(-3, 4)] * 4
    data = ChartData(start=100, end=127, traces=(_trace(values),), log=True, cursor=110)
    app = ChartApp(data)
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        lines = _text(app.query_one(Chart))
    labels = [row[: GUTTER - 2].strip() for row in lines[1:-1] if "┤" in row]
    # log scale: axis spans about 1e-3 .. 1e3, ticks at powers of ten in that range
    assert all(s.startswith("1e") for s in labels), labels
    assert float(labels[0]) >= 100 and float(labels[-1]) <= 0.01
    col = step_to_column(110, 100, 127, 32)
    assert col is not None
    assert all(row[GUTTER + col] != " " for row in lines[1:-1])


def test_chartdata_helpers() -> None:
    t = _trace([1.0, 2.0, math.inf, 4.0])
    data = ChartData(start=0, end=3, traces=(t,))
    lo, hi = y_range(data)  # type: ignore[misc]
    assert lo < 1.0 and hi > 4.0
    assert y_range(ChartData(start=0, end=3, traces=(_trace([math.nan]),))) is None
    assert step_to_column(0, 0, 99, 10) == 0 and step_to_column(99, 0, 99, 10) == 9
    assert step_to_column(100, 0, 99, 10) is None
    assert format_value(math.nan) == "NaN" and format_value(3 * 2**30, "B") == "3.0GiB"
    assert format_value(0.012, "s") == "12.0ms"


def test_chart_draws_braille_and_marks_nan_instead_of_a_gap() -> None:
    asyncio.run(_test_chart_draws_braille_and_marks_nan_instead_of_a_gap())


def test_chart_only_rasterises_when_data_or_size_changes() -> None:
    asyncio.run(_test_chart_only_rasterises_when_data_or_size_changes())


def test_chart_all_nan_still_shows_marks_and_empty_text() -> None:
    asyncio.run(_test_chart_all_nan_still_shows_marks_and_empty_text())


def test_chart_cursor_and_log_scale() -> None:
    asyncio.run(_test_chart_cursor_and_log_scale())


def test_chart_few_points_draw_a_line_not_dashes() -> None:
    asyncio.run(_test_chart_few_points_draw_a_line_not_dashes())


def test_an_axis_never_goes_below_zero_for_a_series_that_never_does() -> None:
    # the NaN demo's shape on a linear axis: 1.5 ... 1e35; padding used to put -1e34 on it
    blown = ChartData(0, 9, (Trace("loss", [1.5, 0.01, 1e35], [1.5, 0.01, 1e35]),))
    low, high = y_range(blown) or (None, None)
    assert low == 0.0 and high is not None and high > 1e35
    lr = ChartData(0, 9, (Trace("lr", [0.0, 1.0], [0.0, 3.0]),))
    assert (y_range(lr) or (None,))[0] == 0.0
    # a series away from zero keeps its padding (no squashed axis from 0 to 2.5)
    flat = ChartData(0, 9, (Trace("loss", [2.3, 2.4], [2.4, 2.5]),))
    assert 2.0 < (y_range(flat) or (0.0,))[0] < 2.3
    # ... and one that does go negative is drawn below zero as before
    neg = ChartData(0, 9, (Trace("x", [-1.0], [1.0]),))
    assert (y_range(neg) or (0.0,))[0] < -1.0


def test_more_than_three_decades_of_positive_values_want_a_log_axis() -> None:
    assert wants_log([Trace("loss", [1.5, 2e3], [1.6, 2e3])])  # 1.5 -> 2000: > 1000x
    assert not wants_log([Trace("loss", [1.5, 1e3], [1.6, 1e3])])  # under 3 decades
    assert not wants_log([Trace("loss", [0.0, 1e9], [0.0, 1e9])])  # zero: no log axis
    assert not wants_log([Trace("x", [-1.0, 1e9], [1.0, 1e9])])  # negative: no log axis
    assert not wants_log([Trace("loss", [None], [None])])
