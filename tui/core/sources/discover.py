"""Finding runs: what a bare ``dltop`` opens, and what ``dltop ls`` lists.

Live runs announce themselves in the probe's private rendezvous directory (a socket
and a small JSON beside it); finished ones leave logs, by default under
``./dltop-runs``, found at any depth (``rglob``: runs kept in subfolders count too),
newest first by modification time. ``dltop ls`` and a bare ``dltop`` (see
``dltop.tui.view_cmd.resolve_source``) use the same functions, so they agree on what
exists.

Nothing here trusts what it reads: an entry or a log written by something else, or
cut short, is shown with ``?``/``-`` for what cannot be read, or skipped, and never
stops the listing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....probe import rendezvous
from ....probe.schema import Records
from ..files.logbytes import decode_blob
from ..files.sourcefiles import is_regular, open_log
from ..ranks.jobs import job_dir
from .socket_source import Address, StreamError, parse_address, peek

DEFAULT_LOG_DIR = "dltop-runs"
# worst first: a job is as bad as its worst rank (one crashed rank stops the job)
_WORST = ("crashed", "stalled", "unknown", "running", "finished")
STATUS_TAIL = 2000  # records of a live run's backlog judged for its status (~20 ms)
# a log up to this size is read whole for its line (~0.1 s), so that `ls` says what
# `check` says; a larger one is judged from its first line and its last TAIL_BYTES
WHOLE_BYTES = 4 << 20
TAIL_BYTES = 1 << 16


@dataclass
class RunInfo:
    """One line of ``dltop ls``."""

    source: str  # what to pass to ``dltop``: unix:PATH or a log path
    run_id: str
    pid: int | None
    started: float | None
    step: int | None
    status: str  # running / stalled / finished / crashed / unknown
    live: bool
    log_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    verdict: str = (
        ""  # the one-line verdict (``dltop.tui.core.diagnosis.verdict``), as `check` says it
    )
    severity: str = ""  # of the fault the verdict names ("" when none)


def live_runs() -> list[dict[str, Any]]:
    """Registered live runs on this host, newest first (stale entries are cleaned)."""
    return rendezvous.list_runs()


def recent_logs(folder: str | os.PathLike[str] = DEFAULT_LOG_DIR, limit: int = 20) -> list[Path]:
    """``*.jsonl`` logs under ``folder`` (any depth), newest first by modification time."""
    d = Path(folder)
    if not d.is_dir():
        return []
    found: list[tuple[float, str, Path]] = []
    for p in d.rglob("*.jsonl"):
        st = is_regular(p)  # a FIFO or device named *.jsonl: skipped, never opened
        if st is not None:
            found.append((st.st_mtime, str(p), p))
    found.sort(reverse=True)
    return [p for _, _, p in found[: max(0, limit)]]


def _pid(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def describe_live(entry: dict[str, Any], timeout: float = 0.5) -> RunInfo:
    """Peek at a live run's socket for its latest step and status.

    The status is the viewer's own verdict (``RuleEngine`` + ``run_state``) on the tail
    of what the socket serves a new viewer: a run whose process writes heartbeats but no
    steps shows ``stalled``, as in the dashboard.
    """
    sock = entry["socket"]
    info = RunInfo(
        source=f"unix:{sock}",
        run_id=str(entry.get("run_id")),
        pid=_pid(entry.get("pid")),
        started=rendezvous.finite_number(entry.get("started")),
        step=None,
        status="running",
        live=True,
        log_path=_text(entry.get("log_path")),
    )
    try:
        records = peek(parse_address(info.source), timeout=timeout)
    except StreamError as exc:
        info.status = "unknown"
        info.extra["error"] = str(exc)
        return info
    _judge(
        info,
        records[:1] if records and records[0].get("kind") == "meta" else [],
        records,
        now=time.time(),
        pid_alive=True,
    )
    return info


def _judge(
    info: RunInfo,
    head: Records,
    records: Records,
    now: float,
    pid_alive: bool | None,
    whole: bool = False,
) -> None:
    """The run's step, status and verdict, as ``dltop check`` words them (the rules
    engine, ``status.run_state`` and ``verdict``): over the whole log when ``whole``, else
    over its meta and last records. A record the rules choke on leaves ``?``."""
    from ..diagnosis.status import run_state  # noqa: PLC0415
    from ..diagnosis.verdict import primary_fault, verdict  # noqa: PLC0415
    from ..rules import RuleEngine  # noqa: PLC0415
    from ..store.pipeline import feed  # noqa: PLC0415 - only `dltop ls` needs it

    engine = RuleEngine()
    try:
        feed(head + records[len(head) :][-STATUS_TAIL:] if not whole else records, engine)
        if whole:
            engine.finish()  # the log as it is now, judged to its end as `check` judges it
        state = run_state(engine, now=now, pid_alive=pid_alive)
        said = verdict(engine, state)
    except Exception as exc:  # a bug in one rule must not stop the listing
        info.status = "unknown"
        info.extra["error"] = f"rules failed: {type(exc).__name__}"
        return
    info.step = engine.last_step if isinstance(engine.last_step, int) else None
    info.status = state.status
    info.verdict = said if whole else f"{said} (from the log's last records)"
    fault = primary_fault(engine.alerts())
    info.severity = fault.severity if fault is not None else ""


def describe_log(
    path: Path, tail_bytes: int = TAIL_BYTES, whole_bytes: int = WHOLE_BYTES
) -> RunInfo:
    """A log's run id, latest step, status and verdict: the whole log through the rules
    when it is small (``whole_bytes``), else its first line and last ``tail_bytes``.

    Opened as every log is (``sourcefiles.open_log``: ``O_NONBLOCK``, then ``fstat``): a
    FIFO or device put in the log's place after the listing saw a regular file raises
    ``SourceError`` instead of blocking ``dltop ls`` forever on a writer that never comes."""
    with os.fdopen(open_log(str(path)), "rb") as f:
        head = f.readline(1 << 16)
        size = os.fstat(f.fileno()).st_size
        whole = size <= whole_bytes
        start = 0 if whole else max(0, size - tail_bytes)
        f.seek(start)
        blob = f.read(size - start)  # what it held when we looked: a growing log ends
    if start:
        blob = blob[blob.find(b"\n") + 1 :]
    meta_recs, _ = decode_blob(head)
    meta = meta_recs[0] if meta_recs and meta_recs[0].get("kind") == "meta" else {}
    records, _ = decode_blob(blob)
    if size and not meta_recs and not records:  # what `dltop check` calls "not a dltop log"
        raise ValueError('not a dltop log (no JSON record with a "kind")')
    run_id = meta.get("run_id")
    rank = meta.get("rank")
    info = RunInfo(
        source=str(path),
        run_id=str(run_id) if isinstance(run_id, (str, int)) and run_id != "" else path.stem,
        pid=_pid(meta.get("pid")),
        started=rendezvous.finite_number(meta.get("t")),
        step=None,
        status="unknown",
        live=False,
        log_path=str(path),
        extra={"rank": rank} if type(rank) is int else {},
    )
    from ..diagnosis.status import local_pid_alive  # noqa: PLC0415

    head_recs = [] if whole or not meta else [meta]
    _judge(info, head_recs, records, now=time.time(), pid_alive=local_pid_alive(meta), whole=whole)
    return info


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


__all__ = [
    "Address",
    "RunInfo",
    "describe_live",
    "describe_log",
    "group_live",
    "live_runs",
    "merge_job",
    "recent_logs",
]
