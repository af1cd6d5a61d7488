"""Diagnose a training log headlessly: status, alerts with evidence and checklists (exit 0/1/2/3).

Exit codes (the contract): 0 no alert, 1 warnings only, 2 a critical alert (info alerts
do not count), 3 the source could not be checked (missing or unreadable file, a
directory without logs, not a dltop log, a bad threshold setting, a bad argument).
Errors are one line on stderr with a hint, never a traceback: this command runs in CI
scripts, where exit 2 must only ever mean "critical alert".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import thresholds_args
from .check_file import CheckError, check_file
from .check_output import (  # FileResult: re-exported, what check_file() returns
    FileResult,
    as_json,
    checklists,
    error_json,
    print_json,
    text_report,
    verdict_of,
)
from .check_progress import Progress
from .core.files.sourcefiles import SourceError, is_missing, list_rank_files, total_size
from .core.ranks import compare as ranks
from .core.ranks import shardnorm
from .core.ranks.jobs import choose as choose_job
from .core.rules import Config, ConfigError
from .core.rules.alerts import SEVERITY_RANK
from .core.sources import foreign, rules_worker, workers
from .core.sources.socket_source import is_stream_spec, redact
from .core.store.runstore import Store
from .core.text.safetext import visible, visible_lines

EXIT_OK, EXIT_WARN, EXIT_CRIT, EXIT_UNREADABLE = 0, 1, 2, 3
SOURCE_HINT = "pass a .jsonl log written by dltop.probe, or a directory of them"
# argparse exits 2 on a usage error, which this command's contract reserves for "a
# critical alert"; cli.py reads these to report a bad argument as "could not check" instead
USAGE_EXIT = EXIT_UNREADABLE
USAGE_HINT = "usage: dltop check SOURCE [--json] [--config FILE] [--set KEY=VALUE]; see --help"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="?",
        help="a .jsonl log, a directory of per-rank .jsonl logs, or another tool's log: "
        "a Hugging Face trainer_state.json (or its checkpoint folder), a Lightning "
        "metrics.csv, TensorBoard event files (or their folder)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the report"
    )
    thresholds_args.add_arguments(parser)
    thresholds_args.add_lang(parser)
    add_follow(parser)
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective thresholds as TOML and exit",
    )


def add_follow(parser: argparse.ArgumentParser) -> None:
    """``--follow SECONDS`` (``check`` and ``report``): a live run's log, read on."""
    parser.add_argument(
        "--follow",
        type=_follow_seconds,
        metavar="SECONDS",
        help="a log still being written: read on as the run appends, until its exit "
        "record, its process is gone, or SECONDS pass (default: read the log as it is "
        "when the command starts, so it always ends)",
    )


MAX_FOLLOW_S = 7 * 24 * 3600.0  # a week: --follow is a bound, never "forever"


def _follow_seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < s <= MAX_FOLLOW_S:
        raise argparse.ArgumentTypeError(
            f"{text} is not between 0 and {MAX_FOLLOW_S:.0f} seconds (a week)"
        )
    return s


def run(args: argparse.Namespace) -> int:
    try:
        config = thresholds_args.load(args)
    except ConfigError as exc:
        return _fail(str(exc), thresholds_args.HINT, args)
    if args.print_config:
        sys.stdout.write(config.to_toml())
        return EXIT_OK
    if not args.source:
        return _fail("no SOURCE given", "usage: dltop check RUN.jsonl [--json]", args)
    try:
        results, skipped = collect(args.source, config, progress="dltop check", follow=args.follow)
    except foreign.MissingExtra as exc:  # the whole line says what to install
        sys.stderr.write(f"dltop: {visible(redact(str(exc)))}\n")
        if args.json:
            print_json(error_json(redact(args.source), redact(str(exc)), ""))
        return EXIT_UNREADABLE
    except CheckError as exc:
        return _fail(str(exc), SOURCE_HINT, args)
    for r in results:
        r.checklists = checklists(r, args.lang)
    alerts = [(r, a) for r in results for a in r.engine.alerts()]
    worst = max((SEVERITY_RANK[a.severity] for _, a in alerts), default=0)
    code = {0: EXIT_OK, 1: EXIT_WARN, 2: EXIT_CRIT}[worst]
    said = verdict_of(results, args.lang)
    try:
        if args.json:
            out = as_json(redact(args.source), results, said)
            if skipped:
                out["skipped_files"] = skipped
            print_json(out)
        else:
            # the report quotes the log (run ids, messages, file names): one boundary
            report = text_report(redact(args.source), results, skipped, said)
            sys.stdout.write(visible_lines(report))
        sys.stdout.flush()
    except BrokenPipeError:  # `dltop check x | head`
        pass
    return code


