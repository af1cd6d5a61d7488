"""The data files dltop ships (checklists, the crash catalogue, their translations): where
they are, wherever the package is installed, and why one could not be read. Below the
rules (the crash rule names crashes from the catalogue) and the diagnosis (the checklists),
which both read them.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

Root = Path | Traversable


def data_root() -> Traversable:
    """The shipped data folder (``dltop/tui/data``), wherever the package is installed."""
    return resources.files("dltop.tui") / "data"


def unreadable(exc: Exception) -> str:
    """Why a data file could not be read, as the end of a one-line message."""
    if isinstance(exc, UnicodeDecodeError):
        return f"is not UTF-8 text: {exc.reason}"
    if isinstance(exc, tomllib.TOMLDecodeError):
        return f"is not valid TOML: {exc}"
    return f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
