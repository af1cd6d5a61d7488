"""Live and replay give the same diagnosis (issue 11, "same answers").

Each log goes through `dltop check`'s replay, a followed file it trickles into in
random pieces while the viewer's ticks run, and the huge-log path (tail first, charts
and rules backfilled). The alert ids, severities, first and last steps must agree.
Logs: synthetic runs with the faults the rules know (rulekit), a crashed and a
vanished run, and every log of the fault suite's quick subset (real trainings).
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dltop.probe.encoding import encode_record
from rulekit import Run, lr_constant
from samepaths import opened_huge, replayed, trickled


def _spike(i: int, loss: float) -> float:
    return loss * 40 if i == 500 else loss


def _nan(i: int, loss: float) -> float:
    return math.nan if i >= 700 else loss


def _explode(i: int, gn: float) -> float:
    return gn * 1e4 if 600 <= i < 640 else gn


def _diverge(i: int, loss: float) -> float:
    return loss * (1.02 ** max(0, i - 400))


RUNS = {
    "healthy": Run(steps=1500, seed=1),
    "healthy_noisy_evals": Run(steps=1500, seed=2, noise=0.5, eval_every=200),
    "loss_spike": Run(steps=1000, seed=3, loss_at=_spike),
    "nan": Run(steps=900, seed=4, loss_at=_nan, end="exception"),
    "grad_explosion": Run(steps=1000, seed=5, gn_at=_explode),
    "divergence": Run(steps=800, seed=6, loss_at=_diverge, lr=lr_constant(0.5)),
    "plateau": Run(steps=2000, seed=7, tau=1e9, noise=0.05),
    "data_bound": Run(steps=1000, seed=8, data_share=0.6),
    "vanished": Run(steps=900, seed=9, end=None),
}


def _write(run: Run, path: Path) -> Path:
    records = list(run.records())
    if run.end is None:  # vanished: its process on this host is gone, as a viewer can see
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        records[0] = {**records[0], "pid": proc.pid, "host": socket.gethostname()}
    path.write_bytes(b"".join(encode_record(r) for r in records))
    return path


@pytest.mark.parametrize("name", sorted(RUNS))
def test_synthetic_runs_get_the_same_answer_every_way(name: str, tmp_path: Path) -> None:
    log = _write(RUNS[name], tmp_path / f"{name}.jsonl")
    want = replayed(log)
    if name != "healthy":
        assert want or name in ("healthy_noisy_evals", "vanished"), "the fault is diagnosed"
    assert trickled(log, tmp_path, seed=len(name)) == want, "live (trickled) differs"
    assert opened_huge(log) == want, "tail-first backfill differs"
    assert opened_huge(log, rules_worker=True) == want, "rules backfilled in a child differ"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fault_suite_logs_get_the_same_answer_every_way(
    quick_fault_logs: list[Path], tmp_path: Path
) -> None:
    assert len(quick_fault_logs) >= 7
    differ = []
    for i, log in enumerate(quick_fault_logs):
        want = replayed(log)
        for how, got in (("trickled", trickled(log, tmp_path, seed=i)), ("huge", opened_huge(log))):
            if got != want:
                differ.append(f"{log.name} {how}: {got} != replay {want}")
    assert not differ, "\n".join(differ)
