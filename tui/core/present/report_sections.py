"""The sections of ``dltop report``'s Markdown, one function each (see ``report.py``).

Each takes what the viewer already computed and words it for an issue tracker; every
string that comes from the log goes through ``mdtext`` (code spans for identifiers and
commands, escaped prose for messages, fenced blocks for tracebacks). Headings are fixed
English so that tools and tests can find the sections; checklist text follows ``--lang``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....probe.schema import Record
from ..diagnosis.checklist_eval import evaluate
from ..diagnosis.checklists import checklist_for
from ..rules.alerts import SEVERITY_RANK, Alert
from ..rules.crashdiag import last_user_frame
from ..text import mdtext as md
from ..text.fmt import duration, nbytes, styled
from ..text.fmt import number as fmt_number
from .crash_view import store_crash_info
from .view_model import badge_label

if TYPE_CHECKING:
    from ..diagnosis.status import RunState
    from ..rules.facts import Fact
    from ..store.runstore import Store


@dataclass
class ReportAlert:
    """One alert with what its checklist is marked from and what the person ticked."""

    alert: Alert
    facts: dict[str, Fact]
    ticked: set[str] = field(default_factory=set)
    rank: int | None = None  # a directory of rank logs: whose alert it is


@dataclass
class ReportRun:
    """Everything a report says about one run; ``store`` is the rank charted."""

    source: str
    store: Store
    state: RunState | None
    alerts: list[ReportAlert]
    lang: str = "en"
    skipped_lines: int = 0
    notes: list[str] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)  # one line per rank file of a directory
    rules_error: str | None = None
    verdict: str = (
        ""  # the one-line verdict (``dltop.tui.core.diagnosis.verdict``), the report's top
    )
    # the panels beyond the built-in ones (``+acc``: extra_panels); None: every series the
    # log has beyond them but the system's readings, up to MAX_EXTRA (a report is read
    # later, by someone who could not pick)
    panels: tuple[str, ...] | None = None


HEADINGS = ("Summary", "Environment", "How the run ended", "Last values", "Alerts", "Charts")
MARKS = {"yes": "✓ yes", "no": "✗ no", None: "? cannot tell"}
MAX_FRAMES = 20  # innermost traceback frames shown: where it broke, not the whole stack
MAX_MESSAGE = 2000  # characters of an exception message
MAX_VALUES = 40  # rows of the last-values table
MAX_DEVICES = 16
# the last-values table: these first, in this order, then the user's own metrics
FIRST_VALUES = (
    "loss", "eval.loss", "grad_norm", "lr", "step_time", "data_time", "compute_time",
    "forward_time", "backward_time", "samples_per_s", "mem_allocated", "mem_reserved",
    "mem_limit", "sys.rss", "sys.gpus.0.util",
)  # fmt: skip


def _when(t: Any) -> str:
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < 1e11:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
    return "unknown"


def _meta(meta: Record | None, key: str) -> object:
    return (meta or {}).get(key)


def heading(meta: Record | None, source: str, verdict: str = "") -> str:
    """The title, then the verdict (the same line ``dltop check`` starts with)."""
    run_id = _meta(meta, "run_id")
    title = md.code(run_id, 120) if isinstance(run_id, str) and run_id else md.code(source, 120)
    top = f"# dltop report: {title}\n\n"
    if verdict:
        top += f"**Verdict: {md.text(verdict, 600)}**\n\n"
    return top + f"Source: {md.code(source, 500)}"


def summary(state: RunState | None, store: Store, alerts: list[Alert], run: ReportRun) -> str:
    status = state.status if state is not None else "unknown"
    reason = md.text(state.reason) if state is not None else "the rules engine did not run"
    lines = ["## Summary", "", f"**Status: {status}**: {reason}."]
    span = store.step_range()
    steps = f"{store.steps} step records" + (f", steps {span[0]} to {span[1]}" if span else "")
    lines.append(f"- Steps: {steps}.")
    counts = {s: sum(1 for a in alerts if a.severity == s) for s in ("critical", "warning", "info")}
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    lines.append(f"- Alerts: {len(alerts)}" + (f" ({said})." if said else "."))
    if run.skipped_lines:
        lines.append(f"- {run.skipped_lines} malformed lines skipped.")
    if store.lost:
        lines.append(f"- {store.lost} records not in the log (the probe fell behind).")
    events_cut = store.event_log.note()  # a flood of events: the report kept some of them
    if events_cut:
        lines.append(f"- Events: {md.text(events_cut)}.")
    in_meta = _meta(store.meta, "notes")
    said_in_meta = in_meta if isinstance(in_meta, list) else []
    lines += [f"- Note: {md.text(n, 300)}" for n in run.notes if n not in said_in_meta]
    if run.rules_error:
        lines.append(f"- No diagnosis: {md.text(run.rules_error, 300)}")
    return "\n".join(lines)


def _devices(meta: Record | None) -> str:
    devices = _meta(meta, "devices")
    if not isinstance(devices, list) or not devices:
        return "unknown"
    out: list[str] = []
    for d in devices[:MAX_DEVICES]:
        if not isinstance(d, dict):
            continue
        if d.get("type") == "cuda":
            bits = [f"cuda:{d['index']}" if isinstance(d.get("index"), int) else "cuda"]
            if isinstance(d.get("mem_total"), (int, float)):
                bits.append(nbytes(d["mem_total"]))
            if d.get("capability"):
                bits.append(f"capability {md.text(d['capability'], 20)}")
            out.append(f"{md.code(d.get('name') or 'GPU', 100)} ({', '.join(bits)})")
        elif d.get("type") == "cpu":
            cpus = d.get("cpus")
            out.append("no GPU: CPU" + (f", {cpus} cores" if isinstance(cpus, int) else ""))
    more = len(devices) - MAX_DEVICES
    return "; ".join(out) + (f"; {more} more" if more > 0 else "") if out else "unknown"


def environment(meta: Record | None, store: Store, ranks: list[str]) -> str:
    def val(key: str) -> str:
        v = _meta(meta, key)
        return md.code(v, 200) if isinstance(v, (str, int, float)) and v != "" else "unknown"

    argv = _meta(meta, "argv")
    command = (
        md.code(" ".join(shlex.quote(str(a)) for a in argv[:64]), 1000)
        if isinstance(argv, list) and argv
        else "unknown"
    )
    cuda = _meta(meta, "cuda")
    # the probe writes null for a CPU build of torch; no torch on record: nobody knows
    cuda_text = md.code(cuda, 40) if isinstance(cuda, str) else "unknown"
    if cuda is None and isinstance(_meta(meta, "torch"), str):
        cuda_text = "none (a CPU build of torch)"
    started = _meta(meta, "t")
    elapsed = ""
    if isinstance(started, (int, float)) and store.last_t is not None:
        elapsed = duration(store.last_t - started)
    lines = [
        "## Environment",
        "",
        f"- Host: {val('host')}, pid {val('pid')}, platform {val('platform')}",
        f"- Python: {val('python')}",
        f"- torch: {val('torch')}, CUDA: {cuda_text}",
        f"- Devices: {_devices(meta)}",
        f"- dltop (in the log): {val('dltop')}",
        f"- Command: {command}",
        f"- Working directory: {val('cwd')}",
        f"- Rank: {val('rank')} of world size {val('world_size')}",
        f"- Started: {_when(started)}" + (f", last record after {elapsed}" if elapsed else ""),
    ]
    notes = _meta(meta, "notes")
    if isinstance(notes, list):
        lines += [f"- Probe note: {md.text(n, 300)}" for n in notes[:8]]
    if meta is None:
        lines.append(
            "- The log has no meta record (another tool's log, or its first line is lost)."
        )
    if ranks:
        lines += ["", "Rank files:", ""] + [f"- {md.text(r, 300)}" for r in ranks]
    return "\n".join(lines)


def _traceback(ev: Record) -> str:
    """Python's own layout, the innermost ``MAX_FRAMES`` frames, each line bounded."""
    lines = ["Traceback (most recent call last):"]
    tb = ev.get("traceback")
    recorded = ev.get("traceback_omitted")
    omitted = recorded if type(recorded) is int and 0 < recorded < 1 << 62 else 0
    if isinstance(tb, list):
        omitted += max(0, len(tb) - MAX_FRAMES)
        if omitted:
            lines.append(f"  ... {omitted} outer frames not shown")
        for fr in tb[-MAX_FRAMES:]:
            if isinstance(fr, dict):
                lines.append(
                    f'  File "{str(fr.get("file", "?"))[-200:]}", line {str(fr.get("line", "?"))[:12]}'
                    f", in {str(fr.get('func', '?'))[:100]}"
                )
                if fr.get("code"):
                    lines.append(f"    {str(fr['code'])[:200]}")
            elif isinstance(fr, str):
                lines.append(fr[-400:].rstrip("\n"))
    elif isinstance(tb, str):
        lines.append(tb[-4000:].rstrip("\n"))
    cause = ev.get("cause")
    if isinstance(cause, dict):
        lines.append(
            f"(caused by {str(cause.get('exc_type'))[:200]}: {str(cause.get('message'))[:500]})"
        )
    message = str(ev.get("message") or "")
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + f"… [{len(message) - MAX_MESSAGE} chars cut]"
    lines.append(f"{str(ev.get('exc_type') or ev.get('type'))[:200]}: {message}")
    return "\n".join(lines)


