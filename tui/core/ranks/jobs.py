"""A multi-rank job as one run in ``dltop ls`` and for a bare ``dltop``.

Under a launcher every rank writes ``dltop-runs/<job>/rank<R>.jsonl`` (``probe/jobpath.py``)
and serves its own socket. Listed file by file, a 64-rank job fills ``dltop ls`` with 64
lines and pushes every other run off the screen, and a bare ``dltop`` attached to one
rank's socket showed one process of the job. Here the rank files of one folder become
one line (source: the folder, which ``dltop DIR`` opens as a job), and a live rank leads
a bare ``dltop`` to its job's folder.

Only the probe's own naming counts (``rank<R>.jsonl``, see the contract): a folder of
other logs that happen to say "rank" somewhere stays a list of files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..sources.discover import RunInfo

RANK_FILE = re.compile(r"^rank(\d+)\.jsonl$")
# worst first: a job is as bad as its worst rank (one crashed rank stops the job)
_WORST = ("crashed", "stalled", "unknown", "running", "finished")


def is_rank_file(path: str | Path) -> bool:
    return RANK_FILE.match(Path(path).name) is not None


def job_dir(log_path: str | None) -> Path | None:
    """The job folder of a rank's log (``None`` for a log of one process)."""
    if not log_path or not is_rank_file(log_path):
        return None
    return Path(log_path).parent


def group_sources(paths: Iterable[Path]) -> list[Path]:
    """Logs newest first, each job's rank files folded into its folder at the place of
    its newest rank file."""
    out: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        key = p.parent if is_rank_file(p) else p
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def worst_status(statuses: Iterable[str]) -> str:
    found = set(statuses)
    return next((s for s in _WORST if s in found), "unknown")


def merge_job(folder: Path, ranks: list[RunInfo], live: bool) -> RunInfo:
    """One line for a job: its worst status, the step of its slowest rank (how far the
    job has got), its earliest start, and how many ranks it has."""
    steps = [r.step for r in ranks if r.step is not None]
    starts = [r.started for r in ranks if r.started is not None]
    first = min(ranks, key=lambda r: r.started if r.started is not None else float("inf"))
    # the job's verdict: its rank with the most severe fault (else the worst status)
    said = max(ranks, key=lambda r: (_SEVERITY.get(r.severity, 0), -_order(r.status)))
    verdict = said.verdict
    if verdict and len(ranks) > 1:
        rank = said.extra.get("rank")
        verdict = f"rank {rank}: {verdict}" if rank is not None else verdict
    return RunInfo(
        source=str(folder),
        run_id=f"{folder.name} ({len(ranks)} rank{'s' if len(ranks) != 1 else ''})",
        pid=None,
        started=min(starts) if starts else None,
        step=min(steps) if steps else None,
        status=worst_status(r.status for r in ranks),
        live=live,
        log_path=str(folder),
        extra={"ranks": len(ranks), "run_id": first.run_id},
        verdict=verdict,
        severity=said.severity,
    )


_SEVERITY = {"": 0, "info": 0, "warning": 1, "critical": 2}


def _order(status: str) -> int:
    """Worse statuses first (``worst_status``'s order)."""
    return _WORST.index(status) if status in _WORST else len(_WORST)


def group_live(runs: list[RunInfo]) -> list[RunInfo]:
    """Live runs with each job's ranks (by their log's folder) folded into one line, at
    the place of the job's first rank in the list (newest first)."""
    out: list[RunInfo] = []
    jobs: dict[Path, list[RunInfo]] = {}
    for r in runs:
        folder = job_dir(r.log_path)
        if folder is None:
            out.append(r)
            continue
        if folder not in jobs:
            jobs[folder] = []
            out.append(r)  # a placeholder, replaced below
        jobs[folder].append(r)
    merged = {id(members[0]): merge_job(f, members, live=True) for f, members in jobs.items()}
    return [merged.get(id(r), r) for r in out]
