"""PyTorch Lightning ``CSVLogger`` ``metrics.csv``: sparse rows as our records.

Lightning writes one row per ``log_metrics`` call with the union of every column ever
logged, so step-level, epoch-level, training and validation values sit in separate rows
with blank cells. Columns are picked by name (``names.py``): the training loss prefers a
per-step column (``train_loss_step``) over an epoch mean (``train_loss_epoch``), then the
column with the most values; any other column is kept as an extra of its step, by its
own name. Rows of one step merge into one record. No wall time.

Read twice, a line at a time: once to count each column's filled cells (which column
plays which part), once to convert, holding a window of records, so a long run's file
costs the memory of that window, not of the run.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Iterator

from .....probe.schema import Records
from . import names
from .common import (
    LIGHTNING,
    MAX_ENTRIES,
    MAX_EXTRAS,
    WINDOW,
    ForeignLog,
    Merger,
    SourceError,
    meta_record,
    number,
    open_capped,
    skipped_note,
    step_of,
)

MAX_COLUMNS = 1024
MAX_CELL = 1 << 16  # characters in one cell: a longer one is a blob, not a metric
MAX_LINE = 1 << 22  # bytes in one line: a longer one is no row (read in pieces, dropped)


def _text(raw: bytes, path: str) -> None:
    if b"\0" in raw:
        raise SourceError(f"{path}: not a metrics.csv (binary data) — pass a CSVLogger's file")


def _lines(path: str) -> Iterator[str | None]:
    """The file's lines, read a chunk at a time (never a FIFO or device: ``open_log``);
    ``None`` for a line over :data:`MAX_LINE` bytes."""
    fd, _ = open_capped(path, "metrics.csv")
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            first = True
            while raw := f.readline(MAX_LINE + 1):
                _text(raw, path)
                if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                    while raw and not raw.endswith(b"\n"):  # the rest of it, dropped
                        raw = f.readline(1 << 20)
                        _text(raw, path)
                    first = False
                    yield None  # a line over MAX_LINE: no row, counted
                    continue
                line = raw.decode("utf-8", errors="replace")
                if first:
                    line, first = line.lstrip("\ufeff"), False
                yield line.rstrip("\r\n")
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _rows(path: str) -> tuple[list[str], Iterator[list[str] | None]]:
    """The header, and the rows as they are read (``None`` for a line that is no row).

    Line by line: a CSVLogger writes one row per line and never quotes a newline, so one
    damaged line (an unterminated quote, a cell over ``MAX_CELL``) costs that row alone,
    counted, instead of the rest of the file (a quote left open swallowed every later
    row into one cell) or the whole file (a long cell raised for the file)."""
    lines = _lines(path)
    head = next(lines, "")
    if head is None:
        raise SourceError(f"{path}: corrupt metrics.csv (line 1: over {MAX_LINE} bytes)")
    header = _row(head) if head else None
    if not head:
        raise SourceError(f"{path}: empty metrics.csv")
    if header is None:
        raise SourceError(f"{path}: corrupt metrics.csv (line 1: not a CSV header)")
    if not header:
        raise SourceError(f"{path}: empty metrics.csv")

    def rows() -> Iterator[list[str] | None]:
        for n, line in enumerate(lines):
            if n >= MAX_ENTRIES:
                return
            if line is None:
                yield None  # counted as damaged, as a cell over MAX_CELL is
            elif line.strip():
                yield _row(line)

    return header[:MAX_COLUMNS], rows()


def _row(line: str) -> list[str] | None:
    old = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL)
    try:
        return next(csv.reader((line,)), [])
    except csv.Error:  # a cell over MAX_CELL characters
        return None
    finally:
        csv.field_size_limit(old)


def load(path: str, shown: str | None = None) -> ForeignLog:
    """Open the file and choose its columns (one pass counting the filled cells of each),
    then convert it as :meth:`ForeignLog.batches` reads it (a second pass, a window of
    rows at a time)."""
    header, rows = _rows(path)
    cols = {h.strip(): i for i, h in enumerate(header)}
    if "step" not in cols:
        raise SourceError(f"{path}: not a Lightning metrics.csv (no 'step' column)")
    counts: Counter[str] = Counter()
    good = bad = 0
    for row in rows:
        if row is None:
            bad += 1
            continue
        good += 1
        for name, i in cols.items():
            if i < len(row) and row[i].strip():
                counts[name] += 1
    if bad and not good:
        raise SourceError(
            f"{path}: corrupt metrics.csv (no row could be read: {bad} damaged lines)"
            " — pass a CSVLogger's metrics.csv"
        )
    chosen = names.choose(counts, MAX_EXTRAS)
    if not any(role == names.TRAIN_LOSS for role in chosen.values()):
        raise SourceError(f"{path}: no training loss column in metrics.csv header")
    log = ForeignLog(LIGHTNING, shown or path, [path])

    def stream(log: ForeignLog) -> Iterator[Records]:
        yield from _convert(log, path, cols, chosen)

    log.stream = stream
    return log


def _convert(
    log: ForeignLog, path: str, cols: dict[str, int], chosen: dict[str, str]
) -> Iterator[Records]:
    loss_col = next(n for n, r in chosen.items() if r == names.TRAIN_LOSS)
    notes = [
        f"another tool's log: {names.lacking(chosen.values(), wall_time=False)}; "
        f"training loss from column {loss_col!r}"
    ]
    meta = meta_record(LIGHTNING, log.path, notes, columns=sorted(chosen))
    yield [meta]
    step_col = cols["step"]
    wanted = [(cols[name], role) for name, role in chosen.items() if role != names.END]
    merged = Merger(window=WINDOW)
    skipped = 0
    _, rows = _rows(path)
    for row in rows:
        if row is None:
            skipped += 1
            continue
        step = step_of(row[step_col]) if step_col < len(row) else None
        if step is None:
            if any(i < len(row) and row[i].strip() for i, _ in wanted):
                skipped += 1  # values without a usable step
            continue
        for i, role in wanted:
            cell = row[i].strip() if i < len(row) else ""
            if not cell:
                continue
            f = number(cell)
            if f is None:
                skipped += 1
                continue
            kind, field = names.target(role)
            merged.put(kind, step, field, f)
        if ready := merged.take():
            yield ready
    last = merged.take(final=True)
    if skipped:
        notes.append(skipped_note(skipped, "rows or cells"))
    if (repeated := merged.note()) is not None:
        notes.append(repeated)
    log.skipped = skipped
    log.said(meta, notes)
    if last:
        yield last


def looks_like(head: bytes) -> bool:
    """A CSV header line with a ``step`` column and a loss-like column."""
    first = head.split(b"\n", 1)[0].strip()
    if not first or b"\0" in first or len(first) > 1 << 15:
        return False
    cols = [c.strip().lower() for c in first.decode("utf-8", errors="replace").split(",")]
    return "step" in cols and any("loss" in c for c in cols)
