"""Display data for the dashboard, computed from a RunModel without any UI.

The widgets stay thin: everything they show (header text, status with the age of the last
record, the panels' traces, values at the cursor, the crash summary, the step window of an
alert) is computed here, as pure functions of the model and a small ``ViewState``, so it
is testable without Textual. Callers hold ``model.lock`` (see :func:`locked`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from dltop.tui.core import panels
from dltop.tui.core.alerts import CRITICAL, Alert
from dltop.tui.core.chartdata import ChartData, format_value  # noqa: F401 - re-exported
from dltop.tui.core.panels import PANELS, panel_chart, panel_signature  # noqa: F401 - re-exported


@dataclass(frozen=True)
class ViewState:
    """What the person chose: window, cursor, scales. The app owns one and replaces it."""

    window: tuple[int, int] | None = None  # None: follow the whole run
    cursor: int | None = None
    log_loss: bool = False
    smoothing: bool = True
    paused: bool = False
    selected: str | None = None  # alert key


@dataclass(frozen=True)
class HeaderInfo:
    run: str
    host: str
    pid: str
    status: str
    age: str
    step: str
    rate: str
    elapsed: str
    skipped: int
    mode: str


@dataclass(frozen=True)
class CrashInfo:
    exception: str
    step: int | None
    last_values: str
    diagnosis: str
    summary: str
    hint: str = ""


@contextlib.contextmanager
def locked(model: Any) -> Iterator[None]:
    lock = getattr(model, "lock", None)
    if lock is None:
        yield
        return
    with lock:
        yield


# ----------------------------------------------------------------------------- alerts


def alert_key(alert: Alert) -> str:
    """A stable name for one alert: its id and first step (ticks are saved under it)."""
    return f"{alert.id}@{alert.step if alert.step is not None else '-'}"


def badge_label(alert: Alert) -> str:
    icon = "✖" if alert.severity == CRITICAL else ("▲" if alert.severity == "warning" else "●")
    at = f" @{alert.step}" if alert.step is not None else ""
    return f"{icon} {alert.title}{at}"


def alert_window(alert: Alert, first: int, last: int) -> tuple[int, int]:
    """The step window that shows an alert with context on both sides."""
    s = alert.step if alert.step is not None else last
    e = alert.last_step if alert.last_step is not None else s
    pad = max(20, (e - s) // 2, (last - first) // 20)
    return max(first, s - pad), min(last, max(e + pad, s + 1))


def find_alert(alerts: list[Alert], key: str | None) -> Alert | None:
    for a in alerts:
        if alert_key(a) == key:
            return a
    return None


# ----------------------------------------------------------------------------- header


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    return f"{format_duration(seconds)} ago"


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return ""
    s = int(max(0, seconds))
    if s >= 86400:  # an old log: days and hours say enough
        d, rem = divmod(s, 86400)
        return f"{d}d {rem // 3600}h"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def replace_state(state: ViewState, **changes: Any) -> ViewState:
    return replace(state, **changes)


@dataclass
class Clock:
    """Wall time, or a frozen "now" so snapshots never show a moving age."""

    fixed: float | None = None

    def now(self) -> float:
        return self.fixed if self.fixed is not None else time.time()


# ----------------------------------------------------------------------------- model


def new_model(label: str) -> Any:
    from dltop.tui.core.run import RunModel

    return RunModel(label)


def model_version(model: Any) -> int:
    return int(model.version)


def alerts_of(model: Any) -> list[Alert]:
    engine = getattr(model, "engine", None)
    return engine.alerts() if engine is not None else []


def window_of(model: Any, state: ViewState) -> tuple[int, int]:
    return panels.window(model.store, state)


def window_around(model: Any, step: int) -> tuple[int, int] | None:
    """A window centred on ``step``; ``None`` (the whole run) when the run is short."""
    b = panels.bounds(model.store)
    if b is None:
        return None
    first, last = b
    half = max(25, (last - first) // 10)
    return max(first, step - half), min(last, step + half) if step <= last else step + half


def window_for_alert(model: Any, alert: Alert) -> tuple[int, int] | None:
    b = panels.bounds(model.store)
    if b is None:
        return None
    return alert_window(alert, *b)


def move_cursor(model: Any, state: ViewState, direction: int, columns: int) -> int | None:
    """One character column to the left/right: wide windows move fast, short ones by a step."""
    start, end = window_of(model, state)
    stride = max(1, (end - start + 1) // max(1, columns))
    if state.cursor is None:
        return end if direction < 0 else start
    return min(end, max(start, state.cursor + direction * stride))


def next_alert_key(alerts: list[Alert], selected: str | None) -> str | None:
    """Cycle through the alerts newest first, as the badge bar shows them."""
    if not alerts:
        return None
    ordered = sorted(alerts, key=lambda a: (-(a.step if a.step is not None else -1), -(a.t or 0.0)))
    keys = [alert_key(a) for a in ordered]
    if selected not in keys:
        return keys[0]
    return keys[(keys.index(selected) + 1) % len(keys)]


# ----------------------------------------------------------------------------- header


def header_info(
    model: Any, now: float, state: ViewState, follow: bool, error: str | None = None
) -> HeaderInfo:
    """The header line: identity, status with the age of the last record, speed, counts."""
    store = model.store
    meta = store.meta or {}
    engine = getattr(model, "engine", None)
    run = str(meta.get("run_id") or os.path.basename(str(model.label)))
    st = model.status(now)
    status = getattr(st, "status", "unknown") if st is not None else "unknown"
    age_s = getattr(st, "last_record_age", None) if st is not None else None
    if age_s is None and store.last_t is not None:
        age_s = max(0.0, now - store.last_t)
    last = store.last_step
    facts_rate = None
    step_time = store.series("step_time")
    if step_time is not None and len(step_time):
        recent = step_time.ys[-50:]
        finite = sorted(v for v in recent if v == v and v > 0 and v != math.inf)
        if finite:
            facts_rate = 1.0 / finite[len(finite) // 2]
    first_t = getattr(engine, "first_t", None) or meta.get("t")
    last_t = store.last_t
    elapsed = format_duration(last_t - first_t) if first_t and last_t else ""
    mode: list[str] = []
    if error or model.source_error:
        mode.append(str(error or model.source_error))
    if model.loading is not None:
        mode.append(f"loading {model.loading * 100:.0f}%")
    if state.paused:
        mode.append("paused")
    elif state.window is not None:
        mode.append(f"window {state.window[0]}–{state.window[1]}")
    if not follow:
        mode.append("replay")
    if model.resets:
        mode.append(f"restarted ×{model.resets}")
    return HeaderInfo(
        run=run,
        host=str(meta.get("host") or ""),
        pid=str(meta.get("pid") or ""),
        status=status,
        age=f"last record {format_age(age_s)}" if age_s is not None else "",
        step=str(last) if last is not None else "—",
        rate=f"{facts_rate:.3g} steps/s" if facts_rate else "",
        elapsed=elapsed,
        skipped=int(model.malformed),
        mode="  ".join(mode),
    )


# ----------------------------------------------------------------------------- crash, GPU


def crash_info(model: Any) -> CrashInfo | None:
    """The crash banner's content, when the log records an exception, OOM or fatal signal."""
    store = model.store
    ev = None
    for e in reversed(store.events):
        if e.get("type") in ("exception", "oom"):
            ev = e
            break
    if ev is None:
        return None
    exc = str(ev.get("exc_type") or ev.get("type") or "error")
    msg = str(ev.get("message") or "").strip().splitlines()
    text = f"{exc}: {msg[0][:300]}" if msg else exc
    step = ev.get("step") if type(ev.get("step")) is int else store.last_step
    last: list[str] = []
    for name, unit in (("loss", ""), ("grad_norm", ""), ("lr", ""), ("mem_allocated", "B")):
        v = store.latest(name)
        if v is not None:
            last.append(f"{name} {format_value(v, unit)}")
    diagnosis = summary = ""
    hint = ""
    try:
        from dltop.tui.core.crashdiag import diagnose, last_user_frame

        d = diagnose(ev)
        if d is not None:
            diagnosis, summary = d.title, d.summary
        frame = last_user_frame(ev.get("traceback"))
        if frame:
            hint = f"raised at {frame}"
    except Exception:  # a damaged catalogue must not take the banner down
        pass
    hint = (
        (hint + "  — press a for the checklist").strip(" —")
        if hint
        else "press a for the checklist"
    )
    return CrashInfo(text, step, "  ".join(last), diagnosis, summary, hint)


