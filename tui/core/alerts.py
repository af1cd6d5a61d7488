"""What a diagnosis says: the alert ids of the contract, severities, and the Alert record.

Shared by the rules engine (which makes alerts), the checklists (which explain
them), ``dltop check`` (which prints them) and the app (which draws badges).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

Severity = Literal["info", "warning", "critical"]
INFO: Final = "info"
WARNING: Final = "warning"
CRITICAL: Final = "critical"
SEVERITIES: tuple[Severity, ...] = (INFO, WARNING, CRITICAL)
SEVERITY_RANK: dict[str, int] = {INFO: 0, WARNING: 1, CRITICAL: 2}

# The contract's alert ids. New ids may be added; none may be renamed.
ALERT_IDS = (
    "nan_loss",
    "nan_grad",
    "loss_spike",
    "divergence",
    "grad_explosion",
    "vanishing_grad",
    "dead_units",
    "plateau",
    "oscillation",
    "overfitting",
    "data_bound",
    "memory_growth",
    "oom",
    "stall",
    "crash",
    "straggler",
    "mixed_runs",  # several processes append to one log at once (rules/segments.py)
    "records_dropped",  # the probe's writer fell behind; the log lacks records (rules/dropped.py)
    "metric_mismatch",  # the eval loss falls, no eval metric improves (rules/metrics.py)
    "nan_metric",  # NaN/Inf in an eval record or any other logged metric (rules/nan_metrics.py)
    "loss_collapsed",  # the loss sits at exactly 0 or at one constant value (rules/collapse.py)
)


@dataclass
class Alert:
    """One diagnosis of a run.

    ``step`` is the first step at which the condition held (the contract's meaning);
    ``last_step`` the latest step at which it still held. ``evidence`` holds the numbers
    that triggered it, machine-readable; ``message`` says the same in one line for people
    ("grad norm 3.1e4 = 212x the median of the last 100 steps").
    """

    id: str
    severity: Severity
    step: int | None
    title: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    active: bool = True
    last_step: int | None = None
    t: float | None = None  # Unix time of the record that raised it
    checklist: str | None = None  # checklist id; defaults to ``id`` (crash patterns differ)
    # which of several overlaid runs it belongs to ("A".."H"; ``None``: the only run). Set
    # on the viewer's copies only, never by a rule: two runs' NaN at the same step are two
    # badges, each with its own checklist and ticks
    run: str | None = None
    # alerts of this id raised before at this same first step (set by the sink): a training
    # resumed from a checkpoint that hits the same NaN again has two ``nan_loss@1200``,
    # and each needs a key of its own to be selected and ticked (``view_model.alert_key``)
    repeat: int = 0

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON shape, plus extra keys (message, active, last_step, checklist)."""
        return {
            "id": self.id,
            "severity": self.severity,
            "step": self.step,
            "title": self.title,
            "evidence": self.evidence,
            "message": self.message,
            "active": self.active,
            "last_step": self.last_step,
            "checklist": self.checklist or self.id,
        }


class AlertSink:
    """Where rules report their alerts, in the order raised.

    The one place alerts are kept: a rule's :class:`~dltop.tui.core.rules.base.Tracker`
    adds and withdraws through it, the engine reads it, and it survives the engine's
    segment resets (a rewind keeps what was already diagnosed).
    """

    __slots__ = ("alerts", "_raised")

    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        self._raised: dict[tuple[str, int | None], int] = {}  # alerts added per (id, step)

    def add(self, alert: Alert) -> None:
        key = (alert.id, alert.step)
        alert.repeat = self._raised.get(key, 0)
        self._raised[key] = alert.repeat + 1
        self.alerts.append(alert)

    def withdraw(self, alert: Alert) -> None:
        """Take back an alert later records proved wrong (by identity: alerts compare by value)."""
        self.alerts[:] = [a for a in self.alerts if a is not alert]
