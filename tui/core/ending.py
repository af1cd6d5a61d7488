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
from typing import Any

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


def _exc_name(event: dict[str, Any]) -> str:
    return str(event.get("exc_type") or event.get("exception") or "").rsplit(".", 1)[-1]


def is_interrupt(event: dict[str, Any]) -> bool:
    """Ctrl-C: the probe's ``interrupted`` mark, a ``KeyboardInterrupt``, or SIGINT."""
    if event.get("interrupted") is True or _exc_name(event) == "KeyboardInterrupt":
        return True
    return event.get("type") == "signal" and event.get("signal") == "SIGINT"


def is_clean_exit(event: dict[str, Any]) -> bool:
    """``sys.exit()`` / ``sys.exit(0)`` raised inside the run: a normal end."""
    return _exc_name(event) == "SystemExit" and event.get("exit_code") in (0, None)


def event_ending(event: dict[str, Any]) -> Ending | None:
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


def is_fatal(event: dict[str, Any]) -> bool:
    """An event that ended the run badly: a crash, an OOM or a signal from outside."""
    return event_ending(event) in (Ending.CRASHED, Ending.OOM, Ending.SIGNALLED)


class RunEnding:
    """A run's ending from its events in order: what the status, ``ls`` and the crash
    rule all read. A crash on record stays the news whatever follows (the probe still
    closes "ok" after an exception it recorded); otherwise the latest ending counts.
    ``sys.exit(0)`` inside the run ends nothing by itself: the exit record decides."""

    __slots__ = ("ending", "signal")

    def __init__(self) -> None:
        self.ending: Ending | None = None
        self.signal: str | None = None  # the last signal received

    def see(self, event: dict[str, Any]) -> Ending | None:
        """Take one event; returns what it says on its own (``event_ending``)."""
        end = event_ending(event)
        if end is None:
            return None
        typ = event.get("type")
        if typ == "signal":
            self.signal = str(event.get("signal") or "signal")
        was = self.ending
        kept: Ending | None = end
        if was in (Ending.CRASHED, Ending.OOM) and end not in (Ending.CRASHED, Ending.OOM):
            kept = was
        elif typ == "exit":
            if end is Ending.SIGNALLED and self.signal == "SIGINT":
                kept = Ending.INTERRUPTED  # a SIGINT handler that called sys.exit
            elif end is Ending.FINISHED and was is Ending.INTERRUPTED:
                kept = was
        elif end is Ending.FINISHED:
            kept = was
        self.ending = kept
        return end
