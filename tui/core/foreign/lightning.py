"""PyTorch Lightning ``CSVLogger`` ``metrics.csv``: sparse rows as our records.

Lightning writes one row per ``log_metrics`` call with the union of every column ever
logged, so step-level, epoch-level, training and validation values sit in separate rows
with blank cells. Columns are picked by name (``names.py``): the training loss prefers a
per-step column (``train_loss_step``) over an epoch mean (``train_loss_epoch``), then the
column with the most values. Rows of one step merge into one record. No wall time.
"""

from __future__ import annotations

import csv
from collections import Counter

from dltop.tui.core.foreign import names
from dltop.tui.core.foreign.common import (
    LIGHTNING,
    MAX_ENTRIES,
    MAX_EXTRAS,
    ForeignLog,
    Merger,
    SourceError,
    meta_record,
    number,
    read_capped,
    skipped_note,
    step_of,
)

MAX_COLUMNS = 1024
MAX_CELL = 1 << 16  # characters in one cell: a longer one is a blob, not a metric


def _rows(blob: bytes, path: str) -> tuple[list[str], list[list[str]], int]:
    """The header, the rows, and how many lines could not be read as a row.

    Line by line: a CSVLogger writes one row per line and never quotes a newline, so one
    damaged line (an unterminated quote, a cell over ``MAX_CELL``) costs that row alone,
    counted, instead of the rest of the file (a quote left open swallowed every later
    row into one cell) or the whole file (a long cell raised for the file)."""
    if b"\0" in blob:
        raise SourceError(f"{path}: not a metrics.csv (binary data) — pass a CSVLogger's file")
    lines = blob.decode("utf-8", errors="replace").splitlines()
    old = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL)
    try:
        header = _row(lines[0]) if lines else None
        if header is None:
            raise SourceError(f"{path}: corrupt metrics.csv (line 1: not a CSV header)")
        if not header:
            raise SourceError(f"{path}: empty metrics.csv")
        rows: list[list[str]] = []
        bad = 0
        for line in lines[1:]:
            if not line.strip():
                continue
            row = _row(line)
            if row is None:
                bad += 1
                continue
            rows.append(row)
            if len(rows) > MAX_ENTRIES:
                break
    finally:
        csv.field_size_limit(old)
    return header[:MAX_COLUMNS], rows, bad


def _row(line: str) -> list[str] | None:
    try:
        return next(csv.reader((line,)), [])
    except csv.Error:  # a cell over MAX_CELL characters
        return None


def load(path: str, shown: str | None = None) -> ForeignLog:
    header, rows, bad = _rows(read_capped(path, "metrics.csv"), path)
    log = ForeignLog(LIGHTNING, shown or path, [path])
    cols = {h.strip(): i for i, h in enumerate(header)}
    if "step" not in cols:
        raise SourceError(f"{path}: not a Lightning metrics.csv (no 'step' column)")
    if bad and not rows:
        raise SourceError(
            f"{path}: corrupt metrics.csv (no row could be read: {bad} damaged lines)"
            " — pass a CSVLogger's metrics.csv"
        )
    over = max(0, len(rows) - MAX_ENTRIES)
    rows = rows[:MAX_ENTRIES]
    counts: Counter[str] = Counter()
    for row in rows:
        for name, i in cols.items():
            if i < len(row) and row[i].strip():
                counts[name] += 1
    chosen = names.choose(counts, MAX_EXTRAS)
    if not any(role == names.TRAIN_LOSS for role in chosen.values()):
        raise SourceError(f"{path}: no training loss column in metrics.csv header")
    step_col = cols["step"]
    wanted = [(cols[name], role) for name, role in chosen.items() if role != names.END]
    merged = Merger()
    skipped = bad
    for row in rows:
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
    skipped += over
    loss_col = next(n for n, r in chosen.items() if r == names.TRAIN_LOSS)
    notes = [
        f"another tool's log: no wall time, step time, data time, memory or GPU readings; "
        f"training loss from column {loss_col!r}"
    ]
    if skipped:
        notes.append(skipped_note(skipped, "rows or cells"))
    if (repeated := merged.note()) is not None:
        notes.append(repeated)
    log.records.append(meta_record(LIGHTNING, log.path, notes, columns=sorted(chosen)))
    log.records.extend(merged.records())
    log.skipped = skipped
    log.notes = notes
    return log


def looks_like(head: bytes) -> bool:
    """A CSV header line with a ``step`` column and a loss-like column."""
    first = head.split(b"\n", 1)[0].strip()
    if not first or b"\0" in first or len(first) > 1 << 15:
        return False
    cols = [c.strip().lower() for c in first.decode("utf-8", errors="replace").split(",")]
    return "step" in cols and any("loss" in c for c in cols)
