"""The verdict: one line that says how the run went, in the same words on every surface.

``NaN since step 129 (255 of 384 steps), after the lr reached 4 — lower the peak lr 10x or
warm up longer``: the first fault (the most severe alert of warning or above, the
earliest of those), its step, its likely cause and the first thing to do. It is the first
line of ``dltop check`` (``verdict`` in ``--json``), the top of ``dltop report``, the
viewer's header and a column of ``dltop ls``. This module is the only place it is made;
every surface asks here, so they cannot disagree.

The words are data, not code (``tui/data/checklists``): a checklist's ``verdict`` is the
fault's headline, a template over the alert's evidence; the first of its steps the log
answers "yes" that names a ``cause`` and an ``action`` gives the why and the what-to-do
(the step "was the lr high when the loss went NaN?" answered yes says "after the lr
reached {value}" and "lower the peak lr 10x or warm up longer"); otherwise the
checklist's own ``action``. How the run ended comes from the run status
(``status.run_state``, which asks ``ending.RunEnding``): a run without a fault says
"finished after 384 steps; no problem found", never more than the log shows.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

from ..rules.alerts import SEVERITY_RANK, WARNING, Alert
from ..text.fmt import nbytes, seconds
from ..text.fmt import number as fmt
from ..text.i18n import tr, tr_title
from ..text.textfit import fit

if TYPE_CHECKING:
    from ..rules.engine import RuleEngine
    from ..rules.facts import Fact
    from .status import RunState

MAX_LEN = 400  # characters of a verdict line (the evidence it quotes can be long)
_FIELDS = string.Formatter()
# among faults of one severity that still hold, the state the run is left in first: a run
# that is NaN now says so, and the spike and the divergence before it are its cause
TERMINAL = (
    "crash", "oom", "nan_loss", "loss_collapsed", "divergence", "nan_grad", "stall",
    "nan_metric", "dead_units", "vanishing_grad", "plateau", "overfitting",
)  # fmt: skip


def primary_fault(alerts: list[Alert]) -> Alert | None:
    """The fault the verdict is about, among those of warning or above: one that still
    holds at the latest step any alert reached (the state the run is in now) before one
    that cleared; then the most severe; then the state it leaves the run in (``TERMINAL``:
    a NaN now outranks the spike that led to it); then the one that held first.
    Information is never a fault; a rank's failure that followed another rank's
    (``ranks.py``: ``secondary``) comes after every other."""
    loud = [a for a in alerts if SEVERITY_RANK[a.severity] >= SEVERITY_RANK[WARNING]]
    if not loud:
        return None
    order = {id(a): i for i, a in enumerate(alerts)}
    latest = max((a.last_step for a in alerts if a.last_step is not None), default=None)
    rank = {alert_id: i for i, alert_id in enumerate(TERMINAL)}
    return min(
        loud,
        key=lambda a: (
            a.evidence.get("secondary") is True,  # a rank that failed because another did
            not (a.active and a.last_step == latest),
            -SEVERITY_RANK[a.severity],
            rank.get(a.id, len(TERMINAL)),
            a.step is None,
            a.step if a.step is not None else 0,
            order[id(a)],
        ),
    )


def render(template: str, values: dict[str, Any]) -> str | None:
    """``template`` with each ``{name}`` or ``{name:kind}`` (kind: percent, bytes,
    seconds) filled from ``values``; None when a name has no value (the caller words the
    line without it)."""
    out: list[str] = []
    try:
        parsed = list(_FIELDS.parse(template))
    except ValueError:
        return None
    for text, name, spec, _ in parsed:
        out.append(text)
        if name is None:
            continue
        value = values.get(name)
        if value is None:
            return None
        out.append(_word(value, spec or ""))
    return "".join(out)


def _word(value: Any, kind: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fit(str(value), 120)
    if kind == "percent":
        return fmt(100 * value)
    if kind == "bytes":
        return nbytes(value)
    if kind == "seconds":
        return seconds(value)
    return str(value) if isinstance(value, int) else fmt(value)


def fault_line(
    alert: Alert, facts: dict[str, Fact], steps: int, lang: str = "en", rank: int | None = None
) -> str:
    """The verdict for one fault: headline, likely cause, first thing to do."""
    from .checklist_eval import evaluate  # noqa: PLC0415 - data files: lazily
    from .checklists import checklist_for  # noqa: PLC0415

    values: dict[str, Any] = dict(alert.evidence or {})
    title = tr_title(alert.id, alert.title, lang)  # the rules word it in English
    values.update(step=alert.step, last_step=alert.last_step, steps=steps, title=title)
    checklist = checklist_for(alert, lang)
    headline = None
    for template in checklist.verdict:  # the first whose every field the alert has
        headline = render(template, values)
        if headline is not None:
            break
    if headline is None:
        at = f" at step {alert.step}" if alert.step is not None else ""
        headline = f"{title}{at}"
    if rank is not None and f"rank {rank}" not in headline.lower():
        headline += tr(" (rank {rank})", lang, rank=rank)
    cause = action = None
    try:
        checked = evaluate(checklist, facts, alert)
    except Exception:  # a damaged data file must not take the verdict down
        checked = []
    for c in checked:  # the first step answered "yes" that says why, and the first that says what
        if c.mark != "yes":
            continue
        step_values = dict(values, value=c.value)
        if cause is None and c.step.cause:
            cause = render(c.step.cause, step_values)
        if action is None and c.step.action:
            action = render(c.step.action, step_values)
    if action is None and checklist.action:
        action = render(checklist.action, values)
    line = headline + (f", {cause}" if cause else "") + (f" — {action}" if action else "")
    return _cap(line)


def clean_line(state: RunState | None, lang: str = "en") -> str:
    """The verdict of a run with no fault: how it stands, and that nothing was found."""
    if state is None:
        return tr("no records yet", lang)
    reason = state.reason
    if state.status == "finished":
        return _cap(tr("{reason}; no problem found", lang, reason=reason))
    if state.status == "running":
        return _cap(tr("running, {reason}; no problem so far", lang, reason=reason))
    if state.status == "crashed":
        return _cap(tr("crashed: {reason}", lang, reason=reason))
    if state.status == "stalled":
        return _cap(tr("stalled: {reason}", lang, reason=reason))
    return _cap(tr("{reason}; no problem found in what the log holds", lang, reason=reason))


def verdict(
    engine: RuleEngine, state: RunState | None, lang: str = "en", rank: int | None = None
) -> str:
    """The one-line verdict of a run the engine has read (``state``: its status now)."""
    fault = primary_fault(engine.alerts())
    if fault is None:
        return clean_line(state, lang)
    return fault_line(fault, engine.facts(), engine.steps, lang, rank)


def job_verdict(runs: list[tuple[int | None, RuleEngine, RunState]], lang: str = "en") -> str:
    """The verdict of several ranks of one job: the primary fault across them (a rank's
    own, or the job's: a straggler, the first rank to fail), said with its rank; without
    one, the status of the rank the job's status comes from (the first given)."""
    alerts: list[tuple[Alert, int | None, RuleEngine]] = [
        (a, rank, eng) for rank, eng, _ in runs for a in eng.alerts()
    ]
    fault = primary_fault([a for a, _, _ in alerts])
    if fault is None:
        return clean_line(runs[0][2] if runs else None, lang)
    for a, rank, eng in alerts:
        if a is fault:
            shown = rank if len(runs) > 1 else None
            return fault_line(a, eng.facts(), eng.steps, lang, shown)
    return clean_line(runs[0][2], lang)  # pragma: no cover - the fault is one of the alerts


def _cap(line: str) -> str:
    return fit(" ".join(line.split()), MAX_LEN)  # between words: a number stays whole
