"""The dashboard's layout after every resize, the small terminal's panels, the panel
picker: Pilot tests on real log files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import POINT_MARK, Chart
from dltop.tui.app.panel_set import fourth_panel
from dltop.tui.app.picker import PanelPicker
from dltop.tui.core.rules.alerts import Alert
from test_app_live import wait_for
from test_app_support import end_time, extras_log, screen_text, write_log
from textual.widgets import SelectionList

SIZES = ((160, 48), (80, 24), (200, 60), (80, 24), (160, 48), (120, 40))


def _replay(log: Path, steps: int, **kw: Any) -> DltopApp:
    return DltopApp(str(log), follow=False, now=end_time(steps) + 3, poll_interval=0.05, **kw)


def _layout(app: DltopApp) -> dict[str, Any]:
    """Where everything is: each panel's region (empty when hidden), header, badges,
    checklist, and which panels are shown."""
    out: dict[str, Any] = {}
    for w in app.query(".panel"):
        out[w.id or w.border_title or "?"] = tuple(w.region)
    for wid in ("#header", "#badges", "#checklist", "#hint"):
        out[wid] = tuple(app.query_one(wid).region)
    return out


def _shown(app: DltopApp) -> list[str]:
    return [str(w.id) for w in app.query(".panel") if w.region.width and w.region.height]


async def _settle(pilot: Any) -> None:
    for _ in range(3):
        await pilot.pause()
    await asyncio.sleep(0.3)
    await pilot.pause()


async def _fresh(log: Path, size: tuple[int, int], pane: bool) -> dict[str, Any]:
    app = _replay(log, 300)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.ended and app.chunks > 0, "the log read")
        if pane:
            await pilot.press("c")
        await _settle(pilot)
        return _layout(app)


async def _test_resizes_match_a_fresh_start(tmp_path: Path, pane: bool) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 300)
    fresh = {size: await _fresh(log, size, pane) for size in set(SIZES)}
    app = _replay(log, 300)
    async with app.run_test(size=SIZES[0]) as pilot:
        await wait_for(pilot, lambda: app.ended and app.chunks > 0, "the log read")
        if pane:
            await pilot.press("c")
        await _settle(pilot)
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await _settle(pilot)  # one pass: no second resize needed to get it right
            got = _layout(app)
            diff = {k: (got[k], fresh[size].get(k)) for k in got if got[k] != fresh[size].get(k)}
            assert not diff, f"after resizing to {size}: {diff}"


@pytest.mark.slow
def test_the_layout_after_each_resize_is_that_of_a_fresh_start(tmp_path: Path) -> None:
    asyncio.run(_test_resizes_match_a_fresh_start(tmp_path, pane=False))


@pytest.mark.slow
def test_with_the_checklist_open_too(tmp_path: Path) -> None:
    asyncio.run(_test_resizes_match_a_fresh_start(tmp_path, pane=True))


async def _test_small_terminal(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "nan", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.ended and app.chunks > 0, "the log read")
        await _settle(pilot)
        assert _shown(app) == ["panel-loss", "panel-grad_norm", "panel-lr", "panel-step_time"]
        await pilot.press("a")  # the NaN's checklist: the three stay beside it
        await _settle(pilot)
        assert _shown(app) == ["panel-loss", "panel-grad_norm", "panel-lr"]
        pane = app.query_one("#checklist").region
        assert 0 < pane.width <= 40, "the checklist takes at most half the screen"
        assert "learning rate" in screen_text(app)


def test_80x24_keeps_loss_grad_norm_and_lr_with_and_without_the_checklist(tmp_path: Path) -> None:
    asyncio.run(_test_small_terminal(tmp_path))


def test_the_fourth_small_panel_follows_the_pick_then_the_worst_alert() -> None:
    def alert(id_: str, severity: str, step: int, active: bool = True) -> Alert:
        return Alert(id_, severity, step, id_, "", active=active)  # type: ignore[arg-type]

    assert fourth_panel((), []) == "step_time"
    assert fourth_panel((), [alert("memory_growth", "warning", 50)]) == "memory"
    leak_then_stall = [alert("memory_growth", "critical", 50), alert("stall", "warning", 90)]
    assert fourth_panel((), leak_then_stall) == "memory"  # the more severe one
    assert fourth_panel((), [alert("oom", "critical", 9, active=False)]) == "step_time"
    assert fourth_panel((), [alert("memory_growth", "info", 5)]) == "step_time"
    assert fourth_panel(("+acc",), leak_then_stall) == "+acc"  # what the person picked


async def _test_picker(tmp_path: Path) -> None:
    log = extras_log(tmp_path / "run.jsonl")
    app = _replay(log, 300)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.ended and app.chunks > 0, "the log read")
        await pilot.press("m")
        await _settle(pilot)
        assert isinstance(app.screen, PanelPicker)
        listed = app.screen.query_one(SelectionList)
        labels = [str(listed.get_option_at_index(i).prompt) for i in range(listed.option_count)]
        assert [lab.split("  (")[0] for lab in labels] == [
            "acc (+ eval)", "batch_size", "tokens_seen", "eval.f1",
            "sys.cpu_percent", "sys.mem_available", "sys.mem_total",
        ]  # fmt: skip
        await pilot.press("space")  # acc, with eval.acc on the same panel
        await pilot.press("down", "down", "down", "space")  # eval.f1
        await _settle(pilot)
        await pilot.press("escape")
        await _settle(pilot)
        assert app.state.panels == ("+acc", "+eval.f1")
        extra = app._extra_widgets["+acc"]
        assert extra.border_title == "8 acc" and extra.region.width > 0
        legend = extra.render_line(0).text
        assert "acc 0.8" in legend and "smooth(0.6)" in legend and "eval 0.45" in legend
        plot = "".join(extra.render_line(y).text for y in range(1, extra.size.height - 1))
        assert plot.count(POINT_MARK) == 6, "one mark per evaluation"
        f1 = app._extra_widgets["+eval.f1"]
        assert f1.border_title == "9 eval.f1" and "eval 0.3" in f1.render_line(0).text
        await pilot.press("8")  # zooms like a built-in panel
        await _settle(pilot)
        assert extra.has_class("-zoomed") and extra.region.height > 30
        await pilot.press("8")
        await pilot.resize_terminal(80, 24)  # a small terminal: the last pick is the fourth
        await _settle(pilot)
        assert [w for w in _shown(app) if w.startswith("panel-")] == [
            "panel-loss", "panel-grad_norm", "panel-lr"
        ] and f1.region.width > 0 and extra.region.width == 0  # fmt: skip
        await pilot.resize_terminal(160, 48)
        await pilot.press("m")
        await _settle(pilot)
        await pilot.press("space")  # unpick acc
        await pilot.press("escape")
        await _settle(pilot)
        assert app.state.panels == ("+eval.f1",) and "+acc" not in app._extra_widgets
        assert app._extra_widgets["+eval.f1"].border_title == "8 eval.f1"


@pytest.mark.slow
def test_the_panel_picker_adds_zooms_and_removes_panels_of_any_series(tmp_path: Path) -> None:
    asyncio.run(_test_picker(tmp_path))


async def _test_flag(tmp_path: Path) -> None:
    log = extras_log(tmp_path / "run.jsonl")
    app = _replay(log, 300, panels=("+acc",), smoothing=0.9)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended and app.chunks > 0, "the log read")
        await _settle(pilot)
        chart = app._extra_widgets["+acc"]
        assert isinstance(chart, Chart) and "smooth(0.9)" in chart.render_line(0).text
        legend = app.query_one("#panel-loss", Chart).render_line(0).text
        assert "smooth(0.9)" in legend and "eval" in legend


def test_panels_and_smoothing_given_at_start(tmp_path: Path) -> None:
    asyncio.run(_test_flag(tmp_path))
