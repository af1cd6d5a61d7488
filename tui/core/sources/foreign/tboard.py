"""TensorBoard event files (``events.out.tfevents.*``): their scalars as our records.

The records are read by ``tfrecord.py`` (bulk reads, C checksums) and each one parsed
with TensorBoard's own generated ``Event`` message (the optional extra: ``pip install
'dltop-monitor[tensorboard]'``, which also brings the ``crc32c`` extension), so a file is
read once, in order, and converted as it goes: a long run costs a window of records, not
the run (issue 29: a 1 M-step file of 283 MB was refused, and 200 k steps took 416 MB).
TensorBoard's ``EventAccumulator`` took 76-81 s and up to 1.3 GB on that file.

Which tag fills which field is decided from the first :data:`PREVIEW` values (the names
table, ``names.py``); a tag first seen after them is left out and counted. A damaged
record (a checksum that does not hold, a file cut inside a record) ends the file's read
and is said with the count. Recognition needs no TensorBoard: the first record's header
checksum is checked here.
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
from collections.abc import Iterator
from typing import Any

from .....probe.schema import Records
from ...files.sourcefiles import read_head
from . import names, tfrecord
from .common import (
    MAX_ENTRIES,
    MAX_EVENT_FILES,
    MAX_EXTRAS,
    MAX_SCAN_DEPTH,
    MAX_SCAN_ENTRIES,
    TENSORBOARD,
    WINDOW,
    ForeignLog,
    Merger,
    SourceError,
    exit_record,
    meta_record,
    skipped_note,
)
from .tbpoints import Point, Read, points_of

MISSING = (
    "reading TensorBoard event files needs the tensorboard package — "
    "pip install 'dltop-monitor[tensorboard]'"
)
NAME_HINT = "tfevents"
PREVIEW = 200_000  # values read before the tags' roles are chosen


class MissingExtra(SourceError):
    """The optional reader is not installed: the message is the whole line to print."""


def find_event_files(directory: str) -> tuple[list[str], bool]:
    """Event files under ``directory`` (by name hint and framing), bounded in depth, in
    entries looked at and in files kept; and whether the bounds cut the search short."""
    found: list[str] = []
    seen = 0
    cut = False
    level = [directory]
    for _ in range(MAX_SCAN_DEPTH + 1):
        nxt: list[str] = []
        for d in level:
            try:
                with os.scandir(d) as it:  # a huge folder is not listed whole
                    entries = list(itertools.islice(it, MAX_SCAN_ENTRIES + 1 - seen))
            except OSError:
                continue
            entries.sort(key=lambda e: e.name)
            for e in entries:
                seen += 1
                if seen > MAX_SCAN_ENTRIES:
                    return sorted(found), True
                try:
                    st = e.stat(follow_symlinks=False)  # no symlinked folders: no loops
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    nxt.append(e.path)
                elif (
                    stat.S_ISREG(st.st_mode)
                    and NAME_HINT in e.name
                    and tfrecord.framed(read_head(e.path, 12) or b"")
                ):
                    found.append(e.path)
                    if len(found) >= MAX_EVENT_FILES:
                        return sorted(found), True
        level = nxt
        if not level:
            break
    else:
        cut = bool(level)
    return sorted(found), cut


def _loader() -> Any:
    """TensorBoard's ``Event`` message class (the ``from_bytes`` of each record)."""
    try:
        from tensorboard.compat.proto import event_pb2  # noqa: PLC0415
    except ImportError:
        raise MissingExtra(MISSING) from None
    except Exception as exc:  # a broken install (protobuf mismatch...) is no traceback either
        raise MissingExtra(f"{MISSING} (the installed one failed to load: {exc})") from None
    logging.getLogger("tensorboard").addHandler(logging.NullHandler())
    logging.getLogger("tensorboard").propagate = False
    return event_pb2.Event


def require() -> None:
    """Raise :class:`MissingExtra` now (before a UI starts) when the reader is missing."""
    _loader()


