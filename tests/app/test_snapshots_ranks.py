"""SVG snapshot of a job's dashboard (pytest-textual-snapshot): three rank logs, rank 1
waiting for data, the rank table above the charts across ranks (median line over the
ranks' min–max band), the straggler badge naming rank 1.

Deterministic as tests/app/test_snapshots.py: rank logs generated with fixed timestamps, "now"
frozen, a host that is not this one, the screenshot taken once every rank is read and
the cross-rank verdict drawn. Update with
``pytest tests/app/test_snapshots_ranks.py --snapshot-update`` and review the SVG.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.app.app import DltopApp
from dltop.tui.app.rank_table import RankTable
from test_app_support import end_time, records
from test_snapshots import _loaded as replayed
from textual.pilot import Pilot

STEPS = 200


def write_job(folder: Path) -> Path:
    """rank0..2.jsonl: the same training on three ranks, losses a little apart, rank 1's
    loader 60 ms slow per step."""
    folder.mkdir()
    for rank in range(3):
        scenario = "data_bound" if rank == 1 else "healthy"
        with open(folder / f"rank{rank}.jsonl", "wb") as f:
            for rec in records(scenario, STEPS):
                if rec["kind"] == "meta":
                    rec.update(run_id=f"job.rank{rank}", rank=rank, world_size=3, pid=4242 + rank)
                elif rec["kind"] == "step":
                    rec["loss"] *= 1.0 + 0.15 * rank
                f.write(encode_record(rec))
    return folder


async def _loaded(pilot: Pilot[int]) -> None:
    await replayed(pilot)  # the redraw there asks the judge thread for its verdict
    app = pilot.app
    assert isinstance(app, DltopApp)
    deadline = time.monotonic() + 30
    while not app.job.settled() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert app.job.settled(), "no cross-rank verdict"
    app.redraw()
    await pilot.pause()
    assert len(app.query_one(RankTable).rows) == 3


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_job_screen(snap_compare: object, tmp_path: Path, size: tuple[int, int]) -> None:
    app = DltopApp(
        str(write_job(tmp_path / "job")),
        follow=False,
        now=end_time(STEPS) + 3.0,
        poll_interval=0.05,
    )
    assert snap_compare(app, terminal_size=size, run_before=_loaded)  # type: ignore[operator]
