"""``dltop report`` on one big log: its rules in a child process while its store is built
here (``tui/report_parallel.py``). The report must not change: the same alerts, facts,
status, notes and chart series as with everything in one process, also for a log whose
grad norm is joined from its own shards, one with corrupt lines and one whose last line
is cut; and a child that fails leaves its part to this process.

Real parts: real log files, a real child interpreter reading them.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui import check_cmd
from dltop.tui.core.rules import Config
from dltop.tui.core.sources import rules_worker, workers
from rulekit import Run
from samepaths import child_results, failing_python


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "cpus", lambda: 2)  # the child runs on any machine here


def _nan(i: int, loss: float) -> float:
    return math.nan if 2500 <= i < 2510 else loss


def _records(sharded: bool) -> list[dict[str, Any]]:
    run = Run(steps=4000, seed=5, loss_at=_nan, data_share=0.5, eval_every=250)
    recs = list(run.records())
    if sharded:  # one rank's file of an FSDP job: grad_sq_local, no grad_norm
        for r in recs:
            if r.get("kind") == "step" and isinstance(r.get("grad_norm"), float):
                r["grad_sq_local"] = r.pop("grad_norm") ** 2
    return recs


def _write(path: Path, recs: list[dict[str, Any]], junk: bool, cut: bool) -> Path:
    lines = [encode_record(r) for r in recs]
    if junk:
        lines.insert(len(lines) // 3, b'{"kind": "step", "step": \n')
        lines.insert(len(lines) // 2, b"\x00\xffnot json at all\n")
    data = b"".join(lines)
    if cut:
        data += b'{"kind": "step", "step": 99999, "loss": 1.'  # the writer died mid-line
    path.write_bytes(data)
    return path


def _report(path: Path) -> str:
    """Everything `dltop report` takes from the check, as text to compare."""
    results, skipped = check_cmd.collect(str(path), Config(), with_store=True)
    out: list[Any] = [skipped]
    for r in results:
        store = r.store
        assert store is not None
        series = {
            name: [list(map(repr, s.ys)), list(s.xs())]
            for name in store.names()
            if (s := store.series(name)) is not None
        }
        out.append(
            [
                [a.to_json() for a in r.engine.alerts()],
                {k: repr(v) for k, v in sorted(r.engine.facts().items())},
                r.state.status,
                r.state.reason,
                r.skipped,
                r.notes,
                series,
                len(store.events),
            ]
        )
    return json.dumps(out, sort_keys=True, default=repr)


def _same(got: str, want: str) -> None:
    """Equal, or a failure showing where they part (pytest's own diff of two long strings
    takes minutes)."""
    if got != want:
        at = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        pytest.fail(
            f"differ at {at}: {got[at - 150 : at + 150]!r} != {want[at - 150 : at + 150]!r}"
        )


@pytest.mark.parametrize(
    ("sharded", "junk", "cut"),
    [(False, False, False), (True, False, False), (False, True, True)],
    ids=["plain", "sharded", "corrupt-and-cut"],
)
def test_the_report_is_the_same_with_the_rules_in_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool, junk: bool, cut: bool
) -> None:
    log = _write(tmp_path / "run.jsonl", _records(sharded), junk, cut)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", 1 << 60)
    alone = _report(log)
    got = child_results(monkeypatch)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", 1)
    beside = _report(log)
    assert len(got) == 1 and got[0] is not None and got[0][1] is None  # the child's engine
    _same(beside, alone)
    assert '"nan_loss"' in alone  # the comparison has alerts to compare
    if sharded:
        assert "joined from 1 ranks" in alone


def test_a_failed_child_leaves_the_rules_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _write(tmp_path / "run.jsonl", _records(True), junk=True, cut=False)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", 1 << 60)
    alone = _report(log)
    got = child_results(monkeypatch)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", 1)
    monkeypatch.setattr(sys, "executable", failing_python(tmp_path))  # takes the job, exits 1
    _same(_report(log), alone)
    assert got == [None]


def test_a_job_or_a_small_log_keeps_everything_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child is for one log of at least MIN_BYTES: a job's ranks have workers of their
    own (check_cmd), and `dltop check` builds no store."""
    started: list[int] = []
    real = rules_worker.RulesJob.start

    def noting(fd: int, upto: int, config: Any, join: bool = False) -> Any:
        started.append(upto)
        return real(fd, upto, config, join)

    monkeypatch.setattr(rules_worker.RulesJob, "start", staticmethod(noting))
    log = _write(tmp_path / "run.jsonl", _records(False), junk=False, cut=False)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", log.stat().st_size + 1)
    check_cmd.collect(str(log), Config(), with_store=True)
    monkeypatch.setattr(rules_worker, "MIN_BYTES", 1)
    check_cmd.collect(str(log), Config())  # no store: nothing to do beside the rules
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        _write(job / f"rank{rank}.jsonl", _records(False), junk=False, cut=False)
    check_cmd.collect(str(job), Config(), with_store=True)
    assert started == []
    check_cmd.collect(str(log), Config(), with_store=True)
    assert started == [log.stat().st_size]  # the whole file: it ends with a line end
