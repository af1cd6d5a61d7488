"""The header line's content: run identity, status and its age, step, speed, counts, GPU.

Built from the model under its lock at the UI's tick; every field that may quote the log
is made terminal-safe once, in ``HeaderInfo`` (``safetext.escape_fields``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....probe.schema import as_float
from ..diagnosis.verdict import primary_fault
from ..store.run import DELETED_NOTE
from ..text.fmt import age as format_age
from ..text.fmt import compact, compact_bytes
from ..text.fmt import duration as format_duration
from ..text.fmt import rate as format_rate
from ..text.i18n import tr
from ..text.safetext import escape_fields, visible
from ..text.textfit import fit

if TYPE_CHECKING:
    from ..diagnosis.status import RunState
    from ..files.sourcefiles import RankFile
    from ..store.run import RunModel
    from .viewstate import ViewState


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
    verdict: str = (
        ""  # the one-line verdict (``dltop.tui.core.diagnosis.verdict``), the second line
    )
    verdict_level: str = ""  # the severity of the fault it names ("" when none)
    overlay: bool = False  # overlaid runs: "run B" drawn in the run's colour
    verdict_run: bool = False  # the verdict starts with the letter of the run it is about
    lang: str = "en"  # the labels' language (``--lang``): the app's header words them

    def __post_init__(self) -> None:  # every field may quote the log: escaped here, once
        escape_fields(self, multiline=())


_UNSET: Any = object()


def header_info(
    model: RunModel,
    now: float,
    state: ViewState,
    follow: bool,
    error: str | None = None,
    *,
    run_state: RunState | None = _UNSET,
    ranks: str = "",
    run_errors: str = "",
    lang: str = "en",
    verdict: tuple[str, str] | None = None,
    overlay: bool = False,
    verdict_run: bool = False,
) -> HeaderInfo:
    """The header line: identity, status with the age of the last record, speed, counts.
    ``run_state``: the model's status when the caller has it already (one pid check);
    ``run_errors``: the reader errors of a job's other ranks or overlaid runs, those not
    shown (``JobView.error_note``); ``verdict``: (line, severity) when the caller words
    it across ranks (``JobView.verdict``)."""
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
    first_t = getattr(engine, "first_t", None) or as_float(meta.get("t"))
    last_t = store.last_t
    elapsed = format_duration(last_t - first_t) if first_t and last_t else ""
    span = store.step_range()
    if (
        (status in ("finished", "crashed") or facts_rate is None)
        and span is not None
        and span[1] > span[0]
        and first_t
        and last_t
        and last_t > first_t
    ):
        # an ended run (or a log without step times): its average over the whole run; the
        # median of its last steps says how fast its end went, not how fast it trained
        facts_rate = (span[1] - span[0]) / (last_t - first_t)
    mode: list[str] = []
    if error or model.source_error:
        mode.append(str(error or model.source_error))
    if run_errors:
        mode.append(run_errors)
    if model.loading is not None:
        mode.append(f"loading {compact(model.loading * 100, '%')}")
    if state.paused:
        mode.append(tr("paused", lang))
    elif state.window is not None:
        mode.append(tr("window {start}–{end}", lang, start=state.window[0], end=state.window[1]))
    if not follow:
        mode.append(tr("replay", lang))
    if model.resets:
        mode.append(f"restarted ×{model.resets}")
    if getattr(model, "log_deleted", False):
        mode.append(DELETED_NOTE)
    if store.resumes:  # the log went back to an earlier step: the later records replaced
        n = len(store.resumes)
        mode.append(f"resumed at {store.resumes[-1]}" + (f" (×{n})" if n > 1 else ""))
    refused = store.budget.note()  # a log writing a new field name every step
    if refused:
        mode.append(refused)
    events_cut = store.event_log.note()  # a flood of events: how many were kept
    if events_cut:
        mode.append(events_cut)
    gpu = gpu_na_reason(model)
    if verdict is None:  # a single run's own; a job's comes from ``JobView.verdict``
        fault = primary_fault(engine.alerts()) if engine is not None else None
        verdict = (
            model.verdict(now, lang) if engine is not None else "",
            fault.severity if fault is not None else "",
        )
    return HeaderInfo(
        # a long (or hostile) id must not push the status away; cut between words (fit): a
        # run id's date or number is never cut
        run=fit(visible(run), 40),
        host=fit(visible(meta.get("host") or ""), 32),
        pid=str(meta.get("pid") or ""),
        status=status,
        age=tr("last record {age}", lang, age=format_age(age_s)) if age_s is not None else "",
        step=str(last) if last is not None else "—",
        rate=tr("{rate} steps/s", lang, rate=format_rate(facts_rate)) if facts_rate else "",
        elapsed=elapsed,
        skipped=int(model.malformed),
        mode="  ".join(mode),
        reason=str(getattr(st, "reason", "") or "") if st is not None else "",
        dropped=int(getattr(store, "dropped", 0)),
        lost=int(getattr(store, "lost", 0)),
        gpu="GPU n/a" if gpu is not None and gpu != WAITING_FOR_SYS else "",
        ranks=ranks,
        verdict=visible(verdict[0]),
        verdict_level=verdict[1],
        overlay=overlay,
        verdict_run=verdict_run,
        lang=lang,
    )


def rank_note(files: list[RankFile], chosen: RankFile | None) -> str:
    """'rank 0 of 4 files' for a directory source; '' for a single log."""
    if not files or chosen is None:
        return ""
    rank = (
        f"rank {chosen.rank}" if chosen.rank is not None else visible(os.path.basename(chosen.path))
    )
    return f"{rank} of {len(files)} file{'s' if len(files) != 1 else ''}"


def rank_lines(files: list[RankFile], chosen: RankFile | None) -> list[str]:
    """One line per rank file (the shown one marked), for the help screen."""
    out = []
    for f in files:
        mark = "▶" if chosen is not None and f.path == chosen.path else " "
        rank = f"rank {f.rank}" if f.rank is not None else "rank ?"
        out.append(
            f"{mark} {rank:<8} {visible(os.path.basename(f.path))}  {compact_bytes(float(f.size))}"
        )
    return out


WAITING_FOR_SYS = "waiting for system samples"


def gpu_na_reason(model: RunModel) -> str | None:
    """``None`` when NVML readings exist; else why the GPU panel is N/A."""
    store = model.store
    if store.names("sys.gpus."):
        return None
    meta = store.meta or {}
    notes = meta.get("notes")
    for note in notes if isinstance(notes, list) else ():
        if "GPU" in str(note) or "NVML" in str(note):
            return visible(note)
    devices = meta.get("devices")
    devices = devices if isinstance(devices, list) else []
    if any(isinstance(d, dict) and d.get("type") == "cuda" for d in devices):
        return "CUDA device, but no NVML readings in the log yet"
    if store.kinds.get("sys", 0) or devices:
        return "no NVIDIA GPU in this run (CPU): utilisation and GPU memory are N/A"
    return WAITING_FOR_SYS


ERROR_NOTE = 80  # the header's note on other ranks' reader errors: at most this long


def error_note(failed: Sequence[tuple[str, str]], unit: str, width: int = ERROR_NOTE) -> str:
    """The header's word on readers that failed in runs not shown: ``rank 3: <error>``
    for one; ``2 ranks with errors (rank 3, rank 5)`` for several, as many named as fit
    in ``width`` and ``+N`` for the rest. ``failed``: (who, error) pairs, both untrusted
    text (escaped here); never longer than ``width``, whatever the count or the text."""
    if not failed:
        return ""
    if len(failed) == 1:
        who, err = failed[0]
        # cut before escaping (never half an escape), then to the width (escapes grow it)
        return fit(f"{visible(who, 24)}: {visible(err, width)}", width)
    head = f"{len(failed)} {unit}s with errors ("
    names = [fit(visible(who, 24), 24) for who, _ in failed]
    shown: list[str] = []
    for i, name in enumerate(names):
        rest = len(names) - i - 1
        tail = f" +{rest})" if rest else ")"
        # room for this name and, when names are left over, for the "+N" that counts them
        if len(head) + len(", ".join([*shown, name])) + len(tail) > width:
            break
        shown.append(name)
    left = len(names) - len(shown)
    note = head + ", ".join(shown) + (f"{' ' if shown else ''}+{left})" if left else ")")
    return fit(note, width)
