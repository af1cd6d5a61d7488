"""Min/max decimation of one series to a chart's width, and the block summaries behind it.

A chart column is one terminal cell wide, so a 1 M-step series must shrink to ~120
buckets before drawing. Averaging or picking every n-th point would hide a one-step loss
spike or a NaN; keeping each bucket's *finite* minimum and maximum plus a mark for any
NaN/+Inf/-Inf inside it hides nothing, and the mark means a non-finite point is drawn as
a symbol, never as a gap.

Speed: pure Python ``min()`` over a million floats costs ~25 ms, too slow to do per
chart 2-4 times a second. Each series therefore keeps a one-level summary: the finite
min/max of every complete block of ``BLOCK`` points, built on the reader thread as data
arrive (:func:`summarize`). A bucket then reads its whole blocks from the summary and only
its ragged edges (< 2 blocks) from the raw values: O(width * BLOCK + n / BLOCK) per call.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK = 128  # points per summary block: measured 28 ms / 1 M points to build, ~1 ms to decimate
NAN, POSINF, NEGINF = 1, 2, 4  # bits of Decimated.marks
_INF = float("inf")


@dataclass(frozen=True, slots=True)
class Decimated:
    """One series in ``width`` buckets over the steps ``start..end`` (both inclusive).

    Bucket ``c`` holds the steps ``s`` with ``(s - start) * width // (end - start + 1) == c``
    (the mapping of ``chartdata.step_to_column``). ``lo``/``hi`` are the finite min/max
    (``None`` when the bucket has no finite point), ``count`` the points in it (0: the
    series is *missing* there), ``marks`` a bitmask of ``NAN | POSINF | NEGINF`` for the
    non-finite points in it, ``first``/``last`` the bucket's first and last raw values (for
    joining lines; possibly non-finite). ``version`` is the series version it was cut from.
    """

    name: str
    start: int
    end: int
    width: int
    lo: list[float | None]
    hi: list[float | None]
    first: list[float | None]
    last: list[float | None]
    count: list[int]
    marks: list[int]
    version: int = 0

    @property
    def bad(self) -> list[bool]:
        """Per bucket: did a NaN or an infinity fall in it (draw a mark there)."""
        return [m != 0 for m in self.marks]

    @property
    def points(self) -> int:
        return sum(self.count)


class NonFinite:
    """Rows (indices into a series) holding NaN, +Inf and -Inf, each list sorted.

    Kept apart from the values so that "missing" (no point) and "NaN" (a point whose value
    is NaN) never blur, and so a bucket can ask "any NaN in rows a..b?" with two bisects.
    """

    __slots__ = ("nan", "pinf", "ninf", "last_row")

    def __init__(self) -> None:
        self.nan = array("q")
        self.pinf = array("q")
        self.ninf = array("q")
        self.last_row = -1

    def __len__(self) -> int:
        return len(self.nan) + len(self.pinf) + len(self.ninf)

    def add(self, row: int, value: float) -> None:
        if value != value:
            self.nan.append(row)
        elif value > 0:
            self.pinf.append(row)
        else:
            self.ninf.append(row)
        self.last_row = row

    def scan(self, values: array, base: int) -> None:
        """Record the non-finite entries of ``values`` (rows ``base...``); one C-level sum
        proves the common all-finite case."""
        s = sum(values, 0.0)
        if s - s == 0:
            return
        for i, v in enumerate(values):
            if v - v != 0:
                self.add(base + i, v)

    def marks(self, a: int, b: int) -> int:
        """Bitmask of the kinds present in rows ``[a, b)``."""
        if a > self.last_row or a >= b:
            return 0
        m = 0
        for bit, rows in ((NAN, self.nan), (POSINF, self.pinf), (NEGINF, self.ninf)):
            if rows and bisect_left(rows, b) > bisect_left(rows, a):
                m |= bit
        return m

    def truncate(self, n: int) -> None:
        """Forget the rows ``>= n`` (the series lost its tail)."""
        last = -1
        for rows in (self.nan, self.pinf, self.ninf):
            del rows[bisect_left(rows, n) :]
            if rows:
                last = max(last, rows[-1])
        self.last_row = last

    def first(self) -> int | None:
        """The first non-finite row, ``None`` when all values are finite."""
        heads = [rows[0] for rows in (self.nan, self.pinf, self.ninf) if rows]
        return min(heads) if heads else None


def _finite_minmax(ys: array, a: int, b: int, dirty: bool) -> tuple[float, float]:
    """(min, max) of the finite values in ``ys[a:b]``; (+inf, -inf) when there are none."""
    if a >= b:
        return _INF, -_INF
    seg = ys[a:b]
    if dirty:
        fin = [v for v in seg if v - v == 0]
        if not fin:
            return _INF, -_INF
        return min(fin), max(fin)
    return min(seg), max(seg)


def summarize(ys: array, blo: array, bhi: array, nf: NonFinite) -> None:
    """Extend the block summaries ``blo``/``bhi`` to cover every complete block of ``ys``."""
    k = len(blo)
    full = len(ys) // BLOCK
    while k < full:
        a = k * BLOCK
        b = a + BLOCK
        lo, hi = _finite_minmax(ys, a, b, a <= nf.last_row and nf.marks(a, b) != 0)
        blo.append(lo)
        bhi.append(hi)
        k += 1


def bucket_edges(
    xs: array, lo_row: int, hi_row: int, start: int, end: int, width: int
) -> list[int]:
    """Row boundaries of the ``width`` buckets: bucket c is rows ``[e[c], e[c+1])``.

    ``xs[lo_row:hi_row]`` must be sorted. Integer arithmetic keeps the mapping identical to
    ``(s - start) * width // span``: bucket c starts at step ``start + ceil(c * span / width)``.
    """
    span = end - start + 1
    edges = [bisect_left(xs, start, lo_row, hi_row)]
    for c in range(1, width):
        first_step = start + (c * span + width - 1) // width
        edges.append(bisect_left(xs, first_step, edges[-1], hi_row))
    edges.append(bisect_right(xs, end, edges[-1], hi_row))
    return edges


def step_edges(xs: array, lo_row: int, hi_row: int, steps: Sequence[int]) -> list[int]:
    """Row boundaries of buckets between explicit step boundaries: bucket ``c`` holds the
    steps ``steps[c] <= s < steps[c + 1]`` (non-decreasing; an empty bucket is two equal
    boundaries). Columns uniform in wall time are such buckets: a stall is a run of empty
    ones, a fast stretch packs many steps into one. ``xs[lo_row:hi_row]`` must be sorted."""
    edges: list[int] = []
    row = lo_row
    for s in steps:
        row = bisect_left(xs, s, row, hi_row)
        edges.append(row)
    return edges


def decimate_edges(
    name: str,
    ys: array,
    blo: array,
    bhi: array,
    nf: NonFinite,
    edges: list[int],
    start: int,
    end: int,
    version: int = 0,
) -> Decimated:
    """The buckets of rows ``[edges[c], edges[c + 1])`` of ``ys`` (:func:`bucket_edges`,
    or :func:`step_edges` for explicit step boundaries: the same min/max and NaN marks per
    bucket, at the same cost), reported over the steps ``start..end``."""
    width = len(edges) - 1
    pairs = list(zip(edges, edges[1:], strict=False))
    counts = [b - a for a, b in pairs]
    if nf.marks(edges[0], edges[-1]) == 0:
        # no NaN or infinity in the window (the usual case): per bucket only its minimum
        # and maximum are work. A job of 64 ranks decimates ~700 series a redraw, so the
        # rest is done a list at a time rather than a bucket at a time.
        los, his = _clean_minmax(ys, pairs, blo, bhi)
        marks = [0] * len(pairs)
    else:
        los, his, marks = _dirty_minmax(ys, pairs, blo, bhi, nf)
    firsts: list[float | None] = [ys[a] if a < b else None for a, b in pairs]
    lasts: list[float | None] = [ys[b - 1] if a < b else None for a, b in pairs]
    return Decimated(name, start, end, width, los, his, firsts, lasts, counts, marks, version)


def _bucket_minmax(
    ys: array, a: int, b: int, blo: array, bhi: array, nblocks: int, dirty: bool
) -> tuple[float, float]:
    """The finite (min, max) of rows ``[a, b)``: whole summarised blocks read from the
    summaries, the ragged edges (or a bucket without a whole block) from the values;
    (+inf, -inf) when none is finite."""
    ka = -(-a // BLOCK)  # first whole block
    kb = min(b // BLOCK, nblocks)  # one past the last whole, summarised block
    if kb - ka < 1:
        return _finite_minmax(ys, a, b, dirty)
    lo1, hi1 = _finite_minmax(ys, a, ka * BLOCK, dirty)
    lo2, hi2 = _finite_minmax(ys, kb * BLOCK, b, dirty)
    return min(lo1, lo2, min(blo[ka:kb])), max(hi1, hi2, max(bhi[ka:kb]))


def _clean_minmax(
    ys: array, pairs: list[tuple[int, int]], blo: array, bhi: array
) -> tuple[list[float | None], list[float | None]]:
    """Each bucket's (min, max) where every value is finite: a bucket of one point is
    that point, a bucket holding whole summarised blocks reads them (and its ragged
    edges), any other the values themselves."""
    los: list[float | None] = []
    his: list[float | None] = []
    nblocks = len(blo)
    for a, b in pairs:
        if b - a == 1:
            v = ys[a]
            los.append(v)
            his.append(v)
        elif a >= b:
            los.append(None)
            his.append(None)
        else:
            lo, hi = _bucket_minmax(ys, a, b, blo, bhi, nblocks, False)
            los.append(lo)
            his.append(hi)
    return los, his


def _dirty_minmax(
    ys: array, pairs: list[tuple[int, int]], blo: array, bhi: array, nf: NonFinite
) -> tuple[list[float | None], list[float | None], list[int]]:
    """Each bucket's finite (min, max) and marks where some values are NaN or infinite."""
    los: list[float | None] = []
    his: list[float | None] = []
    marks: list[int] = []
    nblocks = len(blo)
    for a, b in pairs:
        if a >= b:
            los.append(None)
            his.append(None)
            marks.append(0)
            continue
        m = nf.marks(a, b)
        marks.append(m)
        lo, hi = _bucket_minmax(ys, a, b, blo, bhi, nblocks, m != 0)
        if lo == _INF:
            los.append(None)
            his.append(None)
        else:
            los.append(lo)
            his.append(hi)
    return los, his, marks
