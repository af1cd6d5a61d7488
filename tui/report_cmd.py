"""Write an incident report of a run: Markdown plus SVG charts, ready to paste into an issue.

The source is read and diagnosed exactly as ``dltop check`` reads it (``check_cmd.collect``:
the same files, rules, thresholds and ranks judged side by side), and charted as the viewer
charts it; ``tui/core/present/report.py`` writes the files. Default output: ``<log>.report.md``
next to the log, images in ``<log>.report/``. Exit codes: 0 written, 3 the source could
not be read, the report could not be written, or a bad argument (as ``check``'s 3);
errors are one line on stderr with a hint, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import check_cmd, thresholds_args
from .check_output import primary, verdict_of
from .core.diagnosis.ticks import Ticks
from .core.present.view_model import alert_key
from .core.rules import ConfigError
from .core.sources import foreign
from .core.text.redact import redact
from .core.text.safetext import visible

EXIT_OK, EXIT_FAILED = 0, check_cmd.EXIT_UNREADABLE
USAGE_EXIT = EXIT_FAILED
USAGE_HINT = "usage: dltop report SOURCE [-o FILE.md] [--lang LANG]; see --help"
WRITE_HINT = "pass -o FILE.md in a folder you can write"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        nargs="?",
        help="what `dltop check` accepts: a .jsonl log, a directory of rank logs, or "
        "another tool's log",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the Markdown file to write (default: <SOURCE>.report.md next to the log); "
        "the charts go in the folder of the same name without .md",
    )
    parser.add_argument(
        "--panel",
        action="append",
        default=None,
        metavar="NAME",
        help="chart this series beside the built-in panels (repeat it, or separate names "
        "with commas); default: every series the log has beyond them, up to 12",
    )
    thresholds_args.add_lang(parser)
    thresholds_args.add_arguments(parser)
    check_cmd.add_follow(parser)


def run(args: argparse.Namespace) -> int:
    from .core.present import report  # noqa: PLC0415 - `dltop --help` stays instant
    from .core.present.extra_panels import parse_panels  # noqa: PLC0415

    try:
        config = thresholds_args.load(args)
    except ConfigError as exc:
        return _fail(str(exc), thresholds_args.HINT)
    if not args.source:
        return _fail("no SOURCE given", "usage: dltop report RUN.jsonl [-o FILE.md]")
    try:
        results, skipped = check_cmd.collect(
            args.source, config, with_store=True, progress="dltop report", follow=args.follow
        )
    except foreign.MissingExtra as exc:  # the whole line says what to install
        sys.stderr.write(f"dltop: {visible(redact(str(exc)))}\n")
        return EXIT_FAILED
    except check_cmd.CheckError as exc:
        return _fail(str(exc), check_cmd.SOURCE_HINT)
    shown = primary(results)
    assert shown.store is not None  # collect(with_store=True) gives every result one
    # the viewer's ticks for each log, read only: a report never writes the sidecar
    entries = [
        report.ReportAlert(a, r.engine.facts(), Ticks.beside(r.path).ticked(alert_key(a)), rank)
        for r in results
        for rank in [r.rank if len(results) > 1 else None]
        for a in r.engine.alerts()
    ]
    ranks = [
        f"{os.path.basename(r.path)} (rank {r.rank}): {r.state.status}, {r.engine.steps} steps"
        + ("  <- charted" if r is shown else "")
        for r in results
    ]
    run_ = report.ReportRun(
        source=args.source,
        store=shown.store,
        state=shown.state,
        alerts=entries,
        lang=args.lang,
        skipped_lines=sum(r.skipped for r in results),
        notes=[n for r in results for n in r.notes] + [f"skipped: {s}" for s in skipped],
        ranks=ranks if len(results) > 1 else [],
        verdict=verdict_of(results, args.lang),
        panels=parse_panels(args.panel) if args.panel else None,
    )
    path = args.output or report.default_path(args.source)
    if os.path.isdir(path):
        return _fail(f"{path} is a directory", WRITE_HINT)
    if any(_same_file(path, r.path) for r in results):
        return _fail(f"{path} is the log itself", WRITE_HINT)
    try:
        written = report.write(run_, path)
    except OSError as exc:
        where = exc.filename or path
        return _fail(f"cannot write {where}: {exc.strerror or exc}", WRITE_HINT)
    if written.charts:
        sys.stderr.write(f"{len(written.charts)} charts in {visible(report.charts_dir(path))}/\n")
    try:  # the report's path alone on stdout, for scripts: `open "$(dltop report x.jsonl)"`
        sys.stdout.write(f"{visible(written.report)}\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return EXIT_OK


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist: not the same file
        return False


def _fail(message: str, hint: str) -> int:
    """One line on stderr; a token in it masked (the source may be a tcp:// address)."""
    sys.stderr.write(f"dltop report: error: {visible(redact(message))} (hint: {hint})\n")
    return EXIT_FAILED
