"""The crash banner: how a run died (exception, step, last values, diagnosis), on top of
the panels, so that a replay of a crashed log answers the first question at once."""

from __future__ import annotations

from dltop.tui.core.view_model import CrashInfo
from rich.text import Text
from textual.widgets import Static


class CrashBanner(Static):
    """Hidden until the run has crashed; shown in replay and after a live crash."""

    DEFAULT_CSS = """
    CrashBanner { display: none; height: auto; max-height: 6; padding: 0 1;
                  background: $error-darken-2; color: $text; }
    CrashBanner.-shown { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.info: CrashInfo | None = None

    def show(self, info: CrashInfo | None) -> None:
        if info == self.info:
            return
        self.info = info
        self.set_class(info is not None, "-shown")
        if info is not None:
            self.update(render_crash(info))


def render_crash(info: CrashInfo) -> Text:
    t = Text(overflow="ellipsis")
    t.append(" CRASHED ", style="bold white on red")
    where = f" at step {info.step}" if info.step is not None else ""
    t.append(f"{where}: ", style="bold")
    t.append(info.exception, style="bold")
    if info.last_values:
        t.append("\nlast values: ", style="dim")
        t.append(info.last_values)
    if info.diagnosis:
        t.append("\ndiagnosis: ", style="dim")
        t.append(info.diagnosis, style="bold")
    if info.summary:
        t.append(f" — {info.summary}")
    if info.hint:
        t.append(f"\n{info.hint}", style="italic")
    return t
