"""Other tools' logs as read-only sources: recognised by content, converted to our records.

``detect(path)`` says which tool wrote a file or folder (None: not one we read), cheaply
and without optional packages; ``load(path)`` reads it into a :class:`ForeignLog` whose
``records`` (a ``meta`` record first, then ``step``/``eval``/``event`` records in our
schema, ``probe/schema.py``) flow through the usual path: ``RunModel.ingest`` and the
``RuleEngine``. See ``docs/foreign-logs.md`` for how each format maps and what is lost.

- Hugging Face Trainer ``trainer_state.json`` (``hf.py``): a JSON object with a
  ``log_history`` list; or a folder holding one (a checkpoint folder).
- PyTorch Lightning ``CSVLogger`` ``metrics.csv`` (``lightning.py``): a CSV header with a
  ``step`` column and a loss-like column; or a folder holding one.
- TensorBoard event files (``tboard.py``): a TFRecord-framed file (the first header's
  checksum holds); or a folder with such files (searched a few levels deep, bounded).

Everything read is untrusted: sizes, counts and depths are capped (``common.py``), bad
values are dropped and counted (a ``warning:`` line in ``meta.notes``), and a file that
cannot be read raises :class:`~dltop.tui.core.files.sourcefiles.SourceError` (one line).
"""

from __future__ import annotations

import os

from .....probe.decoding import decode_line
from ...files.sourcefiles import SourceError, read_head
from . import hf, lightning, tboard, tfrecord
from .common import HF, LIGHTNING, TENSORBOARD, ForeignLog
from .tboard import MissingExtra

__all__ = [
    "HF",
    "LIGHTNING",
    "TENSORBOARD",
    "ForeignLog",
    "MissingExtra",
    "SourceError",
    "detect",
    "load",
    "preload",
    "prepare",
    "take_preloaded",
]

# a folder holding one of these files is read as that tool's log, in this order
FOLDER_FILES = ((HF, "trainer_state.json"), (LIGHTNING, "metrics.csv"))
_BY_NAME = {name: fmt for fmt, name in FOLDER_FILES}


def _detect_file(path: str, by_name: bool = True) -> str | None:
    head = read_head(path)
    if by_name and (
        head is None or not head.strip() or decode_line(head.split(b"\n", 1)[0]) is None
    ):
        # not one of our records: a file by the name another tool gives its log is that
        # log, damaged or not, so its reader says what is wrong with it ("not valid JSON",
        # "no step column", "permission denied") instead of "not a dltop log"
        named = _BY_NAME.get(os.path.basename(path))
        if named is not None:
            return named
    if not head:
        return None
    if tfrecord.framed(head):
        return TENSORBOARD
    first = head.split(b"\n", 1)[0]
    if decode_line(first) is not None:  # a dltop record: our own log
        return None
    if hf.looks_like(head, os.path.basename(path)):
        return HF
    if lightning.looks_like(head):
        return LIGHTNING
    return None


def _folder_file(directory: str, by_name: bool = False) -> tuple[str, str] | None:
    """(format, file) for a folder holding another tool's log, else None; ``by_name``:
    also a file of that name whose content is not recognised (a damaged one)."""
    for fmt, name in FOLDER_FILES:
        f = os.path.join(directory, name)
        if os.path.isfile(f) and _detect_file(f, by_name) == fmt:
            return fmt, f
    return None


def detect(path: str) -> str | None:
    """HF, LIGHTNING or TENSORBOARD when ``path`` (a file or folder) is another tool's log;
    None for our own logs, folders of rank files and anything else (the usual path
    then answers). Reads at most 64 KiB of a file; a folder is searched with bounds."""
    try:
        if os.path.isdir(path):
            found = _folder_file(path)
            if found is not None:
                return found[0]
            if any(n.endswith(".jsonl") for n in _names(path)):
                return None  # a folder of our rank files
            files, _ = tboard.find_event_files(path)
            if files:
                return TENSORBOARD
            damaged = _folder_file(path, by_name=True)  # said damaged, not "no .jsonl log"
            return damaged[0] if damaged is not None else None
        return _detect_file(path)
    except (OSError, ValueError):
        return None


def _names(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as it:
            return [e.name for _, e in zip(range(10000), it, strict=False)]
    except OSError:
        return []


def prepare(path: str, fmt: str) -> None:
    """What can be said before reading (a viewer checks it before its UI starts): a
    missing optional reader raises :class:`MissingExtra`."""
    if fmt == TENSORBOARD:
        tboard.require()


# Logs read by the viewer's command line before its screen starts (:func:`preload`), each
# waiting for the source that shows it (:func:`take_preloaded`): read once, not twice.
_preloaded: dict[tuple[str, str], ForeignLog] = {}


def preload(path: str, fmt: str) -> None:
    """Read another tool's log now, so that one that cannot be read is one error line
    before the viewer's screen starts (as our own logs are), and keep it for the source.
    Raises what :func:`load` raises."""
    _preloaded[(path, fmt)] = load(path, fmt)


def take_preloaded(path: str, fmt: str) -> ForeignLog | None:
    """The log :func:`preload` read for ``path``, once; ``None`` when there is none."""
    return _preloaded.pop((path, fmt), None)


def load(path: str, fmt: str | None = None) -> ForeignLog:
    """Read another tool's log (a file or a folder) into our records.

    Raises :class:`SourceError` (one line) when it cannot be read, and
    :class:`MissingExtra` (a ``SourceError``) when an optional reader is missing."""
    fmt = fmt or detect(path)
    if fmt is None:
        raise SourceError(f"{path}: not a log dltop can read")
    target = path
    if os.path.isdir(path) and fmt != TENSORBOARD:
        found = _folder_file(path) or _folder_file(path, by_name=True)
        if found is None:
            raise SourceError(f"{path}: no trainer_state.json or metrics.csv in the folder")
        target = found[1]
    try:
        if fmt == HF:
            return hf.load(target, shown=path)
        if fmt == LIGHTNING:
            return lightning.load(target, shown=path)
        return tboard.load(target, shown=path)
    except MemoryError:
        raise SourceError(f"{path}: too big to read into memory") from None
