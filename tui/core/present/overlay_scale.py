"""Which overlaid runs decide a panel's y range, and which are drawn off-scale.

Why: an overlay is read by comparing lines, and one run that blew up (a loss at 1e30
before its NaN) put every run on a log axis spanning 30 decades, where the healthy runs
are flat lines on the floor: the comparison the overlay is for was gone. So the range
is the one of the runs that agree, and a run far outside it is drawn clipped at the
plot's edge, an arrow in its colour where it leaves (``chartdata.off_scale_marks``), with
its extreme in the legend ("C off-scale (max 1.0e30)").

The rule (docs/viewer.md, "Comparing runs"): take each run's lowest and highest value in
the window (its main line, in the axis's space: log10 on a log axis); the reference is
the median run by its highest value (with an even count the lower of the two middle
ones: of two runs, the smaller sets the scale). Its scale ``S`` is its own spread, but at
least its magnitude on a linear axis (a flat loss at 2.3 has scale 2.3) and at least one
decade on a log axis. A run is off-scale when it goes more than ``FACTOR`` x ``S`` above
the reference's top or below its bottom (``DECADES`` x ``S`` on a log axis). Every other
run is in range, so the reference keeps at least a tenth of the plot's height. Fewer
than two runs with values, or a reference with no scale at all (a flat zero): nobody is
off-scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..text.fmt import compact
from .chartdata import Trace, transform

FACTOR = 10.0  # linear axis: this many reference scales past the reference run's range
DECADES = 3.0  # log axis: this many reference scales (each at least a decade)


@dataclass(frozen=True)
class OffScale:
    """A run drawn clipped: its extremes past the range (``None``: not past that side)."""

    high: float | None = None
    low: float | None = None

    def note(self, unit: str) -> str:
        """``off-scale (max 1.0e30)``, its values written as the legend writes them."""
        said = [f"max {compact(self.high, unit)}"] if self.high is not None else []
        if self.low is not None:
            said.append(f"min {compact(self.low, unit)}")
        return f"off-scale ({', '.join(said)})" if said else "off-scale"


def _extent(trace: Trace, log: bool) -> tuple[float, float, float, float] | None:
    """(low, high) in the axis's space and in values, of a trace's drawable points."""
    lo = hi = None
    vlo = vhi = 0.0
    for a, b in zip(trace.lo, trace.hi, strict=False):
        if a is None or b is None:
            continue
        for v in (a, b):
            t = transform(v, log)
            if t is None:
                continue
            if lo is None or t < lo:
                lo, vlo = t, v
            if hi is None or t > hi:
                hi, vhi = t, v
    if lo is None or hi is None:
        return None
    return lo, hi, vlo, vhi


def judge(runs: Sequence[tuple[str, Trace]], log: bool) -> dict[str, OffScale]:
    """The runs (by name) to draw off-scale, from each run's main line."""
    extents = [(name, e) for name, t in runs if (e := _extent(t, log)) is not None]
    if len(extents) < 2:
        return {}
    ranked = sorted(extents, key=lambda ne: ne[1][1])
    ref_lo, ref_hi = ranked[(len(ranked) - 1) // 2][1][:2]
    spread = ref_hi - ref_lo
    if log:
        scale, factor = max(spread, 1.0), DECADES
    else:
        scale, factor = max(spread, abs(ref_hi), abs(ref_lo)), FACTOR
    if not scale > 0 or scale != scale:
        return {}
    top, bottom = ref_hi + factor * scale, ref_lo - factor * scale
    out: dict[str, OffScale] = {}
    for name, (lo, hi, vlo, vhi) in extents:
        high = vhi if hi > top else None
        low = vlo if lo < bottom else None
        if high is not None or low is not None:
            out[name] = OffScale(high, low)
    return out