def ending(store: Store, state: RunState | None) -> str:
    lines = ["## How the run ended", ""]
    info = store_crash_info(store, state)
    if info is None:
        status = state.status if state is not None else "unknown"
        reason = md.text(state.reason) if state is not None else "unknown"
        lines.append(f"The run is **{status}**: {reason}. No crash is on record.")
        return "\n".join(lines)
    at = f" at step {info.step}" if info.step is not None else ""
    lines.append(f"**{info.label}{at}**: {md.code(info.exception, 400)}")
    lines.append("")
    if info.diagnosis:
        lines.append(f"- Diagnosis: **{md.text(info.diagnosis)}**: {md.text(info.summary, 1000)}")
    ev = state.fatal if state is not None else None
    where = last_user_frame(ev.get("traceback")) if ev is not None else None
    if where:
        lines.append(f"- Raised at {md.code(where, 300)}")
    if info.last_values:
        lines.append(f"- Last values: {md.text(info.last_values)}")
    if ev is not None and ev.get("type") in ("exception", "oom"):
        lines += ["", "Exception (innermost frames):", "", md.fenced(_traceback(ev), "pytb")]
        memory = ev.get("memory")
        if isinstance(memory, dict) and memory:
            lines += ["", "Memory when it failed:", ""]
            for k, v in list(memory.items())[:16]:
                shown = nbytes(v) if isinstance(v, int) and not isinstance(v, bool) else v
                lines.append(f"- {md.code(k, 40)}: {md.text(shown, 100)}")
    return "\n".join(lines)


