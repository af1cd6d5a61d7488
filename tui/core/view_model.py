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
from dataclasses import dataclass, fields, replace
from typing import Any

from dltop.tui.core import panels
from dltop.tui.core.alerts import CRITICAL, Alert
from dltop.tui.core.chartdata import ChartData, format_value  # noqa: F401 - re-exported
from dltop.tui.core.panels import PANELS, panel_chart, panel_signature  # noqa: F401 - re-exported
from dltop.tui.core.safetext import visible, visible_lines


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
    reason: str = ""  # why the status is what it is (the header's tooltip)
    dropped: int = 0  # records a live socket skipped for this viewer
    lost: int = 0  # records the probe could not write: missing from the log itself
    gpu: str = ""  # "GPU n/a" on a run without NVML readings (shown where the panel is hidden)
    ranks: str = ""  # "rank 0 of 4 files" for a directory of rank logs

    def __post_init__(self) -> None:  # every field may quote the log: escaped here, once
        _escape_fields(self, multiline=())


@dataclass(frozen=True)
class CrashInfo:
    exception: str  # the headline: the exception, the signal, or the status's reason
    step: int | None
    last_values: str
    diagnosis: str
    summary: str
    hint: str = ""
    label: str = "CRASHED"  # "CRASHED", or "KILLED" for a fatal signal

    def __post_init__(self) -> None:  # the exception's text is the log's: escaped here, once
        _escape_fields(self, multiline=("exception", "summary", "diagnosis", "last_values"))


