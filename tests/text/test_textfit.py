"""Text cut to the screen never lies about a number (``tui/core/text/textfit.py``): cut between
words with "…", never inside a number, widths in terminal cells; an OOM at 80 columns
shows its request whole or not at all; a notification's path breaks after a "/"."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from dltop.tui.app.app import DltopApp
from dltop.tui.app.header import Header
from dltop.tui.core.text.textfit import ELLIPSIS, cells, fit, fit_rows, fit_spans, wrap_path
from test_app_support import end_time, records, screen_text

REQUEST = "268435456"
# PyTorch's CPU allocator says so; the build's source path puts the number past 110 columns
OOM = (
    "[enforce fail at c10/core/alloc_cpu.cpp:114] data. DefaultCPUAllocator: not "
    f"enough memory: you tried to allocate {REQUEST} bytes. Error code 12 (Cannot "
    "allocate memory)"
)


def _cut_numbers(text: str, whole: str = REQUEST) -> list[str]:
    """The digit runs of ``text`` that are a cut-off head of ``whole``."""
    runs = (m.group() for m in re.finditer(r"\d+", text))
    return [g for g in runs if len(g) >= 3 and g != whole and whole.startswith(g)]


def test_fit_cuts_between_words_and_never_inside_a_number() -> None:
    for width in range(10, len(OOM) + 2):
        shown = fit(OOM, width)
        assert cells(shown) <= width, (width, shown)
        assert _cut_numbers(shown) == [], (width, shown)
        assert shown == OOM or shown.endswith(ELLIPSIS)
        # a cut lands after a whole word: what is kept is the message's own start
        assert OOM.startswith(shown.removesuffix(ELLIPSIS))
    assert fit("1.25e+05 steps", 6) == ELLIPSIS  # not "1.25e…"
    assert fit("rank 1: " + "x" * 300, 40).startswith("rank 1: xxxx")  # not "rank 1:…"
    assert fit("loss 0.31  ema 0.35  eval 0.77", 22, sep="  ") == "loss 0.31  ema 0.35…"
    assert fit("run\\x1b\\x1b\\x1b", 9) == "run\\x1b…"  # an escape is whole or gone


def test_widths_are_terminal_cells() -> None:
    assert cells("损失 NaN") == 8
    shown = fit("损失为 NaN，从第 240 步起", 14)
    assert cells(shown) <= 14 and "24…" not in shown


def test_rows_and_spans_cut_at_the_same_places() -> None:
    rows, cut = fit_rows(OOM, 40, 3)
    assert cut and len(rows) == 3
    assert all(cells(OOM[s:e]) <= 40 for s, e in rows)
    assert all(_cut_numbers(OOM[s:e]) == [] for s, e in rows)
    spans = fit_spans((("A", "run0"), (f" {REQUEST}", "legend"), ("  B 1.0", "legend")), 12, "  ")
    assert spans == [("A", "run0"), (f" {REQUEST}", "legend"), (ELLIPSIS, "legend")]


def test_a_path_breaks_after_a_separator() -> None:
    text = "report written to /home/someone/projects/a-long-project/dltop-runs/exp-42.report.md"
    rows = wrap_path(text, 30).split("\n")
    assert all(cells(r) <= 30 for r in rows) and len(rows) > 2
    assert "".join(rows).replace(" ", "") == text.replace(" ", "")  # nothing lost
    assert all(r.endswith("/") for r in rows[:-1])  # every row of the path ends a folder


async def _oom_at_80_columns(tmp_path: Path) -> tuple[str, str]:
    log = tmp_path / "oom.jsonl"
    recs = list(records("healthy", 10))
    t = end_time(10)
    recs.append({"kind": "event", "type": "exception", "t": t + 0.05, "step": 9,
                 "exc_type": "RuntimeError", "message": OOM})  # fmt: skip
    recs.append({"kind": "event", "type": "exit", "status": "exception", "t": t + 0.06})
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    app = DltopApp(str(log), follow=False, now=t + 5)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if app.ended:
                break
        app.redraw()
        await pilot.pause()
        await pilot.pause()
        return screen_text(app), str(app.query_one(Header).tooltip or "")


def test_an_oom_at_80_columns_never_shows_a_cut_number(tmp_path: Path) -> None:
    screen, status = asyncio.run(_oom_at_80_columns(tmp_path))
    assert "CRASHED" in screen
    assert _cut_numbers(screen) == [], screen
    # the status's reason (hovering the header) is cut between words too
    assert "allocate" in status and _cut_numbers(status) == [], status