def gpu_na_reason(model: Any) -> str | None:
    """``None`` when NVML readings exist; else why the GPU panel is N/A."""
    store = model.store
    if store.names("sys.gpus."):
        return None
    meta = store.meta or {}
    for note in meta.get("notes") or ():
        if "GPU" in str(note) or "NVML" in str(note):
            return str(note)
    devices = meta.get("devices") or []
    if any(isinstance(d, dict) and d.get("type") == "cuda" for d in devices):
        return "CUDA device, but no NVML readings in the log yet"
    if store.kinds.get("sys", 0) or devices:
        return "no NVIDIA GPU in this run (CPU): utilisation and GPU memory are N/A"
    return "waiting for system samples"


def checklist_view(model: Any, alert: Alert, lang: str) -> tuple[str, list[Any]]:
    """The checklist of an alert, each step marked from the run's facts."""
    from dltop.tui.core.checklists import checklist_for, evaluate

    checklist = checklist_for(alert, lang)
    facts = model.engine.facts() if getattr(model, "engine", None) is not None else {}
    steps = evaluate(checklist, facts, alert)
    title = f"{alert.title} — {checklist.title}" if checklist.title else alert.title
    if checklist.error:
        title += f" ({checklist.error})"
    return title, list(steps)


def take_restart(model: Any) -> str | None:
    """The reason of a truncation/replacement not yet shown, acknowledging it."""
    with locked(model):
        if not getattr(model, "restarted", False):
            return None
        reason = str(model.reset_reason)
    model.acknowledge_restart()
    return reason