_BYTES = frozenset(("mem_allocated", "mem_reserved", "mem_limit", "sys.rss"))
_SECONDS = frozenset(("step_time", "data_time", "compute_time", "forward_time", "backward_time"))


def _style(name: str) -> str:
    return "bytes" if name in _BYTES else ("seconds" if name in _SECONDS else "number")


def last_values(store: Store) -> str:
    names = [n for n in FIRST_VALUES if store.series(n) is not None]
    names += sorted(
        n for n in store.names("", "step") + store.names("eval.") if n not in names and n != "t"
    )
    lines = ["## Last values", ""]
    if not names:
        lines.append("The log holds no values yet.")
        return "\n".join(lines)
    lines += ["| metric | last value | at step | first NaN/Inf at step |", "|---|---|---|---|"]
    for n in names[:MAX_VALUES]:
        s = store.series(n)
        last = s.last() if s is not None else None
        if s is None or last is None:
            continue
        bad = s.first_nonfinite()
        lines.append(
            f"| {md.text(n, 80)} | {md.text(styled(last[1], _style(n)))} | {last[0]} | "
            f"{bad[0] if bad else ''} |"
        )
    if len(names) > MAX_VALUES:
        lines += ["", f"{len(names) - MAX_VALUES} more metrics are in the log, not listed here."]
    refused = store.budget.note()  # fields past the store's limit: neither charted nor listed
    if refused:
        lines += ["", f"Left out of this report and the charts: {refused}."]
    return "\n".join(lines)