def load(path: str, shown: str | None = None) -> ForeignLog:
    """Open an event file, or every event file in a folder (bounded; see common.py), read
    the first :data:`PREVIEW` values to choose which tag fills which field (a file without
    scalars is said now, in one line), and convert the rest as it is read."""
    event_cls = _loader()
    notes: list[str] = []
    if os.path.isdir(path):
        files, cut = find_event_files(path)
        if not files:
            raise SourceError(f"{path}: no TensorBoard event files found")
        if cut:
            notes.append(
                f"warning: searched only part of the folder (at most {MAX_EVENT_FILES} event "
                f"files, {MAX_SCAN_DEPTH} levels, {MAX_SCAN_ENTRIES} entries)"
            )
        root = path
    else:
        files, root = [path], os.path.dirname(path)
    read = Read()
    points = points_of(event_cls, files, root, read, PREVIEW, MAX_ENTRIES)
    preview: list[list[Point]] = []
    for batch in points:  # until the preview's values are counted: the roles are chosen then
        preview.append(batch)
        if read.values >= PREVIEW:
            break
    if not any(preview):
        # a folder's search may have found a file deep below it (`dltop check .` in a
        # project): say which, so the user knows what was read
        which = f"the event file{'s' if len(files) > 1 else ''}"
        if root is path:
            more = f" and {len(files) - 1} more" if len(files) > 1 else ""
            which += f" found below it ({os.path.relpath(files[0], path)}{more})"
        why = f" ({read.errors[0]})" if read.errors else ""
        if read.skipped and not why:  # scalars there were, none usable: say so, not "none"
            why = f" ({read.skipped} scalar values left out: no step in range, or not a number)"
        raise SourceError(f"{path}: no scalars in {which}{why}")
    chosen = names.choose(read.counts, MAX_EXTRAS)
    log = ForeignLog(TENSORBOARD, shown or path, files)

    def stream(log: ForeignLog) -> Iterator[Records]:
        yield from _convert(log, chosen, read, itertools.chain(preview, points), notes)

    log.stream = stream
    return log


def _convert(
    log: ForeignLog,
    chosen: dict[str, str],
    read: Read,
    batches: Iterator[list[Point]],
    notes: list[str],
) -> Iterator[Records]:
    notes.insert(
        0,
        f"another tool's log: {names.lacking(chosen.values(), wall_time=True)}",
    )
    meta = meta_record(TENSORBOARD, log.path, notes, t=read.first_t, tags=sorted(chosen)[:64])
    yield [meta]
    merged = Merger(window=WINDOW)
    ended: tuple[int, float | None] | None = None
    targets = {tag: names.target(role) for tag, role in chosen.items() if role != names.END}
    put, take, window = merged.put, merged.take, merged.window or 0
    for batch in batches:
        at = 0
        while at < len(batch):
            # the merger hands records on once it holds more than ``window``: a put adds
            # one at most, so the next ``room`` points cannot make that happen, and are
            # put without asking (the same records, in the same batches, as per point)
            room = max(window - len(merged.order), 1)
            for tag, step, t, x in batch[at : at + room]:
                where = targets.get(tag)
                if where is None:
                    if tag in chosen or tag not in read.counts:  # the end-of-training summary
                        ended = (step, t)  # (logged once, at the end: often after the preview)
                    continue
                kind, field = where
                put(kind, step, field, x, t)
            at += room
            if len(merged.order) > window and (ready := take()):
                yield ready
    last = merged.take(final=True)
    if read.capped:
        notes.append(f"warning: only the first {MAX_ENTRIES} events or values were read")
    notes += [f"warning: {e}" for e in read.errors[:5]]
    if read.late:
        notes.append(
            f"warning: {read.late} values left out: their tags were first seen after the "
            f"first {PREVIEW} values, from which the tags' roles are chosen"
        )
    if read.skipped:
        notes.append(skipped_note(read.skipped, "events or values"))
    if (repeated := merged.note()) is not None:
        notes.append(repeated)
    if ended is not None:
        rec = exit_record(ended[0])
        if ended[1] is not None:
            rec["t"] = ended[1]
        last.append(rec)
    log.skipped = read.skipped
    log.said(meta, notes)
    if last:
        yield last
