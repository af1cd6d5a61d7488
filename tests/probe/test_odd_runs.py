"""Right words for odd runs: rewinds, restarts, two writers, clock jumps, a constant loss.

Each of these once gave a confident wrong diagnosis (a critical divergence for a
checkpoint reload or for two runs sharing a path, a critical stall for an NTP jump,
"oscillation, range 0 .. 0" for a loss of exactly zero).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.decoding import read_records
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.rules import Config, RuleEngine
from rulekit import Run, alerts_of, noisy, run_engine


def _engine(records: list[dict[str, Any]]) -> RuleEngine:
    eng = RuleEngine(Config.load())
    eng.feed_many(records)
    eng.finish()
    return eng


def _shift(records: list[dict[str, Any]], seconds: float) -> None:
    for r in records:
        if "t" in r:
            r["t"] += seconds


def test_a_constant_loss_is_not_oscillation() -> None:
    for level in (0.0, 1.5):
        eng = run_engine(Run(loss_at=lambda i, x, v=level: v, noise=0.0, end="ok"))
        assert alerts_of(eng, "oscillation") == [], level


def _rewound(back_to: int) -> list[dict[str, Any]]:
    """600 steps, then the job reloads the checkpoint of step ``back_to`` and trains on."""
    first = list(Run(steps=600, seed=1).records())
    again = [
        r
        for r in Run(steps=900, seed=2, end="ok").records()
        if r["kind"] != "meta" and r.get("step", back_to) >= back_to
    ]
    t_end = max(r["t"] for r in first if "t" in r)
    _shift(again, t_end + 5 - min(r["t"] for r in again if "t" in r))
    return first + again


def test_a_rewind_to_a_checkpoint_is_not_divergence() -> None:
    for back_to in (50, 100, 200):
        eng = _engine(_rewound(back_to))
        assert noisy(eng) == [], (back_to, noisy(eng))
        assert eng.segments.starts and eng.segments.starts[0][0] == back_to


def test_alerts_before_a_rewind_stay_and_the_nan_facts_too() -> None:
    records = list(Run(steps=300, loss_at=lambda i, x: x if i < 250 else float("nan")).records())
    records += [r for r in Run(steps=600, seed=3, end="ok").records() if r["kind"] != "meta"]
    eng = _engine(records)
    (nan,) = alerts_of(eng, "nan_loss")
    assert nan.step == 250 and nan.severity == "critical"
    assert eng.first_nonfinite_step == 250, "the checklist of the NaN still reads its facts"
    assert run_state(eng, now=time.time(), pid_alive=False).status == "finished"


def test_a_restart_appended_to_the_log_is_a_new_segment_not_a_stall() -> None:
    first = list(Run(steps=400, end="exception").records())
    second = list(Run(steps=400, seed=5, end="ok").records())
    second[0] = {**second[0], "pid": 9999}
    _shift(second, max(r["t"] for r in first if "t" in r) + 1800 - second[0]["t"])  # 30 min later
    eng = _engine(first + second)
    assert alerts_of(eng, "stall") == [] and alerts_of(eng, "mixed_runs") == []
    assert [why for _, why in eng.segments.starts] == ["a new run (meta record) in the same file"]
    assert run_state(eng, now=time.time(), pid_alive=False).status == "finished"


def _jumped(run: Run, at: int, seconds: float) -> list[dict[str, Any]]:
    """The wall clock jumps forward by ``seconds`` right after step ``at - 1``."""
    records = list(run.records())
    k = next(i for i, r in enumerate(records) if r["kind"] == "step" and r["step"] == at)
    before = next(i for i in range(k - 1, -1, -1) if records[i]["kind"] == "step")
    _shift(records[before + 1 :], seconds)
    return records


def test_a_forward_jump_of_the_clock_is_not_a_stall() -> None:
    eng = _engine(_jumped(Run(steps=600, end="ok"), 300, 3600.0))
    assert alerts_of(eng, "stall") == [], noisy(eng)


def test_a_clock_jump_seen_live_is_withdrawn_when_the_next_step_comes() -> None:
    records = _jumped(Run(steps=600, end="ok"), 300, 3600.0)
    k = next(i for i, r in enumerate(records) if r["kind"] == "step" and r["step"] == 300)
    t_prev = max(r["t"] for r in records[:k] if r["kind"] == "step")
    # heartbeats at the new wall clock before step 300 arrives: a live viewer sees a stall
    hbs = [{"kind": "heartbeat", "t": t_prev + 3600 + i * 0.01, "step": 299} for i in range(3)]
    eng = RuleEngine(Config.load())
    eng.feed_many(records[:k] + hbs)
    assert alerts_of(eng, "stall"), "from the heartbeats alone it looks like a stall"
    eng.feed_many(records[k:])
    eng.finish()
    assert alerts_of(eng, "stall") == [], noisy(eng)


def test_a_real_stall_is_still_a_stall() -> None:
    records = list(Run(steps=600, end="ok").records())
    for r in records:
        if r["kind"] == "step" and r["step"] >= 300:
            r["t"] += 600
            if r["step"] == 300:
                r["step_time"] += 600  # the probe's monotonic step time saw the wait too
    (stall,) = alerts_of(_engine(records), "stall")
    assert stall.severity == "warning" and stall.step == 299  # resumed: see the policy


TWO_WRITERS = """
import math, random, sys, time
from dltop.probe import Probe
seed = int(sys.argv[2])
rng = random.Random(seed)
with Probe(path=sys.argv[1], socket=False, system=False) as probe:
    for i in range(300):
        level = 3.0 if seed else 0.05  # two very different trainings
        probe.step(loss=level * math.exp(-i / 100) * (1 + 0.05 * rng.random()))
        time.sleep(0.005)
