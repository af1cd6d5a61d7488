"""The ``--config FILE`` / ``--set SECTION.KEY=VALUE`` flags, shared by ``dltop check`` and
the viewer so that a threshold set for CI gives the same alerts on screen; and ``--lang``,
shared by them and ``dltop report``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core.rules import Config

HINT = "see docs/alerts.md for the keys, or `dltop check --print-config`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="a TOML file of alert thresholds (see docs/alerts.md)"
    )
    parser.add_argument(
        "--set",
        metavar="SECTION.KEY=VALUE",
        action="append",
        default=[],
        help="override one threshold, e.g. --set data_bound.warn=0.15 (repeatable)",
    )


def add_lang(parser: argparse.ArgumentParser, default: str = "en") -> None:
    parser.add_argument(
        "--lang", default=default, type=_lang, help="checklist language (en, zh; default en)"
    )


def _lang(text: str) -> str:
    """A language the checklists ship in: any other was English with no word of it."""
    from .core.diagnosis.checklists import languages  # noqa: PLC0415 - `--help` stays instant

    known = languages()
    if text not in known:
        raise argparse.ArgumentTypeError(
            f"no checklists in {text!r} (choose one of: {', '.join(known)})"
        )
    return text


def load(args: argparse.Namespace) -> Config:
    """The thresholds the flags ask for; raises ``ConfigError`` (one line) when they are wrong.
    The rules package loads here, not at import: ``dltop --help`` stays instant."""
    from .core.rules import Config, parse_override

    return Config.load(args.config, dict(parse_override(s) for s in args.set))
