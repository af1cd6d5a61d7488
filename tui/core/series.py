"""One metric as columns: ``array('d')`` values over an integer step axis.

Memory is the point: a million steps of ten metrics as Python floats in dicts or lists
cost hundreds of MB; as ``array('d')`` they cost 8 bytes per value. Step-record metrics
present on every step share the store's single step axis (``Store.step_x``) instead of
each holding 8 more bytes per point; the first time a metric is missing from a step
record it takes a private copy of its x values ("own" mode) and from then on records
only the steps where it is present. So "missing" is simply "no point here", while a NaN
or an infinity is a point like any other, stored in ``ys`` and listed in ``nonfinite``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator

from dltop.tui.core.decimate import (
    BLOCK,
    Decimated,
    NonFinite,
    decimate_rows,
    decimate_unsorted,
    summarize,
)


class Series:
    """A named metric's points, in arrival order. Read it under ``RunModel.lock``."""

    __slots__ = (
        "name",
        "kind",
        "ys",
        "nonfinite",
        "version",
        "sorted",
        "_xs",
        "_x_off",
        "_blo",
        "_bhi",
        "_x_of",
        "_own",
    )

    def __init__(
        self, name: str, kind: str, xs: array | None = None, x_off: int = 0, version: int = 0
    ) -> None:
        self.name = name
        self.kind = kind  # "step", "eval", "sys" or "derived"
        self.ys = array("d")
        self.nonfinite = NonFinite()
        self.version = version  # the store version of the last change
        self.sorted = True  # steps never went backwards (else decimation takes the O(n) path)
        self._xs = xs if xs is not None else array("q")  # shared step axis or our own
        self._x_off = x_off  # point i has step self._xs[self._x_off + i]
        self._blo = array("d")
        self._bhi = array("d")
        self._x_of: Series | None = None  # a derived series takes its steps from another
        self._own = xs is None  # False: ``_xs`` is the store's shared step axis

    # -- reading -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ys)

    def _x(self) -> tuple[array, int]:
        src = self._x_of
        if src is not None:
            return src._xs, src._x_off
        return self._xs, self._x_off

    @property
    def shared(self) -> bool:
        """True while the series uses the store's step axis (present at every step)."""
        return not (self._x_of or self)._own

    def x(self, i: int) -> int:
        xs, off = self._x()
        if i < 0:
            i += len(self.ys)
        return xs[off + i]

    def y(self, i: int) -> float:
        return self.ys[i]

    def last(self) -> tuple[int, float] | None:
        """The latest point, ``None`` when empty."""
        if not self.ys:
            return None
        return self.x(-1), self.ys[-1]

    def x_range(self) -> tuple[int, int] | None:
        if not self.ys:
            return None
        if self.sorted:
            return self.x(0), self.x(-1)
        xs = self.xs()
        return min(xs), max(xs)

    def xs(self, i: int = 0, j: int | None = None) -> array:
        """A copy of the steps of points ``i..j``."""
        xs, off = self._x()
        j = len(self.ys) if j is None else j
        return xs[off + i : off + j]

    def points(
        self, start: int | None = None, end: int | None = None
    ) -> Iterator[tuple[int, float]]:
        """The (step, value) points with ``start <= step <= end``, in order."""
        xs = self.xs()
        for x, v in zip(xs, self.ys, strict=True):
            if (start is None or x >= start) and (end is None or x <= end):
                yield x, v

    def at_step(self, step: int) -> tuple[int, float] | None:
        """The point at ``step`` or the last one before it (for a step cursor readout)."""
        if not self.ys:
            return None
        if not self.sorted:
            best = None
            for x, v in self.points(None, step):
                if best is None or x >= best[0]:
                    best = (x, v)
            return best
        xs, off = self._x()
        i = bisect_right(xs, step, off, off + len(self.ys)) - off - 1
        return None if i < 0 else (xs[off + i], self.ys[i])

    def first_nonfinite(self) -> tuple[int, float] | None:
        row = self.nonfinite.first()
        return None if row is None else (self.x(row), self.ys[row])

    def changed_since(self, version: int) -> bool:
        return self.version > version

    def decimate(self, start: int, end: int, width: int) -> Decimated:
        """Per bucket finite min/max, counts and NaN/Inf marks; see :mod:`decimate`."""
        if width < 1:
            raise ValueError("width must be >= 1")
        if end < start:
            start, end = end, start
        if not self.sorted:
            return decimate_unsorted(
                self.name, list(self.xs()), self.ys, start, end, width, self.version
            )
        xs, off = self._x()
        return decimate_rows(
            self.name, xs, off, self.ys, self._blo, self._bhi, self.nonfinite,
            start, end, width, self.version,
        )  # fmt: skip

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

    def summarize(self) -> None:
        if len(self.ys) - len(self._blo) * BLOCK >= BLOCK:
            summarize(self.ys, self._blo, self._bhi, self.nonfinite)
