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
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from .....probe.schema import MAX_STEP, Records
from ...files.sourcefiles import read_head
from . import names, tfrecord
from .common import (
    MAX_ENTRIES,
    MAX_EVENT_FILES,
    MAX_EXTRAS,
    MAX_SCAN_DEPTH,
    MAX_SCAN_ENTRIES,
    TENSORBOARD,
    WALL_TIME_MAX,
    WINDOW,
    ForeignLog,
    Merger,
    SourceError,
    exit_record,
    meta_record,
    open_capped,
    skipped_note,
    step_of,
    wall_time,
)
from .tbwire import scalar_event

MISSING = (
    "reading TensorBoard event files needs the tensorboard package — "
    "pip install 'dltop-monitor[tensorboard]'"
)
NAME_HINT = "tfevents"
PREVIEW = 200_000  # values read before the tags' roles are chosen
# an event file in a folder named like this holds validation values (Keras: logs/validation)
EVAL_DIRS = frozenset(("validation", "val", "valid", "eval", "evaluation"))
SCALAR_PLUGINS = ("", "scalars")
DT_FLOAT, DT_DOUBLE, DT_HALF = 1, 2, 19  # TensorFlow dtype enum values
_TENSOR_FORMAT = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_HALF: "<e"}


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


def _scalar(value: Any) -> float | None | bool:
    """A summary value's scalar; None when it is a scalar we cannot read, False when it is
    not a scalar at all (text, histograms, images: not counted as skipped)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor" or value.metadata.plugin_data.plugin_name not in SCALAR_PLUGINS:
        return False
    t = value.tensor
    if t.tensor_shape.dim:  # not a 0-d tensor
        return False
    if t.float_val:
        return float(t.float_val[0])
    if t.double_val:
        return float(t.double_val[0])
    if t.half_val and t.dtype == DT_HALF:  # float16 bits in an int32 field
        return float(struct.unpack("<e", struct.pack("<H", t.half_val[0] & 0xFFFF))[0])
    fmt = _TENSOR_FORMAT.get(t.dtype)
    if fmt is not None and len(t.tensor_content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, t.tensor_content)[0])
    return None


def _ends(tag: str) -> bool:
    """The tag of the tool's end-of-training summary (``train/train_runtime``): an exact
    name of the table (a dict lookup: this runs for every value of a late tag)."""
    return names.EXACT.get(tag.strip().lower(), (None,))[0] == names.END


class _Read:
    """What reading the files met: values left out, damage, the budget's end."""

    def __init__(self) -> None:
        self.skipped = 0
        self.errors: list[str] = []
        self.capped = False
        self.counts: Counter[str] = Counter()  # values per tag, in the preview
        self.previewed = False  # the preview was read: the tags' roles are chosen
        self.late = 0  # values of tags first seen after the preview: left out
        self.first_t: float | None = None
        self.values = 0


Point = tuple[str, int, "float | None", float]


def _points(event_cls: Any, files: list[str], root: str, read: _Read) -> Iterator[Point]:
    """(tag, step, wall time, value) of every scalar of ``files``, in order."""
    budget = MAX_ENTRIES
    from_bytes = event_cls.FromString
    for f in files:
        try:
            fd, _ = open_capped(f, "event file")
        except SourceError as exc:
            if len(files) == 1:
                raise
            read.errors.append(str(exc))
            continue
        rel = os.path.relpath(os.path.dirname(f), root) if root else ""
        prefix = "val/" if os.path.basename(rel).lower() in EVAL_DIRS else ""
        walk = tfrecord.Walk()
        values: Sequence[tuple[str, float | bool | None]]  # False: not a scalar
        step: int | None
        try:
            for data in tfrecord.records(fd, walk, budget):
                common = scalar_event(data)  # the usual event, read without protobuf
                if common is not None:
                    # a float per tag, a step of 0 .. 2**63-1 (varint), a double wall time:
                    # as_step() and wall_time() of those, inline (this runs per event)
                    wall, step, values = common
                    if step >= MAX_STEP:
                        step = None
                    t = wall if 0 < wall < WALL_TIME_MAX else None  # (NaN, Inf: False)
                else:
                    try:
                        event = from_bytes(data)
                    except Exception:  # framing that holds around data that is no event
                        read.skipped += 1
                        continue
                    if not event.HasField("summary"):
                        continue
                    step = step_of(event.step)
                    values = [(str(v.tag)[:200], _scalar(v)) for v in event.summary.value]
                    t = wall_time(event.wall_time)
                for raw_tag, x in values:
                    if type(x) is not float or step is None:  # (the usual event: never)
                        if x is not False:  # False: not a scalar, not counted
                            read.skipped += 1
                        continue
                    if read.values >= MAX_ENTRIES:  # one event can hold many values
                        read.capped = True
                        return
                    read.values += 1
                    tag = prefix + raw_tag
                    if not read.previewed:
                        read.counts[tag] += 1
                    elif tag not in read.counts and not _ends(tag):
                        read.late += 1  # no role chosen for it (and not kept: memory)
                        continue
                    if read.first_t is None and t is not None:
                        read.first_t = t
                    yield tag, step, t, x
        except OSError as exc:
            read.errors.append(f"{os.path.basename(f)}: unreadable ({exc.strerror or exc})")
        finally:
            os.close(fd)
        budget -= walk.records
        if walk.records >= MAX_ENTRIES or budget <= 0:
            read.capped = True  # not damage: the rest is left unread
            return
        if walk.damage is not None:
            read.skipped += 1  # at least the damaged record; what follows it cannot be found
            read.errors.append(
                f"{os.path.basename(f)}: stopped at {walk.damage} after {walk.records} records"
            )


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
    read = _Read()
    points = _points(event_cls, files, root, read)
    preview = list(itertools.islice(points, PREVIEW))
    read.previewed = True
    if not preview:
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
    log: ForeignLog, chosen: dict[str, str], read: _Read, points: Iterator[Point], notes: list[str]
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
    for tag, step, t, x in points:
        where = targets.get(tag)
        if where is None:
            if tag in chosen or tag not in read.counts:  # the end-of-training summary
                ended = (step, t)  # (logged once, at the end: often after the preview)
            continue
        kind, field = where
        put(kind, step, field, x, t)
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
