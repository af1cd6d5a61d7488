"""What the readers of other tools' logs share: limits, the record builders, value checks.

Everything in these files is untrusted (another person's file): every number goes through
:func:`dltop.probe.schema.as_float` / :func:`~dltop.probe.schema.as_step`, every limit
here bounds the work a file can cause, and a file that cannot be read is one
:class:`~dltop.tui.core.files.sourcefiles.SourceError` line, never a traceback.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .....probe.schema import (
    EV_EXIT,
    EVAL,
    EVENT,
    META,
    SCHEMA_VERSION,
    STEP,
    Record,
    Records,
    as_float,
    as_step,
)
from ...files.sourcefiles import SourceError, open_log

MAX_FILE_BYTES = 64 << 20  # bytes read whole from one file (the readers that cannot stream)
# bytes of a file read as it streams (trainer_state.json, metrics.csv): memory does not grow
# with it, the time does, as for our own logs; beyond this the file is refused, not cut
MAX_STREAM_BYTES = 16 << 30
MAX_ENTRIES = 50_000_000  # log_history entries, CSV rows or TensorBoard events per source
BATCH = 4096  # records per batch handed on (the store and the rules take them as they come)
WINDOW = 8192  # records a streaming reader holds to merge a step's values logged apart
MAX_EVENT_FILES = 64  # TensorBoard event files read from one folder
MAX_SCAN_ENTRIES = 5000  # directory entries looked at while searching a folder for event files
MAX_SCAN_DEPTH = 4  # folder levels searched below the one given
MAX_EXTRAS = 16  # extra metrics kept per record kind (eval accuracy, epoch...)

# the `format` names, and what `meta.source` says about each
HF, LIGHTNING, TENSORBOARD = "hf", "lightning", "tensorboard"
SOURCE_NOTE = {
    HF: "Hugging Face Trainer trainer_state.json (read-only; converted by dltop)",
    LIGHTNING: "PyTorch Lightning CSVLogger metrics.csv (read-only; converted by dltop)",
    TENSORBOARD: "TensorBoard event files, scalars only (read-only; converted by dltop)",
}
# the tool each format comes from, as a sentence names it ("not in this Lightning log")
TOOL_NAME = {HF: "Hugging Face Trainer", LIGHTNING: "Lightning", TENSORBOARD: "TensorBoard"}


Stream = Callable[["ForeignLog"], Iterator[Records]]


@dataclass
class ForeignLog:
    """One source converted into our records: ``meta`` first, then ``step``/``eval``/``event``.

    Converted as it is read (:meth:`batches`), so a long run's log costs the memory of a
    batch, not of the run (issue 29: a 64 MiB trainer_state.json took 15-60x its size as
    Python objects, and a bigger one was refused). ``skipped`` and ``notes`` are complete
    once the batches are all read; the notes are also appended to the meta record's own
    ``notes`` list then, so a store or engine that kept the meta record sees them too.
    """

    format: str  # HF, LIGHTNING or TENSORBOARD
    path: str  # the file or folder given
    files: list[str]  # the files read
    skipped: int = 0  # entries (rows, events, values) left out as unusable
    notes: list[str] = field(default_factory=list)  # said once in meta.notes
    stream: Stream | None = None  # the reader's generator of batches, run once
    _records: Records | None = None

    def batches(self) -> Iterator[Records]:
        """The records in batches of about :data:`BATCH`, read and converted as they come.
        The stream runs once; after :attr:`records` was asked, its copy is replayed."""
        if self._records is not None:
            for i in range(0, len(self._records), BATCH):
                yield self._records[i : i + BATCH]
            return
        stream, self.stream = self.stream, None
        if stream is None:
            raise RuntimeError("the log's records were read already")
        yield from stream(self)

    @property
    def records(self) -> Records:
        """Every record at once (tests, small logs): the stream read into a list."""
        if self._records is None:
            self._records = [r for b in self.batches() for r in b]
        return self._records

    @property
    def steps(self) -> int:
        return sum(1 for r in self.records if r.get("kind") == STEP)

    def said(self, meta: Record, notes: list[str]) -> None:
        """The notes known at the end of the read, kept here and in the meta record."""
        self.notes = list(notes)
        meta_notes = meta.get("notes")
        if isinstance(meta_notes, list):
            meta_notes[:] = notes


def open_capped(path: str, what: str, limit: int = MAX_STREAM_BYTES) -> tuple[int, int]:
    """A descriptor on the regular file at ``path`` (``open_log``) and its size, refused in
    one line when the file is over ``limit`` bytes. The caller closes the descriptor."""
    fd = open_log(path)
    try:
        size = os.fstat(fd).st_size
    except OSError as exc:
        os.close(fd)
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > limit:
        os.close(fd)
        raise SourceError(
            f"{path}: {what} of {size} bytes is over dltop's {limit >> 30} GiB "
            "limit for another tool's log"
        )
    return fd, size


class MappedFile:
    """A whole regular file as a read-only memory map (empty files as ``b""``): parsers
    that need the whole text (a JSON document) read it without a copy on the heap.

    A file up to :data:`MAX_FILE_BYTES` is read into memory instead (its pages would count
    in RSS as much): a mapped file cut short while it is read (rewritten in place, copied
    over) kills the process with SIGBUS at the next page, without a word."""

    def __init__(self, path: str, what: str, limit: int = MAX_STREAM_BYTES) -> None:
        fd, size = open_capped(path, what, limit)
        self._bytes = b""
        self._map: mmap.mmap | None = None
        try:
            if size > MAX_FILE_BYTES:
                self._map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            else:
                parts, got = [], 0
                while got < size and (part := os.pread(fd, min(1 << 20, size - got), got)):
                    parts.append(part)
                    got += len(part)
                self._bytes = b"".join(parts)
        except OSError as exc:
            raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        self.size = size

    @property
    def data(self) -> bytes | mmap.mmap:
        return self._map if self._map is not None else self._bytes

    def close(self) -> None:
        self._bytes = b""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still alive: the GC unmaps it later
                pass


def number(value: Any) -> float | None:
    """A metric value: a float (NaN and infinities kept: they are the news), or None for
    what is no number (text, bool, list, object). Numeric text (a CSV cell) is parsed."""
    f = as_float(value)
    if f is not None:
        return f
    if isinstance(value, str):
        s = value.strip()
        if not s or len(s) > 64:
            return None
        try:
            return float(s)
        except ValueError:
            return None
    return None


def step_of(value: Any) -> int | None:
    """A step number, or None when it is not a whole number in range (CSV cells included)."""
    if isinstance(value, str):
        f = number(value)
        if f is None or not math.isfinite(f):
            return None
        value = f
    return as_step(value)


WALL_TIME_MAX = 1e11  # seconds since 1970: a wall time past the year 5138 is no time


def wall_time(value: Any) -> float | None:
    """A record's wall time: a finite number of seconds after 1970, else None."""
    f = as_float(value)
    return f if f is not None and math.isfinite(f) and 0 < f < WALL_TIME_MAX else None


