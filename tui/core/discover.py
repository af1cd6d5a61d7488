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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dltop.probe import rendezvous
from dltop.probe.decoding import LineDecoder
from dltop.probe.schema import EV_EXCEPTION, EV_EXIT, EV_OOM, EV_SIGNAL, EVENT, STEP
from dltop.tui.core.ending import RunEnding
from dltop.tui.core.stream import Address, StreamError, parse_address, peek

DEFAULT_LOG_DIR = "dltop-runs"
_ENDINGS = (EV_EXIT, EV_EXCEPTION, EV_OOM, EV_SIGNAL)
STATUS_TAIL = 2000  # records of a live run's backlog judged for its status (~20 ms)


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
        try:
            if p.is_file():
                found.append((p.stat().st_mtime, str(p), p))
        except OSError:  # gone meanwhile, or unreadable: not a candidate
            continue
    found.sort(reverse=True)
    return [p for _, _, p in found[: max(0, limit)]]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


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
        started=_number(entry.get("started")),
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
    info.step, info.status = _live_status(records, now=time.time())
    return info


def _live_status(records: list[dict[str, Any]], now: float) -> tuple[int | None, str]:
    """Latest step and status of a live run (its process is alive) from its records."""
    from dltop.tui.core.rules import RuleEngine  # noqa: PLC0415 - only `dltop ls` needs it
    from dltop.tui.core.status import run_state  # noqa: PLC0415

    head = records[:1] if records and records[0].get("kind") == "meta" else []
    engine = RuleEngine()
    try:
        engine.feed_many(head + records[len(head) :][-STATUS_TAIL:])
        state = run_state(engine, now=now, pid_alive=True)
    except Exception:  # a record the rules choke on: fall back to the plain reading
        return _step_and_status(records, now=now, alive=True)
    step = engine.last_step if isinstance(engine.last_step, int) else None
    return step, state.status


def describe_log(path: Path, tail_bytes: int = 1 << 16) -> RunInfo:
    """Read a log's first line and tail for its run id, latest step and how it ended."""
    with open(path, "rb") as f:
        head = f.readline(1 << 16)
        size = os.fstat(f.fileno()).st_size
        mtime = os.fstat(f.fileno()).st_mtime
        start = max(0, size - tail_bytes)
        f.seek(start)
        blob = f.read()
    if start:
        blob = blob[blob.find(b"\n") + 1 :]
    meta_recs = LineDecoder().feed(head if head.endswith(b"\n") else head + b"\n")
    meta = meta_recs[0] if meta_recs and meta_recs[0].get("kind") == "meta" else {}
    dec = LineDecoder()
    records = dec.feed(blob) + dec.finish()
    if size and not meta_recs and not records:  # what `dltop check` calls "not a dltop log"
        raise ValueError('not a dltop log (no JSON record with a "kind")')
    step, status = _step_and_status(records, now=time.time(), alive=None, mtime=mtime)
    run_id = meta.get("run_id")
    return RunInfo(
        source=str(path),
        run_id=str(run_id) if isinstance(run_id, (str, int)) and run_id != "" else path.stem,
        pid=_pid(meta.get("pid")),
        started=_number(meta.get("t")),
        step=step,
        status=status,
        live=False,
        log_path=str(path),
    )


def _step_and_status(
    records: list[dict[str, Any]], now: float, alive: bool | None, mtime: float | None = None
) -> tuple[int | None, str]:
    """Latest step and a status from a run's most recent records (no full replay)."""
    step = None
    ending = RunEnding()
    exited = False
    for rec in records:
        kind = rec.get("kind")
        if kind == STEP and isinstance(rec.get("step"), int):
            step = rec["step"]
        elif kind == EVENT and rec.get("type") in _ENDINGS:
            ending.see(rec)
            exited = exited or rec.get("type") == EV_EXIT
    end = ending.ending
    if end is not None and (exited or end.status == "crashed"):
        return step, end.status
    if alive:
        return step, "running"
    if mtime is not None and now - mtime < 10:
        return step, "running"
    return step, "unknown"


__all__ = [
    "Address",
    "RunInfo",
    "describe_live",
    "describe_log",
    "live_runs",
    "recent_logs",
]