"""


def test_two_probes_on_one_path_are_named_not_called_divergence(tmp_path: Path) -> None:
    log = tmp_path / "shared.jsonl"
    procs = [
        subprocess.Popen([sys.executable, "-c", TWO_WRITERS, str(log), str(seed)])
        for seed in (0, 1)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    records, _ = read_records(str(log))
    assert sum(r["kind"] == "meta" for r in records) == 2
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TERM": "dumb"},
    )  # fmt: skip
    out = json.loads(done.stdout)
    ids = [a["id"] for a in out["alerts"]]
    assert "mixed_runs" in ids and "divergence" not in ids and "oscillation" not in ids, ids
    assert done.returncode == 1
    (mixed,) = [a for a in out["alerts"] if a["id"] == "mixed_runs"]
    assert mixed["evidence"]["runs"] == 2 and len(set(mixed["evidence"]["pids"])) == 2
    assert mixed["checklist"], "its checklist says what to do"


LOCKSTEP = """
import math, sys, time
from dltop.probe import Probe
start, offset, level = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
with Probe(path=sys.argv[1], socket=False, system=False) as probe:
    for i in range(40):  # a step every 0.2 s on a grid both writers share
        time.sleep(max(0.0, start + 0.2 * i + offset - time.time()))
        probe.step(loss=level * math.exp(-i / 30) * (1.1 if i % 2 else 0.9))
"""


@pytest.mark.slow
def test_two_runs_writing_the_same_steps_in_lockstep_are_mixed_runs(tmp_path: Path) -> None:
    """Issue 29 (10): two trainings at different loss levels, stepping at the same pace
    on one path, write step 0, step 0, step 1, step 1... Their steps never go back, so
    the file read as one loss swinging between two levels: `oscillation`. Real probes,
    each step flushed (50 ms) before the other writer's."""
    log = tmp_path / "shared.jsonl"
    start = time.time() + 1.0
    procs = [
        subprocess.Popen([sys.executable, "-c", LOCKSTEP, str(log), str(start), off, level])
        for off, level in (("0.0", "3.0"), ("0.1", "0.05"))
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    records, _ = read_records(str(log))
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert sorted(steps) == sorted(list(range(40)) * 2)
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TERM": "dumb"},
    )  # fmt: skip
    out = json.loads(done.stdout)
    ids = [a["id"] for a in out["alerts"]]
    assert "mixed_runs" in ids and "oscillation" not in ids, ids
    (mixed,) = [a for a in out["alerts"] if a["id"] == "mixed_runs"]
    assert mixed["evidence"]["runs"] == 2 and len(set(mixed["evidence"]["pids"])) == 2
    # the same records without their metas (a log's head lost, or a writer of another
    # kind): the step numbers that come twice in a row still name it
    eng = _engine([r for r in records if r["kind"] != "meta"])
    (alone,) = alerts_of(eng, "mixed_runs")
    assert alone.evidence["repeated_steps"] is True and alone.evidence["runs"] == 2
    assert alerts_of(eng, "oscillation") == []


