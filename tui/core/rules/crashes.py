"""Crashes and out-of-memory errors from ``event`` records, named by the crash catalogue.

The diagnosis itself (which known crash it is, which checklist explains it) belongs to
``crashdiag``, whose patterns are data. This rule only turns its answer into an alert and
remembers how the run ended, for the run status. A KeyboardInterrupt is the user
stopping the run, not a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ....probe.schema import Record, step_or
from .alerts import CRITICAL, INFO, WARNING, Alert, Severity
from .base import Rule, Tracker
from .ending import (
    Ending,
    RunEnding,
    event_ending,
    is_clean_exit,
    is_interrupt,
    signal_name,
)

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block

# a run stopped from outside (no exception, no traceback): who sent the signal, and how
# the next run survives it, not the exception checklist's "read the traceback"
SIGNAL_CHECKLIST = "crash_signal"
# an exit record after a recorded signal that says the signal ended nothing bad
_HANDLED_TITLES = {
    "ok": "{signal} received and handled: the run went on",
    "interrupted": "{signal} received: the run stopped as interrupted",
}
_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _diagnose(event: Record) -> Any:
    """crashdiag.diagnose, or None when it fails: a crash must still be reported. Imported
    when a crash comes: the catalogue's reader adds ~25 ms to importing the engine."""
    try:
        from .crashdiag import diagnose  # noqa: PLC0415

        return diagnose(event)
    except Exception:
        return None


