"""A SIGTERM that comes as soon as the log exists is recorded (the start-up window).

``Probe.start`` used to start the writer thread, which writes ``meta`` at once, before it
installed the signal handlers. A SIGTERM in between (a scheduler's, or the kernel's when
a parent such as ``dltop demo`` dies: PR_SET_PDEATHSIG) ended the process by the default
action with no record, while its log already said a run had begun: 10 of 10 such kills
lost their event. The slow tier's demo test that kills `dltop demo` once the demo's log
has its meta failed once in CI, likely in this window. Here the kill comes the moment
the log has bytes, polled every half millisecond.

Since ``start()`` waits for ``meta`` to be on disk, the log's first bytes come just as
the child's main thread goes on into its loop. The loop sleeps in short naps, as a
training loop computes: a signal that lands in the microseconds between CPython's last
look for signals and the ``clock_nanosleep`` under ``time.sleep`` is run only when the
sleep ends (a CPython race, not the probe's), and under a 30 s sleep that read as a hang
in 2 of 80 tries.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dltop.probe import Probe
from dltop.probe.decoding import read_records
from dltop.probe.schema import EV_SIGNAL, EVENT

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
from dltop.probe import Probe
Probe(path=sys.argv[1]).start()
for _ in range(600):
    time.sleep(0.05)
"""


def _killed_at_start(log: Path) -> tuple[int, list[dict[str, object]]]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.stat().st_size > 0):
            assert child.poll() is None, "the probe's process ended before writing its log"
            assert time.monotonic() < deadline, "no log after 60 s"
            time.sleep(0.0005)
        child.send_signal(signal.SIGTERM)
        code = child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    records, _ = read_records(str(log))
    return code, records


def test_a_sigterm_as_soon_as_the_log_exists_is_recorded(tmp_path: Path) -> None:
    for i in range(3):
        log = tmp_path / f"run{i}.jsonl"
        code, records = _killed_at_start(log)
        assert code == -signal.SIGTERM  # it still dies by the signal, as without the probe
        assert records and records[0].get("kind") == "meta"
        signals = [r for r in records if r.get("kind") == EVENT and r.get("type") == EV_SIGNAL]
        assert [s.get("signal") for s in signals] == ["SIGTERM"], (i, records)
        os.unlink(log)


def test_meta_is_on_disk_when_start_returns(tmp_path: Path) -> None:
    """A run killed (SIGKILL, the OOM killer) the moment ``start()`` returns leaves a log
    that says a run began: ``start()`` used to return before the writer thread had
    written ``meta``, and 6 such kills in 20 left an empty file."""
    for i in range(10):
        log = tmp_path / f"run{i}.jsonl"
        probe = Probe(path=log, socket=False, system=False)
        probe.start()
        first = log.read_bytes().split(b"\n", 1)[0]  # before the writer's next wake
        probe.close()
        assert json.loads(first).get("kind") == "meta", (i, first[:200])


def _child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter, in the checkout (a hang fails at 60 s)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


SLOW_SINK_CHILD = """
import os, signal, sys, threading, time
from dltop.probe import Probe

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a job run in
# the background by a non-interactive shell (a CI script) inherits SIGINT ignored

class SlowSink:  # a sink on a slow disk: start()'s wait for meta lasts 1 s
    def write(self, batch):
        time.sleep(1.0)
    def close(self):
        pass

threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # inside that wait
Probe(path=sys.argv[1], socket=False, system=False, sinks=[SlowSink()]).start()
print("start() returned", flush=True)
"""


