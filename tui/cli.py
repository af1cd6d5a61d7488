"""The ``dltop`` command line: argument parsing and dispatch only.

Each sub-command lives in its own module (``*_cmd.py``) exposing
``configure(parser)`` and ``run(args) -> int`` and is imported only when chosen, so
``dltop check`` never loads Textual and ``dltop --help`` is instant. Errors a user
can cause (missing file, bad argument) end as one line on stderr with a hint, never
a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from .core.text.redact import redact
from .core.text.safetext import visible

# sub-command name -> module under dltop.tui implementing configure() and run()
COMMANDS = {
    "check": "dltop.tui.check_cmd",
    "demo": "dltop.tui.demo_cmd",
    "export": "dltop.tui.export_cmd",
    "ls": "dltop.tui.ls_cmd",
    "report": "dltop.tui.report_cmd",
    "serve": "dltop.tui.serve_cmd",
}
VIEW_MODULE = "dltop.tui.view_cmd"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("dltop-monitor")
    except Exception:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """argparse with a command's own exit status and hint for usage errors.

    argparse exits 2 on a bad argument; ``dltop check`` defines 2 as "a critical alert",
    so a command module may set ``USAGE_EXIT`` (and ``USAGE_HINT``) to report a typo in
    a CI script as what it is, in one line.
    """

    usage_exit = 2
    usage_hint: str | None = None

    def error(self, message: str) -> NoReturn:
        hint = self.usage_hint or f"see {self.prog} --help"
        # the message may quote an argument: a crafted file name must not reach the terminal
        # raw, nor a tcp:// address's token ("unrecognized arguments: tcp://h:p?token=...")
        line = visible(redact(message))
        self.exit(self.usage_exit, f"{self.prog}: error: {line} (hint: {hint})\n")


def _base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    return _Parser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


EPILOG = """commands:
  dltop [SOURCE]                 watch a run: a .jsonl log (followed while it grows)
  dltop A B [C...]               overlay up to 8 runs (a colour per run, aligned by step)
  dltop check SOURCE [--json]    headless diagnosis for scripts and CI (exit 0/1/2/3)
  dltop report SOURCE [-o FILE]  a Markdown incident report with charts, to paste in an issue
  dltop ls                       live runs on this host and recent logs
  dltop serve [SOURCE...]        the viewer in a browser (loopback; a token anywhere else)
  dltop export --prometheus HOST:PORT SOURCE...   per-rank metrics and alerts for Prometheus
  dltop demo NAME | --list       watch a demo training hit a real failure

Start a run by adding three lines to a training loop (see README.md):
  from dltop.probe import Probe
  with Probe(path="dltop-runs/exp.jsonl", model=model, optimizer=optimizer) as probe:
      ... probe.step(loss=loss)
"""


EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = f"dltop {argv[0]}" if argv and argv[0] in COMMANDS else "dltop"
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:  # Ctrl-C in a long `dltop check`: one line, not a traceback
        try:
            sys.stderr.write(f"{prog}: interrupted\n")
        except OSError:
            pass
        return EXIT_INTERRUPTED


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        name = argv[0]
        module = importlib.import_module(COMMANDS[name])
        parser = _base_parser(f"dltop {name}", (module.__doc__ or name).strip().splitlines()[0])
        parser.usage_exit = getattr(module, "USAGE_EXIT", 2)  # type: ignore[attr-defined]
        parser.usage_hint = getattr(module, "USAGE_HINT", None)  # type: ignore[attr-defined]
        module.configure(parser)
        args = parser.parse_args(argv[1:])
        return int(module.run(args) or 0)

    parser = _base_parser("dltop", "A terminal training monitor for PyTorch.")
    parser.epilog = EPILOG
    parser.add_argument("--version", action="version", version=f"dltop {_version()}")
    try:
        module = importlib.import_module(VIEW_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != VIEW_MODULE:
            raise
        parser.parse_args(argv)
        parser.print_help()
        return 0
    module.configure(parser)
    args = parser.parse_args(argv)
    return int(module.run(args) or 0)
