"""Display data for the dashboard, computed from a RunModel without any UI.

The widgets stay thin: everything they show (header text, status with the age of the last
record, the panels' traces, values at the cursor, the crash summary, the step window of an
alert) is computed here, as pure functions of the model and a small ``ViewState``, so it
is testable without Textual. Callers hold ``model.lock`` (see :func:`locked`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..rules.alerts import CRITICAL, Alert
from ..text.i18n import tr_title
from ..text.safetext import visible
from . import panels
from .chartdata import ChartData  # noqa: F401 - re-exported
from .crash_view import CrashInfo, crash_info  # noqa: F401 - re-exported
from .header_view import (  # noqa: F401 - re-exported
    HeaderInfo,
    gpu_na_reason,
    header_info,
    rank_lines,
    rank_note,
)
from .panels import (  # noqa: F401 - re-exported
    PANELS,
    panel_chart,
    panel_signature,
)
from .viewstate import ViewState  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from ..diagnosis.checklist_eval import CheckedStep
    from ..rules.config import Config
    from ..store.run import RunModel


@contextlib.contextmanager
def locked(model: RunModel) -> Iterator[None]:
    lock = getattr(model, "lock", None)
    if lock is None:
        yield
        return
    with lock:
        yield


# ----------------------------------------------------------------------------- alerts


def alert_key(alert: Alert) -> str:
    """A stable name for one alert: its id and first step (ticks are saved under it), and
    in an overlay the run it belongs to (``B:nan_loss@128``). The same id at the same step
    again (a resumed run that hit the same NaN) is ``nan_loss@128#2``: the alerts are
    raised in the log's order, so the name is the same at every replay."""
    key = f"{alert.id}@{alert.step if alert.step is not None else '-'}"
    if alert.repeat:
        key += f"#{alert.repeat + 1}"
    return f"{alert.run}:{key}" if alert.run else key


def badge_label(alert: Alert, lang: str = "en") -> str:
    icon = "✖" if alert.severity == CRITICAL else ("▲" if alert.severity == "warning" else "●")
    at = f" @{alert.step}" if alert.step is not None else ""
    return f"{icon} {visible(tr_title(alert.id, alert.title, lang))}{at}"


def alert_window(alert: Alert, first: int, last: int) -> tuple[int, int]:
    """The step window that shows an alert with context on both sides."""
    s = alert.step if alert.step is not None else last
    e = alert.last_step if alert.last_step is not None else s
    pad = max(20, (e - s) // 2, (last - first) // 20)
    return max(first, s - pad), min(last, max(e + pad, s + 1))


def alert_to_explain(alerts: list[Alert]) -> str | None:
    """The alert whose checklist opens by itself: the first to go critical (earliest
    step), since what broke first usually explains what followed (an explosion before the
    NaN, an OOM before the crash). ``None`` while nothing is critical: warnings wait for
    the person to choose. Deterministic, so a replay opens what the live view opened."""
    critical = [a for a in alerts if a.severity == CRITICAL]
    if not critical:
        return None
    first = min(critical, key=lambda a: (a.step if a.step is not None else 1 << 62, a.t or 0.0))
    return alert_key(first)


def find_alert(alerts: list[Alert], key: str | None) -> Alert | None:
    for a in alerts:
        if alert_key(a) == key:
            return a
    return None


# ----------------------------------------------------------------------------- header


def replace_state(state: ViewState, **changes: Any) -> ViewState:
    return replace(state, **changes)


@dataclass
class Clock:
    """Wall time, or a frozen "now" so snapshots never show a moving age."""

    fixed: float | None = None

    def now(self) -> float:
        return self.fixed if self.fixed is not None else time.time()


# ----------------------------------------------------------------------------- model


def new_model(label: str, config: Config | None = None) -> RunModel:
    from ..store.run import RunModel

    return RunModel(label, config)


def model_version(model: RunModel) -> int:
    return int(model.version)


def alerts_of(model: RunModel) -> list[Alert]:
    engine = getattr(model, "engine", None)
    return engine.alerts() if engine is not None else []


def window_of(model: RunModel, state: ViewState) -> tuple[int, int]:
    return panels.window(model.store, state)


def clamp_step(model: RunModel, step: int) -> tuple[int, str | None] | None:
    """``step`` moved into the run's range, with a note for the person when it had to be;
    ``None`` before the first point (there is nowhere to go yet)."""
    b = model.store.step_range()
    if b is None:
        return None
    first, last = b
    if step < first:
        return first, f"step {step} is before the run (first step {first}): showing {first}"
    if step > last:
        return last, f"step {step} is past the run (last step {last}): showing {last}"
    return step, None


def window_around(model: RunModel, step: int) -> tuple[int, int] | None:
    """A window centred on ``step`` (clamped to the run), ``None`` before any data."""
    b = model.store.step_range()
    if b is None:
        return None
    first, last = b
    step = min(last, max(first, step))
    half = max(25, (last - first) // 10)
    return max(first, step - half), min(last, step + half)


def window_for_alert(model: RunModel, alert: Alert) -> tuple[int, int] | None:
    b = model.store.step_range()
    if b is None:
        return None
    return alert_window(alert, *b)


def move_cursor(model: RunModel, state: ViewState, direction: int, columns: int) -> int | None:
    """One character column to the left/right: wide windows move fast, short ones by a step."""
    start, end = window_of(model, state)
    stride = max(1, (end - start + 1) // max(1, columns))
    if state.cursor is None:
        return end if direction < 0 else start
    return min(end, max(start, state.cursor + direction * stride))


def newest_first(alerts: list[Alert]) -> list[Alert]:
    """The alerts in the badge bar's order: the one that started last first (resolved ones
    stay in place, dimmed)."""
    return sorted(alerts, key=lambda a: (-(a.step if a.step is not None else -1), -(a.t or 0.0)))


def next_alert_key(alerts: list[Alert], selected: str | None) -> str | None:
    """Cycle through the alerts newest first, as the badge bar shows them."""
    if not alerts:
        return None
    keys = [alert_key(a) for a in newest_first(alerts)]
    if selected not in keys:
        return keys[0]
    return keys[(keys.index(selected) + 1) % len(keys)]


def checklist_view(model: RunModel, alert: Alert, lang: str) -> tuple[str, list[CheckedStep]]:
    """The checklist of an alert, each step marked from the run's facts."""
    from ..diagnosis.checklist_eval import evaluate
    from ..diagnosis.checklists import checklist_for

    checklist = checklist_for(alert, lang)
    facts = model.facts()
    steps = evaluate(checklist, facts, alert)
    said = tr_title(alert.id, alert.title, lang)
    same = checklist.title.strip().lower() == said.strip().lower()
    title = f"{said} — {checklist.title}" if checklist.title and not same else said
    if checklist.error:
        title += f" ({checklist.error})"
    # evidence quotes the run (an exception type, a signal name): escaped for the screen
    shown = [replace(c, evidence=visible(c.evidence)) if c.evidence else c for c in steps]
    return visible(title), shown


def take_restart(model: RunModel) -> str | None:
    """The reason of a truncation/replacement not yet shown, acknowledging it."""
    with locked(model):
        if not getattr(model, "restarted", False):
            return None
        reason = visible(model.reset_reason)
    model.acknowledge_restart()
    return reason
