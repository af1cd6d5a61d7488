"""RunModel: store + rules engine + counters under one lock; resets; pid liveness."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time

import pytest
from dltop.tui.core.store import run as run_mod
from dltop.tui.core.store.run import RunModel


def _meta(**kw: object) -> dict:
    return {"kind": "meta", "v": 1, "run_id": "r", "host": socket.gethostname(), "pid": os.getpid(),
            "t": time.time(), **kw}  # fmt: skip


def _steps(n: int, start: int = 0, **kw: object) -> list[dict]:
    return [
        {"kind": "step", "step": i, "t": time.time(), "loss": 1.0, **kw}
        for i in range(start, start + n)
    ]


def test_ingest_feeds_store_and_engine_and_bumps_version() -> None:
    m = RunModel("r")
    v0 = m.version
    m.ingest([_meta(), *_steps(10)], malformed=2)
    assert m.version > v0 and m.store.version == m.version
    assert m.records == 11 and m.malformed == 2 and m.store.steps == 10
    assert m.meta["run_id"] == "r"
    if m.engine is not None:
        assert m.engine.steps == 10
        assert isinstance(m.alerts(), list) and "steps" in m.facts()
    v1 = m.version
    m.ingest([], malformed=2)  # nothing new
    assert m.version == v1
    m.ingest([], malformed=3)  # only the skip count changed: the UI shows it, so bump
    assert m.version > v1 and m.malformed == 3


def test_nan_loss_reaches_the_rules_engine() -> None:
    m = RunModel("r")
    m.ingest([_meta(), *_steps(30), *_steps(1, start=30, loss=math.nan)])
    if m.engine is None:
        pytest.skip("rules engine not importable yet")
    assert "nan_loss" in {a.id for a in m.alerts()}


def test_reset_starts_a_new_run_and_is_visible() -> None:
    m = RunModel("r")
    m.ingest([_meta(), *_steps(5)], malformed=1)
    old_store, old_engine, v, gen = m.store, m.engine, m.version, m.generation
    m.reset("truncated")
    assert m.store is not old_store and m.store.steps == 0
    assert m.engine is None or m.engine is not old_engine
    assert m.resets == 1 and m.restarted and m.reset_reason == "truncated"
    assert m.records == 0 and m.malformed == 0
    assert m.version > v and m.generation == gen + 1
    m.ingest(_steps(2))
    assert m.store.steps == 2 and m.store.version == m.version


def test_preview_then_adopt_swaps_the_whole_run_in() -> None:
    m = RunModel("r")
    full = [_meta(), *_steps(100)]
    m.ingest_preview([full[0], *full[-10:]])
    assert m.loading == 0.0 and m.store.first_step == 90 and m.store.steps == 10
    v_preview = m.version
    staged = m.staging()
    staged.ingest(full)
    m.set_loading(0.5)
    assert m.loading == 0.5 and m.store.steps == 10  # the UI still sees the preview
    m.adopt(staged, malformed=4)
    assert m.loading is None
    assert m.store.steps == 100 and m.records == 101 and m.malformed == 4
    assert m.version > v_preview
    assert set(m.store.changed(v_preview)) >= {"loss", "t"}  # everything redraws


def test_a_failing_rule_does_not_stop_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def feed_many(self, records: list) -> None:
            raise ZeroDivisionError("bug in a rule")

    monkeypatch.setattr(run_mod, "make_engine", lambda config=None: (Broken(), None))
    m = RunModel("r")
    m.ingest(_steps(3))
    m.ingest(_steps(3, start=3))
    assert m.store.steps == 6 and "ZeroDivisionError" in m.engine_error


def test_pid_alive_for_local_runs_only() -> None:
    m = RunModel("r")
    assert m.pid_alive() is None  # no meta yet
    m.ingest([_meta()])
    assert m.pid_alive() is True

    other = RunModel("o")
    other.ingest([_meta(host="some-other-host")])
    assert other.pid_alive() is None  # cannot tell for a remote run

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = RunModel("d")
    dead.ingest([_meta(pid=proc.pid)])
    assert dead.pid_alive() is False

    reused = RunModel("u")
    reused.ingest([_meta(t=time.time() - 10 * 365 * 86400)])  # our pid, but we started later
    assert reused.pid_alive() is False


def test_status_delegates_to_the_engine_with_pid_liveness() -> None:
    m = RunModel("r")
    m.ingest([_meta(), *_steps(5)])
    state = m.status(time.time())
    if state is None:
        pytest.skip("rules engine or status module not importable yet")
    assert state.status in ("running", "stalled", "finished", "crashed", "unknown")
    m.ingest([{"kind": "event", "type": "exit", "status": "ok", "t": time.time()}])
    assert m.status(time.time()).status == "finished"


def test_rules_backfill_queues_live_records_for_the_new_engine() -> None:
    m = RunModel("r")
    if m.engine is None:
        pytest.skip("rules engine not importable yet")
    history = [_meta(), *_steps(50)]
    staged = m.staging(rules=False)
    staged.ingest(history)
    m.adopt(staged, malformed=0)
    placeholder = m.engine
    m.begin_rules_backfill()
    m.ingest(_steps(5, start=50))  # live, while the rules re-read the history
    assert m.store.steps == 55 and placeholder.steps == 0
    engine, err = run_mod.make_engine()
    engine.feed_many(history)
    v = m.version
    m.adopt_engine(engine, err)
    assert m.engine is engine and engine.steps == 55 and engine.last_step == 54
    assert m.diagnosing is None and m.version > v
    m.ingest(_steps(1, start=55))  # and from now on, directly
    assert engine.steps == 56


def test_every_engine_of_the_model_uses_its_config(tmp_path) -> None:
    """`--config`/`--set` thresholds reach the first engine, the one after a reset, the
    staged and the backfilled engines of a huge log, and the app's model."""
    from dltop.tui.core.rules import Config
    from dltop.tui.core.sources.filesource import FileSource

    cfg = Config.load(overrides={"stall.silent_s": 1234})
    m = RunModel("r", config=cfg)
    if m.engine is None:
        pytest.skip("rules engine not importable yet")
    assert m.engine.config is cfg
    m.reset("truncated")
    assert m.engine.config is cfg
    assert m.staging(rules=True).engine.config is cfg
    assert RunModel("d").engine.config is not cfg  # the defaults without one

    log = tmp_path / "big.jsonl"
    with open(log, "w") as f:
        f.write(json.dumps(_meta()) + "\n")
        f.writelines(json.dumps(r) + "\n" for r in _steps(3000))
    big = RunModel("big", config=cfg)
    FileSource(log, big, follow=False, tail_first=10_000, tail_bytes=8_000).run()
    assert big.store.steps == 3000 and big.engine.steps == 3000  # the backfilled engine
    assert big.engine.config is cfg

    from dltop.tui.app.app import DltopApp

    app = DltopApp(str(log), follow=False, config=cfg)
    assert app.model.config is cfg and app.model.engine.config is cfg


