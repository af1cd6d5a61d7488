"""oom/crash alerts from exception events, named by the crash catalogue."""

from __future__ import annotations

from typing import Any

import pytest
from dltop.tui.core.diagnosis.status import run_state
from dltop.tui.core.diagnosis.verdict import fault_line, verdict
from dltop.tui.core.rules.ending import SIGNAL_CHARS, signal_name
from rulekit import Run, alerts_of, run_engine

CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB "
    "of which 1.2 GiB is free."
)


def crash_at(step: int, **event: Any) -> Run:
    rec = {"kind": "event", "type": "exception", "t": 0.0, "step": step} | event
    return Run(steps=step + 1, extra_records={step: [rec]}, end="exception")


def test_cuda_oom_is_an_oom_alert_with_pattern_and_checklist() -> None:
    eng = run_engine(crash_at(120, type="oom", exc_type="torch.OutOfMemoryError", message=CUDA_OOM))
    (a,) = alerts_of(eng, "oom")
    assert (a.step, a.severity) == (120, "critical")
    assert a.evidence["pattern"] and a.evidence["pattern"] != "unknown"
    assert a.checklist
    assert run_state(eng).status == "crashed"


def test_shape_error_is_a_crash_alert() -> None:
    msg = "mat1 and mat2 shapes cannot be multiplied (32x8 and 32x64)"
    eng = run_engine(crash_at(7, exc_type="RuntimeError", message=msg))
    (a,) = alerts_of(eng, "crash")
    assert a.step == 7 and a.evidence["exc_type"] == "RuntimeError"
    assert "shape" in a.evidence["pattern"]
    assert "mat1 and mat2" in a.message


def test_keyboard_interrupt_is_not_a_crash() -> None:
    run = crash_at(50, exc_type="KeyboardInterrupt", message="", interrupted=True)
    run.end = "interrupted"
    eng = run_engine(run)
    assert [a.id for a in eng.alerts()] == []
    assert run_state(eng).status == "finished"


def test_the_same_exception_recorded_twice_is_one_alert() -> None:
    run = crash_at(9, exc_type="ValueError", message="bad")
    run.extra_records[9] *= 2
    assert len(alerts_of(run_engine(run), "crash")) == 1


def test_sigterm_is_a_crash_warning() -> None:
    run = Run(
        steps=100,
        extra_records={99: [{"kind": "event", "type": "signal", "signal": "SIGTERM", "t": 0.0}]},
    )
    run.end = "signal"
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.severity == "warning" and "SIGTERM" in a.title
    assert run_state(eng).status == "crashed"


@pytest.mark.parametrize(
    ("name", "cause", "action"),
    [
        ("SIGHUP", "terminal or ssh session went away", "tmux"),
        ("SIGTERM", "time limit or preemption", "time limit"),
    ],
)
def test_a_signal_gets_the_signal_checklist_not_the_tracebacks(
    name: str, cause: str, action: str
) -> None:
    """A run stopped from outside has no traceback: "read the last frame of the traceback"
    (the exception checklist) sent the user looking for a bug that is not there."""
    run = Run(
        steps=100,
        extra_records={99: [{"kind": "event", "type": "signal", "signal": name, "t": 0.0}]},
    )
    run.end = "signal"
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.checklist == "crash_signal"
    line = fault_line(a, eng.facts(), eng.steps)
    assert line.startswith("killed at step 99") and cause in line and action in line, line
    assert "traceback" not in line
    run.extra_records = {}  # the exit record says signal, with no record of which
    (w,) = alerts_of(run_engine(run), "crash")
    assert w.checklist == "crash_signal"


def test_a_signal_the_run_went_on_after_is_no_termination_while_it_runs() -> None:
    """A handler took the SIGTERM (a preemption checkpoint) and steps kept coming: the
    status said running while the verdict said "killed at step 99". Then the exit record
    decides: ok is handled, ``signal`` (the handler ended the run) is a termination."""
    sig = {"kind": "event", "type": "signal", "signal": "SIGTERM", "t": 0.0}
    run = Run(steps=120, extra_records={99: [sig]}, end=None)  # still running
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.severity == "info" and not a.active and "went on" in a.title
    state = run_state(eng)
    assert state.status == "running" and "killed" not in verdict(eng, state)
    run.end = "signal"  # the handler saved a checkpoint and ended the run
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.severity == "warning" and a.active and a.title == "Run terminated by SIGTERM"
    state = run_state(eng)
    assert state.status == "crashed" and verdict(eng, state).startswith("killed at step 99")


def test_a_crafted_signal_name_is_bounded_on_every_surface() -> None:
    """The signal's name is the log's text: a 100 000-character one reached the alert's
    title, message and evidence, the status and the verdict whole (900 KB of `dltop
    check` output). Each now holds at most ``SIGNAL_CHARS`` of it."""
    name = "SIG" + "X" * 100_000
    run = Run(
        steps=100,
        extra_records={99: [{"kind": "event", "type": "signal", "signal": name, "t": 0.0}]},
    )
    run.end = None
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    state = run_state(eng)
    kept = name[: SIGNAL_CHARS - 1] + "…"
    assert a.evidence["signal"] == kept and kept in a.title and kept in state.reason
    for text in (a.title, a.message, state.reason, verdict(eng, state)):
        assert "X" * SIGNAL_CHARS not in text and len(text) < 500, len(text)
    assert signal_name({"signal": "SIGHUP"}) == "SIGHUP"
    assert signal_name({}, "a signal") == "a signal"


def test_a_broken_catalogue_still_reports_the_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    import dltop.tui.core.rules.crashdiag as crashdiag

    def boom(event: dict[str, Any]) -> None:
        raise RuntimeError("catalogue exploded")

    monkeypatch.setattr(crashdiag, "diagnose", boom)
    eng = run_engine(
        crash_at(3, exc_type="RuntimeError", message="CUDA out of memory. Tried to allocate 1 GiB")
    )
    (a,) = alerts_of(eng, "oom")
    assert a.evidence["pattern"] == "unknown"


def test_an_exit_record_saying_exception_with_no_record_of_it_is_a_crash() -> None:
    """`Probe(crash=False)`, or an exception record the writer could not write: the exit
    record still says how the run ended, and `dltop check` exited 0 on a crashed run."""
    run = Run(steps=50, end="exception")
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.severity == "critical" and a.evidence["exit_status"] == "exception"
    assert run_state(eng).status == "crashed"
    run.end = "signal"
    (w,) = alerts_of(run_engine(run), "crash")
    assert w.severity == "warning" and "signal" in w.title
    assert (
        alerts_of(run_engine(crash_at(9, exc_type="ValueError", message="bad")), "crash")[
            0
        ].evidence["exc_type"]
        == "ValueError"
    )  # a recorded exception is named, not doubled


def test_a_signal_handled_by_the_run_is_no_crash() -> None:
    """A preemption handler that checkpoints and carries on: the run finished, the exit
    record says ok; the SIGTERM warning made `check` exit 1 on a healthy run."""
    sig = {"kind": "event", "type": "signal", "signal": "SIGTERM", "t": 0.0}
    run = Run(steps=120, extra_records={99: [sig]})  # 20 more steps, then exit ok
    eng = run_engine(run)
    (a,) = alerts_of(eng, "crash")
    assert a.severity == "info" and not a.active and "handled" in a.title
    assert run_state(eng).status == "finished"
