"""A notification that shows a path breaks it after a "/", never inside a folder's name,
so the path on screen can be read back and typed (Pilot, the real ``e`` key)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dltop.tui.app.app import DltopApp
from dltop.tui.app.toast import toast_columns
from test_app_support import end_time, screen_text, write_log

FOLDERS = ("experiments-2024", "learning-rate-sweep", "run-with-warmup-0042", "screens-here")


async def _screenshot_toast(tmp_path: Path, width: int) -> tuple[str, Path]:
    tmp_path.mkdir(parents=True)
    log = write_log(tmp_path / "run.jsonl", "healthy", 50)
    deep = tmp_path.joinpath(*FOLDERS)
    deep.mkdir(parents=True)
    app = DltopApp(
        str(log), follow=False, now=end_time(50) + 3, screenshot_dir=str(deep), poll_interval=0.05
    )
    async with app.run_test(size=(width, 30), notifications=True) as pilot:
        await pilot.pause(0.3)
        await pilot.press("e")
        await pilot.pause()
        await pilot.pause(0.2)
        return screen_text(app), Path(app.last_screenshot or "")


def test_a_saved_screenshot_toast_breaks_its_path_at_the_separators(tmp_path: Path) -> None:
    for width in (80, 120):
        screen, shot = asyncio.run(_screenshot_toast(tmp_path / str(width), width))
        assert shot.exists() and "screenshot saved to" in screen
        # every folder's name whole on one row of the screen: none folded in two
        for name in (*FOLDERS, shot.name):
            assert any(name in row for row in screen.splitlines()), (name, screen)


def test_the_toast_width_is_textuals() -> None:
    assert toast_columns(200) == 56 and toast_columns(80) == 36
