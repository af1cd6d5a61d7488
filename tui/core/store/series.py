"""One metric as columns: ``array('d')`` values over an integer step axis.

Memory is the point: a million steps of ten metrics as Python floats in dicts or lists
cost hundreds of MB; as ``array('d')`` they cost 8 bytes per value. Step-record metrics
present on every step share the store's single step axis (``Store.step_x``) instead of
each holding 8 more bytes per point; the first time a metric is missing from a step
record it takes a private copy of its x values ("own" mode) and from then on records
only the steps where it is present. So "missing" is simply "no point here", while a NaN
or an infinity is a point like any other, stored in ``ys`` and listed in ``nonfinite``.

Steps are kept in order, always: when a run is resumed from a checkpoint into the same log,
its steps go backwards, and the later records replace the earlier ones from that step on
(:meth:`Series.truncate`, driven by ``Store``). So every read is a bisect, and decimation
always takes the block-summary path: never an O(n) scan per redraw.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

from .decimate import (
    BLOCK,
    Decimated,
    NonFinite,
    bucket_edges,
    decimate_edges,
    step_edges,
    summarize,
)

CACHED_DECIMATIONS = 8  # per series: the panels and windows one redraw asks for


class Series:
    """A named metric's points, sorted by step. Read it under ``RunModel.lock``."""

    __slots__ = (
        "name",
        "kind",
        "ys",
        "nonfinite",
        "version",
        "_xs",
        "_x_off",
        "_blo",
        "_bhi",
        "_x_of",
        "_own",
        "_cache",
        "cuts",
    )

    def __init__(
        self, name: str, kind: str, xs: array | None = None, x_off: int = 0, version: int = 0
    ) -> None:
        self.name = name
        self.kind = kind  # "step", "eval", "sys" or "derived"
        self.ys = array("d")
        self.nonfinite = NonFinite()
        self.version = version  # the store version of the last change
        self._xs = xs if xs is not None else array("q")  # shared step axis or our own
        self._x_off = x_off  # point i has step self._xs[self._x_off + i]
        self._blo = array("d")
        self._bhi = array("d")
        # the last decimations asked for, valid while ``version`` is theirs: a redraw that
        # finds this series unchanged (an overlaid run that is done, a panel drawn twice)
        # costs a dict lookup instead of a pass over the buckets
        self._cache: tuple[int, dict[tuple[Any, ...], Decimated]] = (-1, {})
        self._x_of: Series | None = None  # a derived series takes its steps from another
        self._own = xs is None  # False: ``_xs`` is the store's shared step axis
        self.cuts = 0  # times points were taken away (resumes): derived copies start over

    # -- reading -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ys)

    def _x(self) -> tuple[array, int]:
        src = self._x_of
        if src is not None:
            return src._xs, src._x_off
        return self._xs, self._x_off

    @property
    def follows(self) -> Series | None:
        """The series whose steps a derived series takes (``None``: its own or the axis)."""
        return self._x_of

    @property
    def shared(self) -> bool:
        """True while the series uses the store's step axis (present at every step)."""
        return not (self._x_of or self)._own

    def x(self, i: int) -> int:
        xs, off = self._x()
        if i < 0:
            i += len(self.ys)
        return xs[off + i]

    def last(self) -> tuple[int, float] | None:
        """The latest point, ``None`` when empty."""
        if not self.ys:
            return None
        return self.x(-1), self.ys[-1]

    def x_range(self) -> tuple[int, int] | None:
        if not self.ys:
            return None
        return self.x(0), self.x(-1)

    def xs(self, i: int = 0, j: int | None = None) -> array:
        """A copy of the steps of points ``i..j``."""
        xs, off = self._x()
        j = len(self.ys) if j is None else j
        return xs[off + i : off + j]

    def points(
        self, start: int | None = None, end: int | None = None
    ) -> Iterator[tuple[int, float]]:
        """The (step, value) points with ``start <= step <= end``, in order."""
        i = 0 if start is None else self.index_of(start)
        j = len(self.ys) if end is None else self.index_of(end, after=True)
        yield from zip(self.xs(i, j), self.ys[i:j], strict=True)

    def index_of(self, step: int, after: bool = False) -> int:
        """The first point whose step is ``>= step`` (``> step`` with ``after``): a bisect."""
        xs, off = self._x()
        find = bisect_right if after else bisect_left
        return find(xs, step, off, off + len(self.ys)) - off

    def at_step(self, step: int) -> tuple[int, float] | None:
        """The point at ``step`` or the last one before it (for a step cursor readout)."""
        i = self.index_of(step, after=True) - 1
        return None if i < 0 else (self.x(i), self.ys[i])

    def first_nonfinite(self) -> tuple[int, float] | None:
        row = self.nonfinite.first()
        return None if row is None else (self.x(row), self.ys[row])

    def decimate(self, start: int, end: int, width: int) -> Decimated:
        """Per bucket finite min/max, counts and NaN/Inf marks; see :mod:`decimate`."""
        if width < 1:
            raise ValueError("width must be >= 1")
        if end < start:
            start, end = end, start
        return self._decimated((start, end, width), start, end, width=width)

    def decimate_between(self, steps: Sequence[int]) -> Decimated:
        """Buckets between explicit step boundaries (``steps[c] <= s < steps[c + 1]``,
        at least two boundaries): the columns of a wall-time axis; see :mod:`decimate`."""
        if len(steps) < 2:
            raise ValueError("at least two boundaries")
        key = (tuple(steps),)  # never equal to a (start, end, width) key
        return self._decimated(key, steps[0], max(steps[0], steps[-1] - 1), steps=steps)

    def _decimated(
        self,
        key: tuple[Any, ...],
        start: int,
        end: int,
        width: int = 0,
        steps: Sequence[int] | None = None,
    ) -> Decimated:
        """``width`` buckets over ``start..end``, or the buckets between ``steps``; kept for
        the next ask until the series changes."""
        version, done = self._cache
        if version != self.version:
            done = {}
            self._cache = (self.version, done)
        found = done.get(key)
        if found is not None:
            return found
        xs, off = self._x()
        hi = off + len(self.ys)
        if steps is None:
            edges = bucket_edges(xs, off, hi, start, end, width)
        else:
            edges = step_edges(xs, off, hi, steps)
        d = decimate_edges(
            self.name, self.ys, self._blo, self._bhi, self.nonfinite,
            [e - off for e in edges], start, end, self.version,
        )  # fmt: skip
        if len(done) >= CACHED_DECIMATIONS:
            done.clear()
        done[key] = d
        return d

    @property
    def nbytes(self) -> int:
        """Bytes held by this series' arrays (the shared step axis not counted)."""
        own = len(self._xs) if self._own and self._x_of is None else 0
        return 8 * (len(self.ys) + own + len(self._blo) + len(self._bhi) + len(self.nonfinite))

    # -- writing (the store calls these under the model lock) ------------------------------
    def make_own(self) -> None:
        """Leave the shared step axis: from now on only the steps where we have a value."""
        if not self._own:
            self._xs = self._xs[self._x_off : self._x_off + len(self.ys)]
            self._x_off = 0
            self._own = True

    def follow_x(self, source: Series) -> None:
        """Take the steps of ``source`` (same length, point for point): derived series."""
        self._x_of = source

    def extend(self, values: array, steps: array | None, version: int) -> None:
        """Append values; ``steps`` only in own mode (shared mode: the axis already grew)."""
        base = len(self.ys)
        if steps is not None:
            self._xs.extend(steps)
        self.ys.extend(values)
        self.nonfinite.scan(values, base)
        self.version = version

    def cut_from(self, step: int, version: int, axis_cut: int = 0) -> bool:
        """Forget the points at steps >= ``step`` (a resumed run replaces them); True when
        some went. ``axis_cut``: where the store cuts the shared step axis (shared mode)."""
        if self._own:
            n = self.index_of(step)
        else:
            n = axis_cut - self._x_off
            if n <= 0:  # nothing of ours before the cut: start again at the cut
                self._x_off = axis_cut
                n = 0
        gone = n < len(self.ys)
        self.truncate(n, version)
        return gone

    def truncate(self, n: int, version: int) -> None:
        """Keep the first ``n`` points (a resumed run replaces the rest). O(points removed):
        the arrays lose their tails, the block summaries their last (now partial) block.
        On the shared axis only ``ys`` shrinks; the store cuts the axis itself."""
        if n >= len(self.ys):
            return
        n = max(0, n)
        self.cuts += 1
        del self.ys[n:]
        if self._own and self._x_of is None:
            del self._xs[self._x_off + n :]
        k = n // BLOCK
        del self._blo[k:]
        del self._bhi[k:]
        self.nonfinite.truncate(n)
        self.version = version

    def summarize(self) -> None:
        if len(self.ys) - len(self._blo) * BLOCK >= BLOCK:
            summarize(self.ys, self._blo, self._bhi, self.nonfinite)
