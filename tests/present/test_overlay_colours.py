"""An overlaid run's letter is in its line's colour wherever it is named: the header (the
focused run, the verdict across runs, a run's reader error), the run table (the chart's
legend: tests/present/test_overlay.py)."""

from __future__ import annotations

from dltop.tui.app.header import render_header
from dltop.tui.app.rank_table import RankTable
from dltop.tui.core.present.header_view import HeaderInfo
from dltop.tui.core.present.overlay import RUN_COLOURS
from dltop.tui.core.present.rankjob import RankRow
from rich.style import Style
from rich.text import Text


def _colour_at(text: Text, index: int) -> str | None:
    style = Style()
    for span in text.spans:
        if span.start <= index < span.end:
            style += span.style if isinstance(span.style, Style) else Style.parse(span.style)
    return style.color.name if style.color is not None else None


def _info(**kw: object) -> HeaderInfo:
    base: dict[str, object] = dict(run="demo", host="h", pid="1", status="running", age="",
                                   step="9", rate="", elapsed="", skipped=0, mode="")  # fmt: skip
    base.update(kw)
    return HeaderInfo(**base)  # type: ignore[arg-type]


def test_the_header_names_runs_in_their_colours() -> None:
    info = _info(ranks="run B b.jsonl of 2", mode="run C: cannot read c.jsonl", overlay=True,
                 verdict="A Loss is NaN since step 240", verdict_run=True)  # fmt: skip
    t = render_header(info, width=200)
    plain = t.plain
    b = plain.index("run B") + 4
    c = plain.index("run C") + 4
    a = plain.index("\n") + 1
    assert _colour_at(t, b) == RUN_COLOURS[1].lower()
    assert _colour_at(t, c) == RUN_COLOURS[2].lower()
    assert _colour_at(t, a) == RUN_COLOURS[0].lower()
    # a run's own verdict that starts with a capital letter is no run's letter
    alone = render_header(_info(verdict="A DataLoader worker died", overlay=True), width=200)
    assert _colour_at(alone, alone.plain.index("\n") + 1) != RUN_COLOURS[0].lower()


def test_the_run_table_colours_each_runs_letter() -> None:
    table = RankTable()
    table.unit = "run"
    row = RankRow("C c.jsonl", "h", "9", "1ms", "1ms", "1MiB", "running", "—", "", False, False,
                  False)  # fmt: skip
    cell = table._name_cell(row)
    assert cell.plain == "  C c.jsonl" and _colour_at(cell, 2) == RUN_COLOURS[2].lower()
    table.unit = "rank"  # a job's ranks have no colours
    assert _colour_at(table._name_cell(row), 2) is None
