"""The dashboard on a real torchrun job's folder: every rank loaded, the rank table, the
charts across ranks, ``f`` to focus one rank and back, the first failure's crash.

A live folder where a second rank's file appears later is written here, in the test.
The torchrun folders are written by real 3-rank jobs (``torchrun --standalone`` on gloo, CPU,
``tests/rank_job.py``), once per module: rank 1's loader sleeps 30 ms per batch
(``slow_data``), or rank 2 raises at step 30 and the others die after it (``raise``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import Chart
from dltop.tui.app.checklist import ChecklistPane
from dltop.tui.app.rank_table import RankTable
from test_app_live import wait_for
from test_app_support import screen_text
from test_probe_ranks import gloo_startup_race
from test_rankjob import _meta, _steps, _write
from textual.widgets import Static

JOB = Path(__file__).resolve().parents[1] / "rank_job.py"


def _torchrun(out: Path, mode: str) -> Path:
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available here")
    for _ in range(3):  # gloo's connect at start-up can lose a race on a loaded machine
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        job = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
             str(JOB), str(out), mode],
            capture_output=True, text=True, timeout=180, cwd=out.parent,
            env={**os.environ, "TORCH_GLOO_LAZY_INIT": "1"},
        )  # fmt: skip
        if not gloo_startup_race(job.stderr):
            break
    assert sorted(p.name for p in out.iterdir()) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    return out


@pytest.fixture(scope="module")
def slow_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torchrun(tmp_path_factory.mktemp("ranks") / "slow_data", "slow_data")


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _torchrun(tmp_path_factory.mktemp("ranks") / "raise", "raise")


def _header(app: DltopApp) -> str:
    return screen_text(app).splitlines()[0]


def _verdict(app: DltopApp) -> str:
    """The header's second line: the job's verdict, as `dltop check DIR` words it."""
    return screen_text(app).splitlines()[1]


def _badges(app: DltopApp) -> str:
    return screen_text(app).splitlines()[2]


async def _loaded(pilot: object, app: DltopApp) -> None:
    """Every rank read, the cross-rank verdict given (on its thread) and drawn."""
    await wait_for(pilot, lambda: app.ended, "the replay's end")
    app.redraw()  # asks the judge thread for its verdict on the whole job
    await wait_for(pilot, app.job.settled, "the cross-rank verdict")
    app.redraw()
    await wait_for(pilot, lambda: len(app.query_one(RankTable).rows) == 3, "three rank rows")
    await pilot.pause()  # type: ignore[attr-defined]


async def _test_focus_key_on_a_straggler_job(folder: Path) -> None:
    app = DltopApp(str(folder), follow=False, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        table = app.query_one(RankTable)
        assert [r.name for r in table.rows] == ["r0", "r1", "r2"]
        assert [r.slowest for r in table.rows] == [False, True, False]
        assert all(r.step == "199" for r in table.rows)
        text = screen_text(app)
        assert "(all 3 ranks)" in _header(app)
        assert "slowest" in text and "r1 Rank 1 is a straggler" in _badges(app)
        assert app.query_one("#panel-step_time").border_title.startswith("4 slowest r1 ")
        loss = app.query_one("#panel-loss", Chart)
        assert loss.data is not None and loss.data.traces[0].style == "band"
        # f: rank 0 alone: its charts, its (lack of) alerts, its name in the header
        await pilot.press("f")
        await pilot.pause()
        assert "(r0 of 3 ranks)" in _header(app) and app.model is app.job.ranks()[0].model
        assert "Rank 1 is a straggler" not in _badges(app)
        assert table.rows[0].focused and "▶ r0" in screen_text(app)
        assert app.query_one("#panel-loss", Chart).border_title == "1 loss · r0"
        await pilot.press("f")  # rank 1: the straggler is its alert, with its checklist
        await pilot.pause()
        assert "(r1 of 3 ranks)" in _header(app)
        assert "Rank 1 is a straggler" in _badges(app) and not _badges(app).startswith(" ✖ r1 ")
        while "straggler" not in (app.state.selected or ""):
            await pilot.press("a")
            await pilot.pause()
        pane = app.query_one(ChecklistPane)
        title = str(pane.query_one("#cl-title", Static).render())
        assert "straggler" in title.lower()
        # the checklist's marks come from rank 1's own facts: it does wait for data
        assert "data_wait_share" in screen_text(app)
        await pilot.press("f", "f")  # rank 2, then every rank again
        await pilot.pause()
        assert "(all 3 ranks)" in _header(app) and app.model is app.primary
        assert not any(r.focused for r in table.rows)


@pytest.mark.slow
def test_the_focus_key_on_a_straggler_job(slow_data: Path) -> None:
    asyncio.run(_test_focus_key_on_a_straggler_job(slow_data))


async def _test_a_crashed_job_tells_the_first_failure(folder: Path) -> None:
    app = DltopApp(str(folder), follow=False, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        await wait_for(pilot, lambda: "broke on purpose" in screen_text(app), "rank 2's crash")
        rows = app.query_one(RankTable).rows
        assert [r.status for r in rows] == ["crashed"] * 3
        assert [r.first_failure for r in rows] == [False, False, True]
        assert "failed first" in screen_text(app)
        crash = [ln for ln in _badges(app).split("  ") if "crashed" in ln]
        assert crash and "r0,1,2" in crash[0], _badges(app)
        await pilot.press("f")  # rank 0 alone: its own crash, worded as the secondary one
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        assert "(r0 of 3 ranks)" in _header(app)
        alerts = [a for a in app._alerts() if a.id == "crash"]
        assert alerts and alerts[0].message.startswith("secondary: rank 2 failed first")


@pytest.mark.slow
def test_a_crashed_job_tells_the_first_failure(crashed: Path) -> None:
    asyncio.run(_test_a_crashed_job_tells_the_first_failure(crashed))


async def _test_f_on_a_single_log_says_so(folder: Path) -> None:
    app = DltopApp(str(folder / "rank0.jsonl"), follow=False, poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.ended, "the replay's end")
        await pilot.press("f")
        await pilot.pause()
        assert "no other rank" in "\n".join(n.message for n in app._notifications)
        assert not app.query_one(RankTable).has_class("-shown")
        assert app.model is app.primary


def test_f_on_a_single_log_says_so(tmp_path: Path) -> None:
    # one rank's log, written here: a torchrun job (20 s) is not needed to have one log
    _write(tmp_path / "rank0.jsonl", [_meta(0), *_steps(20)])
    asyncio.run(_test_f_on_a_single_log_says_so(tmp_path))


async def _test_a_rank_that_starts_later_joins_the_live_view(folder: Path) -> None:
    _write(folder / "rank0.jsonl", [_meta(0), *_steps(20)])
    app = DltopApp(str(folder), poll_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "step 19" in _header(app), "rank 0's steps")
        assert not app.query_one(RankTable).has_class("-shown")  # one log: no table
        _write(folder / "rank1.jsonl", [_meta(1), *_steps(30, data=0.03)])
        await wait_for(pilot, lambda: len(app.query_one(RankTable).rows) == 2, "rank 1's row")
        await wait_for(pilot, lambda: "(all 2 ranks)" in _header(app), "the job view")
        _write(folder / "rank1.jsonl", _steps(10, data=0.03, start=30))  # followed live
        await wait_for(
            pilot, lambda: [r.step for r in app.query_one(RankTable).rows] == ["19", "39"], "r1"
        )
        assert "f rank" in screen_text(app).splitlines()[-1]


def test_a_rank_that_starts_later_joins_the_live_view(tmp_path: Path) -> None:
    asyncio.run(_test_a_rank_that_starts_later_joins_the_live_view(tmp_path))


async def _test_a_big_job_works_out_its_charts_beside_the_event_loop(folder: Path) -> None:
    """Eight ranks: each panel's data cost a decimation per rank, so they are worked out on
    the charts' thread, not in a paint on the event loop. Made slow here (0.3 s a panel,
    sleeping: the GIL is free), the keys still answer at once, the charts keep their old
    picture meanwhile, and every panel then shows the new steps."""
    from dltop.tui.app import app as app_module

    ranks = app_module.OFFLOOP_RANKS
    for r in range(ranks):
        _write(folder / f"rank{r}.jsonl", [_meta(r), *_steps(20)])
    app = DltopApp(str(folder), poll_interval=0.05, refresh_hz=2.0)
    threads: list[str] = []

    def slowed(real: Any) -> Any:
        def provide(buckets: int) -> Any:
            threads.append(threading.current_thread().name)
            time.sleep(0.3)
            return real(buckets)

        return provide

    switch = sys.getswitchinterval()
    async with app.run_test(size=(120, 40)) as pilot:
        # the GIL changes hands every ms while the dashboard runs, and is given back after
        assert sys.getswitchinterval() == app_module.SWITCH_INTERVAL < switch
        await wait_for(pilot, lambda: len(app.query_one(RankTable).rows) == ranks, "the ranks")
        await pilot.pause(1.2)  # the first paints (on the loop: a chart's first is lazy)
        charts = [c for c in app.query(Chart) if c.data is not None and c.data.has_points]
        assert len(charts) >= 4
        for chart in charts:
            chart.provider = slowed(chart.provider)
        for r in range(ranks):
            _write(folder / f"rank{r}.jsonl", _steps(10, start=20))
        await wait_for(pilot, lambda: bool(threads), "a chart's data being worked out")
        await pilot.press("p")  # a key while the charts' thread is busy
        await wait_for(pilot, lambda: app.state.paused, "the key", timeout=5)
        # still working on the charts (4+ panels x 0.3 s): the key did not wait for them
        assert app.chart_thread.pending() > 0
        assert all(c.data is not None and c.data.end < 29 for c in charts)  # old picture
        await wait_for(pilot, lambda: all(c.data.end >= 29 for c in charts), "new charts", 20)
    assert set(threads) == {"dltop-charts"}
    assert sys.getswitchinterval() == switch


def test_a_big_job_works_out_its_charts_beside_the_event_loop(tmp_path: Path) -> None:
    asyncio.run(_test_a_big_job_works_out_its_charts_beside_the_event_loop(tmp_path))