def run_id(path: str) -> str:
    """The file or folder name; a generic name (trainer_state.json, metrics.csv) keeps its
    folder's name in front (``checkpoint-500/trainer_state.json``)."""
    path = os.path.normpath(path)
    name = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    if name in ("trainer_state.json", "metrics.csv") and parent:
        return f"{parent}/{name}"
    return name


def meta_record(fmt: str, path: str, notes: list[str], **extra: Any) -> Record:
    rec: Record = {
        "kind": META,
        "v": SCHEMA_VERSION,
        "run_id": run_id(path),
        "source": SOURCE_NOTE[fmt],
        "format": fmt,
        "notes": list(notes),
    }
    rec.update({k: v for k, v in extra.items() if v is not None})
    return rec


def exit_record(step: int | None) -> Record:
    """The tool's own end-of-training summary was logged: the run finished."""
    rec: Record = {"kind": EVENT, "type": EV_EXIT, "status": "ok"}
    if step is not None:
        rec["step"] = step
    return rec


class Merger:
    """``step`` and ``eval`` records keyed by (kind, step), in order of first appearance,
    so values of one step logged in separate rows or events become one record.

    With ``window``, at most that many records are held: :meth:`take` hands on the oldest
    ones (a reader streaming a long log keeps a window, not the run). A value for a step
    already handed on comes too late to join its record: it is left out and counted with
    the repeated values (a tool logs one step's values together, so this is rare)."""

    def __init__(self, window: int | None = None) -> None:
        self._by_key: dict[tuple[str, int], dict[str, Any]] = {}
        self.order: list[dict[str, Any]] = []  # built here: (kind, step) typed as put
        self.repeated = 0  # other values of a field a step already had: left out, said
        self.window = window
        # per kind, the steps handed on: the last ``window`` of them exactly, and a mark at
        # or below which all older ones lie (the lowest of those kept, once some were
        # forgotten). Not the highest step handed on: one row with a wild step (999999999)
        # then made every later step a "repeat"
        self._seen: dict[str, tuple[set[int], list[int]]] = {}
        self._gone: dict[str, int] = {}

    def put(self, kind: str, step: int, name: str, value: float, t: float | None = None) -> None:
        """``value`` under ``name`` in the (kind, step) record; ``t``, when given, as that
        record's time (the first one given stays, like any other value)."""
        key = (kind, step)
        rec = self._by_key.get(key)
        if rec is None:
            seen = self._seen.get(kind)
            gone = self._gone.get(kind)
            if (seen is not None and step in seen[0]) or (gone is not None and step <= gone):
                self.repeated += 1  # its record was handed on already
                return
            rec = {"kind": kind, "step": step}
            self._by_key[key] = rec
            self.order.append(rec)
        if name not in rec:
            rec[name] = value
        elif name != "t" and rec[name] != value:  # a time, or the same value again: no loss
            self.repeated += 1
        if t is not None and "t" not in rec:
            rec["t"] = t

    def take(self, final: bool = False) -> Records:
        """The records to hand on now: all of them when ``final`` (or without a window),
        else the oldest half once more than ``window`` are held."""
        if not final and (self.window is None or len(self.order) <= self.window):
            return []
        n = len(self.order) if final or self.window is None else len(self.order) - self.window // 2
        out, self.order = self.order[:n], self.order[n:]
        keys = [(rec["kind"], rec["step"]) for rec in out]
        by_key = self._by_key
        for key in keys:
            del by_key[key]
        kinds = {kind for kind, _ in keys}
        for kind in kinds:  # in bulk: this runs for every record of a long log
            steps = [s for k, s in keys if k == kind] if len(kinds) > 1 else [s for _, s in keys]
            seen, recent = self._seen.setdefault(kind, (set(), []))
            seen.update(steps)
            recent += steps
            extra = len(recent) - (self.window or len(recent))
            if extra > 0:
                seen.difference_update(recent[:extra])
                del recent[:extra]
                low = min(recent)
                self._gone[kind] = max(self._gone.get(kind, low), low)
        return out

    def note(self) -> str | None:
        """What was left out of steps logged more than once (a resumed run, a loop that
        logs twice per step), or None."""
        if not self.repeated:
            return None
        return (
            f"warning: {self.repeated} values left out: their step already had another value "
            "of that field (the first of each is kept)"
        )


def skipped_note(skipped: int, what: str) -> str:
    return f"warning: {skipped} {what} skipped (not a number, no step, or unknown shape)"


__all__ = [
    "EVAL",
    "STEP",
    "ForeignLog",
    "Merger",
    "SourceError",
    "exit_record",
    "meta_record",
    "open_capped",
    "number",
    "run_id",
    "skipped_note",
    "step_of",
    "wall_time",
]
