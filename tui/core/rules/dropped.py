"""Records the log itself lacks: the probe's writer queue was full and it dropped them.

Why a rule: a run whose log silently misses half its steps reads as a healthy finished
run, and every other rule judges the stretch around a gap as if it were continuous.
The probe marks each gap with a ``dropped`` event of scope ``log`` (``records``: this
gap, ``total``: so far) and repeats the total on its ``exit``; this rule turns them into
one ``records_dropped`` warning with the count. A ``dropped`` event of scope ``viewer``
(one live viewer fell behind; the log has the records) is the header's business, not a
diagnosis of the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ....probe.schema import MAX_STEP, Record, as_step
from .alerts import WARNING
from .base import Rule, Tracker

if TYPE_CHECKING:
    from .state import EngineState


def _count(value: Any) -> int:
    n = as_step(value)
    return 0 if n is None else max(0, min(n, MAX_STEP))


class RecordsDropped(Rule):
    def __init__(self, engine: EngineState) -> None:
        super().__init__(engine)
        self.on = self.cfg.enabled("records_dropped")
        self.tracker = Tracker(engine, "records_dropped")
        self.records = 0  # dropped records counted from the gap events
        self.gaps = 0
        self.first_after: int | None = None  # the last step written before the first gap
        # the exit record's ``steps``: how many steps the run made, those the log lacks
        # included (the status says it when records were dropped)
        self.exit_steps: int | None = None

    def alert_trackers(self) -> list[Tracker]:
        return [self.tracker]

    def on_event(self, e: EngineState, rec: Record) -> None:
        typ = rec.get("type")
        if typ == "dropped" and rec.get("scope") == "log":
            self.records += _count(rec.get("records"))
            self.gaps += 1
            if self.first_after is None:
                self.first_after = e.last_step
        elif typ == "exit":
            self.exit_steps = as_step(rec.get("steps"))
            if "dropped" not in rec:
                return
            # the run's own total: it also covers a gap whose event came after the exit
            self.records = max(self.records, _count(rec.get("dropped")))
        else:
            return
        if self.on and self.records:
            self._raise(e, rec)

    def _raise(self, e: EngineState, rec: Record) -> None:
        n, gaps = self.records, max(1, self.gaps)
        where = (
            f"the first gap after step {self.first_after}"
            if self.first_after is not None
            else "the first gap before any step"
        )
        self.tracker.fire(
            e.last_step,
            WARNING,
            f"{n} records missing from the log",
            f"the training outran the probe's log writer: {n} records were not written "
            f"({gaps} gap{'s' if gaps != 1 else ''}; {where}); charts and rules skip them",
            {"records": n, "gaps": gaps, "first_gap_after_step": self.first_after},
            t=e.last_t,
            refresh=True,
        )