def _evidence(ev: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in list(ev.items())[:24]:
        if isinstance(v, dict):
            shown = ", ".join(f"{sk}={fmt_number(sv)}" for sk, sv in list(v.items())[:12])
        elif isinstance(v, list):
            shown = ", ".join(fmt_number(x) for x in v[:12]) + (" …" if len(v) > 12 else "")
        else:
            shown = fmt_number(v)
        out.append(f"- {md.code(k, 60)}: {md.text(shown, 300)}")
    return out


def _order(ra: ReportAlert) -> tuple[int, bool, int]:
    a = ra.alert
    return (-SEVERITY_RANK[a.severity], a.evidence.get("secondary") is True, a.step or 0)


def _one_alert(n: int, ra: ReportAlert, lang: str, key: Callable[[Alert], str]) -> list[str]:
    a = ra.alert
    where = f"step {a.step}" if a.step is not None else "no step"
    state = "active" if a.active else f"cleared after step {a.last_step}"
    rank = f", rank {ra.rank}" if ra.rank is not None else ""
    lines = [
        f"### {n}. {md.text(badge_label(a))}",
        "",
        f"**{a.severity}** {md.code(a.id, 60)} at {where}, {state}{rank}. {md.text(a.message, 1000)}",
    ]
    if a.evidence:
        lines += ["", "Evidence:", "", *_evidence(a.evidence)]
    checklist = checklist_for(a, lang)
    steps = evaluate(checklist, ra.facts, a)
    ticked = sum(1 for c in steps if c.step.id in ra.ticked)
    lines += [
        "",
        f"Checklist: **{md.text(checklist.title)}** ({ticked} of {len(steps)} ticked in the "
        f"viewer, sidecar {md.code(key(a), 120)})",
    ]
    if checklist.error:
        lines.append(f"(a checklist file could not be read: {md.text(checklist.error, 300)})")
    lines.append("")
    for c in steps:
        box = "x" if c.step.id in ra.ticked else " "
        said = f" — {md.text(c.evidence, 300)}" if c.evidence else ""
        lines.append(f"- [{box}] **{MARKS.get(c.mark, MARKS[None])}** {md.text(c.step.text)}{said}")
        how = (c.step.how or "").strip()
        if how and "\n" not in how:
            lines.append(f"  - fix: {md.code(how, 400)}")
        elif how:
            lines += ["", md.fenced(how, "python", indent="  "), ""]
    return lines


def alerts(entries: list[ReportAlert], lang: str, key: Callable[[Alert], str]) -> str:
    lines = ["## Alerts", ""]
    if not entries:
        lines.append("None: dltop saw nothing wrong in this log.")
        return "\n".join(lines)
    lines.append(
        "Checklist marks come from the log: ✓ yes, ✗ no, ? the log cannot tell. "
        "[x] is a step ticked in the viewer (space)."
    )
    for n, ra in enumerate(sorted(entries, key=_order), 1):
        lines += ["", *_one_alert(n, ra, lang, key)]
    return "\n".join(lines)


def charts(titles: list[tuple[str, str]], empty: list[str], buckets: int) -> str:
    lines = ["## Charts", ""]
    if not titles:
        lines.append("No chart: the log holds no step values.")
        return "\n".join(lines)
    lines.append(
        f"The viewer's panels, each decimated to {buckets} min/max buckets over the whole run "
        "(no spike is averaged away); a red ✕ marks a bucket holding a NaN or Inf."
    )
    for title, link in titles:
        lines += ["", f"![{md.text(title)}]({link})"]
    if empty:
        lines += ["", f"No data for: {md.text(', '.join(empty))}."]
    return "\n".join(lines)


def footer(now: float) -> str:
    try:
        from importlib.metadata import version

        ours = version("dltop-monitor")
    except Exception:
        ours = "unknown"
    return f"---\n*Written by `dltop report` (dltop {md.text(ours)}) at {_when(now)}.*"
