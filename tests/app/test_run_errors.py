"""A job's rank (or an overlaid run) whose reader fails while another one is in view.

Each rank has its own reader thread; a rank whose file vanishes or becomes unreadable
stops drawing. The header only showed the error of the run in view, so with rank 0 or
the whole job on screen, rank 2's failure was silent. Now the header names the runs
whose readers failed (``JobView.error_note``), and the rank table marks their rows.

The core tests set ``source_error`` as the reader does (``ReaderThread._fail``); the
Pilot test makes a real rank reader fail: its file is replaced by a directory while the
job is followed, and the reader's reopen refuses it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from dltop.tui.app.app import DltopApp
from dltop.tui.app.header import Header
from dltop.tui.app.rank_table import RankTable
from dltop.tui.core.present import view_model as vm
from dltop.tui.core.present.header_view import ERROR_NOTE, error_note
from dltop.tui.core.present.jobview import pick_rows
from dltop.tui.core.present.overlay import OverlayView
from dltop.tui.core.present.rankjob import JobView, RankLog
from dltop.tui.core.store.run import RunModel
from dltop.tui.core.text.safetext import is_safe
from test_app_live import wait_for
from test_app_support import screen_text
from test_overlay import _runs
from test_rankjob import T0, _job, _meta, _steps, _write

HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202egnp.0knar" + "x" * 5000


def _fail(r: RankLog, message: str) -> None:
    with r.model.lock:  # as ReaderThread._fail does
        r.model.source_error = message


def test_no_failed_reader_no_note() -> None:
    ranks = _job(_steps(10), _steps(10), _steps(10))
    view = JobView(lambda: ranks)
    assert view.error_note(ranks[0].model) == ""
    assert error_note([], "rank") == ""
    assert not any(r.read_error for r in view.rows(T0 + 10))


def test_one_failed_rank_is_named_with_its_error_while_another_is_shown() -> None:
    ranks = _job(_steps(10), _steps(10), _steps(10))
    view = JobView(lambda: ranks)
    _fail(ranks[2], "cannot read /job/rank2.jsonl: Permission denied")
    note = view.error_note(ranks[0].model)  # rank 0 (or the whole job) in view
    # the file by its name: the folder's path would leave no room on the line for why
    assert note == "rank 2: cannot read rank2.jsonl: Permission denied"
    # in view itself, the header says its own error already: not said twice
    assert view.error_note(ranks[2].model) == ""
    rows = view.rows(T0 + 10)
    assert [r.read_error for r in rows] == [False, False, True]
    # the header line carries it in its mode part
    with ranks[0].model.lock:
        info = vm.header_info(ranks[0].model, T0 + 10, vm.ViewState(), True, run_errors=note)
    assert "rank 2: cannot read rank2.jsonl" in info.mode


def test_several_failed_ranks_are_counted_and_named() -> None:
    ranks = _job(*[_steps(10) for _ in range(6)])
    view = JobView(lambda: ranks)
    _fail(ranks[3], "gone")
    _fail(ranks[5], "gone too")
    assert view.error_note(ranks[0].model) == "2 ranks with errors (rank 3, rank 5)"
    _fail(ranks[0], "rank 0's own")  # rank 3 in view: rank 0's error is among the others
    assert view.error_note(ranks[3].model) == "2 ranks with errors (rank 0, rank 5)"


def test_an_overlaid_run_is_named_by_its_letter() -> None:
    runs = _runs("healthy", "healthy", "healthy", steps=20)
    view = OverlayView(lambda: runs)
    _fail(runs[1], "cannot read /runs/healthy-1.jsonl: Input/output error")
    assert view.error_note(runs[0].model) == (
        "run B: cannot read healthy-1.jsonl: Input/output error"
    )
    _fail(runs[2], "x")
    assert view.error_note(runs[0].model) == "2 runs with errors (run B, run C)"


def test_hostile_and_long_errors_stay_one_bounded_visible_line() -> None:
    ranks = _job(_steps(10), _steps(10))
    view = JobView(lambda: ranks)
    _fail(ranks[1], HOSTILE)
    note = view.error_note(ranks[0].model)
    assert note.startswith("rank 1: \\x1b]52;c;") and "\\x07\\x1b[2J\\u202e" in note
    assert is_safe(note) and "\n" not in note and len(note) <= ERROR_NOTE
    assert note.endswith("…")
    assert [r.read_error for r in view.rows(T0 + 10)] == [False, True]
    # a hostile name (a rank known by its file name) is escaped and cut as well
    note = error_note([("\x1b[31m" + "n" * 300, "e"), ("\u202eb", "e")], "rank")
    assert is_safe(note) and len(note) <= ERROR_NOTE and "\\x1b[31m" in note


def test_64_failed_ranks_fit_one_line_and_are_counted() -> None:
    ranks = [RankLog(i, f"/job/rank{i}.jsonl", RunModel(f"rank{i}")) for i in range(65)]
    view = JobView(lambda: ranks)
    for r in ranks[1:]:
        _fail(r, HOSTILE)
    note = view.error_note(ranks[0].model)
    assert len(note) <= ERROR_NOTE and is_safe(note)
    assert note.startswith("64 ranks with errors (rank 1, rank 2, ")
    named = note[note.index("(") + 1 : note.rindex(" +")].split(", ")
    left = int(note[note.rindex("+") + 1 : -1])
    assert named[-1] == f"rank {len(named)}" and len(named) + left == 64
    for width in range(10, 120):  # whatever room there is, never longer
        assert len(error_note([(f"rank {i}", "e") for i in range(64)], "rank", width)) <= width
    # the rank table keeps a failed rank among the 8 rows it shows of a big job
    for r in ranks[1:]:
        with r.model.lock:
            r.model.source_error = None
    _fail(ranks[40], "gone")
    shown, _ = pick_rows(view.rows(T0))
    assert "r40" in [r.name for r in shown]


# ------------------------------------------------------------------ the screen (Pilot)


def _header(app: DltopApp) -> str:
    return screen_text(app).splitlines()[0]


async def _test_a_rank_whose_file_turns_into_a_directory_is_said(folder: Path) -> None:
    for r in range(3):
        _write(folder / f"rank{r}.jsonl", [_meta(r), *_steps(20)])
    app = DltopApp(str(folder), poll_interval=0.05)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(RankTable)
        await wait_for(pilot, lambda: [r.step for r in table.rows] == ["19"] * 3, "3 ranks")
        assert "(all 3 ranks)" in _header(app) and "error" not in screen_text(app)
        # rank 2's log is replaced by a directory: its reader reopens the path and fails
        rank2 = folder / "rank2.jsonl"
        os.remove(rank2)
        os.mkdir(rank2)
        await wait_for(pilot, lambda: "[rank 2: " in _header(app), "rank 2's error in the header")
        info = app.query_one(Header).info
        assert info is not None and info.mode.startswith(
            "rank 2: rank2.jsonl is a directory, not a log file"
        )
        line = next(ln for ln in screen_text(app).splitlines() if ln.lstrip().startswith("r2 "))
        assert "read error" in line
        await pilot.press("f")  # rank 0 alone: rank 2's failure is still said
        await pilot.pause()
        app.redraw()
        assert "(r0 of 3 ranks)" in _header(app) and "[rank 2: " in _header(app)
        await pilot.press("f", "f")  # rank 2 itself: its own error, as for a single log
        await pilot.pause()
        app.redraw()
        header = _header(app)
        assert "(r2 of 3 ranks)" in header and "[rank 2: " not in header
        assert app.query_one(Header).info.mode.startswith(str(rank2))  # type: ignore[union-attr]


def test_a_rank_whose_file_turns_into_a_directory_is_said(tmp_path: Path) -> None:
    asyncio.run(_test_a_rank_whose_file_turns_into_a_directory_is_said(tmp_path))


def test_a_rank_whose_log_is_deleted_while_followed_is_named(tmp_path: Path) -> None:
    """Real files, real readers: rank 1's log is deleted while the job is followed. Its
    reader goes on from its open descriptor (no error), so nothing said it before: with
    rank 0 in view, the header's job note now names it; with rank 1 in view, its own
    header says it once (the job note does not repeat it)."""
    from dltop.tui.core.sources.source_open import open_source
    from dltop.tui.core.store.run import DELETED_NOTE
    from waiting import wait_for

    ranks, sources = [], []
    for r in range(2):
        path = tmp_path / f"rank{r}.jsonl"
        _write(path, [_meta(r), *_steps(20)])
        model = RunModel(path.name)
        sources.append(open_source(path, model, None, poll_interval=0.02).start())
        ranks.append(RankLog(r, str(path), model))
    view = JobView(lambda: ranks)
    try:
        assert wait_for(lambda: all(r.model.store.steps == 20 for r in ranks), timeout=30)
        assert view.error_note(ranks[0].model) == ""
        (tmp_path / "rank1.jsonl").unlink()  # a cleanup of the runs folder mid-job
        assert wait_for(lambda: ranks[1].model.log_deleted, timeout=30)
        assert view.error_note(ranks[0].model) == f"rank 1: {DELETED_NOTE}"
        assert view.error_note(ranks[1].model) == ""
        with ranks[1].model.lock:
            info = vm.header_info(ranks[1].model, T0 + 10, vm.ViewState(), True)
        assert DELETED_NOTE in info.mode
        assert not any(r.read_error for r in view.rows(T0 + 10)), "still read: not an error"
    finally:
        for s in sources:
            s.stop()
