"""The chart's axes on screen: round y ticks on the rows of their values, zeros on a log
axis at the floor, and ``t``: columns uniform in elapsed wall time (a stall takes its
width), on a real log file driven by Pilot."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from dltop.probe.encoding import encode_record
from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import GUTTER, Chart
from dltop.tui.core.present.chartdata import ChartData, Trace
from test_app_chart import ChartApp
from test_app_keys import _notes
from test_app_live import wait_for
from test_app_support import T0, meta, screen_text

BRAILLE = re.compile("[\u2801-\u28ff]")
FLOOR_MARK = "▁"  # chartdata.FLOOR_MARK, written out: the test says what the screen shows


def _lines(chart: Chart) -> list[str]:
    return [chart.render_line(y).text for y in range(chart.size.height)]


def _labels(plot: list[str]) -> dict[int, str]:
    """Plot row -> the gutter's tick label on it."""
    return {r: row[: GUTTER - 2].strip() for r, row in enumerate(plot) if "┤" in row[:GUTTER]}


async def _test_ticks_sit_on_the_rows_of_their_values() -> None:
    half = 40  # buckets at 1.0, then at 2.0: two flat lines
    values: list[float | None] = [1.0] * half + [2.0] * half
    data = ChartData(start=0, end=79, traces=(Trace("x", values, values, [False] * 80),))
    app = ChartApp(data)
    async with app.run_test(size=(40 + GUTTER, 22)) as pilot:  # a plot 20 rows tall
        await pilot.pause()
        lines = _lines(app.query_one(Chart))
    plot = lines[1:-1]
    labels = _labels(plot)
    assert len(labels) >= 5, labels  # not just top, middle and bottom
    assert {"1.0", "2.0"} <= set(labels.values()), labels
    decimals = {len(s.partition(".")[2]) for s in labels.values()}
    assert decimals == {1}, labels  # one format for the axis
    row_of = {s: r for r, s in labels.items()}
    left = plot[row_of["1.0"]][GUTTER : GUTTER + 18]
    right = plot[row_of["2.0"]][GUTTER + 22 :]
    assert BRAILLE.search(left), plot  # the line at 1.0 is drawn on the row labelled 1.0
    assert BRAILLE.search(right), plot
    # round values, not the padded edges of the range
    assert all(float(s) * 5 == round(float(s) * 5) for s in labels.values())


async def _test_zeros_on_a_log_axis_sit_on_the_floor_with_their_own_mark() -> None:
    values: list[float | None] = [1.0 + i / 10 for i in range(60)]
    for i in range(20, 30):
        values[i] = 0.0
    data = ChartData(
        start=0, end=59, traces=(Trace("norm", values, values, [False] * 60),), log=True
    )
    app = ChartApp(data)
    async with app.run_test(size=(30 + GUTTER, 12)) as pilot:
        await pilot.pause()
        lines = _lines(app.query_one(Chart))
    plot = [row[GUTTER:] for row in lines[1:-1]]
    floor = [c for c, ch in enumerate(plot[-1]) if ch == FLOOR_MARK]
    assert floor == list(range(10, 15)), plot[-1]  # buckets 20-29 of 60 on 30 columns
    assert all(FLOOR_MARK not in row for row in plot[:-1])
    # no line down to the floor: the zeros' columns hold no braille above it
    assert all(not BRAILLE.search(row[11:14]) for row in plot)


async def _test_values_at_the_edges_of_a_float_draw_instead_of_crashing() -> None:
    # subnormal values (a broken log): their span made the drawing scale infinite; values
    # all past the drawable edge (an lr of 1e308 throughout) gave a range of no height
    edge = ([1e308] * 3, [-1e308] * 3, [1e302, 1e303, 1e304], [-1e304, -1e303, -1e302])
    for values in ([1e-310, 1.05e-310, 1.1e-310], [0.0, 1e-323], [-1e300, 1e300], *edge):
        v: list[float | None] = list(values)
        app = ChartApp(ChartData(start=0, end=2, traces=(Trace("x", v, v, [False] * 3),)))
        async with app.run_test(size=(40, 12)) as pilot:
            await pilot.pause()
            lines = _lines(app.query_one(Chart))
        assert any(BRAILLE.search(row) for row in lines[1:-1]), values


def test_values_at_the_edges_of_a_float_draw_instead_of_crashing() -> None:
    asyncio.run(_test_values_at_the_edges_of_a_float_draw_instead_of_crashing())


def test_ticks_sit_on_the_rows_of_their_values() -> None:
    asyncio.run(_test_ticks_sit_on_the_rows_of_their_values())


def test_zeros_on_a_log_axis_sit_on_the_floor_with_their_own_mark() -> None:
    asyncio.run(_test_zeros_on_a_log_axis_sit_on_the_floor_with_their_own_mark())


