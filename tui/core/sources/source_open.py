"""Which source reads a path: a dltop log, a folder of rank logs, or another tool's log.

Why apart from ``sources.py``: the folder and foreign sources build on its
``FileSource``; choosing between them here keeps that module below both (no import
cycle), and ``foreign/`` is loaded only by the code that opens paths.
"""

from __future__ import annotations

import os
from typing import Any

from ..store.run import RunModel
from . import foreign
from .dirsource import DirectorySource
from .filesource import FileSource, OnUpdate
from .foreign_source import ForeignSource


def open_source(
    spec: str | os.PathLike[str],
    model: RunModel,
    on_update: OnUpdate | None = None,
    **kwargs: Any,
) -> FileSource | ForeignSource:
    """A source for a log file, a directory of rank files, or another tool's log (a
    Hugging Face trainer_state.json, a Lightning metrics.csv, TensorBoard event files, or
    a folder holding them: recognised by content, ``core/foreign``); not started yet.

    Raises :class:`SourceError` with a one-line message when it cannot be read.
    """
    path = os.fspath(spec)
    fmt = foreign.detect(path)
    if fmt is not None:
        return ForeignSource(path, model, on_update, fmt=fmt)
    if os.path.isdir(path):
        return DirectorySource(path, model, on_update=on_update, **kwargs)
    return FileSource(path, model, on_update, **kwargs)
