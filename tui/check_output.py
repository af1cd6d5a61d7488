"""What ``dltop check`` prints: the text report and the ``--json`` document.

Why apart from ``check_cmd.py``: that module finds the logs, runs the rules and picks the
exit code; this one only words results it is given, so the report's look can change
without touching what is diagnosed (``dltop report`` reads :func:`primary` too). The
caller makes the text terminal-safe (``safetext.visible_lines``) before it is printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..probe.encoding import sanitize
from .core.diagnosis.verdict import job_verdict, verdict
from .core.rules.alerts import SEVERITY_RANK, Alert
from .core.text.fmt import number as format_number

if TYPE_CHECKING:
    from .core.diagnosis.status import RunState
    from .core.rules import RuleEngine
    from .core.store.runstore import Store


@dataclass
class FileResult:
    """One log's diagnosis, as ``check_cmd`` produced it and these functions word it."""

    path: str
    engine: RuleEngine
    state: RunState
    skipped: int
    rank: int | None = None
    checklists: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # another tool's log: what was lost
    store: Store | None = None  # the records as the viewer charts them (``collect``)


_STATUS_ORDER = ("crashed", "stalled", "unknown", "running", "finished")
_MARKS = {"yes": "[yes]", "no": "[no] ", None: "[ ? ]"}


def _first_failure(r: FileResult) -> bool:
    """This rank failed first among several (tui/core/ranks/compare.py named it)."""
    return any(a.evidence.get("secondary") is False for a in r.engine.alerts())


def primary(results: list[FileResult]) -> FileResult:
    """The rank whose status is the job's: the worst; among equals, the one that failed first."""
    return min(results, key=lambda r: (_STATUS_ORDER.index(r.state.status), not _first_failure(r)))


def verdict_of(results: list[FileResult], lang: str = "en") -> str:
    """The one verdict line of what was checked (``dltop.tui.core.diagnosis.verdict`` words it):
    the first fault across the ranks, or how the rank the job's status comes from stands."""
    first = primary(results)
    ordered = [first] + [r for r in results if r is not first]
    runs = [(r.rank, r.engine, r.state) for r in ordered]
    return job_verdict(runs, lang) if len(results) > 1 else verdict(first.engine, first.state, lang)


def _alert_json(r: FileResult, a: Alert, multi: bool) -> dict[str, Any]:
    d = a.to_json()
    # the contract's `checklist` is the list of steps; which checklist it is goes beside it
    d["checklist_id"] = d.pop("checklist")
    d["checklist"] = [dict(s) for s in r.checklists.get(id(a), [])]
    if multi:
        d["file"] = r.path
        d["rank"] = r.rank
    return d


def as_json(source: str, results: list[FileResult], said: str) -> dict[str, Any]:
    """``said``: the verdict line (``verdict_of``), computed once for every surface."""
    multi = len(results) > 1
    state = primary(results).state
    out: dict[str, Any] = {
        "source": source,
        "status": state.status,
        "verdict": said,
        "reason": state.reason,
        "steps": max(r.engine.steps for r in results),
        "alerts": [_alert_json(r, a, multi) for r in results for a in r.engine.alerts()],
        "skipped_lines": sum(r.skipped for r in results),
    }
    notes = [n for r in results for n in r.notes]  # what was not read, or lost in conversion
    if notes:
        out["notes"] = notes
    if multi:
        out["files"] = [
            {
                "path": r.path,
                "rank": r.rank,
                "status": r.state.status,
                "steps": r.engine.steps,
                "skipped_lines": r.skipped,
            }
            for r in results
        ]
    return out


def _evidence_line(ev: Mapping[str, Any]) -> str:
    parts = []
    for k, v in ev.items():
        if isinstance(v, (dict, list)) or (isinstance(v, str) and len(v) > 60):
            continue
        parts.append(f"{k}={format_number(v)}")
    return ", ".join(parts)


