"""Multi-rank jobs seen as one: the first failure across ranks and a data straggler.

Real jobs: ``torchrun --standalone --nproc_per_node=3`` on gloo (CPU) running
``tests/rank_job.py``, read back by ``dltop check`` on the job's folder. Unit tests cover
the clock tolerance between hosts, where real processes cannot be made to disagree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkkit import check_run
from dltop.tui.core.ranks import compare as ranks
from dltop.tui.core.rules import Config, RuleEngine
from dltop.tui.core.rules.alerts import Alert
from test_probe_ranks import gloo_startup_race

JOB = Path(__file__).resolve().parents[1] / "rank_job.py"


def _torchrun(tmp_path: Path, mode: str) -> dict[str, Any]:
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available here")
    out = tmp_path / mode
    for _ in range(3):  # gloo's connect at start-up can lose a race on a loaded machine
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        job = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
             str(JOB), str(out), mode],
            capture_output=True, text=True, timeout=180, cwd=tmp_path,
            env={**os.environ, "TORCH_GLOO_LAZY_INIT": "1"},  # no start-up connect race
        )  # fmt: skip
        if not gloo_startup_race(job.stderr):
            break
    assert sorted(p.name for p in out.iterdir()) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    return check_run(out)


@pytest.mark.slow
def test_a_healthy_job_raises_nothing(tmp_path: Path) -> None:
    out = _torchrun(tmp_path, "healthy")
    assert [f["rank"] for f in out["files"]] == [0, 1, 2]
    loud = [(a["id"], a["rank"]) for a in out["alerts"] if a["severity"] != "info"]
    assert loud == [], loud


@pytest.mark.slow
def test_a_slow_data_rank_is_named_with_its_phase(tmp_path: Path) -> None:
    out = _torchrun(tmp_path, "slow_data")
    (s,) = [a for a in out["alerts"] if a["id"] == "straggler"]
    assert s["rank"] == 1 and s["evidence"]["rank"] == 1 and s["evidence"]["phase"] == "data"
    assert s["evidence"]["extra_s"] > 0.02
    assert s["severity"] in ("warning", "critical")


@pytest.mark.slow
def test_a_slow_forward_rank_is_named_with_its_phase(tmp_path: Path) -> None:
    """Rank 1 computes 30 ms longer: every rank's step takes as long (the others wait in
    the all-reduce, inside their backward), but rank 1's batch-to-first-gradient time
    (the probe's forward_time) stands out."""
    out = _torchrun(tmp_path, "slow_forward")
    (s,) = [a for a in out["alerts"] if a["id"] == "straggler"]
    assert s["rank"] == 1 and s["evidence"]["phase"] == "forward", s["message"]
    assert s["evidence"]["extra_s"] > 0.02


@pytest.mark.slow
def test_the_first_failure_is_named_on_every_rank(tmp_path: Path) -> None:
    out = _torchrun(tmp_path, "raise")
    crashes = [a for a in out["alerts"] if a["id"] == "crash"]
    assert len(crashes) >= 2, [a["message"][:80] for a in out["alerts"]]
    assert {a["evidence"]["first_rank"] for a in crashes} == {2}
    (first,) = [a for a in crashes if a["evidence"]["secondary"] is False]
    assert first["rank"] == 2 and "broke on purpose" in first["message"]
    for a in crashes:
        if a is not first:
            assert a["evidence"]["secondary"] is True and a["message"].startswith("secondary:")
            assert a["checklist_id"] == first["checklist_id"] or first["checklist_id"] is None
    assert "broke on purpose" in out["reason"], out["reason"]


def _failed_rank(rank: int, t: float, pattern: str, title: str) -> ranks.Rank:
    eng = RuleEngine(Config.load())
    eng.sink.add(
        Alert("crash", "critical", 10, title, title, {"pattern": pattern}, t=t, checklist=pattern)
    )
    return ranks.Rank(rank, eng)


def test_a_collective_timeout_within_the_clock_tolerance_is_not_first() -> None:
    """Host clocks disagree by up to a second or two: rank 3's timeout stamped 0.5 s before
    rank 1's real error is still the secondary one."""
    job = [
        _failed_rank(1, 100.5, "unknown", "The run crashed"),
        _failed_rank(3, 100.0, "distributed_timeout", "A distributed collective failed"),
    ]
    ranks.judge(job)
    a1, a3 = (r.engine.alerts()[0] for r in job)
    assert a1.evidence["first_rank"] == a3.evidence["first_rank"] == 1
    assert a1.evidence["secondary"] is False and a3.evidence["secondary"] is True
    assert a3.checklist == "unknown"


def test_a_failure_well_before_the_others_is_first_whatever_it_is() -> None:
    job = [
        _failed_rank(0, 200.0, "unknown", "The run crashed"),
        _failed_rank(1, 100.0, "distributed_timeout", "A distributed collective failed"),
    ]
    ranks.judge(job)
    assert job[0].engine.alerts()[0].evidence["first_rank"] == 1


def test_one_rank_is_left_alone() -> None:
    job = [_failed_rank(0, 1.0, "unknown", "The run crashed")]
    ranks.judge(job)
    assert "first_rank" not in job[0].engine.alerts()[0].evidence
