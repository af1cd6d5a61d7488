"""Every key of the dashboard, driven by Pilot on a real log file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dltop.tui.app.app import DltopApp
from dltop.tui.app.badges import Badge
from dltop.tui.app.cards import GpuPanel
from dltop.tui.app.chart import Chart
from dltop.tui.app.checklist import ChecklistPane, StepList
from dltop.tui.app.crash_banner import CrashBanner
from dltop.tui.app.help import HelpScreen
from dltop.tui.core.ticks import sidecar_path
from test_app_live import WAIT, wait_for, writer
from test_app_support import NAN_STEP, end_time, screen_text, write_log
from textual.filter import Monochrome, NoColor


def _replay(log: Path, steps: int, **kw: object) -> DltopApp:
    return DltopApp(str(log), follow=False, now=end_time(steps) + 3, poll_interval=0.05, **kw)  # type: ignore[arg-type]


def _legend(app: DltopApp, key: str = "loss") -> str:
    return app.query_one(f"#panel-{key}", Chart).render_line(0).text


async def _loaded(pilot: object, app: DltopApp, last: int) -> None:
    await wait_for(pilot, lambda: f"step {last}" in screen_text(app), f"step {last}")


async def _test_view_keys(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 299)
        assert "ema" in _legend(app) and "[log]" not in _legend(app)
        await pilot.press("l")
        await pilot.pause()
        assert "[log]" in _legend(app) and app.state.log_loss
        await pilot.press("s")
        await pilot.pause()
        assert "ema" not in _legend(app)
        await pilot.press("right")
        await pilot.pause()
        assert _legend(app).startswith("@0 ")
        await pilot.press("right", "right")
        await pilot.pause()
        first = app.state.cursor
        assert first is not None and first > 0 and _legend(app).startswith(f"@{first} ")
        await pilot.press("left")
        await pilot.pause()
        assert app.state.cursor is not None and app.state.cursor < first
        await pilot.press("g", *"150", "enter")
        await pilot.pause()
        assert app.state.cursor == 150 and _legend(app).startswith("@150 ")
        assert app.state.window is not None and app.state.window[0] < 150 < app.state.window[1]
        assert "window" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.state.cursor is None and app.state.window is None
        await pilot.press("2")  # zoom the grad-norm panel
        await pilot.pause()
        assert app.screen.maximized is app.query_one("#panel-grad_norm")
        await pilot.press("2")
        await pilot.pause()
        assert app.screen.maximized is None
        await pilot.press("6")  # the GPU panel (a container) zooms too
        await pilot.pause()
        assert app.screen.maximized is app.query_one(GpuPanel)
        assert "GPU  N/A" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen) and "go to a step" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("tab")
        await pilot.pause()
        assert app.focused is not None
        await pilot.press("right")  # the cursor keys still work wherever the focus is
        await pilot.pause()
        assert app.state.cursor == 0
        await pilot.press("end")
        await pilot.pause()
        assert app.state.cursor is None
        await pilot.press("e")
        await pilot.pause()
        shots = list(tmp_path.glob("dltop-*.svg"))
        assert len(shots) == 1 and shots[0].read_text().startswith("<svg")
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def _test_alert_selection_opens_checklist_and_ticks_go_to_a_sidecar(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "nan", NAN_STEP + 20)
    before = log.read_bytes()
    app = _replay(log, NAN_STEP + 20)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, NAN_STEP + 19)
        pane = app.query_one(ChecklistPane)
        assert not pane.display, "no side pane until an alert is chosen"
        await pilot.press("a")
        await pilot.pause()
        assert pane.display and app.state.selected is not None
        assert (
            app.state.window is not None and app.state.window[0] <= NAN_STEP <= app.state.window[1]
        )
        text = screen_text(app)
        assert "Was the learning rate high" in text or "[ ]" in text
        steps = app.query_one(StepList)
        steps.focus()
        await pilot.press("space")
        await pilot.pause()
        assert "[x]" in screen_text(app)
        side = sidecar_path(log)
        ticks = json.loads(side.read_text())["ticks"]
        assert list(ticks) == [app.state.selected] and len(ticks[app.state.selected]) == 1
        await pilot.press("space")  # untick
        await pilot.pause()
        assert json.loads(side.read_text())["ticks"] == {}
        await pilot.press("space")
        await pilot.pause()
    assert log.read_bytes() == before, "the viewer never writes to the user's log"
    # a new viewer on the same log finds the tick again
    app2 = _replay(log, NAN_STEP + 20)
    async with app2.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app2, NAN_STEP + 19)
        await pilot.click(Badge)  # the mouse works too: the first (newest) badge
        await pilot.pause()
        assert app2.state.selected is not None
        assert "[x]" in screen_text(app2)
        await pilot.press("c")  # the pane can be hidden again
        await pilot.pause()
        assert not app2.query_one(ChecklistPane).display


async def _test_pause_freezes_the_view_while_a_subprocess_writes(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with writer(log, "healthy", 50, rate=5000) as proc:
        proc.wait(WAIT)
    app = DltopApp(str(log), now=end_time(50), poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 49" in screen_text(app), "the log")
        await pilot.press("p")
        await pilot.pause()
        assert "paused" in screen_text(app) and app.state.window == (0, 49)
        loss = app.query_one("#panel-loss", Chart)
        with writer(log, "healthy", 50, rate=5000, start=50) as proc:
            proc.wait(WAIT)
        await wait_for(pilot, lambda: app.model.store.last_step == 99, "ingestion while paused")
        await pilot.pause(0.5)
        assert loss.data is not None and loss.data.end == 49, "paused: the window stays"
        await pilot.press("p")
        await wait_for(pilot, lambda: loss.data is not None and loss.data.end == 99, "follow again")
        assert "paused" not in screen_text(app)


async def _test_small_terminal_collapses_panels(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 100)
    app = _replay(log, 100)
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app, 99)
        assert app.screen.has_class("-compact")
        assert not app.query_one("#panel-lr").display
        assert app.query_one("#panel-loss").display and app.query_one("#panel-memory").display
        await pilot.press("3")  # a panel hidden on small screens can still be zoomed
        await pilot.pause()
        lr = app.query_one("#panel-lr", Chart)
        assert app.screen.maximized is lr and lr.display and lr.size.width >= 70
        assert "lr 0.001" in lr.render_line(0).text


async def _test_crash_banner_and_gpu_panel(tmp_path: Path) -> None:
    log = write_log(tmp_path / "crashed.jsonl", "crashed", 60)
    app = _replay(log, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay")
        app.redraw()
        await pilot.pause()
        banner = app.query_one(CrashBanner)
        assert banner.display and "CRASHED" in screen_text(app) and "at step 59" in screen_text(app)
        assert "crashed" in screen_text(app).splitlines()[0]
    healthy = write_log(tmp_path / "healthy.jsonl", "healthy", 60)
    app = _replay(healthy, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 59)
        assert not app.query_one(CrashBanner).display
        assert app.query_one(GpuPanel).has_class("-na")
    gpu = write_log(tmp_path / "gpu.jsonl", "gpu", 60)
    app = _replay(gpu, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 59)
        panel = app.query_one(GpuPanel)
        await wait_for(pilot, lambda: not panel.has_class("-na"), "the GPU chart")
        await wait_for(pilot, lambda: "util" in panel.chart.render_line(0).text, "its legend")
        assert "mem 19%" in panel.chart.render_line(0).text
        assert "alloc" in _legend(app, "memory")


async def _test_no_color_is_respected(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.setenv("NO_COLOR", "1")  # type: ignore[attr-defined]
    log = write_log(tmp_path / "run.jsonl", "healthy", 20)
    app = _replay(log, 20)
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app, 19)
        assert app.no_color
        assert any(isinstance(f, (NoColor, Monochrome)) for f in app._filters)


def test_view_keys(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]  # `e` saves into the cwd
    asyncio.run(_test_view_keys(tmp_path))


def test_alert_selection_opens_checklist_and_ticks_go_to_a_sidecar(tmp_path: Path) -> None:
    asyncio.run(_test_alert_selection_opens_checklist_and_ticks_go_to_a_sidecar(tmp_path))


def test_pause_freezes_the_view_while_a_subprocess_writes(tmp_path: Path) -> None:
    asyncio.run(_test_pause_freezes_the_view_while_a_subprocess_writes(tmp_path))


def test_small_terminal_collapses_panels(tmp_path: Path) -> None:
    asyncio.run(_test_small_terminal_collapses_panels(tmp_path))


def test_crash_banner_and_gpu_panel(tmp_path: Path) -> None:
    asyncio.run(_test_crash_banner_and_gpu_panel(tmp_path))


def test_no_color_is_respected(tmp_path: Path, monkeypatch: object) -> None:
    asyncio.run(_test_no_color_is_respected(tmp_path, monkeypatch))