class Crashes(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        self.oom_on = self.cfg.enabled("oom")
        self.crash_on = self.cfg.enabled("crash")
        self.trackers = {"oom": Tracker(engine, "oom"), "crash": Tracker(engine, "crash")}
        self.seen: set[tuple[str, str]] = set()
        # how the run ended, for status.py
        self.exit_status: str | None = None
        self.exception: Record | None = None  # the last crash event
        self.signal: str | None = None
        self.system_exit_ok = False
        self.run_ending = RunEnding()  # how the run ended so far (dltop.tui.core.rules.ending)

    def alert_trackers(self) -> list[Tracker]:
        return list(self.trackers.values())

    def on_block(self, e: EngineState, b: Block) -> None:
        re = self.run_ending
        was = re.handled
        if b.steps:
            re.see_step(b.steps[-1])
        if was is None and re.handled is not None:
            self._handled(re.handled)

    def _handled(self, event: Record) -> None:
        """Steps came after the exception: the run caught it and went on. What the crash
        alert said stays on record, as information (the run was not ended by it)."""
        if event.get("type") == "signal":
            # a handler took it (a preemption checkpoint, a reload) and training went on:
            # no longer "terminated" while the status says running (the exit record then
            # says how it ended: _unrecorded_end)
            tr = self.trackers["crash"]
            a = tr.alert
            if a is not None and a.active and a.evidence.get("pattern") == "signal":
                tr.revise(
                    {"went_on": True},
                    severity=INFO,
                    active=False,
                    title=f"{self.signal} received: the run went on",
                    message=a.message + "; steps followed it: a handler took the signal",
                )
            return
        for tr in self.trackers.values():
            a = tr.alert
            if a is not None and a.severity == CRITICAL and a.evidence.get("handled") is None:
                tr.revise(
                    {"handled": True},
                    severity=INFO,
                    active=False,
                    title=f"{a.title} (handled: training went on)",
                    message=a.message
                    + "; steps followed it: the run caught the exception and went on",
                )

    def on_event(self, e: EngineState, rec: Record) -> None:
        typ = rec.get("type")
        self.run_ending.see(rec)
        if typ in ("exception", "oom"):
            self._exception(e, rec)
        elif typ == "signal":
            self.signal = signal_name(rec)
            if self.crash_on and event_ending(rec) is Ending.SIGNALLED:
                step = step_or(rec, e.last_step)
                ev = {"signal": self.signal, "pattern": "signal", "last_step": e.last_step}
                msg = f"the process received {self.signal} after step {e.last_step}"
                self.trackers["crash"].fire(
                    step,
                    WARNING,
                    f"Run terminated by {self.signal}",
                    msg,
                    ev,
                    t=e.last_t,
                    checklist=SIGNAL_CHECKLIST,
                )
        elif typ == "exit":
            self.exit_status = str(rec.get("status") or "ok")
            self._unrecorded_end(e)

    def _unrecorded_end(self, e: EngineState) -> None:
        """An exit record that says exception or signal, with no record of either before
        it (``Probe(crash=False)``, or a record the writer could not write): the run still
        crashed, and ``dltop check`` must not exit 0 on it. After a recorded signal, the
        exit record says what became of it (``_after_signal``)."""
        status = self.exit_status
        signalled = self.trackers["crash"].alert
        if (
            signalled is not None
            and signalled.evidence.get("pattern") == "signal"
            and self._after_signal(e, signalled, status)
        ):
            return
        # how the run ended is ending.py's (the status reads it too); said here when no
        # alert says it yet: an exception the run went on after, then an exit record
        # saying exception or signal, ended the run by something not on record
        end = self.run_ending.ending
        if not self.crash_on or end not in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED):
            return
        if any(
            (a := tr.alert) is not None and a.active and a.severity != INFO
            for tr in self.trackers.values()
        ):
            return  # the event that ended it is named already
        severity: Severity
        if end is Ending.SIGNALLED:
            title, severity, checklist = "Run terminated by a signal", WARNING, SIGNAL_CHECKLIST
        else:
            title, severity = "The run crashed: its exception is not in the log", CRITICAL
            checklist = "crash"
        ev = {"pattern": "unknown", "exit_status": status, "last_step": e.last_step}
        msg = f"the exit record says {status} after step {e.last_step}, with no record of it"
        self.trackers["crash"].fire(
            e.last_step, severity, title, msg, ev, t=e.last_t, checklist=checklist
        )

    def _after_signal(self, e: EngineState, signalled: Alert, status: str | None) -> bool:
        """The exit record after a recorded signal, worded as ``ending.py`` reads it (one
        decision: the status and this alert must not disagree). True when it is said."""
        tr = self.trackers["crash"]
        # ok: a handler took it (a preemption checkpoint) and the run ended well;
        # interrupted: a handler made it a KeyboardInterrupt, a stop
        handled = _HANDLED_TITLES.get(status or "")
        if handled is not None:
            tr.revise(
                {"exit_status": status},
                severity=INFO,
                active=False,
                title=handled.format(signal=self.signal),
            )
            return True
        if status == "signal" and signalled.evidence.get("went_on") and not signalled.active:
            # it went on after the signal, then its handler ended it: terminated after all
            tr.revise(
                {"exit_status": status},
                severity=WARNING,
                active=True,
                title=f"Run terminated by {self.signal}",
                last_step=e.last_step,
            )
            return True
        return False

    def _exception(self, e: EngineState, rec: Record) -> None:
        if is_interrupt(rec):  # the user stopping the run: no crash
            return
        exc_type = str(rec.get("exc_type") or "")
        message = str(rec.get("message") or "")
        if is_clean_exit(rec):
            self.system_exit_ok = True  # sys.exit(0) is a normal end
            return
        self.exception = rec
        key = (exc_type, message[:300])
        if key in self.seen:
            return
        self.seen.add(key)
        step = step_or(rec, e.last_step)
        diag = _diagnose(rec)
        if diag is not None:
            alert_id = diag.alert_id if diag.alert_id in self.trackers else "crash"
            title, summary, checklist, pattern = (
                diag.title,
                diag.summary,
                diag.checklist,
                diag.pattern,
            )
            details = dict(diag.details)
        else:
            low = message.lower()
            oom = (
                rec.get("type") == "oom"
                or "OutOfMemory" in exc_type
                or any(s in low for s in _OOM_TEXT)
            )
            alert_id = "oom" if oom else "crash"
            title = "Out of memory" if oom else f"The run crashed: {exc_type or 'exception'}"
            summary, checklist, pattern, details = message, None, "unknown", {}
        if not (self.oom_on if alert_id == "oom" else self.crash_on):
            return
        short = message.strip()[:1024].splitlines()[0][:200] if message.strip() else ""
        ev: dict[str, Any] = {
            "pattern": pattern,
            "exc_type": exc_type,
            "message": message[:500],
            "last_step": e.last_step,
        }
        ev.update({k: v for k, v in details.items() if k not in ev})
        if isinstance(rec.get("memory"), dict):
            ev["memory"] = rec["memory"]
        msg = (
            f"{exc_type or 'exception'} at step {step}: {short}"
            if short
            else f"{exc_type} at step {step}"
        )
        if summary and summary != message:
            msg += f" ({summary.strip().splitlines()[0][:200]})"
        self.trackers[alert_id].fire(
            step, CRITICAL, title, msg, ev, t=e.last_t, checklist=checklist, refresh=True
        )
