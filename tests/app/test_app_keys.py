"""Every key of the dashboard, driven by Pilot on a real log file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.app.badges import Badge
from dltop.tui.app.cards import GpuPanel
from dltop.tui.app.chart import Chart
from dltop.tui.app.checklist import ChecklistPane, StepList
from dltop.tui.app.crash_banner import CrashBanner
from dltop.tui.app.header import Header
from dltop.tui.app.help import HelpScreen
from dltop.tui.core.diagnosis.ticks import sidecar_path
from dltop.tui.core.present import view_model as vm
from test_app_live import WAIT, wait_for, writer
from test_app_support import NAN_STEP, end_time, screen_text, write_log
from textual.filter import Monochrome, NoColor


def _replay(log: Path, steps: int, **kw: object) -> DltopApp:
    return DltopApp(str(log), follow=False, now=end_time(steps) + 3, poll_interval=0.05, **kw)  # type: ignore[arg-type]


def _legend(app: DltopApp, key: str = "loss") -> str:
    return app.query_one(f"#panel-{key}", Chart).render_line(0).text


def _notes(app: DltopApp) -> str:
    """The text of the notifications shown (toasts wrap, so the screen splits them)."""
    return "\n".join(n.message for n in app._notifications)


async def _loaded(pilot: object, app: DltopApp, last: int) -> None:
    await wait_for(pilot, lambda: f"step {last}" in screen_text(app), f"step {last}")


async def _test_view_keys(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 299)
        assert "smooth(0.6)" in _legend(app) and "[log]" not in _legend(app)
        await pilot.press("l")
        await pilot.pause()
        assert "[log]" in _legend(app) and app.state.log_loss
        await pilot.press("s")  # the weight steps up: 0.6 -> 0.8, said in the legend
        await pilot.pause()
        assert "smooth(0.8)" in _legend(app) and app.state.smoothing == 0.8
        await pilot.press("S", "S")  # and down: 0.8 -> 0.6 -> off
        await pilot.pause()
        assert "smooth" not in _legend(app) and app.state.smoothing == 0.0
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
        start = app.focused
        assert start is not None
        await pilot.press("tab")
        await pilot.pause()
        assert app.focused is not None and app.focused is not start, "tab moved the focus"
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
        # the first critical alert explains itself: its checklist is open without a key,
        # and the charts keep their window (no jump the person did not ask for)
        assert pane.display, "the first critical alert's checklist opens by itself"
        first = vm.alert_to_explain(app.model.engine.alerts())
        assert first is not None and app.state.selected == first and app.state.window is None
        await pilot.press("a")
        await pilot.pause()
        assert pane.display and app.state.selected is not None
        assert (
            app.state.window is not None and app.state.window[0] <= NAN_STEP <= app.state.window[1]
        )
        text = screen_text(app)
        assert "Was the learning rate high" in text or "[ ]" in text
        await pilot.pause()
        assert app.focused is app.query_one(StepList), "choosing an alert focuses its steps"
        await pilot.press("space")  # at once: no tabbing to the step list first
        await pilot.pause()
        assert "[x]" in screen_text(app)
        ticked = app.state.selected
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
        for _ in range(8):  # then to the alert ticked in the first viewer
            if app2.state.selected == ticked:
                break
            await pilot.press("a")
            await pilot.pause()
        assert app2.state.selected == ticked and "[x]" in screen_text(app2)
        await pilot.press("c")  # the pane can be hidden again
        await pilot.pause()
        assert not app2.query_one(ChecklistPane).display


async def _test_pause_freezes_the_charts_but_not_the_alerts(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with writer(log, "nan", 50, rate=5000) as proc:
        proc.wait(WAIT)
    app = DltopApp(str(log), now=end_time(50), poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 49" in screen_text(app), "the log")
        await pilot.press("p")
        await pilot.pause()
        assert "paused" in screen_text(app) and app.state.window == (0, 49)
        assert "no alerts" in screen_text(app)
        loss = app.query_one("#panel-loss", Chart)
        last = NAN_STEP + 9  # the loss goes NaN while the view is paused
        with writer(log, "nan", last - 49, rate=5000, start=50) as proc:
            proc.wait(WAIT)
        await wait_for(pilot, lambda: app.model.store.last_step == last, "ingestion while paused")
        await wait_for(pilot, lambda: "Loss is NaN" in screen_text(app), "the alert while paused")
        assert app.state.paused and "paused" in screen_text(app)
        assert loss.data is not None and loss.data.end == 49, "paused: the chart stays"
        await pilot.press("p")
        await wait_for(pilot, lambda: loss.data is not None and loss.data.end == last, "follow")
        assert "paused" not in screen_text(app)


async def _test_small_terminal_collapses_panels(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 100)
    app = _replay(log, 100)
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app, 99)
        assert app.screen.has_class("-compact")
        assert not app.query_one("#panel-memory").display
        assert app.query_one("#panel-loss").display and app.query_one("#panel-lr").display
        await pilot.press("5")  # a panel hidden on small screens can still be zoomed
        await pilot.pause()
        memory = app.query_one("#panel-memory", Chart)
        assert app.screen.maximized is memory and memory.display and memory.size.width >= 70
        assert "rss 9" in memory.render_line(0).text


async def _test_crash_banner_and_gpu_panel(tmp_path: Path) -> None:
    log = write_log(tmp_path / "crashed.jsonl", "crashed", 60)
    app = _replay(log, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay")
        app.redraw()
        await pilot.pause()
        banner = app.query_one(CrashBanner)
        text = screen_text(app)
        assert banner.display and "CRASHED" in text and "at step 59" in text
        assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in text
        assert "last values: loss " in text and "grad_norm " in text and "lr 0.001" in text
        assert "diagnosis: Tensor shapes do not fit" in text
        assert "raised at train.py:42" in text
        assert "crashed" in text.splitlines()[0]
        tip = str(app.query_one(Header).tooltip or "")
        assert "RuntimeError" in tip, "hovering the header tells why the status is crashed"
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


@pytest.mark.slow
def test_view_keys(tmp_path: Path, monkeypatch: object) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]  # `e` saves into the cwd
    asyncio.run(_test_view_keys(tmp_path))


@pytest.mark.slow
def test_alert_selection_opens_checklist_and_ticks_go_to_a_sidecar(tmp_path: Path) -> None:
    asyncio.run(_test_alert_selection_opens_checklist_and_ticks_go_to_a_sidecar(tmp_path))


def test_pause_freezes_the_charts_but_not_the_alerts(tmp_path: Path) -> None:
    asyncio.run(_test_pause_freezes_the_charts_but_not_the_alerts(tmp_path))


def test_small_terminal_collapses_panels(tmp_path: Path) -> None:
    asyncio.run(_test_small_terminal_collapses_panels(tmp_path))


def test_crash_banner_and_gpu_panel(tmp_path: Path) -> None:
    asyncio.run(_test_crash_banner_and_gpu_panel(tmp_path))


def test_no_color_is_respected(tmp_path: Path, monkeypatch: object) -> None:
    asyncio.run(_test_no_color_is_respected(tmp_path, monkeypatch))


async def _test_escape_restores_a_zoom_and_one_panel_zooms_at_a_time(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 100)
    app = _replay(log, 100)
    async with app.run_test(size=(80, 24)) as pilot:  # small: panel 5 is hidden unzoomed
        await _loaded(pilot, app, 99)
        memory = app.query_one("#panel-memory")
        assert not memory.display
        await pilot.press("5")
        await pilot.pause()
        assert app.screen.maximized is memory and memory.display
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None and not memory.display, "the layout is back"
        assert not app.query(".-zoomed") and app._zoomed is None
        await pilot.press("5", "6")
        await pilot.pause()
        gpu = app.query_one("#panel-gpu")
        assert app.screen.maximized is gpu
        assert list(app.query(".-zoomed")) == [gpu], "only the last zoomed panel"
        assert not memory.display
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None and not app.query(".-zoomed")


async def _test_goto_is_clamped_to_the_run_and_says_so(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "healthy", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 299)
        await pilot.press("g", *"-100", "enter")
        await pilot.pause()
        assert app.state.cursor == 0 and app.state.window is not None
        assert 0 == app.state.window[0] < app.state.window[1] <= 299
        await wait_for(pilot, lambda: "before the run" in _notes(app), "the note")
        await pilot.press("g", *"5000", "enter")
        await pilot.pause()
        assert app.state.cursor == 299 and app.state.window is not None
        assert 0 <= app.state.window[0] < app.state.window[1] == 299
        await wait_for(pilot, lambda: "past the run" in _notes(app), "the note")
        assert _legend(app).startswith("@299 loss ")  # the charts show data, not nothing


async def _test_small_terminal_shows_what_matters(tmp_path: Path) -> None:
    """80x24: the crash banner keeps one item per row, cut with an ellipsis; the hidden GPU
    panel is named N/A in the header; the data-wait value is visible; the hint fits."""
    log = write_log(tmp_path / "crashed.jsonl", "crashed", 60)
    app = _replay(log, 60)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay")
        app.redraw()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert "GPU n/a" in " ".join(lines[:2]) and not app.query_one("#panel-gpu").display
        banner = [ln for ln in lines if "CRASHED" in ln]
        assert banner and banner[0].rstrip().endswith("…"), "a long line is cut, visibly"
        at = lines.index(banner[0])
        assert lines[at + 1].startswith(" last values: loss ")
        assert lines[at + 2].startswith(" diagnosis: Tensor shapes do not fit")
        assert lines[at + 3].startswith(" raised at train.py:42")
        legend = _legend(app, "step_time")
        assert legend.startswith("data wait ") and legend.rstrip().endswith("…"), legend
        assert lines[-1].rstrip().endswith("c list")
    app = _replay(log, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay")
        app.redraw()
        await pilot.pause()
        assert _legend(app, "step_time").startswith("data wait ")
        assert "GPU n/a" not in screen_text(app).splitlines()[0], "the GPU panel says it"


async def _test_killed_run_shows_the_signal(tmp_path: Path) -> None:
    log = write_log(tmp_path / "killed.jsonl", "killed", 60)
    app = _replay(log, 60)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay")
        app.redraw()
        await pilot.pause()
        text = screen_text(app)
        assert app.query_one(CrashBanner).display
        assert "KILLED" in text and "at step 59: terminated by SIGTERM" in text
        assert "last values: loss " in text and "scheduler" in text


async def _test_help_closes_on_any_key_and_lists_rank_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 1, 2):
        write_log(run / f"rank{r}.jsonl", "healthy", 30)
    app = DltopApp(str(run), follow=False, now=end_time(30) + 3, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 29)
        assert "all 3 ranks" in screen_text(app).splitlines()[0]  # a job: every rank shown
        await pilot.press("question_mark")
        await pilot.pause()
        text = screen_text(app)
        assert isinstance(app.screen, HelpScreen)
        assert all(f"rank{r}.jsonl" in text for r in (0, 1, 2)) and "▶ rank 0" in text
        await pilot.press("down")  # scrolls, stays open
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("x")  # any other key closes it
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("q")  # closes the help only, does not quit
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.return_code is None
        assert "dltop" in screen_text(app)


def test_escape_restores_a_zoom_and_one_panel_zooms_at_a_time(tmp_path: Path) -> None:
    asyncio.run(_test_escape_restores_a_zoom_and_one_panel_zooms_at_a_time(tmp_path))


def test_goto_is_clamped_to_the_run_and_says_so(tmp_path: Path) -> None:
    asyncio.run(_test_goto_is_clamped_to_the_run_and_says_so(tmp_path))


def test_small_terminal_shows_what_matters(tmp_path: Path) -> None:
    asyncio.run(_test_small_terminal_shows_what_matters(tmp_path))


def test_killed_run_shows_the_signal(tmp_path: Path) -> None:
    asyncio.run(_test_killed_run_shows_the_signal(tmp_path))


def test_help_closes_on_any_key_and_lists_rank_files(tmp_path: Path) -> None:
    asyncio.run(_test_help_closes_on_any_key_and_lists_rank_files(tmp_path))


def _run_in_a_pty(args: list[str], cwd: Path) -> bytes:
    """The real `dltop` command on a pseudo-terminal: everything it wrote to the terminal,
    from start to `q`. Waits are bounded; the process is always reaped."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "XDG_RUNTIME_DIR": str(cwd)}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dltop.tui", *args],
        stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + WAIT
        sent_q = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if not sent_q and b"demo-run" in out:
                os.write(master, b"q")
                sent_q = True
            if sent_q and proc.poll() is not None:
                break
        assert sent_q, "the dashboard never drew"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        os.close(master)
    return out


