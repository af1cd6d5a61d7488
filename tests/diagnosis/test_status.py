"""Run status from exit/exception events, heartbeats, step timing and process liveness."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from dltop.tui.core.diagnosis.status import local_pid_alive, run_state
from dltop.tui.core.rules import RuleEngine
from rulekit import Run

T0 = 1_700_000_000.0


def live(steps: int = 200, **kw: object) -> RuleEngine:
    """A run still going: no exit record; returns the engine and the last record time."""
    eng = RuleEngine()
    eng.feed_many(Run(steps=steps, end=None, **kw).records())  # type: ignore[arg-type]
    return eng


def test_finished_crashed_interrupted_from_the_exit_record() -> None:
    eng = RuleEngine()
    eng.feed_many(Run(steps=50).records())
    st = run_state(eng, now=time.time(), pid_alive=False)
    assert (st.status, st.last_step, st.steps) == ("finished", 49, 50)
    eng.feed({"kind": "event", "type": "exit", "status": "exception"})
    assert run_state(eng).status == "crashed"
    eng2 = RuleEngine()
    eng2.feed_many(Run(steps=50, end="interrupted").records())
    assert run_state(eng2).status == "finished" and "interrupted" in run_state(eng2).reason


def test_exception_without_exit_record_is_a_crash() -> None:
    eng = live(50)
    eng.feed(
        {
            "kind": "event",
            "type": "exception",
            "exc_type": "ValueError",
            "message": "bad value\nmore",
            "step": 49,
        }
    )
    st = run_state(eng)
    assert st.status == "crashed" and st.reason.startswith("ValueError: bad value")


def test_running_then_stalled_by_the_clock() -> None:
    eng = live(200)
    last = eng.last_t
    assert run_state(eng, now=last + 1.0).status == "running"
    st = run_state(eng, now=last + 8.0, pid_alive=True)  # heartbeats still expected within silent_s
    assert st.status == "running"
    eng.feed({"kind": "heartbeat", "t": last + 70.0})
    st = run_state(eng, now=last + 71.0, pid_alive=True)
    assert st.status == "stalled" and st.last_step_age >= 70


def test_stall_threshold_scales_with_step_time() -> None:
    eng = live(200, dt=10.0)  # 10 s steps: 10 x p95 is ~110 s, above the 60 s floor
    last = eng.last_t
    eng.feed({"kind": "heartbeat", "t": last + 80.0})
    assert run_state(eng, now=last + 80.0).status == "running"
    eng.feed({"kind": "heartbeat", "t": last + 130.0})
    assert run_state(eng, now=last + 130.0).status == "stalled"


def test_silent_process() -> None:
    eng = live(100)
    later = eng.last_t + 60.0
    assert run_state(eng, now=later, pid_alive=False).status == "crashed"
    assert run_state(eng, now=later, pid_alive=True).status == "stalled"
    assert run_state(eng, now=later, pid_alive=None).status == "unknown"


def test_phase_pauses_the_stall_watch() -> None:
    eng = live(100)
    t = eng.last_t
    eng.feed({"kind": "event", "type": "phase", "name": "checkpoint", "state": "begin", "t": t})
    eng.feed({"kind": "heartbeat", "t": t + 200.0})
    st = run_state(eng, now=t + 200.0)
    assert st.status == "running" and "checkpoint" in st.reason


def test_no_records_is_unknown() -> None:
    assert run_state(RuleEngine()).status == "unknown"


def test_local_pid_alive() -> None:
    host = socket.gethostname()
    assert local_pid_alive({"pid": os.getpid(), "host": host, "t": time.time()}) is True
    assert local_pid_alive({"pid": os.getpid(), "host": "some-other-host"}) is None
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert local_pid_alive({"pid": proc.pid, "host": host}) is False
    # a pid recycled by a process that started after the run began is not the run
    assert local_pid_alive({"pid": os.getpid(), "host": host, "t": 1000.0}) is False
    assert local_pid_alive(None) is None


def test_a_phase_pauses_the_watch_only_up_to_its_cap() -> None:
    eng = live(100)
    t = eng.last_t
    eng.feed({"kind": "event", "type": "phase", "name": "eval", "state": "begin", "t": t})
    for k in range(1, 200):
        eng.feed({"kind": "heartbeat", "t": t + 2.0 * k})
    st = run_state(eng, now=t + 399.0)
    assert st.status == "stalled" and "in phase 'eval'" in st.reason


def test_a_zombie_is_not_alive() -> None:
    """A child that exited but was not reaped still has a pid (psutil.pid_exists is True);
    it will never write again, so the run is gone."""
    import psutil

    host = socket.gethostname()
    t0 = time.time() - 1.0
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)  # wait for the exit (no timing is asserted)
        assert psutil.pid_exists(proc.pid)
        assert local_pid_alive({"pid": proc.pid, "host": host, "t": t0}) is False
    finally:
        proc.wait()
