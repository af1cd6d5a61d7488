"""``dltop serve`` in a real browser: headless Chromium loads the page, reads the viewer's
screen, presses the viewer's keys and saves a screenshot.

Everything is real: a writer subprocess appends a run that goes NaN, ``dltop serve``
runs as a subprocess with a token, and Chromium (Debian's ``chromium``, driven over the
DevTools protocol: ``tests/cdp.py``) opens ``/?token=...``, which must turn into a
session cookie and an address without the token. The screenshot lands in pytest's tmp
dir and, when ``DLTOP_TEST_ARTEFACTS`` is set, is copied there. Skipped with a reason
where Chromium or textual-serve is missing (``.ci/run`` installs Chromium).
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cdp import Browser, find_chromium, keep_artefact, open_page
from test_app_support import NAN_STEP, SCRIPT
from waiting import wait_for

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)"),
    pytest.mark.skipif(
        importlib.util.find_spec("textual_serve") is None,
        reason="needs textual-serve (pip install 'dltop-monitor[web]')",
    ),
]
WAIT = 90.0  # seconds: a loaded 2-core box starts Chromium and a viewer slowly


@contextmanager
def serving(log: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``dltop serve`` on a free loopback port; yields it and its first output line."""
    cmd = [sys.executable, "-m", "dltop.tui", "serve", "--bind", "127.0.0.1:0", *flags, str(log)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        yield proc, proc.stderr.readline()
    finally:
        proc.terminate()  # SIGTERM: stops every viewer it started
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_viewer_in_chromium_shows_the_run_and_takes_its_keys(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    writer = subprocess.Popen(
        [sys.executable, SCRIPT, str(log), "nan", "--steps", "300", "--rate", "150"]
    )
    try:
        assert wait_for(lambda: log.exists() and log.stat().st_size > 0, 30)
        with serving(log, "--token") as (server, line):
            port = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            token_file = re.search(r" in (\S+\.token);", line)
            assert port and token_file, line
            token = Path(token_file.group(1)).read_text().strip()
            assert token not in line  # the token itself is never printed without --show-url
            url = f"http://127.0.0.1:{port.group(1)}/?token={token}"
            shot = asyncio.run(_drive(url, tmp_path))
            assert server.poll() is None  # `q` ended its viewer, not the server
    finally:
        writer.kill()
        writer.wait()
    keep_artefact(shot)


async def _drive(url: str, tmp_path: Path) -> Path:
    import aiohttp

    assert CHROMIUM is not None
    browser = Browser(CHROMIUM)
    try:
        async with aiohttp.ClientSession() as session:
            page = await open_page(browser, url, session)
            first = await page.wait_screen("demo-run", "Loss is NaN @", timeout=WAIT)
            assert "demo-run" in first and "Loss is NaN @" in first, first
            # the token was exchanged for a cookie: the address bar no longer holds it
            assert "token" not in str(await page.evaluate("location.href"))
            assert f"@{NAN_STEP} loss" not in first and "[window" not in first  # no cursor yet

            # the next alert: the cursor on its step in every panel (the badges say "@240"
            # already: the panel's own "@240 loss" is the cursor), the window around it,
            # and its checklist beside
            await page.press("a")
            chosen = await page.wait_screen(f"@{NAN_STEP} loss", "[window", "[ ]", timeout=WAIT)
            assert f"@{NAN_STEP} loss" in chosen and "[window" in chosen, chosen
            assert "[ ]" in chosen, chosen
            shot = await page.screenshot(tmp_path / "dltop-serve-chromium.png")

            await page.press("l")  # log scale on the loss panel
            assert "[log]" in await page.wait_screen("[log]", timeout=WAIT)
            await page.press("question_mark")  # the help screen lists every key
            assert "select the next alert" in await page.wait_screen(
                "select the next alert", timeout=WAIT
            )
            await page.press("escape")  # closes the help
            await page.press("escape")  # back to the whole run, cursor off
            await page.press("right")  # the step cursor, from the window's start
            moved = await page.wait_screen("@0 ", timeout=WAIT)
            assert "@0 " in moved and "select the next alert" not in moved, moved

            await page.press("q")  # quits the viewer: the page says the session ended
            closed = "document.body.classList.contains('-closed')"
            for _ in range(int(WAIT * 4)):
                if await page.evaluate(closed):
                    break
                await asyncio.sleep(0.25)
            assert await page.evaluate(closed)
    finally:
        browser.close()
    assert shot.stat().st_size > 10_000  # a real picture of the page, not an empty one
    return shot