def test_no_mouse_leaves_the_mouse_to_the_terminal(tmp_path: Path) -> None:
    """`--no-mouse` reaches the app: the terminal is never asked for mouse reports."""
    log = write_log(tmp_path / "run.jsonl", "healthy", 20)
    mouse_on = b"\x1b[?1000h"
    assert mouse_on in _run_in_a_pty([str(log), "--replay"], tmp_path)
    assert mouse_on not in _run_in_a_pty([str(log), "--replay", "--no-mouse"], tmp_path)


async def _test_a_loss_over_decades_is_log_by_itself_and_l_turns_it_back(tmp_path: Path) -> None:
    log = write_log(tmp_path / "run.jsonl", "blowup", 320)
    app = _replay(log, 320)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 319)
        assert _legend(app).startswith("[auto log] ") and app.state.log_loss is None
        await pilot.press("l")  # the other way from what is drawn: linear
        await pilot.pause()
        assert "log]" not in _legend(app) and app.state.log_loss is False
        await pilot.press("l")
        await pilot.pause()
        assert _legend(app).startswith("[log] ") and app.state.log_loss is True


def test_a_loss_over_decades_is_log_by_itself_and_l_turns_it_back(tmp_path: Path) -> None:
    asyncio.run(_test_a_loss_over_decades_is_log_by_itself_and_l_turns_it_back(tmp_path))