STEPS, STALL_AFTER, STALL_S = 200, 99, 60.0


def _stalled_log(path: Path) -> Path:
    """200 steps of 0.1 s with a 60 s stall after step 99; the loss is 3 before the stall
    and 1 after it, so the screen shows where the stall's steps went."""
    t = T0
    with open(path, "wb") as f:
        f.write(encode_record(meta()))
        for i in range(STEPS):
            t += 0.1 + (STALL_S if i == STALL_AFTER + 1 else 0.0)
            loss = 3.0 if i <= STALL_AFTER else 1.0
            rec = {"kind": "step", "step": i, "t": t, "loss": loss, "step_time": 0.1}
            f.write(encode_record(rec))
    return path


def _top_extent(lines: list[str]) -> float:
    """How far right the plot's top row (the loss at 3, before the stall) is drawn, as a
    share of the plot's width."""
    top = lines[1][GUTTER:]
    filled = [c for c, ch in enumerate(top) if BRAILLE.match(ch)]
    return (max(filled) + 1) / len(top)


def _cursor_share(lines: list[str]) -> float:
    """Where the cursor's column is (the one drawn ``│`` on most plot rows), as a share."""
    plot = [row[GUTTER:] for row in lines[1:-1]]
    width = len(plot[0])
    col = max(range(width), key=lambda c: sum(row[c] == "│" for row in plot))
    return col / width


async def _test_t_draws_columns_uniform_in_elapsed_time(tmp_path: Path) -> None:
    log = _stalled_log(tmp_path / "stalled.jsonl")
    end = T0 + STEPS * 0.1 + STALL_S
    app = DltopApp(str(log), follow=False, now=end + 3, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: f"step {STEPS - 1}" in screen_text(app), "loaded")
        chart = app.query_one("#panel-loss", Chart)
        await pilot.press("S")  # the raw loss alone (0.6 -> off): its smoothed line trails
        app.set_state(cursor=120)  # as `g 120` does, without zooming in around it
        await pilot.pause()
        steps = _lines(chart)
        assert steps[-1][:GUTTER].strip() == "step"
        assert _top_extent(steps) > 0.45  # 100 of 200 steps: half the width
        assert 0.55 < _cursor_share(steps) < 0.65  # step 120 of 200

        await pilot.press("t")
        await pilot.pause()
        assert app.state.x_axis == "time"
        times = _lines(chart)
        axis = times[-1]
        assert axis[:GUTTER].strip() == "time"
        labels = axis[GUTTER:].split()
        assert labels[0] == "0s" and len(labels) >= 3, axis
        assert all(re.fullmatch(r"\d+s", s) for s in labels), axis  # one format
        # 10 s of steps, 60 s without any, 10 s of steps: the first 100 steps take an
        # eighth of the width, the stall most of it; step 120 is drawn ~72 s in of 80
        assert _top_extent(times) < 0.35, times[1]
        assert 0.85 < _cursor_share(times) < 0.95
        data = chart.data
        assert data is not None and data.x_time is not None
        empty = sum(1 for v in data.traces[0].hi if v is None)
        assert empty > 0.6 * len(data.traces[0].hi)  # the stall's columns hold no step
        # the cursor keys cross the stall in one press
        app.set_state(cursor=100)
        await pilot.press("left")
        await pilot.pause()
        assert app.state.cursor is not None and 90 <= app.state.cursor < 100

        await pilot.press("t")
        await pilot.pause()
        assert app.state.x_axis == "step" and _lines(chart)[-1][:GUTTER].strip() == "step"


def test_t_draws_columns_uniform_in_elapsed_time(tmp_path: Path) -> None:
    asyncio.run(_test_t_draws_columns_uniform_in_elapsed_time(tmp_path))


async def _test_t_on_a_log_without_times_keeps_steps_and_says_why(tmp_path: Path) -> None:
    csv = tmp_path / "version_0" / "metrics.csv"
    csv.parent.mkdir()
    csv.write_text("epoch,step,train_loss\n" + "".join(f"0,{s},{2 - s / 50}\n" for s in range(60)))
    app = DltopApp(str(csv), follow=False, now=T0, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "replayed")
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        assert app.state.x_axis == "step"
        assert "no wall-clock times in this log" in _notes(app)
        axis = _lines(app.query_one("#panel-loss", Chart))[-1]
        assert axis[:GUTTER].strip() == "step" and "0" in axis[GUTTER:].split()


def test_t_on_a_log_without_times_keeps_steps_and_says_why(tmp_path: Path) -> None:
    asyncio.run(_test_t_on_a_log_without_times_keeps_steps_and_says_why(tmp_path))
