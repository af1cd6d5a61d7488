"""The run's status and its verdict agree on how it ended, for every way a log can end.

The status (``diagnosis.status`` over ``rules.ending``) and the crash rule's alert (what
the verdict names) used to disagree at the edges: a SIGTERM a handler took, then more
steps, read "running" with the verdict "killed at step 99"; a KeyboardInterrupt then an
exit that says ``signal`` read "interrupted by the user" beside an active "Run terminated
by a signal"; an exception the run went on after, then an exit record saying exception,
read "crashed" while `dltop check` exited 0 (no alert above information). Each event that
can end a run, with and without steps after it, under each exit record (or none).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui import check_cmd
from dltop.tui.check_output import primary, verdict_of
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.diagnosis.verdict import verdict
from dltop.tui.core.rules import Config
from dltop.tui.core.rules.alerts import SEVERITY_RANK
from rulekit import Run, run_engine

EVENTS: dict[str, dict[str, Any]] = {
    "sigterm": {"type": "signal", "signal": "SIGTERM"},
    "sighup": {"type": "signal", "signal": "SIGHUP"},
    "sigint": {"type": "signal", "signal": "SIGINT"},
    "exception": {"type": "exception", "exc_type": "ValueError", "message": "bad"},
    "ctrl_c": {"type": "exception", "exc_type": "KeyboardInterrupt", "interrupted": True},
    "oom": {
        "type": "oom",
        "exc_type": "torch.OutOfMemoryError",
        "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
    },
    "exit_0": {"type": "exception", "exc_type": "SystemExit", "message": "0"},
}
ENDS = (None, "ok", "signal", "exception", "interrupted")
FAILED_WORDS = ("crashed", "killed", "out of")


@pytest.mark.parametrize(("event", "after", "end"), list(itertools.product(EVENTS, (0, 20), ENDS)))
def test_the_status_and_the_verdict_agree(event: str, after: int, end: str | None) -> None:
    rec = {"kind": "event", "t": 0.0, **EVENTS[event]}
    eng = run_engine(Run(steps=100 + after, extra_records={99: [rec]}, end=end))
    state = run_state(eng)
    said = verdict(eng, state)
    failing = [
        a
        for a in eng.alerts()
        if a.id in ("crash", "oom") and a.active and SEVERITY_RANK[a.severity] >= 1
    ]
    if state.status in ("running", "finished"):
        assert not failing, (state.status, failing)
        assert not said.startswith(FAILED_WORDS), (state.status, said)
    else:  # and `dltop check`, whose exit code is the worst alert's, does not exit 0
        assert state.status == "crashed"
        assert said.startswith(FAILED_WORDS), said
        assert failing, (state.reason, said)


def _rank_log(rank: int, event: str, after: int, end: str | None) -> list[dict[str, Any]]:
    """Rank 1 ends by ``event`` at step 199 (``after`` steps more, then ``end``); rank 0
    finishes normally."""
    t0 = 1_700_000_000.0
    out: list[dict[str, Any]] = [
        {"kind": "meta", "v": 1, "run_id": f"job.rank{rank}", "t": t0, "host": "h",
         "pid": 100 + rank, "rank": rank, "world_size": 2},
    ]  # fmt: skip
    n = 200 + (after if rank == 1 else 0)
    for i in range(n):
        out.append(
            {"kind": "step", "step": i, "t": t0 + i * 0.05 + rank * 1e-3, "lr": 1e-3,
             "loss": 2.0 * math.exp(-i / 100) + 0.1, "step_time": 0.05, "data_time": 0.001}
        )  # fmt: skip
        if rank == 1 and i == 199:
            out.append({"kind": "event", "t": t0 + i * 0.05 + 0.01, **EVENTS[event]})
    status = end if rank == 1 else "ok"
    if status is not None:
        out.append({"kind": "event", "type": "exit", "t": t0 + n * 0.05, "status": status})
    return out


@pytest.mark.parametrize(("event", "after", "end"), list(itertools.product(EVENTS, (0, 20), ENDS)))
def test_a_jobs_status_verdict_and_exit_code_agree(
    tmp_path: Path, event: str, after: int, end: str | None
) -> None:
    """The same endings on one rank of a two-rank job, through ``dltop check``'s own
    collect, verdict and exit code (the worst alert's)."""
    for rank in (0, 1):
        with open(tmp_path / f"rank{rank}.jsonl", "wb") as f:
            for rec in _rank_log(rank, event, after, end):
                f.write(encode_record(rec))
    results, _ = check_cmd.collect(str(tmp_path), Config(), jobs=1)
    status = primary(results).state.status
    said = verdict_of(results)
    worst = max((SEVERITY_RANK[a.severity] for r in results for a in r.engine.alerts()), default=0)
    assert (status == "crashed") == said.startswith(FAILED_WORDS) == (worst >= 1), (status, said)