async def _test_thousands_of_alerts_mount_a_bounded_bar_and_a_still_reaches_them(
    tmp_path: Path,
) -> None:
    """A loop that restarted after each of its NaNs leaves one alert per restart: the bar
    mounts the badges that fit its width (MAX_BADGES at most) and a count of the rest (a
    widget per alert froze the viewer for seconds per key at 20 k), and ``a`` still walks
    to the ones without a badge."""
    from dltop.tui.app.badges import MAX_BADGES

    n = MAX_BADGES + 25
    log = tmp_path / "restarts.jsonl"
    lines = [json.dumps({"kind": "meta", "v": 1, "pid": 1, "t": 0.0})]
    for i in range(n):
        lines.append(json.dumps({"kind": "step", "step": 0, "t": float(i), "loss": 1.0}))
        lines.append(json.dumps({"kind": "step", "step": 1, "t": i + 0.5, "loss": "NaN"}))
    log.write_text("\n".join(lines) + "\n")
    app = DltopApp(str(log), follow=False, now=float(n + 3), poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.query(Badge)) > 0, "badges")
        ordered = vm.newest_first(app._alerts())
        keys = [vm.alert_key(a) for a in ordered]
        assert len(set(keys)) == n  # one key each, though every alert is nan_loss at step 1
        app.set_state(selected=keys[0])
        await pilot.pause()
        shown = len(app.query(Badge))
        assert 1 <= shown <= MAX_BADGES
        more = [str(w.render()) for w in app.query(".badge.-none")]
        assert len(more) == 1 and more[0].startswith(f"+{n - shown} more"), more
        beyond = keys[shown]  # the first alert without a badge
        app.set_state(selected=keys[shown - 1])
        await pilot.pause()
        await pilot.press("a")
        await wait_for(pilot, lambda: app.state.selected == beyond, "a past the bar")
        await wait_for(
            pilot,
            lambda: any(b.key == beyond and b.has_class("-selected") for b in app.query(Badge)),
            "the selected alert's badge",
        )
        # in place of the last that fitted, and still counted: none vanishes unsaid
        left = n - len(app.query(Badge))
        more = [str(w.render()) for w in app.query(".badge.-none")]
        assert len(more) == 1 and more[0].startswith(f"+{left} more"), more