def test_a_run_seen_crashed_without_an_exit_record_has_its_last_steps_judged() -> None:
    """SIGKILL writes no exit record: once the viewer sees the process gone, the last
    partial block of steps is judged, as `dltop check` does at the end of the file."""
    from rulekit import Run

    def climb(i: int, x: float) -> float:  # the loss diverges over the last 13 steps
        return x * 2.0 ** (i - 990) if i >= 990 else x

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    records = list(Run(steps=1003, end=None, loss_at=climb).records())
    t0 = records[0]["t"]
    records[0] = {**records[0], "pid": proc.pid, "host": socket.gethostname(), "t": time.time()}
    m = RunModel("killed")
    m.settle_s = 0.2
    m.ingest(records)
    assert not [a for a in m.alerts() if a.id == "divergence"]
    version = m.version
    now = time.time() + records[-1]["t"] - t0
    assert m.status(now).status == "crashed"
    # records came a moment ago: the log may still be growing (a reader going through
    # it, a copy being written), so the last block waits for the settle time
    assert not [a for a in m.alerts() if a.id == "divergence"]
    time.sleep(0.25)
    state = m.status(now)
    assert state.status == "crashed"
    assert [a.severity for a in m.alerts() if a.id == "divergence"] == ["critical"]
    assert m.version > version  # the UI redraws the new alert
    m.status(time.time())  # judged once: no second pass over the same block
    assert len([a for a in m.alerts() if a.id == "divergence"]) == 1


def test_the_charts_swap_in_and_the_rules_backfill_begins_in_one_step() -> None:
    """A reader between the two saw "loading" and "diagnosing" both off and took the
    preview's alerts for the run's (test_same_answers failed on it under load)."""
    m = RunModel("r")
    staged = m.staging(rules=False)
    staged.ingest([_meta(), *_steps(20)])
    m.set_loading(0.5)
    m.adopt(staged, malformed=0, rules_follow=True)
    assert m.loading is None and m.diagnosing == 0.0
    m.ingest(_steps(3, start=20))  # live meanwhile: queued for the engine being backfilled
    engine, err = run_mod.make_engine()
    m.adopt_engine(engine, err)
    assert m.diagnosing is None and engine is not None and engine.steps == 3