def collect(
    source: str,
    config: Config,
    with_store: bool = False,
    jobs: int | None = None,
    progress: str | None = None,
    follow: float | None = None,
) -> tuple[list[FileResult], list[str]]:
    """Every log of ``source`` through the rules, the ranks of a job judged side by side;
    returns the results and why files were left out. ``with_store``: each result also
    gets the viewer's chart store of its records (``dltop report``), from the same read.
    ``jobs``: worker processes for the other ranks of a job (default: one per CPU when
    they hold at least ``PARALLEL_MIN_BYTES``; 1 checks everything here). ``progress``:
    the command's name, for a progress line on stderr when it is a terminal.
    ``follow``: seconds to read on while the run goes on (``--follow``); without it each
    log is read as it was when it was opened, so a check of a live run always ends.
    Raises :class:`CheckError` when nothing could be read, ``foreign.MissingExtra`` when
    another tool's log needs an optional package."""
    skipped: list[str] = []  # in a directory, one bad rank file must not hide the others
    aside: list[str] = []  # the other runs of a folder of separate runs: said after
    files = _log_files(source, skipped, aside)
    results: list[FileResult] = []
    timings: dict[str, ranks.RankTimes] = {}
    # sharded gradients: the other ranks' grad_sq_local first, then the first rank's file
    # takes the whole model's grad_norm as it is read (tui/core/ranks/shardnorm.py, GradNormJoin).
    # The other ranks go through worker processes when the job is big enough to pay for
    # them; their shares join in rank order, so the norms are the same floats either way.
    join = shardnorm.GradNormJoin()
    many = len(files) > 1
    until = time.monotonic() + follow if follow is not None else None
    others = [_RankTask(path, config, with_store, many, follow_until=until) for path in files[1:]]
    n = jobs if jobs is not None else _workers_for(files[1:])
    shown = Progress.for_stderr(files, progress) if progress else None
    try:
        for task, outcome in zip(others, workers.ordered_map(_check_rank, others, n), strict=True):
            join.absorb(outcome.shares)  # even from a rank that failed: its world size counts
            outcome.take(results, timings, skipped)
            if shown is not None:
                shown.file_done(task.path)
        # a report on one big log: its rules in a child while its store is built here
        beside = rules_worker.MIN_BYTES if with_store and not many else None
        first = _RankTask(files[0], config, with_store, many, beside, until)
        on_bytes = shown.reading if shown is not None else None
        _check_rank(first, primary_of=join, on_bytes=on_bytes).take(results, timings, skipped)
    finally:
        if shown is not None:
            shown.done()  # the report starts on a clean line
    if not results:
        raise CheckError(skipped[0])
    skipped.extend(aside)
    order = {path: i for i, path in enumerate(files)}
    results.sort(key=lambda r: order[r.path])  # back to rank order
    if join.summary is not None and results[0].path == files[0]:
        results[0].notes.append(join.summary)
    # the ranks of one job side by side: the first failure, a straggler (tui/core/ranks/compare.py)
    ranks.judge([ranks.Rank(r.rank, r.engine, timings.get(r.path)) for r in results])
    return results, skipped


