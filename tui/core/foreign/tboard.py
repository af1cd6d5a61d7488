"""TensorBoard event files (``events.out.tfevents.*``): their scalars as our records.

Read with TensorBoard's own ``event_file_loader.LegacyEventFileLoader`` (an optional
extra: ``pip install 'dltop-monitor[tensorboard]'``). Measured on the 36 real event files
of ``shared/realruns/tensorboard`` (2.9 MB, ~51 k scalars, two cores): the loader read
them in 0.55 s (import 0.17 s), ``EventAccumulator`` in 0.71 s and ``tbparse`` in 0.80 s
(it also pulls pandas). The loader streams raw ``Event`` protos one at a time, so we stop
at our own event budget and keep no reservoir-sampled copy (the accumulator's), and it
needs nothing beyond the ``tensorboard`` package.

The loader stops quietly at a damaged record; to say so, each file's TFRecord framing
(8-byte length, masked CRC-32C of it, data, CRC of the data) is walked first, lengths and
header checksums only, and a file whose loader stops short is reported with the count.
Recognition needs no TensorBoard: the first record's header checksum is checked here.
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
import struct
from collections import Counter
from typing import Any

from dltop.tui.core.foreign import names
from dltop.tui.core.foreign.common import (
    MAX_ENTRIES,
    MAX_EVENT_FILES,
    MAX_EXTRAS,
    MAX_FILE_BYTES,
    MAX_SCAN_DEPTH,
    MAX_SCAN_ENTRIES,
    TENSORBOARD,
    ForeignLog,
    Merger,
    SourceError,
    exit_record,
    meta_record,
    open_log,
    skipped_note,
    step_of,
    wall_time,
)

MISSING = (
    "reading TensorBoard event files needs the tensorboard package — "
    "pip install 'dltop-monitor[tensorboard]'"
)
NAME_HINT = "tfevents"
MAX_RECORD = 1 << 26  # bytes in one TFRecord; a longer length is damage
# an event file in a folder named like this holds validation values (Keras: logs/validation)
EVAL_DIRS = frozenset(("validation", "val", "valid", "eval", "evaluation"))
SCALAR_PLUGINS = ("", "scalars")
DT_FLOAT, DT_DOUBLE = 1, 2  # TensorFlow dtype enum values
_TENSOR_FORMAT = {DT_FLOAT: "<f", DT_DOUBLE: "<d"}


class MissingExtra(SourceError):
    """The optional reader is not installed: the message is the whole line to print."""


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli); used on 8-byte headers only, so pure Python."""
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def framed(head: bytes) -> bool:
    """True when ``head`` starts with a TFRecord header whose checksum holds."""
    if len(head) < 12:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    (crc,) = struct.unpack("<I", head[8:12])
    return 0 < length < MAX_RECORD and masked_crc32c(head[:8]) == crc


def _walk_frames(fd: int, size: int) -> tuple[int, str | None]:
    """Records whose framing is whole, and why the walk stopped early (None: clean end)."""
    off = n = 0
    while off < size and n < MAX_ENTRIES:
        head = os.pread(fd, 12, off)
        if len(head) < 12:
            return n, "cut inside a record header"
        if not framed(head):
            return n, "a record header with a bad checksum"
        (length,) = struct.unpack("<Q", head[:8])
        off += 12 + length + 4
        if off > size:
            return n, "cut inside a record"
        n += 1
    return n, None


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
                elif stat.S_ISREG(st.st_mode) and NAME_HINT in e.name and _file_framed(e.path):
                    found.append(e.path)
                    if len(found) >= MAX_EVENT_FILES:
                        return sorted(found), True
        level = nxt
        if not level:
            break
    else:
        cut = bool(level)
    return sorted(found), cut


def _file_framed(path: str) -> bool:
    try:
        fd = open_log(path)
    except (SourceError, OSError):
        return False
    try:
        return framed(os.pread(fd, 12, 0))
    except OSError:
        return False
    finally:
        os.close(fd)


def _loader() -> Any:
    try:
        from tensorboard.backend.event_processing import event_file_loader  # noqa: PLC0415
    except ImportError:
        raise MissingExtra(MISSING) from None
    except Exception as exc:  # a broken install (protobuf mismatch...) is no traceback either
        raise MissingExtra(f"{MISSING} (the installed one failed to load: {exc})") from None
    logging.getLogger("tensorboard").addHandler(logging.NullHandler())
    logging.getLogger("tensorboard").propagate = False  # its read errors are ours to word
    return event_file_loader.LegacyEventFileLoader


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
    fmt = _TENSOR_FORMAT.get(t.dtype)
    if fmt is not None and len(t.tensor_content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, t.tensor_content)[0])
    return None


