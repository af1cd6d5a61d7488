"""The header: run name, host, pid, status with the age of the last record, step, speed."""

from __future__ import annotations

import re

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from ..core.present.overlay import RUN_COLOURS
from ..core.present.view_model import HeaderInfo
from ..core.ranks.jobs import LETTERS
from ..core.text.i18n import tr
from ..core.text.textfit import fit

# status -> style; the CSS cannot colour parts of one line, so these stay here
STATUS_STYLE = {
    "running": "bold green",
    "stalled": "bold yellow",
    "finished": "bold blue",
    "crashed": "bold white on red",
    "unknown": "bold",
}


VERDICT_STYLE = {"critical": "bold red", "warning": "bold yellow", "": "green"}
# an overlaid run's letter where the header names a run: "run B …", "[run B: …]", and the
# verdict's first word ("B Loss is NaN since …")
_RUN_LETTER = re.compile(rf"(?:^|(?<=run ))([{LETTERS}])(?=[ :,)]|$)")


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
        if info.overlay:
            _colour_letters(t, len(t.plain) - len(info.ranks) - 1)
    t.append("  ")
    lang = info.lang
    t.append(f" {tr(info.status, lang)} ", style=STATUS_STYLE.get(info.status, "bold"))
    if info.age:
        t.append(f" {info.age}", style="dim")
    t.append("  " + tr("step {step}", lang, step=info.step))
    if info.mode:
        t.append(f"  [{info.mode}]", style="bold magenta")
        if info.overlay:  # "[run B: cannot read …]"
            _colour_letters(t, len(t.plain) - len(info.mode) - 1, anchored=False)
    for n, key, one in (
        (info.skipped, "{n} corrupt lines skipped", "1 corrupt line skipped"),
        (info.lost, "{n} records not in the log", "1 record not in the log"),
        (info.dropped, "{n} records dropped", "1 record dropped"),
    ):
        if n:
            t.append("  " + _counted(n, key, one, lang), style="bold yellow")
    if compact and info.gpu:  # the GPU panel is hidden on small terminals: say it here
        t.append(f"  {info.gpu}", style="bold")
    if info.rate:
        t.append(f"  {info.rate}")
    if info.elapsed:
        t.append("  " + tr("elapsed {elapsed}", lang, elapsed=info.elapsed))
    if info.host or info.pid:
        t.append(f"  {info.host}:{info.pid}", style="dim")
    if info.verdict:
        said = fit(info.verdict, width) if width else info.verdict  # never inside a number
        t.append("\n")
        t.append(said, style=VERDICT_STYLE.get(info.verdict_level, ""))
        if info.verdict_run:
            _colour_letters(t, len(t.plain) - len(said))
    return t


def _counted(n: int, key: str, one: str, lang: str) -> str:
    """A count's words: English says ``one`` for 1, a translation has one form for all."""
    said = tr(key, lang, n=n)
    return one if n == 1 and said == key.format(n=n) else said


def _colour_letters(t: Text, start: int, anchored: bool = True) -> None:
    """The run letters in ``t`` from ``start``, each in its run's colour (as its line)."""
    text = t.plain[start:]
    for m in _RUN_LETTER.finditer(text):
        if m.start() == 0 and not anchored:
            continue
        letter = m.group(1)
        colour = RUN_COLOURS[LETTERS.index(letter)]
        t.stylize(Style(color=colour, bold=True), start + m.start(), start + m.end())
