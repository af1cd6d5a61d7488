"""The alert bar at the smallest terminal: badges that do not fit end in "+N more", so no
alert vanishes past the edge without a count (a single run, a job's badges named with
their ranks, an overlay's with their run letters)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dltop.tui.app import app as dltop_app
from dltop.tui.app.badges import GAP, Badge, BadgeBar, fit_badges
from dltop.tui.core.rules.alerts import Alert
from textual.app import App, ComposeResult
from textual.widgets import Static

TITLES = (
    ("nan_loss", "critical", "Loss is NaN"),
    ("grad_explosion", "critical", "Exploding gradients"),
    ("divergence", "critical", "Loss is diverging"),
    ("loss_spike", "warning", "Loss spike"),
    ("data_bound", "warning", "Data-loader bound"),
)


def _alerts(kind: str) -> list[Alert]:
    out = []
    for i, (alert_id, severity, title) in enumerate(TITLES):
        run = None
        if kind == "job":
            title = f"r0,1 {title}"
        elif kind == "overlay":
            run = "ABCDE"[i]
            title = f"{run} {title}"
        out.append(Alert(alert_id, severity, 100 + i, title, "", run=run))  # type: ignore[arg-type]
    return out


class BarApp(App[None]):
    CSS_PATH = str(Path(dltop_app.__file__).with_name("dltop.tcss"))  # the badges' widths

    def __init__(self, alerts: list[Alert]) -> None:
        super().__init__()
        self.alerts = alerts

    def compose(self) -> ComposeResult:
        yield BadgeBar(id="badges")

    def on_mount(self) -> None:
        self.query_one(BadgeBar).show(self.alerts, None)


async def _bar(kind: str, width: int) -> tuple[list[tuple[int, int]], list[str], int]:
    app = BarApp(_alerts(kind))
    async with app.run_test(size=(width, 10)) as pilot:
        await pilot.pause()
        await pilot.pause()
        bar = app.query_one(BadgeBar)
        spans = [(w.region.x, w.region.right) for w in bar.query(Badge)]
        more = [str(w.render()) for w in bar.query(Static) if w.has_class("-none")]
        spans += [(w.region.x, w.region.right) for w in bar.query(".badge.-none")]
        return spans, more, bar.size.width


@pytest.mark.parametrize("kind", ["run", "job", "overlay"])
def test_five_alerts_at_80_columns_show_what_fits_and_count_the_rest(kind: str) -> None:
    spans, more, width = asyncio.run(_bar(kind, 80))
    shown = len(spans) - len(more)
    assert 1 <= shown < len(TITLES)  # five badges never fit in 80 columns
    assert len(more) == 1 and more[0].startswith(f"+{len(TITLES) - shown} more"), more
    # every badge and the count whole on screen: nothing past the edge
    assert all(x >= 0 and right <= width for x, right in spans), (spans, width)


def test_all_badges_and_no_count_when_they_fit() -> None:
    spans, more, width = asyncio.run(_bar("run", 200))
    assert len(spans) == len(TITLES) and more == []


def test_the_selected_badge_takes_the_place_of_the_last_that_fitted() -> None:
    widths = [20, 20, 20, 20, 20]
    assert fit_badges(widths, 5, 80, None) == [0, 1, 2]  # 3 x 23 + "+2 more" (10)
    assert fit_badges(widths, 5, 80, 4) == [0, 1, 4]
    assert fit_badges(widths, 5, 5 * (20 + GAP), None) == [0, 1, 2, 3, 4]
    assert fit_badges([200], 1, 80, None) == [0]  # at least one, however narrow
