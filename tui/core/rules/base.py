"""What every rule shares: the hook interface and the one-alert-per-episode bookkeeping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dltop.tui.core.alerts import SEVERITY_RANK, Alert, Severity

if TYPE_CHECKING:
    from dltop.tui.core.rules.engine import RuleEngine
    from dltop.tui.core.rules.window import Block


class Rule:
    """A family of checks. The engine calls only the hooks a subclass overrides.

    Windowed rules see steps in blocks (``on_block``, before the engine pushes the block
    into its shared windows, so "the median of the last 100 steps" never includes the
    values being judged). Conditions that must be flagged on their very step (NaN,
    spikes, explosions) are called by the engine inline from its per-step path.
    """

    def __init__(self, engine: RuleEngine) -> None:
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

    def on_block(self, e: RuleEngine, b: Block) -> None:  # every block of steps
        pass

    def on_eval(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        pass

    def on_layers(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        pass

    def on_event(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        pass

    def on_sys(self, e: RuleEngine, rec: dict[str, Any]) -> None:
        pass

    def on_time(self, e: RuleEngine, t: float) -> None:  # heartbeat / sys: time passes
        pass

    def on_finish(self, e: RuleEngine) -> None:  # no more records will come (the log's end)
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
    """

    __slots__ = ("e", "id", "alert", "cleared_at", "rearm", "raised_at")

    def __init__(self, engine: RuleEngine, alert_id: str) -> None:
        self.e = engine
        self.id = alert_id
        self.alert: Alert | None = None
        self.cleared_at: int | None = None
        self.rearm = int(engine.config.section("general")["rearm_steps"])
        self.raised_at: int | None = None  # the step being processed when the alert was raised

    @property
    def active(self) -> bool:
        return self.alert is not None and self.alert.active

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
        """Raise (or keep up) the alert; escalations and ``refresh`` replace its text and numbers."""
        a = self.alert
        if a is not None and not a.active:
            gap = None if step is None or self.cleared_at is None else step - self.cleared_at
            if gap is not None and gap < max(self.rearm, self.e.steps // 10):
                a.active = True
                refresh = True
            else:
                a = None
        if a is None:
            a = Alert(
                id=self.id,
                severity=severity,
                step=step,
                title=title,
                message=message,
                evidence=evidence,
                last_step=step,
                t=t,
                checklist=checklist,
            )
            self.alert = a
            self.cleared_at = None
            self.raised_at = self.e.step if self.e.steps else None
            a.evidence["raised_at_step"] = self.raised_at
            self.e.sink.add(a)
            return a
        if step is not None:
            a.last_step = step
        if SEVERITY_RANK[severity] > SEVERITY_RANK[a.severity] or refresh:
            a.severity = max(a.severity, severity, key=SEVERITY_RANK.__getitem__)
            a.title = title
            a.message = message
            a.evidence = evidence
            if checklist is not None:
                a.checklist = checklist
            a.evidence.setdefault("raised_at_step", self.raised_at)
        return a

    def hold(self, step: int | None) -> None:
        if self.alert is not None and self.alert.active and step is not None:
            self.alert.last_step = step

    def retract(self) -> None:
        """Withdraw the alert up now: later records proved it wrong (not merely over)."""
        a = self.alert
        if a is not None:
            self.e.sink.withdraw(a)
            self.alert, self.cleared_at = None, None

    def clear(self, step: int | None) -> None:
        if self.alert is not None and self.alert.active:
            self.alert.active = False
            self.cleared_at = step if step is not None else self.alert.last_step
