"""PyTorch Lightning ``CSVLogger`` ``metrics.csv``: sparse rows as our records.

Lightning writes one row per ``log_metrics`` call with the union of every column ever
logged, so step-level, epoch-level, training and validation values sit in separate rows
with blank cells. Columns are picked by name (``names.py``): the training loss prefers a
per-step column (``train_loss_step``) over an epoch mean (``train_loss_epoch``), then the
column with the most values. Rows of one step merge into one record. No wall time.
"""

from __future__ import annotations

import csv
import io
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


def _rows(blob: bytes, path: str) -> tuple[list[str], list[list[str]]]:
    if b"\0" in blob:
        raise SourceError(f"{path}: not a metrics.csv (binary data) — pass a CSVLogger's file")
    text = blob.decode("utf-8", errors="replace")
    reader = csv.reader(io.StringIO(text, newline=""))
    old = csv.field_size_limit()
    csv.field_size_limit(MAX_CELL)
    try:
        header = next(reader, None)
        if not header:
            raise SourceError(f"{path}: empty metrics.csv")
        rows = []
        for row in reader:
            rows.append(row)
            if len(rows) > MAX_ENTRIES:
                break
    except csv.Error as exc:
        raise SourceError(
            f"{path}: corrupt metrics.csv (line {reader.line_num}: {exc})"
            " — pass a CSVLogger's metrics.csv"
        ) from None
    finally:
        csv.field_size_limit(old)
    return header[:MAX_COLUMNS], rows


def load(path: str, shown: str | None = None) -> ForeignLog:
    header, rows = _rows(read_capped(path, "metrics.csv"), path)
    log = ForeignLog(LIGHTNING, shown or path, [path])
    cols = {h.strip(): i for i, h in enumerate(header)}
    if "step" not in cols:
        raise SourceError(f"{path}: not a Lightning metrics.csv (no 'step' column)")
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
    skipped = 0
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
