"""How a run ended, decided once from its event records.

Why one module: "was this a crash, an interrupt or a kill?" used to be answered in five
places (the crash rule, the crash catalogue, the crash banner, the run status, `dltop
ls`) that disagreed at the edges (a SIGINT without an exit record, `sys.exit(0)` inside
the `with` block). Every reader asks here.

- ``FINISHED``: an ``exit`` with status ok, or ``SystemExit`` with code 0/None;
- ``INTERRUPTED``: the person stopped it (``KeyboardInterrupt``, SIGINT): not a crash;
- ``CRASHED``: an exception; ``OOM``: an out-of-memory event;
- ``SIGNALLED``: stopped from outside by a signal other than SIGINT (SIGTERM, SIGHUP);
- ``VANISHED``: no ending on record and the process is gone (SIGKILL, the OOM killer):
  only the run status can say that, from the process table.
"""

from __future__ import annotations

from enum import StrEnum

from ....probe.schema import Record, step_or

_FATAL_EVENTS = ("exception", "oom", "signal")


class Ending(StrEnum):
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    CRASHED = "crashed"
    OOM = "oom"
    SIGNALLED = "signalled"
    VANISHED = "vanished"

    @property
    def status(self) -> str:
        """The run status this ending gives: ``finished`` or ``crashed``."""
        return "finished" if self in (Ending.FINISHED, Ending.INTERRUPTED) else "crashed"


def _exc_name(event: Record) -> str:
    return str(event.get("exc_type") or event.get("exception") or "").rsplit(".", 1)[-1]


SIGNAL_CHARS = 32  # of a signal's name kept ("SIGRTMIN+15" is 11): the log's text, bounded


def signal_name(event: Record, default: str = "signal") -> str:
    """A ``signal`` event's signal, as every surface names it: at most ``SIGNAL_CHARS``
    characters (a crafted log's 100 000-character name reached the title, message, status
    and verdict whole, 900 KB of ``dltop check`` output)."""
    name = event.get("signal")
    if not name:
        return default
    text = name if isinstance(name, str) else str(name)
    return text if len(text) <= SIGNAL_CHARS else text[: SIGNAL_CHARS - 1] + "…"


def is_interrupt(event: Record) -> bool:
    """Ctrl-C: the probe's ``interrupted`` mark, a ``KeyboardInterrupt``, or SIGINT."""
    if event.get("interrupted") is True or _exc_name(event) == "KeyboardInterrupt":
        return True
    return event.get("type") == "signal" and event.get("signal") == "SIGINT"


def is_clean_exit(event: Record) -> bool:
    """``sys.exit()`` / ``sys.exit(0)`` raised inside the run: a normal end."""
    return _exc_name(event) == "SystemExit" and event.get("exit_code") in (0, None)


def event_ending(event: Record) -> Ending | None:
    """What one event record says about the end; ``None`` for an event that ends nothing."""
    typ = event.get("type")
    if typ == "exit":
        status = event.get("status")
        if status == "interrupted":
            return Ending.INTERRUPTED
        if status == "exception":
            return Ending.CRASHED
        if status == "signal":
            return Ending.SIGNALLED
        return Ending.FINISHED
    if typ not in _FATAL_EVENTS:
        return None
    if is_interrupt(event):
        return Ending.INTERRUPTED
    if typ == "signal":
        return Ending.SIGNALLED
    if is_clean_exit(event):
        return Ending.FINISHED
    return Ending.OOM if typ == "oom" else Ending.CRASHED


def is_fatal(event: Record) -> bool:
    """An event that ended the run badly: a crash, an OOM or a signal from outside."""
    return event_ending(event) in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED)


