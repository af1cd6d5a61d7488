"""Pilot tests of the live dashboard: a REAL log file appended by a REAL writer subprocess
while the app follows it (records appear, alerts appear, truncation restarts the run, a
corrupt line is skipped and counted on screen, the reader posts one message per chunk).

Waits poll the screen until a condition holds (bounded), so the tests neither sleep for
fixed times nor hang: the subprocess is always killed on the way out.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import BAD_MARK, Chart
from test_app_support import SCRIPT, end_time, screen_text

WAIT = 30.0  # seconds; generous for a loaded 2-core box, far below the pytest timeout


@contextmanager
def writer(
    path: Path,
    scenario: str,
    steps: int,
    rate: float,
    start: int = 0,
    hold: tuple[int, Path] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The writer subprocess, always reaped. ``hold``: it waits after that step until the
    file exists (the test creates it once it has seen the run so far)."""
    args = [sys.executable, SCRIPT, str(path), scenario, "--steps", str(steps), "--rate", str(rate)]
    args += ["--hold", str(hold[0]), str(hold[1])] if hold is not None else []
    proc = subprocess.Popen([*args, "--start", str(start)])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def wait_for(
    pilot: object, cond: Callable[[], bool], what: str, timeout: float = WAIT
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)  # type: ignore[attr-defined]
    raise AssertionError(f"timed out waiting for {what}")


def _app(path: Path, steps: int, **kw: object) -> DltopApp:
    return DltopApp(str(path), now=end_time(steps) + 3, poll_interval=0.05, **kw)  # type: ignore[arg-type]


async def _test_records_and_nan_alert_appear_while_a_subprocess_writes(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_bytes(b"")
    app = _app(log, 260)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "waiting" in screen_text(app) or "no loss yet" in screen_text(app)
        with writer(log, "nan", 260, rate=400) as proc:
            await wait_for(pilot, lambda: "step 1" in screen_text(app), "the first steps")
            await wait_for(pilot, lambda: "Loss is NaN @240" in screen_text(app), "the NaN badge")
            await wait_for(pilot, lambda: "step 259" in screen_text(app), "the last step")
            proc.wait(WAIT)
        text = screen_text(app)
        assert "running" in text and "demo-run" in text and "testhost:4242" in text
        loss = app.query_one("#panel-loss", Chart)
        assert BAD_MARK in loss.render_line(1).text, "NaN steps are marked, not left blank"
        # one message per chunk, never per record: 260 steps + sys/eval records arrived
        assert 1 <= app.chunks < 200
        assert app.model.records > 260


async def _test_truncation_restarts_as_a_new_run(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with writer(log, "healthy", 120, rate=2000) as proc:
        proc.wait(WAIT)
    app = _app(log, 120)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 119" in screen_text(app), "the first run")
        log.write_bytes(b"")  # truncated in place, as `> run.jsonl` does
        await wait_for(pilot, lambda: app.model.resets >= 1, "the truncation to be noticed")
        with writer(log, "healthy", 30, rate=2000) as proc:
            proc.wait(WAIT)
            await wait_for(pilot, lambda: "step 29 " in screen_text(app), "the new run's steps")
        text = screen_text(app)
        assert "restarted ×1" in text
        assert "step 119" not in text


async def _test_corrupt_line_is_skipped_and_counted_on_screen(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with writer(log, "healthy", 50, rate=2000) as proc:
        proc.wait(WAIT)
    app = _app(log, 100)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 49" in screen_text(app), "the first 50 steps")
        with open(log, "ab") as f:
            f.write(b'{"kind": "step", "step": 50, "loss": oops}\n')
        with writer(log, "healthy", 50, rate=2000, start=50) as proc:
            proc.wait(WAIT)
            await wait_for(pilot, lambda: "step 99" in screen_text(app), "steps after the bad line")
        await wait_for(pilot, lambda: "1 corrupt line skipped" in screen_text(app), "the count")
        assert app.model.malformed == 1


async def _test_idle_dashboard_does_not_redraw(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    with writer(log, "healthy", 200, rate=5000) as proc:
        proc.wait(WAIT)
    app = _app(log, 200)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 199" in screen_text(app), "the log")
        await pilot.pause(0.5)
        loss = app.query_one("#panel-loss", Chart)
        drawn, draws = app.ticks_drawn, loss.draws
        await pilot.pause(1.2)  # >= 3 timer ticks at 3 Hz with nothing new
        assert app.ticks_drawn == drawn and loss.draws == draws
        with writer(log, "healthy", 5, rate=5000, start=200) as proc:
            proc.wait(WAIT)
            await wait_for(pilot, lambda: loss.draws > draws, "a redraw after new data")


def test_records_and_nan_alert_appear_while_a_subprocess_writes(tmp_path: Path) -> None:
    asyncio.run(_test_records_and_nan_alert_appear_while_a_subprocess_writes(tmp_path))


def test_truncation_restarts_as_a_new_run(tmp_path: Path) -> None:
    asyncio.run(_test_truncation_restarts_as_a_new_run(tmp_path))


def test_corrupt_line_is_skipped_and_counted_on_screen(tmp_path: Path) -> None:
    asyncio.run(_test_corrupt_line_is_skipped_and_counted_on_screen(tmp_path))


def test_idle_dashboard_does_not_redraw(tmp_path: Path) -> None:
    asyncio.run(_test_idle_dashboard_does_not_redraw(tmp_path))
