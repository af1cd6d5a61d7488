"""The crash banner: how a run died (exception, step, last values, diagnosis), on top of
the panels, so that a replay of a crashed log answers the first question at once."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from ..core.present.view_model import CrashInfo
from ..core.text.textfit import ELLIPSIS, cells, fit_rows

ROWS = ("head", "last", "diag", "hint")


class CrashBanner(Vertical):
    """Hidden until the run has crashed; shown in replay and after a live crash.

    One item per row, each cut with an ellipsis instead of wrapping: on a small terminal
    the banner has four rows, and a wrapped line would push the rest out. Only the
    diagnosis may take a second row, and only where the terminal is big enough. The rows
    are cut here, between words (``textfit``), not by the terminal's edge: an OOM's
    "tried to allocate 268435456" cut at the edge read as a ten times smaller number."""

    DEFAULT_CSS = """
    CrashBanner { display: none; height: auto; max-height: 6; padding: 0 1;
                  background: $error-darken-2; color: $text; }
    CrashBanner.-shown { display: block; }
    CrashBanner > Static { height: auto; max-height: 1; text-wrap: nowrap;
                           text-overflow: ellipsis; }
    CrashBanner > Static.-empty { display: none; }
    CrashBanner > #crash-diag { max-height: 2; text-wrap: wrap; }
    """  # one row for the diagnosis too on small terminals: see dltop.tcss

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info: CrashInfo | None = None

    def compose(self) -> ComposeResult:
        for row in ROWS:
            yield Static("", id=f"crash-{row}", classes="-empty")

    def show(self, info: CrashInfo | None) -> None:
        if info == self.info:
            return
        self.info = info
        self.set_class(info is not None, "-shown")
        self._draw()
        self.call_after_refresh(self._draw)  # shown just now: its width is known after layout

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        info = self.info
        if info is None:
            return
        diag_rows = 1 if self.screen.has_class("-compact") else 2
        rows = render_crash(info, self.size.width, diag_rows)
        for row, text in zip(ROWS, rows, strict=True):
            widget = self.query_one(f"#crash-{row}", Static)
            widget.set_class(not text.plain, "-empty")
            widget.update(text)


def render_crash(
    info: CrashInfo, width: int = 0, diag_rows: int = 2
) -> tuple[Text, Text, Text, Text]:
    """The four rows: what happened and where, the last values, the diagnosis, the hint
    (an empty ``Text`` for a row with nothing to say); with ``width``, each cut to it
    between words (the diagnosis to ``diag_rows`` rows)."""
    head = Text()
    head.append(f" {info.label} ", style="bold white on red")
    where = f" at step {info.step}" if info.step is not None else ""
    head.append(f"{where}: ", style="bold")
    head.append(info.exception, style="bold")
    last = Text()
    if info.last_values:
        last = Text.assemble(("last values: ", "dim"), info.last_values)
    diag = Text()
    if info.diagnosis or info.summary:
        diag = Text.assemble(("diagnosis: ", "dim"), (info.diagnosis, "bold"))
        if info.summary:
            diag.append(f" — {info.summary}")
    hint = Text(info.hint, style="italic") if info.hint else Text()
    if width <= 0:
        return head, last, diag, hint
    return _fit(head, width), _fit(last, width), _fit(diag, width, diag_rows), _fit(hint, width)


def _fit(text: Text, width: int, rows: int = 1) -> Text:
    """``text`` in ``rows`` rows of ``width`` columns, its styles kept, cut between words."""
    plain = text.plain
    if cells(plain) <= width:
        return text
    spans, cut = fit_rows(plain, width, rows)
    out = Text("\n").join(text[s:e] for s, e in spans)
    if cut:
        out.append(ELLIPSIS)
    return out