def _size_ok(path: str) -> int:
    fd = open_log(path)  # a regular file only
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise SourceError(
            f"{path}: event file of {size} bytes is over dltop's {MAX_FILE_BYTES >> 20} MiB "
            "limit for another tool's log"
        )
    return size


def load(path: str, shown: str | None = None) -> ForeignLog:
    """Read an event file, or every event file in a folder (bounded; see common.py)."""
    loader_cls = _loader()
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
    log = ForeignLog(TENSORBOARD, shown or path, files)
    points: list[tuple[str, int, float | None, float]] = []
    counts: Counter[str] = Counter()
    skipped = 0
    budget = MAX_ENTRIES
    errors: list[str] = []
    for f in files:
        try:
            size = _size_ok(f)
            fd = open_log(f)
            try:
                whole, damage = _walk_frames(fd, size)
            finally:
                os.close(fd)
        except SourceError as exc:
            if len(files) == 1:
                raise
            errors.append(str(exc))
            continue
        rel = os.path.relpath(os.path.dirname(f), root) if root else ""
        prefix = "val/" if os.path.basename(rel).lower() in EVAL_DIRS else ""
        read = 0
        capped = False  # the event or value budget ran out in this file
        try:
            for event in loader_cls(f).Load():
                if read >= budget:
                    capped = True
                    break
                read += 1
                if not event.HasField("summary"):
                    continue
                step = step_of(event.step)
                t = wall_time(event.wall_time)
                for value in event.summary.value:
                    x = _scalar(value)
                    if x is False:
                        continue
                    if x is None or step is None or isinstance(x, bool):
                        skipped += 1
                        continue
                    if len(points) >= MAX_ENTRIES:  # one event can hold many values
                        capped = True
                        break
                    tag = prefix + str(value.tag)[:200]
                    counts[tag] += 1
                    points.append((tag, step, t, x))
                if capped:
                    break
        except Exception as exc:  # the loader met what its own checks did not expect
            errors.append(f"{os.path.basename(f)}: unreadable after {read} records ({exc})")
        budget -= read
        if capped:  # not damage: the rest of this file and the next ones are left unread
            notes.append(f"warning: only the first {MAX_ENTRIES} events or values were read")
            break
        if read < whole:
            skipped += whole - read
            errors.append(
                f"{os.path.basename(f)}: stopped at a damaged record after {read} records"
            )
        elif damage is not None:
            skipped += 1  # at least the damaged record; what follows it cannot be found
            errors.append(f"{os.path.basename(f)}: {damage} after {whole} records")
    if not points:
        # a folder's search may have found a file deep below it (`dltop check .` in a
        # project): say which, so the user knows what was read
        which = f"the event file{'s' if len(files) > 1 else ''}"
        if root is path:
            more = f" and {len(files) - 1} more" if len(files) > 1 else ""
            which += f" found below it ({os.path.relpath(files[0], path)}{more})"
        why = f" ({errors[0]})" if errors else ""
        if skipped and not why:  # scalars there were, none usable: say so, not "none"
            why = f" ({skipped} scalar values left out: no step in range, or not a number)"
        raise SourceError(f"{path}: no scalars in {which}{why}")
    chosen = names.choose(counts, MAX_EXTRAS)
    merged = Merger()
    ended: tuple[int, float | None] | None = None
    first_t: float | None = None
    for tag, step, t, x in points:
        role = chosen.get(tag)
        if role is None:
            continue
        if first_t is None and t is not None:
            first_t = t
        if role == names.END:
            ended = (step, t)
            continue
        kind, field = names.target(role)
        merged.put(kind, step, field, x)
        if t is not None:
            merged.put(kind, step, "t", t)
    notes.insert(
        0,
        "another tool's log: wall time per value; no step time, data time, memory or GPU readings",
    )
    notes += [f"warning: {e}" for e in errors[:5]]
    if skipped:
        notes.append(skipped_note(skipped, "events or values"))
    if (repeated := merged.note()) is not None:
        notes.append(repeated)
    log.records.append(
        meta_record(TENSORBOARD, log.path, notes, t=first_t, tags=sorted(chosen)[:64])
    )
    log.records.extend(merged.records())
    if ended is not None:
        rec = exit_record(ended[0])
        if ended[1] is not None:
            rec["t"] = ended[1]
        log.records.append(rec)
    log.skipped = skipped
    log.notes = notes
    return log