class RunEnding:
    """How a run ended, decided once, from its event records **and its steps**: what the
    run status, the crash banner, the crash rule, ``dltop check``, ``dltop report`` and
    ``dltop ls`` all read (``judge``).

    Fed every event (``see``) and the latest step (``see_step``). The decision
    (``ending``, ``fatal``, ``handled``):

    - an exit record decides, but an ``ok`` one cannot undo a crash the log shows ended
      the training: an exception (or OOM) with no step after it is a crash whatever the
      exit record says (a framework adapter that saw the exit but not the exception
      writes ``ok``); with steps after it, the run handled it and went on
      (``handled``: "finished; an exception at step 5 was handled");
    - a signal the run survived (a preemption handler, then an ``ok`` exit) is handled;
    - ``sys.exit(0)`` inside the run ends nothing by itself: the exit record decides;
    - Ctrl-C is an interrupt, never a crash;
    - with no exit record, a fatal event with no step after it ended the run; with steps
      after it, it did not (the run went on: its ending is not on record yet).
    """

    __slots__ = (
        "exit_status",
        "signal",
        "fatal",
        "fatal_step",
        "stepped_after",
        "interrupt",
        "last_step",
    )

    def __init__(self) -> None:
        self.exit_status: str | None = None  # the exit record's status, once seen
        self.signal: str | None = None  # the last signal received
        self.fatal: Record | None = None  # the last event that could end the run
        self.fatal_step: int | None = None
        self.stepped_after = False  # a step came after that event
        self.interrupt = False  # Ctrl-C / SIGINT / KeyboardInterrupt on record
        self.last_step: int | None = None

    def see_step(self, step: int) -> None:
        """A step record: after a fatal event it means the run went on."""
        if self.fatal is not None and (self.fatal_step is None or step > self.fatal_step):
            self.stepped_after = True
        self.last_step = step

    def see(self, event: Record) -> Ending | None:
        """Take one event; returns what it says on its own (``event_ending``)."""
        end = event_ending(event)
        if end is None:
            return None
        typ = event.get("type")
        if typ == "signal":
            self.signal = signal_name(event)
        if typ == "exit":
            self.exit_status = str(event.get("status") or "ok")
        elif end is Ending.INTERRUPTED:
            self.interrupt = True
        elif end in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED):
            self.fatal = event
            self.fatal_step = step_or(event, self.last_step)
            self.stepped_after = False
        return end

    def _stepped(self, last_step: int | None) -> bool:
        if self.stepped_after:
            return True
        if self.fatal is None or last_step is None:
            return False
        return self.fatal_step is None or last_step > self.fatal_step

    @property
    def handled(self) -> Record | None:
        """The fatal event the run survived (steps after it, or a signal then an ok exit)."""
        return self.handled_at(None)

    def handled_at(self, last_step: int | None) -> Record | None:
        """``handled`` as of ``last_step`` (a reader's latest step, which the steps fed so
        far may not have reached yet): a pure read, never a change of state."""
        f = self.fatal
        if f is None:
            return None
        if self._stepped(last_step):
            return f
        if f.get("type") == "signal" and self.exit_status == "ok":
            return f
        return None

    @property
    def ending(self) -> Ending | None:
        """How the run ended, ``None`` while nothing on record ended it."""
        return self.ending_at(None)

    def ending_at(self, last_step: int | None) -> Ending | None:
        """``ending`` as of ``last_step`` (see ``handled_at``)."""
        status = self.exit_status
        f = self.fatal if self.handled_at(last_step) is None else None
        fatal = event_ending(f) if f is not None else None
        if status is None:
            if fatal is not None:
                return fatal
            return Ending.INTERRUPTED if self.interrupt else None
        # an ok or interrupted exit record: a crash the steps say ended the training is
        # still the news (a Ctrl-C in the crash's teardown does not make it an interrupt)
        if fatal in (Ending.CRASHED, Ending.OOM) and status in ("ok", "interrupted"):
            return fatal
        if status == "interrupted" or (self.interrupt and status in ("ok", "signal")):
            return Ending.INTERRUPTED
        if status == "exception":
            return fatal if fatal in (Ending.CRASHED, Ending.OOM) else Ending.CRASHED
        if status == "signal":
            return Ending.INTERRUPTED if self.signal == "SIGINT" else Ending.SIGNALLED
        return Ending.FINISHED

    def fatal_event_at(self, last_step: int | None) -> Record | None:
        """The event that ended the run badly (what the crash banner shows), if one did, as
        of ``last_step`` (see ``handled_at``)."""
        end = self.ending_at(last_step)
        handled = self.handled_at(last_step)
        if end in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED) and handled is None:
            return self.fatal
        return None
