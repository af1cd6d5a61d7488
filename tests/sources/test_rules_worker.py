"""A huge log's rules backfilled in a child process (``tui/core/sources/rules_worker.py``): the same
alerts and facts as the rules run by the viewer itself, also while the log grows; a child
that fails leaves the work to the viewer; a viewer that stops takes its child with it.

Real parts: real log files, a real FileSource on its reader thread, a real child
interpreter reading the file through the descriptor it was passed.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.encoding import encode_record
from dltop.tui.core.rules.config import Config
from dltop.tui.core.sources import rules_worker, workers
from dltop.tui.core.sources.filesource import FileSource
from dltop.tui.core.store.run import RunModel
from rulekit import Run
from samepaths import child_results, failing_python, replayed
from waiting import wait_for


def _nan(i: int, loss: float) -> float:
    return math.nan if i >= 2500 else loss


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    run = Run(steps=3000, seed=11, loss_at=_nan, data_share=0.5, eval_every=250)
    path.write_bytes(b"".join(encode_record(r) for r in run.records()))
    return path


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "cpus", lambda: 2)  # the child runs on any machine here


def _everything(model: RunModel) -> str:
    alerts = [a.to_json() for a in model.alerts()]
    facts = {k: repr(v) for k, v in sorted(model.facts().items())}
    return json.dumps([alerts, facts, model.engine_error], sort_keys=True, default=repr)


def _opened(log: Path, worker: bool, follow: bool = False) -> tuple[FileSource, RunModel]:
    size = log.stat().st_size
    model = RunModel("huge", Config())
    src = FileSource(
        log, model, follow=follow, poll_interval=0.01, tail_first=size // 4, tail_bytes=size // 8
    )
    src.rules_worker_min = 0 if worker else None
    return src, model


def test_the_childs_engine_gives_the_viewers_answers(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = child_results(monkeypatch)
    src, here = _opened(log, worker=False)
    src.run()
    src, there = _opened(log, worker=True)
    src.run()
    assert len(results) == 1 and results[0] is not None  # the child's engine was adopted
    assert _everything(there) == _everything(here)
    assert {"nan_loss", "data_bound"} <= {a.id for a in there.alerts()}


def test_a_failing_child_leaves_the_rules_to_the_viewer(
    log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, here = _opened(log, worker=False)
    src.run()
    results = child_results(monkeypatch)
    monkeypatch.setattr(sys, "executable", failing_python(log.parent))  # takes the job, exits 1
    src, there = _opened(log, worker=True)
    src.run()
    assert results == [None]
    assert _everything(there) == _everything(here)


def test_records_appended_during_the_backfill_are_judged_once(log: Path, tmp_path: Path) -> None:
    """A live huge log: the child takes the lines up to where the preview ended, the viewer
    the ones after, and the records that arrive meanwhile wait for the engine's adoption."""
    data = log.read_bytes()
    cut = data.index(b"\n", len(data) * 2 // 3) + 1
    live = tmp_path / "live.jsonl"
    live.write_bytes(data[:cut])
    src, model = _opened(live, worker=True, follow=True)
    src.start()
    stop = threading.Event()

    def append() -> None:
        rest = data[cut:]
        for i in range(0, len(rest), 4096):
            if stop.is_set():
                return
            with open(live, "ab") as f:
                f.write(rest[i : i + 4096])
            time.sleep(0.002)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        writer.join(60)
        assert wait_for(
            lambda: src.offset >= len(data) and model.diagnosing is None and model.loading is None,
            timeout=60,
        )
        time.sleep(0.3)  # the last records reach the engine
        want = replayed(log)
        got = [(a.id, a.severity, a.step, a.last_step) for a in model.alerts()]
        assert got == want
    finally:
        stop.set()
        src.stop()


def test_a_stopped_viewer_takes_its_child_with_it(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The viewer quits while its child still works (here a child that would take a
    minute): the child is killed, not left behind."""
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow))
    started: list[rules_worker.RulesJob] = []
    real = rules_worker.RulesJob.start

    def noting(fd: int, upto: int, config: Any) -> rules_worker.RulesJob | None:
        job = real(fd, upto, config)
        if job is not None:
            started.append(job)
        return job

    monkeypatch.setattr(rules_worker.RulesJob, "start", staticmethod(noting))
    src, model = _opened(log, worker=True, follow=True)
    src.start()
    assert wait_for(lambda: bool(started) and model.diagnosing is not None, timeout=30)
    proc = started[0].proc
    assert proc.poll() is None  # still working when the viewer stops
    src.stop()
    assert wait_for(lambda: proc.poll() is not None, timeout=10), "the child outlived the viewer"


def test_the_child_says_how_far_it_got(log: Path) -> None:
    """Its progress lines give the viewer's 'diagnosing N %'; a garbled line is skipped."""
    fd = os.open(log, os.O_RDONLY)
    try:
        job = rules_worker.RulesJob.start(fd, log.stat().st_size, Config())
        assert job is not None
        job._progress(b"12")
        job._progress(b"3\nnot a number\n")
        assert job.reached == 123
        assert wait_for(lambda: job.poll(0.1), timeout=60)
        got = job.result()
        assert got is not None and got[1] is None and got[0] is not None
    finally:
        os.close(fd)


def test_children_are_capped_at_the_spare_cpus(log: Path) -> None:
    """A job's folder opens a source per rank: 64 huge rank logs must not start 64
    interpreters. With 2 CPUs one child runs at a time; the next source runs its rules
    itself, and a slot is free again once a child has ended."""
    fd = os.open(log, os.O_RDONLY)
    try:
        first = rules_worker.RulesJob.start(fd, 100, Config())
        assert first is not None
        assert rules_worker.RulesJob.start(fd, 100, Config()) is None  # no spare CPU left
        first.kill()
        again = rules_worker.RulesJob.start(fd, 100, Config())
        assert again is not None
        assert wait_for(lambda: again.poll(0.1), timeout=60)  # ended: its slot is given back
        last = rules_worker.RulesJob.start(fd, 100, Config())
        assert last is not None
        last.kill()
    finally:
        os.close(fd)
