"""List live runs on this host and recent logs: ``dltop ls``.

Live runs are found in the probe's private rendezvous directory and asked for their
latest step and status over their socket (a run that writes heartbeats but no steps is
``stalled``); logs are the newest ``*.jsonl`` under ``./dltop-runs`` at any depth (or
``--dir``). A multi-rank job (``<job>/rank<R>.jsonl``) is one line, live or not, whose
SOURCE is its folder. Pass any SOURCE column to ``dltop`` to watch it. An entry or a log that
cannot be read shows ``?`` where a value is missing or malformed, or one line on
stderr; it never stops the listing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .core.files.sourcefiles import is_regular
from .core.ranks.jobs import group_sources, is_rank_file, job_dir
from .core.sources.discover import (
    DEFAULT_LOG_DIR,
    RunInfo,
    describe_live,
    describe_log,
    group_live,
    live_runs,
    merge_job,
    recent_logs,
)
from .core.text.safetext import visible

RANKS_READ = 256  # rank files of one job read for its line (the first by name)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=DEFAULT_LOG_DIR, help="where to look for logs")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("-n", type=_count, default=10, help="how many recent logs (default 10)")


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative (hint: 0 lists live runs only)")
    return n


def _where(folder: str) -> str:
    """The folder as the user would type it: ``./dltop-runs``, ``/abs/path``, ``../x``."""
    shown = visible(folder)
    return shown if os.path.isabs(folder) or folder.startswith(".") else f"./{shown}"


def _age(t: object) -> str:
    if t is None:
        return "-"
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t:
        return "?"  # not a time: a malformed entry, shown rather than fatal
    s = max(0.0, time.time() - t)
    if s < 90:
        return f"{s:.0f}s ago"
    if s < 5400:
        return f"{s / 60:.0f}m ago"
    if s < 172800:
        return f"{s / 3600:.0f}h ago"
    try:
        return time.strftime("%Y-%m-%d", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "?"


def run(args: argparse.Namespace) -> int:
    if args.dir != DEFAULT_LOG_DIR and not os.path.isdir(args.dir):
        print(
            f"dltop ls: error: no folder {_where(args.dir)} (hint: --dir names the folder "
            f"the logs are in; by default ./{DEFAULT_LOG_DIR})",
            file=sys.stderr,
        )
        return 3
    runs: list[RunInfo] = []
    for entry in live_runs():
        try:
            runs.append(describe_live(entry))
        except Exception as exc:  # one odd run must not hide the others
            print(
                f"dltop ls: cannot describe {visible(entry.get('socket'))}: {visible(exc)}",
                file=sys.stderr,
            )
    logs: list[RunInfo] = []
    live_logs = {r.log_path for r in runs if r.log_path}
    live_jobs = {str(d) for d in (job_dir(p) for p in live_logs) if d is not None}
    hidden = live_logs | live_jobs  # listed above as live runs
    shown = 0
    for path in group_sources(recent_logs(args.dir, limit=1 << 30)):
        if shown >= args.n:
            break
        if str(path.resolve()) in hidden or str(path) in hidden:
            continue
        info = _describe_job(path) if path.is_dir() else _describe(path)
        if info is not None:
            logs.append(info)
            shown += 1
    runs = group_live(runs)
    if args.json:
        for info in runs + logs:
            print(json.dumps(info.__dict__, default=str, ensure_ascii=True))
        return 0
    if not runs and not logs:
        print(f"no live runs, and no logs under {_where(args.dir)}")
        print("start a training with the probe (see README.md), then run `dltop`")
        return 0
    width = _run_width(runs + logs)
    header = f"{'RUN':<{width}} {'PID':>7} {'STARTED':>10} {'STEP':>8} {'STATUS':<9} SOURCE"
    if runs:
        print("live runs")
        print(header)
        for r in runs:
            _print_row(r, width)
    if logs:
        if runs:
            print()
        print(f"recent logs in {_where(args.dir)}")
        print(header)
        for r in logs:
            _print_row(r, width)
    return 0


RUN_WIDTH = (12, 44)  # the RUN column: as wide as the longest id shown, within these


def _run_width(rows: list[RunInfo]) -> int:
    longest = max((len(visible(r.run_id)) for r in rows), default=0)
    return max(RUN_WIDTH[0], min(RUN_WIDTH[1], longest))


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut in the middle: run ids tell runs apart by
    their end (``demo-nan-20261127-101530``: the time) as much as by their start, so
    both are kept and the ellipsis replaces the middle."""
    if len(text) <= width:
        return text
    if width < 5:
        return text[: max(0, width - 1)] + "…"
    head = (width - 1) // 3
    tail = width - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]


def _describe(path: Path) -> RunInfo | None:
    """One log's line, or one line on stderr saying why it cannot be read."""
    try:
        return describe_log(path)
    except OSError as exc:
        print(
            f"dltop ls: cannot read {visible(path)}: {visible(exc.strerror or exc)}",
            file=sys.stderr,
        )
    except Exception as exc:  # a log that is not what a probe writes
        print(f"dltop ls: cannot read {visible(path)}: {visible(exc)}", file=sys.stderr)
    return None


def _describe_job(folder: Path) -> RunInfo | None:
    """A job folder's line from its rank files (at most RANKS_READ of them)."""
    try:
        files = sorted(p for p in folder.iterdir() if is_rank_file(p) and is_regular(p))
    except OSError as exc:
        print(
            f"dltop ls: cannot read {visible(folder)}: {visible(exc.strerror or exc)}",
            file=sys.stderr,
        )
        return None
    ranks = [info for p in files[:RANKS_READ] if (info := _describe(p)) is not None]
    return merge_job(folder, ranks, live=False) if ranks else None


def _print_row(r: RunInfo, width: int) -> None:
    step = "-" if r.step is None else str(r.step)
    pid = "-" if r.pid is None else str(r.pid)
    # run id and source come from other processes' files: escaped before any cut or
    # padding (an escape sequence is never cut in two)
    run_id = middle_cut(visible(r.run_id), width)
    print(
        f"{run_id:<{width}} {pid:>7} {_age(r.started):>10} {step:>8} {visible(r.status):<9} {visible(r.source)}"
    )
    if r.verdict:  # the verdict `dltop check` starts with, under its run
        print(f"    {visible(r.verdict, limit=200)}")