def test_thousands_of_alerts_mount_a_bounded_bar_and_a_still_reaches_them(
    tmp_path: Path,
) -> None:
    asyncio.run(_test_thousands_of_alerts_mount_a_bounded_bar_and_a_still_reaches_them(tmp_path))


async def _test_keys_typed_while_the_help_closes_reach_the_dashboard(tmp_path: Path) -> None:
    """Two escapes in a row (a browser sends them faster than a screen closes): the first
    closes the help, the second is the dashboard's. The second used to reach the closing
    help screen and dismiss it again: ScreenStackError, and the viewer died."""
    from textual import events

    log = tmp_path / "nan.jsonl"
    write_log(log, "nan", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 299)
        await pilot.press("g", *"250", "enter")  # a window: escape has something to reset
        await pilot.pause()
        assert app.state.window is not None
        await pilot.press("question_mark")
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        help_screen.post_message(events.Key("escape", None))  # both queued before either
        help_screen.post_message(events.Key("escape", None))  # is handled
        await pilot.pause()
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen) and app.return_code is None
        assert app.state.window is None  # the second escape reset the view


@pytest.mark.slow
def test_keys_typed_while_the_help_closes_reach_the_dashboard(tmp_path: Path) -> None:
    asyncio.run(_test_keys_typed_while_the_help_closes_reach_the_dashboard(tmp_path))


async def _test_two_escapes_close_the_panel_picker_once(tmp_path: Path) -> None:
    from dltop.tui.app.picker import PanelPicker

    log = tmp_path / "nan.jsonl"
    write_log(log, "nan", 300)
    app = _replay(log, 300)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app, 299)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, PanelPicker)
        app.simulate_key("escape")  # both posted before either is handled
        app.simulate_key("escape")
        await pilot.pause()
        await pilot.pause()
        assert not isinstance(app.screen, PanelPicker) and app.return_code is None


def test_two_escapes_close_the_panel_picker_once(tmp_path: Path) -> None:
    asyncio.run(_test_two_escapes_close_the_panel_picker_once(tmp_path))
