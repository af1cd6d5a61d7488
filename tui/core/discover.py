"""Finding runs: what a bare ``dltop`` opens, and what ``dltop ls`` lists.

Live runs announce themselves in the probe's private rendezvous directory (a socket
and a small JSON beside it); finished ones leave logs, by default under
``./dltop-runs``. Bare ``dltop`` attaches to the newest live run, else opens the
newest log, else explains how to start one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dltop.probe import rendezvous
from dltop.probe.schema import EV_EXCEPTION, EV_EXIT, EV_OOM, EVENT, STEP, LineDecoder
from dltop.tui.core.stream import Address, StreamError, is_stream_spec, parse_address, peek

DEFAULT_LOG_DIR = "dltop-runs"
_ENDINGS = (EV_EXIT, EV_EXCEPTION, EV_OOM)
NOTHING_TO_SHOW = (
    "no live run and no log under ./dltop-runs: start a training with the probe "
    "(`with Probe(...) as probe:`; see README.md) or give a log: dltop PATH.jsonl"
)


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


def recent_logs(folder: str = DEFAULT_LOG_DIR, limit: int = 20) -> list[Path]:
    """``*.jsonl`` logs in ``folder``, newest first."""
    d = Path(folder)
    if not d.is_dir():
        return []
    logs = [p for p in d.glob("*.jsonl") if p.is_file()]
    logs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return logs[:limit]


def default_source(folder: str = DEFAULT_LOG_DIR) -> str | None:
    """What a bare ``dltop`` opens: the newest live run's socket, else the newest log."""
    runs = live_runs()
    if runs:
        return f"unix:{runs[0]['socket']}"
    logs = recent_logs(folder, limit=1)
    return str(logs[0]) if logs else None


def describe_live(entry: dict[str, Any], timeout: float = 0.5) -> RunInfo:
    """Peek at a live run's socket for its latest step and status."""
    sock = entry["socket"]
    info = RunInfo(
        source=f"unix:{sock}",
        run_id=str(entry.get("run_id")),
        pid=entry.get("pid"),
        started=entry.get("started"),
        step=None,
        status="running",
        live=True,
        log_path=entry.get("log_path"),
    )
    try:
        records = peek(parse_address(info.source), timeout=timeout)
    except StreamError as exc:
        info.status = "unknown"
        info.extra["error"] = str(exc)
        return info
    info.step, info.status = _step_and_status(records, now=time.time(), alive=True)
    return info


def describe_log(path: Path, tail_bytes: int = 1 << 16) -> RunInfo:
    """Read a log's first line and tail for its run id, latest step and how it ended."""
    with open(path, "rb") as f:
        head = f.readline(1 << 16)
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - tail_bytes)
        f.seek(start)
        blob = f.read()
    if start:
        blob = blob[blob.find(b"\n") + 1 :]
    meta_recs = LineDecoder().feed(head if head.endswith(b"\n") else head + b"\n")
    meta = meta_recs[0] if meta_recs and meta_recs[0].get("kind") == "meta" else {}
    dec = LineDecoder()
    records = dec.feed(blob) + dec.finish()
    step, status = _step_and_status(
        records, now=time.time(), alive=None, mtime=path.stat().st_mtime
    )
    return RunInfo(
        source=str(path),
        run_id=str(meta.get("run_id") or path.stem),
        pid=meta.get("pid"),
        started=meta.get("t"),
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
    ended = None
    for rec in records:
        kind = rec.get("kind")
        if kind == STEP and isinstance(rec.get("step"), int):
            step = rec["step"]
        elif kind == EVENT and rec.get("type") in _ENDINGS:
            ended = rec
    if ended is not None:
        if ended.get("type") == EV_EXIT:
            return step, "finished" if ended.get("status") in ("ok", "interrupted") else "crashed"
        if not ended.get("interrupted"):
            return step, "crashed"
    if alive:
        return step, "running"
    if mtime is not None and now - mtime < 10:
        return step, "running"
    return step, "unknown"


def resolve(spec: str | None, folder: str = DEFAULT_LOG_DIR) -> str:
    """The source a ``dltop [SOURCE]`` invocation means; raises StreamError/FileNotFoundError."""
    if spec:
        if is_stream_spec(spec):
            parse_address(spec)  # a malformed address fails here, with its hint
        return spec
    found = default_source(folder)
    if found is None:
        raise FileNotFoundError(NOTHING_TO_SHOW)
    return found


__all__ = [
    "Address",
    "RunInfo",
    "default_source",
    "describe_live",
    "describe_log",
    "live_runs",
    "recent_logs",
    "resolve",
]
