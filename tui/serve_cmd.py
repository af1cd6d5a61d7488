"""The viewer in a browser: ``dltop serve [SOURCE...]`` serves the same Textual app over HTTP.

Why a command of its own rather than a flag of the viewer: the page runs ``dltop
SOURCE...`` as a subprocess per browser tab (textual-serve's model: the app is the very
program a terminal runs, so every key and panel is the same), and this process only
serves and guards it. The sources are checked here first, with the viewer's own checks
(``view_cmd.resolve_source``), so a typo is one line on this terminal rather than an
error page. Who may open the page (loopback by default, a token anywhere else, the
token never printed whole unless ``--show-url``): ``serve_auth``. The server:
``serve_web``; the design: docs/live.md, "In a browser".
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import socket
import sys
from pathlib import Path

from . import thresholds_args
from .core.text.safetext import visible
from .serve_auth import (
    BindError,
    Token,
    choose_token,
    parse_bind,
    token_note,
    url_host,
    write_token_file,
)

EXIT_CANNOT = 3  # no source, a bad bind address or token setting, a port in use
DEFAULT_PORT = 8000
USAGE_HINT = "usage: dltop serve [SOURCE...] [--bind HOST:PORT] [--show-url]; see --help"


def configure(parser: argparse.ArgumentParser) -> None:
    from .view_cmd import MAX_OVERLAY, _refresh_hz  # the viewer's own checks

    parser.add_argument(
        "source",
        nargs="*",
        metavar="SOURCE",
        help="what `dltop SOURCE...` opens: a log, a rank folder, a live address, up to "
        f"{MAX_OVERLAY} runs to overlay; default: the newest run, found again for each page",
    )
    parser.add_argument(
        "--bind",
        default=f"127.0.0.1:{DEFAULT_PORT}",
        metavar="HOST:PORT",
        help=f"where to listen (default 127.0.0.1:{DEFAULT_PORT}: this machine only; any "
        "other address needs the token)",
    )
    parser.add_argument(
        "--show-url",
        action="store_true",
        help="print the address with the token in it (it may end up in logs and scrollback)",
    )
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument(
        "--token", action="store_true", help="require a token on loopback too (one is generated)"
    )
    tokens.add_argument(
        "--no-token", action="store_true", help="require none (loopback only; refused elsewhere)"
    )
    parser.add_argument(
        "--max-viewers",
        type=int,
        default=8,
        metavar="N",
        help="browser tabs served at once (each runs a dltop process; default 8)",
    )
    parser.add_argument("--replay", action="store_true", help="read the log once, do not follow it")
    parser.add_argument(
        "--refresh", type=_refresh_hz, default=3.0, metavar="HZ", help="redraws per second, 2-4"
    )
    thresholds_args.add_lang(parser)
    thresholds_args.add_arguments(parser)


class ServeError(Exception):
    """Why the page cannot be served; one line with a hint."""


def _fail(message: object) -> int:
    print(f"dltop serve: {visible(message)}", file=sys.stderr)
    return EXIT_CANNOT


def viewer_command(args: argparse.Namespace, sources: list[str]) -> str:
    """The shell command each browser tab runs: this Python's ``dltop`` with the view options."""
    argv = [sys.executable, "-m", "dltop.tui", "--refresh", f"{args.refresh:g}"]
    argv += ["--lang", args.lang]
    if args.replay:
        argv.append("--replay")
    if args.config:
        argv += ["--config", str(Path(args.config).resolve())]
    for override in args.set:
        argv += ["--set", override]
    return shlex.join([*argv, "--", *sources])


def check_sources(args: argparse.Namespace) -> list[str]:
    """The sources as the viewer will open them (absolute paths: the same files whatever
    the subprocess's directory); none given: none passed, so each page finds the newest."""
    from . import view_cmd

    if len(args.source) > view_cmd.MAX_OVERLAY:
        raise ServeError(
            f"{len(args.source)} sources: at most {view_cmd.MAX_OVERLAY} runs can be overlaid "
            "(hint: pick the runs to compare)"
        )
    try:
        view_cmd._thresholds(args)  # a bad --set is said here, not in every tab
        if not args.source:
            view_cmd.resolve_source(None)
            return []
        return [str(view_cmd.resolve_source(s)) for s in args.source]
    except view_cmd.SourceError as e:
        text = str(e).splitlines()[0] if str(e) == view_cmd.START_HINT else str(e)
        raise ServeError(text) from None


def page_url(host: str, port: int) -> str:
    """The address to give a browser: a wildcard bind is reached by this host's name."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"http://{url_host(shown)}:{port}/"


def run(args: argparse.Namespace) -> int:
    try:
        host, port = parse_bind(args.bind, DEFAULT_PORT)
        token = choose_token(host, want=args.token, refuse=args.no_token)
        if args.max_viewers < 1:
            raise ServeError(f"--max-viewers {args.max_viewers}: at least 1")
        sources = check_sources(args)
    except (BindError, ServeError) as e:
        return _fail(e)
    try:
        from .serve_web import DltopServer
    except ModuleNotFoundError as e:
        return _fail(
            f"{e.name} is not installed (hint: pip install 'dltop-monitor[web]' brings "
            "textual-serve)"
        )
    from .core.sources.socket_source import redact

    title = "dltop " + " ".join(redact(s) for s in args.source) if args.source else "dltop"
    server = DltopServer(
        viewer_command(args, sources), host, port, token.value, title, args.max_viewers
    )

    written: list[Path] = []  # the token file, removed when the server stops

    def started(bound: int) -> None:
        shown = token
        if token.value is not None and token.source == "generated":
            try:
                written.append(write_token_file(token.value, bound))
                shown = Token(token.value, token.source, written[0])
            except OSError as e:
                print(f"dltop serve: could not write the token file ({e})", file=sys.stderr)
        print(_start_line(host, bound, shown, args.show_url), file=sys.stderr, flush=True)

    try:
        asyncio.run(server.run(started))
    except OSError as e:
        return _fail(f"cannot listen on {args.bind}: {e.strerror or e} (hint: --bind HOST:PORT)")
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    return 0


def _start_line(host: str, port: int, token: Token, show_url: bool) -> str:
    """Where the page is and how to get in; the token itself only with ``--show-url``."""
    from ..probe.viewerauth import is_loopback

    url = page_url(host, port)
    where = (
        "this machine only" if is_loopback(host) else "reachable from the network, token required"
    )
    line = f"dltop serve: serving the viewer on {url} ({where}){token_note(token, url)}"
    if show_url and token.value is not None:
        line += f"\ndltop serve: {url}?token={token.value}"
    return line + "\ndltop serve: Ctrl-C stops it (and every viewer it started)"
