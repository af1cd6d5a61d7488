"""A folder of separate runs (``./dltop-runs`` holds every run of a project) is not a job:
``dltop check DIR``, ``dltop report DIR`` and ``dltop DIR`` take its newest run and say
so, instead of judging every run as a rank of one job (their alerts read as one run's,
three copies of a log tripled every alert). A folder of a job's rank files is still one
job, whatever its files are called when their metas say so.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dltop.probe.encoding import encode_record
from dltop.tui.core.rules.config import Config
from dltop.tui.core.sources.source_open import open_source
from dltop.tui.core.store.run import RunModel
from rulekit import Run


def _log(path: Path, run: Run, mtime: float, **meta: Any) -> Path:
    """A log as the probe writes one: its meta says rank 0 of 1 unless told otherwise."""
    recs = list(run.records())
    recs[0].update({"rank": 0, "world_size": 1, **meta})
    path.write_bytes(b"".join(encode_record(r) for r in recs))
    os.utime(path, (mtime, mtime))
    return path


def _nan(i: int, loss: float) -> float:
    return math.nan if i >= 300 else loss


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_check_takes_the_newest_of_separate_runs_and_says_so(tmp_path: Path) -> None:
    runs = tmp_path / "dltop-runs"
    runs.mkdir()
    _log(runs / "exp_nan.jsonl", Run(steps=500, loss_at=_nan), 1_000, run_id="exp_nan")
    _log(runs / "exp_ok.jsonl", Run(steps=500, seed=3), 2_000, run_id="exp_ok")
    done = _check(str(runs))
    assert done.returncode == 0, done.stdout + done.stderr  # the newest run is healthy
    assert "1 other log in" in done.stdout and "newest, exp_ok.jsonl" in done.stdout
    assert "nan_loss" not in done.stdout and "(rank 0)" not in done.stdout
    done = _check(str(runs), "--json")
    out = json.loads(done.stdout)
    assert out["alerts"] == [] and "files" not in out  # one run, not a job of two
    assert any("separate runs" in s for s in out["skipped_files"])
    os.utime(runs / "exp_nan.jsonl", (3_000, 3_000))  # now the NaN run is the newest
    done = _check(str(runs))
    assert done.returncode == 2 and "nan_loss" in done.stdout


def test_a_jobs_rank_files_are_still_one_job(tmp_path: Path) -> None:
    """Rank files by their metas (world size 2), whatever their names."""
    job = tmp_path / "job"
    job.mkdir()
    _log(job / "a.jsonl", Run(steps=500, loss_at=_nan), 1_000, rank=0, world_size=2)
    _log(job / "b.jsonl", Run(steps=500, seed=3), 2_000, rank=1, world_size=2)
    out = json.loads(_check(str(job), "--json").stdout)
    assert [f["rank"] for f in out["files"]] == [0, 1]
    assert "nan_loss" in {a["id"] for a in out["alerts"]}


def test_a_log_that_cannot_tell_keeps_the_folder_a_job(tmp_path: Path) -> None:
    """A rank that has just opened its file has no meta yet: the folder is not called
    separate runs on the others' word alone (a job seen at its start stays a job)."""
    job = tmp_path / "job"
    job.mkdir()
    _log(job / "a.jsonl", Run(steps=100), 1_000)
    (job / "b.jsonl").write_bytes(b"")
    _log(job / "c.jsonl", Run(steps=100), 2_000)
    done = _check(str(job))
    assert "separate runs" not in done.stdout and "a.jsonl" in done.stdout, done.stdout


