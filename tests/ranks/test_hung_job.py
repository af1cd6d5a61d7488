"""A hung multi-rank job names the rank the others wait for, and where it is: from a real
torchrun job (3 ranks on gloo, rank 1 blocked in its loader before step 100's forward,
ranks 0 and 2 blocked in that step's gradient all-reduce), read by `dltop check DIR`
within the stall rule's floor plus one heartbeat; and live, by the viewer's cross-rank
judgement over the same records."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.tui.core.present.rankjob import JobView, RankLog
from dltop.tui.core.rules import Config
from dltop.tui.core.store.run import RunModel
from hangkit import RANKS, hung_job, rank_records
from test_probe_ranks import _gloo

pytestmark = pytest.mark.skipif(_gloo() is not None, reason=str(_gloo()))

FLOOR_S = 3.0  # the stall rule's floor for this test (60 s by default)
BEAT_S = 0.5  # the job's heartbeat interval (tests/rank_job.py, mode hang)
STALL = ["--set", f"stall.floor_s={FLOOR_S}", "--set", "stall.critical_floor_s=30"]


def _stalled_long_enough(out: Path) -> bool:
    """Every rank's heartbeats go on ``FLOOR_S`` + one heartbeat past its last step."""
    for rank in range(RANKS):
        recs = rank_records(out, rank)
        steps = [r["t"] for r in recs if r.get("kind") == "step"]
        beats = [r["t"] for r in recs if r.get("kind") == "heartbeat"]
        if not steps or not beats or beats[-1] - steps[-1] < FLOOR_S + BEAT_S:
            return False
    return True


def _wait(cond: Any, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


@pytest.mark.slow
def test_a_hung_job_names_its_rank_and_phase_in_check_and_live(tmp_path: Path) -> None:
    out = tmp_path / "job"
    with hung_job(out) as job:
        assert job.wait_hung(), job.stderr.read_text(errors="replace")[-2000:]
        assert _wait(lambda: _stalled_long_enough(out))
        done = subprocess.run(
            [sys.executable, "-m", "dltop.tui", "check", str(out), "--json", *STALL],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        records = [rank_records(out, r) for r in range(RANKS)]
    report = json.loads(done.stdout)
    stalls = [a for a in report["alerts"] if a["id"] == "stall"]
    (hung,) = [a for a in stalls if a["evidence"].get("secondary") is False]
    assert hung["rank"] == 1 and hung["evidence"]["rank"] == 1
    assert hung["evidence"]["phase"] == "data_wait" and hung["evidence"]["waiting_ranks"] == "0, 2"
    assert hung["title"] == "Rank 1 hung in data_wait"
    others = [a for a in stalls if a is not hung]
    assert others and all(a["evidence"]["secondary"] is True for a in others)
    assert all("waiting for rank 1 (stuck in data_wait)" in a["message"] for a in others)
    assert report["verdict"].startswith("Rank 1 hung in data_wait after step 99"), report["verdict"]

    # live: the viewer's cross-rank judgement over the same records, no engine rewritten
    ranks = []
    for r, recs in enumerate(records):
        model = RunModel(f"rank{r}", Config.load(None, {"stall.floor_s": FLOOR_S}))
        model.ingest(recs)
        ranks.append(RankLog(r, str(out / f"rank{r}.jsonl"), model))
    view = JobView(lambda: ranks)
    view.update(0.0, force=True)
    live = [a for a in view.alerts(ranks[0].model) if a.id == "stall"]
    assert any(a.evidence.get("rank") == 1 and a.evidence.get("phase") == "data_wait" for a in live)
    said, severity = view.verdict(ranks[0].model, time.time())
    assert "Rank 1 hung in data_wait" in said and severity in ("warning", "critical")
