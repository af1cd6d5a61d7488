"""The header: run name, host, pid, status with the age of the last record, step, speed."""

from __future__ import annotations

from dltop.tui.core.view_model import HeaderInfo
from rich.text import Text
from textual.widgets import Static

# status -> style; the CSS cannot colour parts of one line, so these stay here
STATUS_STYLE = {
    "running": "bold green",
    "stalled": "bold yellow",
    "finished": "bold blue",
    "crashed": "bold white on red",
    "unknown": "bold",
}


class Header(Static):
    """One or two lines; redrawn only when the text it would show changes."""

    # A fixed height: updating the text then repaints one line instead of re-laying out
    # the whole screen several times a second (measured: the main cost of a tick).
    DEFAULT_CSS = """
    Header { height: 1; background: $panel; padding: 0 1; }
    """  # two lines on small terminals: see dltop.tcss

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("dltop", id=id)
        self.info: HeaderInfo | None = None

    def show(self, info: HeaderInfo) -> None:
        if info == self.info:
            return
        self.info = info
        self.update(render_header(info), layout=False)


def render_header(info: HeaderInfo) -> Text:
    """The header as Rich text: the run first, then status, then numbers that move."""
    t = Text(no_wrap=False, overflow="ellipsis")
    t.append("dltop ", style="bold")
    t.append(info.run, style="bold cyan")
    if info.host or info.pid:
        t.append(f"  {info.host}:{info.pid}", style="dim")
    t.append("  ")
    t.append(f" {info.status} ", style=STATUS_STYLE.get(info.status, "bold"))
    if info.age:
        t.append(f" {info.age}", style="dim")
    t.append(f"  step {info.step}")
    if info.rate:
        t.append(f"  {info.rate}")
    if info.elapsed:
        t.append(f"  elapsed {info.elapsed}")
    if info.skipped:
        t.append(
            f"  {info.skipped} corrupt line{'s' if info.skipped != 1 else ''} skipped",
            style="bold yellow",
        )
    if info.mode:
        t.append(f"  [{info.mode}]", style="bold magenta")
    return t