def test_the_viewer_opens_the_newest_of_separate_runs(tmp_path: Path) -> None:
    runs = tmp_path / "dltop-runs"
    runs.mkdir()
    _log(runs / "old.jsonl", Run(steps=50), 1_000, run_id="old")
    newest = _log(runs / "new.jsonl", Run(steps=80), 2_000, run_id="new")
    _log(runs / "mid.jsonl", Run(steps=60), 1_500, run_id="mid")
    model = RunModel("dir", Config())
    src = open_source(str(runs), model, follow=False)
    try:
        assert [r.path for r in src.ranks] == [str(newest)]  # type: ignore[attr-defined]
        assert any("2 other logs" in s for s in src.skipped)  # type: ignore[attr-defined]
        src.run()
    finally:
        src.stop()
    assert model.store.steps == 80


# -- several jobs' ranks in one folder (issue 29, 9): three jobs (world sizes 2, 4, 8)
# were read as "all 4 ranks" of one job, with two rank 0s


def _three_jobs(folder: Path) -> None:
    folder.mkdir()
    _log(
        folder / "a-rank0.jsonl",
        Run(steps=300, seed=1),
        1_000,
        rank=0,
        world_size=2,
        run_id="a-rank0",
    )
    _log(
        folder / "a-rank1.jsonl",
        Run(steps=300, seed=2),
        1_100,
        rank=1,
        world_size=2,
        run_id="a-rank1",
    )
    _log(
        folder / "b-rank0.jsonl",
        Run(steps=500, loss_at=_nan),
        2_000,
        rank=0,
        world_size=4,
        run_id="b-rank0",
    )
    _log(folder / "c-rank5.jsonl", Run(steps=200, seed=4), 1_500, rank=5, world_size=8, run_id="c-rank5")  # fmt: skip


def test_check_reads_one_job_of_several_and_says_which_files_are_whose(tmp_path: Path) -> None:
    runs = tmp_path / "mixed"
    _three_jobs(runs)
    done = _check(str(runs), "--json")
    out = json.loads(done.stdout)
    assert "files" not in out  # one file read: job b's only rank here, not 4 "ranks"
    assert {a["id"] for a in out["alerts"]} == {"nan_loss"} and out["steps"] == 500
    (note,) = [s for s in out["skipped_files"] if "jobs in" in s]
    assert note.startswith(f"3 jobs in {runs}, read as the newest alone: ")
    assert "world size 4: b-rank0.jsonl (read)" in note
    assert "world size 2: a-rank0.jsonl, a-rank1.jsonl (left out)" in note
    assert "world size 8: c-rank5.jsonl (left out)" in note
    text = _check(str(runs)).stdout
    assert "skipped: 3 jobs in" in text and "(rank 0)" not in text
    os.utime(runs / "a-rank1.jsonl", (3_000, 3_000))  # now job a is the newest: both ranks
    out = json.loads(_check(str(runs), "--json").stdout)
    assert [f["rank"] for f in out["files"]] == [0, 1] and out["alerts"] == []


def test_jobs_of_one_world_size_are_told_apart_by_their_names(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for prefix, mtime in (("x", 1_000), ("y", 2_000)):
        for rank in (0, 1):
            _log(job / f"{prefix}_rank{rank}.jsonl", Run(steps=100), mtime + rank, rank=rank, world_size=2)  # fmt: skip
    out = json.loads(_check(str(job), "--json").stdout)
    assert [os.path.basename(f["path"]) for f in out["files"]] == ["y_rank0.jsonl", "y_rank1.jsonl"]
    assert any(
        "2 jobs in" in s and "x_rank0.jsonl, x_rank1.jsonl (left out)" in s
        for s in out["skipped_files"]
    )


def test_the_viewer_follows_one_job_of_several(tmp_path: Path) -> None:
    runs = tmp_path / "mixed"
    _three_jobs(runs)
    model = RunModel("dir", Config())
    src = open_source(str(runs), model, follow=False)
    try:
        ranks = [(r.rank, os.path.basename(r.path)) for r in src.ranks]  # type: ignore[attr-defined]
        assert ranks == [(0, "b-rank0.jsonl")]
        assert any("3 jobs in" in s for s in src.skipped)  # type: ignore[attr-defined]
        src.run()
    finally:
        src.stop()
    assert model.store.steps == 500