def _cap(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _escape_fields(obj: Any, multiline: tuple[str, ...]) -> None:
    """Every str field of a frozen display record, made terminal-safe (``safetext``)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, str):
            safe = visible_lines(value) if f.name in multiline else visible(value)
            if safe is not value:
                object.__setattr__(obj, f.name, safe)


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
    return f"{icon} {visible(alert.title)}{at}"


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


def new_model(label: str, config: Any | None = None) -> Any:
    from dltop.tui.core.run import RunModel

    return RunModel(label, config)


def model_version(model: Any) -> int:
    return int(model.version)


def alerts_of(model: Any) -> list[Alert]:
    engine = getattr(model, "engine", None)
    return engine.alerts() if engine is not None else []


def window_of(model: Any, state: ViewState) -> tuple[int, int]:
    return panels.window(model.store, state)


def clamp_step(model: Any, step: int) -> tuple[int, str | None] | None:
    """``step`` moved into the run's range, with a note for the person when it had to be;
    ``None`` before the first point (there is nowhere to go yet)."""
    b = panels.bounds(model.store)
    if b is None:
        return None
    first, last = b
    if step < first:
        return first, f"step {step} is before the run (first step {first}): showing {first}"
    if step > last:
        return last, f"step {step} is past the run (last step {last}): showing {last}"
    return step, None


def window_around(model: Any, step: int) -> tuple[int, int] | None:
    """A window centred on ``step`` (clamped to the run), ``None`` before any data."""
    b = panels.bounds(model.store)
    if b is None:
        return None
    first, last = b
    step = min(last, max(first, step))
    half = max(25, (last - first) // 10)
    return max(first, step - half), min(last, step + half)


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


_UNSET: Any = object()


def header_info(
    model: Any,
    now: float,
    state: ViewState,
    follow: bool,
    error: str | None = None,
    *,
    run_state: Any = _UNSET,
    ranks: str = "",
) -> HeaderInfo:
    """The header line: identity, status with the age of the last record, speed, counts.
    ``run_state``: the model's status when the caller has it already (one pid check)."""
    store = model.store
    meta = store.meta or {}
    engine = getattr(model, "engine", None)
    run = str(meta.get("run_id") or os.path.basename(str(model.label)))
    st = model.status(now) if run_state is _UNSET else run_state
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
    if getattr(model, "log_deleted", False):
        mode.append("log file deleted: this viewer holds the only copy")
    if store.resumes:  # the log went back to an earlier step: the later records replaced
        n = len(store.resumes)
        mode.append(f"resumed at {store.resumes[-1]}" + (f" (×{n})" if n > 1 else ""))
    gpu = gpu_na_reason(model)
    return HeaderInfo(
        run=_cap(visible(run), 40),  # a long (or hostile) id must not push the status away
        host=_cap(visible(meta.get("host") or ""), 32),
        pid=str(meta.get("pid") or ""),
        status=status,
        age=f"last record {format_age(age_s)}" if age_s is not None else "",
        step=str(last) if last is not None else "—",
        rate=f"{facts_rate:.3g} steps/s" if facts_rate else "",
        elapsed=elapsed,
        skipped=int(model.malformed),
        mode="  ".join(mode),
        reason=str(getattr(st, "reason", "") or "") if st is not None else "",
        dropped=int(getattr(store, "dropped", 0)),
        lost=int(getattr(store, "lost", 0)),
        gpu="GPU n/a" if gpu is not None and gpu != WAITING_FOR_SYS else "",
        ranks=ranks,
    )


def rank_note(files: list[Any], chosen: Any) -> str:
    """'rank 0 of 4 files' for a directory source; '' for a single log."""
    if not files or chosen is None:
        return ""
    rank = (
        f"rank {chosen.rank}" if chosen.rank is not None else visible(os.path.basename(chosen.path))
    )
    return f"{rank} of {len(files)} file{'s' if len(files) != 1 else ''}"


def rank_lines(files: list[Any], chosen: Any) -> list[str]:
    """One line per rank file (the shown one marked), for the help screen."""
    out = []
    for f in files:
        mark = "▶" if chosen is not None and f.path == chosen.path else " "
        rank = f"rank {f.rank}" if f.rank is not None else "rank ?"
        out.append(f"{mark} {rank:<8} {visible(os.path.basename(f.path))}  {_size(f.size)}")
    return out


def _size(n: int) -> str:
    from dltop.tui.core.chartdata import format_bytes

    return format_bytes(float(n))


# ----------------------------------------------------------------------------- crash, GPU


_FATAL = ("exception", "oom", "signal")
SIGNAL_HELP = {
    "SIGTERM": "a scheduler (time limit, preemption) or a kill asked the run to stop",
    "SIGHUP": "the terminal or ssh session that started the run went away",
    "SIGINT": "interrupted from the keyboard (Ctrl-C)",
}
VANISHED_HELP = (
    "no exception and no exit record: SIGKILL or the kernel's OOM killer leave no trace "
    "(check dmesg and the scheduler's log)"
)


def _fatal_event(store: Any) -> dict[str, Any] | None:
    """The last event that ended the run: an exception, an OOM, or a signal other than an
    interrupt (Ctrl-C is the person's choice, not a crash), unless steps followed it."""
    for e in reversed(store.events):
        kind = e.get("type")
        if kind not in _FATAL:
            continue
        if e.get("interrupted") is True or str(e.get("exc_type") or "").endswith(
            "KeyboardInterrupt"
        ):
            return None
        if kind == "signal":
            if e.get("signal") == "SIGINT":
                return None
            at, last = e.get("step"), store.last_step
            if type(at) is int and last is not None and last > at:
                return None  # the run handled it and went on training
        return e
    return None


def _last_values(store: Any) -> str:
    last: list[str] = []
    for name, unit in (("loss", ""), ("grad_norm", ""), ("lr", ""), ("mem_allocated", "B")):
        v = store.latest(name)
        if v is not None:
            last.append(f"{name} {format_value(v, unit)}")
    return "  ".join(last)


def crash_info(model: Any, run_state: Any = None) -> CrashInfo | None:
    """The crash banner's content: an exception or OOM event (with its diagnosis), a fatal
    signal, or a run the status calls crashed without either (a vanished process)."""
    store = model.store
    ev = _fatal_event(store)
    crashed = getattr(run_state, "status", None) == "crashed"
    if ev is None and not crashed:
        return None
    last = _last_values(store)
    if ev is None:  # crashed, but the log says nothing: the status's reason is all we know
        reason = str(getattr(run_state, "reason", "") or "the run crashed")
        return CrashInfo(reason, store.last_step, last, "process gone", VANISHED_HELP)
    step = ev.get("step") if type(ev.get("step")) is int else store.last_step
    if ev.get("type") == "signal":
        sig = str(ev.get("signal") or "a signal")
        why = SIGNAL_HELP.get(sig, "the process was sent a fatal signal")
        return CrashInfo(
            f"terminated by {sig}", step, last, "stopped from outside", why, "", "KILLED"
        )
    exc = str(ev.get("exc_type") or ev.get("type") or "error")
    msg = str(ev.get("message") or "").strip()[:1024].splitlines()
    text = f"{exc}: {msg[0][:300]}" if msg else exc
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
    hint = f"{hint}  — press a for the checklist" if hint else "press a for the checklist"
    return CrashInfo(text, step, last, diagnosis, summary, hint)


WAITING_FOR_SYS = "waiting for system samples"


def gpu_na_reason(model: Any) -> str | None:
    """``None`` when NVML readings exist; else why the GPU panel is N/A."""
    store = model.store
    if store.names("sys.gpus."):
        return None
    meta = store.meta or {}
    for note in meta.get("notes") or ():
        if "GPU" in str(note) or "NVML" in str(note):
            return visible(note)
    devices = meta.get("devices") or []
    if any(isinstance(d, dict) and d.get("type") == "cuda" for d in devices):
        return "CUDA device, but no NVML readings in the log yet"
    if store.kinds.get("sys", 0) or devices:
        return "no NVIDIA GPU in this run (CPU): utilisation and GPU memory are N/A"
    return WAITING_FOR_SYS


def checklist_view(model: Any, alert: Alert, lang: str) -> tuple[str, list[Any]]:
    """The checklist of an alert, each step marked from the run's facts."""
    from dltop.tui.core.checklists import checklist_for, evaluate

    checklist = checklist_for(alert, lang)
    facts = model.engine.facts() if getattr(model, "engine", None) is not None else {}
    steps = evaluate(checklist, facts, alert)
    same = checklist.title.strip().lower() == alert.title.strip().lower()
    title = f"{alert.title} — {checklist.title}" if checklist.title and not same else alert.title
    if checklist.error:
        title += f" ({checklist.error})"
    # evidence quotes the run (an exception type, a signal name): escaped for the screen
    shown = [replace(c, evidence=visible(c.evidence)) if c.evidence else c for c in steps]
    return visible(title), shown


def take_restart(model: Any) -> str | None:
    """The reason of a truncation/replacement not yet shown, acknowledging it."""
    with locked(model):
        if not getattr(model, "restarted", False):
            return None
        reason = visible(model.reset_reason)
    model.acknowledge_restart()
    return reason