@dataclass
class _RankTask:
    """One rank file to check (picklable: it may go to a worker process)."""

    path: str
    config: Config
    with_store: bool
    many: bool  # one rank of several: its step timings are kept for the straggler rule
    beside: int | None = None  # check_file's: the rules in a child from this many bytes
    follow_until: float | None = None  # check_file's: --follow's deadline (monotonic)


@dataclass
class _RankOutcome:
    """One rank's check: its result or why it failed, its timings, its grad-norm shares."""

    result: FileResult | None
    error: str | None
    times: ranks.RankTimes | None
    shares: shardnorm.RankShares  # this rank's side of the sharded join

    def take(
        self,
        results: list[FileResult],
        timings: dict[str, ranks.RankTimes],
        skipped: list[str],
    ) -> None:
        if self.result is None:
            skipped.append(self.error or "unreadable")
            return
        results.append(self.result)
        if self.times is not None:
            timings[self.result.path] = self.times


def _check_rank(
    task: _RankTask,
    primary_of: shardnorm.GradNormJoin | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> _RankOutcome:
    """Check one rank file (in a worker process, or here): a rank other than the first
    keeps its shares for the job's join; the first (``primary_of``) reads the job's."""
    join = primary_of
    shares = join.primary() if join is not None else shardnorm.GradNormJoin.detached()
    times = ranks.RankTimes() if task.many else None
    store = Store() if task.with_store else None
    try:
        result = check_file(
            task.path,
            task.config,
            times,
            store,
            shares=shares,
            on_bytes=on_bytes,
            beside=task.beside,
            follow_until=task.follow_until,
        )
    except CheckError as exc:
        return _RankOutcome(None, str(exc), None, shares)
    return _RankOutcome(result, None, times, shares)


# the other ranks' bytes below which a check stays in one process: forking the workers
# and sending each rank's engine back costs ~10-20 ms, a rank of 1 MiB takes ~30 ms
PARALLEL_MIN_BYTES = 8 << 20
MAX_WORKERS = 16  # processes, whatever the machine: a 128-core node need not fork 128


def _workers_for(paths: list[str]) -> int:
    """Worker processes for these rank files: one per CPU (at most ``MAX_WORKERS``), or
    1 (none) for a small job."""
    big = total_size(paths) >= PARALLEL_MIN_BYTES
    return min(workers.cpus(), MAX_WORKERS) if big else 1


def _fail(message: str, hint: str, args: argparse.Namespace | None = None) -> int:
    """One line on stderr (and ``--json``'s error object); a token in it masked."""
    message = redact(message)
    sys.stderr.write(f"dltop check: error: {visible(message)} (hint: {hint})\n")
    if args is not None and getattr(args, "json", False):
        source = redact(args.source) if args.source else args.source
        print_json(error_json(source, message, hint))
    return EXIT_UNREADABLE


def _log_files(source: str, skipped: list[str], aside: list[str]) -> list[str]:
    """The log, or a directory's rank files in rank order (the viewer's own list:
    ``sourcefiles.list_rank_files``); special files there are left out with a note. A
    folder of separate runs, or of several jobs' ranks, gives its newest run or job, and
    ``aside`` says so (``jobs.choose``, as the viewer chooses)."""
    if is_stream_spec(source):
        raise CheckError(f"{source} is a live socket; `dltop check` reads log files")
    if foreign.detect(source) is not None:  # another tool's log (a file or a folder)
        return [source]
    if os.path.isdir(source):
        notes: list[str] = []
        try:
            found = list_rank_files(source, notes)
        except SourceError as exc:
            raise CheckError(str(exc)) from None
        skipped.extend(n.removeprefix("skipped ") for n in notes)
        if not found:
            raise CheckError(skipped[0] if skipped else f"directory {source} holds no .jsonl log")
        # separate runs, or several jobs' ranks: the newest alone, as the viewer opens it
        chosen = choose_job(source, found)
        if chosen.note:
            aside.append(chosen.note)
        return [r.path for r in chosen.files]
    if is_missing(source):
        raise CheckError(f"{source}: no such file or directory")
    return [source]
