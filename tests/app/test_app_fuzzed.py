"""The real app (Pilot) on hostile long runs, overlaid and as a rank folder, with keys
pressed: what a fuzzer of the app found, kept as fixed seeds.

Why here and not only as unit tests: both bugs were in what the app draws after a key
(an overlaid run's chart, a focused rank job's log axis), reached only when the reader,
the rules, the chart thread and the widgets run together. ``tests/fuzzkit.py`` makes the
logs; the seeds and keys are those that failed on the old code.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from fuzzkit import hostile_run, write_jsonl

NOW = 1_700_000_100.0
OVERLAY_KEYS = ("l", "s", "S", "t", "left", "left", "right", "home", "end", "a", "a", "c",
                "escape", "a", "c", "p", "p", "tab", "down", "enter")  # fmt: skip


async def _drive(app: DltopApp, keys: list[str]) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.6)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.05)
        await pilot.pause(0.4)
        assert app.model.engine_error is None, app.model.engine_error


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 4])
def test_overlaid_hostile_runs_are_drawn_whatever_the_keys(tmp_path: Path, seed: int) -> None:
    """Runs reaching 1e308 overlaid: one drawn off the scale crashed the chart with an
    OverflowError (13 of the first 30 seeds)."""
    runs = 1 + seed % 3
    paths = [
        str(write_jsonl(tmp_path / f"run{i}.jsonl", hostile_run(seed * 10 + i, 400, 200)))
        for i in range(runs)
    ]
    rng = random.Random(seed)
    keys = [rng.choice(OVERLAY_KEYS) for _ in range(12)]
    app = DltopApp(None, follow=False, now=NOW, poll_interval=0.05, overlay=paths)
    asyncio.run(_drive(app, keys))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_hostile_rank_folder_on_a_log_axis_is_drawn_in_bounded_time(tmp_path: Path) -> None:
    """Two ranks at 1e308 on the same steps, the job focused and its loss on a log axis:
    the axis spanned 1e300 decades and the tick search grew until the machine ran out of
    memory (the fuzzer's seed 39)."""
    for rank in range(2):
        recs = hostile_run(390 + rank, steps=400, mutations=150)
        meta = recs[0]
        if meta.get("kind") == "meta":
            meta.update(rank=rank, world_size=2, run_id="job39")
        write_jsonl(tmp_path / f"rank{rank}.jsonl", recs)
    app = DltopApp(str(tmp_path), follow=False, now=NOW, poll_interval=0.05)
    keys = ["end", "a", "f", "l", "end", "a", "f", "l", "a", "f", "home", "l"]
    asyncio.run(_drive(app, keys))
