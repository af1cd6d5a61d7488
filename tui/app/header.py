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


VERDICT_STYLE = {"critical": "bold red", "warning": "bold yellow", "": "green"}


class Header(Static):
    """The run's line and the verdict's line (two; three on small terminals, where the
    first wraps); redrawn only when the text it would show changes. Hovering it shows why
    the run has its status (the status's reason)."""

    # A fixed height: updating the text then repaints one line instead of re-laying out
    # the whole screen several times a second (measured: the main cost of a tick).
    DEFAULT_CSS = """
    Header { height: 2; background: $panel; padding: 0 1; }
    """  # three lines on small terminals: see dltop.tcss

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("dltop", id=id)
        self.info: HeaderInfo | None = None
        self.compact = False

    def show(self, info: HeaderInfo, compact: bool = False) -> None:
        if info == self.info and compact == self.compact:
            return
        self.info = info
        self.compact = compact
        self.tooltip = info.reason or None
        width = self.size.width - 2 if self.size.width > 2 else 0  # inside the padding
        self.update(render_header(info, compact, width), layout=False)


def render_header(info: HeaderInfo, compact: bool = False, width: int = 0) -> Text:
    """The header as Rich text, most important first (a narrow terminal cuts the end):
    the run and its status, the step, the view mode and data problems, then the numbers
    that only inform (speed, elapsed), then where it runs; on the next line the verdict.
    The first line is cut to one line (two on a small terminal, where it wraps); the
    verdict to ``width`` characters, so it always has its own line."""
    t = Text(no_wrap=not compact, overflow="ellipsis")
    t.append("dltop ", style="bold")
    t.append(info.run, style="bold cyan")
    if info.ranks:
        t.append(f" ({info.ranks})", style="cyan")
    t.append("  ")
    t.append(f" {info.status} ", style=STATUS_STYLE.get(info.status, "bold"))
    if info.age:
        t.append(f" {info.age}", style="dim")
    t.append(f"  step {info.step}")
    if info.mode:
        t.append(f"  [{info.mode}]", style="bold magenta")
    if info.skipped:
        t.append(
            f"  {info.skipped} corrupt line{'s' if info.skipped != 1 else ''} skipped",
            style="bold yellow",
        )
    if info.lost:
        t.append(
            f"  {info.lost} record{'s' if info.lost != 1 else ''} not in the log",
            style="bold yellow",
        )
    if info.dropped:
        t.append(
            f"  {info.dropped} record{'s' if info.dropped != 1 else ''} dropped",
            style="bold yellow",
        )
    if compact and info.gpu:  # the GPU panel is hidden on small terminals: say it here
        t.append(f"  {info.gpu}", style="bold")
    if info.rate:
        t.append(f"  {info.rate}")
    if info.elapsed:
        t.append(f"  elapsed {info.elapsed}")
    if info.host or info.pid:
        t.append(f"  {info.host}:{info.pid}", style="dim")
    if info.verdict:
        said = info.verdict
        if width and len(said) > width:
            said = said[: max(1, width - 1)] + "…"
        t.append("\n")
        t.append(said, style=VERDICT_STYLE.get(info.verdict_level, ""))
    return t
