"""Which source reads a SOURCE: a dltop log, a folder of rank logs, another tool's log, or
a live run's socket.

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
from .socket_source import SocketSource, is_stream_spec


def open_source(
    spec: str | os.PathLike[str],
    model: RunModel,
    on_update: OnUpdate | None = None,
    **kwargs: Any,
) -> FileSource | ForeignSource | SocketSource:
    """A source for a log file, a directory of rank files, another tool's log (a Hugging
    Face trainer_state.json, a Lightning metrics.csv, TensorBoard event files, or a folder
    holding them: recognised by content, ``core/foreign``), or a live run's address
    (``unix:``/``tcp://``: ``kwargs`` are the file readers'); not started yet.

    Raises :class:`SourceError` (``StreamError`` for an address) with a one-line message
    when it cannot be read.
    """
    path = os.fspath(spec)
    if is_stream_spec(path):
        return SocketSource(path, model, on_update)
    fmt = foreign.detect(path)
    if fmt is not None:
        return ForeignSource(path, model, on_update, fmt=fmt)
    if os.path.isdir(path):
        return DirectorySource(path, model, on_update=on_update, **kwargs)
    return FileSource(path, model, on_update, **kwargs)