def text_report(source: str, results: list[FileResult], skipped: list[str], said: str) -> str:
    """The report; its first line is the verdict (``said``), as in ``--json``."""
    state = primary(results).state
    lines = [said, f"dltop check: {source}"]
    lines += [f"skipped: {why}" for why in skipped]
    lines += [f"note:    {n}" for r in results for n in r.notes]
    lines.append(f"status:  {state.status} ({state.reason})")
    malformed = sum(r.skipped for r in results)
    steps = max(r.engine.steps for r in results)
    lines.append(
        f"steps:   {steps}" + (f"  ({malformed} malformed lines skipped)" if malformed else "")
    )
    multi = len(results) > 1
    if multi:
        for r in results:
            lines.append(
                f"  {os.path.basename(r.path)} (rank {r.rank}): {r.state.status}, {r.engine.steps} steps"
            )
        first = [
            a for r in results for a in r.engine.alerts() if a.evidence.get("secondary") is False
        ]
        if first:
            lines.append(
                f"first failure: rank {first[0].evidence.get('first_rank')}: {first[0].title}"
            )
    alerts = [(r, a) for r in results for a in r.engine.alerts()]
    if not alerts:
        lines.append("alerts:  none")
        return "\n".join(lines) + "\n"
    lines.append(f"alerts:  {len(alerts)}")
    # worst first; among equals, a failure that followed another rank's comes after it
    order = sorted(
        alerts,
        key=lambda ra: (-SEVERITY_RANK[ra[1].severity], ra[1].evidence.get("secondary") is True),
    )
    printed: dict[tuple[str, ...], str] = {}  # a checklist's lines -> the alert that showed them
    for r, a in order:
        lines.append("")
        where = f"step {a.step}" if a.step is not None else "no step"
        state_word = "active" if a.active else f"cleared after step {a.last_step}"
        rank = f" [rank {r.rank}]" if multi else ""
        lines.append(f"{a.severity.upper():8} {a.id}{rank}  {where}  {a.title}  ({state_word})")
        lines.append(f"  {a.message}")
        ev = _evidence_line(a.evidence)
        if ev:
            lines.append(f"  evidence: {ev}")
        steps_ = r.checklists.get(id(a), [])
        if steps_:
            # the same checklist with the same marks (a run resumed after each of its NaNs)
            # is printed once: 20 k copies made a 2 MB log a 26 MB report
            shown = tuple(_checklist_lines(steps_))
            if shown in printed:
                lines.append(f"  checklist: as for {printed[shown]} above")
            else:
                printed[shown] = f"{a.id}{rank} at {where}"
                lines.append("  checklist:")
                lines.extend(shown)
    return "\n".join(lines) + "\n"


def _checklist_lines(steps: list[dict[str, Any]]) -> list[str]:
    """A checklist's steps as printed: mark, question, evidence, and the fix under it."""
    out: list[str] = []
    for s in steps:
        tail = f"  — {s['evidence']}" if s["evidence"] else ""
        out.append(f"    {_MARKS.get(s['mark'], '[ ? ]')} {s['text']}{tail}")
        for n, line in enumerate((s.get("how") or "").splitlines()):
            out.append(f"          {'fix: ' if n == 0 else '     '}{line}")
    return out


def checklists(r: FileResult, lang: str) -> dict[int, list[dict[str, Any]]]:
    """Checklist steps with automatic marks, per alert (by id()): the ``checklist`` of each
    alert in ``--json``; empty without the checklist module."""
    try:
        from .core.diagnosis.checklist_eval import evaluate  # noqa: PLC0415
        from .core.diagnosis.checklists import checklist_for  # noqa: PLC0415
    except ImportError:
        return {}
    facts = r.engine.facts()
    out: dict[int, list[dict[str, Any]]] = {}
    for a in r.engine.alerts():
        try:
            cl = checklist_for(a, lang)
            out[id(a)] = [
                {
                    "id": c.step.id,
                    "text": c.step.text,
                    "mark": c.mark,
                    "evidence": c.evidence,
                    "why": c.step.why,
                    "how": c.step.how,
                }
                for c in evaluate(cl, facts, a)
            ]
        except Exception as exc:  # a damaged data file must not hide the diagnosis
            out[id(a)] = [
                {
                    "id": "unavailable",
                    "text": f"(checklist unavailable: {exc})",
                    "mark": None,
                    "evidence": None,
                    "why": None,
                    "how": None,
                }
            ]
    return out


def error_json(source: str | None, message: str, hint: str) -> dict[str, Any]:
    """``--json``'s one object for a check that could not run: a script piping stdout to
    ``jq`` reads ``error`` instead of choking on an empty input (the line on stderr stays
    for the person at the terminal)."""
    out: dict[str, Any] = {"source": source, "status": "unknown", "steps": 0, "alerts": []}
    out["error"] = message
    if hint:
        out["hint"] = hint
    return out


def print_json(out: dict[str, Any]) -> None:
    """Exact text, JSON-escaped; ``ensure_ascii``: no control or bidi char reaches a
    terminal. A closed pipe (``| head``) ends the output quietly."""
    try:
        sys.stdout.write(json.dumps(sanitize(out), indent=2, ensure_ascii=True) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass
