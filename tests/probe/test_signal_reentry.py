"""A signal handled at any line of the writer's code: the run's event is written, fast.

A Python signal handler runs on the main thread between two bytecodes, so it can land
inside the probe's own code: inside ``Event.set()`` with the event's lock held, or inside
a flush's wait. The crash path's handler then emits its ``signal`` event and flushes,
and once it waited forever on a lock its own thread held (the process hung; 1 SIGTERM
in 40 during ``start()``), once it waited 3 s for a writer thread that was itself
blocked on the main thread, then died with the event unwritten (``wake.py``).

Rather than aim real signals at a few-microsecond window, a trace function raises
SIGTERM at the k-th line the main thread runs in ``writer.py``, ``wake.py`` and
``threading.py`` during ``start()``, an event and a flush, for every k. The user has a
SIGTERM handler of their own, so the probe records and chains to it, and the process
lives on to the next k. The script runs in a child so that a hang fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dltop.probe.decoding import read_records
from dltop.probe.schema import EV_SIGNAL, EVENT

ROOT = Path(__file__).resolve().parents[2]

# what every sweep's child shares: a trace function that raises a signal at the k-th line
# run in the watched files, and the loop over k (one run a point, one JSON line a point;
# it ends at the first k the run never reaches)
SWEEP = r"""
import json, os, signal, sys, threading, time
from dltop.probe import Probe

out = sys.argv[1]


def tracer(k, watched, sig, raised, theirs=None):
    seen = 0

    def trace(frame, event, arg):
        nonlocal seen
        if event == "line" and frame.f_code.co_filename.endswith(watched):
            seen += 1
            if seen == k:
                raised["at"] = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
                raised["probe_handler"] = signal.getsignal(sig) is not theirs
                t0 = time.monotonic()
                signal.raise_signal(sig)  # handled before the next bytecode
                raised["handled_s"] = time.monotonic() - t0
        return trace

    return trace


def sweep(run):
    k = 1
    while k < 5000:
        t0 = time.monotonic()
        raised, log = run(k)
        if "at" not in raised:
            break
        print(json.dumps(raised | {"k": k, "log": log, "took": time.monotonic() - t0}), flush=True)
        k += 1
"""


def _sweep(tmp_path: Path, script: str, *args: str, timeout: float) -> list[dict[str, Any]]:
    """Run ``SWEEP`` + ``script`` in a child (a hang fails the test at ``timeout``); its
    points."""
    done = subprocess.run(
        [sys.executable, "-c", SWEEP + script, str(tmp_path), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def _records(point: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """A point's log: its records, their kinds, its ``exit`` records."""
    records, _ = read_records(point["log"])
    exits = [r for r in records if r.get("kind") == EVENT and r.get("type") == "exit"]
    return records, [str(r.get("kind")) for r in records], exits


WRITER = r"""
mine = lambda s, f: None
signal.signal(signal.SIGTERM, mine)  # the user's own handler: recorded, then chained to


def run(k):
    raised = {}
    log = os.path.join(out, f"run{k}.jsonl")
    p = Probe(path=log, socket=False, system=False, heartbeat_every=60.0)
    sys.settrace(tracer(k, ("writer.py", "wake.py", "threading.py"), signal.SIGTERM, raised, mine))
    try:
        p.start()
        p._emit({"kind": "event", "t": time.time(), "step": None, "type": "note"})
        p.flush()
    finally:
        sys.settrace(None)
    p.close()
    return raised, log


sweep(run)
"""


def test_a_sigterm_at_any_line_of_the_writer_is_written_without_a_hang(tmp_path: Path) -> None:
    # a handler blocked on its own thread's lock hangs here
    points = _sweep(tmp_path, WRITER, timeout=60)
    hooked = [p for p in points if p["probe_handler"]]
    assert len(points) > 50 and len(hooked) > 50, len(points)  # the trace saw the writer's code
    for point in points:
        assert point["handled_s"] < 1.0, point  # not a flush timing out behind a blocked writer
        records, kinds, _ = _records(point)
        assert kinds[0] == "meta" and records[-1].get("type") == "exit", (point, kinds)
        signals = [r for r in records if r.get("kind") == EVENT and r.get("type") == EV_SIGNAL]
        assert len(signals) == (1 if point["probe_handler"] else 0), (point, records)


CLOSING = r"""
WATCHED = ("probe.py", "startstop.py", "lifecycle.py", "runconfig.py", "writer.py", "wake.py")
current = {}


def closes(signum, frame):  # a preemption handler: close the logger, then carry on
    current["probe"].close()


signal.signal(signal.SIGTERM, closes)


def run(k):
    raised = {}
    log = os.path.join(out, f"run{k}.jsonl")
    p = current["probe"] = Probe(path=log, socket=False, system=False, heartbeat_every=60.0)
    sys.settrace(tracer(k, WATCHED, signal.SIGTERM, raised, closes))
    try:
        p.start()
        p._learn("optimizer", {"class": "SGD", "lr": 0.1})  # a config change: its lock
        p.step(loss=1.0, lr=0.1, step=0)
        p._learn("optimizer", {"class": "Adam", "lr": 0.1})
        p.step(loss=0.9, lr=0.1, step=1)
        p.flush()
    finally:
        sys.settrace(None)
    p.close()  # joins the writer thread: one still there was started after a close
    raised["handler_left"] = signal.getsignal(signal.SIGTERM) is not closes
    raised["threads_left"] = [t.name for t in threading.enumerate() if t.name.startswith("dltop")]
    signal.signal(signal.SIGTERM, closes)
    return raised, log


sweep(run)
"""


def test_a_handler_that_closes_the_probe_at_any_line_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    """The user's SIGTERM handler calls ``probe.close()`` and returns (a preemption handler
    that closes its loggers), landing at every line the probe's start, config, step and
    flush code runs. Two bugs it found: inside a config change (``RunConfig``'s plain lock
    held) the close waited for its own thread forever; inside ``start()`` the close ran
    before the rest of start installed the signal handlers and started the writer thread,
    which then ran on a closed Probe for good (later SIGTERMs recorded into its log); inside
    a flush, after it had looked at the writer thread, the thread stopped and the flush
    waited its whole timeout (5 s) for an answer that could not come."""
    # the close blocked on its own thread's lock hangs here
    points = _sweep(tmp_path, CLOSING, timeout=120)
    assert len(points) > 100, len(points)
    assert any(p["at"].startswith("startstop.py") for p in points)
    assert any(p["at"].startswith("runconfig.py") for p in points)
    for point in points:
        assert not point["handler_left"] and not point["threads_left"], point
        assert point["took"] < 3.0, point  # a run takes ~0.04 s; a flush left waiting, 5 s
        records, kinds, exits = _records(point)
        assert kinds[0] == "meta" and len(exits) == 1 and records[-1] is exits[0], (point, kinds)


EXITING = r"""
WATCHED = ("probe.py", "startstop.py", "lifecycle.py", "runconfig.py", "crash.py")
SIG = signal.SIGINT if sys.argv[2] == "SIGINT" else signal.SIGTERM
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal: a job run in
# the background by a non-interactive shell (a CI script) inherits SIGINT ignored
if SIG == signal.SIGTERM:
    signal.signal(SIG, lambda signum, frame: sys.exit(0))  # a handler that exits cleanly
THEIRS = signal.getsignal(SIG)


def run(k):
    raised = {}
    log = os.path.join(out, f"run{k}.jsonl")
    before = {t.ident for t in threading.enumerate()}
    p = Probe(path=log, socket=False, system=False, heartbeat_every=60.0)
    p.start()
    sys.settrace(tracer(k, WATCHED, SIG, raised, THEIRS))  # the loop and close(): a
    try:  # start() cut short is another test's
        try:
            with p:
                p._learn("optimizer", {"class": "SGD", "lr": 0.1})
                for i in range(3):
                    p.step(loss=1.0 - 0.1 * i, lr=0.1, step=i)
        finally:
            sys.settrace(None)
    except (SystemExit, KeyboardInterrupt) as exc:
        raised["raised"] = type(exc).__name__
    p._at_exit()  # what the interpreter's exit runs, the hook still registered
    raised["handler_left"] = signal.getsignal(SIG) is not THEIRS
    raised["threads_left"] = [t.name for t in threading.enumerate() if t.ident not in before]
    signal.signal(SIG, THEIRS)
    return raised, log


sweep(run)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_an_exception_from_a_signal_at_any_line_of_the_loop_or_close_ends_the_log(
    tmp_path: Path, sig: str
) -> None:
    """A SIGTERM whose handler calls ``sys.exit(0)``, or Ctrl-C, at every line the probe
    runs in the loop and in ``close()``. The exception goes on, as the user asked; the log
    still ends with its ``exit`` record (two where the exception lands between queueing it
    and saying so: a second one beats none), no thread of the probe is left and the
    user's handler is back. Before: 57 of these points lost the ``exit`` record (the run
    read as killed), and handlers and threads were left behind."""
    points = _sweep(tmp_path, EXITING, sig, timeout=120)
    assert len(points) > 150 and sum("raised" in p for p in points) > 150, len(points)
    for point in points:
        assert not point["handler_left"] and not point["threads_left"], point
        records, kinds, exits = _records(point)
        assert kinds[0] == "meta" and exits and records[-1] is exits[-1], (point, kinds)
