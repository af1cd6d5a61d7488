"""SVG snapshots of the dashboard (pytest-textual-snapshot): healthy, NaN, data-bound,
crashed replay, no-GPU, blow-up (auto log axis) and extras (a picked panel: an extra with
its evaluations as a line with marks, the smoothing weight) screens, at 80x24, 120x40
and 200x60. The job and overlay screens are in test_snapshots_ranks.py and
test_app_overlay.py, at the same sizes.

Deterministic by construction: the logs are generated with fixed timestamps, "now" is
frozen (the app's ``now=``), the host in the log is not this host (so no pid lookup), and
each screenshot is taken only after the replay has been read to its end and drawn.
Update with ``pytest tests/app/test_snapshots.py --snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from test_app_support import NAN_STEP, end_time, extras_log, write_log
from textual.pilot import Pilot

SIZES = {"120x40": (120, 40), "80x24": (80, 24), "200x60": (200, 60)}
# scenario -> (steps, keys pressed before the screenshot)
SCREENS = {
    "healthy": ("healthy", 400, ()),
    "nan": ("nan", NAN_STEP + 40, ("a",)),  # select the newest alert: checklist + window
    "data_bound": ("data_bound", 300, ()),
    "crashed_replay": ("crashed", 180, ()),
    "no_gpu": ("healthy", 200, ("6",)),  # zoom the GPU panel: the N/A card
    # a loss from 1.5 to 1e35: a log axis by itself, nothing below zero on any axis
    "blowup": ("blowup", 320, ()),
    # an extra picked at start (`--panel acc`): its smoothed line and its evaluations
    "extras": ("extras", 300, ()),
}


async def _loaded(pilot: Pilot[int]) -> None:
    """Wait (bounded) until the replay is read and drawn, so no frame is half-loaded."""
    app = pilot.app
    assert isinstance(app, DltopApp)
    deadline = time.monotonic() + 30
    while not app.ended and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert app.ended, "the replay did not finish"
    app.redraw()
    await pilot.pause()


def _app(tmp_path: Path, scenario: str, steps: int) -> DltopApp:
    if scenario == "extras":
        log = extras_log(tmp_path / "extras.jsonl", steps)
        return DltopApp(
            str(log), follow=False, now=end_time(steps) + 3.0, poll_interval=0.05,
            panels=("+acc",), smoothing=0.9,
        )  # fmt: skip
    log = write_log(tmp_path / f"{scenario}.jsonl", scenario, steps)
    return DltopApp(str(log), follow=False, now=end_time(steps) + 3.0, poll_interval=0.05)


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("screen", sorted(SCREENS))
def test_screen(screen: str, size: str, snap_compare: object, tmp_path: Path) -> None:
    scenario, steps, keys = SCREENS[screen]
    app = _app(tmp_path, scenario, steps)

    async def run_before(pilot: Pilot[int]) -> None:
        await _loaded(pilot)
        for key in keys:
            await pilot.press(key)
        app.redraw()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)  # type: ignore[operator]
