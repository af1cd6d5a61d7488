"""The scalars of TensorBoard event files, read in order: (tag, step, wall time, value).

Why its own module: this loop runs once per event (a 1 M-step run of six scalars is
6 M events), so it is written for that: the records come in lists
(``tfrecord.record_lists``), the usual event is read by ``tbwire`` or, once an event of
the same bytes after its step was read, by one dict lookup; anything else by
TensorBoard's own protobuf ``Event``. ``tboard.py`` turns the points into records.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from .....probe.schema import MAX_STEP
from . import names, tfrecord
from .common import WALL_TIME_MAX, SourceError, open_capped, step_of, wall_time
from .tbwire import DOUBLE, FLOAT, scalar_event

# an event file in a folder named like this holds validation values (Keras: logs/validation)
EVAL_DIRS = frozenset(("validation", "val", "valid", "eval", "evaluation"))
SCALAR_PLUGINS = ("", "scalars")
DT_FLOAT, DT_DOUBLE, DT_HALF = 1, 2, 19  # TensorFlow dtype enum values
_TENSOR_FORMAT = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_HALF: "<e"}


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


class Read:
    """What reading the files met: values left out, damage, the budget's end."""

    def __init__(self) -> None:
        self.skipped = 0
        self.errors: list[str] = []
        self.capped = False
        self.counts: Counter[str] = Counter()  # values per tag, in the preview
        self.late = 0  # values of tags first seen after the preview: left out
        self.first_t: float | None = None
        self.values = 0


Point = tuple[str, int, "float | None", float]
TAILS_KEPT = 4096  # distinct one-value event tails remembered per file (see points_of)


def points_of(
    event_cls: Any, files: list[str], root: str, read: Read, preview: int, limit: int
) -> Iterator[list[Point]]:
    """(tag, step, wall time, value) of every scalar of ``files``, in order, in batches.

    The first ``preview`` values are counted per tag (``read.counts``); after them a
    tag not counted is left out (``read.late``), unless it ends the run. One loop per
    event, no call for the usual one: a 1 M-step run of six scalars is 6 M events."""
    budget = limit  # records, all files together (``limit`` is also the values' bound)
    from_bytes = event_cls.FromString
    counts, ends = read.counts, _ends
    # read.values and read.first_t, in locals while a list is read (they are set
    # before every yield: load() asks for them between batches)
    seen, first_t = read.values, read.first_t
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
        # A one-value event with a wall time and a step of 1-3 bytes is, after the step,
        # bytes fixed by its tag and then the float: ``data[i:-4]``. Once scalar_event has
        # read such an event, a later one with the same bytes there is read the same way
        # (scalar_event looks at nothing else), so its tag is found by a dict lookup and
        # only the wall time and the value are unpacked. Tags are stored with the prefix.
        tails: dict[bytes, str] = {}
        values: Sequence[tuple[str, float | bool | None]]  # False: not a scalar
        step: int | None
        out: list[Point] = []
        try:
            for datas in tfrecord.record_lists(fd, walk, budget):
                for data in datas:
                    n = len(data)
                    i = 0
                    if n > 21 and data[0] == 0x09 and data[9] == 0x10:
                        b = data[10]
                        if b < 0x80:
                            k, i = b, 11
                        elif data[11] < 0x80:
                            k, i = (b & 0x7F) | data[11] << 7, 12
                        elif data[12] < 0x80:
                            k, i = (b & 0x7F) | (data[11] & 0x7F) << 7 | data[12] << 14, 13
                        if i and (tag := tails.get(data[i : n - 4])) is not None:
                            wall = DOUBLE(data, 1)[0]
                            x = FLOAT(data, n - 4)[0]
                            if seen >= limit:
                                read.capped, read.values, read.first_t = True, seen, first_t
                                yield out
                                return
                            seen += 1
                            if seen <= preview:
                                counts[tag] += 1
                            elif tag not in counts and not ends(tag):
                                read.late += 1  # no role chosen for it (and not kept: memory)
                                continue
                            t = wall if 0 < wall < WALL_TIME_MAX else None  # (NaN, Inf: False)
                            if first_t is None and t is not None:
                                first_t = t
                            out.append((tag, k, t, x))  # (k: the step, under 2**21)
                            continue
                    common = scalar_event(data)  # the usual event, read without protobuf
                    if common is not None:
                        # a float per tag, a step of 0 .. 2**63-1 (varint), a double wall time:
                        # as_step() and wall_time() of those, inline
                        wall, step, values = common
                        if i and len(values) == 1 and len(tails) < TAILS_KEPT:
                            tails[data[i : n - 4]] = prefix + values[0][0]
                        if step >= MAX_STEP:
                            step = None
                        t = wall if 0 < wall < WALL_TIME_MAX else None
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
                        if seen >= limit:  # one event can hold many values
                            read.capped, read.values, read.first_t = True, seen, first_t
                            yield out
                            return
                        seen += 1
                        tag = prefix + raw_tag
                        if seen <= preview:
                            counts[tag] += 1
                        elif tag not in counts and not ends(tag):
                            read.late += 1
                            continue
                        if first_t is None and t is not None:
                            first_t = t
                        out.append((tag, step, t, x))
                read.values, read.first_t = seen, first_t
                if out:  # one list's points (4 096 events at most)
                    yield out
                    out = []
        except OSError as exc:
            read.errors.append(f"{os.path.basename(f)}: unreadable ({exc.strerror or exc})")
        finally:
            os.close(fd)
        read.values, read.first_t = seen, first_t
        if out:
            yield out
        budget -= walk.records
        if walk.records >= limit or budget <= 0:
            read.capped = True  # not damage: the rest is left unread
            return
        if walk.damage is not None:
            read.skipped += 1  # at least the damaged record; what follows it cannot be found
            read.errors.append(
                f"{os.path.basename(f)}: stopped at {walk.damage} after {walk.records} records"
            )
