"""``dltop A B [C...]`` in the real app (Pilot): two and eight runs overlaid, each run's
alerts as its own badges whose checklist ticks go beside that run's log, the focus key,
a live run followed while overlaid (a real writer subprocess), and a snapshot."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import Chart
from dltop.tui.app.checklist import StepList
from dltop.tui.app.rank_table import RankTable
from dltop.tui.core.diagnosis.ticks import sidecar_path
from dltop.tui.core.present.overlay import FAINT
from test_app_live import wait_for, writer
from test_app_support import NAN_STEP, end_time, screen_text, write_log

STEPS = NAN_STEP + 20


def _overlay(paths: list[Path], steps: int = STEPS, follow: bool = False) -> DltopApp:
    return DltopApp(
        str(paths[0]),
        overlay=[str(p) for p in paths],
        follow=follow,
        now=end_time(steps) + 3,
        poll_interval=0.05,
    )


async def _loaded(pilot: object, app: DltopApp) -> None:
    deadline = time.monotonic() + 30
    while not app.ended and time.monotonic() < deadline:
        await pilot.pause(0.05)  # type: ignore[attr-defined]
    assert app.ended, "the overlay was not read to its end"
    app.redraw()
    await pilot.pause()  # type: ignore[attr-defined]


def _lines(app: DltopApp, key: str = "loss") -> list[str]:
    data = app.query_one(f"#panel-{key}", Chart).data
    assert data is not None
    # each run's own line: not its evaluations (lines with markers) nor its raw loss
    # drawn faint under its smoothed one
    return [t.name for t in data.traces if not t.markers and not t.style.endswith(FAINT)]


async def _test_two_runs(tmp_path: Path) -> None:
    healthy = write_log(tmp_path / "before.jsonl", "healthy", STEPS)
    nan = write_log(tmp_path / "after.jsonl", "nan", STEPS)
    before = nan.read_bytes()
    app = _overlay([healthy, nan])
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        text = screen_text(app)
        assert "2 runs overlaid" in text and "f run" in text
        assert "A before.jsonl" in text and "B after.jsonl" in text  # the run table
        assert "B Loss is NaN" in text  # B's alert, named with its run
        assert _lines(app) == ["A", "B"] and "B NaN" in text
        assert app.query_one(RankTable).unit == "run"
        # B's NaN explains itself; a tick goes beside B's log, under B's own key
        assert app.state.selected == f"B:nan_loss@{NAN_STEP}"
        await pilot.press("a")
        await pilot.pause()
        app.query_one(StepList).focus()
        await pilot.pause()
        await pilot.press("space")
        await pilot.pause()
        ticks = json.loads(sidecar_path(nan).read_text())["ticks"]
        assert list(ticks) == [app.state.selected.split(":", 1)[1]]  # type: ignore[union-attr]
        assert not sidecar_path(healthy).exists()
        # f: run A alone (healthy: no alerts, its own charts), B alone, all again
        await pilot.press("f")
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        text = screen_text(app)
        assert "run A before.jsonl of 2" in text and "Loss is NaN" not in text
        await pilot.press("f", "f")
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        assert "2 runs overlaid" in screen_text(app) and _lines(app) == ["A", "B"]
    assert nan.read_bytes() == before, "the viewer never writes to a user's log"


def test_two_runs_overlay_with_their_own_alerts_ticks_and_focus(tmp_path: Path) -> None:
    asyncio.run(_test_two_runs(tmp_path))


async def _test_eight_runs(tmp_path: Path) -> None:
    scenarios = ["healthy", "nan", "data_bound", "gpu", "blowup", "healthy", "crashed", "killed"]
    paths = [write_log(tmp_path / f"run{i}.jsonl", s, STEPS) for i, s in enumerate(scenarios)]
    app = _overlay(paths)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        assert _lines(app) == list("ABCDEFGH")
        assert [r.name.split()[0] for r in app.query_one(RankTable).rows] == list("ABCDEFGH")
        assert "8 runs overlaid" in screen_text(app)
        assert _lines(app, "step_time") == list("ABCDEFGH")


def test_eight_runs_overlay(tmp_path: Path) -> None:
    asyncio.run(_test_eight_runs(tmp_path))


async def _test_a_live_run_is_followed_while_overlaid(tmp_path: Path) -> None:
    done = write_log(tmp_path / "done.jsonl", "healthy", 100)
    live = tmp_path / "live.jsonl"
    go = tmp_path / "go"  # the writer holds after step 60 until the viewer has seen it
    with writer(live, "healthy", 400, rate=200.0, hold=(60, go)):
        await_start = time.monotonic()
        while not live.exists() and time.monotonic() - await_start < 30:
            await asyncio.sleep(0.05)
        app = _overlay([done, live], steps=400, follow=True)
        async with app.run_test(size=(120, 40)) as pilot:
            b = app.job.runs()[1].model  # type: ignore[attr-defined]

            def last() -> int:
                return int(b.store.last_step or 0)

            await wait_for(pilot, lambda: last() >= 50, "the live run's first steps")
            first = last()
            go.touch()
            await wait_for(pilot, lambda: last() >= 399, "the live run to the end")
            assert 50 <= first <= 60  # seen growing, then followed to its end
            app.redraw()
            await pilot.pause()
            assert "B live.jsonl" in screen_text(app) and _lines(app) == ["A", "B"]


def test_a_live_run_is_followed_while_overlaid(tmp_path: Path) -> None:
    asyncio.run(_test_a_live_run_is_followed_while_overlaid(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_two_runs_snapshot(tmp_path: Path, snap_compare: object, size: tuple[int, int]) -> None:
    paths = [
        write_log(tmp_path / "lr-3e-4.jsonl", "healthy", 320),
        write_log(tmp_path / "lr-1e-2.jsonl", "blowup", 320),
    ]
    app = _overlay(paths, steps=320)

    async def run_before(pilot: object) -> None:
        await _loaded(pilot, app)

    assert snap_compare(app, terminal_size=size, run_before=run_before)  # type: ignore[operator]


async def _test_l_turns_the_drawn_axis(tmp_path: Path) -> None:
    paths = [
        write_log(tmp_path / "ok.jsonl", "healthy", 320),
        write_log(tmp_path / "blew.jsonl", "blowup", 320),
    ]
    app = _overlay(paths, steps=320)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)

        def log_axis() -> bool:
            data = app.query_one("#panel-loss", Chart).data
            assert data is not None
            return data.log

        def legend() -> str:
            data = app.query_one("#panel-loss", Chart).data
            assert data is not None
            return data.legend

        # B's loss spans 35 decades: drawn off-scale, the axis stays A's (linear, where
        # run B once put every run on a log axis, A flat on its floor); `l` turns what is
        # drawn, not run A's chart
        assert not log_axis() and "B off-scale (max " in legend()
        await pilot.press("l")
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        assert log_axis() and legend().startswith("[log]")
        await pilot.press("l")
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        assert not log_axis()


def test_l_turns_the_axis_the_overlay_draws(tmp_path: Path) -> None:
    asyncio.run(_test_l_turns_the_drawn_axis(tmp_path))


async def _test_report_of_a_focused_run(tmp_path: Path) -> tuple[str, Path]:
    healthy = write_log(tmp_path / "before.jsonl", "healthy", STEPS)
    nan = write_log(tmp_path / "after.jsonl", "nan", STEPS)
    app = _overlay([healthy, nan])
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("f", "f")  # run B alone
        await pilot.pause()
        await pilot.press("a")  # its alert (run A alone had none to keep selected)
        await pilot.pause()
        assert app.state.selected == f"B:nan_loss@{NAN_STEP}"
        app.query_one(StepList).focus()
        await pilot.pause()
        await pilot.press("space")  # a tick made after the focus key
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
    return app.state.selected or "", nan


@pytest.mark.slow
def test_r_on_a_focused_run_reports_that_run_with_its_ticks(tmp_path: Path) -> None:
    from dltop.tui.core.present.report import default_path

    _, nan = asyncio.run(_test_report_of_a_focused_run(tmp_path))
    text = Path(default_path(str(nan))).read_text()
    assert f"Source: `{nan}`" in text  # run B's log, not run A's
    assert "(1 of " in text  # the tick made on screen, not the sidecar as at the focus key
