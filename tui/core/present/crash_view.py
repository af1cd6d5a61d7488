"""The crash banner's content: what ended the run, at which step, the last values, why.

How the run ended is ``ending``'s decision; this module only words it for the banner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ....probe.schema import step_or
from ..rules.ending import signal_name
from ..text.fmt import compact as format_value
from ..text.safetext import escape_fields
from ..text.textfit import fit

if TYPE_CHECKING:
    from ..diagnosis.status import RunState
    from ..store.run import RunModel
    from ..store.runstore import Store


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
        escape_fields(self, multiline=("exception", "summary", "diagnosis", "last_values"))


SIGNAL_HELP = {
    "SIGTERM": "a scheduler (time limit, preemption) or a kill asked the run to stop",
    "SIGHUP": "the terminal or ssh session that started the run went away",
    "SIGINT": "interrupted from the keyboard (Ctrl-C)",
}
VANISHED_HELP = (
    "no exception and no exit record: SIGKILL or the kernel's OOM killer leave no trace "
    "(check dmesg and the scheduler's log)"
)


def _last_values(store: Store) -> str:
    last: list[str] = []
    for name, unit in (("loss", ""), ("grad_norm", ""), ("lr", ""), ("mem_allocated", "B")):
        v = store.latest(name)
        if v is not None:
            last.append(f"{name} {format_value(v, unit)}")
    return "  ".join(last)


def crash_info(model: RunModel, run_state: RunState | None = None) -> CrashInfo | None:
    """The crash banner's content: an exception or OOM event (with its diagnosis), a fatal
    signal, or a run the status calls crashed without either (a vanished process).
    ``run_state``: the model's status when the caller has it (else asked here)."""
    return store_crash_info(model.store, run_state or model.status())


def store_crash_info(store: Store, run_state: RunState | None = None) -> CrashInfo | None:
    """:func:`crash_info` of a bare store (``dltop report``, which reads without a model).
    Which event ended the run is the run status's (``RunState.fatal``, decided by
    ``ending.RunEnding``): the banner never decides it again."""
    ev = run_state.fatal if run_state is not None else None
    crashed = getattr(run_state, "status", None) == "crashed"
    if ev is None and not crashed:
        return None
    last = _last_values(store)
    if ev is None:  # crashed, but the log says nothing: the status's reason is all we know
        reason = str(getattr(run_state, "reason", "") or "the run crashed")
        return CrashInfo(reason, store.last_step, last, "process gone", VANISHED_HELP)
    step = step_or(ev, store.last_step)
    if ev.get("type") == "signal":
        sig = signal_name(ev, "a signal")
        why = SIGNAL_HELP.get(sig, "the process was sent a fatal signal")
        return CrashInfo(
            f"terminated by {sig}", step, last, "stopped from outside", why, "", "KILLED"
        )
    exc = str(ev.get("exc_type") or ev.get("type") or "error")
    msg = str(ev.get("message") or "").strip()[:1024].splitlines()
    text = f"{exc}: {fit(msg[0], 300)}" if msg else exc  # between words: numbers stay whole
    diagnosis = summary = ""
    hint = ""
    try:
        from ..rules.crashdiag import diagnose, last_user_frame

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