def test_one_repeated_step_is_no_second_writer() -> None:
    """A step logged twice once (a retry) is not two runs: repeats must keep coming."""
    recs = list(Run(end="ok").records())
    i = next(k for k, r in enumerate(recs) if r.get("kind") == "step" and r["step"] == 100)
    recs.insert(i + 1, dict(recs[i]))
    assert alerts_of(_engine(recs), "mixed_runs") == []


SLOW_PROBE = """
import sys, time
from dltop.probe import Probe
with Probe(path=sys.argv[1], socket=False, system=False, heartbeat_every=0.2) as probe:
    for i in range(int(sys.argv[2])):
        probe.step(loss=1.0 / (i + 1))
        time.sleep(0.01)
"""


def test_a_log_deleted_mid_run_is_said_and_still_read(tmp_path: Path) -> None:
    from dltop.tui.core.present import view_model as vm
    from dltop.tui.core.sources.source_open import open_source
    from dltop.tui.core.store.run import RunModel
    from waiting import wait_for

    log = tmp_path / "run.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_PROBE, str(log), "400"])
    try:
        assert wait_for(log.exists, timeout=60)
        model = RunModel(log.name)
        src = open_source(log, model, None, poll_interval=0.02).start()
        assert wait_for(lambda: model.store.steps >= 20, timeout=60)
        assert not model.log_deleted
        log.unlink()  # someone cleans up the runs folder while the job trains
        assert wait_for(lambda: model.log_deleted, timeout=30)
        info = vm.header_info(model, time.time(), vm.ViewState(), follow=True)
        assert "log file deleted" in info.mode
        assert proc.wait(timeout=120) == 0
        assert wait_for(lambda: model.store.steps == 400, timeout=30), "the rest is still read"
    finally:
        proc.kill()
        src.stop()


