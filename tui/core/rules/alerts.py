"""What a diagnosis says: the alert ids of the contract, severities, and the Alert record.

Shared by the rules engine (which makes alerts), the checklists (which explain
them), ``dltop check`` (which prints them) and the app (which draws badges).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    "metric_mismatch",  # the eval loss falls, no eval metric improves (rules/metric_mismatch.py)
    "nan_metric",  # NaN/Inf in an eval record or any other logged metric (rules/nonfinite_metrics.py)
    "loss_collapsed",  # the loss sits at exactly 0 or at one constant value (rules/collapse.py)
)


@dataclass(frozen=True)
class Alert:
    """One diagnosis of a run: a frozen record, never changed once made.

    ``step`` is the first step at which the condition held (the contract's meaning);
    ``last_step`` the latest step at which it still held. ``evidence`` holds the numbers
    that triggered it, machine-readable; ``message`` says the same in one line for people
    ("grad norm 3.1e4 = 212x the median of the last 100 steps").

    Why frozen: an alert is read by threads and processes that did not make it (the
    viewer draws it while the reader thread diagnoses on; ``ranks`` annotates copies; a
    report keeps one). A rule that escalates, holds, clears or re-words an alert makes a
    new version through the :class:`AlertSink` (``revise``), so a version once handed out
    says the same thing forever. ``evidence`` is typed read-only for the same reason (a
    new version gets a new dict).
    """

    id: str
    severity: Severity
    step: int | None
    title: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
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
            "evidence": dict(self.evidence),
            "message": self.message,
            "active": self.active,
            "last_step": self.last_step,
            "checklist": self.checklist or self.id,
        }


class AlertSink:
    """Where rules report their alerts, in the order raised: the one place alerts are kept.

    Each alert raised gets a slot; a change to it (escalation, a new last step, clearing,
    new wording) is a new version in the same slot (``revise``), a withdrawal empties the
    slot. A rule's :class:`~dltop.tui.core.rules.base.Tracker` holds its slot, never an
    alert object, so whoever revises an alert (the rule, the engine at a new segment, the
    cross-rank judgement) is seen by all. The sink survives the engine's segment resets
    (a rewind keeps what was already diagnosed).
    """

    __slots__ = ("versions", "_raised")

    def __init__(self) -> None:
        # the latest version per slot (None: withdrawn); read-only outside this class (a
        # rule's Tracker reads its slot here directly: it is asked at every block end)
        self.versions: list[Alert | None] = []
        self._raised: dict[tuple[str, int | None], int] = {}  # alerts added per (id, step)

    @property
    def alerts(self) -> list[Alert]:
        """The latest version of every alert not withdrawn, in the order raised (a new list)."""
        return [a for a in self.versions if a is not None]

    def __len__(self) -> int:
        """Slots given so far (withdrawn ones included): a mark for :meth:`since`."""
        return len(self.versions)

    def since(self, mark: int) -> list[tuple[int, Alert]]:
        """(slot, alert) of the alerts raised at or after slot ``mark`` and not withdrawn."""
        return [(i, a) for i, a in enumerate(self.versions[mark:], mark) if a is not None]

    def add(self, alert: Alert) -> int:
        """Keep a new alert; returns its slot. Its ``repeat`` is set here (see Alert)."""
        key = (alert.id, alert.step)
        n = self._raised.get(key, 0)
        self._raised[key] = n + 1
        self.versions.append(replace(alert, repeat=n) if n != alert.repeat else alert)
        return len(self.versions) - 1

    def adopt(self, alert: Alert) -> int:
        """Keep an alert made elsewhere as it is (its ``repeat`` included): a sink that
        starts from another's alerts (``crossrank``). Returns its slot."""
        self.versions.append(alert)
        return len(self.versions) - 1

    def get(self, slot: int | None) -> Alert | None:
        return None if slot is None else self.versions[slot]

    def revise(self, slot: int, extra: Mapping[str, Any] | None = None, **changes: Any) -> Alert:
        """A new version of the alert in ``slot``: ``changes`` to its fields (``evidence=``
        replaces the evidence whole), and ``extra`` merged over its evidence (into a new
        dict). Returns the new version."""
        a = self.versions[slot]
        if a is None:
            raise KeyError(f"alert slot {slot} was withdrawn")
        if extra is not None:
            changes["evidence"] = {**changes.get("evidence", a.evidence), **extra}
        new = replace(a, **changes)
        self.versions[slot] = new
        return new

    def revise_alert(
        self, alert: Alert, extra: Mapping[str, Any] | None = None, **changes: Any
    ) -> Alert:
        """``revise`` for a caller that holds the alert, not its slot (the cross-rank
        judgement reads ``alerts()``): found by identity, the latest first."""
        for i in range(len(self.versions) - 1, -1, -1):
            if self.versions[i] is alert:
                return self.revise(i, extra, **changes)
        raise KeyError(f"alert {alert.id}@{alert.step} is not this sink's latest version")

    def withdraw(self, slot: int) -> None:
        """Take back an alert later records proved wrong."""
        self.versions[slot] = None
