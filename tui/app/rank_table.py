"""The rank table of a job: one row per rank (step, step time, data wait, memory, status,
alerts), the slowest rank and the one that failed first marked, the focused one pointed at.

A one-line-per-rank table rather than one chart per rank: a job of 8 or 64 ranks must fit
above the charts, and what a person scans for is the row that differs. The rows come
ready-made from ``rankjob.JobView.rows`` (every field already text, log text escaped);
this widget only lays them out, and only when they changed.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ..core.present.overlay import RUN_COLOURS
from ..core.present.rankjob import RankRow
from ..core.ranks.jobs import LETTERS

COLUMNS = ("rank", "host", "step", "step time", "data wait", "memory", "status", "alerts", "")


class RankTable(Static):
    """Hidden for a single log; shown (``-shown``) once a job has two ranks or more."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "ranktable--header",
        "ranktable--critical",
        "ranktable--warning",
        "ranktable--slow",
        "ranktable--focused",
    }

    DEFAULT_CSS = """
    RankTable { display: none; height: auto; max-height: 10; overflow-y: auto; padding: 0 1; }
    RankTable.-shown { display: block; }
    RankTable > .ranktable--header { color: $text-muted; text-style: bold; }
    RankTable > .ranktable--critical { color: $error; text-style: bold; }
    RankTable > .ranktable--warning { color: $warning; }
    RankTable > .ranktable--slow { color: $accent; text-style: bold; }
    RankTable > .ranktable--focused { text-style: reverse; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id, markup=False)
        self.rows: list[RankRow] = []
        self.unit = "rank"
        self.more = ""

    def show(self, rows: list[RankRow], unit: str = "rank", more: str = "") -> None:
        """Lay the rows out again only when one changed; ``unit``: "rank", or "run" for
        overlaid runs (the first column's name); ``more``: a line on the rows left out
        (``jobview.pick_rows``)."""
        if rows == self.rows and unit == self.unit and more == self.more:
            return
        self.rows, self.unit, self.more = list(rows), unit, more
        self.set_class(bool(rows), "-shown")
        if rows:
            self.update(self._table(rows))

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"ranktable--{name}")

    def _name_cell(self, r: RankRow) -> Text:
        """The row's name; an overlaid run's letter in its line's colour."""
        name = Text(("▶ " if r.focused else "  ") + r.name)
        letter = r.name[:1]
        if self.unit == "run" and letter and letter in LETTERS and r.name[1:2] == " ":
            name.stylize(Style(color=RUN_COLOURS[LETTERS.index(letter)], bold=True), 2, 3)
        return name

    def _table(self, rows: list[RankRow]) -> Table:
        table = Table(box=None, padding=(0, 1), pad_edge=False, expand=False, show_edge=False)
        header = self._style("header")
        for i, name in enumerate(COLUMNS):
            right = 2 <= i <= 5 or i == 7
            name = self.unit if i == 0 else name
            table.add_column(Text(name, style=header), justify="right" if right else "left")
        for r in rows:
            status_style = self._style(r.worst) if r.worst in ("critical", "warning") else Style()
            notes = [
                n for n, on in (("slowest", r.slowest), ("failed first", r.first_failure)) if on
            ]
            cells = [
                self._name_cell(r),
                Text(r.host),
                Text(r.step),
                Text(r.step_time),
                Text(r.data_wait, style=self._style("slow") if r.slowest else Style()),
                Text(r.memory),
                Text(r.status, style=self._style("critical") if r.status == "crashed" else Style()),
                Text(r.alerts, style=status_style),
                Text(" · ".join(notes), style=self._style("slow") if notes else Style()),
            ]
            if r.read_error:  # its log can no longer be read (the header says why): numbers stopped
                error = Text("read error", style=self._style("critical"))
                cells[-1] = Text(" · ").join([error, cells[-1]]) if notes else error
            table.add_row(*cells, style=self._style("focused") if r.focused else None)
        if self.more:  # a caption, so the note does not widen the first column
            table.caption = Text("  " + self.more, style=self._style("header"))
            table.caption_justify = "left"
        return table
