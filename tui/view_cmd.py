"""Watch a run: ``dltop [SOURCE]`` opens the live dashboard on a log (followed while it grows).

Everything a user can get wrong (a missing file, a directory without logs, no source at
all) is answered here, before Textual starts, with one line on stderr and exit code 3:
a traceback or a blank full-screen app would be a worse answer. Textual is imported
only inside :func:`run`, so ``dltop --help`` stays instant.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..probe.jobpath import RUNS_DIR  # where the probe writes by default
from . import thresholds_args
from .core.text.redact import redact
from .core.text.safetext import visible

EXIT_NO_SOURCE = 3
MAX_OVERLAY = 8  # runs one viewer overlays: ranks.jobs.MAX_RUNS (a test holds them equal)
START_HINT = (
    "no SOURCE given and no log under ./dltop-runs. Start a run with the probe, e.g.\n"
    "  from dltop.probe import Probe\n"
    '  with Probe(path="dltop-runs/exp.jsonl", model=model, optimizer=optimizer) as probe:\n'
    "      ... probe.step(loss=loss)\n"
    "then run `dltop dltop-runs/exp.jsonl` (or just `dltop`) in another terminal;\n"
    "`dltop demo --list` shows ready-made demo trainings."
)


def _refresh_hz(text: str) -> float:
    try:
        hz = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 2.0 <= hz <= 4.0:
        raise argparse.ArgumentTypeError(f"{hz:g} Hz is outside 2-4 (redraws per second)")
    return hz


def _smooth(text: str) -> float:
    from .core.store.smoothing import parse_weight

    try:
        return parse_weight(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--smooth ")) from None


NOT_A_TERMINAL = (
    "the viewer draws on a terminal and stdout is not one (hint: `dltop check SOURCE` "
    "prints the diagnosis as text, `--json` for scripts; `dltop ls` lists the runs)"
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="*",
        metavar="SOURCE",
        help="a .jsonl log (followed while it grows), a directory of rank logs, "
        "unix:PATH or tcp://HOST:PORT[?token=T] (a live run's socket), or another tool's "
        "log (trainer_state.json, Lightning metrics.csv, TensorBoard event files); "
        "default: the newest live run on this host, else the newest log under ./dltop-runs; "
        f"2 to {MAX_OVERLAY} sources are overlaid (a colour per run, aligned by step)",
    )
    parser.add_argument("--no-mouse", action="store_true", help="do not capture the mouse")
    parser.add_argument(
        "--refresh",
        type=_refresh_hz,
        default=3.0,
        metavar="HZ",
        help="redraws per second, 2-4 (default 3); data is ingested continuously",
    )
    parser.add_argument("--replay", action="store_true", help="read the log once, do not follow it")
    parser.add_argument(
        "--smooth",
        type=_smooth,
        default=None,
        metavar="W",
        help="weight of the smoothed line, 0 (off) to 0.999, per step as in TensorBoard "
        "(default 0.6; s / S change it in the viewer)",
    )
    parser.add_argument(
        "--panel",
        action="append",
        default=[],
        metavar="NAME",
        help="also chart this series (an extra such as acc, an eval metric such as "
        "eval.f1, a sys reading); repeat it or separate names with commas (m in the viewer)",
    )
    thresholds_args.add_lang(parser)
    thresholds_args.add_arguments(parser)


class SourceError(Exception):
    """A source the viewer cannot open; the message is one line with a hint."""


def newest_log(root: Path) -> Path | None:
    """The most recently modified ``*.jsonl`` under ``root`` (any depth, as `dltop ls`)."""
    from .core.sources.discover import recent_logs

    found = recent_logs(root, limit=1)
    return found[0] if found else None


def newest_live_run() -> Path | str | None:
    """The address of the newest live run on this host that accepts a viewer now, or,
    when that run is one rank of a job, the job's folder (every rank, as ``dltop DIR``).

    A registered run whose socket refuses (its process hung up its server, or the pid
    was recycled) is passed over for the next one; none at all gives ``None``.
    """
    from .core.ranks.jobs import job_dir
    from .core.sources.discover import live_runs
    from .core.sources.socket_source import StreamError, connect, parse_address

    for run in live_runs():
        address = f"unix:{run['socket']}"
        try:
            connect(parse_address(address), timeout=1.0).close()
        except StreamError:
            continue
        log = run.get("log_path")
        folder = job_dir(log if isinstance(log, str) else None)
        if folder is not None and folder.is_dir():
            return folder
        return address
    return None


def resolve_source(source: str | None, cwd: Path | None = None) -> Path | str:
    """The log, rank directory or live address to open; raises :class:`SourceError` with a hint.

    With no source: the newest live run on this host that answers (its socket; its job's
    folder when it is one rank of several), else the newest log under ./dltop-runs.
    """
    cwd = cwd or Path.cwd()
    if source is None:
        live = newest_live_run()
        if live is not None:
            return live
        found = newest_log(cwd / RUNS_DIR)
        if found is None:
            raise SourceError(START_HINT)
        from .core.ranks.jobs import job_dir

        return job_dir(str(found)) or found  # one rank of a job: the whole job
    if not source.strip():  # `dltop "$LOG"` with the variable unset: not the current folder
        raise SourceError(
            "an empty SOURCE (hint: pass the log file, or nothing for the newest run)"
        )
    if source.startswith(("unix:", "tcp://")):
        from .core.sources.socket_source import StreamError, connect, parse_address

        try:
            connect(parse_address(source), timeout=2.0).close()  # alive now, or a hint
        except StreamError as e:
            raise SourceError(str(e)) from None
        return source
    path = Path(source).expanduser()
    if not path.is_absolute():
        path = cwd / path
    from .core.sources import foreign

    fmt = foreign.detect(str(path))
    if fmt is not None:  # another tool's log: trainer_state.json, metrics.csv, tfevents
        try:
            foreign.prepare(str(path), fmt)  # a missing optional reader: said before the UI
            # a finished file, read once: one that cannot be read is one line, not a screen
            foreign.preload(str(path), fmt)
        except foreign.SourceError as e:
            raise SourceError(str(e)) from None
        return path
    if path.is_dir():
        from .core.files.sourcefiles import SourceError as CoreError
        from .core.files.sourcefiles import list_rank_files

        skipped: list[str] = []  # a FIFO or device named *.jsonl: left out, never opened
        try:
            logs = list_rank_files(str(path), skipped)
        except CoreError as e:
            raise SourceError(str(e)) from None
        if skipped and not logs:  # says what it is, with its own hint
            raise SourceError(
                f"{source} holds no log to read: {skipped[0].removeprefix('skipped ')}"
            )
        if not logs:
            raise SourceError(f"{source}: directory has no *.jsonl logs (hint: pass the log file)")
        return path
    from .core.files.sourcefiles import is_missing

    if is_missing(str(path)):  # a symlink loop or no permission: named by check_log_file
        hint = ""
        if not source.endswith(".jsonl"):
            hint = " (hint: a log path ends in .jsonl)"
        elif (found := newest_log(cwd / RUNS_DIR)) is not None:
            hint = f" (hint: the newest log here is {os.path.relpath(found, cwd)})"
        else:
            hint = " (hint: `dltop ls` lists the live runs and the logs under ./dltop-runs)"
        raise SourceError(f"{source}: no such file{hint}")
    from .core.sources.filesource import SourceError as CoreSourceError
    from .core.sources.filesource import check_log_file

    try:
        check_log_file(str(path))  # readable, and looks like a log (the core's verdict)
    except CoreSourceError as e:
        raise SourceError(str(e)) from None
    return path


def _thresholds(args: argparse.Namespace) -> Any:
    """The same thresholds as `dltop check` with the same flags, so the viewer and CI agree."""
    from .core.rules import ConfigError

    try:
        return thresholds_args.load(args)
    except ConfigError as e:
        raise SourceError(f"{e} (hint: {thresholds_args.HINT})") from None


def _can_draw() -> bool:
    """Whether the full-screen viewer has somewhere to draw: a terminal on stdout, or a
    Textual driver chosen for it (``dltop serve`` runs the viewer under textual-serve's
    web driver, with a pipe as stdout). Piped into another command, the viewer would
    write escape codes into the pipe."""
    if os.environ.get("TEXTUAL_DRIVER"):
        return True
    try:
        return os.isatty(sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        return False


def run(args: argparse.Namespace) -> int:
    sources: list[str] = list(args.source or [])
    try:
        config = _thresholds(args)
        if len(sources) > MAX_OVERLAY:
            raise SourceError(
                f"{len(sources)} sources: at most {MAX_OVERLAY} runs can be overlaid "
                "(hint: pick the runs to compare)"
            )
        paths = [resolve_source(s) for s in sources] if sources else [resolve_source(None)]
    except SourceError as e:
        # it may quote a crafted file name; only our own start hint keeps its line breaks
        text = str(e) if str(e) == START_HINT else visible(redact(str(e)))
        print(f"dltop: {text}", file=sys.stderr)
        return EXIT_NO_SOURCE
    if not _can_draw():
        print(f"dltop: {NOT_A_TERMINAL}", file=sys.stderr)
        return EXIT_NO_SOURCE
    from .app.app import DltopApp  # Textual loads only when the UI starts
    from .core.present.extra_panels import parse_panels
    from .core.sources import foreign

    # another tool's log is a finished replay: read once, never followed
    replay = args.replay or all(
        isinstance(p, Path) and foreign.detect(str(p)) is not None for p in paths
    )
    app = DltopApp(
        str(paths[0]),
        follow=not replay,
        refresh_hz=args.refresh,
        lang=args.lang,
        config=config,
        overlay=[str(p) for p in paths] if len(paths) > 1 else None,
        panels=parse_panels(args.panel),
        smoothing=args.smooth,
    )
    app.run(mouse=not args.no_mouse)
    return int(app.return_code or 0)
