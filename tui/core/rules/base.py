"""What every rule shares: the hook interface and the one-alert-per-episode bookkeeping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ....probe.schema import Record
from .alerts import SEVERITY_RANK, Alert, Severity

if TYPE_CHECKING:
    from .state import EngineState
    from .window import Block


class Rule:
    """A family of checks. The engine calls only the hooks a subclass overrides.

    Windowed rules see steps in blocks (``on_block``, before the engine pushes the block
    into its shared windows, so "the median of the last 100 steps" never includes the
    values being judged). Conditions that must be flagged on their very step (NaN,
    spikes, explosions) are called by the engine inline from its per-step path.
    """

    def __init__(self, engine: EngineState) -> None:
        self.e = engine
        self.cfg = engine.config
        self.on = True

    def settings(self, section: str) -> dict[str, Any]:
        """The rule's config section; ``self.on`` from its ``enabled`` key."""
        c = self.cfg.section(section)
        self.on = bool(c["enabled"])
        return c

    def alert_trackers(self) -> list[Tracker]:
        """Every alert tracker this rule holds, for the engine to clear at a new segment.
        Listed by each rule, not found by scanning its attributes: compiled (mypyc)
        instances have no ``__dict__``."""
        return []

    def on_block(self, e: EngineState, b: Block) -> None:  # every block of steps
        pass

    def on_eval(self, e: EngineState, rec: Record) -> None:
        pass

    def on_layers(self, e: EngineState, rec: Record) -> None:
        pass

    def on_event(self, e: EngineState, rec: Record) -> None:
        pass

    def on_sys(self, e: EngineState, rec: Record) -> None:
        pass

    def on_time(self, e: EngineState, t: float) -> None:  # heartbeat / sys: time passes
        pass

    def on_finish(self, e: EngineState) -> None:  # no more records will come (the log's end)
        pass


def held_steps(records: int, since: int | None, step: int) -> int:
    """How long a condition has held, in steps not records: ``records`` records in a row
    from step ``since`` to ``step`` (two records of a log written every 50 steps have held
    it 51 steps); one record counts as one step, and never fewer steps than records."""
    if records < 2 or since is None:
        return records
    return max(records, step - since + 1)


class Tracker:
    """One alert id's episodes: raise once, hold, clear, re-raise only after a quiet spell.

    A condition that flickers (a noisy metric hovering at its threshold) keeps updating one
    alert instead of filling the list; a problem that clearly went away and came back
    ``rearm_steps`` later is a new alert with its own first step.

    The tracker holds the episode's slot in the engine's sink, not an alert: every change
    (``fire`` escalating or re-wording, ``hold``, ``clear``, ``revise``) is a new version
    of the alert there (alerts are frozen, see ``alerts.Alert``), and ``alert`` is always
    the latest one, whoever made it.
    """

    __slots__ = ("e", "id", "slot", "cleared_at", "rearm", "raised_at")

    def __init__(self, engine: EngineState, alert_id: str) -> None:
        self.e = engine
        self.id = alert_id
        self.slot: int | None = None  # the current episode's slot in the sink
        self.cleared_at: int | None = None
        self.rearm = int(engine.config.section("general")["rearm_steps"])
        self.raised_at: int | None = None  # the step being processed when the alert was raised

    @property
    def alert(self) -> Alert | None:
        """The current episode's alert, its latest version (None: none raised, or withdrawn)."""
        return None if self.slot is None else self.e.sink.versions[self.slot]

    def current(self) -> Alert | None:
        """``alert`` as a method: what another rule is handed to read this one's finding."""
        return self.alert

    @property
    def active(self) -> bool:
        # the sink's list read directly, not through a method: most rules ask this at every
        # block end. Through the engine each time: a new segment keeps the engine's sink,
        # not the one its __init__ made while this tracker was built
        s = self.slot
        if s is None:
            return False
        a = self.e.sink.versions[s]
        return a is not None and a.active

    def fire(
        self,
        step: int | None,
        severity: Severity,
        title: str,
        message: str,
        evidence: dict[str, Any],
        t: float | None = None,
        checklist: str | None = None,
        refresh: bool = False,
    ) -> Alert:
        """Raise (or keep up) the alert; escalations and ``refresh`` replace its text and
        numbers. Returns the latest version; ``evidence`` is copied, never kept."""
        a = self.alert
        changes: dict[str, Any] = {}
        if a is not None and not a.active:
            gap = None if step is None or self.cleared_at is None else step - self.cleared_at
            if gap is not None and gap < max(self.rearm, self.e.steps // 10):
                changes["active"] = True
                refresh = True
            else:
                a = None
        if a is None:
            self.raised_at = self.e.step if self.e.steps else None
            new = Alert(
                id=self.id,
                severity=severity,
                step=step,
                title=title,
                message=message,
                evidence={**evidence, "raised_at_step": self.raised_at},
                last_step=step,
                t=t,
                checklist=checklist,
            )
            self.slot = self.e.sink.add(new)
            self.cleared_at = None
            added = self.e.sink.get(self.slot)
            assert added is not None
            return added
        if step is not None and step != a.last_step:
            changes["last_step"] = step
        if SEVERITY_RANK[severity] > SEVERITY_RANK[a.severity] or refresh:
            changes["severity"] = max(a.severity, severity, key=SEVERITY_RANK.__getitem__)
            changes["title"] = title
            changes["message"] = message
            ev = dict(evidence)
            ev.setdefault("raised_at_step", self.raised_at)
            changes["evidence"] = ev
            if checklist is not None:
                changes["checklist"] = checklist
        if not changes:
            return a
        assert self.slot is not None
        return self.e.sink.revise(self.slot, **changes)

    def revise(self, extra: dict[str, Any] | None = None, **changes: Any) -> Alert | None:
        """A new version of the current episode's alert (see ``AlertSink.revise``): how a
        rule re-words, downgrades or annotates what it said. None when there is none."""
        if self.slot is None or self.alert is None:
            return None
        return self.e.sink.revise(self.slot, extra, **changes)

    def hold(self, step: int | None) -> None:
        a = self.alert
        if a is not None and a.active and step is not None and step != a.last_step:
            assert self.slot is not None
            self.e.sink.revise(self.slot, last_step=step)

    def retract(self) -> None:
        """Withdraw the alert up now: later records proved it wrong (not merely over)."""
        if self.slot is not None and self.alert is not None:
            self.e.sink.withdraw(self.slot)
        self.slot, self.cleared_at = None, None

    def clear(self, step: int | None) -> None:
        a = self.alert
        if a is not None and a.active:
            assert self.slot is not None
            self.e.sink.revise(self.slot, active=False)
            self.cleared_at = step if step is not None else a.last_step