FILLER = """
import sys
from dltop.probe import Probe
with Probe(path=sys.argv[1], socket=False, system=False) as probe:
    for i in range(int(sys.argv[2])):
        probe.step(loss=1.0 / (i + 1), note_padding="x" * 200)
print("trained", flush=True)
"""


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 256 KiB tmpfs: a real full disk (needs mount rights: root in CI; else skipped)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()[:100]}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_log_cut_by_a_full_disk_is_named_not_called_a_kill(tiny_disk: Path) -> None:
    log = tiny_disk / "run.jsonl"
    train = subprocess.run(
        [sys.executable, "-c", FILLER, str(log), "5000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert train.returncode == 0 and "trained" in train.stdout, "training went on"
    assert "dltop: warning" in train.stderr, "the probe said it could not write"
    records, _ = read_records(str(log))
    assert records[-1]["kind"] == "step", "no exit record reached the full disk"
    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = json.loads(done.stdout)
    assert out["status"] == "unknown", out["reason"]
    assert "disk is full" in out["reason"] and "SIGKILL" not in out["reason"]


SLOW_TRAINER = """
import sys, time
from dltop.probe import Probe
with Probe(path=sys.argv[1], socket=False, system=False) as probe:
    for i in range(int(sys.argv[2])):
        probe.step(loss=1.0 / (i + 1))
        time.sleep(0.002)
print("trained", flush=True)
"""


@pytest.fixture
def freezable_dir(tmp_path: Path):
    """A folder and a function that makes it read-only in place (a read-only bind mount over
    itself: as root, chmod would not stop a write). Needs mount rights, else skipped."""
    d = tmp_path / "runs"
    d.mkdir()
    mounted: list[bool] = []

    def freeze() -> None:
        for cmd in (
            ["mount", "--bind", str(d), str(d)],
            ["mount", "-o", "remount,bind,ro", str(d)],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()[:100]}")
            mounted.append(True)

    yield d, freeze
    if mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_folder_made_read_only_mid_run(freezable_dir) -> None:
    """The log stays complete (it was open), the viewer's ticks say they were not saved, a new
    run there warns and trains on; nothing raises."""
    folder, freeze = freezable_dir
    log = folder / "run.jsonl"
    train = subprocess.Popen(
        [sys.executable, "-c", SLOW_TRAINER, str(log), "1500"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (log.exists() and b'"step"' in log.read_bytes()):
        assert time.monotonic() < deadline and train.poll() is None, "no step written"
        time.sleep(0.02)
    freeze()
    with pytest.raises(OSError):
        (folder / "probe-write").write_text("x")  # it really is read-only now
    out, err = train.communicate(timeout=120)
    assert train.returncode == 0 and "trained" in out, err
    records, dec = read_records(str(log))
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == 1500 and records[-1]["kind"] == "event", "every record kept"
    assert records[-1]["type"] == "exit"

    from dltop.tui.core.diagnosis.ticks import Ticks

    ticks = Ticks(log)
    assert ticks.toggle("divergence@10", "lr") is True  # kept in memory...
    assert ticks.error and "not saved" in ticks.error  # ...and said, no exception
    assert ticks.ticked("divergence@10") == {"lr"}

    done = subprocess.run(
        [sys.executable, "-m", "dltop.tui", "check", str(log), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"

    again = subprocess.run(
        [sys.executable, "-c", SLOW_TRAINER, str(folder / "second.jsonl"), "50"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0 and "trained" in again.stdout, "training never stops for us"
    assert "dltop" in again.stderr and "Traceback" not in again.stderr


def test_a_crash_before_a_restart_is_history_not_a_critical_now() -> None:
    """An elastic restart (or a rerun onto the same log) after a crash: the crash stays on
    record, inactive and a warning; the run that came back finished."""
    first = list(Run(steps=300, seed=1, end=None).records())
    t_end = max(r["t"] for r in first if "t" in r)
    first.append(
        {"kind": "event", "type": "exception", "t": t_end, "step": 299,
         "exc_type": "RuntimeError", "message": "worker died"}
    )  # fmt: skip
    again = list(Run(steps=300, seed=2, end="ok").records())
    again[0] = dict(again[0], pid=4343)  # the restarted process
    _shift(again, t_end + 5 - min(r["t"] for r in again if "t" in r))
    eng = _engine(first + again)
    (crash,) = alerts_of(eng, "crash")
    assert crash.severity == "warning" and not crash.active
    assert crash.evidence["restarted"] is True
    assert run_state(eng, now=t_end + 1e6).status == "finished"


def test_a_resumed_run_that_hits_the_same_nan_again_has_two_keys_stable_across_replays() -> None:
    """Resumed from a checkpoint, the run meets the same NaN at the same step: two alerts,
    each with its own key (selected and ticked on its own), the same at every replay."""
    from dltop.tui.core.present.view_model import alert_key

    records: list[dict[str, Any]] = [{"kind": "meta", "v": 1, "pid": 1, "t": 0.0}]
    t = 0.0
    for _ in range(2):
        for s in range(40):
            t += 0.1
            records.append({"kind": "step", "step": s, "t": t, "loss": "NaN" if s == 30 else 1.0})
    keys = [[alert_key(a) for a in _engine(records).alerts() if a.id == "nan_loss"] for _ in (1, 2)]
    assert keys[0] == ["nan_loss@30", "nan_loss@30#2"]
    assert keys[1] == keys[0]