def test_a_ctrl_c_while_start_waits_for_meta_still_closes_the_log(tmp_path: Path) -> None:
    """Ctrl-C lands while ``start()`` waits for ``meta``: KeyboardInterrupt leaves
    ``start()`` (as the user asked), the signal is on record, and ``start()`` ends the log
    as the ``with`` block it never opened would have: ``interrupted`` (it used to be left
    to the interpreter's exit hook, which says ``signal``; both read as a Ctrl-C)."""
    log = tmp_path / "run.jsonl"
    done = _child(SLOW_SINK_CHILD, str(log))
    assert "KeyboardInterrupt" in done.stderr and "start() returned" not in done.stdout
    records, _ = read_records(str(log))
    assert records[0].get("kind") == "meta"
    signals = [r.get("signal") for r in records if r.get("type") == EV_SIGNAL]
    assert signals == ["SIGINT"], records
    assert records[-1].get("type") == "exit" and records[-1].get("status") == "interrupted"
    assert [r.get("type") for r in records].count("exit") == 1, records


SIGNAL_IN_CLOSE_CHILD = """
import os, signal, sys, threading, time
from dltop.probe import Probe

class SlowSink:  # a slow disk: close() waits ~0.5 s per batch for the writer thread
    def write(self, batch):
        time.sleep(0.5)
    def close(self):
        pass

SIG = getattr(signal, sys.argv[2])
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (see above)
if SIG == signal.SIGTERM:
    signal.signal(SIG, lambda signum, frame: sys.exit(0))  # a handler that exits cleanly
with Probe(path=sys.argv[1], socket=False, system=False, sinks=[SlowSink()]) as p:
    for i in range(5):
        p.step(loss=1.0 / (i + 1), step=i)
    p._emit({"kind": "event", "type": "note", "t": time.time()})  # an event: written now
    time.sleep(0.05)  # the writer thread is in the slow sink now, the exit queued behind it
    threading.Timer(0.2, os.kill, (os.getpid(), SIG)).start()  # inside close()'s wait
print("the with block ended", flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_while_close_waits_still_ends_the_log(tmp_path: Path, sig: str) -> None:
    """The run is over and ``close()`` waits for the writer (a slow disk); a second Ctrl-C,
    or a SIGTERM whose handler calls ``sys.exit``, lands in that wait. The exception it
    raises used to cut close() short: the ``exit`` record, queued for a writer thread that
    does not outlive the interpreter, never reached the log, and a run that finished read
    as killed. Now the exception still goes on (the user asked to stop) once the log has
    its ``exit`` record."""
    log = tmp_path / "run.jsonl"
    done = _child(SIGNAL_IN_CLOSE_CHILD, str(log), sig)
    assert "the with block ended" not in done.stdout  # the signal's exception went on
    # sys.exit(0) from the handler; an uncaught KeyboardInterrupt ends Python by SIGINT
    assert done.returncode == (0 if sig == "SIGTERM" else -signal.SIGINT), done.stderr[-2000:]
    records, _ = read_records(str(log))
    types = [r.get("type") for r in records]
    assert [r.get("step") for r in records if r.get("kind") == "step"] == list(range(5))
    assert types.count("exit") == 1 and records[-1].get("type") == "exit", types
    assert records[-1].get("status") == "ok", records[-1]  # the run had finished


CUT_SHORT_CHILD = """
import sys
from dltop.probe import Probe
from dltop.probe.startstop import StartStop

real = StartStop._end_log
calls = []

def cut_short(self, status):
    calls.append(status)
    if len(calls) == 1:  # the exception lands between close()'s statements, before the log ends
        raise SystemExit(0)
    real(self, status)

StartStop._end_log = cut_short
with Probe(path=sys.argv[1], socket=False, system=False) as p:
    for i in range(3):
        p.step(loss=1.0, step=i)
"""


def test_a_close_cut_short_is_finished_by_the_interpreters_exit(tmp_path: Path) -> None:
    """Where the exception lands between two statements of close() (no ``finally`` can
    cover that), the exit hook is still registered (it is dropped only once the log has
    ended) and ends the log as the interpreter exits: one ``exit`` record, the status
    close() was given."""
    log = tmp_path / "run.jsonl"
    done = _child(CUT_SHORT_CHILD, str(log))
    assert done.returncode == 0, done.stderr[-2000:]
    records, _ = read_records(str(log))
    types = [r.get("type") for r in records]
    assert types.count("exit") == 1 and records[-1].get("status") == "ok", records
