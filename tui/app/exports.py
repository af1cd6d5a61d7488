"""The keys that write files: ``e`` (an SVG screenshot) and ``r`` (``dltop report``).

A viewer that dies because a disk is full loses the run's view at the worst moment, so
each writes where it says, and a failure is a one-line notice, never a traceback.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.text.safetext import visible
from .mixin_base import AppMixin
from .toast import notify_wrapped

if TYPE_CHECKING:
    from ..core.diagnosis.ticks import Ticks
    from ..core.present.view_model import Clock, ViewState
    from ..core.store.run import RunModel


class Exports(AppMixin):
    """Mixed into ``DltopApp``: the screenshot and report keys."""

    model: RunModel
    source: str | None
    ticks: Ticks
    lang: str
    clock: Clock
    state: ViewState
    screenshot_dir: str | None
    last_screenshot: str | None  # path of the latest `e` screenshot

    if TYPE_CHECKING:  # what the other mixins provide

        def _shown_source(self, source: str | None) -> str | None: ...

    def action_screenshot_svg(self) -> None:
        folder = Path(self.screenshot_dir or os.getcwd())
        name = f"dltop-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            path = self.save_screenshot(name, str(folder))
        except OSError as e:
            why = visible(e.strerror or e)
            notify_wrapped(self, f"screenshot not saved: {why}", severity="error")
            return
        self.last_screenshot = path
        notify_wrapped(self, f"screenshot saved to {visible(path)}", timeout=6)

    def action_report(self) -> None:
        """Write ``dltop report`` of the run as shown (tui/core/present/report.py) and say where."""
        from ..core.present.report import write_from_model

        try:
            source = self._shown_source(self.source)
            out = write_from_model(
                self.model,
                source,
                self.ticks,
                self.lang,
                self.clock.now(),
                # the panels picked on screen; none picked: every series the log has
                panels=self.state.panels or None,
            )
        except Exception as e:  # a full disk or a bug: one line, never a dead viewer
            # an OSError names a path (a rank file's name is the folder's): escaped
            why = visible(getattr(e, "strerror", None) or e)
            where = getattr(e, "filename", None)
            notify_wrapped(
                self,
                f"report not written: {visible(where) + ': ' if where else ''}{why}",
                severity="error",
            )
            return
        notify_wrapped(self, f"report written to {visible(out.report)}", timeout=10)
