"""The columnar store of one run: every numeric series, plus events, meta and layers.

Events are counted by type and kept within bounds (``eventlog.EventLog``: the first and
last ones, those that say how the run went), so that a flood of them cannot grow the
viewer's memory; ``event_log.note()`` says where a bound bit.

Records arrive in batches (one parsed chunk of the log). Step records are transposed
column by column with C-level primitives (``map(dict.get, ...)`` then ``array('d', col)``)
instead of a Python loop over fields, because at a million steps the per-value cost is
what decides whether a replay is ready in two seconds. Which series exist is discovered
from the data: every numeric field of a ``step`` record (user extras included) becomes a
series named by its key; ``eval`` fields become ``eval.<key>``, ``sys`` fields
``sys.<key>`` (nested: ``sys.<key>.<index-or-subkey>.<field>``); a list field such as
``lrs`` becomes ``lrs.0``, ``lrs.1``... A smoothed copy of any series is worked out on demand
for the weight a chart asks for (:meth:`Store.smoothed`, :mod:`smoothing`).

Resumed runs: a training resumed from a checkpoint appends to the same log, so its steps
go backwards. The later records replace the earlier ones from that step on (every series
is cut at its first point with step >= the new one, ``resumes`` records where), which is
what the person expects after a resume: the chart shows the run as it continued. Steps
then stay sorted, so every read and every decimation remains a bisect plus the block
summaries, whatever the log's history. A batch that holds a resume is ingested in
segments, in log order, so records before the resume are cut and records after it kept.

Thread model: the reader thread calls :meth:`Store.ingest` and the UI reads, both under
``RunModel.lock``; nothing here locks by itself.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import Counter
from itertools import compress, islice, repeat
from operator import eq, gt, ne
from typing import Any

from ....probe import schema
from ....probe.schema import Record, Records
from .decimate import Decimated
from .eventlog import EventLog
from .fieldnames import STEP_NOT_SERIES, dense, flatten, num, part_of, sub_columns
from .series import Series
from .serieslimit import RESERVED, SeriesBudget
from .smoothing import SmoothedCopies

__all__ = ["Store", "Series", "Decimated"]


class Store:
    """Every series of one run; ``version`` bumps once per non-empty :meth:`ingest`."""

    def __init__(self, version: int = 0) -> None:
        self.version = version
        self.step_x = array("q")  # the step of every step record kept, sorted
        self.resumes: list[int] = []  # steps at which the log went backwards (resumed runs)
        # ``dropped`` events: records a live socket skipped for this viewer only, and
        # records the probe could not write (scope "log": missing from the log itself)
        self.dropped = 0
        self.lost = 0
        self.meta: Record | None = None  # the first meta record
        self.event_log = EventLog()  # events counted by type, the first and last kept
        self.layers: Record | None = None  # the latest layers record
        self.last_t: float | None = None  # ``t`` of the latest record that had one
        self.kinds: Counter[str] = Counter()  # records per kind, unknown kinds included
        self._series: dict[str, Series] = {}
        self._smoothed = SmoothedCopies()  # one weight per series: the charts' last
        self._changed: set[Series] = set()
        self._extended: set[Series] = set()
        self._first_step_hint: int | None = None
        self.budget = SeriesBudget()  # new series past its limit are refused and counted
        self._parents: set[str] = set()  # fields whose values became sub-series (``lrs``)

    # -- reading -------------------------------------------------------------------------
    @property
    def events(self) -> Records:
        """The event records kept (``EventLog``: bounded), in log order."""
        return self.event_log.events()

    def series(self, name: str) -> Series | None:
        return self._series.get(name)

    def names(self, prefix: str = "", kind: str | None = None) -> list[str]:
        """Series names (in discovery order) starting with ``prefix``, of one kind if given."""
        return [
            n
            for n, s in self._series.items()
            if n.startswith(prefix) and (kind is None or s.kind == kind)
        ]

    def changed(self, since: int) -> list[str]:
        """Names of the series that changed after store version ``since``."""
        return [n for n, s in self._series.items() if s.version > since]

    def latest(self, name: str) -> float | None:
        s = self._series.get(name)
        return None if s is None or not len(s) else s.ys[-1]

    def smoothed(self, name: str, weight: float) -> Series | None:
        """``name`` smoothed with ``weight`` (:mod:`smoothing`), ``None`` when the series does
        not exist or smoothing is off. Kept for the weight last asked for and extended by
        the points added since; a new weight or a resume (the tail replaced) starts over.
        Call it under the model lock, like every read: it writes only this cache."""
        src = self._series.get(name)
        if src is None or weight <= 0.0:
            return None
        return self._smoothed.of(name, src, weight)

    def decimate(self, name: str, start: int, end: int, width: int) -> Decimated:
        """``name`` in ``width`` min/max buckets over steps ``start..end``; all-empty buckets
        when the series does not exist (yet)."""
        s = self._series.get(name)
        if s is not None:
            return s.decimate(start, end, width)
        nones: list[float | None] = [None] * width
        return Decimated(
            name, start, end, width, nones, nones[:], nones[:], nones[:], [0] * width, [0] * width
        )

    @property
    def steps(self) -> int:
        """Number of step records."""
        return len(self.step_x)

    @property
    def first_step(self) -> int | None:
        return self.step_x[0] if self.step_x else None

    @property
    def last_step(self) -> int | None:
        return self.step_x[-1] if self.step_x else None

    def step_range(self) -> tuple[int, int] | None:
        """(min, max) step over every series: the x range a full-run chart spans."""
        ranges = [r for s in self._series.values() if (r := s.x_range()) is not None]
        if not ranges:
            return None
        return min(r[0] for r in ranges), max(r[1] for r in ranges)

    @property
    def nbytes(self) -> int:
        """Bytes held in arrays (values, steps, summaries, non-finite rows)."""
        return 8 * len(self.step_x) + sum(s.nbytes for s in self._series.values())

    # -- writing -------------------------------------------------------------------------
    def touch_all(self, version: int) -> None:
        """Mark everything changed at ``version`` (a store swapped in wholesale)."""
        self.version = version
        for s in self._series.values():
            s.version = version

    def ingest(self, records: Records) -> int:
        """Add a batch of decoded records (any kinds, in log order); returns the new version."""
        if not records:
            return self.version
        self.version += 1
        v = self.version
        self._changed = set()
        kinds = list(map(dict.get, records, repeat("kind")))
        nsteps = kinds.count(schema.STEP)
        self._first_step_hint = self.first_step
        if self._first_step_hint is None and nsteps:
            self._first_step_hint = schema.as_step(
                next((r.get("step") for r in records if r.get("kind") == schema.STEP), None)
            )
        step_recs = (
            records
            if nsteps == len(records)
            else list(compress(records, map(eq, kinds, repeat(schema.STEP))))
        )
        steps = self._step_column(step_recs) if nsteps else array("q")
        back = self._backward_at(steps)
        if not back:
            self._ingest_part(records, kinds, step_recs, steps, v)
        else:  # a resumed run inside this batch: segment by segment, in log order
            rows = list(compress(range(len(records)), map(eq, kinds, repeat(schema.STEP))))
            sb = [0, *back, nsteps]  # segment bounds in step records...
            rb = [0, *(rows[i] for i in back), len(records)]  # ...and in records
            for k in range(len(sb) - 1):
                if k:
                    self._resume(steps[sb[k]], v)
                a, b = rb[k], rb[k + 1]
                i, j = sb[k], sb[k + 1]
                self._ingest_part(records[a:b], kinds[a:b], step_recs[i:j], steps[i:j], v)
        self.kinds[schema.STEP] += nsteps
        for s in self._changed:
            s.summarize()
        return v

    def _step_column(self, batch: Records) -> array:
        """The batch's steps as int64; a step that is absent or unusable (``schema.as_step``:
        not a whole number, beyond ±2**62) takes the previous step + 1."""
        raw: list[Any] = list(map(dict.get, batch, repeat("step")))
        try:
            steps = array("q", raw)
            if bool in set(map(type, raw)) or not (
                min(steps) > -schema.MAX_STEP and max(steps) < schema.MAX_STEP
            ):
                raise TypeError
        except (TypeError, OverflowError):
            steps = array("q")
            prev = self.last_step if self.last_step is not None else -1
            for s in raw:
                step = schema.as_step(s)
                prev = step if step is not None else min(prev + 1, schema.MAX_STEP - 1)
                steps.append(prev)
        return steps

    def _backward_at(self, steps: array) -> list[int]:
        """Indices in ``steps`` where the log goes backwards (a resume starts there)."""
        if not steps:
            return []
        first = self.last_step is not None and steps[0] < self.last_step
        if not first and not any(map(gt, steps, islice(steps, 1, None))):
            return []  # the common case, checked at C speed
        out = [0] if first else []
        out.extend(i for i in range(1, len(steps)) if steps[i] < steps[i - 1])
        return out

    def _resume(self, step: int, v: int) -> None:
        """The log went back to ``step``: every series forgets its points at steps >= it."""
        self.resumes.append(step)
        cut = bisect_left(self.step_x, step)
        for s in self._series.values():
            if s.follows is None and s.cut_from(step, v, cut):
                self._changed.add(s)
        del self.step_x[cut:]
        for s in self._series.values():
            src = s.follows
            if src is not None and len(s) > len(src):
                s.truncate(len(src), v)

    def _ingest_part(
        self,
        records: Records,
        kinds: list[Any],
        step_recs: Records,
        steps: array,
        v: int,
    ) -> None:
        """Records with no resume inside: non-step records first (pinned to the step before
        them), then the step records as columns."""
        if len(step_recs) == len(records):
            if records:
                self._ingest_steps(step_recs, steps, v)
            return
        # non-step records are rare (sys ~1 Hz, events): pick them out at C speed
        others = list(compress(range(len(records)), map(ne, kinds, repeat(schema.STEP))))
        last = self.last_step
        scanned = 0
        for i in others:
            for j in range(i - 1, scanned - 1, -1):  # each record scanned at most once
                st = schema.as_step(records[j].get("step"))
                if kinds[j] == schema.STEP and st is not None:
                    last = st
                    break
            scanned = i + 1
            self._ingest_other(records[i], kinds[i], last, v)
        if step_recs:
            self._ingest_steps(step_recs, steps, v)

    def _ingest_steps(self, batch: Records, steps: array, v: int) -> None:
        self._extended = set()
        base = len(self.step_x)
        self.step_x.extend(steps)
        t = schema.as_float(batch[-1].get("t"))
        if t is not None and math.isfinite(t):
            self.last_t = t
        keys = set().union(*batch) - STEP_NOT_SERIES
        full = not self.budget.admits(len(self._series))
        for k in keys:
            if not isinstance(k, str):
                continue
            if full and k not in self._series and k not in self._parents and k not in RESERVED:
                self.budget.refuse(k)  # before reading its column: refused names cost nothing
                continue
            col = list(map(dict.get, batch, repeat(k)))
            vals = dense(col)
            if vals is not None:
                self._extend_dense(k, vals, steps, base, v)
            else:
                self._slow_column(k, col, steps, base, v)
        # a shared series absent from this whole batch has a hole: it leaves the shared axis
        for s in self._series.values():
            if s.kind == schema.STEP and s.shared and s not in self._extended and s.follows is None:
                s.make_own()

    def _new(self, name: str) -> bool:
        """Whether a series ``name`` may be created (else it is refused and counted)."""
        if self.budget.admits(len(self._series), name):
            return True
        self.budget.refuse(name)
        return False

    def _extend_dense(self, name: str, vals: array, steps: array, base: int, v: int) -> None:
        s = self._series.get(name)
        if s is None:
            if not self._new(name):
                return
            s = Series(name, schema.STEP, xs=self.step_x, x_off=base, version=v)
            self._series[name] = s
        if s.shared and s._x_off + len(s.ys) != base:
            s.make_own()  # defensive: never misalign values and steps
        s.extend(vals, None if s.shared else steps, v)
        self._changed.add(s)
        self._extended.add(s)

    def _slow_column(self, key: str, col: list[Any], steps: array, base: int, v: int) -> None:
        """A column with gaps, strings, bools, lists (``lrs``) or dicts: expand, then keep
        only the numeric points."""
        for name, at, listed in sub_columns(key, col):
            if at is not None:
                if name not in self._series and not self._new(name):
                    if listed:
                        break  # the rest of the list is refused with it (counted as one field)
                    continue
                # read again past the limit only as the parent of a series it has
                self._parents.add(key)
            self._sparse(name, [num(x) for x in part_of(col, at)], steps, base, v)

    def _sparse(self, name: str, vals: list[float | None], steps: array, base: int, v: int) -> None:
        present = [i for i, x in enumerate(vals) if x is not None]
        if not present:
            return
        if len(present) == len(vals):
            self._extend_dense(name, array("d", vals), steps, base, v)
            return
        s = self._series.get(name)
        if s is None:
            if not self._new(name):
                return
            s = Series(name, schema.STEP, version=v)
            self._series[name] = s
        s.make_own()
        s.extend(
            array("d", [vals[i] for i in present]),
            array("q", [steps[i] for i in present]),
            v,
        )
        self._changed.add(s)

    def _ingest_other(self, rec: Record, kind: Any, last_step: int | None, v: int) -> None:
        self.kinds[kind if isinstance(kind, str) else "?"] += 1
        t = schema.as_float(rec.get("t"))
        if t is not None and math.isfinite(t):
            self.last_t = t
        if kind == schema.EVAL or kind == schema.SYS:
            x = schema.as_step(rec.get("step"))
            if x is None:
                x = last_step
            if x is None:  # before the first step record: pin to the first step we know
                x = self._first_step_hint if self._first_step_hint is not None else 0
            for name, val in flatten(kind, rec):
                self._append_point(name, kind, x, val, v)
        elif kind == schema.EVENT:
            self.event_log.add(rec)
            dropped = rec.get("records")
            if rec.get("type") == "dropped" and type(dropped) is int:
                n = max(0, min(dropped, schema.MAX_STEP))
                if rec.get("scope") == "log":
                    self.lost += n
                else:
                    self.dropped += n
        elif kind == schema.META:
            if self.meta is None:
                self.meta = rec
        elif kind == schema.LAYERS:
            self.layers = rec

    def _append_point(self, name: str, kind: str, x: int, val: float, v: int) -> None:
        s = self._series.get(name)
        if s is None:
            if not self._new(name):
                return
            s = Series(name, kind, version=v)
            self._series[name] = s
        elif len(s) and x < s.x(-1):  # back in time: it replaces this series' later points
            s.cut_from(x, v)
        s.extend(array("d", (val,)), array("q", (x,)), v)
        self._changed.add(s)
